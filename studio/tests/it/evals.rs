//! Eval reports in the studio: the API (the browser test is in browser.rs).

use crate::support::{TempDir, get, temp_dir};
use harness::llm::{Expect, LanguageModel, ModelRequest, ModelResponse, ScriptedModel};
use harness::session::SessionStore;
use harness::{Cx, Harness, HarnessState, JsonSchema, StepResult, create_agent_with};
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
    let model: Arc<dyn LanguageModel> = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text("Paris")),
        Expect::any().reply(ModelResponse::from_text("Osaka")),
        Expect::any().reply(ModelResponse::from_text(MARKUP)),
    ]));
    let harness = Arc::new(
        Harness::<Quiz, Deps>::builder()
            .step("ask")
            .run(ask)
            .end()
            .start("ask")
            .store(Arc::clone(&store))
            .build()
            .unwrap(),
    );
    let task = task_fn(move |question: String, cx: CaseCx| {
        let harness = Arc::clone(&harness);
        async move {
            let agent = create_agent_with("quiz", &harness, DepsAgent { model: cx.model() });
            let mut run = agent.run(Quiz {
                question,
                answer: None,
            });
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
    let report = Experiment::new("capitals-v1")
        .model(model)
        .progress(Progress::Off)
        .run(&dataset, &task, &evaluators)
        .await
        .unwrap();
    let serving = Studio::read_only(Arc::clone(&store))
        .reports([report.clone()])
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    (serving, TempDir(dir), report)
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
    assert_eq!(get(&studio, "/api/evals/0").await.status, 400);
    drop(TempDir(dir));
}

pub fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap()
}
