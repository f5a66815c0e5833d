//! Patches for failed cells: the rule patcher, the model patcher with a
//! scripted model (fenced code, unified diff, retries, budget), applying a
//! patch to the graph and rolling it back.

#![allow(clippy::unwrap_used)]

use crate::support::{graph_of, run_all};

use harness::llm::{Expect, ModelError, ModelResponse, ScriptedModel, Usage};
use harness_code::diagnose::{CellFailure, Diagnosis, Suggestion, diagnose};
use harness_code::patch::{
    AnswerError, DiffError, ModelPatcher, PatchError, Patcher, RulePatcher, apply_patch,
    apply_unified_diff, parse_answer, rollback_patch,
};
use harness_code::{
    AnalysisError, AnalysisOptions, CellId, CellRun, CellStatus, ExecutionStateGraph, Timestamp,
};

/// A notebook whose cell 2 misspells `total`, with a consumer after it.
const SALES: [&str; 4] = [
    "rows = [{'amount': '3.5'}, {'amount': '4'}]",
    "total = 0\nfor row in rows:\n    total += float(row['amount'])",
    "average = totl / len(rows)\nprint(f'average: {average:.2f}')",
    "report = {'average': average, 'n': len(rows)}",
];

const FIXED_CELL_2: &str = "average = total / len(rows)\nprint(f'average: {average:.2f}')";

fn sales_diagnosis() -> (ExecutionStateGraph, Vec<CellId>, Diagnosis) {
    let (mut graph, s) = graph_of(&SALES);
    run_all(&mut graph);
    let failure =
        CellFailure::exception(s[2], "NameError", "name 'totl' is not defined").at_line(1);
    let d = diagnose(&failure, &graph);
    (graph, s, d)
}

// ---------------------------------------------------------------- rules

#[tokio::test]
async fn rule_patcher_renames_the_misspelled_name() {
    let (graph, s, d) = sales_diagnosis();
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    assert_eq!(patch.cell, s[2]);
    assert_eq!(patch.base_version, 1);
    assert_eq!(patch.old_source, SALES[2]);
    assert_eq!(patch.new_source, FIXED_CELL_2);
    assert!(
        patch
            .diff
            .contains("-average = totl / len(rows)\n+average = total / len(rows)\n")
    );
    assert_eq!(patch.provenance.patcher, "rules");
    assert_eq!(patch.provenance.description, "rename `totl` to `total`");
    assert_eq!(patch.provenance.model, None);
    assert!(
        patch
            .provenance
            .diagnosis
            .starts_with("NameError in cell 2, line 1")
    );
}

#[tokio::test]
async fn rule_rename_respects_scopes_strings_and_attributes() {
    let failing = "label = 'totl'\nprint(f'{label}: {totl}', stats.totl)\nhalves = [totl / 2 for _ in range(2)]\ndef fmt(totl):\n    return totl * 2\ndef show():\n    print(totl)\nsquares = [totl * totl for totl in range(3)]";
    let (graph, s) = graph_of(&["total = 10\nstats = None", failing]);
    let failure =
        CellFailure::exception(s[1], "NameError", "name 'totl' is not defined").at_line(2);
    let d = diagnose(&failure, &graph);
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    assert_eq!(
        patch.new_source,
        "label = 'totl'\nprint(f'{label}: {total}', stats.totl)\nhalves = [total / 2 for _ in range(2)]\ndef fmt(totl):\n    return totl * 2\ndef show():\n    print(total)\nsquares = [totl * totl for totl in range(3)]"
    );
}

#[tokio::test]
async fn rule_patcher_renames_a_misspelled_definition() {
    let (graph, s) = graph_of(&[
        "treshold = 3",
        "flagged = [x for x in range(10) if x > threshold]",
        "print(threshold * 2)",
    ]);
    let failure =
        CellFailure::exception(s[1], "NameError", "name 'threshold' is not defined").at_line(1);
    let d = diagnose(&failure, &graph);
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    assert_eq!(patch.cell, s[0]);
    assert_eq!(patch.new_source, "threshold = 3");
}

