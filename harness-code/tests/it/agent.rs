//! The code agent with a real `python3`: real cell failures converted and
//! diagnosed, a patch replaying exactly its dependents, and the
//! `CodeAgent` loop on a scripted model.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::{config, user};
use harness::llm::{Expect, ModelResponse, ScriptedModel};
use harness_code::agent::{
    AgentEvent, AgentStatus, Check, CodeAgent, CodeAgentError, CodeAgentState, latest_value,
};
use harness_code::diagnose::{CellFailure, Diagnosis, ErrorClass, FailureKind, diagnose};
use harness_code::kernel::KernelConfig;
use harness_code::notebook::Notebook;
use harness_code::patch::{Patch, PatchProvenance, RulePatcher};
use harness_code::{CellId, Timestamp};
use tokio::sync::Mutex;

/// Runs `cells` in a fresh notebook (each must succeed but the last), turns
/// the last one's failure into a `CellFailure` and diagnoses it.
async fn diagnose_last(
    cells: &[&str],
    config: KernelConfig,
) -> (CellFailure, Diagnosis, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config).unwrap();
    let (last, earlier) = cells.split_last().unwrap();
    for source in earlier {
        let run = notebook.execute(*source, user()).await.unwrap();
        assert!(run.result.is_ok(), "{source}: {:?}", run.result.error);
    }
    let failure = match notebook.execute(*last, user()).await {
        Ok(run) => CellFailure::from_run(&run).expect("the last cell fails"),
        Err(error) => CellFailure::from_notebook_error(&error).expect("a cell failure"),
    }
    .with_input_values(&notebook);
    let diagnosis = diagnose(&failure, notebook.graph());
    notebook.shutdown().await;
    (failure, diagnosis, dir)
}

fn culprit(diagnosis: &Diagnosis) -> u32 {
    diagnosis.top_culprit().expect("a culprit").cell.get()
}

#[tokio::test]
async fn real_failures_are_converted_and_blamed_on_the_right_cell() {
    // (error class, cells, culprit cell)
    let cases: &[(ErrorClass, &[&str], u32)] = &[
        // a misspelled name: the failing cell itself
        (ErrorClass::Name, &["total = 5", "print(totl)"], 1),
        // `None` from upstream has no attribute `strip`
        (
            ErrorClass::Attribute,
            &["name = {}.get('name')", "clean = name.strip()"],
            0,
        ),
        // the wrong type was produced upstream
        (ErrorClass::Type, &["count = '3'", "n = count + 1"], 0),
        (
            ErrorClass::KeyIndex,
            &[
                "row = {'region': 'north', 'sales': 10}",
                "r = row['regoin']",
            ],
            1,
        ),
        (ErrorClass::KeyIndex, &["xs = []", "first = xs[0]"], 0),
        (
            ErrorClass::Import,
            &["import json", "import nosuchmodule_xyz"],
            1,
        ),
        (ErrorClass::Value, &["count = 0", "avg = 10 / count"], 0),
        (ErrorClass::Value, &["text = 'abc'", "n = int(text)"], 0),
        (
            ErrorClass::Assertion,
            &["xs = [1, 2]", "assert len(xs) == 3"],
            0,
        ),
        // code compiled at run time: code that does not parse, and code
        // that parses but that CPython refuses to compile (`break` outside
        // a loop; a cell holding it is refused before it runs)
        (ErrorClass::Syntax, &["n = 1", "value = eval('n +')"], 1),
        (
            ErrorClass::Syntax,
            &["n = 1", "exec('if n:\\n    break')"],
            1,
        ),
    ];
    for (class, cells, expected) in cases {
        let (failure, diagnosis, _dir) = diagnose_last(cells, config()).await;
        assert_eq!(failure.cell, CellId::new(cells.len() as u32 - 1));
        assert!(failure.traceback.is_some(), "{cells:?}: traceback kept");
        assert_eq!(diagnosis.class, *class, "{cells:?}: {}", diagnosis.report());
        assert_eq!(
            culprit(&diagnosis),
            *expected,
            "{cells:?}: {}",
            diagnosis.report()
        );
    }
}

#[tokio::test]
async fn a_real_failure_carries_line_and_value_summaries() {
    let (failure, diagnosis, _dir) = diagnose_last(
        &[
            "rows = [('north', 10), ('south', 5)]",
            "total = 0\nfor region, sales in rows:\n    total += sale",
        ],
        config(),
    )
    .await;
    assert_eq!(failure.line, Some(3));
    assert_eq!(failure.exception_type(), Some("NameError"));
    assert!(
        failure.values["rows"].starts_with("list(len 2)"),
        "{failure:?}"
    );
    assert_eq!(culprit(&diagnosis), 1);
}

