//! [`OtelConfig`]: where traces go and what they carry, and [`OtelError`].

use opentelemetry_sdk::trace::ShouldSample;
use std::fmt;
use std::time::Duration;

/// Why traces cannot be set up or flushed. Each message says what was wrong
/// and where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The collector's endpoint is not an `http://` URL this crate can send
    /// to.
    #[error("the OTLP endpoint `{endpoint}` cannot be used: {reason}")]
    Endpoint {
        /// The endpoint as given, but with the credentials an endpoint may
        /// hold replaced by `[redacted]`: its userinfo (all before its last
        /// `@`), and the values of its query parameters whose names look
        /// like credentials (`api_key`, `token`, …). The reason never quotes
        /// them either.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The service name is empty or has control characters.
    #[error("the service name {name:?} cannot be used: {reason}")]
    ServiceName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A header for the collector is not a valid HTTP header. Its value is
    /// never shown: it may hold a key.
    #[error("the header `{name}` for the collector cannot be used: {reason}")]
    Header {
        /// The header's name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The OTLP exporter could not be built.
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),

    /// [`init`](crate::init) found a global `tracing` subscriber already
    /// set; compose [`layer`](crate::layer) into it instead.
    #[error(
        "a global tracing subscriber is already set ({0}); add harness_otel::layer(..) to it instead of calling init"
    )]
    SubscriberAlreadySet(String),

    /// The batch queue's bounds cannot be used (a size of 0, set in the
    /// code or in `OTEL_BSP_MAX_QUEUE_SIZE` / `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
    #[error("the batch queue cannot be set up: {0}")]
    Queue(String),

    /// A flush, or the pipeline's shutdown, failed with no span known lost
    /// yet: e.g. a flush that waited its 5 s for a collector that had not
    /// answered (the export goes on; the next flush tells how it ended).
    #[error("exporting spans to the collector failed: {0}")]
    Export(String),

    /// Spans finished since the last [`flush`](crate::OtelGuard::flush)
    /// (or since the pipeline started) never reached the collector: dropped
    /// because the batch queue was full, or sent in exports that failed
    /// (after the exporter's retries). The other spans were exported, and
    /// the counts start again from zero.
    #[error("{}", lost(*.dropped, *.failed, *.max_queue_size, .endpoint, .error.as_deref()))]
    SpansLost {
        /// Spans dropped when they finished, because
        /// [`max_queue_size`](OtelConfig::max_queue_size) spans were already
        /// waiting for the collector.
        dropped: usize,
        /// Spans in exports the collector refused, or did not answer in
        /// time, or could not be reached for.
        failed: usize,
        /// The queue's bound.
        max_queue_size: usize,
        /// Where the spans were going (the URL without its query).
        endpoint: String,
        /// The error of the last export that failed (or, if none did, of
        /// the flush), secrets redacted.
        error: Option<String>,
    },
}

fn lost(
    dropped: usize,
    failed: usize,
    queue: usize,
    endpoint: &str,
    error: Option<&str>,
) -> String {
    let spans = |n: usize| match n {
        1 => "1 span was".to_owned(),
        n => format!("{n} spans were"),
    };
    let mut parts = Vec::new();
    if dropped > 0 {
        parts.push(format!(
            "{} dropped before export: {queue} spans were already waiting for the collector \
             (raise OtelConfig::max_queue_size, or OTEL_BSP_MAX_QUEUE_SIZE)",
            spans(dropped)
        ));
    }
    if failed > 0 {
        parts.push(format!("{} sent in exports that failed", spans(failed)));
    }
    let mut message = format!(
        "spans were lost on their way to {endpoint}: {}",
        parts.join("; ")
    );
    if let Some(error) = error {
        message.push_str(&format!(" (last error: {error})"));
    }
    message
}

