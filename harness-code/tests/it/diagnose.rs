//! Diagnosis of failed cells: error classes, ranked culprits with reasons,
//! minimal context and cheap suggestions, on multi-cell notebooks and
//! failures shaped like what CPython 3.11 reports.

#![allow(clippy::unwrap_used)]

use crate::support::graph_of;

use std::collections::BTreeMap;
use std::time::Duration;

use harness_code::diagnose::{
    CellFailure, ContextRole, Diagnosis, ErrorClass, FailureKind, Suggestion, diagnose,
};
use harness_code::{CellId, CellOutcome, CellRun, OutputSummary, Timestamp};

fn ok_with(values: &[(&str, &str)]) -> CellRun {
    CellRun {
        outcome: CellOutcome::Ok,
        started_at: Timestamp::from_millis(1),
        duration_ms: 3,
        outputs: OutputSummary {
            text: String::new(),
            values: values
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        },
    }
}

fn culprit_cells(diagnosis: &Diagnosis) -> Vec<CellId> {
    diagnosis.culprits.iter().map(|c| c.cell).collect()
}

fn reasons(diagnosis: &Diagnosis, rank: usize) -> String {
    diagnosis.culprits[rank].reasons.join(" | ")
}

// ---------------------------------------------------------------- name

#[test]
fn name_error_blames_the_failing_cell_and_suggests_the_close_name() {
    let (graph, s) = graph_of(&[
        "import csv\nwith open('sales.csv') as f:\n    rows = list(csv.DictReader(f))",
        "total = 0\nfor row in rows:\n    total += float(row['amount'])",
        "average = totl / len(rows)\nprint(f'average: {average:.2f}')",
    ]);
    let failure =
        CellFailure::exception(s[2], "NameError", "name 'totl' is not defined").at_line(1);
    let d = diagnose(&failure, &graph);

    assert_eq!(d.class, ErrorClass::Name);
    assert_eq!(d.line, Some(1));
    assert_eq!(d.line_text.as_deref(), Some("average = totl / len(rows)"));
    assert_eq!(d.culprits[0].cell, s[2]);
    assert!(reasons(&d, 0).contains("`totl`"), "{}", reasons(&d, 0));
    assert!(reasons(&d, 0).contains("`total` (bound by cell 1)"));
    // The cell that binds the close name is the runner-up.
    assert_eq!(d.culprits[1].cell, s[1]);
    assert_eq!(
        d.suggestions[0],
        Suggestion::RenameName {
            cell: s[2],
            from: "totl".into(),
            to: "total".into()
        }
    );
}

#[test]
fn name_error_with_the_did_you_mean_hint_of_the_traceback() {
    let (graph, s) = graph_of(&["temperature = [21.5, 23.0]", "print(max(temprature))"]);
    let failure = CellFailure::exception(
        s[1],
        "NameError",
        "name 'temprature' is not defined. Did you mean: 'temperature'?",
    );
    let d = diagnose(&failure, &graph);
    assert_eq!(d.names, ["temprature"]);
    assert!(matches!(&d.suggestions[0],
        Suggestion::RenameName { cell, to, .. } if *cell == s[1] && to == "temperature"));
}

#[test]
fn name_error_blames_a_misspelled_definition_that_nobody_reads() {
    let (graph, s) = graph_of(&[
        "import json\nconfig = json.loads('{\"threshold\": 3}')",
        "treshold = config['threshold']",
        "flagged = [x for x in range(10) if x > threshold]",
        "print(threshold * 2)",
    ]);
    let failure =
        CellFailure::exception(s[2], "NameError", "name 'threshold' is not defined").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.culprits[0].cell, s[1], "{d:#?}");
    assert!(reasons(&d, 0).contains("`treshold`"));
    assert_eq!(
        d.suggestions[0],
        Suggestion::RenameName {
            cell: s[1],
            from: "treshold".into(),
            to: "threshold".into()
        }
    );
}

