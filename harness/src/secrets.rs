//! Secrets redacted by value wherever text leaves the process.
//!
//! The process holds secrets: the API keys of its model providers, and the
//! tokens and passwords in its environment. A model that reads
//! `/proc/self/environ` or runs `env`, a provider whose 401 answer quotes
//! the key, a tool that prints a configuration file: each puts one of those
//! values into text that then goes to a model, a session store, a trace or
//! a terminal. Names are no guard there (the text has none), so the values
//! themselves are looked for and replaced with [`REDACTED`].
//!
//! # What is a secret
//!
//! One process-wide set of values:
//! - every [`register`]ed value (`harness_provider_http::ApiKey` registers
//!   its key when it is made, so every provider key is in the set);
//! - at the first use of this module (or at [`register_environment`]), the
//!   value of every environment variable whose name
//!   [looks secret](is_secret_name): `OPENAI_API_KEY`, `GITHUB_TOKEN`,
//!   `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`, `DB_PASS`, `*CREDENTIAL*`, …
//!   Values that are absolute paths (`GOOGLE_APPLICATION_CREDENTIALS=/…`)
//!   name where a secret is, not the secret, and are left out. A variable
//!   set after the first use is not seen: call [`register_environment`]
//!   again, or [`register`] its value.
//!
//! A value shorter than [`MIN_SECRET_LEN`] bytes (8) is not registered:
//! replacing every `true`, `1234` or `admin` in a transcript would mangle
//! ordinary text and hide nothing worth hiding. A value is registered
//! trimmed, and also in the forms JSON gives it when they differ, so that a
//! secret with a quote, a backslash, a control character or a non-ASCII
//! character is found inside JSON text too:
//! - escaped once, as in a JSON string (`pa"ss` → `pa\"ss`): a tool's JSON
//!   output, a model's answer quoting a configuration, a state snapshot;
//! - escaped twice, as in JSON text that is itself held in a JSON string
//!   (`pa\\\"ss`): the configuration a model wrote in its answer, once
//!   that answer is serialized into a trace attribute or a store.
//!
//! Both with non-ASCII characters kept (serde_json, JavaScript) and with
//! them written as `\u00e4` or `\u00E4` escapes (Python's `json.dumps`,
//! .NET), at either level. Deeper nestings, and escapes JSON does not require
//! (`\/` for `/`, `\u002B` for `+`), are not looked for. A secret without
//! such characters has one form, itself, and costs nothing more.
//!
//! # Where it is applied
//!
//! - Model errors: `harness-provider-http` redacts every
//!   [`ModelError`](crate::llm::ModelError) built from a server's answer
//!   (status errors with their body, error events in streams, unparsable
//!   bodies quoted in the message), and the request bodies it sends.
//! - Tool results: [`ToolSet::dispatch`](crate::llm::ToolSet::dispatch)
//!   redacts what a tool returns and the message of a tool's failure, so
//!   every loop that runs tools through a `ToolSet` (the kit's agents and
//!   [`Cx::call_tool`](crate::Cx::call_tool) included) feeds the model, the
//!   state and the observers the redacted text.
//! - Session stores: the engine redacts the JSON of every state snapshot and
//!   step update it commits.
//! - Traces: `harness-otel` redacts every string attribute, event attribute,
//!   span name and status message before export, and exports a number
//!   attribute whose digits hold a secret as its redacted text.
//! - Panics: a step's panic is its error, redacted; and once a secret is
//!   registered, the process's panic hook is wrapped so that a panic
//!   message holding one is printed redacted (Rust prints a panic's message
//!   to standard error before anything catches it). Other panics go to the
//!   hook that was there (yours, if you set one before); a hook set after
//!   the first secret replaces the wrapper.
//!
//! # Cost
//!
//! With no secret registered, [`redact`] is two atomic loads and returns
//! the text [borrowed](Cow::Borrowed). With secrets, it is one pass of an
//! Aho-Corasick automaton (rebuilt when a value is registered) over the
//! text, and still borrowed when nothing matched. A secret with characters
//! JSON escapes adds its JSON forms to the automaton (2 more patterns for a
//! quote or a backslash, up to 8 with non-ASCII characters too); one
//! without adds only itself.
//!
//! ```
//! use harness::secrets::{self, SecretSet};
//!
//! // The process-wide set.
//! secrets::register("sk-doc-example-0123456789");
//! let said = secrets::redact("401: invalid key sk-doc-example-0123456789");
//! assert_eq!(said, "401: invalid key [redacted]");
//!
//! // A set of one's own, e.g. for a component that must not share one.
//! let mut set = SecretSet::new();
//! assert!(!set.register("short")); // under MIN_SECRET_LEN: ignored
//! assert!(set.register("hunter2hunter2"));
//! let mut json = serde_json::json!({"hunter2hunter2": ["pw=hunter2hunter2"]});
//! assert!(set.redact_json(&mut json));
//! assert_eq!(json, serde_json::json!({"[redacted]": ["pw=[redacted]"]}));
//! ```

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, PoisonError, RwLock, RwLockReadGuard};

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// The shortest value, in bytes, that is registered as a secret. Shorter
/// values are ignored so that redaction cannot mangle ordinary text.
pub const MIN_SECRET_LEN: usize = 8;

