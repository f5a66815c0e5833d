//! The process's secrets (`harness::secrets`) never leave through the
//! studio: not in an error a store quoted them in, not in what a session
//! stored before they were registered, not on the event stream.

use crate::support::{TempDir, get, temp_dir};
use async_trait::async_trait;
use harness::secrets;
use harness::session::{Checkpoint, Commit, SessionStore, StoreError, StoredRun};
use harness::{
    Cx, Harness, HarnessState, JsonSchema, SessionId, StepError, StepResult, create_agent,
};
use harness_stores::SledStore;
use harness_studio::Studio;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A password in a store's URL, registered as a secret.
const PASSWORD: &str = "studio-store-pw-5f0c2d9a71";
/// A token a step quoted in its state and its error before it was
/// registered.
const TOKEN: &str = "studio-late-token-8e41b7c3d2";

/// A store that cannot list its sessions, and says where it failed.
#[derive(Debug)]
struct Unreachable(SledStore);

#[async_trait]
impl SessionStore for Unreachable {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        self.0.load(session).await
    }
    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        self.0.commit(commit).await
    }
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.0.checkpoints(session, from_seq).await
    }
    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        Err(StoreError::backend(format!(
            "cannot reach postgres://studio:{PASSWORD}@db.internal/harness: refused"
        )))
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.0.flush().await
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Leaky {
    #[field(reduce = append)]
    notes: Vec<String>,
}

async fn quote(_: Arc<Leaky>, _: Cx<()>) -> StepResult<LeakyUpdate> {
    Ok(LeakyUpdate::new().notes(vec![format!("the token is {TOKEN}")]))
}

async fn fail(_: Arc<Leaky>, _: Cx<()>) -> StepResult<LeakyUpdate> {
    Err(StepError::msg(format!("401 for token {TOKEN}")))
}

/// The first event of the stream, as text.
async fn first_event(addr: std::net::SocketAddr, token: &str) -> String {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET /api/events?token={token} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(30), async {
        while !String::from_utf8_lossy(&raw).contains("\n\n") {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the stream closed");
            raw.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("an event within 30 s");
    String::from_utf8_lossy(&raw).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_a_store_quotes_in_its_error_is_redacted() {
    assert!(secrets::register(PASSWORD));
    let dir = temp_dir("secrets-store");
    let _dir = TempDir(dir.clone());
    let store = Arc::new(Unreachable(SledStore::open(dir.join("db")).unwrap()));
    let s = Studio::read_only(store)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let r = get(&s, "/api/sessions").await;
    assert_eq!(r.status, 500, "{}", r.body);
    let error = r.error();
    assert!(
        error.contains("postgres://studio:[redacted]@db.internal"),
        "{error}"
    );
    assert!(!r.body.contains(PASSWORD), "{}", r.body);
    let event = first_event(s.local_addr(), s.token()).await;
    assert!(event.contains("event: error"), "{event}");
    assert!(
        event.contains("[redacted]") && !event.contains(PASSWORD),
        "{event}"
    );
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_registered_after_a_session_stored_it_is_redacted_in_what_the_studio_sends() {
    let dir = temp_dir("secrets-late");
    let _dir = TempDir(dir.clone());
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
    let harness = Harness::<Leaky>::builder()
        .step("quote")
        .run(quote)
        .next("fail")
        .step("fail")
        .run(fail)
        .end()
        .start("quote")
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let agent = create_agent("leaky", &harness);
    assert!(agent.run(Leaky::default()).await.is_err());
    let id = store.sessions().await.unwrap().remove(0);
    // Stored as the step wrote it: the token was no secret yet.
    let head = store.load(&id).await.unwrap().unwrap();
    assert!(format!("{:?}", head.phase).contains(TOKEN));

    assert!(secrets::register(TOKEN));
    let s = Studio::for_agent(&agent, &harness, Arc::clone(&store))
        .unwrap()
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    for path in [
        "/api/sessions".to_owned(),
        format!("/api/sessions/{id}"),
        format!("/api/sessions/{id}/timeline"),
        format!("/api/sessions/{id}/state?seq=1"),
        // An error naming what was asked for.
        format!("/api/sessions/{TOKEN}"),
    ] {
        let r = get(&s, &path).await;
        assert!(
            r.body.contains("[redacted]") && !r.body.contains(TOKEN),
            "{path}: {}",
            r.body
        );
        // Still JSON, and what was not secret is as it was.
        let v = r.json();
        assert!(!v.is_null(), "{path}");
    }
    // The list's search matches what it sends: a secret's characters
    // find nothing, its mark finds the session.
    for q in [TOKEN, "late-token-8e41", "8e41b7c3d2"] {
        let r = get(&s, &format!("/api/sessions?q={q}")).await;
        assert_eq!(r.status, 200, "{q}: {}", r.body);
        assert_eq!(r.json(), json!([]), "{q}");
    }
    let found = get(&s, "/api/sessions?q=token+%5Bredacted%5D").await.json();
    assert_eq!(found[0]["id"], json!(id.to_string()), "{found}");
    let state = get(&s, &format!("/api/sessions/{id}/state?seq=1"))
        .await
        .json();
    assert_eq!(state["state"]["notes"], json!(["the token is [redacted]"]));
    let event = first_event(s.local_addr(), s.token()).await;
    assert!(
        event.contains("[redacted]") && !event.contains(TOKEN),
        "{event}"
    );
    s.shutdown().await.unwrap();
}