#[tokio::test]
async fn a_timeout_is_a_failure_of_the_running_cell() {
    let config = KernelConfig {
        timeout: Some(Duration::from_secs(3)),
        ..KernelConfig::default()
    };
    let (failure, diagnosis, _dir) =
        diagnose_last(&["import time", "n = 3", "time.sleep(30)"], config).await;
    assert!(matches!(
        failure.kind,
        FailureKind::Timeout { after_ms: 3000 }
    ));
    assert_eq!(diagnosis.class, ErrorClass::Timeout);
    assert_eq!(culprit(&diagnosis), 2);
}

fn provenance(description: &str) -> PatchProvenance {
    PatchProvenance {
        patcher: "test".into(),
        description: description.into(),
        model: None,
        provider: None,
        call_id: None,
        attempts: 1,
        usage: None,
        diagnosis: String::new(),
        at: Timestamp::now(),
    }
}

#[tokio::test]
async fn a_patch_to_an_early_cell_replays_exactly_its_dependents() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let cells = [
        "factor = '2'",
        "rows = [('north', 10), ('south', 5), ('north', 15)]",
        "totals = {}\nfor region, sales in rows:\n    totals[region] = totals.get(region, 0) + sales",
        "scaled = sum(totals.values()) / factor",
        "label = f'{scaled:.1f}'",
    ];
    for source in cells {
        notebook.add_cell(source, user()).unwrap();
    }
    let first = notebook.replay().await.unwrap();
    assert_eq!(first.failed(), [CellId::new(3)]);

    // The failure, converted from the replay, is blamed on the cell that
    // produced the string.
    let entry = first.entry(CellId::new(3)).unwrap();
    let failure = CellFailure::from_replay_entry(entry)
        .unwrap()
        .with_input_values(&notebook);
    assert_eq!(failure.exception_type(), Some("TypeError"));
    assert_eq!(failure.line, Some(1));
    let diagnosis = diagnose(&failure, notebook.graph());
    assert_eq!(culprit(&diagnosis), 0, "{}", diagnosis.report());

    let patch = Patch::new(
        CellId::new(0),
        1,
        cells[0],
        "factor = 2",
        provenance("a number"),
    );
    let applied = notebook.apply_patch(&patch).unwrap();
    assert_eq!(applied.version, 2);
    let report = notebook.replay().await.unwrap();
    let ids = |list: &[u32]| list.iter().map(|&i| CellId::new(i)).collect::<Vec<_>>();
    assert_eq!(report.executed(), ids(&[0, 3, 4]));
    assert!(report.succeeded());

    let check = Check::python("scaled == 15.0 and label == '15.0'");
    let outcome = check.evaluate(&notebook).await.unwrap();
    assert!(outcome.passed, "{}", outcome.message);
    let wrong = Check::python("totals == {'north': 31, 'south': 5}")
        .evaluate(&notebook)
        .await
        .unwrap();
    assert!(!wrong.passed);
    assert!(wrong.message.contains("totals = dict"), "{}", wrong.message);
    notebook.shutdown().await;
}

fn answer(code: &str) -> harness::llm::Turn {
    Expect::any().reply(ModelResponse::from_text(format!(
        "Here is the cell:\n```python\n{code}\n```"
    )))
}

const LOAD: &str = "rows = [('north', 10), ('south', 5), ('north', 20), ('east', 7)]";
const WRONG: &str =
    "totals = {}\nfor region, sales in rows:\n    totals[region] = totals.get(region, 0) + sale";
const RIGHT: &str =
    "totals = {}\nfor region, sales in rows:\n    totals[region] = totals.get(region, 0) + sales";
const CHECK: &str = "totals == {'north': 30, 'south': 5, 'east': 7}";

fn shared(dir: &std::path::Path) -> Arc<Mutex<Notebook>> {
    Arc::new(Mutex::new(Notebook::create(dir, config()).unwrap()))
}

#[tokio::test]
async fn the_code_agent_patches_one_failure_and_reaches_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let notebook = shared(dir.path());
    let model = Arc::new(ScriptedModel::new([
        answer(LOAD),
        Expect::any()
            .last_message_contains("rows = list(len 4)")
            .reply(ModelResponse::from_text(format!("```python\n{WRONG}\n```"))),
        // the model patcher's call: the diagnosis names the misspelling
        Expect::any()
            .last_message_contains("NameError")
            .reply(ModelResponse::from_text(format!("```python\n{RIGHT}\n```"))),
    ]));
    let agent = CodeAgent::new(notebook.clone(), model.clone(), Check::python(CHECK));
    let outcome = agent
        .run("Total the sales per region into `totals`.")
        .await
        .unwrap();
    assert_eq!(outcome.state.status, AgentStatus::Solved);
    assert_eq!(model.remaining(), 0);
    assert_eq!(outcome.state.proposals, 2);

    let events = &outcome.state.events;
    let failed = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Failed { .. }))
        .count();
    assert_eq!(failed, 1, "{events:#?}");
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::Diagnosed {
            cell: 1,
            culprit: Some(1),
            ..
        }
    )));
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::Patched { cell: 1, version: 2, diff, .. } if diff.contains("+    totals[region] = totals.get(region, 0) + sales"))));
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::Replayed { executed, reused, .. } if executed == &[1] && reused.is_empty())));
    assert!(matches!(
        events.last(),
        Some(AgentEvent::Checked { passed: true, .. })
    ));

    let notebook = notebook.lock().await;
    assert_eq!(
        latest_value(&notebook, "totals").unwrap().repr,
        "{'east': 7, 'north': 30, 'south': 5}"
    );
    // The state is serde data.
    let json = serde_json::to_string(&outcome.state).unwrap();
    let back: CodeAgentState = serde_json::from_str(&json).unwrap();
    assert_eq!(back.events, outcome.state.events);
}

