//! Eval reports in the studio: the API (the browser test is in browser.rs).

use crate::support::{TempDir, get, temp_dir};
use harness::llm::{Expect, LanguageModel, ModelRequest, ModelResponse, ScriptedModel};
use harness::session::SessionStore;
use harness::{Cx, Harness, HarnessState, JsonSchema, SessionId, StepResult, create_agent_with};
use harness_evals::{
    Case, CaseCx, Contains, Dataset, Equals, Evaluators, Experiment, Progress, Report, TaskError,
    task_fn,
};
use harness_stores::SledStore;
use harness_studio::{Serving, Studio};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// An agent with one step that asks the model for a capital.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Quiz {
    pub question: String,
    pub answer: Option<String>,
}

/// The markup a model may answer with: shown as text, never run.
pub const MARKUP: &str = "<img src=x onerror=\"window.pwned = 1\">Rome";

#[derive(harness::Context)]
pub struct Deps {
    #[slot(agent)]
    pub model: Arc<dyn LanguageModel>,
}

async fn ask(quiz: Arc<Quiz>, cx: Cx<Deps>) -> StepResult<QuizUpdate> {
    let request = ModelRequest::builder().user(quiz.question.clone()).build();
    let response = cx.complete(cx.model.as_ref(), &request).await?;
    Ok(QuizUpdate::new().answer(Some(response.text())))
}

/// Runs an eval of 3 cases on a sled store (one passes, one fails, one's
/// answer is markup), and serves a read-only studio on that store with the
/// report.
pub async fn served() -> (Serving, TempDir, Report) {
    let dir = temp_dir("evals");
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
    let report = evaluate(&store, |_| None).await;
    (serve(store, report.clone()).await, TempDir(dir), report)
}

/// How many sessions [`served_past_the_first_page`]'s store holds besides
/// the eval's runs: more than the list's first page.
pub const OTHERS: usize = 120;

/// The eval of [`served`] on a store that holds [`OTHERS`] sessions first
/// (submitted, with random ids), each case's run in a session whose id
/// sorts after theirs (`ffffffff-eval-CASE`): past the first page of the
/// list, which the page loads. The report served also names a session the
/// store does not hold (returned), as a report made against another store
/// does: the japan case's second.
pub async fn served_past_the_first_page() -> (Serving, TempDir, Report, String) {
    let dir = temp_dir("evals-crowded");
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
    let agent = create_agent_with(
        "quiz",
        &quiz(&store),
        DepsAgent {
            model: Arc::new(ScriptedModel::new([])),
        },
    );
    for i in 0..OTHERS {
        agent
            .submit(Quiz {
                question: format!("question {i}"),
                answer: None,
            })
            .await
            .unwrap();
    }
    let mut report = evaluate(&store, |case| {
        Some(SessionId::from(format!("ffffffff-eval-{case}")))
    })
    .await;
    let elsewhere = SessionId::random().to_string();
    report.cases[1].record.sessions.push(elsewhere.clone());
    (
        serve(store, report.clone()).await,
        TempDir(dir),
        report,
        elsewhere,
    )
}

/// The quiz agent's harness on `store`.
fn quiz(store: &Arc<dyn SessionStore>) -> Arc<Harness<Quiz, Deps>> {
    Arc::new(
        Harness::<Quiz, Deps>::builder()
            .step("ask")
            .run(ask)
            .end()
            .start("ask")
            .store(Arc::clone(store))
            .build()
            .unwrap(),
    )
}

/// The eval of 3 cases, each run in a new session of `store` (the one
/// `session_of` gives the case, if any).
async fn evaluate(
    store: &Arc<dyn SessionStore>,
    session_of: fn(&str) -> Option<SessionId>,
) -> Report {
    let model: Arc<dyn LanguageModel> = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text("Paris")),
        Expect::any().reply(ModelResponse::from_text("Osaka")),
        Expect::any().reply(ModelResponse::from_text(MARKUP)),
    ]));
    let harness = quiz(store);
    let task = task_fn(move |question: String, cx: CaseCx| {
        let harness = Arc::clone(&harness);
        async move {
            let agent = create_agent_with("quiz", &harness, DepsAgent { model: cx.model() });
            let quiz = Quiz {
                question,
                answer: None,
            };
            let mut run = match session_of(cx.case()) {
                Some(id) => agent.run_in(id, quiz),
                None => agent.run(quiz),
            };
            let outcome = cx.observe(&mut run).await?;
            Ok::<_, TaskError>(outcome.state.answer.unwrap_or_default())
        }
    });
    let dataset = Dataset::new(
        "capitals",
        [
            Case::new("france", "Capital of France?".to_owned()).expect("Paris".to_owned()),
            Case::new("japan", "Capital of Japan?".to_owned()).expect("Tokyo".to_owned()),
            Case::new("italy", "Capital of Italy?".to_owned()).expect("Rome".to_owned()),
        ],
    );
    let evaluators = Evaluators::new()
        .with(Equals::expected())
        .with(Contains::expected().named("mentions"));
    Experiment::new("capitals-v1")
        .model(model)
        .progress(Progress::Off)
        .run(&dataset, &task, &evaluators)
        .await
        .unwrap()
}

