//! Datasets in YAML and JSON Lines, and what is wrong with bad ones.

use harness_evals::{Case, Dataset, DatasetError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Question {
    question: String,
    #[serde(default)]
    context: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Answer {
    answer: String,
    tools: Vec<String>,
}

const YAML: &str = r#"
name: capitals
cases:
  - name: france
    input: { question: "Capital of France?" }
    expected: { answer: Paris, tools: [lookup] }
    tags: [europe]
    metadata: { difficulty: easy }
  - name: japan
    input:
      question: Capital of Japan?
      context: An island country.
"#;

#[test]
fn a_yaml_dataset_reads_typed_and_round_trips_through_both_formats() {
    let dataset: Dataset<Question, Answer> = Dataset::from_yaml(YAML, "capitals.yaml").unwrap();
    assert_eq!(dataset.name, "capitals");
    assert_eq!(dataset.cases.len(), 2);
    let france = &dataset.cases[0];
    assert_eq!(france.expected.as_ref().unwrap().tools, ["lookup"]);
    assert_eq!(france.metadata["difficulty"], "easy");
    assert_eq!(dataset.cases[1].expected, None);
    assert_eq!(
        dataset.cases[1].input.context.as_deref(),
        Some("An island country.")
    );
    assert_eq!(dataset.tagged("europe").cases.len(), 1);

    let dir = tempfile::tempdir().unwrap();
    for file in ["d.yaml", "d.yml", "d.jsonl"] {
        let path = dir.path().join(file);
        dataset.save(&path).unwrap();
        let back: Dataset<Question, Answer> = Dataset::load(&path).unwrap();
        assert_eq!(back.cases, dataset.cases, "{file}");
    }
    // JSON Lines: a case per line, the dataset named after the file.
    let back: Dataset<Question, Answer> = Dataset::load(dir.path().join("d.jsonl")).unwrap();
    assert_eq!(back.name, "d");
    let text = std::fs::read_to_string(dir.path().join("d.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 2);
}

#[test]
fn the_schema_describes_the_document_and_the_case_types() {
    let schema = Dataset::<Question, Answer>::json_schema();
    let text = schema.to_string();
    assert_eq!(schema["type"], "object");
    assert!(
        schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "cases")
    );
    for field in ["question", "answer", "tools", "metadata", "tags"] {
        assert!(text.contains(field), "the schema names {field}: {text}");
    }
}

fn yaml_error(text: &str) -> String {
    match Dataset::<Question, Answer>::from_yaml(text, "bad.yaml") {
        Ok(d) => panic!("read {d:?} from {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_yaml_datasets_are_errors_that_say_what_and_where() {
    // Wrong type, unknown field, missing input, not YAML at all, wrong top level.
    let cases = [
        (
            "name: x\ncases:\n  - name: a\n    input: { question: [1, 2] }\n",
            "bad.yaml",
        ),
        (
            "name: x\ncases:\n  - name: a\n    input: { question: q }\n    expectd: 1\n",
            "expectd",
        ),
        ("name: x\ncases:\n  - name: a\n", "input"),
        ("name: x\ncases: [\n", "bad.yaml"),
        ("- just a list\n", "bad.yaml"),
        (
            "name: x\ncases:\n  - name: a\n    input: { question: q }\n    expected: { answer: 1 }\n",
            "bad.yaml",
        ),
    ];
    for (text, needle) in cases {
        let message = yaml_error(text);
        assert!(message.contains(needle), "{message:?} names {needle:?}");
        assert!(message.starts_with("dataset bad.yaml"), "{message}");
    }
    // Line numbers from the parser.
    let message =
        yaml_error("name: x\ncases:\n  - name: a\n    input: { question: q }\n    expectd: 1\n");
    assert!(
        message.contains('5'),
        "the line of the unknown field: {message}"
    );
}

#[test]
fn case_names_must_be_present_and_unique() {
    let dup = "name: x\ncases:\n  - { name: a, input: { question: q } }\n  - { name: b, input: { question: q } }\n  - { name: a, input: { question: r } }\n";
    match Dataset::<Question, Answer>::from_yaml(dup, "dup.yaml") {
        Err(DatasetError::DuplicateName {
            name,
            first,
            second,
            ..
        }) => {
            assert_eq!((name.as_str(), first, second), ("a", 1, 3));
        }
        other => panic!("{other:?}"),
    }
    for empty in ["", "  "] {
        let text =
            format!("name: x\ncases:\n  - {{ name: \"{empty}\", input: {{ question: q }} }}\n");
        assert!(matches!(
            Dataset::<Question, Answer>::from_yaml(&text, "e.yaml"),
            Err(DatasetError::EmptyName { index: 1, .. })
        ));
    }
    let built = Dataset::new(
        "d",
        [
            Case::<String, String>::new("a", "x".into()),
            Case::new("a", "y".into()),
        ],
    );
    assert!(built.check("built").is_err());
}

#[test]
fn bad_json_lines_name_the_line() {
    let good = r#"{"name": "a", "input": {"question": "q"}}"#;
    let inputs = [
        (format!("{good}\n{{\"name\": \"b\", \"input\": {{}}}}\n"), 2),
        (format!("{good}\n\n{{not json\n"), 3),
        (
            format!(
                "{{\"name\": \"a\", \"input\": {{\"question\": \"q\"}}, \"extra\": 1}}\n{good}\n"
            ),
            1,
        ),
        ("[1, 2]\n".to_owned(), 1),
    ];
    for (text, line) in inputs {
        match Dataset::<Question, Answer>::from_json_lines("d", &text, "d.jsonl") {
            Err(DatasetError::JsonLine {
                line: got, origin, ..
            }) => {
                assert_eq!((got, origin.as_str()), (line, "d.jsonl"), "{text}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn files_of_unknown_format_or_missing_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("d.toml");
    std::fs::write(&toml, "x = 1").unwrap();
    assert!(matches!(
        Dataset::<Question, Answer>::load(&toml),
        Err(DatasetError::UnknownFormat { .. })
    ));
    let missing = dir.path().join("missing.yaml");
    let error = Dataset::<Question, Answer>::load(&missing).unwrap_err();
    assert!(matches!(error, DatasetError::Io { .. }));
    assert!(error.to_string().contains("missing.yaml"), "{error}");
}

#[test]
fn saving_a_dataset_replaces_the_file_and_never_writes_into_it() {
    let dataset: Dataset<Question, Answer> = Dataset::from_yaml(YAML, "capitals.yaml").unwrap();
    let smaller = dataset.tagged("europe");
    for file in ["d.yaml", "d.jsonl"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file);
        dataset.save(&path).unwrap();
        let before = std::fs::read_to_string(&path).unwrap();
        // A second name for the same file: writing into the file would
        // change what it reads; replacing the file leaves it the old one.
        let link = dir.path().join("link");
        std::fs::hard_link(&path, &link).unwrap();
        let users = dir.path().join(format!("{file}.tmp"));
        std::fs::write(&users, "the user's notes").unwrap();
        smaller.save(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&link).unwrap(), before, "{file}");
        let back: Dataset<Question, Answer> = Dataset::load(&path).unwrap();
        assert_eq!(back.cases, smaller.cases, "{file}");
        assert_eq!(std::fs::read_to_string(&users).unwrap(), "the user's notes");
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut expected = vec![file.to_owned(), format!("{file}.tmp"), "link".to_owned()];
        expected.sort();
        assert_eq!(names, expected, "{file}");
    }
    // A path that cannot be replaced (a directory) is a typed error naming it.
    let dir = tempfile::tempdir().unwrap();
    let blocked = dir.path().join("blocked.yaml");
    std::fs::create_dir_all(blocked.join("inside")).unwrap();
    let error = dataset.save(&blocked).unwrap_err();
    assert!(
        matches!(error, DatasetError::Save { ref path, .. } if path == &blocked),
        "{error}"
    );
    assert!(error.to_string().contains("blocked.yaml"), "{error}");
}

type Questions = Dataset<Question, Answer>;

fn case_line(name: &str) -> String {
    format!(r#"{{"name": "{name}", "input": {{"question": "q"}}}}"#)
}

#[test]
fn duplicate_and_empty_names_in_json_lines_name_the_lines_blank_ones_counted() {
    let (a, b, c) = (case_line("a"), case_line("b"), case_line("c"));
    let empty = case_line(" ");
    // (text, name, case positions, lines)
    let duplicates = [
        (format!("{a}\n\n{b}\n{a}\n"), "a", (1, 3), (1, 4)),
        (format!("\n\n{b}\n{c}\n   \n\n{c}\n"), "c", (2, 3), (4, 7)),
        (format!("{a}\n{a}"), "a", (1, 2), (1, 2)),
        (format!("\u{feff}{b}\r\n\r\n{b}\r\n"), "b", (1, 2), (1, 3)),
    ];
    for (text, want, (first, second), (first_line, second_line)) in duplicates {
        let error = Questions::from_json_lines("d", &text, "d.jsonl").unwrap_err();
        match &error {
            DatasetError::DuplicateName {
                name,
                first: f,
                second: s,
                first_line: fl,
                second_line: sl,
                ..
            } => assert_eq!(
                (name.as_str(), *f, *s, *fl, *sl),
                (want, first, second, Some(first_line), Some(second_line)),
                "{text:?}"
            ),
            other => panic!("{text:?}: {other:?}"),
        }
        assert_eq!(
            error.to_string(),
            format!(
                "dataset d.jsonl: line {second_line}: case {second} is named `{want}`, as is case \
                 {first} on line {first_line}; names must be unique"
            )
        );
    }
    for (text, index, line) in [
        (format!("{a}\n\n\n{empty}\n"), 2, 4),
        (format!("\n{empty}\n"), 1, 2),
        (format!("{a}\n{b}\n\n{}\n", case_line("")), 3, 4),
    ] {
        let error = Questions::from_json_lines("d", &text, "d.jsonl").unwrap_err();
        assert!(
            matches!(error, DatasetError::EmptyName { index: i, line: Some(l), .. } if (i, l) == (index, line)),
            "{text:?}: {error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "dataset d.jsonl, line {line}: case {index} has an empty name; every case needs one"
            )
        );
    }
}

#[test]
fn duplicate_and_empty_names_in_yaml_name_the_lines_where_the_cases_start() {
    let block = "name: x\ncases:\n  - name: a\n    input: { question: q }\n\n  - name: b\n    input:\n      question: q\n  - name: a\n    input: { question: r }\n";
    let flow = "name: x\ncases:\n  - { name: a, input: { question: q } }\n  - { name: b, input: { question: q } }\n  # a comment\n  - { name: b, input: { question: r } }\n";
    let later = "# a dataset\n\nname: x\ncases:\n\n  - name: z\n    input: { question: q }\n  - input: { question: q }\n    name: z\n";
    for (text, want, (first, second), (first_line, second_line)) in [
        (block, "a", (1, 3), (3, 9)),
        (flow, "b", (2, 3), (4, 6)),
        (later, "z", (1, 2), (6, 8)),
    ] {
        let error = Questions::from_yaml(text, "dup.yaml").unwrap_err();
        assert!(
            matches!(&error, DatasetError::DuplicateName { name, first: f, second: s, first_line: fl, second_line: sl, .. }
                if (name.as_str(), *f, *s, *fl, *sl) == (want, first, second, Some(first_line), Some(second_line))),
            "{text}: {error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "dataset dup.yaml: line {second_line}: case {second} is named `{want}`, as is \
                 case {first} on line {first_line}; names must be unique"
            )
        );
    }
    for (text, index, line) in [
        (
            "name: x\ncases:\n  - name: a\n    input: { question: q }\n  - name: ''\n    input: { question: q }\n",
            2,
            5,
        ),
        (
            "name: x\ncases:\n\n\n  - { name: \"  \", input: { question: q } }\n",
            1,
            5,
        ),
    ] {
        let error = Questions::from_yaml(text, "e.yaml").unwrap_err();
        assert!(
            matches!(error, DatasetError::EmptyName { index: i, line: Some(l), .. } if (i, l) == (index, line)),
            "{text}: {error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with(&format!("dataset e.yaml, line {line}: case {index}")),
            "{error}"
        );
    }
    // A dataset made in code has no lines: the positions are given.
    let built = Dataset::new(
        "d",
        [
            Case::<String, String>::new("a", "x".into()),
            Case::new("b", "y".into()),
            Case::new("a", "z".into()),
        ],
    );
    assert_eq!(
        built.check("built").unwrap_err().to_string(),
        "dataset built: cases 1 and 3 are both named `a`; names must be unique"
    );
}

#[test]
fn a_bad_json_line_gives_its_line_and_column_once() {
    let good = case_line("a");
    for (text, line, column) in [
        (
            format!("{good}\n{{\"name\": \"b\", \"input\": {{}}}}\n"),
            2,
            25,
        ),
        (format!("{good}\n\n{{not json\n"), 3, 2),
        ("\n{\"name\": \"é\", \"input\": 7}\n".to_owned(), 2, 24),
        ("[1, 2]\n".to_owned(), 1, 2),
    ] {
        let error = Questions::from_json_lines("d", &text, "d.jsonl").unwrap_err();
        assert!(
            matches!(error, DatasetError::JsonLine { line: l, column: c, .. } if (l, c) == (line, column)),
            "{text:?}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("dataset d.jsonl, line {line}, column {column}: ")),
            "{message}"
        );
        assert!(
            !message.contains("at line"),
            "the position is given once: {message}"
        );
    }
}

#[test]
fn a_dataset_file_that_is_not_utf8_names_the_offset_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = case_line("a");
    for (file, bytes, offset, line) in [
        ("start.jsonl", b"\xff\n".to_vec(), 0, 1),
        (
            "third.jsonl",
            [good.as_bytes(), b"\n\n{\"name\": \"\xc3\x28\"}\n"].concat(),
            good.len() + 12,
            3,
        ),
        ("cut.yaml", b"name: x\ncases: []\n# caf\xc3".to_vec(), 23, 3),
        ("latin1.yml", b"name: caf\xe9\ncases: []\n".to_vec(), 9, 1),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, &bytes).unwrap();
        let error = Questions::load(&path).unwrap_err();
        assert!(
            matches!(error, DatasetError::NotUtf8 { offset: o, line: l, .. } if (o, l) == (offset, line)),
            "{file}: {error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "dataset file {}: it is not UTF-8 text: the byte at offset {offset} (line {line}) \
                 is not valid UTF-8",
                path.display()
            )
        );
    }
}