#[tokio::test]
async fn rule_patcher_adds_the_missing_import_after_docstring_and_future() {
    let (graph, s) = graph_of(&[
        "data = [3, 1, 2]",
        "\"\"\"Summary statistics.\"\"\"\nfrom __future__ import annotations\narr = np.array(data)\nprint(arr.mean())\n",
    ]);
    let failure = CellFailure::exception(s[1], "NameError", "name 'np' is not defined").at_line(3);
    let d = diagnose(&failure, &graph);
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    assert_eq!(
        patch.new_source,
        "\"\"\"Summary statistics.\"\"\"\nfrom __future__ import annotations\nimport numpy as np\narr = np.array(data)\nprint(arr.mean())\n"
    );
    assert_eq!(patch.provenance.description, "add `import numpy as np`");
}

#[tokio::test]
async fn rule_patcher_fixes_a_misspelled_module() {
    let (graph, s) = graph_of(&["import json\nimport pandsa as pd\ndf = pd.DataFrame({'a': [1]})"]);
    let failure = CellFailure::exception(s[0], "ModuleNotFoundError", "No module named 'pandsa'");
    let d = diagnose(&failure, &graph);
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    assert_eq!(
        patch.new_source,
        "import json\nimport pandas as pd\ndf = pd.DataFrame({'a': [1]})"
    );
}

#[tokio::test]
async fn rule_patcher_fixes_a_key_and_an_attribute() {
    let (graph, s) = graph_of(&[
        "row = {'Region': 'north', 'sales': 10}",
        "print(row['region'], row['sales'])\nother = {'region': 1}['region']",
    ]);
    let failure = CellFailure::exception(s[1], "KeyError", "'region'")
        .at_line(1)
        .with_value("row", "{'Region': 'north', 'sales': 10}");
    let d = diagnose(&failure, &graph);
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    assert_eq!(
        patch.new_source,
        "print(row['Region'], row['sales'])\nother = {'region': 1}['region']"
    );

    let (graph, s) = graph_of(&[
        "import pandas as pd\ndf = pd.DataFrame({'a': [1]})",
        "names = list(df.colums)",
    ]);
    let failure = CellFailure::exception(
        s[1],
        "AttributeError",
        "'DataFrame' object has no attribute 'colums'",
    )
    .at_line(1);
    let d = diagnose(&failure, &graph);
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    assert_eq!(patch.new_source, "names = list(df.columns)");
}

#[tokio::test]
async fn rule_patcher_without_an_applicable_rule_is_a_typed_error() {
    let (graph, s) = graph_of(&["while True:\n    pass"]);
    let failure = CellFailure::timeout(s[0], std::time::Duration::from_secs(5));
    let d = diagnose(&failure, &graph);
    let error = RulePatcher::new().propose(&d, &graph).await.unwrap_err();
    assert!(matches!(error, PatchError::NoRule { cell, .. } if cell == s[0]));
    assert_eq!(
        error.to_string(),
        "no cheap rule fixes the timeout error in cell 0"
    );

    // Advice-only suggestions are not rules either.
    let (graph, s) = graph_of(&["from sklearn.linear_model import LinearRegression"]);
    let failure = CellFailure::exception(s[0], "ModuleNotFoundError", "No module named 'sklearn'");
    let d = diagnose(&failure, &graph);
    assert!(matches!(
        d.suggestions[0],
        Suggestion::InstallPackage { .. }
    ));
    assert!(matches!(
        RulePatcher::new().propose(&d, &graph).await,
        Err(PatchError::NoRule { .. })
    ));
}

// ---------------------------------------------------------------- model