#[test]
fn name_error_blames_a_conditional_binding() {
    let (graph, s) = graph_of(&[
        "import os\nif os.environ.get('USE_CACHE'):\n    cache = {}",
        "cache['report'] = 'done'",
    ]);
    let failure =
        CellFailure::exception(s[1], "NameError", "name 'cache' is not defined").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(culprit_cells(&d), [s[0], s[1]]);
    assert!(reasons(&d, 0).contains("only conditionally"));
    assert!(reasons(&d, 0).contains("`cache`"));
}

#[test]
fn name_error_points_at_a_cell_that_runs_later() {
    let (graph, s) = graph_of(&["print(limit)", "limit = 10"]);
    let failure =
        CellFailure::exception(s[0], "NameError", "name 'limit' is not defined").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.culprits[0].cell, s[1]);
    assert!(reasons(&d, 0).contains("runs after cell 0"));
    assert!(d.suggestions.contains(&Suggestion::DefinedLater {
        name: "limit".into(),
        cell: s[1]
    }));
}

#[test]
fn name_error_suggests_the_missing_import_of_a_well_known_module() {
    let (graph, s) = graph_of(&[
        "data = [3, 1, 2]",
        "arr = np.array(data)\nprint(arr.mean())",
        "stamp = datetime.now().isoformat()",
        "payload = json.dumps({'n': len(data)})",
    ]);
    let cases = [
        (s[1], "np", "import numpy as np"),
        (s[2], "datetime", "from datetime import datetime"),
        (s[3], "json", "import json"),
    ];
    for (cell, name, statement) in cases {
        let failure =
            CellFailure::exception(cell, "NameError", format!("name '{name}' is not defined"))
                .at_line(1);
        let d = diagnose(&failure, &graph);
        assert_eq!(d.culprits[0].cell, cell);
        assert!(reasons(&d, 0).contains("without importing it"));
        assert_eq!(
            d.suggestions[0],
            Suggestion::AddImport {
                cell,
                name: name.into(),
                statement: statement.into()
            }
        );
    }
}

#[test]
fn name_error_with_no_candidate_blames_the_failing_cell() {
    let (graph, s) = graph_of(&["xs = [1, 2]", "print(zzyzx_factor * 2)"]);
    let failure = CellFailure::exception(s[1], "NameError", "name 'zzyzx_factor' is not defined");
    let d = diagnose(&failure, &graph);
    assert_eq!(culprit_cells(&d), [s[1]]);
    assert!(reasons(&d, 0).contains("which no cell binds"));
    assert!(d.suggestions.is_empty());
}

#[test]
fn unbound_local_error_blames_the_function_definition() {
    let (graph, s) = graph_of(&["count = 0\ndef bump():\n    count += 1\n", "bump()"]);
    let traceback = "Traceback (most recent call last):\n  File \"<cell 1>\", line 1, in <module>\n    bump()\n  File \"<cell 0>\", line 3, in bump\n    count += 1\n    ^^^^^\nUnboundLocalError: cannot access local variable 'count' where it is not associated with a value";
    let failure = CellFailure::from_traceback(s[1], traceback);
    assert_eq!(failure.line, Some(1));
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Name);
    assert_eq!(d.culprits[0].cell, s[0]);
    assert_eq!(d.culprits[0].line, Some(2));
    assert!(reasons(&d, 0).contains("global count"));
}

// ---------------------------------------------------------------- attribute

