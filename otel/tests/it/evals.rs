//! An eval's cases as traces: each case is a span carrying the experiment
//! and the case, and the agent's run is exported inside it.

use std::sync::Arc;

use harness::llm::{Expect, LanguageModel, Message, ModelRequest, ModelResponse, ScriptedModel};
use harness::{Context, Cx, Harness, HarnessState, StepResult, create_agent_with};
use harness_evals::{
    Case, CaseCx, Contains, Dataset, Evaluators, Experiment, Progress, TaskError, task_fn,
};
use harness_otel::OtelConfig;
use serde::{Deserialize, Serialize};

use crate::collector::{Collector, text};
use crate::traces::{spans_of, traced};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Chat {
    #[field(reduce = append)]
    messages: Vec<Message>,
}

#[derive(Context)]
struct Deps {
    #[slot(agent)]
    model: Arc<dyn LanguageModel>,
}

async fn think(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
    let request = ModelRequest::new(chat.messages.clone());
    let response = cx.complete(cx.model.as_ref(), &request).await?;
    Ok(ChatUpdate::new().messages(vec![response.to_message()]))
}

#[test]
fn each_case_is_a_span_with_the_experiment_and_the_case_holding_its_run() {
    let collector = Collector::start();
    let report = traced(OtelConfig::new(&collector.endpoint), || async {
        let harness = Arc::new(
            Harness::<Chat, Deps>::builder()
                .step("think")
                .run(think)
                .end()
                .start("think")
                .build()
                .unwrap(),
        );
        let task = task_fn(move |question: String, cx: CaseCx| {
            let harness = Arc::clone(&harness);
            async move {
                let agent = create_agent_with("echo", &harness, DepsAgent { model: cx.model() });
                let mut run = agent.run(Chat {
                    messages: vec![Message::user(question)],
                });
                let outcome = cx.observe(&mut run).await?;
                Ok::<_, TaskError>(
                    outcome
                        .state
                        .messages
                        .last()
                        .map(Message::text)
                        .unwrap_or_default(),
                )
            }
        });
        let model = Arc::new(ScriptedModel::new([
            Expect::any().reply(ModelResponse::from_text("one")),
            Expect::any().reply(ModelResponse::from_text("two")),
        ]));
        let dataset = Dataset::<String, String>::new(
            "numbers",
            [
                Case::new("first", "1".to_owned()),
                Case::new("second", "2".to_owned()),
            ],
        );
        Experiment::new("otel-check")
            .model(model)
            .progress(Progress::Off)
            .run(
                &dataset,
                &task,
                &Evaluators::new().with(Contains::text("o")),
            )
            .await
            .unwrap()
    });
    assert_eq!(report.summary().passed, 2);
    let spans = spans_of(&collector);
    for case in ["first", "second"] {
        let span = spans
            .iter()
            .find(|s| s.name == format!("eval {case}"))
            .unwrap_or_else(|| {
                panic!(
                    "an `eval {case}` span in {:?}",
                    spans.iter().map(|s| &s.name).collect::<Vec<_>>()
                )
            });
        assert_eq!(
            text(&span.attributes, "harness.eval.experiment").as_deref(),
            Some("otel-check")
        );
        assert_eq!(
            text(&span.attributes, "harness.eval.case").as_deref(),
            Some(case)
        );
        // The agent's run, and its model call under it, are in the case's span.
        let agent = spans
            .iter()
            .find(|s| s.parent_span_id == span.span_id && s.name.starts_with("invoke_agent"))
            .unwrap_or_else(|| panic!("the run under `eval {case}`"));
        assert_eq!(agent.trace_id, span.trace_id);
        let step = spans
            .iter()
            .find(|s| s.parent_span_id == agent.span_id)
            .expect("a step span");
        assert!(
            spans
                .iter()
                .any(|s| s.parent_span_id == step.span_id && s.name.starts_with("chat"))
        );
    }
    // Two cases, two traces.
    let first = spans.iter().find(|s| s.name == "eval first").unwrap();
    let second = spans.iter().find(|s| s.name == "eval second").unwrap();
    assert_ne!(first.trace_id, second.trace_id);
}
