//! A nested `cargo` that does not rebuild the suite; shared by the tests
//! of several packages (`harness-tests`, and the kit's through `#[path]`).

/// A `cargo` command (the cargo running these tests, if any) without the
/// variables cargo sets for a test process (`CARGO_PKG_NAME`,
/// `CARGO_MANIFEST_DIR`, `OUT_DIR`, …), so that it sees the environment
/// the suite's own build saw.
///
/// Some build scripts (ring's) ask to be run again when those variables
/// change, so a cargo started with them found ring out of date and built
/// it again, with everything above it (TLS, the HTTP clients, harness),
/// over the suite's build, while the tests waited; the next build outside
/// built it all back.
pub fn cargo() -> std::process::Command {
    let mut command =
        std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let set_by_cargo_test = name == "OUT_DIR"
            || name == "CARGO_PRIMARY_PACKAGE"
            || name == "CARGO_TARGET_TMPDIR"
            || [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_BIN_",
                "CARGO_CRATE_",
            ]
            .iter()
            .any(|prefix| name.starts_with(prefix));
        if set_by_cargo_test {
            command.env_remove(name);
        }
    }
    command
}