#[test]
fn attribute_error_on_none_blames_the_producer_of_the_value() {
    let (mut graph, s) = graph_of(&[
        "import pandas as pd\nraw = pd.DataFrame({'name': [' a', 'b '], 'score': [3, 1]})",
        "ranked = raw.sort_values('score', inplace=True)",
        "print(len(raw))",
        "top = ranked.head(1)\nprint(top)",
    ]);
    for cell in graph.stale_order() {
        graph.record_run(cell, ok_with(&[])).unwrap();
    }
    let failure = CellFailure::exception(
        s[3],
        "AttributeError",
        "'NoneType' object has no attribute 'head'",
    )
    .at_line(1)
    .with_value("ranked", "None");
    let d = diagnose(&failure, &graph);

    assert_eq!(d.class, ErrorClass::Attribute);
    assert_eq!(d.culprits[0].cell, s[1]);
    assert_eq!(d.culprits[0].line, Some(1));
    let why = reasons(&d, 0);
    assert!(why.contains("`ranked`"), "{why}");
    assert!(why.contains("inplace=True"), "{why}");
    assert_eq!(d.culprits[1].cell, s[3]);
    assert_eq!(d.names, ["ranked"]);
    assert_eq!(
        d.context.values.get("ranked").map(String::as_str),
        Some("None")
    );
}

#[test]
fn attribute_error_on_none_from_a_function_without_return() {
    let (graph, s) = graph_of(&[
        "lines = ['id,name', '1, alice ']",
        "def first_name(rows):\n    for row in rows[1:]:\n        print(row.split(',')[1])",
        "name = first_name(lines)",
        "clean = name.strip().title()",
    ]);
    let failure = CellFailure::exception(
        s[3],
        "AttributeError",
        "'NoneType' object has no attribute 'strip'",
    )
    .at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.culprits[0].cell, s[2]);
    let why = reasons(&d, 0);
    assert!(why.contains("`name`"), "{why}");
    assert!(
        why.contains("`first_name` (cell 1) never returns a value"),
        "{why}"
    );
}

#[test]
fn attribute_error_with_a_misspelled_attribute_blames_the_failing_cell() {
    let (graph, s) = graph_of(&[
        "import pandas as pd\ndf = pd.DataFrame({'a': [1]})",
        "print(df.colums)",
    ]);
    let failure = CellFailure::exception(
        s[1],
        "AttributeError",
        "'DataFrame' object has no attribute 'colums'",
    )
    .at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(culprit_cells(&d), [s[1], s[0]]);
    assert_eq!(
        d.suggestions[0],
        Suggestion::RenameAttribute {
            cell: s[1],
            line: Some(1),
            from: "colums".into(),
            to: "columns".into()
        }
    );
}

// ---------------------------------------------------------------- type

#[test]
fn type_error_on_an_operator_blames_the_producer_of_the_odd_operand() {
    let (graph, s) = graph_of(&[
        "price = '12.50'  # read from the form",
        "qty = 3",
        "shipping = 4",
        "total = qty * 2 + price",
    ]);
    let failure = CellFailure::exception(
        s[3],
        "TypeError",
        "unsupported operand type(s) for +: 'int' and 'str'",
    )
    .at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Type);
    assert_eq!(culprit_cells(&d), [s[0], s[1], s[3]]);
    let why = reasons(&d, 0);
    assert!(
        why.contains("`price`") && why.contains("a str used with `+`"),
        "{why}"
    );
    // shipping is not involved.
    assert!(!d.context.cells.iter().any(|c| c.cell == s[2]));
}

#[test]
fn type_error_on_a_shadowed_builtin_blames_the_rebinding_cell() {
    let (graph, s) = graph_of(&["list = [3, 1, 2]", "ordered = list(sorted(range(3)))"]);
    let failure =
        CellFailure::exception(s[1], "TypeError", "'list' object is not callable").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.culprits[0].cell, s[0]);
    assert!(reasons(&d, 0).contains("rebinds the builtin `list`"));
    assert!(d.suggestions.contains(&Suggestion::ShadowedBuiltin {
        name: "list".into(),
        cell: s[0]
    }));
}

#[test]
fn type_error_on_a_signature_blames_the_call_then_the_definition() {
    let (graph, s) = graph_of(&[
        "def scale(values, factor):\n    return [v * factor for v in values]",
        "scaled = scale([1, 2], 2, 3)",
    ]);
    let failure = CellFailure::exception(
        s[1],
        "TypeError",
        "scale() takes 2 positional arguments but 3 were given",
    )
    .at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(culprit_cells(&d), [s[1], s[0]]);
    assert_eq!(d.culprits[1].line, Some(1));
}

