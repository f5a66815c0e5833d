//! What `Report::load` refuses, `Report::save` refuses too, writing
//! nothing: another version, scores out of range; files that are not
//! UTF-8; `-0` is never shown.

use harness_evals::{
    Case, Dataset, EvalCase, Evaluators, Experiment, Progress, REPORT_VERSION, Report, ReportError,
    Score, Scored, TaskError, from_fn, task_fn,
};

use crate::report;

#[test]
fn a_report_of_another_version_is_neither_saved_nor_loaded() {
    let dir = tempfile::tempdir().unwrap();
    for version in [0, 2, 7, u32::MAX] {
        let mut made = report("versioned", &[1.0, 0.0]);
        made.version = version;
        let path = dir.path().join(format!("v{version}.json"));
        let refused = made.save(&path).unwrap_err();
        assert!(!path.exists(), "nothing is written for version {version}");
        let want = format!(
            "report {}: it has format version {version}, this crate reads {REPORT_VERSION}",
            path.display()
        );
        assert!(matches!(refused, ReportError::Format { .. }), "{refused:?}");
        assert_eq!(refused.to_string(), want);
        // `load` gives the same error for the file another tool wrote.
        std::fs::write(&path, serde_json::to_string(&made).unwrap()).unwrap();
        assert_eq!(Report::load(&path).unwrap_err().to_string(), want);
    }
    // An existing file is left as it was.
    let path = dir.path().join("kept.json");
    report("kept", &[1.0]).save(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut made = report("new", &[0.5]);
    made.version = 7;
    made.save(&path).unwrap_err();
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn a_score_out_of_range_is_neither_loaded_nor_saved() {
    let dir = tempfile::tempdir().unwrap();
    for value in [5.0, -4.0, 1.000_001, -1e-9, f64::MAX] {
        let mut made = report("range", &[1.0, 0.5, 0.0]);
        if let Scored::Score(score) = made.cases[1].scores.get_mut("score").unwrap() {
            score.value = value;
        }
        let path = dir.path().join("range.json");
        std::fs::write(&path, serde_json::to_string(&made).unwrap()).unwrap();
        let loaded = Report::load(&path).unwrap_err();
        match &loaded {
            ReportError::InvalidScore {
                case,
                evaluator,
                value: got,
                ..
            } => assert_eq!(
                (case.as_str(), evaluator.as_str(), *got),
                ("case-1", "score", value)
            ),
            other => panic!("{value}: {other:?}"),
        }
        assert_eq!(
            loaded.to_string(),
            format!(
                "report {}: case `case-1`: evaluator `score` has the value {value}; a score's \
                 value must be a number in 0.0..=1.0",
                path.display()
            )
        );
        let saved_path = dir.path().join("saved.json");
        let saved = made.save(&saved_path).unwrap_err();
        assert!(
            matches!(saved, ReportError::InvalidScore { value: v, .. } if v == value),
            "{saved:?}"
        );
        assert!(!saved_path.exists());
    }
    // The bounds themselves are scores.
    let path = dir.path().join("bounds.json");
    report("bounds", &[0.0, 1.0]).save(&path).unwrap();
    Report::load(&path).unwrap();
}

#[test]
fn a_report_that_is_not_utf8_names_the_offset_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good.json");
    report("text", &[1.0]).save(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let lines_before = |at: usize| 1 + good[..at].iter().filter(|b| **b == b'\n').count();
    let name_at = good.windows(6).position(|w| w == b"case-0").unwrap();
    for (bytes, offset, line) in [
        (b"\xfe{}".to_vec(), 0, 1),
        (b"{\n\n  \"version\": \x80\n}".to_vec(), 16, 3),
        (
            [&good[..name_at], b"\xe2\x82", &good[name_at..]].concat(),
            name_at,
            lines_before(name_at),
        ),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let error = Report::load(&path).unwrap_err();
        assert!(
            matches!(error, ReportError::NotUtf8 { offset: o, line: l, .. } if (o, l) == (offset, line)),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "report {}: it is not UTF-8 text: the byte at offset {offset} (line {line}) is not \
                 valid UTF-8",
                path.display()
            )
        );
    }
}

#[tokio::test]
async fn minus_zero_is_shown_and_summed_as_zero() {
    // An evaluator that gives -0.0; a run keeps it as 0.
    let dataset = Dataset::new("d", [Case::new("a", "a".to_owned())]);
    let task = task_fn(|input: String, _cx| async move { Ok::<_, TaskError>(input) });
    let evaluators = Evaluators::new()
        .with(from_fn(
            "negative-zero",
            |_: &EvalCase<'_, String, String, String>| {
                Ok(Score {
                    value: -0.0,
                    passed: false,
                    reason: "nothing".into(),
                })
            },
        ))
        .with(from_fn(
            "graded",
            |_: &EvalCase<'_, String, String, String>| Ok(Score::graded(-0.0, 0.5, "graded")),
        ));
    let run = Experiment::new("zero")
        .progress(Progress::Off)
        .run(&dataset, &task, &evaluators)
        .await
        .unwrap();
    for evaluator in ["negative-zero", "graded"] {
        let value = run.cases[0].value(evaluator);
        assert!(
            value == 0.0 && value.is_sign_positive(),
            "{evaluator}: {value}"
        );
        let mean = run
            .summary()
            .evaluators
            .iter()
            .find(|e| e.name == evaluator)
            .unwrap()
            .mean;
        assert!(mean.is_sign_positive(), "{evaluator}: {mean}");
    }
    assert!(!run.table().contains("-0"), "{}", run.table());
    // A report read from a file with -0.0 is shown as 0 too.
    let mut by_hand = report("by-hand", &[-0.0, 1.0]);
    by_hand.cases[0].name = "first".into();
    by_hand.cases[1].name = "second".into();
    by_hand.cases[1].record.metrics.cost = Some(-0.0);
    by_hand.cases[0].record.metrics.cost = Some(-0.0);
    let table = by_hand.table();
    assert!(!table.contains("-0"), "{table}");
    assert!(table.contains("✘ 0"), "{table}");
    let cost = by_hand.summary().cost.unwrap();
    assert!(cost == 0.0 && cost.is_sign_positive(), "{cost}");
    // An empty report's cost is a sum of nothing: 0, not -0.
    let mut empty = report("empty", &[]);
    empty.cases.clear();
    let cost = empty.summary().cost.unwrap();
    assert!(cost.is_sign_positive(), "{cost}");
    assert!(empty.summary().mean_latency_ms.is_sign_positive());
}