/// A set of secret values and the automaton that finds them in text.
///
/// The process has one, behind [`register`] and [`redact`]; a `SecretSet`
/// of one's own is for a component (or a test) that must not share it. Its
/// `Debug` output shows how many values it holds, never the values.
#[derive(Clone, Default)]
pub struct SecretSet {
    values: BTreeSet<String>,
    matcher: Option<AhoCorasick>,
}

impl fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretSet")
            .field("values", &self.values.len())
            .finish()
    }
}

impl SecretSet {
    /// An empty set.
    pub const fn new() -> Self {
        Self {
            values: BTreeSet::new(),
            matcher: None,
        }
    }

    /// Adds `value` (trimmed), and the forms JSON gives it when they differ
    /// (escaped once and twice, non-ASCII characters kept or `\u`-escaped;
    /// see the [module's documentation](self)). False, and nothing added,
    /// for a value shorter than [`MIN_SECRET_LEN`] bytes or one that
    /// [`REDACTED`] contains (which redacting would then redact again).
    pub fn register(&mut self, value: &str) -> bool {
        let value = value.trim();
        if value.len() < MIN_SECRET_LEN || REDACTED.contains(value) {
            return false;
        }
        let mut added = false;
        for form in json_forms(value) {
            added |= self.values.insert(form);
        }
        if added {
            self.rebuild();
        }
        true
    }

    /// How many values the set holds (JSON forms included).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the set holds no value.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether `text` contains a value of the set.
    pub fn contains_secret(&self, text: &str) -> bool {
        self.matcher
            .as_ref()
            .is_some_and(|m| m.find_overlapping_iter(text).next().is_some())
    }

