//! harness-code with a real model as its patcher: a failing cell is
//! diagnosed, the model rewrites the culprit, and a replay runs exactly the
//! cells the patch affects.

use std::time::Duration;

use harness_code::diagnose::{CellFailure, diagnose};
use harness_code::kernel::KernelConfig;
use harness_code::notebook::Notebook;
use harness_code::patch::{ModelPatcher, PatchError, Patcher};
use harness_code::{CellId, Provenance};

#[tokio::test]
async fn the_model_patches_the_culprit_and_only_its_dependents_replay() {
    let dir = tempfile::tempdir().unwrap();
    let config = KernelConfig {
        timeout: Some(Duration::from_secs(20)),
        ..KernelConfig::default()
    };
    let mut notebook = Notebook::create(dir.path(), config).unwrap();
    // Cell 3 misspells `totals`; cell 4 reads what it makes. Cells 0 to 2
    // come before it: no patch of cell 3 may run them again.
    let cells = [
        "factor = 2",
        "rows = [('north', 10), ('south', 5), ('north', 15)]",
        "totals = {}\nfor region, sales in rows:\n    totals[region] = totals.get(region, 0) + sales",
        "scaled = sum(totls.values()) / factor",
        "label = f'{scaled:.1f}'",
    ];
    for source in cells {
        notebook
            .add_cell(source, Provenance::now("test", "cell"))
            .unwrap();
    }
    let first = notebook.replay().await.unwrap();
    assert_eq!(first.failed(), [CellId::new(3)]);
    let failure = CellFailure::from_replay_entry(first.entry(CellId::new(3)).unwrap())
        .unwrap()
        .with_input_values(&notebook);
    let diagnosis = diagnose(&failure, notebook.graph());
    let culprit = diagnosis.top_culprit().expect("a culprit").cell;
    assert_eq!(culprit, CellId::new(3), "{}", diagnosis.report());

    let patcher = ModelPatcher::new(crate::model()).with_max_attempts(3);
    match patcher.propose(&diagnosis, notebook.graph()).await {
        Ok(patch) => {
            eprintln!("the model's patch:\n{}", patch.diff);
            assert_eq!(patch.cell, culprit, "the model rewrites the culprit");
            assert_eq!(patch.provenance.patcher, "model");
            assert!(patch.provenance.usage.is_some_and(|u| u.output_tokens > 0));
            notebook.apply_patch(&patch).unwrap();
            let replay = notebook.replay().await.unwrap();
            let executed = replay.executed();
            assert!(executed.contains(&culprit), "{executed:?}");
            for untouched in [CellId::new(0), CellId::new(1), CellId::new(2)] {
                assert!(
                    !executed.contains(&untouched),
                    "cell {untouched} does not depend on the patch: {executed:?}"
                );
                assert!(
                    replay.reused().contains(&untouched),
                    "{:?}",
                    replay.reused()
                );
            }
            // Cell 4 reads `scaled`: it runs after the patched cell unless
            // that one fails again.
            if replay.failed().is_empty() {
                assert_eq!(
                    executed,
                    [CellId::new(3), CellId::new(4)],
                    "exactly the affected cells"
                );
            }
        }
        // A model that gives no usable code is a typed error naming why:
        // Qwen2.5-Coder-0.5B answers this diagnosis with the failing cell
        // unchanged, each time, and the patcher says so after its attempts.
        Err(error @ (PatchError::Model { .. } | PatchError::BudgetExhausted { .. })) => {
            eprintln!("no patch: {error}");
            assert!(!error.to_string().is_empty());
        }
        Err(other) => panic!("a patch or a model error: {other:?}"),
    }
    notebook.shutdown().await;
}
