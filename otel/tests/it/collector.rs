//! A real OTLP/HTTP receiver: an HTTP server on 127.0.0.1 accepting
//! `POST /v1/traces` with protobuf bodies, decoded with the OpenTelemetry
//! proto definitions, answering as a collector does.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Received {
    requests: Vec<ExportTraceServiceRequest>,
    headers: Vec<HeaderMap>,
    /// The bodies of the requests taken, as they came.
    bodies: Vec<Bytes>,
    /// Requests answered with an error status (not in `requests`).
    refused: usize,
}

/// How the receiver answers, switchable while it runs.
struct Behaviour {
    received: Mutex<Received>,
    /// The status of the answers: 200, or an error refusing the spans.
    status: AtomicU16,
    /// While true, requests wait before they are read.
    held: tokio::sync::watch::Sender<bool>,
}

/// An HTTP server on 127.0.0.1, serving on its own thread until dropped.
pub(crate) struct Server {
    /// Its base URL, `http://127.0.0.1:{port}`.
    pub(crate) endpoint: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub(crate) fn start(app: Router) -> Self {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the server");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("a port for the server");
                addr_tx
                    .send(listener.local_addr().expect("the server's address"))
                    .expect("the test waits for the address");
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("the server serves");
            });
        });
        let addr = addr_rx.recv().expect("the server started");
        Self {
            endpoint: format!("http://{addr}"),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The OTLP receiver.
pub(crate) struct Collector {
    /// Its base URL, `http://127.0.0.1:{port}`.
    pub(crate) endpoint: String,
    behaviour: Arc<Behaviour>,
    _server: Server,
}

async fn traces(
    State(behaviour): State<Arc<Behaviour>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let mut held = behaviour.held.subscribe();
    let _ = held.wait_for(|held| !held).await;
    let status = behaviour.status.load(Ordering::SeqCst);
    if status != 200 {
        behaviour.lock().refused += 1;
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        return (status, Vec::new()).into_response();
    }
    let protobuf = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v == "application/x-protobuf");
    if !protobuf {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new()).into_response();
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body.clone()) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    {
        let mut received = behaviour.lock();
        received.requests.push(request);
        received.headers.push(headers);
        received.bodies.push(body);
    }
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

impl Collector {
    pub(crate) fn start() -> Self {
        let behaviour = Arc::new(Behaviour {
            received: Mutex::default(),
            status: AtomicU16::new(200),
            held: tokio::sync::watch::Sender::new(false),
        });
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(Arc::clone(&behaviour));
        let server = Server::start(app);
        Self {
            endpoint: server.endpoint.clone(),
            behaviour,
            _server: server,
        }
    }

    /// From now on, requests wait unanswered (an export in flight blocks
    /// the batch processor) until [`release`](Self::release).
    pub(crate) fn hold(&self) {
        self.behaviour.held.send_replace(true);
    }

    /// Answers the requests held and those to come.
    pub(crate) fn release(&self) {
        self.behaviour.held.send_replace(false);
    }

    /// From now on, answers with `status` (an error status refuses the
    /// spans; 200 takes them).
    pub(crate) fn answer(&self, status: u16) {
        self.behaviour.status.store(status, Ordering::SeqCst);
    }

    /// How many requests were answered with an error status.
    pub(crate) fn refused(&self) -> usize {
        self.lock().refused
    }

    /// The bodies of every export request taken, as they were sent.
    pub(crate) fn bodies(&self) -> Vec<Bytes> {
        self.lock().bodies.clone()
    }

    /// Every export request received so far.
    pub(crate) fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        self.lock().requests.clone()
    }

    /// The HTTP headers of every export request received so far.
    pub(crate) fn headers(&self) -> Vec<HeaderMap> {
        self.lock().headers.clone()
    }

    /// Every span received so far, with its resource's `service.name`.
    pub(crate) fn spans(&self) -> Vec<(String, Span)> {
        let mut out = Vec::new();
        for request in self.requests() {
            for resource in request.resource_spans {
                let service = resource
                    .resource
                    .as_ref()
                    .and_then(|r| text(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        out.push((service.clone(), span));
                    }
                }
            }
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.behaviour.lock()
    }
}

impl Behaviour {
    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The value of attribute `key`.
pub(crate) fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

/// The string value of attribute `key`.
pub(crate) fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    match attr(attributes, key)? {
        Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

/// The integer value of attribute `key`.
pub(crate) fn int(attributes: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attributes, key)? {
        Value::IntValue(n) => Some(*n),
        _ => None,
    }
}

/// The string array value of attribute `key`.
pub(crate) fn strings(attributes: &[KeyValue], key: &str) -> Option<Vec<String>> {
    match attr(attributes, key)? {
        Value::ArrayValue(array) => array
            .values
            .iter()
            .map(|v| match &v.value {
                Some(Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}