    /// `text` with every occurrence of every value replaced by
    /// [`REDACTED`]; borrowed when there was none. Occurrences that overlap
    /// (two secrets sharing characters, one inside another) are replaced
    /// together by one marker, so no part of either is left.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match &self.matcher {
            Some(matcher) if text.len() >= MIN_SECRET_LEN => redact_with(matcher, text),
            _ => Cow::Borrowed(text),
        }
    }

    /// Redacts `text` in place; whether anything was replaced.
    pub fn redact_string(&self, text: &mut String) -> bool {
        match self.redact(text) {
            Cow::Owned(redacted) => {
                *text = redacted;
                true
            }
            Cow::Borrowed(_) => false,
        }
    }

    /// Redacts every string in `value` in place, object keys included (a
    /// map keyed by a token holds it as much as a value would; two keys
    /// that become the same keep their values apart as `[redacted]` and
    /// `[redacted]#2`); whether anything was replaced.
    pub fn redact_json(&self, value: &mut Value) -> bool {
        if self.matcher.is_none() {
            return false;
        }
        let mut changed = false;
        // A stack rather than recursion: a value may nest deeper than the
        // thread's stack allows.
        let mut stack = vec![value];
        while let Some(value) = stack.pop() {
            match value {
                Value::String(text) => changed |= self.redact_string(text),
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(fields) => {
                    let matcher = self.matcher.as_ref();
                    if fields
                        .keys()
                        .any(|k| matcher.is_some_and(|m| m.is_match(k)))
                    {
                        changed = true;
                        for (mut key, field) in std::mem::take(fields) {
                            self.redact_string(&mut key);
                            let mut unique = key.clone();
                            let mut n = 2;
                            while fields.contains_key(&unique) {
                                unique = format!("{key}#{n}");
                                n += 1;
                            }
                            fields.insert(unique, field);
                        }
                    }
                    stack.extend(fields.values_mut());
                }
                Value::Null | Value::Bool(_) | Value::Number(_) => {}
            }
        }
        changed
    }

    fn rebuild(&mut self) {
        // Standard semantics: every occurrence of every value is reported,
        // overlapping ones included.
        match AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(&self.values)
        {
            Ok(matcher) => self.matcher = Some(matcher),
            // Only a set too large for the automaton's limits fails; the
            // previous automaton keeps redacting what it knew.
            Err(e) => tracing::error!(
                error = %e,
                values = self.values.len(),
                "the secret set is too large to search; newly registered secrets are not redacted"
            ),
        }
    }
}

/// How a JSON encoder writes a character outside ASCII.
#[derive(Clone, Copy)]
enum NonAscii {
    /// As it is (serde_json, JavaScript's `JSON.stringify`, Go).
    Kept,
    /// As `\u` escapes of its UTF-16 units in lowercase hex (Python's
    /// `json.dumps`).
    Lower,
    /// In uppercase hex (.NET's `System.Text.Json`).
    Upper,
}

/// `value` as it appears between the quotes of a JSON string: `"`, `\` and
/// control characters escaped as every encoder does (the short escapes
/// `\n`, `\t`, … where JSON has one), non-ASCII characters as `non_ascii`
/// says.
fn json_escaped(value: &str, non_ascii: NonAscii) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(value.len() + 8);
    let hex = |out: &mut String, unit: u16| {
        // Writing to a String cannot fail.
        let _ = match non_ascii {
            NonAscii::Upper => write!(out, "\\u{unit:04X}"),
            NonAscii::Kept | NonAscii::Lower => write!(out, "\\u{unit:04x}"),
        };
    };
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < ' ' => hex(&mut out, c as u16),
            c if c.is_ascii() || matches!(non_ascii, NonAscii::Kept) => out.push(c),
            c => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    hex(&mut out, *unit);
                }
            }
        }
    }
    out
}

/// `value` and the forms JSON gives it, each once: escaped once and twice,
/// by encoders that keep non-ASCII characters or escape them in either
/// case, mixed as nested encoders may mix them. Just `value` when it has
/// no character JSON escapes: the common case adds no pattern.
fn json_forms(value: &str) -> BTreeSet<String> {
    const ENCODERS: [NonAscii; 3] = [NonAscii::Kept, NonAscii::Lower, NonAscii::Upper];
    let mut forms = BTreeSet::from([value.to_owned()]);
    if !value
        .chars()
        .any(|c| matches!(c, '"' | '\\') || c < ' ' || !c.is_ascii())
    {
        return forms;
    }
    for inner in ENCODERS {
        let once = json_escaped(value, inner);
        for outer in ENCODERS {
            forms.insert(json_escaped(&once, outer));
        }
        forms.insert(once);
    }
    forms
}