#[tokio::test]
async fn model_patcher_reads_a_fenced_code_answer() {
    let (graph, s, d) = sales_diagnosis();
    let model = ScriptedModel::new([Expect::any()
        .last_message_contains("name 'totl' is not defined")
        .last_message_contains("Rewrite cell 2")
        .last_message_contains("close names: `total` (bound by cell 1)")
        .reply(
            ModelResponse::from_text(format!(
                "The variable is misspelled. Here is the fixed cell:\n\n```python\n{FIXED_CELL_2}\n```\n"
            ))
            .with_usage(Usage::new(120, 30)),
        )]);
    let patcher = ModelPatcher::new(model);
    let patch = patcher.propose(&d, &graph).await.unwrap();
    assert_eq!(patch.cell, s[2]);
    assert_eq!(patch.new_source, FIXED_CELL_2);
    assert!(patch.diff.contains("+average = total / len(rows)"));
    let p = &patch.provenance;
    assert_eq!(p.patcher, "model");
    assert_eq!(p.model.as_deref(), Some("scripted"));
    assert_eq!(p.provider.as_deref(), Some("scripted"));
    assert_eq!(p.attempts, 1);
    assert_eq!(p.usage, Some(Usage::new(120, 30)));
    assert_eq!(p.call_id.as_ref().map(String::len), Some(36));
    assert_eq!(patch.graph_provenance().author, "model:scripted");
    assert_eq!(patcher.model().remaining(), 0);

    // The prompt carries the minimal context: the failing cell and the producer of `totl`'s neighbour.
    let request = &patcher.model().requests()[0];
    let prompt = request.messages[1].text();
    assert!(prompt.contains("Cell 1 (suspect)"), "{prompt}");
    assert!(prompt.contains("Cell 2 (failing cell)"), "{prompt}");
    assert!(!prompt.contains("Cell 3"), "{prompt}");
}

#[tokio::test]
async fn model_patcher_applies_a_unified_diff_answer() {
    let (graph, s, d) = sales_diagnosis();
    let answer = "```diff\n--- a/cell-2\n+++ b/cell-2\n@@ -1,2 +1,2 @@\n-average = totl / len(rows)\n+average = total / len(rows)\n print(f'average: {average:.2f}')\n```";
    let model = ScriptedModel::new([Expect::any().reply(ModelResponse::from_text(answer))]);
    let patch = ModelPatcher::new(model).propose(&d, &graph).await.unwrap();
    assert_eq!(patch.cell, s[2]);
    assert_eq!(patch.new_source, FIXED_CELL_2);
}

#[tokio::test]
async fn model_patcher_retries_after_garbage_within_budget() {
    let (graph, _, d) = sales_diagnosis();
    let model = ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text(
            "I think the variable name is wrong, you should check it.",
        )),
        Expect::any()
            .last_message_contains("Your answer could not be used: the code is not valid Python")
            .reply(ModelResponse::from_text(format!(
                "```python\n{FIXED_CELL_2}\n```"
            ))),
    ]);
    let patcher = ModelPatcher::new(model).with_max_attempts(3);
    let patch = patcher.propose(&d, &graph).await.unwrap();
    assert_eq!(patch.new_source, FIXED_CELL_2);
    assert_eq!(patch.provenance.attempts, 2);
    // The retry keeps the conversation: system, prompt, bad answer, feedback.
    assert_eq!(patcher.model().requests()[1].messages.len(), 4);
}

#[tokio::test]
async fn model_patcher_gives_up_after_the_budget_with_a_typed_error() {
    let (graph, s, d) = sales_diagnosis();
    let model = ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text("")),
        Expect::any().reply(ModelResponse::from_text(
            "```diff\n@@ -7 +7 @@\n-nothing here\n+x = 1\n```",
        )),
        Expect::any().reply(ModelResponse::from_text(
            "```python\ndef broken(:\n    pass\n```",
        )),
        Expect::any().reply(ModelResponse::from_text(format!(
            "```python\n{FIXED_CELL_2}\n```"
        ))),
    ]);
    let patcher = ModelPatcher::new(model).with_max_attempts(3);
    let error = patcher.propose(&d, &graph).await.unwrap_err();
    match &error {
        PatchError::BudgetExhausted {
            cell,
            attempts,
            last,
        } => {
            assert_eq!(*cell, s[2]);
            assert_eq!(*attempts, 3);
            assert!(matches!(
                last,
                AnswerError::Syntax(AnalysisError::Syntax { line: 1, .. })
            ));
        }
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
    assert!(error.to_string().contains("in 3 attempts"));
    // The fourth turn was never asked for.
    assert_eq!(patcher.model().remaining(), 1);
}