// ---------------------------------------------------------------- value

#[test]
fn zero_division_is_a_value_error_blaming_the_divisor_producer() {
    let (graph, s) = graph_of(&[
        "counts = {'north': 0, 'south': 4}",
        "n = counts['north']",
        "share = 100 / n",
    ]);
    let failure = CellFailure::exception(s[2], "ZeroDivisionError", "division by zero").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Value);
    assert_eq!(culprit_cells(&d), [s[1], s[2]]);
    assert!(reasons(&d, 0).contains("`n`") && reasons(&d, 0).contains("the divisor"));
}

#[test]
fn invalid_literal_blames_the_converted_value() {
    let (graph, s) = graph_of(&[
        "fields = 'n/a,3'.split(',')",
        "first = fields[0]",
        "count = int(first) + 1",
    ]);
    let failure = CellFailure::exception(
        s[2],
        "ValueError",
        "invalid literal for int() with base 10: 'n/a'",
    )
    .at_line(1)
    .with_value("first", "'n/a'");
    let d = diagnose(&failure, &graph);
    assert_eq!(d.culprits[0].cell, s[1]);
    assert!(reasons(&d, 0).contains("converted with `int()`"));
    assert!(reasons(&d, 0).contains("(value: 'n/a')"));
}

// ---------------------------------------------------------------- key / index

#[test]
fn key_error_blames_the_producer_of_the_subscripted_value() {
    let (graph, s) = graph_of(&[
        "import csv, io\nrows = list(csv.DictReader(io.StringIO('name,sales\\nnorth,10\\n')))",
        "first = rows[0]",
        "print(first['region'], first['sales'])",
    ]);
    let failure = CellFailure::exception(s[2], "KeyError", "'region'").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::KeyIndex);
    assert_eq!(culprit_cells(&d), [s[1], s[2]]);
    let why = reasons(&d, 0);
    assert!(
        why.contains("`first`") && why.contains("no key 'region'"),
        "{why}"
    );
    // Minimal context: the failing cell and the producer of `first`, not cell 0.
    let context: Vec<(CellId, ContextRole)> =
        d.context.cells.iter().map(|c| (c.cell, c.role)).collect();
    assert_eq!(
        context,
        [(s[1], ContextRole::Producer), (s[2], ContextRole::Failing)]
    );
    assert_eq!(d.context.cells[0].provides, ["first"]);
}

#[test]
fn key_error_with_a_close_key_in_the_value_suggests_it() {
    let (graph, s) = graph_of(&[
        "row = {'Region': 'north', 'sales': 10}",
        "print(row['region'])",
    ]);
    let failure = CellFailure::exception(s[1], "KeyError", "'region'")
        .at_line(1)
        .with_value("row", "{'Region': 'north', 'sales': 10}");
    let d = diagnose(&failure, &graph);
    assert_eq!(d.culprits[0].cell, s[1]);
    assert_eq!(d.culprits[1].cell, s[0]);
    assert!(matches!(&d.suggestions[0],
        Suggestion::RenameKey { cell, from, to, .. } if *cell == s[1] && from == "region" && to == "Region"));
}

#[test]
fn index_error_blames_the_producer_of_the_list() {
    let (graph, s) = graph_of(&[
        "scores = [90, 85]",
        "best = max(scores)",
        "third = scores[2]",
    ]);
    let failure = CellFailure::exception(s[2], "IndexError", "list index out of range").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::KeyIndex);
    assert_eq!(culprit_cells(&d), [s[0], s[2]]);
    assert!(reasons(&d, 0).contains("shorter than the index"));
}

// ---------------------------------------------------------------- import