fn redact_with<'t>(matcher: &AhoCorasick, text: &'t str) -> Cow<'t, str> {
    let mut found = matcher.find_overlapping_iter(text);
    let Some(first) = found.next() else {
        return Cow::Borrowed(text);
    };
    let mut spans: Vec<(usize, usize)> = std::iter::once(first)
        .chain(found)
        .map(|m| (m.start(), m.end()))
        .collect();
    // Reported by where they end; merged by where they start.
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut spans = spans.into_iter().peekable();
    while let Some((start, mut end)) = spans.next() {
        while let Some(&(next_start, next_end)) = spans.peek() {
            if next_start >= end {
                break;
            }
            end = end.max(next_end);
            spans.next();
        }
        // The values and the text are UTF-8, so a match starts and ends on
        // character boundaries.
        out.push_str(&text[copied..start]);
        out.push_str(REDACTED);
        copied = end;
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// The process's set.
static GLOBAL: RwLock<SecretSet> = RwLock::new(SecretSet::new());
/// Whether [`GLOBAL`] holds a value: the check that keeps [`redact`] free
/// when it does not.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The environment is read once, at the first use.
static ENVIRONMENT: Once = Once::new();

fn global() -> RwLockReadGuard<'static, SecretSet> {
    GLOBAL.read().unwrap_or_else(PoisonError::into_inner)
}

/// The process's set, if it holds a value (reading the environment first,
/// once).
fn active() -> Option<RwLockReadGuard<'static, SecretSet>> {
    ENVIRONMENT.call_once(|| {
        environment();
    });
    if !ACTIVE.load(Ordering::Acquire) {
        return None;
    }
    // Not inside `call_once`: a panic hook of the application's that
    // redacts would wait on the `Once` while this waited on the hook.
    redact_panics();
    Some(global())
}

/// Adds `value` to the process's secrets (see [`SecretSet::register`]):
/// from now on every redaction replaces it. False, and nothing added, for a
/// value under [`MIN_SECRET_LEN`] bytes.
pub fn register(value: &str) -> bool {
    let registered = add(value);
    if registered {
        redact_panics();
    }
    registered
}

/// [`register`] without wrapping the panic hook.
fn add(value: &str) -> bool {
    let mut set = GLOBAL.write().unwrap_or_else(PoisonError::into_inner);
    let registered = set.register(value);
    if registered {
        ACTIVE.store(true, Ordering::Release);
    }
    registered
}

/// The panic hook is wrapped once, when the first secret is registered.
static PANIC_HOOK: Once = Once::new();

/// Wraps the process's panic hook so that a panic whose message holds a
/// secret is reported with it redacted.
///
/// The loop catches a step's panic and redacts its message, but Rust's
/// panic hook has printed it to standard error by then (`thread '…'
/// panicked at …: boom with sk-…`), whatever catches it. The wrapper
/// leaves every other panic to the hook it found (the default one, or the
/// application's own, set before the first secret): only a message that
/// holds a secret is printed by it instead, as the default hook prints
/// one, redacted (and with a backtrace when `RUST_BACKTRACE` asks for
/// one); the hook it found is not called for that panic, as it would
/// print or report the secret. A hook the application sets later
/// replaces the wrapper.
///
/// Installed by [`register`] and [`register_environment`] once they have
/// let go of the set, and by the first redaction after the environment
/// was read, never inside that read (a hook of the application's that
/// redacts, running on a panicking thread meanwhile, would wait for the
/// read while the read waited for the hook).
fn redact_panics() {
    // `set_hook` may not be called while this thread panics.
    if std::thread::panicking() {
        return;
    }
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let Some(message) = info.payload_as_str() else {
                return previous(info);
            };
            // Not `read`: a panic while this thread registers a secret
            // holds the lock for writing.
            let set = match GLOBAL.try_read() {
                Ok(set) => Some(set),
                Err(std::sync::TryLockError::Poisoned(set)) => Some(set.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            let redacted = match set {
                Some(set) => match set.redact(message) {
                    Cow::Borrowed(_) => None,
                    Cow::Owned(redacted) => Some(redacted),
                },
                None => Some("[a message withheld: the secrets were being updated]".into()),
            };
            let Some(redacted) = redacted else {
                return previous(info);
            };
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("<unnamed>");
            let at = info
                .location()
                .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_default();
            let backtrace = std::backtrace::Backtrace::capture();
            let trace = match backtrace.status() {
                std::backtrace::BacktraceStatus::Captured => {
                    format!("stack backtrace:\n{backtrace}")
                }
                _ => {
                    "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"
                        .into()
                }
            };
            // One write, as the default hook makes, so that threads
            // panicking at once do not interleave.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("\nthread '{name}' panicked{at}:\n{redacted}\n{trace}\n").as_bytes(),
            );
        }));
    });
}

