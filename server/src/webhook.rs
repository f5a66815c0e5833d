//! Webhooks: when a run given a `webhook` settles, the server POSTs the run
//! and its outcome there, signed, with retries.

use crate::error::ApiError;
use crate::record::RunRecord;
use ring::hmac;
use serde_json::json;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Where runs may call back, and how calls are signed.
///
/// Each call is a POST of JSON (the run, its `status` and its `values`:
/// the state, with `__interrupt__` or `__error__` as `join` gives them) with
/// the headers `x-harness-timestamp` (ms since the epoch) and
/// `x-harness-signature: sha256=<hex>`, the HMAC-SHA256 of
/// `"{timestamp}.{body}"` with the secret: a receiver checks it and the
/// timestamp's age. A call that fails to connect or answers 429 or 5xx is
/// tried again, with a growing pause; redirects are not followed.
#[derive(Clone)]
pub struct Webhooks {
    secret: Arc<[u8]>,
    hosts: Vec<String>,
    any_host: bool,
    attempts: u32,
    timeout: Duration,
    first_pause: Duration,
}

impl fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhooks")
            .field("secret", &"(redacted)")
            .field("hosts", &self.hosts)
            .field("any_host", &self.any_host)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// Webhooks signed with `secret`, to no host yet: allow them with
    /// [`host`](Self::host) or [`any_host`](Self::any_host).
    pub fn new(secret: impl AsRef<[u8]>) -> Self {
        Self {
            secret: Arc::from(secret.as_ref()),
            hosts: Vec::new(),
            any_host: false,
            attempts: 4,
            timeout: Duration::from_secs(10),
            first_pause: Duration::from_millis(500),
        }
    }

    /// Lets runs call back to `host` (a name or an address, any port).
    #[must_use]
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.hosts.push(host.into());
        self
    }

    /// Lets runs call back to any host: a client that can start a run can
    /// then make the server POST anywhere it can reach.
    #[must_use]
    pub fn any_host(mut self) -> Self {
        self.any_host = true;
        self
    }

    /// Tries a call at most this many times (default 4).
    #[must_use]
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The pause after the first failed attempt, doubled after each next
    /// one (default 500 ms).
    #[must_use]
    pub fn first_pause(mut self, pause: Duration) -> Self {
        self.first_pause = pause;
        self
    }

    /// Checks a run's `webhook`: an http(s) URL to an allowed host.
    pub(crate) fn check(&self, url: &str) -> Result<reqwest::Url, ApiError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| ApiError::bad("webhook", format!("`{url}` is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ApiError::bad(
                "webhook",
                format!("a webhook is an http or https URL, not {}", parsed.scheme()),
            ));
        }
        let host = parsed.host_str().unwrap_or_default();
        if !self.any_host && !self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return Err(ApiError::unprocessable(
                "webhook",
                format!("the webhook's host `{host}` is not one this server calls back to"),
            ));
        }
        Ok(parsed)
    }

    fn sign(&self, timestamp: u64, body: &str) -> String {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.secret);
        let tag = hmac::sign(&key, format!("{timestamp}.{body}").as_bytes());
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256={hex}")
    }

    /// Calls `url` back once `run` settles.
    pub(crate) fn deliver_when_settled(&self, url: reqwest::Url, run: Arc<RunRecord>) {
        let hooks = self.clone();
        tokio::spawn(async move {
            let result = run.settled().await;
            let mut body = run.to_json();
            body["values"] = result.output();
            body["webhook_sent_at"] = json!(crate::time::iso(harness::session::now_millis()));
            hooks.deliver(url, body.to_string(), &run.run_id).await;
        });
    }

    async fn deliver(&self, url: reqwest::Url, body: String, run: &str) {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Another thread may install one first: either is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = match reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.timeout)
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(run, error = %e, "cannot make the webhook client");
                return;
            }
        };
        let mut pause = self.first_pause;
        for attempt in 1..=self.attempts {
            let timestamp = harness::session::now_millis();
            let sent = client
                .post(url.clone())
                .header("content-type", "application/json")
                .header("user-agent", "harness-server")
                .header("x-harness-timestamp", timestamp.to_string())
                .header("x-harness-signature", self.sign(timestamp, &body))
                .body(body.clone())
                .send()
                .await;
            let retry = match &sent {
                Ok(r) if r.status().is_success() => return,
                Ok(r) => r.status().is_server_error() || r.status().as_u16() == 429,
                Err(_) => true,
            };
            let why = failure(sent);
            let host = url.host_str().unwrap_or_default();
            if !retry || attempt == self.attempts {
                tracing::warn!(
                    run,
                    host,
                    attempt,
                    why,
                    "the webhook call failed; giving up"
                );
                return;
            }
            tracing::info!(
                run,
                host,
                attempt,
                why,
                "the webhook call failed; trying again"
            );
            tokio::time::sleep(pause).await;
            pause = pause.saturating_mul(2);
        }
    }
}

/// Why a call failed, for the log: without the URL, whose path, query or
/// user part may hold a token (the log names the host).
fn failure(sent: Result<reqwest::Response, reqwest::Error>) -> String {
    match sent {
        Ok(r) => format!("it answered {}", r.status()),
        Err(e) => e.without_url().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Webhooks, failure};

    #[tokio::test]
    async fn a_failed_call_is_logged_without_its_url() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // A port nothing listens on: the connection is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        for url in [
            format!("http://hook-user:pw-7f3a@127.0.0.1:{port}/x"),
            format!("http://127.0.0.1:{port}/services/T0/B0/tok-9c1e"),
            format!("http://127.0.0.1:{port}/hook?token=tok-5b2d"),
        ] {
            let sent = reqwest::Client::new().post(&url).send().await;
            assert!(sent.is_err(), "{url}");
            let why = failure(sent);
            for secret in ["pw-7f3a", "tok-9c1e", "tok-5b2d", "hook-user"] {
                assert!(!why.contains(secret), "{why}");
            }
        }
    }

    #[test]
    fn signatures_are_hmac_sha256_of_the_timestamp_and_body() {
        // As Python's hmac.new(b"whsec-test", b'1700000000000.{"a":1}', sha256).
        let hooks = Webhooks::new("whsec-test");
        assert_eq!(
            hooks.sign(1_700_000_000_000, r#"{"a":1}"#),
            "sha256=18e0b637acd0e3f549ccafaf6c68c8464e953c78038b5e038c3b45a9fc14db0d"
        );
    }

    #[test]
    fn only_allowed_hosts_and_http_urls_are_called() {
        let hooks = Webhooks::new("s").host("127.0.0.1");
        assert!(hooks.check("http://127.0.0.1:9/hook").is_ok());
        for bad in [
            "http://10.0.0.1/hook",
            "ftp://127.0.0.1/x",
            "not a url",
            "file:///etc/passwd",
        ] {
            assert!(hooks.check(bad).is_err(), "{bad}");
        }
        assert!(
            Webhooks::new("s")
                .any_host()
                .check("https://example.com/x")
                .is_ok()
        );
    }
}
