//! Scoping and mutation cases of `analyze_cell`, each asserting exact sets.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use harness_code::{
    AnalysisError, AnalysisOptions, CellAnalysis, DefinitionKind, DynamicFeature, Import,
    NestingKind, analyze_cell, analyze_cell_with,
};

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

fn analyze(source: &str) -> CellAnalysis {
    match analyze_cell(source) {
        Ok(analysis) => analysis,
        Err(error) => panic!("analysis of {source:?} failed: {error}"),
    }
}

/// Asserts reads, writes and mutations exactly, and that nothing is deleted.
#[track_caller]
fn check(source: &str, reads: &[&str], writes: &[&str], mutations: &[&str]) -> CellAnalysis {
    let analysis = analyze(source);
    assert_eq!(analysis.reads, set(reads), "reads of {source:?}");
    assert_eq!(analysis.writes, set(writes), "writes of {source:?}");
    assert_eq!(
        analysis.mutations,
        set(mutations),
        "mutations of {source:?}"
    );
    analysis
}

// ---------------------------------------------------------------- basics

#[test]
fn plain_read_and_write() {
    let a = check("y = x + 1", &["x"], &["y"], &[]);
    assert!(a.conditional_writes.is_empty());
    assert!(a.deletes.is_empty());
    assert!(!a.defeats_analysis());
}

#[test]
fn read_after_own_write_is_not_a_read() {
    check("x = 1\ny = x", &[], &["x", "y"], &[]);
}

#[test]
fn read_before_own_write_is_a_read() {
    check("y = x\nx = 1", &["x"], &["x", "y"], &[]);
}

#[test]
fn self_referencing_assignment_reads_and_writes() {
    check("x = x + 1", &["x"], &["x"], &[]);
}

#[test]
fn tuple_and_starred_targets() {
    check("a, (b, *c) = d", &["d"], &["a", "b", "c"], &[]);
}

#[test]
fn chained_assignment() {
    check("a = b = c", &["c"], &["a", "b"], &[]);
}

#[test]
fn builtins_are_not_reads() {
    let a = check("print(len(xs), ValueError, __name__)", &["xs"], &[], &[]);
    assert_eq!(a.builtins, set(&["ValueError", "__name__", "len", "print"]));
}

#[test]
fn pep701_fstring_with_nested_quotes() {
    let a = check(
        r#"msg = f"{name!r}: {values["key"]:>{width}} {f"{inner}"}""#,
        &["inner", "name", "values", "width"],
        &["msg"],
        &[],
    );
    assert!(a.builtins.is_empty());
}

// ------------------------------------------------------------- mutations

#[test]
fn augmented_assignment_on_name_reads_and_writes() {
    let a = check("x += 1", &["x"], &["x"], &[]);
    assert!(a.conditional_writes.is_empty());
}

#[test]
fn subscript_assignment_mutates_root() {
    check("df['a'] = 1", &["df"], &[], &["df"]);
}

#[test]
fn attribute_assignment_mutates_root() {
    check("obj.x = 2", &["obj"], &[], &["obj"]);
}

#[test]
fn chained_target_mutates_root_and_reads_index() {
    check("a.b[c].d = e", &["a", "c", "e"], &[], &["a"]);
}

#[test]
fn augmented_assignment_on_subscript_mutates() {
    check("df['a'] += offset", &["df", "offset"], &[], &["df"]);
}

#[test]
fn mutating_method_calls() {
    check("xs.append(3)", &["xs"], &[], &["xs"]);
    check("d.update(other)", &["d", "other"], &[], &["d"]);
    check("s.add(1); s.discard(2)", &["s"], &[], &["s"]);
    check("model.fit(X, y)", &["X", "model", "y"], &[], &["model"]);
    check("weights.mul_(0.5)", &["weights"], &[], &["weights"]);
    check("self_.data.items.sort()", &["self_"], &[], &["self_"]);
}

#[test]
fn non_mutating_method_call() {
    check("ys = xs.copy()", &["xs"], &["ys"], &[]);
}