/// Registers the value of every environment variable whose name
/// [looks secret](is_secret_name), except absolute paths; returns how many
/// were registered. Done once by itself at the first redaction; call it
/// again after setting such a variable.
pub fn register_environment() -> usize {
    let registered = environment();
    if registered > 0 {
        redact_panics();
    }
    registered
}

/// [`register_environment`] without wrapping the panic hook.
fn environment() -> usize {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, value)| is_secret_name(name) && !value.trim_start().starts_with('/'))
        .filter(|(_, value)| add(value))
        .count()
}

/// Whether an environment variable named `name` holds a secret, by its
/// words (split at `_`, `-` and `.`, case ignored):
/// - a word that contains `SECRET`, `PASSWORD`, `PASSWD`, `CREDENTIAL`,
///   `APIKEY` or `PRIVATEKEY`, or that ends with `TOKEN`
///   (`GITHUB_TOKEN`, `HF_ACCESSTOKEN`, `PGPASSWORD`);
/// - a last word `KEY`, `KEYS` or `PASS` (`OPENAI_API_KEY`, `DB_PASS`);
///
/// unless the last word is `FILE`, `PATH` or `DIR` (`SSH_KEY_PATH` names a
/// file, not a secret).
///
/// ```
/// use harness::secrets::is_secret_name;
/// assert!(is_secret_name("OPENAI_API_KEY"));
/// assert!(is_secret_name("gh_token"));
/// assert!(!is_secret_name("MAX_TOKENS"));
/// assert!(!is_secret_name("PRIVATE_KEY_FILE"));
/// ```
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    let words: Vec<&str> = name
        .split(['_', '-', '.'])
        .filter(|w| !w.is_empty())
        .collect();
    let Some(last) = words.last() else {
        return false;
    };
    if matches!(*last, "FILE" | "PATH" | "DIR") {
        return false;
    }
    matches!(*last, "KEY" | "KEYS" | "PASS")
        || words.iter().any(|word| {
            word.ends_with("TOKEN")
                || [
                    "SECRET",
                    "PASSWORD",
                    "PASSWD",
                    "CREDENTIAL",
                    "APIKEY",
                    "PRIVATEKEY",
                ]
                .iter()
                .any(|part| word.contains(part))
        })
}

/// Whether a URL parameter named `name` (percent-decoded, `+` as a space)
/// holds a secret: a name [`is_secret_name`] finds secret
/// (`key`, `api_key`, `apikey`, `api-key`, `token`, `access_token`,
/// `secret`, `client_secret`, `password`, `passwd`, `X-Amz-Credential`,
/// …), or one with a word (split at `_`, `-`, `.` and spaces, case
/// ignored) that ends with `KEY` (`accessKey`) or is `AUTH`,
/// `AUTHORIZATION`, `SIG`, `SIGNATURE`, `CODE`, `PWD`, `JWT`, `SESSION` or
/// `SESSIONID` (`X-Amz-Signature`, an OAuth `code`). Unless the last word
/// is `FILE`, `PATH` or `DIR`, which name where a secret is. The rule the
/// crates that show or send URLs (an MCP server's, a store's) hide values
/// by; `name` is taken decoded ([`percent_decoded`]).
///
/// ```
/// use harness::secrets::is_secret_parameter;
/// assert!(is_secret_parameter("api_key") && is_secret_parameter("X-Amz-Signature"));
/// assert!(!is_secret_parameter("version") && !is_secret_parameter("key_file"));
/// ```
pub fn is_secret_parameter(name: &str) -> bool {
    if is_secret_name(name) {
        return true;
    }
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split(['_', '-', '.', ' '])
        .filter(|w| !w.is_empty())
        .collect();
    if words
        .last()
        .is_none_or(|last| matches!(*last, "FILE" | "PATH" | "DIR"))
    {
        return false;
    }
    words.iter().any(|word| {
        word.ends_with("KEY")
            || matches!(
                *word,
                "AUTH"
                    | "AUTHORIZATION"
                    | "SIG"
                    | "SIGNATURE"
                    | "CODE"
                    | "PWD"
                    | "JWT"
                    | "SESSION"
                    | "SESSIONID"
            )
    })
}

