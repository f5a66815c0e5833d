//! harness-evals: datasets, evaluators, experiments, reports.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod cli;
mod collisions;
mod dataset;
mod evaluators;
mod experiment;
mod json_form;
mod reports;
mod robustness;
mod secrets;
mod timeouts;
mod trajectory;

use harness::llm::{Exchange, ModelRequest, ModelResponse, Outcome, ToolCall};
use harness_evals::{CaseRecord, CaseReport, EventRecord, REPORT_VERSION, Report, Score, Scored};
use serde_json::json;

/// A record whose model asked for `calls` (one exchange each, then an
/// answer) and whose loop finished `steps` (`path/step` or `step`).
pub fn record(calls: &[(&str, serde_json::Value)], steps: &[&str]) -> CaseRecord {
    let mut record = CaseRecord::default();
    for (i, (name, args)) in calls.iter().enumerate() {
        record.exchanges.push(Exchange {
            request: ModelRequest::builder().user(format!("turn {i}")).build(),
            outcome: Outcome::Response(ModelResponse::from_tool_call(ToolCall::new(
                format!("c{i}"),
                *name,
                args.clone(),
            ))),
        });
    }
    record.exchanges.push(Exchange {
        request: ModelRequest::builder().user("last").build(),
        outcome: Outcome::Response(ModelResponse::from_text("done")),
    });
    for step in steps {
        let (path, step) = match step.rsplit_once('/') {
            Some((path, step)) => (path.to_owned(), step.to_owned()),
            None => (String::new(), (*step).to_owned()),
        };
        let mut event: EventRecord =
            serde_json::from_value(serde_json::json!({"kind": "step_finished", "step": step}))
                .expect("an event record");
        event.path = path;
        record.events.push(event);
    }
    record
}

/// A report of one evaluator, `score`, with a case of each value (passed
/// from 0.5), made by hand: any value, NaN included, is kept as it is.
pub fn report(name: &str, values: &[f64]) -> Report {
    Report {
        version: REPORT_VERSION,
        experiment: name.into(),
        dataset: "d".into(),
        provider: None,
        model: Some(name.into()),
        evaluators: vec!["score".into()],
        started_ms: 0,
        elapsed_ms: 1.0,
        cases: values
            .iter()
            .enumerate()
            .map(|(i, v)| CaseReport {
                name: format!("case-{i}"),
                tags: vec![],
                metadata: Default::default(),
                input: json!(i),
                expected: None,
                output: Some(json!(v)),
                failure: None,
                scores: [(
                    "score".to_owned(),
                    Scored::Score(Score {
                        value: *v,
                        passed: *v >= 0.5,
                        reason: String::new(),
                    }),
                )]
                .into(),
                record: CaseRecord::default(),
            })
            .collect(),
    }
}