/// Where a run's traces go and what they carry: build with
/// [`OtelConfig::new`], adjust with its methods, hand to
/// [`init`](crate::init) or [`layer`](crate::layer).
///
/// ```
/// use harness_otel::OtelConfig;
///
/// let config = OtelConfig::new("http://localhost:4318")
///     .service_name("support-bot")
///     .capture_content(true);
/// assert_eq!(config.traces_url().unwrap(), "http://localhost:4318/v1/traces");
/// ```
#[derive(Clone)]
pub struct OtelConfig {
    pub(crate) endpoint: String,
    pub(crate) service_name: String,
    pub(crate) capture_content: bool,
    pub(crate) level: tracing::Level,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
    pub(crate) sampler: Option<Box<dyn ShouldSample>>,
    pub(crate) max_queue_size: Option<usize>,
    pub(crate) max_export_batch_size: Option<usize>,
}

/// The batch queue's bound when neither the code nor
/// `OTEL_BSP_MAX_QUEUE_SIZE` sets it (the OpenTelemetry specification's).
pub(crate) const DEFAULT_QUEUE_SIZE: usize = 2048;
/// The largest export when neither the code nor
/// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` sets it (the specification's).
pub(crate) const DEFAULT_BATCH_SIZE: usize = 512;

impl fmt::Debug for OtelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values are left out: they are where collector keys go. The
        // endpoint is shown as errors show it: without its credentials.
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("OtelConfig")
            .field("endpoint", &shown(&self.endpoint))
            .field("service_name", &self.service_name)
            .field("capture_content", &self.capture_content)
            .field("level", &self.level)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("sampler", &self.sampler)
            .field("max_queue_size", &self.max_queue_size)
            .field("max_export_batch_size", &self.max_export_batch_size)
            .finish()
    }
}

