//! Tool-approval requests of the agent kit over the JSON API: the session
//! shows the pending calls and the answer's shape; decisions that do not
//! fit the calls (not decisions at all, a call left out, an unknown or
//! repeated call id, edited arguments against the tool's schema) are
//! refused with each problem naming its call, and nothing is resumed; good
//! decisions resume the agent, which runs what was approved only.

use crate::support::{eventually, post};
use crate::support_kit::{ApprovalWorld, DELETE, NOTES, WRITE, result_of};
use harness::session::SessionPhase;
use harness_studio::Serving;
use serde_json::{Value, json};

async fn answer(s: &Serving, w: &ApprovalWorld, answer: Value) -> crate::support::Response {
    post(
        s,
        &format!("/api/sessions/{}/answer", w.waiting),
        &json!({"interrupt": w.interrupt, "answer": answer}).to_string(),
    )
    .await
}

/// The problems a refusal lists, as `call_id:problem`.
fn problems(body: &Value) -> Vec<String> {
    body["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("a list of problems in {body}"))
        .iter()
        .map(|p| {
            let (id, kind) = (
                p["call_id"].as_str().unwrap(),
                p["problem"].as_str().unwrap(),
            );
            let message = p["message"].as_str().unwrap();
            assert!(message.contains(id), "{message} names its call {id}");
            format!("{id}:{kind}")
        })
        .collect()
}

async fn until_done(w: &ApprovalWorld) {
    eventually("the session completed", || async {
        matches!(w.phase().await, SessionPhase::Completed { .. }).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_waiting_for_tool_approval_shows_the_calls_and_the_answer_s_shape() {
    let w = ApprovalWorld::new("approval-detail").await;
    let s = w.studio().await;
    let d = crate::support::get(&s, &format!("/api/sessions/{}", w.waiting))
        .await
        .json();
    let payload = &d["interrupt"]["payload"];
    assert_eq!(payload["kind"], "tool_approval");
    let calls: Vec<(&str, &str)> = payload["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["call_id"].as_str().unwrap(), c["tool"].as_str().unwrap()))
        .collect();
    assert_eq!(calls, [(WRITE, "write_file"), (DELETE, "delete_file")]);
    assert_eq!(
        payload["calls"][0]["arguments"],
        json!({"path": "summary.txt", "text": "two notes"})
    );
    assert_eq!(
        payload["calls"][0]["schema"]["properties"]["text"]["type"],
        "string"
    );
    // Nothing declared: the studio knows the kit's answer by the payload.
    assert!(
        d["answer_shape"]["type"] == "Decisions",
        "{}",
        d["answer_shape"]
    );
    assert!(
        d["answer_shape"]["schema"]["properties"]["decisions"].is_object(),
        "{}",
        d["answer_shape"]
    );
    s.shutdown().await.unwrap();
    w.untouched("only looked at").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_that_do_not_fit_the_calls_are_refused_per_call_and_nothing_resumes() {
    let w = ApprovalWorld::new("approval-bad").await;
    let s = w.studio().await;

    // Not decisions at all: refused with the shape expected.
    for bad in [
        json!("yes"),
        json!({"approve": true}),
        json!({"decisions": "all"}),
        json!({"decisions": [{"call_id": WRITE, "decision": "maybe"}]}),
        json!({"decisions": [{"call_id": WRITE}]}),
        json!({"decisions": [{"decision": "approve"}]}),
        json!({"decisions": [{"call_id": WRITE, "decision": "edit"}]}),
    ] {
        let r = answer(&s, &w, bad.clone()).await;
        assert_eq!(r.status, 422, "{bad}: {}", r.body);
        assert!(
            r.error().contains("tool-approval request must be"),
            "{bad}: {}",
            r.body
        );
        w.untouched(&bad.to_string()).await;
    }

    // Decisions that do not fit the waiting calls: each problem names its
    // call.
    let cases = [
        (
            "a call left out",
            json!({"decisions": [{"call_id": WRITE, "decision": "approve"}]}),
            vec![format!("{DELETE}:missing_decision")],
        ),
        (
            "no decision at all",
            json!({"decisions": []}),
            vec![
                format!("{WRITE}:missing_decision"),
                format!("{DELETE}:missing_decision"),
            ],
        ),
        (
            "an unknown call",
            json!({"decisions": [
                {"call_id": WRITE, "decision": "approve"},
                {"call_id": DELETE, "decision": "reject", "message": "no"},
                {"call_id": "call_9", "decision": "approve"},
            ]}),
            vec!["call_9:unknown_call".to_owned()],
        ),
        (
            "a call decided twice",
            json!({"decisions": [
                {"call_id": WRITE, "decision": "approve"},
                {"call_id": WRITE, "decision": "reject", "message": "no"},
                {"call_id": DELETE, "decision": "approve"},
            ]}),
            vec![format!("{WRITE}:duplicate_decision")],
        ),
        (
            "an edit of the wrong type",
            json!({"decisions": [
                {"call_id": WRITE, "decision": "edit", "arguments": {"path": 3, "text": "x"}},
                {"call_id": DELETE, "decision": "approve"},
            ]}),
            vec![format!("{WRITE}:invalid_edit")],
        ),
        (
            "an edit missing a field",
            json!({"decisions": [
                {"call_id": WRITE, "decision": "approve"},
                {"call_id": DELETE, "decision": "edit", "arguments": {"file": "notes.txt"}},
            ]}),
            vec![format!("{DELETE}:invalid_edit")],
        ),
        (
            "an edit against a constraint of the schema",
            json!({"decisions": [
                {"call_id": WRITE, "decision": "edit", "arguments": {"path": "", "text": "x"}},
                {"call_id": DELETE, "decision": "approve"},
            ]}),
            vec![format!("{WRITE}:invalid_edit")],
        ),
        (
            "an edit that is not an object",
            json!({"decisions": [
                {"call_id": WRITE, "decision": "edit", "arguments": "summary.txt"},
                {"call_id": DELETE, "decision": "reject"},
            ]}),
            vec![format!("{WRITE}:invalid_edit")],
        ),
        (
            "several problems at once",
            json!({"decisions": [
                {"call_id": WRITE, "decision": "edit", "arguments": {}},
                {"call_id": "call_0", "decision": "approve"},
            ]}),
            vec![
                format!("{WRITE}:invalid_edit"),
                format!("{DELETE}:missing_decision"),
                "call_0:unknown_call".to_owned(),
            ],
        ),
    ];
    for (what, bad, expected) in cases {
        let r = answer(&s, &w, bad).await;
        assert_eq!(r.status, 422, "{what}: {}", r.body);
        let body = r.json();
        assert!(
            r.error().contains("tool-approval answer cannot be applied"),
            "{what}: {}",
            r.body
        );
        assert_eq!(problems(&body), expected, "{what}");
        w.untouched(what).await;
    }
    // The schema's own words reach the page: which field, what is wrong.
    let r = answer(
        &s,
        &w,
        json!({"decisions": [
            {"call_id": WRITE, "decision": "edit", "arguments": {"path": 3, "text": "x"}},
            {"call_id": DELETE, "decision": "approve"},
        ]}),
    )
    .await;
    assert!(r.error().contains("path"), "{}", r.body);

    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_calls_run_rejected_ones_do_not_and_the_model_reads_why() {
    let w = ApprovalWorld::new("approval-good").await;
    let s = w.studio().await;
    // In any order.
    let r = answer(
        &s,
        &w,
        json!({"decisions": [
            {"call_id": DELETE, "decision": "reject", "message": "keep notes.txt, it is my only copy"},
            {"call_id": WRITE, "decision": "approve"},
        ]}),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    until_done(&w).await;
    s.shutdown().await.unwrap();

    assert_eq!(w.file("summary.txt").as_deref(), Some("two notes"));
    assert_eq!(w.file("notes.txt").as_deref(), Some(NOTES));
    let requests = w.model.requests();
    assert_eq!(requests.len(), 2);
    let wrote = result_of(&requests[1], WRITE);
    assert!(!wrote.is_error, "{wrote:?}");
    assert!(wrote.content.contains("wrote 9 bytes"), "{wrote:?}");
    let rejected = result_of(&requests[1], DELETE);
    assert!(rejected.is_error, "{rejected:?}");
    assert!(
        rejected
            .content
            .contains("keep notes.txt, it is my only copy"),
        "{rejected:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_runs_with_the_new_arguments_and_a_correction_reaches_the_model() {
    let w = ApprovalWorld::new("approval-edit").await;
    let s = w.studio().await;
    let r = answer(
        &s,
        &w,
        json!({"decisions": [
            {"call_id": WRITE, "decision": "edit", "arguments": {"path": "edited.txt", "text": "edited"}},
            {"call_id": DELETE, "decision": "correct", "message": "archive it instead"},
        ]}),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    until_done(&w).await;
    s.shutdown().await.unwrap();

    assert_eq!(w.file("edited.txt").as_deref(), Some("edited"));
    assert_eq!(w.file("summary.txt"), None);
    assert_eq!(w.file("notes.txt").as_deref(), Some(NOTES));
    let second = &w.model.requests()[1];
    assert!(!result_of(second, WRITE).is_error);
    assert!(result_of(second, DELETE).is_error);
    let last = second.messages.last().unwrap();
    assert_eq!(last.text(), "archive it instead");
}