/// Whether `segment` (one segment of a URL's path, taken decoded:
/// [`percent_decoded`]) looks like a token rather than a name: at least 16
/// characters, only letters, digits and `-`, `_`, `.`, `~`, `=`, `+`, and
/// either upper-case letters, lower-case letters and digits all three, or
/// at least four changes between a letter and a digit. Services that put a
/// key in the URL's path (an MCP server's `/s/<key>/mcp`, a webhook's
/// `/hooks/<id>/<token>`) write such segments; names rarely do
/// (`my-service-v2`, `2024-06-18`, `mcp`). Of random keys of 16
/// characters (base62 or base64url) about 6 in 100 have no digit and may
/// change between letters and digits less often: the longer a key, the
/// fewer are missed. UUIDs, hashes and camel-case names with a digit count
/// as tokens: hiding one more id costs less than showing a key.
///
/// ```
/// use harness::secrets::is_token_like;
/// assert!(is_token_like("ZjM2NDc1YjAtYjA3Mi00OGRhLWE3"));
/// assert!(is_token_like("kTqLmZpXvRwYhBnAsDfGjKe9"));
/// assert!(is_token_like("550e8400-e29b-41d4-a716-446655440000"));
/// assert!(!is_token_like("my-long-service-name-v2") && !is_token_like("2025-06-18"));
/// ```
pub fn is_token_like(segment: &str) -> bool {
    if segment.chars().count() < 16
        || !segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '=' | '+'))
    {
        return false;
    }
    let has = |f: fn(&char) -> bool| segment.chars().any(|c| f(&c));
    if has(char::is_ascii_uppercase) && has(char::is_ascii_lowercase) && has(char::is_ascii_digit) {
        return true;
    }
    let mut changes = 0;
    let mut last: Option<bool> = None;
    for c in segment.chars().filter(char::is_ascii_alphanumeric) {
        let digit = c.is_ascii_digit();
        if last.is_some_and(|was| was != digit) {
            changes += 1;
        }
        last = Some(digit);
    }
    changes >= 4
}

/// `text` with its `%XX` escapes decoded (and `+` as a space if
/// `plus_as_space`), as a secret written in a URL reads; a `%` without two
/// hex digits stays as is, and bytes that are not UTF-8 become U+FFFD.
///
/// ```
/// use harness::secrets::percent_decoded;
/// assert_eq!(percent_decoded("api%5Fkey=a+b", true), "api_key=a b");
/// ```
pub fn percent_decoded(text: &str, plus_as_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| {
            bytes
                .get(at)
                .and_then(|&b| char::from(b).to_digit(16))
                .map(|d| d as u8)
        };
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(high << 4 | low);
                i += 3;
            }
            (b'+', ..) if plus_as_space => {
                out.push(b' ');
                i += 1;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the process holds any secret (after reading the environment):
/// when false, every redaction returns its input untouched.
pub fn is_active() -> bool {
    active().is_some()
}

/// Whether `text` contains one of the process's secrets.
pub fn contains_secret(text: &str) -> bool {
    active().is_some_and(|set| set.contains_secret(text))
}

/// `text` with every one of the process's secrets replaced by
/// [`REDACTED`]; borrowed when it contains none (see
/// [`SecretSet::redact`]).
pub fn redact(text: &str) -> Cow<'_, str> {
    match active() {
        Some(set) => set.redact(text),
        None => Cow::Borrowed(text),
    }
}

/// Redacts `text` in place with the process's secrets; whether anything
/// was replaced.
pub fn redact_string(text: &mut String) -> bool {
    active().is_some_and(|set| set.redact_string(text))
}