impl OtelConfig {
    /// Traces sent to the OTLP/HTTP collector at `endpoint`, e.g.
    /// `http://localhost:4318` (the OpenTelemetry Collector's default); the
    /// path `/v1/traces` is added unless the URL has a path already.
    ///
    /// The defaults: service name `harness`, no message contents, spans of
    /// level INFO and above, a 10 s export timeout, every trace sampled, at
    /// most 2048 spans waiting for the collector, exported 512 at a time
    /// (or what `OTEL_BSP_MAX_QUEUE_SIZE` and
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` say).
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            service_name: "harness".to_owned(),
            capture_content: false,
            level: tracing::Level::INFO,
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            sampler: None,
            max_queue_size: None,
            max_export_batch_size: None,
        }
    }

    /// A config from the standard OpenTelemetry environment variables, read
    /// as the OTLP exporter specification says: the endpoint from
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as given, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, a base to which `/v1/traces` is added
    /// (`http://host:4318/otlp` sends to `http://host:4318/otlp/v1/traces`,
    /// as Grafana's and Langfuse's endpoints expect), else
    /// `http://localhost:4318`; the service name from `OTEL_SERVICE_NAME`,
    /// else `harness`. Contents stay off: opting in is a decision of the
    /// code, not of the environment.
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let endpoint = match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(signal) => signal.trim().to_owned(),
            None => set("OTEL_EXPORTER_OTLP_ENDPOINT").map_or_else(
                || "http://localhost:4318".to_owned(),
                |base| traces_of(base.trim()),
            ),
        };
        let config = Self::new(endpoint);
        match set("OTEL_SERVICE_NAME") {
            Some(name) => config.service_name(name),
            None => config,
        }
    }

    /// The `service.name` of the exported resource.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// Whether message contents are exported: the messages sent to models
    /// (`gen_ai.input.messages`, `gen_ai.system_instructions`), their
    /// answers (`gen_ai.output.messages`), tool arguments and results
    /// (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`). Off by
    /// default: contents hold what users and tools said. With it on, the
    /// process's registered secrets ([`harness::secrets`]) are still
    /// replaced wherever they appear, but nothing else is judged by its
    /// name: a tool argument `{"password": "…"}` is exported as it is.
    pub fn capture_content(mut self, capture: bool) -> Self {
        self.capture_content = capture;
        self
    }

    /// The least severe level of the spans and events exported (INFO by
    /// default, which takes every span harness emits).
    ///
    /// Some of what a run tells is below INFO, and so not exported by
    /// default: a step retried by its [`RetryPolicy`](harness::RetryPolicy)
    /// is one `step` span over all its attempts, and each failed attempt is
    /// a DEBUG event `step attempt failed` on it (`attempt`, `will_retry`,
    /// `error`, redacted). At INFO a step that failed twice and then
    /// succeeded looks like one that succeeded at once (a run that fails
    /// still ends with the error status on its `invoke_agent` span). Set
    /// `Level::DEBUG` to see the attempts. A provider's HTTP retries are
    /// WARN events (`model request failed; retrying`) on its
    /// `model_request` span, exported at INFO.
    pub fn level(mut self, level: tracing::Level) -> Self {
        self.level = level;
        self
    }

    /// A header sent with every export, e.g. a hosted collector's key. It
    /// goes to the collector only, never into a span, and is left out of
    /// this config's `Debug`.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// How long one export may take before it is given up.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The sampler deciding which spans are kept (all by default). It is
    /// asked about every span, children included, and sees its GenAI
    /// attributes when it starts: operation, agent, provider, model,
    /// conversation.
    ///
    /// It is used as it is, so its answer for a span is that span's fate
    /// alone: a sampler that drops an agent's `invoke_agent` span but keeps
    /// the spans under it (what a sampler looking only at
    /// `gen_ai.agent.name` does, since the `step`, `chat` and
    /// `execute_tool` spans do not carry it) exports them as a trace
    /// without its root, whose parent never arrives. To decide per trace,
    /// wrap it in [`Sampler::ParentBased`](opentelemetry_sdk::trace::Sampler::ParentBased):
    /// yours is then asked about root spans only (an agent's run; a
    /// sub-agent's run is a child of its parent's step) and every child
    /// follows its parent, as with the SDK's default sampler,
    /// `ParentBased(AlwaysOn)`. Or follow the parent in yours, as below, and
    /// keep deciding on the other spans (e.g. dropping the `execute_tool`
    /// spans of one tool, which have no children). This crate does not wrap
    /// it for you: wrapped, a sampler no longer sees the `chat` and
    /// `execute_tool` spans whose model and tool it may want to decide on.
    ///
    /// ```
    /// use harness_otel::OtelConfig;
    /// use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId};
    /// use opentelemetry::{Context, KeyValue};
    /// use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SamplingResult, ShouldSample};
    ///
    /// /// Drops the runs of the agent `internal`.
    /// #[derive(Clone, Debug)]
    /// struct NotInternal;
    ///
    /// impl ShouldSample for NotInternal {
    ///     fn should_sample(
    ///         &self,
    ///         parent: Option<&Context>,
    ///         _: TraceId,
    ///         _: &str,
    ///         _: &SpanKind,
    ///         attributes: &[KeyValue],
    ///         _: &[Link],
    ///     ) -> SamplingResult {
    ///         let internal = attributes.iter().any(|kv| {
    ///             kv.key.as_str() == "gen_ai.agent.name" && kv.value.as_str() == "internal"
    ///         });
    ///         SamplingResult {
    ///             decision: if internal {
    ///                 SamplingDecision::Drop
    ///             } else {
    ///                 SamplingDecision::RecordAndSample
    ///             },
    ///             attributes: Vec::new(),
    ///             trace_state: parent
    ///                 .map(|cx| cx.span().span_context().trace_state().clone())
    ///                 .unwrap_or_default(),
    ///         }
    ///     }
    /// }
    ///
    /// // Decided per trace: a dropped run takes its steps, model and tool
    /// // calls with it.
    /// let config = OtelConfig::new("http://localhost:4318")
    ///     .sampler(Sampler::ParentBased(Box::new(NotInternal)));
    /// ```
    pub fn sampler(mut self, sampler: impl ShouldSample + 'static) -> Self {
        self.sampler = Some(Box::new(sampler));
        self
    }

    /// How many finished spans may wait for the collector: 2048 by default,
    /// or `OTEL_BSP_MAX_QUEUE_SIZE` (this call wins over it).
    ///
    /// Spans are exported by a thread of their own, in batches of
    /// [`max_export_batch_size`](Self::max_export_batch_size), as soon as a
    /// batch is full and otherwise every 5 s (`OTEL_BSP_SCHEDULE_DELAY`), one
    /// export at a time. Runs never wait for it: a span that finishes while
    /// the queue is full is dropped. Each drop is counted, and the next
    /// [`flush`](crate::OtelGuard::flush) or
    /// [`shutdown`](crate::OtelGuard::shutdown) (or the guard's drop) fails
    /// with [`OtelError::SpansLost`] saying how many.
    ///
    /// Every step is a span, so a loop of many quick steps outpaces the
    /// exports: three runs of 3 000 trivial steps make 9 003 spans in about
    /// a quarter of a second, and lost 200 to 1 650 of them with the
    /// default queue in our runs against a collector on the same machine.
    /// Size the queue for the largest burst the program makes between two
    /// exports. Its slots are allocated when the pipeline starts, about
    /// 360 bytes each (16 384 spans: 6 MB), and each waiting span holds its
    /// attributes (and, with [`capture_content`](Self::capture_content),
    /// its messages) besides.
    /// Refused (at [`init`](crate::init) or [`layer`](crate::layer)) if 0.
    pub fn max_queue_size(mut self, spans: usize) -> Self {
        self.max_queue_size = Some(spans);
        self
    }

    /// The most spans one export request carries: 512 by default, or
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (this call wins over it); never more
    /// than [`max_queue_size`](Self::max_queue_size). Fewer, larger requests
    /// let the exports keep up with a faster burst; a collector may limit
    /// the size of a request's body. Refused if 0.
    pub fn max_export_batch_size(mut self, spans: usize) -> Self {
        self.max_export_batch_size = Some(spans);
        self
    }

    /// The queue's bound and the largest batch, as set here, else in the
    /// environment (`var`), else the defaults; the batch no larger than the
    /// queue.
    pub(crate) fn queue(
        &self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<(usize, usize), OtelError> {
        let size = |set: Option<usize>, name: &str, default: usize| {
            let (size, from) = match set {
                Some(size) => (size, "the code"),
                // Read as the SDK reads it: a value that is no number is
                // ignored.
                None => match var(name).and_then(|v| v.trim().parse::<usize>().ok()) {
                    Some(size) => (size, name),
                    None => (default, "the default"),
                },
            };
            if size == 0 {
                return Err(OtelError::Queue(format!(
                    "a size of 0 (from {from}) would drop every span; the OpenTelemetry default is {default}"
                )));
            }
            Ok(size)
        };
        let queue = size(
            self.max_queue_size,
            "OTEL_BSP_MAX_QUEUE_SIZE",
            DEFAULT_QUEUE_SIZE,
        )?;
        let batch = size(
            self.max_export_batch_size,
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            DEFAULT_BATCH_SIZE,
        )?;
        Ok((queue, batch.min(queue)))
    }

    /// The URL spans are posted to, or why the endpoint cannot be used.
    pub fn traces_url(&self) -> Result<String, OtelError> {
        traces_url(&self.endpoint)
    }

    pub(crate) fn check(&self) -> Result<String, OtelError> {
        let url = self.traces_url()?;
        let name = &self.service_name;
        let bad_name = |reason: &str| OtelError::ServiceName {
            name: name.clone(),
            reason: reason.to_owned(),
        };
        if name.trim().is_empty() {
            return Err(bad_name("it is empty"));
        }
        if name.chars().any(char::is_control) {
            return Err(bad_name("it has control characters"));
        }
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        self.queue(|name| std::env::var(name).ok())?;
        Ok(url)
    }
}

