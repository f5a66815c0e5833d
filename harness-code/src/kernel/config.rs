//! How a kernel is started: interpreter, limits, environment, sandbox prefix.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

/// Inherited variables the kernel is given by default
/// ([`KernelConfig::pass_env`]); every other inherited variable is left out.
/// Case-insensitive; `*` matches any run of characters.
///
/// They locate things and set the locale, the terminal, temporary files,
/// thread counts of numeric libraries, certificate bundles and proxies;
/// none is a credential by itself (a proxy URL with a password in it is
/// removed by [`KernelConfig::scrub_credential_values`]).
pub const DEFAULT_PASS_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "COLUMNS",
    "LINES",
    "TMPDIR",
    "TMP",
    "TEMP",
    "LD_LIBRARY_PATH",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "VIRTUAL_ENV",
    "MPLBACKEND",
    "MPLCONFIGDIR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
];

/// Variable names never given to the kernel, whether inherited (even when
/// [`KernelConfig::pass_env`] lets them through) or set in
/// [`KernelConfig::env`]. Case-insensitive; `*` matches any run of
/// characters.
///
/// Broad on purpose: what a credential is called varies (`PGPASSWORD`,
/// `AZURE_OPENAI_KEY`, `REDISCLI_AUTH`, `SSH_AUTH_SOCK`), and a variable
/// removed by mistake is a smaller harm than a secret handed to
/// model-written code.
pub const DEFAULT_SCRUB_PATTERNS: &[&str] = &[
    "*KEY*",
    "*TOKEN*",
    "*SECRET*",
    "*PASS*",
    "*PWD*",
    "*CRED*",
    "*AUTH*",
    "*PRIVATE*",
    "*COOKIE*",
    "*SESSION*",
    "*SIGNATURE*",
    "*_DSN",
    "*DATABASE_URL*",
    "*CONNECTION_STRING*",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_*",
    "GCLOUD_*",
    "SSH_*",
    "GPG_*",
    "GNUPGHOME",
    "KRB5*",
    "VAULT_*",
    "KUBECONFIG",
    "DOCKER_*",
    "DBUS_*",
    "XAUTHORITY",
];

/// Default [`KernelConfig::memory_limit`]: 8 GiB of address space.
pub const DEFAULT_MEMORY_LIMIT: u64 = 8 << 30;

/// Default [`KernelConfig::process_limit`]: 1024 more processes and
/// threads than the kernel's user runs when the kernel starts.
pub const DEFAULT_PROCESS_LIMIT: u32 = 1024;