#[test]
fn module_not_found_blames_the_import_line_and_suggests_the_module() {
    let (graph, s) = graph_of(&[
        "import json\nimport pandsa as pd\ndf = pd.DataFrame({'a': [1]})",
        "print(df)",
    ]);
    let failure = CellFailure::exception(s[0], "ModuleNotFoundError", "No module named 'pandsa'");
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Import);
    assert_eq!(d.line, Some(2));
    assert_eq!(d.line_text.as_deref(), Some("import pandsa as pd"));
    assert_eq!(culprit_cells(&d), [s[0]]);
    assert_eq!(d.culprits[0].line, Some(2));
    assert_eq!(
        d.suggestions,
        [Suggestion::FixImport {
            cell: s[0],
            line: 2,
            from: "pandsa".into(),
            to: "pandas".into()
        }]
    );
}

#[test]
fn module_not_installed_suggests_the_package() {
    let (graph, s) = graph_of(&["from sklearn.linear_model import LinearRegression"]);
    let failure = CellFailure::exception(s[0], "ModuleNotFoundError", "No module named 'sklearn'");
    let d = diagnose(&failure, &graph);
    assert_eq!(d.line, Some(1));
    assert_eq!(
        d.suggestions,
        [Suggestion::InstallPackage {
            module: "sklearn".into(),
            package: "scikit-learn".into()
        }]
    );
}

// ---------------------------------------------------------------- the rest

#[test]
fn syntax_error_blames_the_failing_cell() {
    let (graph, s) = graph_of(&["x = 1", "match x:\n    case 1:\n        print('one')"]);
    let failure = CellFailure::exception(s[1], "SyntaxError", "invalid syntax").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Syntax);
    assert_eq!(culprit_cells(&d), [s[1]]);
    assert!(reasons(&d, 0).contains("does not compile"));
}

#[test]
fn assertion_error_blames_the_producer_of_the_checked_value() {
    let (graph, s) = graph_of(&[
        "rows = [{'v': 1}, {'v': -2}]",
        "clean = rows",
        "assert all(r['v'] > 0 for r in clean), 'negative values'",
    ]);
    let failure = CellFailure::exception(s[2], "AssertionError", "negative values").at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Assertion);
    assert_eq!(culprit_cells(&d), [s[1], s[2]]);
    assert!(reasons(&d, 0).contains("checked by the assertion"));
}

#[test]
fn timeout_blames_the_failing_cell_at_its_line() {
    let (graph, s) = graph_of(&["n = 10", "i = 0\nwhile i < n:\n    pass"]);
    let failure = CellFailure::timeout(s[1], Duration::from_secs(30)).at_line(3);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Timeout);
    assert_eq!(d.message, "timed out after 30 s");
    assert_eq!(culprit_cells(&d), [s[1]]);
    assert!(reasons(&d, 0).contains("while on line 3 of cell 1: `pass`"));
}

#[test]
fn crash_blames_the_failing_cell() {
    let (graph, s) = graph_of(&["import numpy as np\nbig = np.ones((10**6, 10**6))"]);
    let failure = CellFailure::crash(s[0], "kernel exited with signal 9 (SIGKILL)");
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Crash);
    assert_eq!(culprit_cells(&d), [s[0]]);
    assert!(reasons(&d, 0).contains("signal 9"));
}

#[test]
fn other_errors_blame_the_cell_then_the_values_on_the_line() {
    let (graph, s) = graph_of(&["path = 'data/sales.csv'", "text = open(path).read()"]);
    let failure = CellFailure::exception(
        s[1],
        "FileNotFoundError",
        "[Errno 2] No such file or directory: 'data/sales.csv'",
    )
    .at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.class, ErrorClass::Other);
    assert_eq!(culprit_cells(&d), [s[1], s[0]]);
}