/// `endpoint` as errors and `Debug` show it: everything before its last `@`
/// after the scheme (userinfo, `user:password`, whatever it holds: a `/`,
/// `?` or `:` in a password does not end it) and the values of query
/// parameters whose names look like credentials replaced by `[redacted]`.
fn shown(endpoint: &str) -> String {
    const HIDDEN: &str = "[redacted]";
    let (scheme, rest) = match endpoint.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), endpoint),
    };
    let rest = match rest.rsplit_once('@') {
        Some((_, after)) => format!("{HIDDEN}@{after}"),
        None => rest.to_owned(),
    };
    let Some((before, query)) = rest.split_once('?') else {
        return format!("{scheme}{rest}");
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, format!("#{fragment}")),
        None => (query, String::new()),
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if looks_secret(name) || looks_secret(&name.replace('%', "")) => {
                format!("{name}={HIDDEN}")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{scheme}{before}?{}{fragment}", query.join("&"))
}

/// Whether a query parameter named `name` may carry a credential: what
/// the exporter drops as an attribute, and `token`, `key`, `sig`, `auth`.
fn looks_secret(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    crate::export::looks_secret(&lower)
        || ["token", "key", "sig", "auth", "pass", "credential"]
            .iter()
            .any(|word| lower.contains(word))
}