#[test]
fn pandas_inplace_keyword_mutates() {
    check(
        "df.drop(columns=['a'], inplace=True)",
        &["df"],
        &[],
        &["df"],
    );
    check("df2 = df.drop(columns=['a'])", &["df"], &["df2"], &[]);
    check("df.fillna(0, inplace=False)", &["df"], &[], &[]);
}

#[test]
fn del_subscript_mutates() {
    let a = check("del xs[0]", &["xs"], &[], &["xs"]);
    assert!(a.deletes.is_empty());
}

#[test]
fn del_name_reads_and_deletes() {
    let a = check("del x", &["x"], &[], &[]);
    assert_eq!(a.deletes, set(&["x"]));
    let a = check("x = 1\ndel x", &[], &["x"], &[]);
    assert_eq!(a.deletes, set(&["x"]));
    assert_eq!(a.conditional_writes, set(&["x"]));
}

#[test]
fn setattr_mutates_first_argument() {
    check("setattr(obj, 'a', value)", &["obj", "value"], &[], &["obj"]);
}

#[test]
fn mutation_of_own_binding_is_not_reported() {
    check("xs = []\nxs.append(1)\nxs[0] = 2", &[], &["xs"], &[]);
}

// --------------------------------------------------------------- imports

#[test]
fn import_dotted_binds_first_component() {
    let a = check("import a.b", &[], &["a"], &[]);
    assert_eq!(
        a.imports,
        [Import {
            module: "a.b".into(),
            member: None,
            bound: Some("a".into()),
            line: 1,
            top_level: true
        }]
    );
}