/// Redacts every string in `value`, object keys included, in place with the
/// process's secrets; whether anything was replaced.
pub fn redact_json(value: &mut Value) -> bool {
    active().is_some_and(|set| set.redact_json(value))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::{
        REDACTED, SecretSet, is_secret_parameter, is_token_like, json_forms, percent_decoded,
    };
    use serde_json::json;

    #[test]
    fn secret_looking_parameter_names() {
        for name in [
            "key",
            "api_key",
            "apikey",
            "api-key",
            "API_KEY",
            "apiKey",
            "x-api-key",
            "subscription-key",
            "token",
            "access_token",
            "accessToken",
            "auth",
            "Authorization",
            "secret",
            "client_secret",
            "password",
            "passwd",
            "pwd",
            "sig",
            "signature",
            "X-Amz-Signature",
            "X-Amz-Credential",
            "X-Amz-Security-Token",
            "code",
            "jwt",
            "session",
        ] {
            assert!(is_secret_parameter(name), "{name}");
        }
        for name in [
            "version",
            "v",
            "lang",
            "state",
            "user",
            "format",
            "key_file",
            "keyPath",
            "",
            "limit",
            "max_tokens",
        ] {
            assert!(!is_secret_parameter(name), "{name}");
        }
    }

    #[test]
    fn tokens_in_a_path_are_told_from_names() {
        for segment in [
            // Zapier's and similar MCP URLs, a webhook token, ids and hashes.
            "ZjM2NDc1YjAtYjA3Mi00OGRhLWE3",
            "a1b2c3d4e5f6g7h8",
            "550e8400-e29b-41d4-a716-446655440000",
            "3f2a9c0e8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
            "B0A1B2C3DxYz9Q8w7E6r",
            "sk-proj-Ab3dE5fG7hI9jK1lM3nO",
            // Mostly letters, one change between letters and digits.
            "kTqLmZpXvRwYhBnAsDfGjKe9",
            "AbcdefghijklmnoP1",
        ] {
            assert!(is_token_like(segment), "{segment}");
        }
        for segment in [
            "mcp",
            "sse",
            "v1",
            "2025-06-18",
            "my-long-service-name-v2",
            "api-gateway-production",
            "python3.11-site-packages",
            "ThisIsACamelCaseName",
            "all-lower-case-words-only",
            "index.html",
            "",
            // Long and mixed, but with a character no token has.
            "a1b2c3d4e5f6g7h8%",
            "a1b2c3d4 e5f6g7h8",
            // Short.
            "a1b2c3d4e5",
        ] {
            assert!(!is_token_like(segment), "{segment}");
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decoded("a%5Fb%2fc+d", false), "a_b/c+d");
        assert_eq!(percent_decoded("a%5Fb%2fc+d", true), "a_b/c d");
        // A `%` without two hex digits stays.
        assert_eq!(percent_decoded("100%", false), "100%");
        assert_eq!(percent_decoded("%zz%4", false), "%zz%4");
    }

    fn set(values: &[&str]) -> SecretSet {
        let mut set = SecretSet::new();
        for value in values {
            assert!(set.register(value), "{value}");
        }
        set
    }

    /// A JSON string's text without its quotes, as serde_json writes it.
    fn serde_escaped(text: &str) -> String {
        let quoted = serde_json::to_string(text).unwrap();
        quoted[1..quoted.len() - 1].to_owned()
    }

    #[test]
    fn a_secret_without_characters_json_escapes_adds_one_pattern() {
        for secret in [
            "sk-plain-0123456789",
            "ghp_AbC/+=~`'<>&-xyz",
            "98765432101234",
        ] {
            assert_eq!(json_forms(secret).len(), 1, "{secret}");
            let set = set(&[secret]);
            assert_eq!(set.len(), 1, "{secret}");
        }
    }

    #[test]
    fn a_secret_with_quotes_or_backslashes_is_found_escaped_once_and_twice() {
        let secret = r#"pa"ss\word-123"#;
        let set = set(&[secret]);
        // The value, escaped once, escaped twice: nothing else.
        assert_eq!(set.len(), 3);
        let once = serde_escaped(secret);
        let twice = serde_escaped(&once);
        assert_eq!(once, r#"pa\"ss\\word-123"#);
        assert_eq!(twice, r#"pa\\\"ss\\\\word-123"#);
        // The reproducer's shape: a model writes a configuration in JSON in
        // its answer; the answer is serialized as JSON again (a trace
        // attribute, a stored state).
        let config = json!({ "password": secret }).to_string();
        let answer = format!("here is the config: {config} and more");
        let stored = json!([{ "content": answer }]).to_string();
        for text in [secret, &once, &twice, &config, &answer, &stored] {
            let out = set.redact(text);
            for fragment in ["pa\"ss", "ss\\", "word-123"] {
                assert!(!out.contains(fragment), "{text} → {out}");
            }
            assert!(out.contains(REDACTED), "{text} → {out}");
            assert!(set.contains_secret(text), "{text}");
        }
        assert_eq!(
            set.redact(&stored),
            r#"[{"content":"here is the config: {\"password\":\"[redacted]\"} and more"}]"#
        );
        // A JSON value holding the configuration as text.
        let mut value = json!({ "config": config, "nested": [answer] });
        assert!(set.redact_json(&mut value));
        assert!(!value.to_string().contains("word-123"), "{value}");
    }

    #[test]
    fn a_secret_with_non_ascii_characters_is_found_as_python_and_dotnet_escape_it() {
        let secret = "pä\"ss\\wörd-🙂";
        let secrets = set(&[secret]);
        // What Python's json.dumps writes, once and twice (its defaults
        // escape non-ASCII characters as lowercase `\u` escapes, astral
        // ones as surrogate pairs).
        let python_once = r#"p\u00e4\"ss\\w\u00f6rd-\ud83d\ude42"#;
        let python_twice = r#"p\\u00e4\\\"ss\\\\w\\u00f6rd-\\ud83d\\ude42"#;
        // Python over serde_json: the inner encoder kept the characters,
        // the outer one escaped them.
        let mixed = r#"p\u00e4\\\"ss\\\\w\u00f6rd-\ud83d\ude42"#;
        let dotnet_once = r#"p\u00E4\"ss\\w\u00F6rd-\uD83D\uDE42"#;
        let serde_once = serde_escaped(secret);
        let serde_twice = serde_escaped(&serde_once);
        for text in [
            secret,
            python_once,
            python_twice,
            mixed,
            dotnet_once,
            &serde_once,
            &serde_twice,
            &serde_escaped(python_once),
        ] {
            let framed = format!("«{text}»");
            assert_eq!(secrets.redact(&framed), "«[redacted]»", "{text}");
        }
        // A plain non-ASCII secret: itself and its escapes, each level.
        assert_eq!(
            set(&["pässwörd-ünïcode"]).len(),
            5,
            "the value, its lower and upper escapes once and twice"
        );
    }

    #[test]
    fn control_characters_are_found_with_jsons_short_escapes() {
        let secret = "line-one\tline-two\u{1}";
        let set = set(&["x\tsecret-with-tab", secret]);
        for text in [
            json!({ "k": "x\tsecret-with-tab" }).to_string(),
            json!({ "k": secret }).to_string(),
            json!({ "k": json!({ "k": secret }).to_string() }).to_string(),
        ] {
            let out = set.redact(&text);
            assert!(!out.contains("secret-with-tab"), "{out}");
            assert!(!out.contains("line-two"), "{out}");
        }
    }

    #[test]
    fn a_third_level_of_escaping_is_not_looked_for() {
        // The documented limit, so that a change of it is a decision.
        let secret = r#"pa"ss\word-123"#;
        let set = set(&[secret]);
        let thrice = serde_escaped(&serde_escaped(&serde_escaped(secret)));
        assert!(!set.contains_secret(&thrice), "{thrice}");
    }
}