fn traces_url(endpoint: &str) -> Result<String, OtelError> {
    let bad = |reason: &str| OtelError::Endpoint {
        endpoint: shown(endpoint),
        reason: reason.to_owned(),
    };
    if endpoint.is_empty() {
        return Err(bad("it is empty"));
    }
    if endpoint
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(bad("it has spaces or control characters"));
    }
    // Credentials are refused before anything else is looked at, so that
    // no later reason quotes a part of them (a password with a `/` would
    // otherwise end the host early and be quoted as a port).
    if endpoint.contains('@') {
        return Err(bad(
            "credentials in the URL would be sent in clear; use .header(..) for a collector's key \
             (and %40 for an `@` that is no credentials' end)",
        ));
    }
    let Some((scheme, rest)) = endpoint.split_once("://") else {
        return Err(bad(
            "it is not a URL; give the collector's address, e.g. http://localhost:4318",
        ));
    };
    if scheme.eq_ignore_ascii_case("https") {
        return Err(bad(
            "harness-otel is built without TLS; send to a collector on this machine or network over http:// (the OpenTelemetry Collector forwards over TLS)",
        ));
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(bad(&format!(
            "the scheme `{scheme}` is not supported; use http://"
        )));
    }
    if rest.contains('#') {
        return Err(bad("a fragment (`#...`) has no meaning for a collector"));
    }
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(bad("it has no host"));
    }
    let host = match authority.rsplit_once(':') {
        // An IPv6 address without a port: `[::1]`.
        Some((host, port)) if !port.contains(']') => {
            if port.parse::<u16>().is_err() {
                return Err(bad(&format!(
                    "the port `{port}` is not a number below 65536"
                )));
            }
            host
        }
        _ => authority,
    };
    if host.is_empty() {
        return Err(bad("it has no host"));
    }
    let (path_only, query) = path.split_at(path.find('?').unwrap_or(path.len()));
    if path_only.is_empty() || path_only == "/" {
        Ok(format!("{scheme}://{authority}/v1/traces{query}"))
    } else {
        Ok(endpoint.to_owned())
    }
}

/// The traces URL of a base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`):
/// `/v1/traces` added to its path, before any query.
fn traces_of(base: &str) -> String {
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let query_at = base[after_scheme..]
        .find('?')
        .map_or(base.len(), |i| after_scheme + i);
    let (url, query) = base.split_at(query_at);
    format!("{}/v1/traces{query}", url.trim_end_matches('/'))
}

