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
/// // Shell commands starting with `ls` or `cat ` run; others are asked about,
/// // and "always allow" remembers the command's program (`shell:git`).
/// let shell = Policy::allow_prefixes("command", ["ls", "cat "]).remember_by(|args| {
///     let program = args["command"].as_str().unwrap_or("").split_whitespace().next().unwrap_or("");
///     format!("shell:{program}")
/// });
/// assert_eq!(shell.judge(&json!({"command": "ls -la"})), Verdict::Allow);
/// assert_eq!(shell.judge(&json!({"command": "git push"})), Verdict::Ask);
/// assert_eq!(shell.allow_key("shell", &json!({"command": "git push"})), "shell:git");
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
