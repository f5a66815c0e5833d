//! Per-tool approval policies.

use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// What a policy says of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Ask a person (unless the session's allow-list has the call's key).
    Ask,
    /// Do not run it; the reason goes to the model as the call's result.
    Deny(String),
}

type Judge = Arc<dyn Fn(&Value) -> Verdict + Send + Sync>;
type Key = Arc<dyn Fn(&Value) -> String + Send + Sync>;

/// Whether calls of one tool run, are asked about, or are refused.
///
/// ```
/// use harness_kit::{Policy, Verdict};
/// use serde_json::json;
///
/// // `ls` and `git status` (with any further arguments) run; other
/// // commands are asked about, and "always allow" remembers the exact
/// // command line; a line with `;`, `|`, `$(…)` or a redirection is refused.
/// let shell = Policy::allow_commands("command", ["ls", "git status"])
///     .remember_by(harness_kit::shell::allow_key);
/// assert_eq!(shell.judge(&json!({"command": "ls -la"})), Verdict::Allow);
/// assert_eq!(shell.judge(&json!({"command": "git status --short"})), Verdict::Allow);
/// assert_eq!(shell.judge(&json!({"command": "git push"})), Verdict::Ask);
/// assert_eq!(shell.judge(&json!({"command": "lsblk"})), Verdict::Ask);
/// assert!(matches!(shell.judge(&json!({"command": "ls; rm -rf ~"})), Verdict::Deny(_)));
/// assert_eq!(shell.allow_key("shell", &json!({"command": "git push"})), "shell: git push");
/// ```
#[derive(Clone)]
pub struct Policy {
    judge: Judge,
    key: Option<Key>,
    label: &'static str,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("kind", &self.label)
            .field("remember_by", &self.key.is_some())
            .finish()
    }
}

impl Policy {
    /// Every call runs.
    pub fn allow() -> Self {
        Self::when_labelled("allow", |_| Verdict::Allow)
    }

    /// Every call is asked about (unless always allowed in the session).
    pub fn ask() -> Self {
        Self::when_labelled("ask", |_| Verdict::Ask)
    }

    /// No call runs; the model is told the tool is not allowed.
    pub fn deny() -> Self {
        Self::when_labelled("deny", |_| {
            Verdict::Deny("this tool is not allowed here; do without it".into())
        })
    }

    /// A verdict from the call's arguments.
    pub fn when(judge: impl Fn(&Value) -> Verdict + Send + Sync + 'static) -> Self {
        Self::when_labelled("predicate", judge)
    }

    fn when_labelled(
        label: &'static str,
        judge: impl Fn(&Value) -> Verdict + Send + Sync + 'static,
    ) -> Self {
        Self {
            judge: Arc::new(judge),
            key: None,
            label,
        }
    }

    /// Calls whose string argument `field` starts with one of `prefixes`
    /// run; the others are asked about.
    ///
    /// This matches text, not commands: `"ls"` also matches `lsblk` and
    /// `ls; rm -rf ~`. For a shell command use
    /// [`allow_commands`](Self::allow_commands).
    pub fn allow_prefixes<I, P>(field: impl Into<String>, prefixes: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        let field = field.into();
        let prefixes: Vec<String> = prefixes.into_iter().map(Into::into).collect();
        Self::when_labelled("prefixes", move |args| {
            let text = args.get(&field).and_then(Value::as_str).unwrap_or("");
            if prefixes.iter().any(|p| text.starts_with(p.as_str())) {
                Verdict::Allow
            } else {
                Verdict::Ask
            }
        })
    }

    /// Shell commands in the string argument `field`, parsed as one
    /// [`CommandLine`](crate::shell::CommandLine): those whose argv starts
    /// with the argv of one of `commands` (whole words: `"git status"`
    /// allows `git status --short`, not `git stash`) run; other commands
    /// are asked about; a line that is not one plain command (`;`, `&&`,
    /// `|`, `$(…)`, a redirection) is refused with the reason, for the
    /// model. An entry of `commands` that is not one plain command itself
    /// allows nothing.
    pub fn allow_commands<I, C>(field: impl Into<String>, commands: I) -> Self
    where
        I: IntoIterator<Item = C>,
        C: AsRef<str>,
    {
        let field = field.into();
        let commands: Vec<Vec<String>> = commands
            .into_iter()
            .filter_map(|c| crate::shell::CommandLine::parse(c.as_ref()).ok())
            .map(|c| c.argv().to_vec())
            .collect();
        Self::when_labelled("commands", move |args| {
            let text = args.get(&field).and_then(Value::as_str).unwrap_or("");
            match crate::shell::CommandLine::parse(text) {
                Err(e) => Verdict::Deny(e.to_string()),
                Ok(line) => {
                    let argv = line.argv();
                    let allowed = commands.iter().any(|prefix| {
                        !prefix.is_empty()
                            && argv.len() >= prefix.len()
                            && argv.iter().zip(prefix).all(|(a, p)| a == p)
                    });
                    if allowed {
                        Verdict::Allow
                    } else {
                        Verdict::Ask
                    }
                }
            }
        })
    }

    /// What "always allow" remembers for a call: by default the tool's name
    /// (every later call of the tool runs); with this, `key(arguments)`, so
    /// that only calls with the same key run unasked.
    #[must_use]
    pub fn remember_by(mut self, key: impl Fn(&Value) -> String + Send + Sync + 'static) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// The policy's verdict on a call with `arguments`.
    pub fn judge(&self, arguments: &Value) -> Verdict {
        (self.judge)(arguments)
    }

    /// The allow-list key of a call of `tool` with `arguments`.
    pub fn allow_key(&self, tool: &str, arguments: &Value) -> String {
        match &self.key {
            Some(key) => key(arguments),
            None => tool.to_owned(),
        }
    }
}
