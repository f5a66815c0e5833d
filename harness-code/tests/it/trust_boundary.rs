//! The kernel's trust boundary, seen from a cell: what it can read of the
//! process that runs the kernel (the host) and of its environment, which
//! modules it gets, the default limits, and what is left of the kernel
//! when the host dies. The host tests start a copy of this test binary as
//! the host ([`host_process`]), with secrets in its environment, and look
//! at what the cells of its kernel find, or at what survives the host.

#![allow(clippy::unwrap_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness_code::kernel::{
    DEFAULT_MEMORY_LIMIT, DEFAULT_PROCESS_LIMIT, Kernel, KernelConfig, KernelError, RestoreValue,
};
use serde_json::Value;

use crate::support::process_gone;

/// Selects what [`host_process`] does; unset in a normal test run.
const HOST_SCENARIO: &str = "HARNESS_CODE_TEST_HOST";

/// Looks for the marker in the environment and command line of every
/// process it can read, and tries the host's environment, memory and open
/// files (what a descriptor is: a file, a pipe, a socket).
const ENVIRON_CELL: &str = r#"
import json, os
marker = "@MARKER@".encode()
found = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    paths = ["/proc/%s/environ" % pid, "/proc/%s/cmdline" % pid]
    try:
        paths += ["/proc/%s/task/%s/environ" % (pid, task)
                  for task in os.listdir("/proc/%s/task" % pid)]
    except OSError:
        pass
    for path in paths:
        try:
            with open(path, "rb") as handle:
                if marker in handle.read():
                    found.append(path)
        except OSError:
            pass
host = {}
for what in ("environ", "mem", "fd/0"):
    path = "/proc/%d/%s" % (os.getppid(), what)
    try:
        if what == "fd/0":
            os.readlink(path)
        else:
            open(path, "rb").close()
        host[what] = "read"
    except PermissionError:
        host[what] = "denied"
    except OSError as error:
        host[what] = str(error)
in_environ = [name for name, value in os.environ.items() if marker.decode() in value]
print(json.dumps({"found": found, "host": host, "in_environ": in_environ}))
"#;

/// Starts a process in the kernel's group, writes the pids of the kernel
/// and of that process, and runs forever.
const HANG_CELL: &str = r#"
import os, subprocess
sleeper = subprocess.Popen(["sleep", "300"])
with open(r"@OUT@.tmp", "w") as handle:
    handle.write("%d %d" % (os.getpid(), sleeper.pid))
os.replace(r"@OUT@.tmp", r"@OUT@")
while True:
    pass
"#;

/// Not a test of its own: the body of the host process the tests below
/// start (returns at once in a normal run). It starts a kernel configured
/// from its environment and runs the scenario's cell, writing the cell's
/// output to `HOST_OUT`.
#[tokio::test]
async fn host_process() {
    let Ok(scenario) = std::env::var(HOST_SCENARIO) else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    let out = PathBuf::from(var("HOST_OUT"));
    let config = KernelConfig {
        python: var("HOST_PYTHON").into(),
        working_dir: Some(out.parent().unwrap().to_path_buf()),
        timeout: None,
        // Generous: these hosts start while other tests load the machine.
        startup_timeout: Duration::from_secs(120),
        protect_host: var("HOST_PROTECT_HOST") == "1",
        drop_privileges: var("HOST_DROP_PRIVILEGES") == "1",
        ..KernelConfig::default()
    };
    let mut kernel = Kernel::spawn(config).await.unwrap();
    let source = match scenario.as_str() {
        "environ" => ENVIRON_CELL.replace("@MARKER@", &var("HOST_MARKER")),
        "hang" => HANG_CELL.replace("@OUT@", out.to_str().unwrap()),
        other => panic!("unknown host scenario {other}"),
    };
    let result = kernel.execute(0, &source).await.unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    std::fs::write(&out, &result.stdout.text).unwrap();
}

fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

/// Who runs the host and its kernel: the current user, or, for the
/// processes of an unprivileged user when the tests run as root, `nobody`
/// through `setpriv` (with the system's interpreter, which `nobody` can
/// read).
#[derive(Debug, Clone, Copy, PartialEq)]
enum RunAs {
    Me,
    Nobody,
}

const NOBODY: [&str; 3] = ["--reuid=65534", "--regid=65534", "--clear-groups"];
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

