//! How a kernel is started: interpreter, limits, environment, sandbox prefix.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

/// Environment variable patterns removed from the kernel's environment by
/// default (case-insensitive; `*` matches any run of characters).
pub const DEFAULT_SCRUB_PATTERNS: &[&str] = &[
    "*_API_KEY",
    "*_APIKEY",
    "*_TOKEN",
    "*_SECRET",
    "*_SECRET_KEY",
    "*_SECRET_ACCESS_KEY",
    "*_PASSWORD",
    "*_PASSWD",
    "*_CREDENTIALS",
    "*_PRIVATE_KEY",
];

/// How to start and limit a [`Kernel`](super::Kernel).
///
/// ```
/// use std::time::Duration;
/// use harness_code::kernel::KernelConfig;
///
/// let config = KernelConfig {
///     timeout: Some(Duration::from_secs(30)),
///     memory_limit: Some(2 << 30),
///     command_prefix: vec!["nice".into(), "-n".into(), "5".into()],
///     ..KernelConfig::default()
/// };
/// assert!(config.scrub_patterns.iter().any(|p| p == "*_API_KEY"));
/// ```
///
/// `Debug` shows the names of [`env`](Self::env) but never their values.
#[derive(Clone)]
pub struct KernelConfig {
    /// The interpreter (default `python3`, looked up on `PATH`).
    pub python: PathBuf,
    /// Wall-clock limit per cell; on expiry the kernel is killed and
    /// restarted (default 60 s; `None`: no limit).
    pub timeout: Option<Duration>,
    /// How long the kernel may take to start and greet (default 20 s).
    pub startup_timeout: Duration,
    /// Address-space limit in bytes, set with `RLIMIT_AS` by the kernel
    /// before it runs any cell (default none).
    pub memory_limit: Option<u64>,
    /// The kernel's working directory (default: the caller's).
    pub working_dir: Option<PathBuf>,
    /// A command the kernel is started under, e.g. `["bwrap", "--ro-bind",
    /// "/", "/", "--"]` or `["prlimit", "--nproc=64"]`; the interpreter and
    /// its arguments are appended.
    pub command_prefix: Vec<OsString>,
    /// Bytes of each of stdout and stderr kept per cell (default 64 KiB);
    /// the rest is counted and dropped.
    pub output_cap: usize,
    /// Whether the kernel inherits this process's environment (minus the
    /// scrubbed variables and `PYTHON*`); default true.
    pub inherit_env: bool,
    /// Variables to set in the kernel's environment. They are scrubbed
    /// like inherited ones: a secret never reaches the kernel.
    pub env: Vec<(OsString, OsString)>,
    /// Patterns of variable names never passed to the kernel
    /// (default [`DEFAULT_SCRUB_PATTERNS`]).
    pub scrub_patterns: Vec<String>,
    /// Where the kernel writes and reads pickled values (a
    /// [`BlobStore`](crate::blobs::BlobStore) root); `None`: values
    /// are hashed but not stored.
    pub blob_dir: Option<PathBuf>,
    /// Values whose pickle is larger than this are not stored (marked
    /// unrestorable; restored by re-running their cell). Default 256 MiB.
    pub max_blob_bytes: u64,
    /// Record which names each cell reads at its own level, to check the
    /// static analysis (default true; costs a Python-level call per global
    /// lookup while cells run).
    pub check_reads: bool,
    /// Longest protocol line accepted from the kernel (default 64 MiB).
    pub max_message_bytes: usize,
}

impl Default for KernelConfig {
    fn default() -> Self {
        Self {
            python: PathBuf::from("python3"),
            timeout: Some(Duration::from_secs(60)),
            startup_timeout: Duration::from_secs(20),
            memory_limit: None,
            working_dir: None,
            command_prefix: Vec::new(),
            output_cap: 64 * 1024,
            inherit_env: true,
            env: Vec::new(),
            scrub_patterns: DEFAULT_SCRUB_PATTERNS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            blob_dir: None,
            max_blob_bytes: 256 << 20,
            check_reads: true,
            max_message_bytes: 64 << 20,
        }
    }
}

