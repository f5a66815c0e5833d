//! The checks a patch goes through: it applies only to the code it was made
//! from (and a rollback only to the code the patch made), and code that
//! CPython's compiler refuses is refused statically, when a cell is added
//! or a patch proposed or applied, rather than failing at run time. Also
//! the diagnosis of a key error through a loop variable, whose value a
//! re-run does not report.
//!
//! The compile tables need a Python (`HARNESS_NOTEBOOK_PYTHON`, else
//! `python3` on PATH), as does the notebook test.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::{config, graph_of, run_all};

use harness::llm::{Expect, ModelResponse, ScriptedModel};
use harness_code::diagnose::{CellFailure, Suggestion, diagnose};
use harness_code::notebook::Notebook;
use harness_code::patch::{
    AnswerError, ModelPatcher, Patch, PatchError, PatchProvenance, Patcher, RulePatcher,
    apply_patch, parse_answer, rollback_patch,
};
use harness_code::{
    AnalysisError, AnalysisOptions, CellId, ExecutionStateGraph, GraphError, Provenance, Timestamp,
    check_syntax,
};

// ------------------------------------------------------- code that compiles

/// Sources CPython compiles (`exec` mode, no top-level `await`: as the
/// kernel compiles a cell); the static check must accept every one.
const COMPILES: &[&str] = &[
    "def f():\n    return 5",
    "for x in y:\n    break",
    "while x:\n    continue\nelse:\n    pass",
    "for x in y:\n    try:\n        pass\n    finally:\n        break",
    "for x in y:\n    try:\n        pass\n    finally:\n        continue",
    "for x in y:\n    if x:\n        with a:\n            continue",
    "while 1:\n    for x in y:\n        pass\n    else:\n        break",
    "async def f():\n    async for x in y:\n        break",
    "def f(a, b):\n    pass",
    "from __future__ import annotations",
    "from __future__ import annotations, division",
    "'doc'\nfrom __future__ import annotations",
    "from __future__ import annotations\nfrom __future__ import division",
    "def f():\n    yield 1",
    "def f():\n    x = yield from g()",
    "lambda: (yield)",
    "def f():\n    [x for x in (yield y)]",
    "global x",
    "global x\nx = 1",
    "def f():\n    global x\n    x = 1",
    "def f():\n    x = 1\n    def g():\n        nonlocal x\n        x = 2",
    "def f():\n    def g():\n        nonlocal x\n    x = 1",
    "def f(x):\n    def g():\n        nonlocal x",
    "def f():\n    x = 1\n    class C:\n        def g(self):\n            nonlocal x",
    "def f():\n    x = 1\n    def g():\n        nonlocal x\n        def h():\n            nonlocal x",
    "def f():\n    [y := 1 for _ in z]\n    def g():\n        nonlocal y",
    "def f():\n    for x in y:\n        pass\n    def g():\n        nonlocal x",
    "def f():\n    import x\n    def g():\n        nonlocal x",
    "def f():\n    del x\n    def g():\n        nonlocal x",
    "def f():\n    x: int\n    def g():\n        nonlocal x",
    "def f():\n    try:\n        pass\n    except E as x:\n        pass\n    def g():\n        nonlocal x",
    "def f():\n    match v:\n        case [x]:\n            pass\n    def g():\n        nonlocal x",
    "def f():\n    with a as (x, y):\n        pass\n    def g():\n        nonlocal y",
    "def f():\n    def x():\n        pass\n    def g():\n        nonlocal x",
    "def f():\n    x += 1\n    def g():\n        nonlocal x",
    "async def f():\n    await x",
    "async def f():\n    [await x for x in y]",
    "async def f():\n    [x async for x in y]",
    "async def f():\n    (await x for x in y)",
    "def f():\n    (await x for x in y)",
    "(await x for x in y)",
    "(x async for x in y)",
    "def f():\n    (x async for x in y)",
    "async def f():\n    [[x async for x in foo(n)] for n in range(3)]",
    "async def f():\n    async with a:\n        pass",
    "def f():\n    (y for y in z if await w)",
    "async def f():\n    yield 1\n    return",
    "async def f():\n    yield 1",
    "f(a=1, b=2)",
    "f(a=1, **{'a': 2})",
    "x = __debug__",
    "import __debug__ as d",
    "from os import *",
    "*a, = 1,",
    "_ = *x,",
    "for x in *y, *z:\n    pass",
    "match x:\n    case 2:\n        pass\n    case y:\n        pass",
    "match x:\n    case y if y:\n        pass\n    case 2:\n        pass",
    "match x:\n    case [a] | (a):\n        pass",
    "[(b := 0) for a in range(3)]",
    "global x\nx: int = 1",
    "x = 1\ndel x",
    "del (a, b)",
    "del [a, b]",
    "a.b += 1",
    "x = [i for i in range(3)]",
    "def f(*, a):\n    pass",
    "def f(a, /, b):\n    pass",
    "print(f'{x!r:>{w}}')",
    "try:\n    pass\nexcept* E:\n    pass",
    "'a' 'b'",
    "x = 1; y = 2",
    "@d\ndef f():\n    return 1",
    "class C:\n    def f(self):\n        return super().f()",
    "class C:\n    x = [y for y in range(3)]",
    "global x, x",
    "def f():\n    global x\n    global x",
    "def f():\n    global x\n    del x",
    "def f():\n    global x\n    for x in y:\n        pass",
    "def f():\n    global x\n    import x",
    "def f():\n    global x\n    def x():\n        pass",
    "x = 1\ndef f():\n    print(x)\n    x = 2",
    "def f():\n    ([await x for x in y] for z in w)",
    "def f():\n    ([x async for x in y] for z in w)",
    "del obj.__debug__",
    "obj.__debug__ += 1",
    "match x:\n    case {C.a: 1, C.a: 2}:\n        pass",
    "for x in y:\n    try:\n        pass\n    except* E:\n        for z in w:\n            break",
    "def f():\n    try:\n        pass\n    except* E:\n        def g():\n            return 1",
    "class C:\n    def f(self):\n        [(y := 1) for x in z]",
    "async def f():\n    return [x async for x in y]",
    "async def f():\n    return {k: await v for k, v in y}",
    "x = [lambda: (yield) for _ in y]",
    "def f():\n    global x\n    print(x)",
    "def f(a, b=1, *args, c, d=2, **kw):\n    return a",
    "def f():\n    class C:\n        nonlocal x\n    x = 1",
    "def f():\n    x = 1\n    class C:\n        nonlocal x",
    "def f():\n    x = 1\n    g = lambda: [x for _ in y]\n    def h():\n        nonlocal x",
    "import a.b.c\ndef f():\n    import a.b\n    def g():\n        nonlocal a",
    "with open(p) as f, open(q) as g:\n    pass",
    "def f():\n    def g(x=(yield)):\n        pass",
    "async def f():\n    def g(x=(await y)):\n        pass",
    "async def f():\n    class C(await b):\n        pass",
    "async def f():\n    @(await d)\n    class C:\n        pass",
    "try:\n    pass\nexcept E as e:\n    pass",
    "def f():\n    if True:\n        return 1\n    else:\n        yield 2",
    "async def f():\n    def g():\n        return 1\n    yield 2",
    "async def f():\n    yield 1\n    def g():\n        return 2",
    "print(*a, *b, **c, **d)",
    "a[1:2, ::3] = x",
    "(x) = 1",
    "[x, (y, *z)] = w",
    "x = *a, *b",
    "def f():\n    print(f'{(yield)}')",
    "global __debug__",
    "def f():\n    global __debug__",
    "__debug__",
    "x.__debug__",
    "from __future__ import annotations\nimport os\ndef f(x: int) -> int:\n    return x",
    "'''doc'''\nfrom __future__ import annotations\nx = 1",
    "from __future__ import nested_scopes, generators, division, absolute_import, with_statement, print_function, unicode_literals, generator_stop",
    "from __future__ import barry_as_FLUFL",
    "[x for x in z if (y := x)]",
    "lambda: (x := 1)",
    "x.__debug__ += 1",
    "x.__debug__.y = 1",
    "class C:\n    def f(self):\n        nonlocal __class__\n        __class__ = 1",
    "class C:\n    def f(self):\n        def g():\n            nonlocal __class__",
    // A walrus in a lambda binds in the lambda.
    "[lambda: (a := 0) for a in b]",
    "[lambda a: (a := 0) for a in b]",
    "[[lambda: (a := 0)] for a in b]",
    "[(lambda: [(a := 0) for q in r]) for a in b]",
    // An annotation a function never evaluates, or kept as text.
    "def f():\n    x: (await y)",
    "def f():\n    x: (await y) = 1",
    "def f():\n    x.a: (await y)",
    "def f():\n    x[0]: (await y)",
    "def f():\n    (x): (await y)",
    "def f():\n    x: [y async for y in z]",
    "def f():\n    x: lambda: (await y)",
    "def f():\n    x: (__debug__ := 1)",
    "from __future__ import annotations\nx: [y async for y in z]",
    // A parenthesised target is no annotated name.
    "def f():\n    global x\n    (x): int = 1",
    "def f():\n    x = 1\n    def g():\n        nonlocal x\n        (x): int = 1",
];

