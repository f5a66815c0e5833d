//! The file tools' confinement: every way out of the root a model could
//! take is refused, reads are bounded, writes replace entries.

use harness::llm::ToolSet;
use harness_kit::fs::{FsError, ListDir, ReadFile, Root, Window, WriteFile};
use serde_json::json;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

struct Fixture {
    /// Holds `root/` and, beside it, `outside/secret.txt`.
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    for d in [&root, &root.join("sub"), &outside] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
    }
    write(&root.join("notes.txt"), "inside");
    write(&root.join("sub/deep.txt"), "deep");
    write(&outside.join("secret.txt"), "SECRET-OUTSIDE");
    Fixture {
        _dir: dir,
        root,
        outside,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn root(f: &Fixture) -> Root {
    Root::open(&f.root).unwrap_or_else(|e| panic!("the root opens: {e}"))
}

fn read(root: &Root, path: &str) -> Result<String, FsError> {
    root.read(path, Window::Head(4096)).map(|r| r.text)
}

#[test]
fn paths_inside_the_root_read_whatever_their_spelling() {
    let f = fixture();
    let r = root(&f);
    for path in [
        "notes.txt",
        "./notes.txt",
        "sub/../notes.txt",
        "sub/./../notes.txt",
        &f.root.join("notes.txt").display().to_string(),
    ] {
        assert_eq!(
            read(&r, path).unwrap_or_else(|e| panic!("{path}: {e}")),
            "inside"
        );
    }
    // Links inside the root, relative and absolute, to a file and a
    // directory, are followed within it.
    symlink("notes.txt", f.root.join("link.txt")).unwrap_or_else(|e| panic!("{e}"));
    symlink("sub", f.root.join("subdir")).unwrap_or_else(|e| panic!("{e}"));
    symlink(f.root.join("sub/deep.txt"), f.root.join("abs.txt")).unwrap_or_else(|e| panic!("{e}"));
    symlink("../notes.txt", f.root.join("sub/up.txt")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        read(&r, "link.txt").unwrap_or_else(|e| panic!("{e}")),
        "inside"
    );
    assert_eq!(
        read(&r, "subdir/deep.txt").unwrap_or_else(|e| panic!("{e}")),
        "deep"
    );
    assert_eq!(
        read(&r, "abs.txt").unwrap_or_else(|e| panic!("{e}")),
        "deep"
    );
    assert_eq!(
        read(&r, "sub/up.txt").unwrap_or_else(|e| panic!("{e}")),
        "inside"
    );
}

#[test]
fn every_way_out_of_the_root_is_refused() {
    let f = fixture();
    let secret = f.outside.join("secret.txt");
    // Links a model could make with a command: to a file, to a directory,
    // absolute and relative, chained, and to /proc.
    symlink(&secret, f.root.join("abs-file")).unwrap_or_else(|e| panic!("{e}"));
    symlink("../outside/secret.txt", f.root.join("rel-file")).unwrap_or_else(|e| panic!("{e}"));
    symlink(&f.outside, f.root.join("abs-dir")).unwrap_or_else(|e| panic!("{e}"));
    symlink("../../outside", f.root.join("sub/rel-dir")).unwrap_or_else(|e| panic!("{e}"));
    symlink("rel-file", f.root.join("chain")).unwrap_or_else(|e| panic!("{e}"));
    symlink("/proc/self/environ", f.root.join("env.txt")).unwrap_or_else(|e| panic!("{e}"));
    symlink("/proc/self", f.root.join("proc")).unwrap_or_else(|e| panic!("{e}"));
    symlink("/", f.root.join("slash")).unwrap_or_else(|e| panic!("{e}"));
    symlink("loop-b", f.root.join("loop-a")).unwrap_or_else(|e| panic!("{e}"));
    symlink("loop-a", f.root.join("loop-b")).unwrap_or_else(|e| panic!("{e}"));
    let r = root(&f);
    let secret_path = secret.display().to_string();
    for path in [
        "/etc/passwd",
        "/proc/self/environ",
        secret_path.as_str(),
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "..",
        "abs-file",
        "rel-file",
        "abs-dir/secret.txt",
        "sub/rel-dir/secret.txt",
        "chain",
        "env.txt",
        "proc/environ",
        "slash/etc/passwd",
        "loop-a",
    ] {
        match read(&r, path) {
            Err(
                FsError::Escapes { .. } | FsError::TooManyLinks { .. } | FsError::NotRegular { .. },
            ) => {}
            other => panic!("{path}: expected a refusal, got {other:?}"),
        }
        let text = format!("{:?}", read(&r, path));
        assert!(!text.contains("SECRET-OUTSIDE"), "{path}: {text}");
    }
    // Listing a directory outside is refused the same way.
    for path in ["abs-dir", "sub/rel-dir", "..", "/", "slash", "proc"] {
        assert!(
            matches!(r.list(path), Err(FsError::Escapes { .. })),
            "{path}: {:?}",
            r.list(path)
        );
    }
}

#[test]
fn hard_links_devices_and_fifos_are_not_read() {
    let f = fixture();
    // A hard link to a file outside (same file system: the temp dir).
    std::fs::hard_link(f.outside.join("secret.txt"), f.root.join("hard.txt"))
        .unwrap_or_else(|e| panic!("{e}"));
    let r = root(&f);
    assert!(matches!(
        read(&r, "hard.txt"),
        Err(FsError::HardLinked { links: 2, .. })
    ));
    // A link to /dev/zero: never read, however long it claims to be.
    symlink("/dev/zero", f.root.join("zero")).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(read(&r, "zero"), Err(FsError::Escapes { .. })));
    // A FIFO inside the root: refused at once, not waited on.
    let fifo = f.root.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    assert!(made.success());
    assert!(matches!(
        read(&r, "pipe"),
        Err(FsError::NotRegular { kind: "a FIFO", .. })
    ));
    assert!(matches!(
        read(&r, "sub"),
        Err(FsError::NotRegular {
            kind: "a directory",
            ..
        })
    ));
}

