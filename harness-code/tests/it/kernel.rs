//! The Python kernel with a real `python3`: protocol, captured output,
//! tracebacks, value summaries, faults (timeout, `os._exit`, segfault,
//! closed pipes), limits, environment scrubbing, sandbox prefix.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use harness_code::blobs::BlobStore;
use harness_code::kernel::{
    Activity, ExecuteOptions, Kernel, KernelConfig, KernelError, RestoreValue, Stored,
};

#[cfg(target_os = "linux")]
use crate::support::{config, process_gone};

async fn kernel() -> Kernel {
    Kernel::spawn(config()).await.unwrap()
}

#[tokio::test]
async fn runs_cells_in_one_namespace() {
    let mut kernel = kernel().await;
    let first = kernel
        .execute(0, "xs = [1, 2, 3]\nprint('sum', sum(xs))\nxs")
        .await
        .unwrap();
    assert!(first.is_ok(), "{:?}", first.error);
    assert_eq!(first.stdout.text, "sum 6\n");
    assert_eq!(first.display.as_deref(), Some("[1, 2, 3]"));
    let xs = &first.outputs["xs"];
    assert_eq!(xs.type_name, "list");
    assert_eq!(xs.len, Some(3));
    assert!(matches!(&xs.stored, Stored::Blob { hash, .. } if hash.len() == 64));

    let second = kernel
        .execute(1, "xs.append(4)\ntotal = sum(xs)")
        .await
        .unwrap();
    assert_eq!(second.outputs["total"].repr, "10");
    // `xs` was mutated, not rebound: the trace's fingerprints found it.
    assert_eq!(second.outputs["xs"].len, Some(4));
    let trace = second.trace.as_ref().unwrap();
    assert_eq!(trace.mutated.iter().collect::<Vec<_>>(), ["xs"]);
    assert_eq!(trace.bound.iter().collect::<Vec<_>>(), ["total"]);
    assert_eq!(
        second.reads.unwrap().into_iter().collect::<Vec<_>>(),
        ["xs"]
    );
    let declared = ExecuteOptions {
        declared: vec!["xs".into()],
        snapshot: false,
    };
    let third = kernel
        .execute_with(2, "xs.append(5)", &declared)
        .await
        .unwrap();
    assert_eq!(third.outputs["xs"].repr, "[1, 2, 3, 4, 5]");

    let fourth = kernel.execute(3, "del total").await.unwrap();
    assert!(fourth.deleted.contains("total"));
}

#[tokio::test]
async fn user_output_never_reaches_the_protocol() {
    let mut kernel = kernel().await;
    let source = "import os, sys\n\
                  print('{\"id\": 999}')\n\
                  os.write(1, b'raw fd 1\\n')\n\
                  os.write(2, b'raw fd 2\\n')\n\
                  sys.__stdout__.write('dunder\\n')\n\
                  print('err', file=sys.stderr)\n";
    let result = kernel.execute(0, source).await.unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    assert_eq!(result.stdout.text, "{\"id\": 999}\nraw fd 1\ndunder\n");
    assert_eq!(result.stderr.text, "raw fd 2\nerr\n");
    // The next cell starts with empty buffers.
    let next = kernel.execute(1, "print('next')").await.unwrap();
    assert_eq!(next.stdout.text, "next\n");
    // A cell that closes the streams or points fd 1 elsewhere does not
    // break the next one.
    kernel
        .execute(
            2,
            "import sys, os\nsys.stdout.close()\nos.dup2(os.open(os.devnull, os.O_WRONLY), 1)",
        )
        .await
        .unwrap();
    let after = kernel.execute(3, "print('still here')").await.unwrap();
    assert_eq!(after.stdout.text, "still here\n");
}