/// Sources that parse but that CPython's compiler refuses; the static check
/// must refuse every one, as a syntax error with a line and column.
const REFUSED: &[&str] = &[
    "return 5",
    "class C:\n    return 1",
    "break",
    "continue",
    "for x in y:\n    pass\nelse:\n    break",
    "while x:\n    pass\nelse:\n    continue",
    "for x in y:\n    def f():\n        break",
    "for x in y:\n    class C:\n        break",
    "def f(a, a):\n    pass",
    "def f(a, *, a):\n    pass",
    "def f(a, **a):\n    pass",
    "lambda a, a: 1",
    "from __future__ import braces",
    "x = 1\nfrom __future__ import annotations",
    "import os\nfrom __future__ import annotations",
    "def f():\n    from __future__ import annotations",
    "yield 1",
    "x = yield 1",
    "yield from x",
    "class C:\n    yield 1",
    "def f():\n    class C:\n        yield 1",
    "[(yield x) for x in y]",
    "def f():\n    [(yield x) for x in y]",
    "def f():\n    ((yield x) for x in y)",
    "nonlocal x",
    "x = 1\nglobal x",
    "print(x)\nglobal x",
    "def f():\n    x = 1\n    global x",
    "def f():\n    print(x)\n    global x",
    "def f(x):\n    global x",
    "def f():\n    nonlocal x",
    "def f():\n    global x\n    def g():\n        nonlocal x",
    "class C:\n    x = 1\n    def g(self):\n        nonlocal x",
    "def f():\n    nonlocal x\n    x = 1",
    "def f():\n    x = 1\n    def g():\n        global x\n        nonlocal x",
    "await x",
    "x = await y",
    "def f():\n    await x",
    "async def f():\n    def g():\n        await x",
    "async def f():\n    lambda: await x",
    "lambda: await x",
    "[x async for x in y]",
    "def f():\n    [x async for x in y]",
    "def f():\n    [await x for x in y]",
    "def f():\n    (x for x in await y)",
    "async with a:\n    pass",
    "async for x in y:\n    pass",
    "def f():\n    async with a:\n        pass",
    "class C:\n    await x",
    "async def f():\n    class C:\n        await x",
    "async def f():\n    yield 1\n    return 2",
    "async def f():\n    yield from x",
    "f(a=1, a=2)",
    "class C(metaclass=M, metaclass=N):\n    pass",
    "None = 1",
    "x, None = 1, 2",
    "for None in y:\n    pass",
    "__debug__ = 1",
    "del __debug__",
    "def __debug__():\n    pass",
    "def f(__debug__):\n    pass",
    "import __debug__",
    "import x as __debug__",
    "class __debug__:\n    pass",
    "with a as __debug__:\n    pass",
    "for __debug__ in y:\n    pass",
    "obj.__debug__ = 1",
    "f(__debug__=1)",
    "True = 1",
    "def f():\n    from os import *",
    "class C:\n    from os import *",
    "*a = 1",
    "a, *b, *c = x",
    "_ = *x",
    "for x in *y:\n    pass",
    "match x:\n    case y:\n        pass\n    case 2:\n        pass",
    "match x:\n    case _:\n        pass\n    case 2:\n        pass",
    "match x:\n    case [a, a]:\n        pass",
    "match x:\n    case {'a': 1, 'a': 2}:\n        pass",
    "match x:\n    case C(a=1, a=2):\n        pass",
    "match x:\n    case a | b:\n        pass",
    "[(a := 0) for a in range(3)]",
    "class C:\n    [(b := 0) for a in range(3)]",
    "def f():\n    global x\n    x: int = 1",
    "x: int = 1\nglobal x",
    "def f():\n    x = 1\n    def g():\n        nonlocal x\n        x: int = 2",
    "def f[T, T]():\n    pass",
    "type A[T, T] = list[T]",
    "class C[T = int, U]:\n    pass",
    "def f(x):\n    nonlocal x",
    "def f():\n    x = 1\n    nonlocal x",
    "del f()",
    "f() = 1",
    "(a, b) += 1",
    "def f(a=1, b):\n    pass",
    "f(**k, *a)",
    "f(a=1, b)",
    "f(x for x in y, 1)",
    "try:\n    pass\nexcept* E:\n    break",
    "for x in y:\n    try:\n        pass\n    except* E:\n        break",
    "for x in y:\n    try:\n        pass\n    except* E:\n        continue",
    "def f():\n    try:\n        pass\n    except* E:\n        return 1",
    "[await x for x in y]",
    "(lambda: await x for x in y)",
    "class C(__debug__=1):\n    pass",
    "def f():\n    nonlocal x\n    global x",
    "def f():\n    print(x)\n    nonlocal x",
    "def f():\n    x = 1\n    def g():\n        print(x)\n        nonlocal x",
    "def f():\n    for z in w:\n        try:\n            pass\n        except* E:\n            for q in r:\n                return 1",
    "class C:\n    [x for x in (y := z)]",
    "def f():\n    return {k: v async for k, v in y}",
    "def f():\n    x: int = 1\n    global x",
    "def f():\n    def g():\n        nonlocal f\n",
    "def f():\n    class C:\n        x = 1\n        def g(self):\n            nonlocal x",
    "x = (yield)",
    "@(yield)\ndef f():\n    pass",
    "def f(x=(yield)):\n    pass",
    "def f():\n    def g(x=(await y)):\n        pass",
    "if True:\n    return",
    "async def f():\n    if True:\n        return 1\n    else:\n        yield 2",
    "print(f'{(yield)}')",
    "assert (yield)",
    "[x for x in (y := z)]",
    "def f():\n    [x for x in (y := z)]",
    "[x for a in b for x in (y := a)]",
    "[x for x in (lambda: (y := 1))()]",
    "[x for x in [(y := 1) for _ in z]]",
    "[x for x in f(y := 1)]",
    "obj.__debug__: int = 1",
    "for obj.__debug__ in y:\n    pass",
    "with a as obj.__debug__:\n    pass",
    "a = obj.__debug__ = 1",
    "(a.__debug__, b) = 1, 2",
    "def f():\n    x = 1\n    def g():\n        x: int\n        nonlocal x",
    "def f():\n    [x := 1 for x in y]",
    "[[(x := 1) for y in z] for x in w]",
    "__debug__ += 1",
    "x.y.__debug__ = 1",
    "def f():\n    nonlocal __class__",
    "class C:\n    nonlocal __class__",
    // What the fixes above must still refuse.
    "[(a := 0) for a in b]",
    "[[(a := 0)] for a in b]",
    "[(lambda: 1, (a := 0)) for a in b]",
    "x: (await y)",
    "class C:\n    x: (yield)",
    "def f():\n    global x\n    x: int = 1",
    "def f():\n    x = 1\n    def g():\n        nonlocal x\n        x: int = 1",
];