impl std::fmt::Debug for KernelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env_names: Vec<&OsStr> = self.env.iter().map(|(name, _)| name.as_os_str()).collect();
        f.debug_struct("KernelConfig")
            .field("python", &self.python)
            .field("timeout", &self.timeout)
            .field("startup_timeout", &self.startup_timeout)
            .field("memory_limit", &self.memory_limit)
            .field("working_dir", &self.working_dir)
            .field("command_prefix", &self.command_prefix)
            .field("output_cap", &self.output_cap)
            .field("inherit_env", &self.inherit_env)
            .field("env (names only)", &env_names)
            .field("scrub_patterns", &self.scrub_patterns)
            .field("blob_dir", &self.blob_dir)
            .field("max_blob_bytes", &self.max_blob_bytes)
            .field("check_reads", &self.check_reads)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish()
    }
}

impl KernelConfig {
    /// Whether a variable called `name` is kept from the kernel: it matches
    /// a scrub pattern, or it is a `PYTHON*` variable (the kernel sets its
    /// own `PYTHONHASHSEED`).
    ///
    /// ```
    /// use harness_code::kernel::KernelConfig;
    ///
    /// let config = KernelConfig::default();
    /// assert!(config.is_scrubbed("OPENAI_API_KEY".as_ref()));
    /// assert!(config.is_scrubbed("github_token".as_ref()));
    /// assert!(!config.is_scrubbed("HOME".as_ref()));
    /// ```
    pub fn is_scrubbed(&self, name: &OsStr) -> bool {
        let Some(name) = name.to_str() else {
            // Not UTF-8: cannot be checked against the patterns, so not passed.
            return true;
        };
        let upper = name.to_ascii_uppercase();
        upper.starts_with("PYTHON")
            || self
                .scrub_patterns
                .iter()
                .any(|pattern| glob_match(&pattern.to_ascii_uppercase(), &upper))
    }

    /// The environment the kernel is started with: the inherited variables
    /// (if [`inherit_env`](Self::inherit_env)) and [`env`](Self::env), minus
    /// scrubbed names, plus `PYTHONHASHSEED=0` so that pickles of sets and
    /// dicts of strings hash the same in every kernel.
    pub fn kernel_env(&self) -> Vec<(OsString, OsString)> {
        let inherited: Vec<(OsString, OsString)> = if self.inherit_env {
            std::env::vars_os().collect()
        } else {
            Vec::new()
        };
        self.env_from(inherited)
    }

    /// [`kernel_env`](Self::kernel_env) with `inherited` in place of this
    /// process's environment.
    pub fn env_from(
        &self,
        inherited: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = Vec::new();
        for (name, value) in inherited.into_iter().chain(self.env.iter().cloned()) {
            if self.is_scrubbed(&name) {
                continue;
            }
            env.retain(|(existing, _)| existing != &name);
            env.push((name, value));
        }
        env.push(("PYTHONHASHSEED".into(), "0".into()));
        env
    }
}

/// `*`-only glob matching (`*` matches any run, including an empty one).
fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, rest) = (parts[0], &parts[1..]);
    let Some(mut remaining) = text.strip_prefix(first) else {
        return false;
    };
    let last = rest.last().copied().unwrap_or("");
    for part in &rest[..rest.len() - 1] {
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*_TOKEN", "GITHUB_TOKEN"));
        assert!(!glob_match("*_TOKEN", "TOKEN"));
        assert!(glob_match("*KEY*", "MY_KEY_FILE"));
        assert!(glob_match("A*B*C", "AXXBYYC"));
        assert!(!glob_match("A*B*C", "AXXC"));
        assert!(glob_match("EXACT", "EXACT"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("AB*BA", "ABA"));
    }
}