#[tokio::test]
async fn model_patcher_reports_model_failures() {
    let (graph, _, d) = sales_diagnosis();
    let model = ScriptedModel::new([Expect::any().fail(ModelError::other("boom"))]);
    let error = ModelPatcher::new(model)
        .propose(&d, &graph)
        .await
        .unwrap_err();
    assert!(matches!(error, PatchError::Model { .. }));
}

#[tokio::test]
async fn patchers_are_dyn_compatible_and_chain() {
    let (graph, _, d) = sales_diagnosis();
    let patchers: Vec<Box<dyn Patcher>> = vec![
        Box::new(RulePatcher::new()),
        Box::new(ModelPatcher::new(ScriptedModel::new([]))),
    ];
    let mut proposed = None;
    for patcher in &patchers {
        if let Ok(patch) = patcher.propose(&d, &graph).await {
            proposed = Some((patcher.name().to_owned(), patch));
            break;
        }
    }
    let (name, patch) = proposed.unwrap();
    assert_eq!(name, "rules");
    assert_eq!(patch.new_source, FIXED_CELL_2);
}

#[test]
fn answers_parse_robustly() {
    let options = AnalysisOptions::default();
    let old = "x = 1\nprint(y)\n";
    // Bare code; the trailing line break follows the old source.
    assert_eq!(
        parse_answer("x = 1\nprint(x)", old, options).unwrap(),
        "x = 1\nprint(x)\n"
    );
    // The last python block wins; an unterminated fence still counts.
    let answer = "Old:\n```python\nprint(y)\n```\nNew:\n```python\nx = 1\nprint(x)";
    assert_eq!(
        parse_answer(answer, old, options).unwrap(),
        "x = 1\nprint(x)\n"
    );
    // A bare diff with wrong line numbers.
    let diff = "--- a\n+++ b\n@@ -5,1 +5,1 @@\n-print(y)\n+print(x)\n";
    assert_eq!(
        parse_answer(diff, old, options).unwrap(),
        "x = 1\nprint(x)\n"
    );
    // Unchanged and empty answers are typed errors.
    assert_eq!(
        parse_answer("```python\nx = 1\nprint(y)\n```", old, options),
        Err(AnswerError::Unchanged)
    );
    assert_eq!(parse_answer("  \n", old, options), Err(AnswerError::Empty));
    assert!(matches!(
        parse_answer("@@ -1 +1 @@\n-z = 3\n+z = 4\n", old, options),
        Err(AnswerError::Diff(DiffError::ContextMismatch {
            hunk: 1,
            ..
        }))
    ));
}

#[test]
fn unified_diffs_apply_with_offsets_and_without_positions() {
    let old = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\n";
    let two_hunks =
        "@@ -2,1 +2,2 @@\n-b = 2\n+b = 20\n+bb = 21\n@@ -4,2 +5,2 @@\n d = 4\n-e = 5\n+e = 50\n";
    assert_eq!(
        apply_unified_diff(old, two_hunks).unwrap(),
        "a = 1\nb = 20\nbb = 21\nc = 3\nd = 4\ne = 50\n"
    );
    let no_positions = "@@ @@\n c = 3\n-d = 4\n+d = 40\n";
    assert_eq!(
        apply_unified_diff(old, no_positions).unwrap(),
        "a = 1\nb = 2\nc = 3\nd = 40\ne = 5\n"
    );
    let indented = "def f():\n    return 1\n";
    let loose = "@@ -1,2 +1,2 @@\n def f():\n-  return 1\n+    return 2\n";
    assert_eq!(
        apply_unified_diff(indented, loose).unwrap(),
        "def f():\n    return 2\n"
    );
    assert_eq!(apply_unified_diff(old, "no hunks"), Err(DiffError::NoHunks));
    assert!(matches!(
        apply_unified_diff(old, "@@ -x +y @@\n-a\n"),
        Err(DiffError::BadHeader { line: 1, .. })
    ));
}

// ---------------------------------------------------------------- apply / rollback

