//! Hostile code: whatever a model writes, however long or deeply nested,
//! analysing it returns an analysis or a typed error and never takes the
//! process down. Without the stack budget of the analysis these tests abort
//! the test binary with a stack overflow.

#![allow(clippy::unwrap_used)]

use crate::support::graph_of;

use harness_code::diagnose::{CellFailure, diagnose};
use harness_code::patch::RulePatcher;
use harness_code::{
    AnalysisError, AnalysisOptions, CellAnalysis, analyze_cell, analyze_cell_with, check_syntax,
};

/// Pathological code of `n` terms, by name.
fn shapes(n: usize) -> Vec<(&'static str, String)> {
    // Blocks indent once more per level: the source grows as the square.
    let levels = n.min(2_000);
    let nested_blocks = |line: &str| -> String {
        let mut source: String = (0..levels)
            .map(|i| format!("{}{line}\n", " ".repeat(i)))
            .collect();
        source.push_str(&" ".repeat(levels));
        source.push_str("pass\n");
        source
    };
    vec![
        (
            "parens",
            format!("x = {}a{}\n", "(".repeat(n), ")".repeat(n)),
        ),
        (
            "if_else_chain",
            format!("x = {}b\n", "a if c else ".repeat(n)),
        ),
        ("sum", format!("x = {}\n", vec!["a"; n].join(" + "))),
        (
            "mixed_operators",
            format!("x = {}a\n", "a * b - c / d ** ".repeat(n)),
        ),
        ("power", format!("x = {}\n", vec!["a"; n].join(" ** "))),
        (
            "lists",
            format!("x = {}1{}\n", "[".repeat(n), "]".repeat(n)),
        ),
        (
            "dicts",
            format!("x = {}1{}\n", "{'k': ".repeat(n), "}".repeat(n)),
        ),
        ("defs", nested_blocks("def f():")),
        ("ifs", nested_blocks("if a:")),
        ("lambdas", format!("x = {}a\n", "lambda: ".repeat(n))),
        (
            "lambda_defaults",
            format!("x = {}1{}\n", "lambda a=".repeat(n), ": a".repeat(n)),
        ),
        ("not", format!("x = {}a\n", "not ".repeat(n))),
        ("minus", format!("x = {}a\n", "- ".repeat(n))),
        ("invert_negate", format!("x = {}a\n", "~-+".repeat(n))),
        (
            "await",
            format!("async def f():\n    x = {}a\n", "await ".repeat(n)),
        ),
        ("calls", format!("x = f{}\n", "()".repeat(n))),
        ("attributes", format!("x = f{}\n", ".a".repeat(n))),
        ("subscripts", format!("x = f{}\n", "[0]".repeat(n))),
        (
            "string_concatenation",
            format!("x = {}\n", vec!["'a'"; n].join(" ")),
        ),
        (
            "string_sum",
            format!("x = {}\n", vec!["'a'"; n].join(" + ")),
        ),
        ("comparisons", format!("x = {}\n", vec!["a"; n].join(" < "))),
        ("and_or", format!("x = {}a\n", "a and b or ".repeat(n))),
        (
            "walrus",
            format!("x = {}1{}\n", "(a := ".repeat(n), ")".repeat(n)),
        ),
        (
            "yield",
            format!("def g():\n    x = {}a\n", "yield ".repeat(n)),
        ),
        ("starred", format!("x = {}a\n", "*".repeat(n))),
        (
            "fstrings",
            format!("x = {}a{}\n", "f'{".repeat(n), "}'".repeat(n)),
        ),
        ("statements", "x = 1\n".repeat(n)),
        ("semicolons", format!("{}\n", "x = 1; ".repeat(n))),
        ("tuple", format!("x = {}\n", vec!["1"; n].join(", "))),
        ("unclosed", "x = (\n".repeat(n)),
        ("closers", ")]}".repeat(n)),
        ("ipython_lambdas", "lambda\n;".repeat(n)),
    ]
}