fn check_header(name: &str, value: &str) -> Result<(), OtelError> {
    let bad = |reason: &str| OtelError::Header {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(bad("its name is empty"));
    }
    // RFC 9110 token characters.
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if !name.chars().all(token) {
        return Err(bad(
            "its name has characters a header name cannot have (spaces, `:`, non-ASCII, ...)",
        ));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(bad("its value has control characters (a line break?)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::OtelConfig;

    fn from(vars: &[(&str, &str)]) -> OtelConfig {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OtelConfig::from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn the_environment_gives_endpoint_and_service_the_signal_variable_first() {
        let config = from(&[]);
        assert_eq!(
            config.traces_url().unwrap(),
            "http://localhost:4318/v1/traces"
        );
        assert_eq!(config.service_name, "harness");
        assert!(!config.capture_content);

        let config = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_SERVICE_NAME", "support-bot"),
        ]);
        assert_eq!(
            config.traces_url().unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(config.service_name, "support-bot");

        let config = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                " http://tempo:4318/otlp/v1/traces ",
            ),
            ("OTEL_SERVICE_NAME", "  "),
        ]);
        assert_eq!(
            config.traces_url().unwrap(),
            "http://tempo:4318/otlp/v1/traces"
        );
        assert_eq!(config.service_name, "harness");

        // The generic variable is a base: `/v1/traces` is added to its
        // path (the OTLP exporter specification), before any query; the
        // signal's own variable is taken as it is.
        for (base, url) in [
            (
                "http://collector:4318/otlp",
                "http://collector:4318/otlp/v1/traces",
            ),
            (
                "http://collector:4318/otlp/",
                "http://collector:4318/otlp/v1/traces",
            ),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            (
                "http://collector:4318?x=1",
                "http://collector:4318/v1/traces?x=1",
            ),
            (
                "http://cloud:4318/api/public/otel?a=b/c",
                "http://cloud:4318/api/public/otel/v1/traces?a=b/c",
            ),
        ] {
            let config = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", base)]);
            assert_eq!(config.traces_url().unwrap(), url, "{base}");
        }
        let config = from(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://collector:4318/otlp",
        )]);
        assert_eq!(config.traces_url().unwrap(), "http://collector:4318/otlp");
        // Given to `new`, a URL with no path but a query gets the path too.
        assert_eq!(
            OtelConfig::new("http://collector:4318?x=1")
                .traces_url()
                .unwrap(),
            "http://collector:4318/v1/traces?x=1"
        );

        // Credentials in the variable are refused and never shown.
        for endpoint in [
            "http://tenant:sk-collector-key@collector:4318",
            "http://tenant:sk/collector-key@collector:4318",
            "http://sk-collector-key@collector",
            " https://tenant:sk-collector-key@collector ",
        ] {
            let config = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)]);
            for shown in [
                config.traces_url().unwrap_err().to_string(),
                format!("{:?}", config.traces_url().unwrap_err()),
                format!("{config:?}"),
            ] {
                assert!(!shown.contains("collector-key"), "{shown}");
                assert!(shown.contains("[redacted]@collector"), "{shown}");
            }
        }

        // A bad value is reported when the config is used, naming it.
        let config = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://cloud")]);
        let err = config.traces_url().unwrap_err().to_string();
        assert!(
            err.contains("https://cloud") && err.contains("TLS"),
            "{err}"
        );
    }

    #[test]
    fn the_queue_is_sized_by_the_code_else_the_environment_else_the_defaults() {
        let vars = |pairs: &[(&'static str, &'static str)]| {
            let pairs = pairs.to_vec();
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let config = OtelConfig::new("http://127.0.0.1:4318");
        assert_eq!(config.queue(vars(&[])).unwrap(), (2048, 512));
        let env = [
            ("OTEL_BSP_MAX_QUEUE_SIZE", " 8192 "),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1024"),
        ];
        assert_eq!(config.queue(vars(&env)).unwrap(), (8192, 1024));
        // The code wins; the batch is never larger than the queue.
        let sized = config
            .clone()
            .max_queue_size(100)
            .max_export_batch_size(5000);
        assert_eq!(sized.queue(vars(&env)).unwrap(), (100, 100));
        // What is no number is ignored, as the SDK ignores it.
        let bad = [("OTEL_BSP_MAX_QUEUE_SIZE", "lots")];
        assert_eq!(config.queue(vars(&bad)).unwrap(), (2048, 512));
        // 0 would drop every span: refused, naming where it came from.
        let zero = [("OTEL_BSP_MAX_QUEUE_SIZE", "0")];
        let err = config.queue(vars(&zero)).unwrap_err().to_string();
        assert!(err.contains("OTEL_BSP_MAX_QUEUE_SIZE"), "{err}");
        let err = config
            .clone()
            .max_export_batch_size(0)
            .queue(vars(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("from the code"), "{err}");
    }
}