#[test]
fn import_as_and_from_imports() {
    let a = check(
        "import a.b as c\nfrom x import y as z, w\nfrom ..pkg import mod",
        &[],
        &["c", "mod", "w", "z"],
        &[],
    );
    let summary: Vec<_> = a
        .imports
        .iter()
        .map(|i| {
            (
                i.module.as_str(),
                i.member.as_deref(),
                i.bound.as_deref(),
                i.line,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("a.b", None, Some("c"), 1),
            ("x", Some("y"), Some("z"), 2),
            ("x", Some("w"), Some("w"), 2),
            ("..pkg", Some("mod"), Some("mod"), 3),
        ]
    );
}

#[test]
fn import_inside_function_is_local() {
    let a = check(
        "def f():\n    import os\n    return os.sep",
        &[],
        &["f"],
        &[],
    );
    assert!(!a.imports[0].top_level);
}

// --------------------------------------------------- dynamic features

#[test]
fn star_import_defeats_analysis() {
    let a = check("from os.path import *", &[], &[], &[]);
    assert!(a.defeats_analysis());
    assert_eq!(a.dynamic[0].feature, DynamicFeature::StarImport);
    assert_eq!(a.dynamic[0].detail.as_deref(), Some("os.path"));
}

#[test]
fn exec_eval_globals_defeat_analysis() {
    let a = analyze("exec(code)\nv = eval('1')\ng = globals()\nl = locals()\nvs = vars()");
    let features: Vec<_> = a.dynamic.iter().map(|d| (d.feature, d.line)).collect();
    assert_eq!(
        features,
        [
            (DynamicFeature::Exec, 1),
            (DynamicFeature::Eval, 2),
            (DynamicFeature::Globals, 3),
            (DynamicFeature::Locals, 4),
            (DynamicFeature::Vars, 5),
        ]
    );
    assert_eq!(a.reads, set(&["code"]));
    assert_eq!(
        a.builtins,
        set(&["eval", "exec", "globals", "locals", "vars"])
    );
}

#[test]
fn locals_and_vars_inside_function_are_fine() {
    let a = analyze("def f(o):\n    return locals(), vars(o), vars()");
    assert!(!a.defeats_analysis());
}

#[test]
fn exec_inside_function_still_defeats_analysis() {
    assert!(analyze("def f(s):\n    exec(s)").defeats_analysis());
}

// ---------------------------------------------------------- functions

#[test]
fn function_free_variables_are_reads_of_defining_cell() {
    let a = check(
        "def f(a, b=default):\n    c = a + g\n    return helper(c)",
        &["default", "g", "helper"],
        &["f"],
        &[],
    );
    assert_eq!(a.definitions.len(), 1);
    assert_eq!(a.definitions[0].name, "f");
    assert_eq!(a.definitions[0].kind, DefinitionKind::Function);
    assert_eq!(a.definitions[0].line, 1);
}

#[test]
fn decorators_are_evaluated_at_definition() {
    check(
        "@deco(arg)\ndef f():\n    pass",
        &["arg", "deco"],
        &["f"],
        &[],
    );
}

#[test]
fn function_free_variable_bound_later_in_cell_is_not_a_read() {
    check("def f():\n    return y\ny = 1", &[], &["f", "y"], &[]);
}

#[test]
fn function_locals_are_local_everywhere_in_the_body() {
    // `x` is local to `f` (UnboundLocalError at run time), never a global read.
    let a = check("def f():\n    print(x)\n    x = 1", &[], &["f"], &[]);
    assert_eq!(a.builtins, set(&["print"]));
}

#[test]
fn default_argument_reads_enclosing_name() {
    check("def f(x=x):\n    return x", &["x"], &["f"], &[]);
}

#[test]
fn recursion_is_not_a_read() {
    check(
        "def fact(n):\n    return 1 if n <= 1 else n * fact(n - 1)",
        &[],
        &["fact"],
        &[],
    );
}

#[test]
fn annotations_are_evaluated_at_definition() {
    check(
        "def f(a: Bar, *args: Star, **kw: Kw) -> Baz:\n    y: Local = 1\n    return y",
        &["Bar", "Baz", "Kw", "Star"],
        &["f"],
        &[],
    );
    check("x: Foo = make()", &["Foo", "make"], &["x"], &[]);
    check("x: Foo", &["Foo"], &[], &[]);
}

#[test]
fn future_annotations_are_not_evaluated() {
    check(
        "from __future__ import annotations\ndef f(a: Bar) -> Baz:\n    pass\nx: Foo = 1",
        &[],
        &["annotations", "f", "x"],
        &[],
    );
}

#[test]
fn global_declaration_writes_when_called() {
    let a = check(
        "def bump():\n    global counter\n    counter += 1",
        &["counter"],
        &["bump", "counter"],
        &[],
    );
    assert_eq!(a.conditional_writes, set(&["counter"]));
    assert_eq!(a.definitions[0].call_writes, set(&["counter"]));
}

#[test]
fn nonlocal_binds_enclosing_function_variable() {
    check(
        "def outer():\n    n = 0\n    def inner():\n        nonlocal n\n        n += 1\n        return n\n    return inner",
        &[],
        &["outer"],
        &[],
    );
}

#[test]
fn closures_see_enclosing_function_but_free_names_are_reads() {
    check(
        "def outer():\n    v = 1\n    def inner():\n        return v + w\n    return inner",
        &["w"],
        &["outer"],
        &[],
    );
}

#[test]
fn mutation_in_function_body_is_a_call_effect() {
    let a = check("def add(v):\n    xs.append(v)", &["xs"], &["add"], &["xs"]);
    assert_eq!(a.definitions[0].call_mutations, set(&["xs"]));
}

#[test]
fn mutation_of_parameter_is_local() {
    check(
        "def add(xs, v):\n    xs.append(v)\n    xs[0] = v",
        &[],
        &["add"],
        &[],
    );
}

#[test]
fn async_function_and_await() {
    check(
        "async def main():\n    async with lock:\n        return await fetch(url)",
        &["fetch", "lock", "url"],
        &["main"],
        &[],
    );
}

// ------------------------------------------------------------- lambdas

#[test]
fn lambda_parameters_are_local_defaults_are_enclosing() {
    check(
        "f = lambda a, b=dflt: a + b + k",
        &["dflt", "k"],
        &["f"],
        &[],
    );
    check("g = lambda x: x", &[], &["g"], &[]);
}

// ------------------------------------------------------------- classes

#[test]
fn class_body_scope() {
    let a = check(
        "class C(Base, metaclass=Meta):\n    x = 1\n    y = x + z\n    def m(self):\n        return x",
        // The method cannot see the class-level `x`: it reads the global.
        &["Base", "Meta", "x", "z"],
        &["C"],
        &[],
    );
    assert_eq!(a.definitions[0].kind, DefinitionKind::Class);
}

#[test]
fn comprehension_in_class_body_sees_class_only_in_first_iterable() {
    check(
        "class C:\n    a = [1]\n    b = [x for x in a]\n    c = [a for x in a]",
        &["a"],
        &["C"],
        &[],
    );
}

#[test]
fn method_referring_to_its_class() {
    check(
        "class Node:\n    def clone(self):\n        return Node()",
        &[],
        &["Node"],
        &[],
    );
}

#[test]
fn class_decorator_and_annotated_fields() {
    let a = check(
        "@dataclass\nclass P:\n    x: int = 0\n    y: Vec = None",
        &["Vec", "dataclass"],
        &["P"],
        &[],
    );
    assert_eq!(a.builtins, set(&["int"]));
}

#[test]
fn class_inside_function_sees_function_locals() {
    check(
        "def f():\n    k = 1\n    class C:\n        v = k\n    return C",
        &[],
        &["f"],
        &[],
    );
}

// ------------------------------------------------------ comprehensions

#[test]
fn comprehension_has_its_own_scope() {
    check(
        "squares = [x * x for x in xs if x > limit]",
        &["limit", "xs"],
        &["squares"],
        &[],
    );
}

#[test]
fn nested_comprehension_targets() {
    check("flat = [y for x in xs for y in x]", &["xs"], &["flat"], &[]);
}

#[test]
fn comprehension_variable_does_not_leak() {
    check("[x for x in xs]\nprint(x)", &["x", "xs"], &[], &[]);
}

#[test]
fn generator_set_and_dict_comprehensions() {
    check(
        "total = sum(v for v in values)",
        &["values"],
        &["total"],
        &[],
    );
    check("s = {k for k in keys}", &["keys"], &["s"], &[]);
    check("d = {k: v for k, v in pairs}", &["pairs"], &["d"], &[]);
}

#[test]
fn comprehension_first_iterable_uses_enclosing_scope() {
    // The first iterable `x` is the enclosing (global) `x`.
    check("ys = [x for x in x]", &["x"], &["ys"], &[]);
}

#[test]
fn walrus_in_comprehension_binds_enclosing_scope() {
    check(
        "[last := f(x) for x in xs]\nprint(last)",
        &["f", "xs"],
        &["last"],
        &[],
    );
}

#[test]
fn walrus_at_module_level() {
    check(
        "if (n := len(xs)) > 3:\n    pass\nprint(n)",
        &["xs"],
        &["n"],
        &[],
    );
}

#[test]
fn walrus_in_function_comprehension_is_function_local() {
    check(
        "def f():\n    [z := 1 for _ in range(2)]\n    return z",
        &[],
        &["f"],
        &[],
    );
}

// ------------------------------------------------------------ binders

#[test]
fn match_captures_and_value_patterns() {
    let a = check(
        "match cmd:\n    case Point(x=px, y=0):\n        r = px\n    case [first, *rest]:\n        r = first\n    case {'k': v, **others}:\n        r = v\n    case Color.RED | Color.BLUE as col:\n        r = col\n    case _:\n        r = None",
        &["Color", "Point", "cmd"],
        &["col", "first", "others", "px", "r", "rest", "v"],
        &[],
    );
    // `r` is bound on every path, the captures only in their case.
    assert_eq!(
        a.conditional_writes,
        set(&["col", "first", "others", "px", "rest", "v"])
    );
}

#[test]
fn match_without_irrefutable_case_is_conditional() {
    let a = check("match v:\n    case 1:\n        r = 1", &["v"], &["r"], &[]);
    assert_eq!(a.conditional_writes, set(&["r"]));
}

#[test]
fn except_as_binds_then_unbinds() {
    let a = check(
        "try:\n    risky()\nexcept ValueError as e:\n    print(e)",
        &["risky"],
        &["e"],
        &[],
    );
    assert_eq!(a.conditional_writes, set(&["e"]));
    assert_eq!(a.builtins, set(&["ValueError", "print"]));
}

#[test]
fn with_as_binds() {
    let a = check(
        "with open(path) as fh, lock:\n    text = fh.read()",
        &["lock", "path"],
        &["fh", "text"],
        &[],
    );
    assert!(a.conditional_writes.is_empty());
}

#[test]
fn for_targets_bind_conditionally() {
    let a = check(
        "for i, item in enumerate(items):\n    last = item",
        &["items"],
        &["i", "item", "last"],
        &[],
    );
    assert_eq!(a.conditional_writes, set(&["i", "item", "last"]));
}

#[test]
fn while_loop_reads_before_writing() {
    let a = check("while n > 0:\n    n -= 1", &["n"], &["n"], &[]);
    assert_eq!(a.conditional_writes, set(&["n"]));
}

#[test]
fn conditional_binding_then_use_is_still_a_read() {
    let a = check("if flag:\n    x = 1\nprint(x)", &["flag", "x"], &["x"], &[]);
    assert_eq!(a.conditional_writes, set(&["x"]));
}

#[test]
fn binding_in_every_branch_is_definite() {
    let a = check(
        "if flag:\n    x = 1\nelif other:\n    x = 2\nelse:\n    x = 3\nprint(x)",
        &["flag", "other"],
        &["x"],
        &[],
    );
    assert!(a.conditional_writes.is_empty());
}

#[test]
fn try_import_fallback_is_definite() {
    let a = check(
        "try:\n    import ujson as json\nexcept ImportError:\n    import json\nout = json.dumps(data)",
        &["data"],
        &["json", "out"],
        &[],
    );
    assert!(a.conditional_writes.is_empty());
}

#[test]
fn finally_bindings_are_definite() {
    let a = check(
        "try:\n    x = f()\nfinally:\n    done = True",
        &["f"],
        &["done", "x"],
        &[],
    );
    assert!(a.conditional_writes.is_empty());
}

#[test]
fn type_alias_binds_name_and_type_params_are_local() {
    check("type Pair[T] = tuple[T, Other]", &["Other"], &["Pair"], &[]);
    check(
        "def first[T: Bound](xs: list[T]) -> T:\n    return xs[0]",
        &["Bound"],
        &["first"],
        &[],
    );
}

#[test]
fn module_level_global_statement_is_harmless() {
    check("global x\nx = 1", &[], &["x"], &[]);
}

// ------------------------------------------------------------- errors

#[test]
fn syntax_error_reports_line_and_column() {
    let error = analyze_cell("x = 1\ny = (2,\nz = 3\n").unwrap_err();
    let AnalysisError::Syntax { line, column, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(*line >= 2, "{error}");
    assert!(*column >= 1);

    let error = analyze_cell("a = 1\nprint 'hello'\n").unwrap_err();
    let AnalysisError::Syntax {
        line,
        column,
        message,
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!((*line, *column), (2, 7), "{message}");
    assert!(
        error
            .to_string()
            .starts_with("syntax error at line 2, column 7: ")
    );
}

#[test]
fn nesting_deeper_than_cpython_accepts_is_a_typed_error() {
    let source = format!("ok = 1\nx = {}a{}", "[".repeat(5000), "]".repeat(5000));
    let error = analyze_cell(&source).unwrap_err();
    assert_eq!(
        error,
        AnalysisError::TooDeeplyNested {
            nesting: NestingKind::Brackets,
            line: 2,
            column: 205,
            limit: 200
        }
    );
    assert_eq!(
        error.to_string(),
        "brackets nested deeper than 200 levels at line 2, column 205"
    );
}

#[test]
fn ipython_escapes_are_skipped_with_a_note() {
    assert!(analyze_cell("%matplotlib inline\nx = 1").is_err());
    let a = analyze_cell_with(
        "%matplotlib inline\n!pip install foo\nfiles = !ls\nplot(files, data)",
        AnalysisOptions { ipython: true },
    )
    .unwrap();
    assert_eq!(a.reads, set(&["data", "plot"]));
    assert_eq!(a.writes, set(&["files"]));
    let commands: Vec<_> = a
        .ipython_escapes
        .iter()
        .map(|e| (e.line, e.command.as_str()))
        .collect();
    assert_eq!(
        commands,
        [
            (1, "%matplotlib inline"),
            (2, "!pip install foo"),
            (3, "!ls")
        ]
    );
}

#[test]
fn analysis_round_trips_through_json() {
    let a = analyze("import os\ndef f():\n    global g\n    g = os.sep\nxs.append(1)\nexec('')");
    let json = serde_json::to_string(&a).unwrap();
    let back: CellAnalysis = serde_json::from_str(&json).unwrap();
    assert_eq!(a, back);
}

#[test]
fn function_binders_without_walrus_in_the_cell() {
    // No `:=` anywhere: the binding pre-pass only looks at targets and blocks.
    let body = "def f(p, *args, k=dflt, **kw):\n    a = 1\n    b, *c = p\n    d += 1\n    e: int = 2\n    for g in args:\n        h = g\n    while a:\n        i = 0\n    if p:\n        j = 0\n    elif k:\n        j2 = 0\n    else:\n        j3 = 0\n    with p as (l, m):\n        pass\n    try:\n        import os.path\n        from q import r as s\n    except E as t:\n        pass\n    else:\n        u = 0\n    finally:\n        v = 0\n    match p:\n        case [w, *x] if y:\n            pass\n        case {'k': z, **rest}:\n            pass\n    del a\n    def inner():\n        pass\n    class Inner:\n        pass\n    return (a, b, c, d, e, g, h, i, j, j2, j3, l, m, os, s, t, u, v, w, x, z, rest, inner, Inner, kw)";
    let without = check(body, &["E", "dflt", "y"], &["f"], &[]);
    // The local annotation `e: int` is never evaluated.
    assert!(without.builtins.is_empty());
    // The same with a walrus elsewhere takes the full walk; results agree.
    let with = analyze(&format!("{body}\n(unused := 0)"));
    assert_eq!(with.reads, without.reads);
    assert_eq!(with.builtins, without.builtins);
}

// --------------------------------------------------------------- aliases

#[test]
fn mutation_through_an_alias_made_in_the_cell_is_a_mutation_of_the_original() {
    check("ys = xs\nys.append(1)", &["xs"], &["ys"], &["xs"]);
    check("ys = xs\nys[0] = 1", &["xs"], &["ys"], &["xs"]);
    check("a = b = xs\nb.sort()", &["xs"], &["a", "b"], &["xs"]);
    // Chains lead back to the first name.
    check(
        "ys = xs\nzs = ys\nzs.clear()",
        &["xs"],
        &["ys", "zs"],
        &["xs"],
    );
    check(
        "df2 = df\ndf2.drop(columns=['a'], inplace=True)",
        &["df"],
        &["df2"],
        &["df"],
    );
}

#[test]
fn a_rebound_alias_no_longer_leads_to_the_original() {
    check("ys = xs\nys = []\nys.append(1)", &["xs"], &["ys"], &[]);
    check("ys = xs\nys += [1]", &["xs"], &["ys"], &[]);
    // An alias of something the cell made itself changes nothing outside.
    check("xs = []\nys = xs\nys.append(1)", &[], &["xs", "ys"], &[]);
}

#[test]
fn an_alias_made_in_a_branch_still_counts() {
    check(
        "if flag:\n    ys = xs\nelse:\n    ys = []\nys.append(1)",
        &["flag", "xs"],
        &["ys"],
        &["xs"],
    );
}
