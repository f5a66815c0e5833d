//! A nested `cargo` that does not rebuild the suite, and the examples a
//! test runs; shared by the tests of several packages (`harness-tests`,
//! and the kit's through `#[path]`).

use std::path::{Path, PathBuf};

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

/// The workspace's `Cargo.toml`: every package including this file sits
/// directly in the workspace.
fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the package sits in the workspace")
        .join("Cargo.toml")
}

/// The environment variable naming the features the whole suite is built
/// with: `./scripts/test` sets it to those it passes to cargo, and builds
/// every target first.
pub const SUITE_FEATURES: &str = "HARNESS_TEST_CARGO_FEATURES";

/// The binary of example `name` of `package`, built first if it is not up
/// to date, as `cargo run -p PACKAGE --example NAME` would run it.
///
/// Under `./scripts/test` ([`SUITE_FEATURES`] set) it is the binary the
/// suite's own build made: the build is asked again exactly as the suite
/// asked it (the workspace, those features, every test, binary and
/// example), once per test process, which finds it up to date. A build of
/// one package or one example resolves the dependencies' features
/// differently (cargo unifies them over the targets it builds), so it
/// built the example and its dependencies a second time, over the
/// suite's, while the tests waited (and that cargo is [`cargo`], which
/// sees the environment the suite's build saw). Run alone (`cargo test -p
/// harness-tests`), the example is built as `cargo run` builds it. The
/// binary is found beside this test binary: `target/<profile>/deps/…` →
/// `target/<profile>/examples/NAME`.
pub fn example(package: &str, name: &str) -> PathBuf {
    static SUITE_BUILT: std::sync::Once = std::sync::Once::new();
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is in target/<profile>/deps", exe.display()));
    let release = profile.file_name().is_some_and(|p| p == "release");
    let build = |args: &[&str]| {
        let mut command = cargo();
        command
            .args(["build", "--quiet", "--manifest-path"])
            .arg(manifest())
            .args(args);
        if release {
            command.arg("--release");
        }
        let status = command.status().expect("cargo runs");
        assert!(status.success(), "cargo build {args:?} failed");
    };
    match std::env::var(SUITE_FEATURES) {
        Ok(features) => SUITE_BUILT.call_once(|| {
            build(&[
                "--workspace",
                "--locked",
                "--features",
                &features,
                "--tests",
                "--bins",
                "--examples",
            ]);
        }),
        Err(_) => build(&["-p", package, "--example", name]),
    }
    let path = profile.join("examples").join(name);
    assert!(path.exists(), "{} exists after its build", path.display());
    path
}