#[test]
fn outside_paths_open_only_when_allowed_and_never_procfs_or_devices() {
    let f = fixture();
    let secret = f.outside.join("secret.txt").display().to_string();
    let r = root(&f).allow_outside();
    assert_eq!(
        read(&r, &secret).unwrap_or_else(|e| panic!("{e}")),
        "SECRET-OUTSIDE"
    );
    assert_eq!(
        read(&r, "../outside/secret.txt").unwrap_or_else(|e| panic!("{e}")),
        "SECRET-OUTSIDE"
    );
    for path in ["/proc/self/environ", "/proc/self/cmdline", "/proc/1/status"] {
        assert!(
            matches!(
                read(&r, path),
                Err(FsError::Procfs { .. } | FsError::Io { .. })
            ),
            "{path}"
        );
    }
    for path in ["/dev/zero", "/dev/urandom", "/dev/null"] {
        assert!(
            matches!(read(&r, path), Err(FsError::NotRegular { .. })),
            "{path}: {:?}",
            read(&r, path)
        );
    }
    // Links inside the root still may not lead out, even when outside
    // paths may be given: the approval was for the path as spelt.
    symlink(f.outside.join("secret.txt"), f.root.join("sneak")).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(read(&r, "sneak"), Err(FsError::Escapes { .. })));
    // Writes never leave the root.
    assert!(matches!(
        r.write("../outside/new.txt", b"x"),
        Err(FsError::Escapes { .. })
    ));
    assert!(!f.outside.join("new.txt").exists());
}

#[test]
fn reads_are_bounded_before_they_are_read() {
    let f = fixture();
    let big = "é".repeat(10_000); // 20 000 bytes
    write(&f.root.join("big.txt"), &big);
    let r = root(&f);
    let head = r
        .read("big.txt", Window::Head(1001))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(head.truncated);
    assert_eq!(head.size, 20_000);
    // The half character at the cut is left out.
    assert_eq!(head.text, "é".repeat(500));
    let tail = r
        .read("big.txt", Window::Tail(1001))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(tail.truncated);
    assert_eq!(tail.text, "é".repeat(500));
    let whole = r
        .read("notes.txt", Window::Head(6))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!whole.truncated);
    assert_eq!(whole.text, "inside");
}