#[tokio::test]
async fn apply_creates_a_version_marks_stale_and_rollback_restores() {
    let (mut graph, s, d) = sales_diagnosis();
    graph
        .record_run(
            s[2],
            CellRun {
                outcome: harness_code::CellOutcome::Failed {
                    error: "NameError".into(),
                },
                ..CellRun::ok(Timestamp::from_millis(2), 1)
            },
        )
        .unwrap();
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    let applied = apply_patch(&mut graph, &patch).unwrap();

    assert_eq!(applied.cell, s[2]);
    assert_eq!((applied.previous_version, applied.version), (1, 2));
    // The patched cell and its consumer; the producers stay up to date.
    assert_eq!(applied.stale, [s[2], s[3]]);
    assert_eq!(applied.replay, [s[2], s[3]]);
    assert_eq!(graph.stale_order(), [s[2], s[3]]);
    assert_eq!(graph.cell(s[1]).unwrap().status(), CellStatus::Ok);
    assert_eq!(graph.cell(s[3]).unwrap().status(), CellStatus::Stale);
    let node = graph.cell(s[2]).unwrap();
    assert_eq!(node.source(), FIXED_CELL_2);
    let provenance = &node.current_version().provenance;
    assert_eq!(provenance.author, "patcher:rules");
    assert!(provenance.reason.contains("rename `totl` to `total`"));
    assert!(provenance.reason.contains("fixes NameError in cell 2"));
    // The fixed cell now depends on the cell that binds `total`.
    assert_eq!(graph.dependencies(s[2]).unwrap()[1].0, s[1]);

    // Applying the same patch again conflicts: the cell moved on.
    assert!(matches!(
        apply_patch(&mut graph, &patch),
        Err(PatchError::Conflict {
            expected: 1,
            found: 2,
            ..
        })
    ));

    run_all(&mut graph);
    let stale = rollback_patch(&mut graph, &applied).unwrap();
    assert_eq!(stale, [s[2], s[3]]);
    let node = graph.cell(s[2]).unwrap();
    assert_eq!(node.source(), SALES[2]);
    assert_eq!(node.versions().count(), 3);
    assert_eq!(node.current_version().provenance.author, "patcher:rollback");
    assert_eq!(graph.cell(s[3]).unwrap().status(), CellStatus::Stale);
    // Rolling back twice conflicts too.
    assert!(matches!(
        rollback_patch(&mut graph, &applied),
        Err(PatchError::Conflict { .. })
    ));
}

#[tokio::test]
async fn a_model_patch_applies_with_model_provenance() {
    let (mut graph, s, d) = sales_diagnosis();
    let model = ScriptedModel::new([Expect::any().reply(ModelResponse::from_text(format!(
        "```python\n{FIXED_CELL_2}\n```"
    )))]);
    let patch = ModelPatcher::new(model).propose(&d, &graph).await.unwrap();
    let call_id = patch.provenance.call_id.clone().unwrap();
    apply_patch(&mut graph, &patch).unwrap();
    let provenance = &graph.cell(s[2]).unwrap().current_version().provenance;
    assert_eq!(provenance.author, "model:scripted");
    assert!(provenance.reason.contains(&call_id));
}

#[test]
fn apply_rejects_a_patch_the_graph_cannot_parse() {
    let (mut graph, s) = graph_of(&["x = 1"]);
    let d = diagnose(&CellFailure::exception(s[0], "ValueError", "bad"), &graph);
    let patch = harness_code::patch::Patch::new(
        s[0],
        1,
        "x = 1",
        "x = = 2",
        harness_code::patch::PatchProvenance {
            patcher: "test".into(),
            description: "broken".into(),
            model: None,
            provider: None,
            call_id: None,
            attempts: 0,
            usage: None,
            diagnosis: d.summary(),
            at: Timestamp::from_millis(5),
        },
    );
    assert!(matches!(
        apply_patch(&mut graph, &patch),
        Err(PatchError::Graph { .. })
    ));
    assert_eq!(graph.cell(s[0]).unwrap().versions().count(), 1);
}