/// A tiny seeded generator (SplitMix64): the random mixes are the same on
/// every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// An expression nested `depth` times by wrappers picked at random, with
/// brackets or without (brackets stop at CPython's 200 levels).
fn random_mix(rng: &mut Rng, depth: usize, brackets: bool) -> String {
    const WRAPPERS: &[(&str, &str)] = &[
        ("not ", ""),
        ("-", ""),
        ("a if ", " else b"),
        ("lambda: ", ""),
        ("lambda a=", ": a"),
        ("await ", ""),
        ("", " + a"),
        ("", ".b"),
        ("", "[0]"),
        ("", "()"),
        ("a ** ", ""),
        ("", " and a"),
        ("*", ""),
        ("yield ", ""),
        // With brackets from here.
        ("(", ")"),
        ("[", "]"),
        ("{'k': ", "}"),
        ("f(", ")"),
        ("f'{", "}'"),
    ];
    let choices = if brackets { WRAPPERS.len() } else { 14 };
    let mut open = String::new();
    let mut close = Vec::new();
    for _ in 0..depth {
        let (before, after) = WRAPPERS[rng.below(choices)];
        open.push_str(before);
        close.push(after);
    }
    let close: String = close.into_iter().rev().collect();
    format!("async def f():\n    x = {open}a{close}\n")
}

/// Analysing `source` gives an analysis or one of the typed errors; the
/// process would not survive a stack overflow to get here.
fn analysis_or_typed_error(name: &str, source: &str) -> Result<CellAnalysis, AnalysisError> {
    let result = analyze_cell(source);
    if let Err(error) = &result {
        assert!(
            matches!(
                error,
                AnalysisError::Syntax { .. }
                    | AnalysisError::TooDeeplyNested { .. }
                    | AnalysisError::TooComplex { .. }
                    | AnalysisError::ParserPanic { .. }
            ),
            "{name}: unexpected {error:?}"
        );
        assert!(!error.to_string().is_empty());
    }
    result
}

#[test]
fn pathological_code_gets_an_analysis_or_a_typed_error_at_every_size() {
    for n in [1, 40, 3_000] {
        for (name, source) in shapes(n) {
            analysis_or_typed_error(name, &source).ok();
            check_syntax(&source, AnalysisOptions { ipython: true }).ok();
            analyze_cell_with(&source, AnalysisOptions { ipython: true }).ok();
        }
    }
    // Near and far past the limit: one entry point is enough.
    for n in [40_000, 200_000] {
        for (name, source) in shapes(n) {
            analysis_or_typed_error(name, &source).ok();
        }
    }
}

#[test]
fn random_mixes_of_nesting_get_an_analysis_or_a_typed_error() {
    let mut rng = Rng(13);
    for round in 0..48 {
        let depth = match round % 4 {
            0 | 1 => rng.below(100),
            2 => rng.below(5_000),
            _ => rng.below(80_000),
        };
        let source = random_mix(&mut rng, depth, round % 8 < 4);
        analysis_or_typed_error(&format!("mix {round} of depth {depth}"), &source).ok();
    }
}