#[tokio::test]
async fn tracebacks_point_at_cell_lines() {
    let mut kernel = kernel().await;
    kernel
        .execute(3, "def scale(x):\n    factor = 0\n    return x / factor\n")
        .await
        .unwrap();
    let result = kernel.execute(7, "a = 1\nb = scale(a)\n").await.unwrap();
    let error = result.error.unwrap();
    assert_eq!(error.type_name, "ZeroDivisionError");
    assert_eq!(error.message, "division by zero");
    assert_eq!(error.line, Some(2));
    let frames: Vec<_> = error
        .frames
        .iter()
        .map(|f| (f.cell, f.line, f.function.as_str()))
        .collect();
    assert_eq!(
        frames,
        [(Some(7), Some(2), "<module>"), (Some(3), Some(3), "scale")]
    );
    assert!(error.traceback.contains("File \"<cell 7>\", line 2"));
    assert!(error.traceback.contains("return x / factor"));
    assert!(!error.traceback.contains("<string>"), "{}", error.traceback);
    // `a` was bound before the error.
    assert!(result.outputs.contains_key("a"));

    let syntax = kernel.execute(8, "x = (1,\n").await.unwrap();
    let error = syntax.error.unwrap();
    assert_eq!(error.type_name, "SyntaxError");
    assert_eq!(error.line, Some(1));
    assert!(error.frames.is_empty());

    let exit = kernel.execute(9, "import sys\nsys.exit(3)").await.unwrap();
    assert_eq!(exit.error.unwrap().type_name, "SystemExit");
    assert!(kernel.execute(10, "ok = 1").await.unwrap().is_ok());
}

#[tokio::test]
async fn summarises_values_and_marks_unpicklable_ones() {
    let mut kernel = kernel().await;
    let result = kernel
        .execute(
            0,
            "import json\n\
             gen = (i for i in range(3))\n\
             def f():\n    return 1\n\
             class Point:\n    pass\n\
             p = Point()\n\
             data = {'a': [1, 2], 'b': 'x' * 1000}\n",
        )
        .await
        .unwrap();
    let stored = |name: &str| result.outputs[name].stored.clone();
    assert_eq!(
        stored("json"),
        Stored::Module {
            name: "json".into()
        }
    );
    for name in ["gen", "f", "Point", "p"] {
        assert!(
            matches!(stored(name), Stored::Unrestorable { .. }),
            "{name}: {:?}",
            stored(name)
        );
    }
    assert!(matches!(stored("data"), Stored::Blob { .. }));
    assert!(result.outputs["data"].repr.len() <= 250);
    assert_eq!(result.outputs["data"].len, Some(2));
}