#[tokio::test]
async fn the_code_agent_fixes_a_misspelling_with_the_rule_patcher() {
    let dir = tempfile::tempdir().unwrap();
    let notebook = shared(dir.path());
    let model = Arc::new(ScriptedModel::new([answer(LOAD), answer(WRONG)]));
    let agent = CodeAgent::new(notebook, model.clone(), Check::python(CHECK))
        .with_patcher(Arc::new(RulePatcher::new()));
    let outcome = agent.run("Total the sales per region.").await.unwrap();
    assert_eq!(outcome.state.status, AgentStatus::Solved);
    assert!(outcome.state.events.iter().any(|e| matches!(e,
        AgentEvent::Patched { patcher, .. } if patcher == "rules")));
}

#[tokio::test]
async fn bounded_patch_attempts_end_with_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let notebook = shared(dir.path());
    let model = Arc::new(ScriptedModel::new([
        answer(LOAD),
        answer(WRONG),
        // two patches that still fail
        answer(
            "totals = {}\nfor region, sales in rows:\n    totals[region] = totals.get(region, 0) + sale2",
        ),
        answer(
            "totals = {}\nfor region, sales in rows:\n    totals[region] = totals.get(region, 0) + sale3",
        ),
    ]));
    let agent =
        CodeAgent::new(notebook, model.clone(), Check::python(CHECK)).with_max_patch_attempts(2);
    let error = agent.run("Total the sales per region.").await.unwrap_err();
    match error {
        CodeAgentError::Unfixed {
            cell,
            attempts,
            error,
            state,
        } => {
            assert_eq!(cell, CellId::new(1));
            assert_eq!(attempts, 2);
            assert!(error.contains("sale3"), "{error}");
            assert_eq!(state.status, AgentStatus::Unfixed);
        }
        other => panic!("expected Unfixed, got {other:?}"),
    }
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn a_stopped_agent_resumes_from_its_saved_state_and_notebook() {
    let dir = tempfile::tempdir().unwrap();
    let notebook = shared(dir.path());
    let model = Arc::new(ScriptedModel::new([answer(LOAD)]));
    let agent = CodeAgent::new(notebook.clone(), model, Check::python(CHECK)).with_max_proposals(1);
    let error = agent.run("Total the sales per region.").await.unwrap_err();
    let CodeAgentError::OutOfProposals {
        state, last_check, ..
    } = error
    else {
        panic!("expected OutOfProposals");
    };
    assert!(last_check.unwrap().contains("no cell has defined `totals`"));
    let saved = serde_json::to_string(&state).unwrap();
    notebook.lock().await.shutdown().await;
    drop(agent);
    drop(notebook);

    // Another process: reopen the notebook and the state, raise the budget.
    let reopened = Arc::new(Mutex::new(Notebook::open(dir.path(), config()).unwrap()));
    let mut state: CodeAgentState = serde_json::from_str(&saved).unwrap();
    state.status = AgentStatus::Working;
    state.max_proposals = 2;
    let model = Arc::new(ScriptedModel::new([answer(RIGHT)]));
    let agent = CodeAgent::new(reopened.clone(), model, Check::python(CHECK));
    let outcome = agent.resume(state).await.unwrap();
    assert_eq!(outcome.state.status, AgentStatus::Solved);
    assert_eq!(outcome.state.proposals, 2);
    assert_eq!(reopened.lock().await.graph().len(), 2);
}

#[tokio::test]
async fn a_rust_check_reads_the_recorded_values() {
    let dir = tempfile::tempdir().unwrap();
    let notebook = shared(dir.path());
    let model = Arc::new(ScriptedModel::new([answer(LOAD), answer(RIGHT)]));
    let check = Check::rust("`totals` has three regions", |notebook| match latest_value(
        notebook, "totals",
    ) {
        Some(value) if value.len == Some(3) => Ok(()),
        Some(value) => Err(format!("totals is {}", value.short())),
        None => Err("no `totals` yet".into()),
    });
    let agent = CodeAgent::new(notebook, model, check);
    let outcome = agent.run("Total the sales per region.").await.unwrap();
    assert_eq!(outcome.state.status, AgentStatus::Solved);
    assert!(outcome.state.events.iter().any(|e| matches!(e,
        AgentEvent::Checked { passed: false, message } if message.contains("no `totals` yet"))));
}