#[test]
fn writes_stay_inside_and_replace_links_rather_than_write_through_them() {
    let f = fixture();
    let r = root(&f);
    r.write("new/dir/file.txt", b"made")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        std::fs::read_to_string(f.root.join("new/dir/file.txt")).unwrap_or_default(),
        "made"
    );
    // A link the model made to a file outside: the write replaces the
    // link; the outside file is untouched.
    symlink(f.outside.join("secret.txt"), f.root.join("out-link"))
        .unwrap_or_else(|e| panic!("{e}"));
    r.write("out-link", b"replaced")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap_or_default(),
        "SECRET-OUTSIDE"
    );
    assert!(
        !std::fs::symlink_metadata(f.root.join("out-link"))
            .unwrap_or_else(|e| panic!("{e}"))
            .file_type()
            .is_symlink()
    );
    // A hard link's other name keeps its content.
    std::fs::hard_link(f.outside.join("secret.txt"), f.root.join("hard.txt"))
        .unwrap_or_else(|e| panic!("{e}"));
    r.write("hard.txt", b"mine")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap_or_default(),
        "SECRET-OUTSIDE"
    );
    // A directory link leading out: nothing is created outside.
    symlink(&f.outside, f.root.join("out-dir")).unwrap_or_else(|e| panic!("{e}"));
    for path in [
        "out-dir/x.txt",
        "../outside/x.txt",
        "/tmp/harness-escape.txt",
        "sub/../../x.txt",
    ] {
        assert!(
            matches!(r.write(path, b"x"), Err(FsError::Escapes { .. })),
            "{path}"
        );
    }
    assert!(!f.outside.join("x.txt").exists());
    // An existing file keeps its permissions.
    std::fs::set_permissions(
        f.root.join("notes.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    r.write("notes.txt", b"again")
        .unwrap_or_else(|e| panic!("{e}"));
    let mode = std::fs::metadata(f.root.join("notes.txt"))
        .unwrap_or_else(|e| panic!("{e}"))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// A process swaps a directory for a link out of the root, over and over,
/// while reads go on: no read ever returns the outside file.
///
/// The reads go on until both sides have done enough (a deadline bounds a
/// machine too loaded for either), so that a busy machine, where the swapper
/// may hold the link in place for most of the reads, still proves reads got
/// through between the swaps.
#[test]
fn a_link_swapped_in_during_reads_never_leads_out() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    const ENOUGH: u32 = 200;
    let f = fixture();
    write(&f.root.join("sub/secret.txt"), "inside-too");
    write(&f.outside.join("secret.txt"), "SECRET-OUTSIDE");
    let r = root(&f);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let swaps = std::sync::Arc::new(AtomicU32::new(0));
    let swapper = {
        let (root_dir, outside) = (f.root.clone(), f.outside.clone());
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            let (sub, parked) = (root_dir.join("sub"), root_dir.join("parked"));
            while !stop.load(Ordering::Relaxed) {
                if std::fs::rename(&sub, &parked).is_ok() {
                    let _ = symlink(&outside, &sub);
                    let _ = std::fs::remove_file(&sub);
                    let _ = std::fs::rename(&parked, &sub);
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
                // Leave the directory in place a moment, so reads get through.
                std::thread::yield_now();
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (mut inside, mut reads) = (0u32, 0u32);
    while (inside < ENOUGH || swaps.load(Ordering::Relaxed) < ENOUGH)
        && std::time::Instant::now() < deadline
    {
        reads += 1;
        match read(&r, "sub/secret.txt") {
            Ok(text) => {
                assert_eq!(text, "inside-too", "a read led out of the root");
                inside += 1;
            }
            Err(FsError::Escapes { .. } | FsError::Io { .. } | FsError::NotRegular { .. }) => {}
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper
        .join()
        .unwrap_or_else(|_| panic!("the swapper ended"));
    let swaps = swaps.load(Ordering::Relaxed);
    assert!(
        swaps >= ENOUGH && inside >= ENOUGH,
        "in 60 s: swaps {swaps}, reads {reads}, of them inside {inside}"
    );
}

#[tokio::test]
async fn the_tools_give_the_model_refusals_it_can_act_on() {
    let f = fixture();
    let r = root(&f);
    let tools = ToolSet::new()
        .with(ReadFile::new(r.clone(), Window::Head(4)))
        .with(ListDir::new(r.clone()))
        .with(WriteFile::new(r));
    let call = |name: &str, args: serde_json::Value| harness::llm::ToolCall::new("c", name, args);
    let out = tools
        .dispatch_or_report(&call("read_file", json!({"path": "notes.txt"})))
        .await;
    assert!(!out.is_error);
    assert_eq!(out.content, "insi\n[cut: the first 4 of 6 bytes]");
    let out = tools
        .dispatch_or_report(&call("read_file", json!({"path": "/etc/passwd"})))
        .await;
    assert!(out.is_error);
    assert!(out.content.contains("leads outside"), "{}", out.content);
    let out = tools
        .dispatch_or_report(&call("list_dir", json!({"path": "."})))
        .await;
    assert_eq!(out.content, "notes.txt\nsub/");
    let out = tools
        .dispatch_or_report(&call(
            "write_file",
            json!({"path": "a/b.txt", "content": "hi"}),
        ))
        .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        std::fs::read_to_string(f.root.join("a/b.txt")).unwrap_or_default(),
        "hi"
    );
}