/// How to start and limit a [`Kernel`](super::Kernel).
///
/// The defaults are limits and protections a user can lift field by
/// field; see the crate docs' trust boundary for what they do and do not
/// guarantee.
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
/// assert!(config.scrub_patterns.iter().any(|p| p == "*KEY*"));
/// assert!(config.pass_env.iter().any(|p| p == "PATH"));
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
    /// Address-space limit in bytes, set with `RLIMIT_AS` (soft and hard)
    /// by the kernel before it runs any cell; a cell over it gets a
    /// `MemoryError` (default [`DEFAULT_MEMORY_LIMIT`], 8 GiB; `None`: no
    /// limit). It counts address space reserved, not memory used: raise it
    /// for libraries that reserve large ranges up front (CUDA, some JITs).
    /// A lower limit already in force is kept.
    pub memory_limit: Option<u64>,
    /// How many more processes and threads the kernel's user may run once
    /// the kernel has started: the kernel sets `RLIMIT_NPROC` (soft and
    /// hard) to the number of tasks its user runs at that moment plus this,
    /// so that a cell that forks without end gets `BlockingIOError`
    /// (default [`DEFAULT_PROCESS_LIMIT`]; `None`: no limit). Linux counts
    /// the limit per user, so the user's other programs use the same
    /// headroom, and does not apply it to root: the kernel says so in
    /// [`KernelInfo::warnings`](super::KernelInfo::warnings). A lower limit
    /// already in force is kept.
    pub process_limit: Option<u32>,
    /// The kernel's working directory (default: the caller's).
    pub working_dir: Option<PathBuf>,
    /// A command the kernel is started under, e.g. `["bwrap", "--ro-bind",
    /// "/", "/", "--"]` or `["prlimit", "--nproc=64"]`; the interpreter and
    /// its arguments are appended.
    pub command_prefix: Vec<OsString>,
    /// Bytes of each of stdout and stderr kept per cell (default 64 KiB);
    /// the rest is counted and dropped.
    pub output_cap: usize,
    /// Whether the kernel inherits the variables of this process's
    /// environment that [`pass_env`](Self::pass_env) names (default true).
    pub inherit_env: bool,
    /// Inherited variables passed to the kernel, as patterns
    /// (case-insensitive, `*` for any run of characters; default
    /// [`DEFAULT_PASS_ENV`]). Every other inherited variable is left out;
    /// give one the kernel needs in [`env`](Self::env) or add its name here.
    /// `["*"]` passes everything that is not scrubbed.
    pub pass_env: Vec<String>,
    /// Variables to set in the kernel's environment. They are scrubbed
    /// like inherited ones ([`scrub_patterns`](Self::scrub_patterns),
    /// [`scrub_credential_values`](Self::scrub_credential_values)): to give
    /// a cell a secret on purpose, remove the pattern that matches it.
    pub env: Vec<(OsString, OsString)>,
    /// Patterns of variable names never passed to the kernel, inherited or
    /// set (default [`DEFAULT_SCRUB_PATTERNS`]). `PYTHON*` variables are
    /// never passed either, whatever the patterns.
    pub scrub_patterns: Vec<String>,
    /// Leave out every variable, inherited or set, whose value looks like
    /// it carries a credential: a URL with user information
    /// (`postgres://user:password@host`, `https://token@host`) or a
    /// `password=` or `pwd=` parameter (default true).
    pub scrub_credential_values: bool,
    /// Keep the kernel from reading this process: on Linux the process is
    /// made non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`) before the kernel
    /// starts, so that processes of the same user (the kernel, and what its
    /// cells start) can neither read its `/proc/<pid>/environ`, `mem` or
    /// `fd/` nor attach to it with `ptrace` (default true). The side
    /// effect is for the whole process and lasts until it exits or execs:
    /// no core dumps, and a debugger of the same user cannot attach to it.
    /// See [`protect_host`](super::protect_host).
    pub protect_host: bool,
    /// The kernel drops every capability (bounding set included, when it
    /// may) and sets `no_new_privs` before any cell runs, so that a cell
    /// gains no privilege from `setuid` programs (`sudo`) or file
    /// capabilities, and, started by root, cannot read processes that keep
    /// theirs (default true). A kernel of root then has the file access
    /// of its user id alone: other users' files are as closed to it as
    /// their permissions say. What cannot be dropped is reported in
    /// [`KernelInfo::warnings`](super::KernelInfo::warnings).
    pub drop_privileges: bool,
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
    /// Record what each cell did ([`CellTrace`](super::CellTrace), default
    /// true): every global it reads (through the functions it calls too),
    /// what it binds and deletes, which existing values it changes in place
    /// (by fingerprinting the namespace's values after each cell, bounded
    /// per value), the files it opens and the modules it imports. The
    /// notebook's dependency graph adds what a run did to what the static
    /// analysis says.
    pub trace: bool,
    /// Longest protocol line accepted from the kernel (default 64 MiB).
    pub max_message_bytes: usize,
}

fn owned(patterns: &[&str]) -> Vec<String> {
    patterns.iter().map(|p| (*p).to_owned()).collect()
}

impl Default for KernelConfig {
    fn default() -> Self {
        Self {
            python: PathBuf::from("python3"),
            timeout: Some(Duration::from_secs(60)),
            startup_timeout: Duration::from_secs(20),
            memory_limit: Some(DEFAULT_MEMORY_LIMIT),
            process_limit: Some(DEFAULT_PROCESS_LIMIT),
            working_dir: None,
            command_prefix: Vec::new(),
            output_cap: 64 * 1024,
            inherit_env: true,
            pass_env: owned(DEFAULT_PASS_ENV),
            env: Vec::new(),
            scrub_patterns: owned(DEFAULT_SCRUB_PATTERNS),
            scrub_credential_values: true,
            protect_host: true,
            drop_privileges: true,
            blob_dir: None,
            max_blob_bytes: 256 << 20,
            check_reads: true,
            trace: true,
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
            .field("process_limit", &self.process_limit)
            .field("working_dir", &self.working_dir)
            .field("command_prefix", &self.command_prefix)
            .field("output_cap", &self.output_cap)
            .field("inherit_env", &self.inherit_env)
            .field("pass_env", &self.pass_env)
            .field("env (names only)", &env_names)
            .field("scrub_patterns", &self.scrub_patterns)
            .field("scrub_credential_values", &self.scrub_credential_values)
            .field("protect_host", &self.protect_host)
            .field("drop_privileges", &self.drop_privileges)
            .field("blob_dir", &self.blob_dir)
            .field("max_blob_bytes", &self.max_blob_bytes)
            .field("check_reads", &self.check_reads)
            .field("trace", &self.trace)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish()
    }
}

impl KernelConfig {
    /// Whether a variable called `name` is kept from the kernel whatever
    /// its value and origin: it matches a scrub pattern, it is a `PYTHON*`
    /// variable (the kernel sets its own `PYTHONHASHSEED`), or it is not
    /// UTF-8.
    ///
    /// ```
    /// use harness_code::kernel::KernelConfig;
    ///
    /// let config = KernelConfig::default();
    /// for name in ["OPENAI_API_KEY", "github_token", "PGPASSWORD", "AZURE_OPENAI_KEY", "SSH_AUTH_SOCK"] {
    ///     assert!(config.is_scrubbed(name.as_ref()), "{name}");
    /// }
    /// assert!(!config.is_scrubbed("HOME".as_ref()));
    /// ```
    pub fn is_scrubbed(&self, name: &OsStr) -> bool {
        let Some(name) = name.to_str() else {
            // Not UTF-8: cannot be checked against the patterns, so not passed.
            return true;
        };
        let upper = name.to_ascii_uppercase();
        upper.starts_with("PYTHON") || matches_any(&self.scrub_patterns, &upper)
    }