#[test]
fn a_statement_too_long_to_analyse_is_named_by_its_line() {
    let sum = vec!["a"; 200_000].join(" + ");
    let source = format!("import os\n# a comment\n\nx = {sum}\ny = 2\n");
    let error = analyze_cell(&source).unwrap_err();
    assert!(
        matches!(error, AnalysisError::TooComplex { line: 4, .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("the statement at line 4 is too long or too deeply nested to analyse"),
        "{error}"
    );
    for deep in [
        format!("x = {}a\n", "not ".repeat(200_000)),
        format!("x = {}b\n", "a if c else ".repeat(100_000)),
        format!("x = {}a\n", "lambda: ".repeat(100_000)),
    ] {
        let error = analyze_cell(&deep).unwrap_err();
        assert!(
            matches!(error, AnalysisError::TooComplex { line: 1, .. }),
            "{error:?}"
        );
    }
}

#[test]
fn code_as_deep_as_cpython_compiles_is_analysed() {
    // CPython 3.11 compiles sums of about 3 000 terms and as many `not`.
    let sum = format!("total = {}\n", vec!["a"; 3_000].join(" + "));
    let analysis = analyze_cell(&sum).unwrap();
    assert_eq!(analysis.reads.iter().collect::<Vec<_>>(), ["a"]);
    let negations = format!("flag = {}ready\n", "not ".repeat(3_000));
    let analysis = analyze_cell(&negations).unwrap();
    assert_eq!(analysis.reads.iter().collect::<Vec<_>>(), ["ready"]);
    // Long and flat is not deep: a literal of 100 000 numbers.
    let data = format!("data = [{}]\n", vec!["1.5"; 100_000].join(", "));
    assert_eq!(
        analyze_cell(&data)
            .unwrap()
            .writes
            .iter()
            .collect::<Vec<_>>(),
        ["data"]
    );
}

#[test]
fn a_source_too_large_for_one_parse_is_analysed_statement_by_statement() {
    let mut source = String::from("import math\n");
    for i in 0..30_000 {
        source.push_str(&format!("v{i} = math.sqrt(v{} + {i} * 2)\n", i.max(1) - 1));
    }
    source.push_str("@decorator\ndef last():\n    return v29999\n");
    let analysis = analyze_cell(&source).unwrap();
    assert!(analysis.writes.contains("v29999"));
    assert!(analysis.writes.contains("last"));
    assert_eq!(analysis.definitions.last().unwrap().line, 30_003);
    assert_eq!(
        analysis.reads.iter().collect::<Vec<_>>(),
        ["decorator", "v0"]
    );
}

#[test]
fn a_parser_panic_is_a_typed_error() {
    let ipython = AnalysisOptions { ipython: true };
    // Ruff's parser reaches `unreachable!` on this IPython input, on the
    // caller's thread (short) and on an analysis thread (long).
    let long = format!("{}lambda\n;", "x = y + 1\n".repeat(100));
    for source in ["lambda\n;", &long] {
        let error = analyze_cell_with(source, ipython).unwrap_err();
        assert!(
            matches!(error, AnalysisError::ParserPanic { .. }),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("the Python parser failed on this source")
        );
    }
    // The analysis threads go on.
    let analysis = analyze_cell_with(&"x = y + 1\n".repeat(100), ipython).unwrap();
    assert_eq!(analysis.reads.iter().collect::<Vec<_>>(), ["y"]);
}

#[test]
fn concurrent_analyses_on_analysis_threads_each_get_their_own_result() {
    let results: Vec<Vec<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                scope.spawn(move || {
                    (0..40)
                        .map(|i| {
                            let name = format!("v{t}_{i}");
                            let source = format!("{name} = {}\n", vec!["a"; 200].join(" + "));
                            let analysis = analyze_cell(&source).unwrap();
                            analysis.writes.into_iter().next().unwrap()
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, names) in results.iter().enumerate() {
        let expected: Vec<String> = (0..40).map(|i| format!("v{t}_{i}")).collect();
        assert_eq!(names, &expected);
    }
    // Within `with_analysis_stack` analyses run in place, with the same results.
    let deep = format!("x = {}a\n", "not ".repeat(3_000));
    let here = harness_code::with_analysis_stack(|| analyze_cell(&deep).unwrap());
    assert_eq!(here, analyze_cell(&deep).unwrap());
}

#[test]
fn diagnosis_and_rule_patches_survive_deep_cells() {
    let deep = format!("x = {}a\n", "not ".repeat(20_000));
    let long = format!("y = {}\n", vec!["totl"; 20_000].join(" + "));
    let (graph, ids) = graph_of(&["totl = 1\n", &deep, &long]);
    for &cell in &ids[1..] {
        let failure = CellFailure::exception(cell, "NameError", "name 'a' is not defined");
        let diagnosis = diagnose(&failure, &graph);
        assert_eq!(diagnosis.cell, cell);
        for suggestion in &diagnosis.suggestions {
            RulePatcher::new().apply(suggestion, &graph).ok();
        }
    }
}

/// The fixed multiplicative hash the analysis once used for names: rotate
/// by 5, xor the next 8-byte word, multiply by a constant; a string ends
/// with a `0xff` byte (as `Hash for str` writes it).
fn fixed_hash(name: &[u8]) -> u64 {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let add = |h: u64, word: u64| (h.rotate_left(5) ^ word).wrapping_mul(SEED);
    let mut h = 0;
    for chunk in name.chunks(8) {
        let mut word = [0; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = add(h, u64::from_le_bytes(word));
    }
    add(h, 0xff)
}

/// Distinct 16-byte identifiers (about `count`) whose [`fixed_hash`]es
/// share their low 21 bits: under that hash every one lands in the same
/// bucket of a hash table. Built the way an attacker who knows the hash
/// would, in well under a second.
fn names_colliding_under_a_fixed_hash(count: usize) -> Vec<String> {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let add = |h: u64, word: u64| (h.rotate_left(5) ^ word).wrapping_mul(SEED);
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().unwrap());
    let identifier = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut rng = Rng(7);
    let mut pick =
        |len: usize| -> Vec<u8> { (0..len).map(|_| CHARS[rng.below(CHARS.len())]).collect() };
    let mut names = Vec::with_capacity(count);
    let mut low_target = None;
    let mut top_target = None;
    while names.len() < count {
        let mut name = b"v".to_vec();
        name.extend(pick(7));
        let first = add(0, word(&name[..8]));
        // The first two bytes of the second word fix the low 16 bits of
        // the state after it.
        let low = *low_target.get_or_insert((first.rotate_left(5) ^ 0x6161) & 0xffff);
        let [b0, b1, ..] = ((first.rotate_left(5) ^ low) & 0xffff).to_le_bytes();
        if !identifier(b0) || !identifier(b1) {
            continue;
        }
        for _ in 0..256 {
            let mut candidate = name.clone();
            candidate.extend([b0, b1]);
            candidate.extend(pick(6));
            // The state's top 5 bits become the final hash's low 5 bits.
            let state = add(first, word(&candidate[8..]));
            if *top_target.get_or_insert(state >> 59) == state >> 59 {
                names.push(String::from_utf8(candidate).unwrap());
                break;
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Names are hashed with a seed of the process's own: a cell of many names
/// crafted to collide under a fixed hash is analysed about as fast as one
/// of as many ordinary names (with the fixed hash it was quadratic: 20 000
/// such names took over ten times as long).
#[test]
fn names_crafted_to_collide_do_not_make_the_analysis_quadratic() {
    const COUNT: usize = 20_000;
    let crafted = names_colliding_under_a_fixed_hash(COUNT);
    assert!(crafted.len() > COUNT * 9 / 10, "{}", crafted.len());
    let buckets: std::collections::BTreeSet<u64> = crafted
        .iter()
        .map(|name| fixed_hash(name.as_bytes()) & 0x1f_ffff)
        .collect();
    assert_eq!(buckets.len(), 1, "the crafted names do not collide");
    let mut rng = Rng(11);
    let ordinary: Vec<String> = (0..crafted.len())
        .map(|i| format!("w{i:07}{:08x}", rng.next() as u32))
        .collect();
    let cell =
        |names: &[String]| -> String { names.iter().map(|name| format!("{name} = 1\n")).collect() };
    let time = |source: &str| {
        let started = std::time::Instant::now();
        let analysis = analyze_cell(source).unwrap();
        assert_eq!(analysis.writes.len(), crafted.len());
        started.elapsed()
    };
    // The best of 5 each, interleaved, so that a burst of load elsewhere
    // does not fall on one side only.
    let (crafted_cell, ordinary_cell) = (cell(&crafted), cell(&ordinary));
    let (mut ordinary_time, mut crafted_time) =
        (std::time::Duration::MAX, std::time::Duration::MAX);
    for _ in 0..5 {
        ordinary_time = ordinary_time.min(time(&ordinary_cell));
        crafted_time = crafted_time.min(time(&crafted_cell));
    }
    assert!(
        crafted_time < ordinary_time * 4 + std::time::Duration::from_millis(200),
        "crafted names: {crafted_time:?}, ordinary names: {ordinary_time:?}"
    );
}
