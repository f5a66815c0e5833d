//! What the process that runs kernels (the host) does to itself so that
//! its kernels cannot read it.

/// Makes this process non-dumpable, so that other processes of the same
/// user, such as a kernel and whatever its cells start, cannot read its
/// environment, memory or open files through `/proc/<pid>/environ`,
/// `/proc/<pid>/mem` and `/proc/<pid>/fd/`, nor attach to it with
/// `ptrace` (Linux: `prctl(PR_SET_DUMPABLE, 0)`).
///
/// [`Kernel::spawn`](super::Kernel::spawn) calls it before it starts a
/// kernel unless [`KernelConfig::protect_host`](super::KernelConfig::protect_host)
/// is false; an application may call it first thing in `main`, before it
/// starts any other process.
///
/// The effect is for the whole process (every thread) and lasts until it
/// exits or runs another program: it produces no core dump, and a debugger
/// or profiler of the same user cannot attach to it (root still can). A
/// process's command line (`/proc/<pid>/cmdline`) stays readable by
/// everyone: never put a secret in arguments.
///
/// Processes started with root's capabilities read any process whatever
/// this flag says; a kernel drops its capabilities for that reason
/// ([`KernelConfig::drop_privileges`](super::KernelConfig::drop_privileges)).
///
/// # Errors
///
/// The operating system's error; [`std::io::ErrorKind::Unsupported`]
/// elsewhere than on Linux and Android.
///
/// ```
/// # #[cfg(target_os = "linux")]
/// harness_code::kernel::protect_host().unwrap();
/// ```
pub fn protect_host() -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::process::{DumpableBehavior, set_dumpable_behavior};
        set_dumpable_behavior(DumpableBehavior::NotDumpable).map_err(std::io::Error::from)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a process cannot make itself non-dumpable on this system",
        ))
    }
}