impl RunAs {
    /// The users to test with: the current one, and `nobody` too under root.
    fn all() -> Vec<Self> {
        if is_root() {
            vec![Self::Me, Self::Nobody]
        } else {
            vec![Self::Me]
        }
    }

    fn python(self) -> &'static str {
        match self {
            Self::Me => "python3",
            Self::Nobody => {
                assert!(
                    Path::new(SYSTEM_PYTHON).is_file(),
                    "run as root, these tests run the kernel as `nobody` with {SYSTEM_PYTHON}"
                );
                SYSTEM_PYTHON
            }
        }
    }

    fn command(self, program: &Path) -> Command {
        match self {
            Self::Me => Command::new(program),
            Self::Nobody => {
                assert_setpriv();
                let mut command = Command::new("setpriv");
                command.args(NOBODY).arg(program);
                command
            }
        }
    }
}

fn assert_setpriv() {
    assert!(
        Command::new("setpriv")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success()),
        "run as root, these tests run the kernel as `nobody` with `setpriv` (util-linux)"
    );
}

/// A directory every user can write.
fn shared_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// The protections of a host: [`KernelConfig::protect_host`] and
/// [`KernelConfig::drop_privileges`].
#[derive(Debug, Clone, Copy)]
struct Protections {
    host: bool,
    privileges: bool,
}

const PROTECTED: Protections = Protections {
    host: true,
    privileges: true,
};

/// This test binary as a host running `scenario`, with `marker` in several
/// variables that credentials are commonly kept in.
fn host(scenario: &str, run_as: RunAs, out: &Path, marker: &str, protect: Protections) -> Command {
    let flag = |on: bool| if on { "1" } else { "0" };
    let mut command = run_as.command(&std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "trust_boundary::host_process",
            "--test-threads=1",
        ])
        .env(HOST_SCENARIO, scenario)
        .env("HOST_OUT", out)
        .env("HOST_PYTHON", run_as.python())
        .env("HOST_PROTECT_HOST", flag(protect.host))
        .env("HOST_DROP_PRIVILEGES", flag(protect.privileges))
        .env("HOST_MARKER", marker)
        .env("PGPASSWORD", marker)
        .env("DATABASE_URL", format!("postgres://app:{marker}@db/app"))
        .env("REDIS_URL", format!("redis://:{marker}@cache:6379/0"))
        .env("AZURE_OPENAI_KEY", marker)
        .env("SSH_AUTH_SOCK", format!("/tmp/ssh-{marker}/agent.1"))
        .env("HTTPS_PROXY", format!("http://me:{marker}@proxy:3128"))
        .env("INNOCENT_LOOKING", marker)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Runs the `environ` scenario and returns what the cell found.