#[tokio::test]
async fn equal_values_hash_equal_across_kernels() {
    let source = "s = {'alpha', 'beta', 'gamma', 'delta'}\nd = {'k': [1.5, None]}";
    let mut one = kernel().await;
    let mut two = kernel().await;
    let a = one.execute(0, source).await.unwrap();
    let b = two.execute(5, source).await.unwrap();
    for name in ["s", "d"] {
        assert_eq!(
            a.outputs[name].stored.hash(),
            b.outputs[name].stored.hash(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn snapshots_go_to_the_blob_store_and_restore_in_a_new_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::open(dir.path().join("blobs")).unwrap();
    let config = KernelConfig {
        blob_dir: Some(blobs.root().to_path_buf()),
        ..config()
    };
    let mut kernel = Kernel::spawn(config.clone()).await.unwrap();
    let result = kernel
        .execute(0, "import math\ntable = {i: i * i for i in range(100)}")
        .await
        .unwrap();
    let hash = result.outputs["table"].stored.hash().unwrap().to_owned();
    assert!(blobs.contains(&hash));
    blobs.get(&hash).unwrap();

    let mut fresh = Kernel::spawn(config).await.unwrap();
    let report = fresh
        .restore(&[
            RestoreValue::Blob {
                name: "table".into(),
                blob: hash,
            },
            RestoreValue::Module {
                name: "m".into(),
                module: "math".into(),
            },
            RestoreValue::Blob {
                name: "gone".into(),
                blob: "0".repeat(64),
            },
        ])
        .await
        .unwrap();
    assert_eq!(report.restored, ["table", "m"]);
    assert_eq!(report.failed[0].name, "gone");
    let check = fresh
        .execute(1, "print(table[9], m.sqrt(table[4]))")
        .await
        .unwrap();
    assert_eq!(check.stdout.text, "81 4.0\n");
}

#[tokio::test]
async fn timeout_kills_and_restarts() {
    let mut kernel = Kernel::spawn(KernelConfig {
        timeout: Some(Duration::from_secs(3)),
        ..config()
    })
    .await
    .unwrap();
    kernel.execute(0, "x = 1").await.unwrap();
    let generation = kernel.generation();
    let started = Instant::now();
    let error = kernel.execute(1, "while True: pass").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    match &error {
        KernelError::Timeout {
            during,
            after,
            restarted,
        } => {
            assert_eq!(*during, Activity::Cell(1));
            assert_eq!(*after, Duration::from_secs(3));
            assert!(restarted);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(error.to_string().contains("cell 1 timed out"), "{error}");
    assert!(kernel.generation() > generation);
    // A fresh namespace: `x` is gone, but the kernel runs.
    let next = kernel
        .execute(2, "print('alive', 'x' in dir())")
        .await
        .unwrap();
    assert_eq!(next.stdout.text, "alive False\n");
}

async fn assert_died(source: &str, check: impl Fn(&KernelError)) {
    let mut kernel = kernel().await;
    let error = kernel.execute(4, source).await.unwrap_err();
    match &error {
        KernelError::Died {
            during, restarted, ..
        } => {
            assert_eq!(*during, Activity::Cell(4));
            assert!(restarted);
        }
        other => panic!("{source}: expected the kernel to die, got {other:?}"),
    }
    check(&error);
    let next = kernel.execute(5, "print('recovered')").await.unwrap();
    assert_eq!(next.stdout.text, "recovered\n");
}

#[tokio::test]
async fn os_exit_is_a_typed_error() {
    assert_died("import os\nos._exit(1)", |error| {
        assert!(matches!(error, KernelError::Died { code: Some(1), .. }));
    })
    .await;
}

#[cfg(unix)]
#[tokio::test]
async fn segfault_is_a_typed_error() {
    assert_died("import ctypes\nctypes.string_at(0)", |error| {
        let KernelError::Died { signal, stderr, .. } = error else {
            unreachable!()
        };
        assert_eq!(*signal, Some(11));
        // faulthandler reports the crash on the kernel's own stderr.
        assert!(stderr.contains("Segmentation fault"), "{stderr}");
    })
    .await;
}

#[tokio::test]
async fn closing_the_pipes_is_a_typed_error() {
    assert_died("import os\nos.closerange(0, 4096)", |_| {}).await;
}

#[tokio::test]
async fn ten_megabytes_of_output_are_capped() {
    let mut kernel = Kernel::spawn(KernelConfig {
        memory_limit: Some(1 << 30),
        output_cap: 4096,
        ..config()
    })
    .await
    .unwrap();
    let result = kernel
        .execute(0, "for i in range(100_000):\n    print('x' * 99)")
        .await
        .unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    assert_eq!(result.stdout.total_bytes, 10_000_000);
    assert!(result.stdout.truncated);
    assert_eq!(result.stdout.text.len(), 4096);
    let result = kernel
        .execute(1, "import sys\nsys.stdout.write('y' * 10_000_000)")
        .await
        .unwrap();
    assert_eq!(result.stdout.total_bytes, 10_000_000);
    assert_eq!(result.stdout.text.len(), 4096);
    assert!(result.to_owned().stdout.to_string().contains("truncated"));
}

#[tokio::test]
async fn memory_limit_gives_a_memory_error() {
    let mut kernel = Kernel::spawn(KernelConfig {
        memory_limit: Some(512 << 20),
        ..config()
    })
    .await
    .unwrap();
    assert!(
        !kernel.info().warnings.iter().any(|w| w.contains("memory")),
        "{:?}",
        kernel.info()
    );
    let result = kernel
        .execute(0, "big = bytearray(2 * 1024 ** 3)")
        .await
        .unwrap();
    assert_eq!(result.error.unwrap().type_name, "MemoryError");
    assert!(
        kernel
            .execute(1, "small = bytearray(10)")
            .await
            .unwrap()
            .is_ok()
    );
}

#[tokio::test]
async fn secrets_never_reach_the_kernel() {
    let config = KernelConfig {
        env: vec![
            ("OPENAI_API_KEY".into(), "sk-secret".into()),
            ("GITHUB_TOKEN".into(), "ghp-secret".into()),
            ("db_password".into(), "hunter2".into()),
            ("HARMLESS".into(), "visible".into()),
        ],
        ..config()
    };
    let env = config.env_from([
        ("ANTHROPIC_API_KEY".into(), "x".into()),
        ("PATH".into(), "/usr/bin".into()),
        ("PYTHONPATH".into(), "/evil".into()),
    ]);
    let names: Vec<_> = env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["PATH", "HARMLESS", "PYTHONHASHSEED"]);

    let debug = format!("{config:?}");
    assert!(
        debug.contains("OPENAI_API_KEY") && !debug.contains("sk-secret"),
        "{debug}"
    );
    let mut kernel = Kernel::spawn(config).await.unwrap();
    let result = kernel
        .execute(
            0,
            "import os\nprint(sorted(k for k in os.environ if k != 'LC_CTYPE'))",
        )
        .await
        .unwrap();
    let text = &result.stdout.text;
    assert!(text.contains("'HARMLESS'"), "{text}");
    for secret in [
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "db_password",
        "secret",
        "hunter2",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

#[tokio::test]
async fn working_dir_and_command_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let mut kernel = Kernel::spawn(KernelConfig {
        working_dir: Some(work.clone()),
        command_prefix: vec!["env".into(), "WRAPPED_BY=prefix".into()],
        ..config()
    })
    .await
    .unwrap();
    let result = kernel
        .execute(
            0,
            "import os\nprint(os.getcwd())\nprint(os.environ.get('WRAPPED_BY'))\nopen('out.txt', 'w').write('hi')",
        )
        .await
        .unwrap();
    let lines: Vec<&str> = result.stdout.text.lines().collect();
    assert_eq!(lines[0], work.canonicalize().unwrap().to_str().unwrap());
    assert_eq!(lines[1], "prefix");
    assert!(work.join("out.txt").is_file());
}

#[tokio::test]
async fn missing_interpreter_is_a_spawn_error() {
    let error = Kernel::spawn(KernelConfig {
        python: "/nonexistent/python3".into(),
        ..config()
    })
    .await
    .unwrap_err();
    assert!(matches!(error, KernelError::Spawn { .. }), "{error:?}");
}

#[tokio::test]
async fn records_module_level_reads() {
    let mut kernel = kernel().await;
    kernel
        .execute(0, "a = 1\nb = 2\nc = 3\ndef helper():\n    return c\n")
        .await
        .unwrap();
    let result = kernel
        .execute(
            1,
            "b = 5\nx = a + b + helper()\nys = [a * k for k in range(3)]\nif False:\n    z = c\n",
        )
        .await
        .unwrap();
    // `b` is rebound before it is read; `c` is read by helper's body, which
    // belongs to cell 0, and by a branch that never runs.
    let reads: Vec<_> = result.reads.unwrap().into_iter().collect();
    assert_eq!(reads, ["a", "helper"]);
}

/// Starts `sleep 300` from a cell and returns its pid, checking it runs.
#[cfg(target_os = "linux")]
async fn start_sleeper(kernel: &mut Kernel, cell: u32) -> u32 {
    let result = kernel
        .execute(
            cell,
            "import subprocess\nsleeper = subprocess.Popen(['sleep', '300'])\nprint(sleeper.pid)",
        )
        .await
        .unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    let pid = result.stdout.text.trim().parse().unwrap();
    assert!(!process_gone(pid), "the sleeper {pid} did not start");
    pid
}

/// Waits up to 5 s for `pid` to be gone. If it is not, kills it (a failing
/// test leaves nothing behind) and fails.
#[cfg(target_os = "linux")]
async fn assert_gone(pid: u32, after: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !process_gone(pid) {
        if Instant::now() > deadline {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("process {pid}, started by a cell, outlived the kernel after {after}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn timeout_kills_what_the_cell_started() {
    let mut kernel = Kernel::spawn(KernelConfig {
        timeout: Some(Duration::from_secs(3)),
        ..config()
    })
    .await
    .unwrap();
    let sleeper = start_sleeper(&mut kernel, 0).await;
    let error = kernel.execute(1, "while True: pass").await.unwrap_err();
    assert!(
        matches!(
            error,
            KernelError::Timeout {
                during: Activity::Cell(1),
                restarted: true,
                ..
            }
        ),
        "{error:?}"
    );
    let next = kernel.execute(2, "print('alive')").await.unwrap();
    assert_eq!(next.stdout.text, "alive\n");
    assert_gone(sleeper, "a timeout").await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn dropping_the_kernel_kills_what_its_cells_started() {
    let mut kernel = kernel().await;
    let sleeper = start_sleeper(&mut kernel, 0).await;
    drop(kernel);
    assert_gone(sleeper, "being dropped").await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn shutdown_kills_what_the_cells_started() {
    let mut kernel = kernel().await;
    let sleeper = start_sleeper(&mut kernel, 0).await;
    kernel.shutdown().await.unwrap();
    assert_gone(sleeper, "shutdown").await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn restart_kills_what_the_cells_started() {
    let mut kernel = kernel().await;
    let sleeper = start_sleeper(&mut kernel, 0).await;
    kernel.restart().await.unwrap();
    assert_gone(sleeper, "a restart").await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_kernel_that_dies_with_a_forked_child_is_reported_at_once() {
    let mut kernel = kernel().await;
    // The forked child holds the protocol pipes open.
    let forked = kernel
        .execute(
            0,
            "import os, time\n\
             child = os.fork()\n\
             if child == 0:\n    time.sleep(300)\n    os._exit(0)\n\
             print(child)",
        )
        .await
        .unwrap();
    let child: u32 = forked.stdout.text.trim().parse().unwrap();
    assert!(!process_gone(child));
    let started = Instant::now();
    let error = kernel
        .execute(1, "import os\nos._exit(3)")
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            KernelError::Died {
                code: Some(3),
                restarted: true,
                ..
            }
        ),
        "{error:?}"
    );
    // Not by the 20 s cell timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_gone(child, "dying").await;
}

#[tokio::test]
async fn restore_checks_each_blob_against_its_hash_and_removes_a_corrupt_one() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::open(dir.path().join("blobs")).unwrap();
    let config = KernelConfig {
        blob_dir: Some(blobs.root().to_path_buf()),
        ..config()
    };
    let mut kernel = Kernel::spawn(config.clone()).await.unwrap();
    let result = kernel.execute(0, "word = 'genuine'").await.unwrap();
    let hash = result.outputs["word"].stored.hash().unwrap().to_owned();
    let pickle = blobs.get(&hash).unwrap();
    let at = pickle.windows(7).position(|w| w == b"genuine").unwrap();
    let mut forged = pickle.clone();
    forged[at..at + 7].copy_from_slice(b"forged!");
    let mut garbage = pickle.clone();
    garbage.iter_mut().for_each(|byte| *byte = 0);
    let path = blobs.path(&hash).unwrap();
    let mut fresh = Kernel::spawn(config).await.unwrap();
    for (what, bytes) in [
        ("another value of the same size", forged),
        ("zeros", garbage),
        ("a longer file", [pickle.as_slice(), b"tail"].concat()),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let report = fresh
            .restore(&[RestoreValue::Blob {
                name: "word".into(),
                blob: hash.clone(),
            }])
            .await
            .unwrap();
        assert!(report.restored.is_empty(), "{what}: {report:?}");
        assert!(
            report.failed[0].reason.contains("corrupt") && report.failed[0].reason.contains(&hash),
            "{what}: {report:?}"
        );
        let check = fresh.execute(1, "print('word' in dir())").await.unwrap();
        assert_eq!(check.stdout.text, "False\n", "{what}");
        assert!(!path.exists(), "{what}: the corrupt blob was kept");
    }
    // Names that are not hashes are refused before any file is opened.
    for name in ["../../etc/passwd", "ABC", ""] {
        let report = fresh
            .restore(&[RestoreValue::Blob {
                name: "x".into(),
                blob: name.into(),
            }])
            .await
            .unwrap();
        assert!(
            report.failed[0].reason.contains("invalid blob hash"),
            "{name}: {report:?}"
        );
    }
    // The kernel writes the value again where the corrupt blob was.
    kernel
        .execute(2, "word = ''.join(['gen', 'uine'])")
        .await
        .unwrap();
    assert_eq!(blobs.get(&hash).unwrap(), pickle);
}

/// A cell that sends a reply of its own through the kernel's `send` (it
/// can reach it through the stack), with `output` as its one output.
fn forged_reply(output: &str) -> String {
    format!(
        r#"import sys
frame = sys._getframe()
while not ("rid" in frame.f_locals and hasattr(frame.f_locals.get("self"), "send")):
    frame = frame.f_back
empty = {{"text": "", "total_bytes": 0, "truncated": False}}
frame.f_locals["self"].send({{"id": frame.f_locals["rid"], "ok": True, "stdout": empty,
    "stderr": empty, "outputs": {{"x": {output}}}, "deleted": []}})
"#
    )
}

/// A reply that does not read, or names a blob by what is not a hash,
/// replaces the kernel: its namespace (what the cell changed before it
/// broke the protocol) is not the one the host knows of.
#[tokio::test]
async fn a_reply_the_host_cannot_take_replaces_the_kernel() {
    let mut kernel = kernel().await;
    for output in [
        r#"{"type": "int", "repr": "1", "stored": {"kind": "blob", "hash": "../../../etc/passwd", "bytes": 1}}"#,
        r#"{"type": "int", "repr": "1", "stored": {"kind": "blob", "hash": "ABC", "bytes": 1}}"#,
        r#"{"type": "S", "repr": "s", "shape": [-1], "stored": {"kind": "module", "name": "os"}}"#,
        r#"{"type": "S", "repr": "s", "stored": {"kind": "no such kind"}}"#,
    ] {
        let generation = kernel.generation();
        kernel.execute(0, "keep = 42").await.unwrap();
        let error = kernel
            .execute(1, &format!("keep = 7\n{}", forged_reply(output)))
            .await
            .unwrap_err();
        match &error {
            KernelError::Protocol {
                during, restarted, ..
            } => {
                assert_eq!(*during, Activity::Cell(1));
                assert!(restarted, "{error}");
            }
            other => panic!("{output}: {other:?}"),
        }
        assert!(error.lost_namespace());
        assert!(kernel.generation() > generation);
        let next = kernel.execute(2, "keep").await.unwrap();
        assert_eq!(next.error.unwrap().type_name, "NameError", "{output}");
    }
}

/// What a cell's value says of its shape reaches the host only if it is a
/// shape: whole numbers from 0 to 2^64 - 1.
#[tokio::test]
async fn shapes_that_are_no_shapes_are_left_out() {
    let mut kernel = kernel().await;
    let result = kernel
        .execute(
            0,
            "class S:\n    def __init__(self, shape):\n        self.shape = shape\n\
             a = S((-1, 3))\nb = S((True, 2))\nc = S((10**20,))\nd = S((2, 3))\n\
             e = S([2, 3])\nf = S((2.0,))\nkeep = 1",
        )
        .await
        .unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    for name in ["a", "b", "c", "e", "f"] {
        assert_eq!(result.outputs[name].shape, None, "{name}");
    }
    assert_eq!(result.outputs["d"].shape, Some(vec![2, 3]));
    let next = kernel.execute(1, "print(keep)").await.unwrap();
    assert_eq!(next.stdout.text, "1\n");
}

/// A lone surrogate (from a file name or bytes decoded with
/// `surrogateescape`) in whatever the kernel reports reaches the host as
/// `?`, and the kernel, its namespace with it, goes on.
#[tokio::test]
async fn strings_with_lone_surrogates_reach_the_host_and_break_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut kernel = Kernel::spawn(KernelConfig {
        working_dir: Some(dir.path().to_path_buf()),
        ..config()
    })
    .await
    .unwrap();
    kernel.execute(0, "keep = 42").await.unwrap();
    let cells = [
        "open(b'name\\xff', 'w').close()\nopen(b'name\\xff').read()",
        "raise ValueError('bad \\udcff')",
        "class R:\n    def __repr__(self):\n        return 'r\\udcff'\nr = R()\nr",
        "print('out \\udcff')",
        "globals()['\\udcff'] = 1",
        "import os\nos.listdir(b'.')\n[n.decode(errors='surrogateescape') for n in os.listdir(b'.')]",
    ];
    for (i, source) in cells.iter().enumerate() {
        let cell = u32::try_from(i).unwrap() + 1;
        let result = kernel.execute(cell, source).await;
        let result = result.unwrap_or_else(|e| panic!("{source}: {e}"));
        if let Some(error) = &result.error {
            assert_eq!(error.message, "bad ?", "{source}");
        }
    }
    let last = kernel.execute(10, "print(keep)").await.unwrap();
    assert_eq!(last.stdout.text, "42\n");
}

/// `globals()[1] = 2` is Python: the key stays for the cells, and the
/// kernel, which reads names between cells, goes on.
#[tokio::test]
async fn keys_that_are_not_names_stay_and_break_nothing() {
    let mut kernel = kernel().await;
    for (cell, source) in [
        "globals()[1] = 2\nglobals()[(3, 4)] = 'pair'\nx = 5",
        "y = x + globals()[1]\ntry:\n    globals()[99]\nexcept KeyError:\n    pass\nglobals()[1]",
        "print(y, globals()[(3, 4)], sorted((k for k in globals() if not isinstance(k, str)), key=repr))",
    ]
    .iter()
    .enumerate()
    {
        let result = kernel
            .execute(u32::try_from(cell).unwrap(), source)
            .await
            .unwrap_or_else(|e| panic!("{source}: {e}"));
        assert!(result.is_ok(), "{source}: {:?}", result.error);
        if cell == 2 {
            assert_eq!(result.stdout.text, "7 pair [(3, 4), 1]\n");
        }
    }
}

/// Descriptors the host holds without close-on-exec (a supervisor's pipe,
/// an open file) are closed in the kernel before any cell runs.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn descriptors_the_host_leaks_do_not_reach_cells() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "SECRET-OF-THE-SUPERVISOR").unwrap();
    let file = std::fs::File::open(&secret).unwrap();
    // As a process started with `3<secret.txt` holds it.
    rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty()).unwrap();
    let mut kernel = kernel().await;
    drop(file);
    let result = kernel
        .execute(
            0,
            "import os\nfor fd in os.listdir('/proc/self/fd'):\n    try:\n        \
             print(os.readlink('/proc/self/fd/' + fd))\n    except OSError:\n        pass",
        )
        .await
        .unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    assert!(
        !result.stdout.text.contains("secret.txt"),
        "{}",
        result.stdout.text
    );
}

/// The high-water mark of this process's resident memory, in KiB.
#[cfg(target_os = "linux")]
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A reply line as long as the protocol allows, made of what the host does
/// not read, costs the host about its own size, not the tens of bytes per
/// element a tree of JSON values would.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_long_forged_reply_costs_the_host_no_more_than_its_length() {
    let mut kernel = kernel().await;
    let before = peak_kib();
    // 30 million zeros: 60 MB of JSON, under the 64 MiB a line may have.
    let forged =
        forged_reply(r#"{"type": "int", "repr": "1", "stored": {"kind": "module", "name": "os"}}"#)
            .replace(
                r#""deleted": []"#,
                r#""deleted": [], "pad": [0] * (30 << 20)"#,
            );
    let result = kernel.execute(0, &forged).await;
    let grown_mib = (peak_kib() - before) / 1024;
    assert!(result.is_ok(), "{result:?}");
    assert!(grown_mib < 400, "the host grew by {grown_mib} MiB");
}

/// A snapshot whose blob is already there, damaged at the same size (or
/// replaced by a FIFO), writes it again: a blob is kept only if it holds
/// the pickle's bytes.
#[tokio::test]
async fn a_snapshot_replaces_a_blob_damaged_at_the_same_size() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::open(dir.path().join("blobs")).unwrap();
    let mut kernel = Kernel::spawn(KernelConfig {
        blob_dir: Some(blobs.root().to_path_buf()),
        ..config()
    })
    .await
    .unwrap();
    // Small pickles are kept in memory, large ones spilled to a file.
    for (cell, source) in [
        (0, "xs = list(range(100))"),
        (2, "big = bytes(range(256)) * 8192"),
    ] {
        let result = kernel.execute(cell, source).await.unwrap();
        let (name, _) = result.outputs.iter().next().unwrap();
        let hash = result.outputs[name].stored.hash().unwrap().to_owned();
        let path = blobs.path(&hash).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(blobs.get(&hash).is_err());
        kernel.execute(cell + 1, source).await.unwrap();
        blobs.get(&hash).unwrap();
    }
}