#[test]
fn exception_types_map_to_classes() {
    let cases = [
        ("SyntaxError", ErrorClass::Syntax),
        ("IndentationError", ErrorClass::Syntax),
        ("NameError", ErrorClass::Name),
        ("UnboundLocalError", ErrorClass::Name),
        ("AttributeError", ErrorClass::Attribute),
        ("TypeError", ErrorClass::Type),
        ("ValueError", ErrorClass::Value),
        ("ZeroDivisionError", ErrorClass::Value),
        ("UnicodeDecodeError", ErrorClass::Value),
        ("json.decoder.JSONDecodeError", ErrorClass::Value),
        ("pandas.errors.ParserError", ErrorClass::Value),
        ("KeyError", ErrorClass::KeyIndex),
        ("IndexError", ErrorClass::KeyIndex),
        ("ModuleNotFoundError", ErrorClass::Import),
        ("ImportError", ErrorClass::Import),
        ("AssertionError", ErrorClass::Assertion),
        ("RuntimeError", ErrorClass::Other),
        ("StopIteration", ErrorClass::Other),
    ];
    for (exception, class) in cases {
        assert_eq!(ErrorClass::of_exception(exception), class, "{exception}");
    }
}

#[test]
fn failures_read_from_tracebacks_and_serde() {
    let traceback = "Traceback (most recent call last):\n  File \"/tmp/ipykernel_7/123.py\", line 4, in <module>\n    print(first['region'])\n          ~~~~~^^^^^^^^^^\nKeyError: 'region'\n";
    let failure = CellFailure::from_traceback(CellId::new(2), traceback);
    assert_eq!(failure.exception_type(), Some("KeyError"));
    assert_eq!(failure.message(), "'region'");
    assert_eq!(failure.line, Some(4));

    let json = serde_json::to_value(
        CellFailure::exception(CellId::new(1), "NameError", "name 'x' is not defined")
            .with_value("y", "int"),
    )
    .unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "cell": 1,
            "kind": {"kind": "exception", "exception": "NameError", "message": "name 'x' is not defined"},
            "values": {"y": "int"}
        })
    );
    let back: CellFailure = serde_json::from_value(json).unwrap();
    assert!(matches!(back.kind, FailureKind::Exception { .. }));
}

#[test]
fn context_carries_values_from_the_producers_last_run() {
    let (mut graph, s) = graph_of(&[
        "import json\nconfig = json.loads('{\"rate\": null}')",
        "rate = config.get('rate')",
        "fee = 100 * rate",
    ]);
    graph
        .record_run(s[0], ok_with(&[("config", "{'rate': None}")]))
        .unwrap();
    graph
        .record_run(s[1], ok_with(&[("rate", "None")]))
        .unwrap();
    let failure = CellFailure::exception(
        s[2],
        "TypeError",
        "unsupported operand type(s) for *: 'int' and 'NoneType'",
    )
    .at_line(1);
    let d = diagnose(&failure, &graph);
    assert_eq!(d.culprits[0].cell, s[1]);
    assert_eq!(
        d.context.values,
        BTreeMap::from([("rate".to_owned(), "None".to_owned())])
    );
    let report = d.report();
    assert!(report.contains("TypeError in cell 2, line 1"), "{report}");
    assert!(report.contains("- rate = None"), "{report}");
    assert!(report.contains("Cell 1 (produces rate)"), "{report}");
    assert!(!report.contains("Cell 0"), "{report}");
}

#[test]
fn unknown_cell_gets_a_diagnosis_from_the_message_alone() {
    let (graph, _) = graph_of(&["x = 1"]);
    let failure = CellFailure::exception(CellId::new(9), "KeyError", "'a'");
    let d = diagnose(&failure, &graph);
    assert_eq!(d.version, None);
    assert_eq!(culprit_cells(&d), [CellId::new(9)]);
    assert!(d.context.cells.is_empty());
}

#[test]
fn diagnosis_round_trips_through_json() {
    let (graph, s) = graph_of(&["xs = [1]", "print(xz)"]);
    let failure = CellFailure::exception(s[1], "NameError", "name 'xz' is not defined");
    let d = diagnose(&failure, &graph);
    let json = serde_json::to_string(&d).unwrap();
    let back: Diagnosis = serde_json::from_str(&json).unwrap();
    assert_eq!(back, d);
}