fn cell_findings(run_as: RunAs, protect: Protections) -> Value {
    let dir = shared_dir();
    let out = dir.path().join("found.json");
    let marker = format!("marker{}", uuid::Uuid::new_v4().simple());
    let output = host("environ", run_as, &out, &marker, protect)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the host ({run_as:?}) failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[cfg(target_os = "linux")]
#[test]
fn a_cell_reads_no_secret_of_the_host_through_proc() {
    for run_as in RunAs::all() {
        let found = cell_findings(run_as, PROTECTED);
        assert_eq!(found["found"], serde_json::json!([]), "{run_as:?}: {found}");
        assert_eq!(
            found["in_environ"],
            serde_json::json!([]),
            "{run_as:?}: {found}"
        );
        for what in ["environ", "mem", "fd/0"] {
            assert_eq!(found["host"][what], "denied", "{run_as:?}: {found}");
        }
        // Without the protection that holds for this user, the cell reads
        // the secrets, so the checks above can see a leak: a kernel of the
        // same unprivileged user reads a dumpable host, and root's kernel
        // reads any process while it keeps its capabilities.
        let control = if run_as == RunAs::Me && is_root() {
            Protections {
                host: true,
                privileges: false,
            }
        } else {
            Protections {
                host: false,
                privileges: true,
            }
        };
        let exposed = cell_findings(run_as, control);
        assert_eq!(exposed["host"]["environ"], "read", "{run_as:?}: {exposed}");
        assert!(
            exposed["found"]
                .as_array()
                .unwrap()
                .iter()
                .any(|path| path.as_str().unwrap().ends_with("/environ")),
            "{run_as:?}: {exposed}"
        );
        // Scrubbed either way.
        assert_eq!(exposed["in_environ"], serde_json::json!([]), "{run_as:?}");
    }
}

/// Waits for every process of `pids` to be gone (a generous safety net,
/// not a timing check); if one is not, kills them all and fails.
fn assert_gone(pids: &[(u32, &str)]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Some((pid, what)) = pids.iter().find(|(pid, _)| !process_gone(*pid)) {
        if Instant::now() > deadline {
            for (pid, _) in pids {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            panic!("{what} {pid} outlived its host");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a host whose cell runs forever, sends it `signal`, and checks
/// that the kernel and the process its cell started are gone.
fn kernel_dies_with_its_host(signal: &str) {
    let dir = shared_dir();
    let out = dir.path().join("pids");
    let command = host("hang", RunAs::Me, &out, "unused", PROTECTED);
    // (SIGKILL's action is never anything else.)
    let mut host = if signal == "KILL" {
        command
    } else {
        with_default_action(command, signal)
    }
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let pids = loop {
        if let Ok(text) = std::fs::read_to_string(&out) {
            break text;
        }
        if let Some(status) = host.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut host.stderr.take().unwrap(), &mut stderr).unwrap();
            panic!("the host exited ({status}) before its cell ran: {stderr}");
        }
        assert!(Instant::now() < deadline, "the cell did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pids: Vec<u32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let status = Command::new("kill")
        .args(["-s", signal, &host.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = host.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = host.kill();
            panic!("the host lived on 60 s after SIG{signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "{status}");
    assert_gone(&[
        (pids[0], "the kernel"),
        (pids[1], "a process started by a cell"),
    ]);
}

/// `command` started by `env --default-signal=SIGNAL` (coreutils 8.31 or
/// later), so that the host meets `signal` with its default action: the
/// test process may ignore SIGINT, as commands a shell without job control
/// starts in the background do, and its children would inherit that.
fn with_default_action(command: Command, signal: &str) -> Command {
    let mut wrapped = Command::new("env");
    wrapped
        .arg(format!("--default-signal={signal}"))
        .arg(command.get_program())
        .args(command.get_args())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    wrapped
}

#[cfg(target_os = "linux")]
#[test]
fn a_kernel_dies_with_a_host_that_is_killed() {
    kernel_dies_with_its_host("KILL");
}

#[cfg(target_os = "linux")]
#[test]
fn a_kernel_dies_with_a_host_that_is_interrupted() {
    kernel_dies_with_its_host("INT");
}

#[cfg(target_os = "linux")]
#[test]
fn a_kernel_dies_with_a_host_that_is_terminated() {
    kernel_dies_with_its_host("TERM");
}

#[test]
fn the_environment_is_an_allow_list_minus_anything_like_a_secret() {
    let config = KernelConfig {
        env: vec![
            ("HARMLESS".into(), "visible".into()),
            ("OPENAI_API_KEY".into(), "sk-x".into()),
            ("MY_DB".into(), "postgres://app:pw@db/app".into()),
            ("CONN".into(), "Server=db;User Id=app;Password=pw;".into()),
            (
                "JDBC".into(),
                "jdbc:postgresql://db/app?user=app&password=pw".into(),
            ),
        ],
        ..KernelConfig::default()
    };
    let inherited: Vec<(OsString, OsString)> = [
        // Kept: on the allow-list, no credential in the value.
        ("PATH", "/usr/bin"),
        ("HOME", "/home/me"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("TZ", "UTC"),
        ("TERM", "xterm"),
        ("TMPDIR", "/tmp"),
        ("https_proxy", "http://proxy:3128"),
        ("NO_PROXY", "localhost"),
        // Credentials by name, whatever the list says.
        ("PGPASSWORD", "pw"),
        ("DATABASE_URL", "postgres://app@db/app"),
        ("AZURE_OPENAI_KEY", "k"),
        ("ANTHROPIC_API_KEY", "k"),
        ("GITHUB_TOKEN", "t"),
        ("AWS_ACCESS_KEY_ID", "id"),
        ("AWS_SESSION_TOKEN", "t"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/home/me/sa.json"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
        ("MYSQL_PWD", "pw"),
        ("REDISCLI_AUTH", "pw"),
        ("SENTRY_DSN", "https://k@sentry.io/1"),
        ("KRB5CCNAME", "/tmp/krb5cc"),
        ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/0/bus"),
        ("PYTHONPATH", "/evil"),
        ("PYTHONSTARTUP", "/evil.py"),
        // Credentials by value on an allowed name.
        ("HTTPS_PROXY", "http://me:pw@proxy:3128"),
        ("ALL_PROXY", "socks5://token@proxy:1080"),
        // Not on the allow-list: left out, secret or not.
        ("REDIS_URL", "redis://:pw@cache:6379"),
        ("INNOCENT_LOOKING", "hunter2"),
        ("MY_APP_SETTING", "1"),
        ("LD_PRELOAD", "/evil.so"),
        ("XDG_RUNTIME_DIR", "/run/user/0"),
    ]
    .into_iter()
    .map(|(name, value)| (name.into(), value.into()))
    .collect();
    let names = |env: Vec<(OsString, OsString)>| -> Vec<String> {
        env.into_iter()
            .map(|(name, _)| name.into_string().unwrap())
            .collect()
    };
    assert_eq!(
        names(config.env_from(inherited.clone())),
        [
            "PATH",
            "HOME",
            "LANG",
            "LC_ALL",
            "TZ",
            "TERM",
            "TMPDIR",
            "https_proxy",
            "NO_PROXY",
            "HARMLESS",
            "PYTHONHASHSEED"
        ]
    );
    assert_eq!(
        config.scrubbed_env(),
        ["OPENAI_API_KEY", "MY_DB", "CONN", "JDBC"]
    );
    // Every default allowed name is allowed (none is caught by the deny list).
    for name in harness_code::kernel::DEFAULT_PASS_ENV {
        let name = name.replace('*', "X");
        assert!(config.inherits(name.as_ref()), "{name}");
    }

    // Opting out, field by field: everything inherited that is not
    // scrubbed, then secrets set on purpose.
    let everything = KernelConfig {
        pass_env: vec!["*".into()],
        ..config.clone()
    };
    let passed = names(everything.env_from(inherited.clone()));
    for name in ["MY_APP_SETTING", "INNOCENT_LOOKING", "XDG_RUNTIME_DIR"] {
        assert!(passed.iter().any(|n| n == name), "{name}: {passed:?}");
    }
    for name in ["PGPASSWORD", "REDIS_URL", "PYTHONPATH", "HTTPS_PROXY"] {
        assert!(!passed.iter().any(|n| n == name), "{name}: {passed:?}");
    }
    let on_purpose = KernelConfig {
        scrub_patterns: Vec::new(),
        scrub_credential_values: false,
        inherit_env: false,
        ..config
    };
    assert_eq!(
        names(on_purpose.env_from(inherited)),
        [
            "HARMLESS",
            "OPENAI_API_KEY",
            "MY_DB",
            "CONN",
            "JDBC",
            "PYTHONHASHSEED"
        ]
    );
}

/// Modules that would break the kernel, or take it over, if it imported
/// them from its working directory.
const SHADOWS: [&str; 14] = [
    "json",
    "pickle",
    "hashlib",
    "tempfile",
    "traceback",
    "select",
    "signal",
    "ast",
    "types",
    "threading",
    "resource",
    "ctypes",
    "reprlib",
    "sitecustomize",
];

#[tokio::test]
async fn modules_beside_the_notebook_shadow_neither_the_kernel_nor_the_standard_library() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    for name in SHADOWS {
        std::fs::write(
            work.join(format!("{name}.py")),
            format!(
                "open({:?}, 'w').close()\nraise ImportError('shadow {name} imported')\n",
                dir.path().join(format!("imported-{name}"))
            ),
        )
        .unwrap();
    }
    std::fs::write(work.join("helpers.py"), "VALUE = 42\n").unwrap();
    let blobs = dir.path().join("blobs");
    let config = KernelConfig {
        working_dir: Some(work.clone()),
        blob_dir: Some(blobs),
        timeout: Some(Duration::from_secs(20)),
        ..KernelConfig::default()
    };
    let mut kernel = Kernel::spawn(config.clone()).await.unwrap();
    let result = kernel
        .execute(
            0,
            "import json, pickle, hashlib, helpers\n\
             table = {'a': [1, 2]}\n\
             print(json.dumps(table), helpers.VALUE)\n\
             print(json.__file__)",
        )
        .await
        .unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    let lines: Vec<&str> = result.stdout.text.lines().collect();
    assert_eq!(lines[0], r#"{"a": [1, 2]} 42"#);
    assert!(!lines[1].starts_with(work.to_str().unwrap()), "{lines:?}");
    // Values are pickled, hashed, stored and loaded back by the kernel's
    // own modules.
    let hash = result.outputs["table"].stored.hash().unwrap().to_owned();
    let mut fresh = Kernel::spawn(config).await.unwrap();
    let report = fresh
        .restore(&[RestoreValue::Blob {
            name: "table".into(),
            blob: hash,
        }])
        .await
        .unwrap();
    assert_eq!(report.restored, ["table"], "{report:?}");
    let imported: Vec<_> = SHADOWS
        .iter()
        .filter(|name| dir.path().join(format!("imported-{name}")).exists())
        .collect();
    assert!(
        imported.is_empty(),
        "imported from the working directory: {imported:?}"
    );
}

#[test]
fn the_defaults_limit_time_memory_processes_and_output() {
    let config = KernelConfig::default();
    assert_eq!(config.timeout, Some(Duration::from_secs(60)));
    assert_eq!(config.memory_limit, Some(DEFAULT_MEMORY_LIMIT));
    assert_eq!(config.process_limit, Some(DEFAULT_PROCESS_LIMIT));
    assert_eq!(config.output_cap, 64 * 1024);
    assert!(config.protect_host && config.drop_privileges);
}

#[tokio::test]
async fn a_cell_cannot_raise_the_default_limits() {
    let mut kernel = Kernel::spawn(KernelConfig::default()).await.unwrap();
    let result = kernel
        .execute(
            0,
            "import mmap, resource\n\
             print(resource.getrlimit(resource.RLIMIT_AS))\n\
             nproc = resource.getrlimit(resource.RLIMIT_NPROC)\n\
             print(nproc[0] == nproc[1] != resource.RLIM_INFINITY)\n\
             for which in (resource.RLIMIT_AS, resource.RLIMIT_NPROC):\n\
             \x20   try:\n\
             \x20       resource.setrlimit(which, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n\
             \x20       print('raised')\n\
             \x20   except ValueError:\n\
             \x20       print('refused')\n\
             try:\n\
             \x20   mmap.mmap(-1, 16 * 1024 ** 3)\n\
             \x20   print('mapped')\n\
             except (OSError, MemoryError) as error:\n\
             \x20   print(type(error).__name__)\n",
        )
        .await
        .unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    let lines: Vec<&str> = result.stdout.text.lines().collect();
    assert_eq!(
        lines,
        [
            format!("({DEFAULT_MEMORY_LIMIT}, {DEFAULT_MEMORY_LIMIT})").as_str(),
            "True",
            "refused",
            "refused",
            "OSError"
        ]
    );
}

/// A config whose kernel is not root's, since Linux applies no process
/// limit to root: under root, the kernel runs as `nobody`.
fn unprivileged(config: KernelConfig, dir: &Path) -> KernelConfig {
    let run_as = if is_root() { RunAs::Nobody } else { RunAs::Me };
    KernelConfig {
        python: run_as.python().into(),
        command_prefix: if run_as == RunAs::Nobody {
            assert_setpriv();
            std::iter::once("setpriv".into())
                .chain(NOBODY.iter().map(Into::into))
                .collect()
        } else {
            Vec::new()
        },
        working_dir: Some(dir.to_path_buf()),
        ..config
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_cell_that_starts_processes_without_end_is_stopped_by_the_process_limit() {
    let starts = [
        (
            "os.fork",
            "pid = os.fork()\nif pid == 0:\n    time.sleep(60)\n    os._exit(0)\nstarted.append(pid)",
            "BlockingIOError",
        ),
        (
            "subprocess",
            "started.append(subprocess.Popen(['sleep', '60']).pid)",
            "BlockingIOError",
        ),
        (
            "threads",
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\nstarted.append(0)",
            "RuntimeError",
        ),
    ];
    let dir = shared_dir();
    for (what, start, expected) in starts {
        let config = unprivileged(
            KernelConfig {
                process_limit: Some(16),
                timeout: Some(Duration::from_secs(60)),
                ..KernelConfig::default()
            },
            dir.path(),
        );
        let mut kernel = Kernel::spawn(config).await.unwrap();
        assert!(
            !kernel.info().warnings.iter().any(|w| w.contains("process")),
            "{what}: {:?}",
            kernel.info().warnings
        );
        let body = start.replace('\n', "\n        ");
        let source = format!(
            "import os, signal, subprocess, threading, time\n\
             started, error = [], None\n\
             try:\n    for _ in range(500):\n        {body}\n\
             except (OSError, RuntimeError) as e:\n    error = type(e).__name__\n\
             for pid in started:\n    if pid:\n        os.kill(pid, signal.SIGKILL)\n        os.waitpid(pid, 0)\n\
             print(len(started), error)"
        );
        let result = kernel.execute(0, &source).await.unwrap();
        assert!(result.is_ok(), "{what}: {:?}", result.error);
        let (count, error) = result.stdout.text.trim().split_once(' ').unwrap();
        let count: u32 = count.parse().unwrap();
        assert_eq!(error, expected, "{what}: {}", result.stdout.text);
        // About 16: the user's count moves while the previous kernel's
        // processes die.
        assert!(count < 100, "{what}: {count} started");
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_process_limit_is_said_not_to_hold_for_root() {
    if !is_root() {
        return;
    }
    let kernel = Kernel::spawn(KernelConfig::default()).await.unwrap();
    assert!(
        kernel
            .info()
            .warnings
            .iter()
            .any(|w| w.contains("not enforced") && w.contains("root")),
        "{:?}",
        kernel.info().warnings
    );
}

#[tokio::test]
async fn output_over_the_cap_is_cut_and_counted_wherever_it_is_written() {
    let mut kernel = Kernel::spawn(KernelConfig::default()).await.unwrap();
    let cap = KernelConfig::default().output_cap;
    let cases = [
        (
            "for _ in range(10_000):\n    print('x' * 99)".to_owned(),
            1_000_000,
            false,
        ),
        (
            "import os\nos.write(1, b'y' * 2_000_000)".to_owned(),
            2_000_000,
            false,
        ),
        (
            "import subprocess\nsubprocess.run(['head', '-c', '3000000', '/dev/zero'], check=True)"
                .to_owned(),
            3_000_000,
            false,
        ),
        (
            "import sys\nsys.stderr.write('z' * 1_500_000)".to_owned(),
            1_500_000,
            true,
        ),
    ];
    for (cell, (source, total, stderr)) in (0..).zip(cases) {
        let result = kernel.execute(cell, &source).await.unwrap();
        assert!(result.is_ok(), "{source}: {:?}", result.error);
        let output = if stderr {
            &result.stderr
        } else {
            &result.stdout
        };
        assert_eq!(output.total_bytes, total, "{source}");
        assert!(output.truncated, "{source}");
        assert!(output.text.len() <= cap, "{source}: {}", output.text.len());
        assert!(output.to_string().contains("output truncated"), "{source}");
    }
}

#[tokio::test]
async fn cells_that_never_end_are_stopped_by_the_timeout() {
    let mut kernel = Kernel::spawn(KernelConfig {
        timeout: Some(Duration::from_secs(3)),
        ..KernelConfig::default()
    })
    .await
    .unwrap();
    let endless = [
        "while True: pass",
        "import time\ntime.sleep(3600)",
        "import threading\nthreading.Event().wait()",
        // C code that holds the interpreter lock.
        "sum(range(10 ** 14))",
    ];
    for (cell, source) in (0..).zip(endless) {
        let error = kernel.execute(cell, source).await.unwrap_err();
        // Restarted at once, or by the next cell if a loaded machine made
        // the new kernel late to greet.
        assert!(
            matches!(error, KernelError::Timeout { .. }),
            "{source}: {error:?}"
        );
        let next = kernel.execute(100 + cell, "print('next')").await.unwrap();
        assert_eq!(next.stdout.text, "next\n", "after {source}");
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_cell_waits_only_for_the_processes_it_started() {
    // The kernel's watchdog is no child of the kernel: `os.wait()` with
    // nothing started returns at once instead of waiting for it.
    let mut kernel = Kernel::spawn(KernelConfig {
        timeout: Some(Duration::from_secs(20)),
        ..KernelConfig::default()
    })
    .await
    .unwrap();
    let result = kernel
        .execute(
            0,
            "import os, subprocess\n\
             try:\n    os.wait()\nexcept ChildProcessError:\n    print('no child')\n\
             child = subprocess.Popen(['true'])\n\
             print(os.wait()[0] == child.pid)",
        )
        .await
        .unwrap();
    assert!(result.is_ok(), "{:?}", result.error);
    assert_eq!(result.stdout.text, "no child\nTrue\n");
}
