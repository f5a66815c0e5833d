//! Answering an interrupt of a stored session with an update merged first
//! (`Agent::resume_with_update`, LangGraph's `Command(update, resume)`).

use harness::session::{SessionError, SessionPhase, SessionStore};
use harness::{
    Cx, Harness, HarnessState, InterruptId, JsonSchema, StepResult, create_agent, schemars,
};
use harness_stores::MemoryStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Draft {
    text: String,
    #[field(reduce = append)]
    log: Vec<String>,
}

/// `propose` writes a draft; `approve` asks a human about the draft it
/// sees and records the draft and the answer.
fn agent(store: Arc<dyn SessionStore>, asked: Arc<AtomicU32>) -> harness::Agent<Draft> {
    let h = Harness::<Draft>::builder()
        .step("propose")
        .run(|_: Arc<Draft>, _: Cx<()>| async {
            Ok(DraftUpdate::new().text("first draft".to_string()))
        })
        .next("approve")
        .step("approve")
        .run(move |draft: Arc<Draft>, cx: Cx<()>| {
            let asked = Arc::clone(&asked);
            async move {
                asked.fetch_add(1, Ordering::SeqCst);
                let ok: bool = cx.interrupt(serde_json::json!({ "draft": draft.text }))?;
                StepResult::Ok(DraftUpdate::new().log(vec![format!("{}: {ok}", draft.text)]))
            }
        })
        .end()
        .start("propose")
        .store(store)
        .build()
        .unwrap();
    create_agent("drafts", &h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_an_update_reruns_the_step_on_the_updated_state_and_logs_both_at_once() {
    let store = Arc::new(MemoryStore::new());
    let asked = Arc::new(AtomicU32::new(0));
    let agent = agent(store.clone(), Arc::clone(&asked));
    let paused = agent
        .run(Draft {
            text: String::new(),
            log: Vec::new(),
        })
        .await
        .unwrap();
    let session = paused.session_id.clone();
    let interrupt = paused.interrupt.unwrap();
    assert_eq!(interrupt.payload["draft"], "first draft");
    let before = store.load(&session).await.unwrap().unwrap();

    // A wrong interrupt id: refused, nothing merged or written.
    let wrong = InterruptId::from("not-the-one");
    let update = DraftUpdate::new().text("edited draft".to_string());
    let err = agent
        .resume_with_update(true, &session, &wrong, update.clone())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, SessionError::NoInterrupt(_)), "{err}");
    assert_eq!(store.load(&session).await.unwrap().unwrap(), before);

    // The human edits the draft as they approve it: the step runs again
    // on the edited draft, and its interrupt gets the answer.
    let done = agent
        .resume_with_update(true, &session, &interrupt.id, update)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(done.state.text, "edited draft");
    assert_eq!(done.state.log, ["edited draft: true"]);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    let head = store.load(&session).await.unwrap().unwrap();
    assert!(matches!(head.phase, SessionPhase::Completed { .. }));

    // The update is in the session's log, before the step it preceded: the
    // state rebuilt from the store is the run's, and the history shows it.
    assert_eq!(
        agent.state_at(&session, None).await.unwrap().text,
        "edited draft"
    );
    let steps: Vec<String> = agent
        .history(&session)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, ["$start", "propose", "$input", "approve"]);

    // A session that no longer waits refuses another answer.
    let err = agent
        .resume_with_update(
            true,
            &session,
            &interrupt.id,
            DraftUpdate::new().text("again".to_string()),
        )
        .await
        .err()
        .unwrap();
    assert!(matches!(err, SessionError::NoInterrupt(_)), "{err}");
    assert_eq!(
        agent.state_at(&session, None).await.unwrap().text,
        "edited draft"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_run_paused_at_a_breakpoint_goes_on_in_a_later_run_and_no_step_gets_its_answer() {
    use harness::Breakpoint;
    let store = Arc::new(MemoryStore::new());
    let asked = Arc::new(AtomicU32::new(0));
    let agent = agent(store.clone(), Arc::clone(&asked));
    let empty = || Draft {
        text: String::new(),
        log: Vec::new(),
    };

    // Before `approve`: the session waits on the breakpoint, at `approve`.
    let paused = agent
        .run(empty())
        .pause_before(["approve"])
        .unwrap()
        .await
        .unwrap();
    let session = paused.session_id.clone();
    let stop = paused.interrupt.unwrap();
    assert_eq!(stop.breakpoint, Some(Breakpoint::Before));
    assert_eq!(asked.load(Ordering::SeqCst), 0, "approve has not run");
    let head = store.load(&session).await.unwrap().unwrap();
    assert_eq!(head.next_step.as_deref(), Some("approve"));
    assert!(head.journal.responses.is_empty());

    // Resumed by another run (as another process would): `approve` runs
    // and asks its own question, which the breakpoint's answer does not
    // answer.
    let asking = agent
        .resume(false, &session, &stop.id)
        .await
        .unwrap()
        .await
        .unwrap();
    let question = asking.interrupt.unwrap();
    assert_eq!(question.breakpoint, None);
    assert_eq!(question.payload["draft"], "first draft");
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let done = agent
        .resume(true, &session, &question.id)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(done.state.log, ["first draft: true"]);

    // After `propose`, with an update given as the run goes on: the next
    // step sees it.
    let paused = agent
        .run(empty())
        .pause_after(["propose"])
        .unwrap()
        .await
        .unwrap();
    let stop = paused.interrupt.unwrap();
    assert_eq!(
        (stop.breakpoint, stop.step.as_str()),
        (Some(Breakpoint::After), "approve")
    );
    let asking = agent
        .resume_with_update(
            serde_json::Value::Null,
            &paused.session_id,
            &stop.id,
            DraftUpdate::new().text("reworded".to_string()),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(asking.interrupt.unwrap().payload["draft"], "reworded");
    let steps: Vec<String> = agent
        .history(&paused.session_id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, ["$start", "propose", "$input"]);
}