    /// Whether an inherited variable called `name` reaches the kernel (if
    /// its value carries no credential): [`inherit_env`](Self::inherit_env)
    /// is set, [`pass_env`](Self::pass_env) names it and it is not
    /// [scrubbed](Self::is_scrubbed).
    ///
    /// ```
    /// use harness_code::kernel::KernelConfig;
    ///
    /// let config = KernelConfig::default();
    /// assert!(config.inherits("PATH".as_ref()));
    /// assert!(config.inherits("LC_ALL".as_ref()));
    /// // Neither a known credential nor on the list: left out all the same.
    /// assert!(!config.inherits("MY_APP_SETTING".as_ref()));
    /// ```
    pub fn inherits(&self, name: &OsStr) -> bool {
        let Some(text) = name.to_str() else {
            return false;
        };
        self.inherit_env
            && matches_any(&self.pass_env, &text.to_ascii_uppercase())
            && !self.is_scrubbed(name)
    }

    /// The environment the kernel is started with: the inherited variables
    /// it [inherits](Self::inherits) and [`env`](Self::env) minus scrubbed
    /// names and, with [`scrub_credential_values`](Self::scrub_credential_values),
    /// values that carry a credential; plus `PYTHONHASHSEED=0` so that
    /// pickles of sets and dicts of strings hash the same in every kernel.
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
        let inherited = inherited
            .into_iter()
            .filter(|(name, _)| self.inherits(name));
        let set = self
            .env
            .iter()
            .filter(|(name, _)| !self.is_scrubbed(name))
            .cloned();
        let mut env: Vec<(OsString, OsString)> = Vec::new();
        for (name, value) in inherited.chain(set) {
            env.retain(|(existing, _)| existing != &name);
            if self.scrub_credential_values && carries_credential(&value) {
                continue;
            }
            env.push((name, value));
        }
        env.push(("PYTHONHASHSEED".into(), "0".into()));
        env
    }

    /// The names of [`env`](Self::env) that the kernel will not get
    /// (scrubbed by name or by value).
    pub fn scrubbed_env(&self) -> Vec<&OsStr> {
        self.env
            .iter()
            .filter(|(name, value)| {
                self.is_scrubbed(name)
                    || (self.scrub_credential_values && carries_credential(value))
            })
            .map(|(name, _)| name.as_os_str())
            .collect()
    }
}

fn matches_any(patterns: &[String], upper: &str) -> bool {
    patterns
        .iter()
        .any(|pattern| glob_match(&pattern.to_ascii_uppercase(), upper))
}

/// Whether `value` holds a URL with user information (`scheme://user@`,
/// `scheme://user:password@`, `scheme://:password@`) or a `password=`,
/// `passwd=` or `pwd=` parameter (a query string, a connection string).
fn carries_credential(value: &OsStr) -> bool {
    let bytes = value.as_encoded_bytes();
    let url_with_user = bytes.windows(3).enumerate().any(|(at, window)| {
        window == b"://"
            && bytes[at + 3..]
                .iter()
                .take_while(|&&b| {
                    !matches!(b, b'/' | b'?' | b'#' | b',' | b';') && !b.is_ascii_whitespace()
                })
                .any(|&b| b == b'@')
    });
    if url_with_user {
        return true;
    }
    let lower = bytes.to_ascii_lowercase();
    ["password=", "passwd=", "pwd="].iter().any(|key| {
        let key = key.as_bytes();
        lower.windows(key.len()).enumerate().any(|(at, window)| {
            window == key && (at == 0 || !lower[at - 1].is_ascii_alphanumeric())
        })
    })
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