/// An executable shell script at `path` that appends `label` to `log`,
/// then runs its arguments (`prefix`) or `python3` with them (`python`).
#[cfg(unix)]
fn recording_wrapper(path: &std::path::Path, log: &std::path::Path, label: &str, exec: &str) {
    use std::os::unix::fs::PermissionsExt;
    let script = format!(
        "#!/bin/sh\necho {label} >> '{}'\nexec {exec} \"$@\"\n",
        log.display()
    );
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A notebook reopened in a new process has no kernel until a cell runs;
/// a Python check on it, which unpickles values cells wrote, must still
/// start its kernel with the notebook's configuration (sandbox prefix,
/// interpreter, environment), never with the defaults.
#[cfg(unix)]
#[tokio::test]
async fn a_python_check_on_a_reopened_notebook_runs_under_the_notebooks_kernel_config() {
    let tools = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = tools.path().join("started.log");
    let prefix = tools.path().join("sandbox.sh");
    let python = tools.path().join("python.sh");
    recording_wrapper(&prefix, &log, "prefix", "");
    recording_wrapper(&python, &log, "python", "python3");
    let configured = KernelConfig {
        python: python.clone(),
        command_prefix: vec![prefix.clone().into()],
        env: vec![(
            "HARNESS_TEST_CHECK_CONFIG".into(),
            "from-the-notebook".into(),
        )],
        ..config()
    };
    let mut notebook = Notebook::create(dir.path(), configured.clone()).unwrap();
    let run = notebook.execute("total = 6", user()).await.unwrap();
    assert!(run.result.is_ok(), "{:?}", run.result.error);
    notebook.save().unwrap();
    notebook.shutdown().await;
    drop(notebook);
    std::fs::remove_file(&log).unwrap();

    // Another process: the notebook is reopened, no kernel runs.
    let reopened = Notebook::open(dir.path(), configured).unwrap();
    assert!(reopened.kernel().is_none());
    let check = Check::python(
        "total == 6 and __import__('os').environ.get('HARNESS_TEST_CHECK_CONFIG') == 'from-the-notebook'",
    );
    let outcome = check.evaluate(&reopened).await.unwrap();
    assert!(outcome.passed, "{}", outcome.message);
    let started = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        started.lines().collect::<Vec<_>>(),
        ["prefix", "python"],
        "the check's kernel was not started under the notebook's prefix and interpreter"
    );

    // The same through the agent: a saved state with proposals made and
    // nothing pending resumes straight into the check.
    std::fs::remove_file(&log).unwrap();
    let shared = Arc::new(Mutex::new(reopened));
    let model = Arc::new(ScriptedModel::new(Vec::<harness::llm::Turn>::new()));
    let agent = CodeAgent::new(shared, model, Check::python("total == 6"));
    let mut state = CodeAgentState::new("Make `total` six.");
    state.proposals = 1;
    let outcome = agent.resume(state).await.unwrap();
    assert_eq!(outcome.state.status, AgentStatus::Solved);
    let started = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(started.lines().collect::<Vec<_>>(), ["prefix", "python"]);
}

#[tokio::test]
async fn a_misspelled_attribute_of_a_module_is_named_and_fixed() {
    for (cells, fixed) in [
        (
            vec!["import os", "p = os.path.joinn('a', 'b')"],
            "p = os.path.join('a', 'b')",
        ),
        (
            vec!["import json", "d = json.lods('{}')"],
            "d = json.loads('{}')",
        ),
        (
            vec!["import math\nr = math.sqr(4.0)"],
            "import math\nr = math.sqrt(4.0)",
        ),
    ] {
        let (failure, diagnosis, _dir) = diagnose_last(&cells, config()).await;
        assert!(
            failure.message().contains("Did you mean"),
            "{}",
            failure.message()
        );
        let (graph, _) = crate::support::graph_of(&cells);
        let patch = harness_code::patch::Patcher::propose(&RulePatcher::new(), &diagnosis, &graph)
            .await
            .unwrap_or_else(|e| panic!("{cells:?}: no patch: {e}"));
        assert_eq!(patch.new_source, fixed, "{}", diagnosis.report());
    }
    // Nothing close: no suggestion, no patch.
    let (_, diagnosis, _dir) = diagnose_last(&["import os", "p = os.qqqqqq"], config()).await;
    assert!(
        diagnosis.suggestions.is_empty(),
        "{:?}",
        diagnosis.suggestions
    );
}