/// A read-only studio on `store` showing `report`.
async fn serve(store: Arc<dyn SessionStore>, report: Report) -> Serving {
    Studio::read_only(store)
        .reports([report])
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_api_lists_reports_and_shows_one_case_by_case() {
    let (studio, _dir, report) = served().await;
    let info = json(&get(&studio, "/api/info").await.body);
    assert_eq!(info["evals"], true);

    let list = json(&get(&studio, "/api/evals").await.body);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["experiment"], "capitals-v1");
    assert_eq!(
        (list[0]["cases"].as_u64(), list[0]["passed"].as_u64()),
        (Some(3), Some(1))
    );

    let one = get(&studio, "/api/evals/0").await;
    assert_eq!(one.status, 200, "{}", one.body);
    let one = json(&one.body);
    assert_eq!(
        one["evaluator_names"],
        serde_json::json!(["equals", "mentions"])
    );
    let japan = &one["cases"][1];
    assert_eq!(japan["name"], "japan");
    assert_eq!(japan["output"], "Osaka");
    assert_eq!(japan["scores"]["equals"]["score"]["passed"], false);
    assert!(
        japan["scores"]["equals"]["score"]["reason"]
            .as_str()
            .unwrap()
            .contains("Tokyo")
    );
    assert_eq!(japan["steps"], serde_json::json!(["ask"]));
    // The case's run is a session of the store the studio reads.
    let session = japan["sessions"][0].as_str().unwrap();
    assert_eq!(session, report.cases[1].record.sessions[0]);
    let found = get(&studio, &format!("/api/sessions/{session}")).await;
    assert_eq!(found.status, 200, "{}", found.body);
    // The markup answer passes `mentions` (it contains Rome) and stays data.
    assert_eq!(one["cases"][2]["output"], MARKUP);

    for bad in ["1", "99", "x", "-1"] {
        let r = get(&studio, &format!("/api/evals/{bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert!(
            json(&r.body)["error"].as_str().unwrap().contains(bad),
            "{}",
            r.body
        );
    }
}

#[tokio::test]
async fn a_studio_without_reports_says_so() {
    let dir = temp_dir("evals-none");
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
    let studio = Studio::read_only(store)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(json(&get(&studio, "/api/info").await.body)["evals"], false);
    assert_eq!(
        json(&get(&studio, "/api/evals").await.body),
        serde_json::json!([])
    );
    let r = get(&studio, "/api/evals/0").await;
    assert_eq!(r.status, 400);
    let error = json(&r.body)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("shows no eval report"), "{error}");
    assert!(!error.contains("0 to"), "{error}");
    drop(TempDir(dir));
}

#[tokio::test]
async fn a_session_a_report_names_is_looked_up_by_id_wherever_it_is_in_the_list() {
    let (studio, _dir, report, elsewhere) = served_past_the_first_page().await;
    let first_page = json(&get(&studio, "/api/sessions").await.body);
    let first_page: Vec<&str> = first_page
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(first_page.len(), 100);
    let japan = &report.cases[1];
    assert_eq!(japan.name, "japan");
    let run = japan.record.sessions[0].clone();
    assert_eq!(japan.record.sessions, [run.clone(), elsewhere.clone()]);
    assert!(
        !first_page.contains(&run.as_str()),
        "{run} is on the first page"
    );

    // The run: found by its id, as the list shows it.
    let r = get(&studio, &format!("/api/sessions/{run}/summary")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let summary = json(&r.body);
    assert_eq!(summary["id"], run.as_str());
    assert_eq!(summary["agent"], "quiz");
    assert_eq!(summary["phase"], "done");
    assert_eq!(summary["steps"], 1);

    // A session of another store: a typed 404.
    let r = get(&studio, &format!("/api/sessions/{elsewhere}/summary")).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    assert_eq!(
        r.error(),
        format!("no session {elsewhere} in the store"),
        "{}",
        r.body
    );

    // It takes no parameter: one given is a 400 naming it.
    let r = get(&studio, &format!("/api/sessions/{run}/summary?pointer=/x")).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let body = json(&r.body);
    assert_eq!(body["kind"], "parameter", "{}", r.body);
    assert_eq!(body["parameter"], "pointer", "{}", r.body);
    assert!(r.error().contains("takes no parameter"), "{}", r.body);
    // The token may come in the URL, as for every call.
    let r = get(
        &studio,
        &format!("/api/sessions/{run}/summary?token={}", studio.token()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

pub fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap()
}