/// Sources CPython 3.11 refuses that the static check accepts: a duplicate
/// mapping key equal only by value (`0` and `False`), a `type` alias,
/// which is syntax from 3.12 on, and an `await` in an annotation kept as
/// text. (The other way, Ruff's parser refuses a duplicate keyword argument
/// even in an annotation CPython never compiles: `def f(): x: f(a=1,
/// a=2)`.)
const NOT_CHECKED: &[&str] = &[
    "match x:\n    case {0: a, False: b}:\n        pass",
    "type X = int",
    // An annotation kept as text is not checked, though CPython still
    // refuses an `await` in one outside a function.
    "'''doc'''\nfrom __future__ import annotations\nclass C:\n    x: (await y)",
];

/// For each source, whether the notebook's Python compiles it as the kernel
/// does (`ast.parse`, then `compile(..., "exec", dont_inherit=True)`).
fn cpython_compiles(sources: &[&str]) -> Vec<bool> {
    const SCRIPT: &str = r#"
import ast, json, sys, warnings
warnings.simplefilter("ignore")
out = []
for source in json.load(sys.stdin):
    try:
        compile(ast.parse(source, "<cell>"), "<cell>", "exec", dont_inherit=True)
        out.append(True)
    except SyntaxError:
        out.append(False)
print(json.dumps(out))
"#;
    let python = std::env::var("HARNESS_NOTEBOOK_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut child = Command::new(&python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("this test needs a Python ({python}): {e}"));
    let input = serde_json::to_string(sources).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(output.status.success(), "{python} failed");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn cpython_agrees_with_the_tables() {
    let all: Vec<&str> = COMPILES
        .iter()
        .chain(REFUSED)
        .chain(NOT_CHECKED)
        .copied()
        .collect();
    let compiled = cpython_compiles(&all);
    let mut wrong = Vec::new();
    for (source, compiles) in all.iter().zip(compiled) {
        let expected = COMPILES.contains(source);
        if compiles != expected {
            wrong.push(format!("{source:?}: CPython compiles it: {compiles}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_static_check_accepts_what_cpython_compiles() {
    for options in [
        AnalysisOptions::default(),
        AnalysisOptions { ipython: true },
    ] {
        let refused: Vec<String> = COMPILES
            .iter()
            .filter_map(|source| {
                check_syntax(source, options)
                    .err()
                    .map(|e| format!("{source:?}: {e}"))
            })
            .collect();
        assert!(refused.is_empty(), "{options:?}:\n{}", refused.join("\n"));
    }
}

#[test]
fn the_static_check_refuses_what_cpython_refuses() {
    for options in [
        AnalysisOptions::default(),
        AnalysisOptions { ipython: true },
    ] {
        for source in REFUSED {
            match check_syntax(source, options) {
                Err(AnalysisError::Syntax { line, column, .. }) => {
                    let lines = u32::try_from(source.lines().count()).unwrap();
                    assert!((1..=lines).contains(&line), "{source:?}: line {line}");
                    assert!(column >= 1, "{source:?}");
                }
                other => panic!("{options:?} {source:?}: {other:?}"),
            }
        }
    }
}

/// The cases of the report: each refused with the place and the reason.
#[test]
fn compile_errors_name_their_line_column_and_reason() {
    let cases: &[(&str, u32, u32, &str)] = &[
        (
            "x = 1\nreturn 5",
            2,
            1,
            "`return` statement outside of a function",
        ),
        ("for x in y:\n    pass\nbreak", 3, 1, "`break` outside loop"),
        ("if x:\n    continue", 2, 5, "`continue` outside loop"),
        ("def f(a, a):\n    pass", 1, 10, "Duplicate parameter \"a\""),
        (
            "from __future__ import braces",
            1,
            24,
            "Future feature `braces` is not defined",
        ),
        (
            "y = yield 1",
            1,
            5,
            "`yield` statement outside of a function",
        ),
        (
            "nonlocal x",
            1,
            1,
            "nonlocal declaration not allowed at module level",
        ),
        (
            "x = await f()",
            1,
            5,
            "`await` statement outside of a function",
        ),
        ("__debug__ = 1", 1, 1, "cannot assign to `__debug__`"),
    ];
    for (source, line, column, message) in cases {
        let error = check_syntax(source, AnalysisOptions::default()).unwrap_err();
        assert_eq!(
            error,
            AnalysisError::Syntax {
                line: *line,
                column: *column,
                message: (*message).to_owned(),
            },
            "{source:?}"
        );
    }
    // Refused by the parser itself, as before.
    for source in ["f(a=1, a=2)", "None = 1"] {
        assert!(matches!(
            check_syntax(source, AnalysisOptions::default()),
            Err(AnalysisError::Syntax { line: 1, .. })
        ));
    }
}

/// The kernel compiles a cell without `PyCF_ALLOW_TOP_LEVEL_AWAIT`, IPython
/// syntax or not, so a top-level `await` is refused in both modes; inside
/// `async def` and in a generator expression it compiles.
#[test]
fn top_level_await_is_refused_as_the_kernel_refuses_it() {
    for options in [
        AnalysisOptions::default(),
        AnalysisOptions { ipython: true },
    ] {
        assert!(check_syntax("await asyncio.sleep(0)", options).is_err());
        assert!(check_syntax("async with lock:\n    pass", options).is_err());
        assert!(check_syntax("async def f():\n    await g()", options).is_ok());
        assert!(check_syntax("gen = (await x for x in xs)", options).is_ok());
    }
    assert_eq!(cpython_compiles(&["await asyncio.sleep(0)"]), [false]);
}

fn provenance() -> PatchProvenance {
    PatchProvenance {
        patcher: "test".into(),
        description: "manual".into(),
        model: None,
        provider: None,
        call_id: None,
        attempts: 0,
        usage: None,
        diagnosis: "none".into(),
        at: Timestamp::from_millis(5),
    }
}

#[test]
fn cells_and_patches_that_would_not_compile_are_refused() {
    let (mut graph, s) = graph_of(&["total = 0"]);
    let error = graph
        .add_cell("return total", Provenance::now("model:x", "bad"))
        .unwrap_err();
    assert!(matches!(
        error,
        GraphError::Analysis {
            cell: None,
            source: AnalysisError::Syntax {
                line: 1,
                column: 1,
                ..
            }
        }
    ));
    assert_eq!(graph.len(), 1);

    for new in [
        "for x in xs:\n    pass\nbreak",
        "def f(a, a):\n    return a",
    ] {
        let patch = Patch::new(s[0], 1, "total = 0", new, provenance());
        assert!(
            matches!(
                apply_patch(&mut graph, &patch),
                Err(PatchError::Graph {
                    source: GraphError::Analysis {
                        source: AnalysisError::Syntax { .. },
                        ..
                    },
                    ..
                })
            ),
            "{new:?}"
        );
    }
    assert_eq!(graph.cell(s[0]).unwrap().versions().count(), 1);

    // A model's answer that would not compile is sent back.
    assert!(matches!(
        parse_answer(
            "```python\nreturn 5\n```",
            "total = 0",
            AnalysisOptions::default()
        ),
        Err(AnswerError::Syntax(AnalysisError::Syntax { line: 1, .. }))
    ));
}

#[tokio::test]
async fn a_model_answer_that_would_not_compile_is_asked_again() {
    let (graph, s) = graph_of(&["xs = [1, 2]", "total = sum(xz)"]);
    let d = diagnose(
        &CellFailure::exception(s[1], "NameError", "name 'xz' is not defined").at_line(1),
        &graph,
    );
    let model = ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text(
            "```python\ntotal = sum(xs)\nreturn total\n```",
        )),
        Expect::any()
            .last_message_contains("outside of a function")
            .reply(ModelResponse::from_text("```python\ntotal = sum(xs)\n```")),
    ]);
    let patch = ModelPatcher::new(model)
        .propose_for(&d, &graph, s[1])
        .await
        .unwrap();
    assert_eq!(patch.new_source, "total = sum(xs)");
    assert_eq!(patch.provenance.attempts, 2);
}

// ------------------------------------------------------------ stale patches

#[test]
fn a_patch_applies_only_to_the_code_it_was_made_from() {
    let (mut graph, s) = graph_of(&["label = 'report'", "n = 1"]);
    // Version 1, but not the code of version 1.
    let liar = Patch::new(
        s[0],
        1,
        "label = 'something else'",
        "label = 'REPORT'",
        provenance(),
    );
    let error = apply_patch(&mut graph, &liar).unwrap_err();
    assert_eq!(
        error,
        PatchError::SourceConflict {
            cell: s[0],
            version: 1,
            operation: "patch",
            line: 1,
            expected: "label = 'something else'".into(),
            found: "label = 'report'".into(),
        }
    );
    assert!(error.to_string().contains("cell 0 (version 1)"), "{error}");
    let node = graph.cell(s[0]).unwrap();
    assert_eq!(node.versions().count(), 1);
    assert_eq!(node.source(), "label = 'report'");

    // The first line that differs is named, and a missing line is empty.
    let short = Patch::new(s[1], 1, "n = 1\nm = 2", "n = 2", provenance());
    assert!(matches!(
        apply_patch(&mut graph, &short),
        Err(PatchError::SourceConflict { line: 2, ref expected, ref found, .. })
            if expected == "m = 2" && found.is_empty()
    ));
}

#[test]
fn a_patch_made_before_the_notebook_was_rebuilt_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    for source in ["a = 1", "b = 2", "c = a + b", "d = 4"] {
        notebook
            .add_cell(source, Provenance::now("u", "x"))
            .unwrap();
    }
    let patch = Patch::new(CellId::new(2), 1, "c = a + b", "c = a * b", provenance());
    // The user deletes cell 2 in their editor; the graph is rebuilt and
    // cell 2 is now `d = 4`, at version 1.
    let report = notebook
        .sync_sources(&["a = 1".into(), "b = 2".into(), "d = 4".into()], |_| {
            Provenance::now("user", "sync")
        })
        .unwrap();
    assert!(report.rebuilt);
    let error = notebook.apply_patch(&patch).unwrap_err();
    assert!(matches!(
        error,
        PatchError::SourceConflict { cell, version: 1, ref found, .. }
            if cell == CellId::new(2) && found == "d = 4"
    ));
    let node = notebook.graph().cell(CellId::new(2)).unwrap();
    assert_eq!(node.source(), "d = 4");
    assert_eq!(node.versions().count(), 1);
}

#[test]
fn a_rollback_applies_only_to_the_code_the_patch_made() {
    let (mut graph, s) = graph_of(&["x = 1", "y = x + 1"]);
    let patch = Patch::new(s[1], 1, "y = x + 1", "y = x + 2", provenance());
    let applied = apply_patch(&mut graph, &patch).unwrap();
    assert_eq!(applied.previous_source.as_deref(), Some("y = x + 1"));
    assert_eq!(applied.source.as_deref(), Some("y = x + 2"));

    // Rebuilt since, and edited to version 2 with other code.
    let (mut rebuilt, r) = graph_of(&["x = 1", "y = 0"]);
    rebuilt
        .replace_code(r[1], "y = 5", Provenance::now("user", "edit"))
        .unwrap();
    assert!(matches!(
        rollback_patch(&mut rebuilt, &applied),
        Err(PatchError::SourceConflict {
            operation: "rollback",
            version: 2,
            ..
        })
    ));
    assert_eq!(rebuilt.cell(r[1]).unwrap().source(), "y = 5");

    // Rebuilt with the patched code at version 2: the rollback restores the
    // code the patch replaced, not the rebuilt graph's version 1.
    let (mut again, a) = graph_of(&["x = 1", "y = 0"]);
    again
        .replace_code(a[1], "y = x + 2", Provenance::now("user", "edit"))
        .unwrap();
    rollback_patch(&mut again, &applied).unwrap();
    assert_eq!(again.cell(a[1]).unwrap().source(), "y = x + 1");

    // On the graph it was applied to, as before.
    rollback_patch(&mut graph, &applied).unwrap();
    assert_eq!(graph.cell(s[1]).unwrap().source(), "y = x + 1");
}

#[test]
fn an_applied_patch_serialized_without_sources_still_rolls_back() {
    let (mut graph, s) = graph_of(&["x = 1"]);
    let patch = Patch::new(s[0], 1, "x = 1", "x = 2", provenance());
    let applied = apply_patch(&mut graph, &patch).unwrap();
    let mut json = serde_json::to_value(&applied).unwrap();
    let object = json.as_object_mut().unwrap();
    object.remove("source");
    object.remove("previous_source");
    let old: harness_code::patch::AppliedPatch = serde_json::from_value(json).unwrap();
    assert_eq!(old.source, None);
    rollback_patch(&mut graph, &old).unwrap();
    assert_eq!(graph.cell(s[0]).unwrap().source(), "x = 1");
}

// ------------------------------------------------- keys through loop variables

const ROWS: &str = r#"rows = [{"region": "north", "sales": 10}, {"region": "south", "sales": 5}]"#;
const SUM: &str = "totals = {}\nfor row in rows:\n    totals[row[\"Region\"]] = row[\"sales\"]";

fn rename_key(graph: &ExecutionStateGraph, failure: &CellFailure) -> Option<(String, String)> {
    diagnose(failure, graph)
        .suggestions
        .iter()
        .find_map(|s| match s {
            Suggestion::RenameKey { from, to, .. } => Some((from.clone(), to.clone())),
            _ => None,
        })
}

#[tokio::test]
async fn a_key_error_on_a_loop_variable_looks_at_the_iterable() {
    let renamed = Some(("Region".to_owned(), "region".to_owned()));
    // The iterable's value, without the loop variable's.
    let (graph, s) = graph_of(&["rows = load()", SUM]);
    let failure = CellFailure::exception(s[1], "KeyError", "'Region'")
        .at_line(3)
        .with_value(
            "rows",
            "list(len 2) [{'region': 'north', 'sales': 10}, ...]",
        );
    assert_eq!(rename_key(&graph, &failure), renamed);
    // No value at all: the iterable's producer wrote the key.
    let (mut graph, s) = graph_of(&[ROWS, SUM]);
    run_all(&mut graph);
    let failure = CellFailure::exception(s[1], "KeyError", "'Region'").at_line(3);
    assert_eq!(rename_key(&graph, &failure), renamed);
    let d = diagnose(&failure, &graph);
    let patch = RulePatcher::new().propose(&d, &graph).await.unwrap();
    assert!(patch.new_source.contains(r#"totals[row["region"]]"#));
    // Nested loops: `row` comes from `group`, which comes from `groups`.
    let nested = "for group in groups:\n    for row in group:\n        print(row['Region'])";
    let (graph, s) = graph_of(&["groups = [[{'region': 'north'}]]", nested]);
    let failure = CellFailure::exception(s[1], "KeyError", "'Region'").at_line(3);
    assert_eq!(rename_key(&graph, &failure), renamed);
}

/// The reviewer's loop: the cell fails, is re-run (which does not report
/// `row`, rebound to the same object), and the failure of the re-run is
/// diagnosed and fixed by a rule.
#[tokio::test]
async fn a_rerun_failure_on_a_loop_variable_gets_a_rule_fix() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let p = || Provenance::now("model:x", "cell");
    notebook.add_cell(ROWS, p()).unwrap();
    let sum = notebook.add_cell(SUM, p()).unwrap();
    let replay = notebook.replay().await.unwrap();
    assert_eq!(replay.failed(), [sum]);
    let run = notebook.run_cell(sum).await.unwrap();
    let failure = CellFailure::from_run(&run)
        .unwrap()
        .with_input_values(&notebook);
    let d = diagnose(&failure, notebook.graph());
    assert!(
        d.suggestions.iter().any(|s| matches!(s,
            Suggestion::RenameKey { from, to, .. } if from == "Region" && to == "region")),
        "{:?} (outputs {:?})",
        d.suggestions,
        run.result.outputs.keys().collect::<Vec<_>>()
    );
    let patch = RulePatcher::new()
        .propose(&d, notebook.graph())
        .await
        .unwrap();
    notebook.apply_patch(&patch).unwrap();
    assert!(notebook.replay().await.unwrap().succeeded());
    notebook.shutdown().await;
}
