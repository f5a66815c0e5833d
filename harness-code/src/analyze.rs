//! Static analysis of one Python cell: which namespace names it reads, writes,
//! deletes and mutates, what it imports and defines, and whether it uses a
//! feature that defeats static analysis.
//!
//! The walk models Python's scoping rules (see the [module docs](crate)
//! for the full list of rules and heuristics).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use rustpython_ruff_python_ast::visitor::{self, Visitor};
use rustpython_ruff_python_ast::{self as ast, Expr, ExprContext, Pattern, Stmt};
use rustpython_ruff_text_size::{TextRange, TextSize};
use serde::{Deserialize, Serialize};

use crate::error::AnalysisError;
use crate::parse::{LineCursor, with_module};

/// A set of names borrowed from the source, hashed with `foldhash`: fast on
/// short identifiers, and seeded anew per process and per set. Names come
/// from code a model wrote; under a fixed hash a cell of names crafted to
/// collide would make its analysis quadratic. (Measured on 300 files of the
/// standard library, the analysis runs as many instructions as with the
/// fixed multiplicative hash it replaces.)
type NameSet<'a> = std::collections::HashSet<&'a str, foldhash::fast::RandomState>;

/// What one Python cell does to the shared namespace.
///
/// All name sets are ordered so that JSON output and comparisons are stable.
/// Every name in [`mutations`](Self::mutations) is also in
/// [`reads`](Self::reads): mutating an object first loads it.
///
/// ```
/// use harness_code::analyze_cell;
///
/// let analysis = analyze_cell("df['total'] = df.a + offset\nn = len(df)").unwrap();
/// assert_eq!(analysis.reads.iter().collect::<Vec<_>>(), ["df", "offset"]);
/// assert_eq!(analysis.writes.iter().collect::<Vec<_>>(), ["n"]);
/// assert_eq!(analysis.mutations.iter().collect::<Vec<_>>(), ["df"]);
/// assert_eq!(analysis.builtins.iter().collect::<Vec<_>>(), ["len"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellAnalysis {
    /// Names the cell loads from the namespace before (or without) binding
    /// them itself; builtins are listed in [`builtins`](Self::builtins) instead.
    pub reads: BTreeSet<String>,
    /// Names the cell binds in the namespace (assignment, `def`, `class`,
    /// `import`, `for` targets, `with ... as`, walrus, `match` captures,
    /// `except ... as`, `global` assignments inside functions).
    pub writes: BTreeSet<String>,
    /// The subset of [`writes`](Self::writes) that may not be bound when the
    /// cell ends (bound in only some branches, in a loop body, in a function
    /// body through `global`, or unbound again like `except ... as e`).
    pub conditional_writes: BTreeSet<String>,
    /// Names the cell removes with `del name`.
    pub deletes: BTreeSet<String>,
    /// Names whose object the cell changes in place without rebinding the
    /// name (`df["a"] = 1`, `obj.x = 2`, `xs.append(3)`, `del xs[0]`, ...).
    pub mutations: BTreeSet<String>,
    /// Builtin names the cell uses (`print`, `len`, ...). They are not reads
    /// of other cells unless an earlier cell rebound them.
    pub builtins: BTreeSet<String>,
    /// Import statements, in source order.
    pub imports: Vec<Import>,
    /// Functions and classes defined at the top level of the cell, in source order.
    pub definitions: Vec<Definition>,
    /// Uses of features that defeat static analysis, in source order.
    pub dynamic: Vec<DynamicUse>,
    /// IPython escape commands (`%magic`, `!shell`) that were skipped; only
    /// produced when analysing with [`AnalysisOptions::ipython`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipython_escapes: Vec<IpythonEscape>,
}

impl CellAnalysis {
    /// Whether the cell uses `exec`, `eval`, `globals()`, a star import or
    /// another feature that makes its reads and writes unknowable statically.
    pub fn defeats_analysis(&self) -> bool {
        !self.dynamic.is_empty()
    }

    /// Names the cell binds for certain (writes that are not conditional).
    pub fn definite_writes(&self) -> impl Iterator<Item = &str> {
        self.writes
            .iter()
            .filter(|name| !self.conditional_writes.contains(*name))
            .map(String::as_str)
    }

    /// The top-level definition with this name, if the cell has one.
    pub fn definition(&self, name: &str) -> Option<&Definition> {
        self.definitions.iter().rev().find(|d| d.name == name)
    }

    /// Whether `name` is bound by a top-level import of this cell.
    pub fn imports_name(&self, name: &str) -> bool {
        self.imports
            .iter()
            .any(|import| import.top_level && import.bound.as_deref() == Some(name))
    }
}

/// One imported module or member.
///
/// `import a.b` imports module `a.b` and binds `a`; `import a.b as c` binds
/// `c`; `from a import b as c` imports member `b` of `a` and binds `c`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Import {
    /// The module, with leading dots for relative imports (`..pkg`).
    pub module: String,
    /// The imported member for `from` imports (`*` for a star import).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// The name the import binds; `None` for a star import.
    pub bound: Option<String>,
    /// 1-based line of the import statement.
    pub line: u32,
    /// Whether the import binds a name of the namespace (as opposed to a
    /// local name inside a function or class body).
    pub top_level: bool,
}

/// Kind of a top-level definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DefinitionKind {
    /// `def` or `async def`.
    Function,
    /// `class`.
    Class,
}

/// A function or class defined at the top level of a cell.
///
/// `call_writes` and `call_mutations` are the effects on the namespace that
/// happen when the function (or a method of the class) is *called*, which
/// may be in a later cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    /// The bound name.
    pub name: String,
    /// Function or class.
    pub kind: DefinitionKind,
    /// 1-based line of the name in the `def`/`class` statement.
    pub line: u32,
    /// Global names the body binds or deletes (through `global`) when called.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub call_writes: BTreeSet<String>,
    /// Global names whose objects the body mutates when called.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub call_mutations: BTreeSet<String>,
}

/// A feature that defeats static analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DynamicFeature {
    /// The builtin `exec`.
    Exec,
    /// The builtin `eval`.
    Eval,
    /// The builtin `globals`.
    Globals,
    /// `locals()` at module level (it is the global namespace there).
    Locals,
    /// `vars()` without arguments at module level.
    Vars,
    /// `from module import *`.
    StarImport,
}

/// Where a cell uses a [`DynamicFeature`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicUse {
    /// The feature.
    pub feature: DynamicFeature,
    /// 1-based line of the use.
    pub line: u32,
    /// The module of a star import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// An IPython escape command that the analysis skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpythonEscape {
    /// 1-based line of the command.
    pub line: u32,
    /// The command as written, e.g. `%matplotlib inline` or `!pip list`.
    pub command: String,
}

/// Options for [`analyze_cell_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnalysisOptions {
    /// Accept IPython syntax (`%magic`, `!shell`, `x = !cmd`): escape
    /// commands are skipped and listed in [`CellAnalysis::ipython_escapes`].
    pub ipython: bool,
}

/// Analyses one cell of plain Python.
///
/// ```
/// use harness_code::analyze_cell;
///
/// let analysis = analyze_cell("import numpy as np\narr = np.zeros(n)").unwrap();
/// assert_eq!(analysis.reads.iter().collect::<Vec<_>>(), ["n"]);
/// assert_eq!(analysis.writes.iter().collect::<Vec<_>>(), ["arr", "np"]);
///
/// let error = analyze_cell("x = (1,\ny = 2").unwrap_err();
/// assert!(error.to_string().starts_with("syntax error at line"));
/// ```
///
/// # Errors
///
/// [`AnalysisError::Syntax`] with the line and column of the first syntax
/// error, [`AnalysisError::TooDeeplyNested`] for code nested deeper than
/// CPython accepts, [`AnalysisError::TooComplex`] for a statement too long
/// or too deeply nested to analyse within the stack limit (see
/// [limits](crate#limits-of-the-analysis)), [`AnalysisError::TooLarge`]
/// for a source of 4 GiB or more; [`AnalysisError::AnalysisThread`] and
/// [`AnalysisError::ParserPanic`] when the analysis could not run. Never
/// overflows the stack, whatever the source.
pub fn analyze_cell(source: &str) -> Result<CellAnalysis, AnalysisError> {
    analyze_cell_with(source, AnalysisOptions::default())
}

/// Analyses one cell with explicit [`AnalysisOptions`].
///
/// ```
/// use harness_code::{AnalysisOptions, analyze_cell_with};
///
/// let options = AnalysisOptions { ipython: true };
/// let analysis = analyze_cell_with("%matplotlib inline\nplot(data)", options).unwrap();
/// assert_eq!(analysis.reads.iter().collect::<Vec<_>>(), ["data", "plot"]);
/// assert_eq!(analysis.ipython_escapes[0].command, "%matplotlib inline");
/// ```
///
/// # Errors
///
/// [`AnalysisError::Syntax`] with the line and column of the first syntax
/// error, [`AnalysisError::TooDeeplyNested`] for code nested deeper than
/// CPython accepts, [`AnalysisError::TooComplex`] for a statement too long
/// or too deeply nested to analyse within the stack limit (see
/// [limits](crate#limits-of-the-analysis)), [`AnalysisError::TooLarge`]
/// for a source of 4 GiB or more; [`AnalysisError::AnalysisThread`] and
/// [`AnalysisError::ParserPanic`] when the analysis could not run. Never
/// overflows the stack, whatever the source.
pub fn analyze_cell_with(
    source: &str,
    options: AnalysisOptions,
) -> Result<CellAnalysis, AnalysisError> {
    with_module(source, options, |source, module| {
        let mut analyzer = Analyzer::new(source);
        analyzer.visit_body(&module.body);
        analyzer.finish()
    })
}

/// Checks that `source` is valid Python (or IPython, with
/// [`AnalysisOptions::ipython`]) without analysing it.
///
/// ```
/// use harness_code::{AnalysisOptions, check_syntax};
///
/// assert!(check_syntax(r#"x = f"{a["k"]}""#, AnalysisOptions::default()).is_ok());
/// assert!(check_syntax("x = = 1", AnalysisOptions::default()).is_err());
/// ```
///
/// # Errors
///
/// [`AnalysisError::Syntax`] with the line and column of the first syntax
/// error, [`AnalysisError::TooDeeplyNested`] for code nested deeper than
/// CPython accepts, [`AnalysisError::TooComplex`] for a statement too long
/// or too deeply nested to analyse within the stack limit (see
/// [limits](crate#limits-of-the-analysis)), [`AnalysisError::TooLarge`]
/// for a source of 4 GiB or more; [`AnalysisError::AnalysisThread`] and
/// [`AnalysisError::ParserPanic`] when the analysis could not run. Never
/// overflows the stack, whatever the source.
pub fn check_syntax(source: &str, options: AnalysisOptions) -> Result<(), AnalysisError> {
    with_module(source, options, |_, _| ())
}

/// Names Python resolves in the builtins module (or the module's own dunder
/// attributes), sorted to keep the list reviewable.
const BUILTINS: &[&str] = &[
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "False",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "None",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "PythonFinalizationError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "True",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
    "__annotations__",
    "__build_class__",
    "__builtins__",
    "__cached__",
    "__debug__",
    "__doc__",
    "__file__",
    "__import__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
];

/// Whether `name` is a Python builtin (or a module dunder such as `__name__`).
///
/// ```
/// assert!(harness_code::is_builtin("print"));
/// assert!(!harness_code::is_builtin("df"));
/// ```
pub fn is_builtin(name: &str) -> bool {
    static SET: OnceLock<NameSet<'static>> = OnceLock::new();
    SET.get_or_init(|| BUILTINS.iter().copied().collect())
        .contains(name)
}

/// Method names that change their receiver in place, sorted to keep the list
/// reviewable.
/// Lists, dicts, sets and deques, plus the scikit-learn/PyTorch calls that
/// notebooks use most to change a model object.
const MUTATING_METHODS: &[&str] = &[
    "__delitem__",
    "__setitem__",
    "add",
    "append",
    "appendleft",
    "clear",
    "difference_update",
    "discard",
    "extend",
    "extendleft",
    "fit",
    "fit_transform",
    "insert",
    "intersection_update",
    "load_state_dict",
    "partial_fit",
    "pop",
    "popitem",
    "popleft",
    "remove",
    "reverse",
    "rotate",
    "set_params",
    "setdefault",
    "sort",
    "symmetric_difference_update",
    "update",
];

/// Whether calling method `name` on an object is assumed to mutate the object.
///
/// Besides the fixed list (`append`, `update`, `sort`, `fit`, ...), a public
/// name ending in a single underscore (PyTorch's in-place convention, e.g.
/// `zero_`, `add_`) counts as mutating.
///
/// ```
/// assert!(harness_code::is_mutating_method("append"));
/// assert!(harness_code::is_mutating_method("mul_"));
/// assert!(!harness_code::is_mutating_method("copy"));
/// ```
pub fn is_mutating_method(name: &str) -> bool {
    static SET: OnceLock<NameSet<'static>> = OnceLock::new();
    SET.get_or_init(|| MUTATING_METHODS.iter().copied().collect())
        .contains(name)
        || (name.len() > 1
            && name.ends_with('_')
            && !name.starts_with('_')
            && !name.ends_with("__"))
}

/// The name at the root of an attribute/subscript chain: `a` for `a.b[c].d`.
fn root_name(expr: &Expr) -> Option<&str> {
    let mut current = expr;
    loop {
        match current {
            Expr::Name(name) => return Some(name.id.as_str()),
            Expr::Attribute(attribute) => current = &attribute.value,
            Expr::Subscript(subscript) => current = &subscript.value,
            _ => return None,
        }
    }
}

fn has_inplace_true(arguments: &ast::Arguments) -> bool {
    arguments.keywords.iter().any(|keyword| {
        keyword
            .arg
            .as_ref()
            .is_some_and(|arg| arg.as_str() == "inplace")
            && matches!(&keyword.value, Expr::BooleanLiteral(b) if b.value)
    })
}

/// Whether a `case` pattern matches every subject (so later code runs after
/// exactly one of the cases).
fn is_irrefutable(pattern: &Pattern) -> bool {
    match pattern {
        Pattern::MatchAs(as_pattern) => as_pattern.pattern.as_deref().is_none_or(is_irrefutable),
        Pattern::MatchOr(or_pattern) => or_pattern.patterns.iter().any(is_irrefutable),
        _ => false,
    }
}

fn collect_target_names<'a>(target: &'a Expr, names: &mut NameSet<'a>) {
    match target {
        Expr::Name(name) => {
            names.insert(name.id.as_str());
        }
        Expr::Tuple(tuple) => tuple
            .elts
            .iter()
            .for_each(|e| collect_target_names(e, names)),
        Expr::List(list) => list
            .elts
            .iter()
            .for_each(|e| collect_target_names(e, names)),
        Expr::Starred(starred) => collect_target_names(&starred.value, names),
        _ => {}
    }
}

/// `set.contains(name)` that skips hashing when the set is empty, as most
/// `global`/`nonlocal` sets are.
fn holds(set: &NameSet<'_>, name: &str) -> bool {
    !set.is_empty() && set.contains(name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScopeKind {
    Module,
    Class,
    /// Functions, lambdas, and the annotation scopes of type parameters.
    Function,
    Comprehension,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    /// Resolved in a function, comprehension or class scope of the cell.
    Local,
    /// Resolved in the module namespace (or builtins).
    Global,
}

#[derive(Debug)]
struct Scope<'a> {
    kind: ScopeKind,
    /// Whether code in this scope runs later than the cell (function and
    /// lambda bodies), so its global names are resolved against the whole cell.
    deferred: bool,
    /// Function and comprehension scopes: every name bound anywhere in them.
    locals: NameSet<'a>,
    globals: NameSet<'a>,
    nonlocals: NameSet<'a>,
    /// Module and class scopes: names certainly bound at the current point.
    definite: NameSet<'a>,
}

impl<'a> Scope<'a> {
    fn new(kind: ScopeKind, deferred: bool) -> Self {
        Self {
            kind,
            deferred,
            locals: NameSet::default(),
            globals: NameSet::default(),
            nonlocals: NameSet::default(),
            definite: NameSet::default(),
        }
    }

    fn from_bindings(bindings: BindingCollector<'a>, deferred: bool) -> Self {
        let BindingCollector {
            mut locals,
            globals,
            nonlocals,
            ..
        } = bindings;
        locals.retain(|name| !globals.contains(name) && !nonlocals.contains(name));
        Self {
            kind: ScopeKind::Function,
            deferred,
            locals,
            globals,
            nonlocals,
            definite: NameSet::default(),
        }
    }

    fn has_flow(&self) -> bool {
        matches!(self.kind, ScopeKind::Module | ScopeKind::Class)
    }
}

/// Collects the names a function (or lambda) body binds, which Python makes
/// local for the whole body, without descending into nested scopes.
#[derive(Debug, Default)]
struct BindingCollector<'a> {
    locals: NameSet<'a>,
    globals: NameSet<'a>,
    nonlocals: NameSet<'a>,
    /// Whether the cell contains `:=` at all; without it only assignment
    /// targets can bind, and expressions need not be walked.
    walrus_possible: bool,
}

impl<'a> BindingCollector<'a> {
    fn with_parameters(parameters: Option<&'a ast::Parameters>, walrus_possible: bool) -> Self {
        let mut collector = Self {
            walrus_possible,
            ..Self::default()
        };
        if let Some(parameters) = parameters {
            for parameter in parameters {
                collector
                    .locals
                    .insert(parameter.as_parameter().name.as_str());
            }
        }
        collector
    }

    /// Visits only what can bind: assignment targets and nested blocks.
    fn targets_and_blocks(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Assign(assign) => {
                for target in &assign.targets {
                    self.visit_expr(target);
                }
            }
            Stmt::AugAssign(assign) => self.visit_expr(&assign.target),
            Stmt::AnnAssign(assign) => self.visit_expr(&assign.target),
            Stmt::Delete(delete) => {
                for target in &delete.targets {
                    self.visit_expr(target);
                }
            }
            Stmt::For(for_stmt) => {
                self.visit_expr(&for_stmt.target);
                self.visit_body(&for_stmt.body);
                self.visit_body(&for_stmt.orelse);
            }
            Stmt::While(while_stmt) => {
                self.visit_body(&while_stmt.body);
                self.visit_body(&while_stmt.orelse);
            }
            Stmt::If(if_stmt) => {
                self.visit_body(&if_stmt.body);
                for clause in &if_stmt.elif_else_clauses {
                    self.visit_body(&clause.body);
                }
            }
            Stmt::With(with) => {
                for item in &with.items {
                    if let Some(target) = &item.optional_vars {
                        self.visit_expr(target);
                    }
                }
                self.visit_body(&with.body);
            }
            Stmt::Match(match_stmt) => {
                for case in &match_stmt.cases {
                    self.visit_pattern(&case.pattern);
                    self.visit_body(&case.body);
                }
            }
            Stmt::Try(try_stmt) => {
                self.visit_body(&try_stmt.body);
                for handler in &try_stmt.handlers {
                    self.visit_except_handler(handler);
                }
                self.visit_body(&try_stmt.orelse);
                self.visit_body(&try_stmt.finalbody);
            }
            _ => {}
        }
    }

    fn comprehension(&mut self, generators: &'a [ast::Comprehension], elements: &[&'a Expr]) {
        // Comprehension targets are the comprehension's own; walrus targets
        // inside it bind in this function, so the rest is still walked.
        for generator in generators {
            self.visit_expr(&generator.iter);
            for condition in &generator.ifs {
                self.visit_expr(condition);
            }
        }
        for element in elements {
            self.visit_expr(element);
        }
    }

    fn parameter_defaults(&mut self, parameters: &'a ast::Parameters) {
        for parameter in parameters.iter_non_variadic_params() {
            if let Some(default) = &parameter.default {
                self.visit_expr(default);
            }
        }
    }
}

impl<'a> Visitor<'a> for BindingCollector<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(function) => {
                self.locals.insert(function.name.as_str());
                if self.walrus_possible {
                    for decorator in &function.decorator_list {
                        self.visit_expr(&decorator.expression);
                    }
                    self.parameter_defaults(&function.parameters);
                }
            }
            Stmt::ClassDef(class) => {
                self.locals.insert(class.name.as_str());
                if self.walrus_possible {
                    for decorator in &class.decorator_list {
                        self.visit_expr(&decorator.expression);
                    }
                    if let Some(arguments) = &class.arguments {
                        self.visit_arguments(arguments);
                    }
                }
            }
            Stmt::Global(global) => self
                .globals
                .extend(global.names.iter().map(ast::Identifier::as_str)),
            Stmt::Nonlocal(nonlocal) => self
                .nonlocals
                .extend(nonlocal.names.iter().map(ast::Identifier::as_str)),
            Stmt::Import(import) => {
                for alias in &import.names {
                    self.locals.insert(import_binding(alias));
                }
            }
            Stmt::ImportFrom(import) => {
                for alias in &import.names {
                    if alias.name.as_str() != "*" {
                        self.locals.insert(import_binding(alias));
                    }
                }
            }
            Stmt::TypeAlias(alias) => {
                if let Expr::Name(name) = &*alias.name {
                    self.locals.insert(name.id.as_str());
                }
            }
            _ if self.walrus_possible => visitor::walk_stmt(self, stmt),
            _ => self.targets_and_blocks(stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(name) => {
                if matches!(name.ctx, ExprContext::Store | ExprContext::Del) {
                    self.locals.insert(name.id.as_str());
                }
            }
            Expr::Lambda(lambda) => {
                if let Some(parameters) = &lambda.parameters {
                    self.parameter_defaults(parameters);
                }
            }
            Expr::ListComp(comp) => self.comprehension(&comp.generators, &[&comp.elt]),
            Expr::SetComp(comp) => self.comprehension(&comp.generators, &[&comp.elt]),
            Expr::Generator(comp) => self.comprehension(&comp.generators, &[&comp.elt]),
            Expr::DictComp(comp) => {
                self.comprehension(&comp.generators, &[&comp.key, &comp.value]);
            }
            _ => visitor::walk_expr(self, expr),
        }
    }

    fn visit_except_handler(&mut self, handler: &'a ast::ExceptHandler) {
        let ast::ExceptHandler::ExceptHandler(inner) = handler;
        if let Some(name) = &inner.name {
            self.locals.insert(name.as_str());
        }
        visitor::walk_except_handler(self, handler);
    }

    fn visit_pattern(&mut self, pattern: &'a Pattern) {
        match pattern {
            Pattern::MatchAs(ast::PatternMatchAs {
                name: Some(name), ..
            })
            | Pattern::MatchStar(ast::PatternMatchStar {
                name: Some(name), ..
            })
            | Pattern::MatchMapping(ast::PatternMatchMapping {
                rest: Some(name), ..
            }) => {
                self.locals.insert(name.as_str());
            }
            _ => {}
        }
        visitor::walk_pattern(self, pattern);
    }
}

/// The name an import alias binds: `c` for `a.b as c`, `a` for `a.b`.
fn import_binding(alias: &ast::Alias) -> &str {
    match &alias.asname {
        Some(asname) => asname.as_str(),
        None => {
            let full = alias.name.as_str();
            full.split('.').next().unwrap_or(full)
        }
    }
}

/// Intersection of the definite-binding sets of alternative branches.
#[derive(Debug, Default)]
struct BranchMerge<'a> {
    started: bool,
    merged: Option<NameSet<'a>>,
}

impl<'a> BranchMerge<'a> {
    fn add(&mut self, branch: Option<NameSet<'a>>) {
        if !self.started {
            self.started = true;
            self.merged = branch;
        } else if let (Some(merged), Some(branch)) = (&mut self.merged, branch) {
            merged.retain(|name| branch.contains(name));
        }
    }
}

#[derive(Debug)]
struct Analyzer<'a> {
    source: &'a str,
    lines: LineCursor<'a>,
    scopes: Vec<Scope<'a>>,
    future_annotations: bool,
    /// Whether `:=` occurs in the source (see [`BindingCollector`]).
    walrus_possible: bool,
    /// Index in `definitions` of the top-level definition being walked.
    current_definition: Option<usize>,
    reads: NameSet<'a>,
    writes: NameSet<'a>,
    deletes: NameSet<'a>,
    mutations: NameSet<'a>,
    builtins: NameSet<'a>,
    deferred_loads: NameSet<'a>,
    deferred_mutations: NameSet<'a>,
    /// Module-level names bound by this cell to the object of another
    /// name (`ys = xs`): name → the name whose object it holds, so that a
    /// change in place through `ys` is recorded on `xs`.
    aliases: std::collections::HashMap<&'a str, &'a str>,
    /// How many conditional blocks (branches, loops, `try`) enclose the
    /// statement being walked.
    branches: usize,
    imports: Vec<Import>,
    definitions: Vec<Definition>,
    dynamic: Vec<DynamicUse>,
    ipython_escapes: Vec<IpythonEscape>,
}

impl<'a> Analyzer<'a> {
    fn new(source: &'a str) -> Self {
        Self {
            source,
            lines: LineCursor::new(source),
            scopes: vec![Scope::new(ScopeKind::Module, false)],
            future_annotations: false,
            walrus_possible: source.contains(":="),
            current_definition: None,
            reads: NameSet::default(),
            writes: NameSet::default(),
            deletes: NameSet::default(),
            mutations: NameSet::default(),
            builtins: NameSet::default(),
            deferred_loads: NameSet::default(),
            deferred_mutations: NameSet::default(),
            aliases: std::collections::HashMap::new(),
            branches: 0,
            imports: Vec::new(),
            definitions: Vec::new(),
            dynamic: Vec::new(),
            ipython_escapes: Vec::new(),
        }
    }

    fn finish(mut self) -> CellAnalysis {
        // Function bodies run after the cell, so their free names are reads
        // only if the cell does not bind them itself by its end.
        let module = std::mem::replace(&mut self.scopes[0], Scope::new(ScopeKind::Module, false));
        let definite = module.definite;
        for name in std::mem::take(&mut self.deferred_loads) {
            if definite.contains(name) {
                continue;
            }
            if is_builtin(name) {
                self.builtins.insert(name);
            } else {
                self.reads.insert(name);
            }
        }
        for name in std::mem::take(&mut self.deferred_mutations) {
            if !definite.contains(name) && !is_builtin(name) {
                self.mutations.insert(name);
            }
        }
        let sorted = |set: NameSet<'_>| set.into_iter().map(str::to_owned).collect();
        let conditional_writes = self
            .writes
            .iter()
            .filter(|name| !definite.contains(*name))
            .map(|name| (*name).to_owned())
            .collect();
        CellAnalysis {
            reads: sorted(self.reads),
            writes: sorted(self.writes),
            conditional_writes,
            deletes: sorted(self.deletes),
            mutations: sorted(self.mutations),
            builtins: sorted(self.builtins),
            imports: self.imports,
            definitions: self.definitions,
            dynamic: self.dynamic,
            ipython_escapes: self.ipython_escapes,
        }
    }

    fn line(&mut self, offset: TextSize) -> u32 {
        self.lines.line_of(usize::from(offset))
    }

    fn current(&self) -> &Scope<'a> {
        // The module scope is pushed first and never popped.
        &self.scopes[self.scopes.len() - 1]
    }

    fn current_mut(&mut self) -> &mut Scope<'a> {
        let last = self.scopes.len() - 1;
        &mut self.scopes[last]
    }

    fn deferred(&self) -> bool {
        self.current().deferred
    }

    fn at_module_level(&self) -> bool {
        self.scopes.len() == 1
    }

    fn annotations_evaluated(&self) -> bool {
        !self.future_annotations
    }

    fn resolve(&self, name: &str) -> Binding {
        let innermost = self.scopes.len() - 1;
        for (index, scope) in self.scopes.iter().enumerate().rev() {
            match scope.kind {
                ScopeKind::Module => return Binding::Global,
                ScopeKind::Class => {
                    // Nested scopes do not see class-level names.
                    if index != innermost {
                        continue;
                    }
                    if holds(&scope.globals, name) {
                        return Binding::Global;
                    }
                    if holds(&scope.nonlocals, name) || holds(&scope.definite, name) {
                        return Binding::Local;
                    }
                }
                ScopeKind::Function | ScopeKind::Comprehension => {
                    if holds(&scope.globals, name) {
                        return Binding::Global;
                    }
                    if holds(&scope.locals, name) || holds(&scope.nonlocals, name) {
                        return Binding::Local;
                    }
                }
            }
        }
        Binding::Global
    }

    fn flag(&mut self, feature: DynamicFeature, range: TextRange, detail: Option<String>) {
        let line = self.line(range.start());
        self.dynamic.push(DynamicUse {
            feature,
            line,
            detail,
        });
    }

    fn load(&mut self, name: &'a str, range: TextRange) {
        if self.resolve(name) == Binding::Local {
            return;
        }
        let feature = match name {
            "exec" => Some(DynamicFeature::Exec),
            "eval" => Some(DynamicFeature::Eval),
            "globals" => Some(DynamicFeature::Globals),
            "locals" if self.at_module_level() => Some(DynamicFeature::Locals),
            _ => None,
        };
        if let Some(feature) = feature
            && !holds(&self.scopes[0].definite, name)
        {
            self.flag(feature, range, None);
        }
        if self.deferred() {
            self.deferred_loads.insert(name);
        } else if !holds(&self.scopes[0].definite, name) {
            if is_builtin(name) {
                self.builtins.insert(name);
            } else {
                self.reads.insert(name);
            }
        }
    }

    fn store(&mut self, name: &'a str) {
        let index = self.scopes.len() - 1;
        self.store_in(index, name);
    }

    fn store_in(&mut self, index: usize, name: &'a str) {
        let scope = &mut self.scopes[index];
        match scope.kind {
            ScopeKind::Module => {
                scope.definite.insert(name);
                self.writes.insert(name);
                // Rebound: whatever it held before is no longer its object,
                // unless the rebinding may not happen (in a branch or loop).
                if self.branches == 0 {
                    self.aliases.remove(name);
                }
            }
            ScopeKind::Class => {
                if holds(&scope.globals, name) {
                    self.global_store(name);
                } else if !holds(&scope.nonlocals, name) {
                    scope.definite.insert(name);
                }
            }
            ScopeKind::Function | ScopeKind::Comprehension => {
                if holds(&scope.globals, name) {
                    self.global_store(name);
                }
            }
        }
    }

    /// Binds a global name from inside a function or class (`global x`).
    fn global_store(&mut self, name: &'a str) {
        if self.deferred() {
            self.writes.insert(name);
            if let Some(index) = self.current_definition {
                self.definitions[index].call_writes.insert(name.to_owned());
            }
        } else {
            self.writes.insert(name);
            self.scopes[0].definite.insert(name);
        }
    }

    fn delete(&mut self, name: &'a str, range: TextRange) {
        // `del x` fails unless `x` exists, so it reads `x` first.
        self.load(name, range);
        let deferred = self.deferred();
        let scope = self.current_mut();
        let global = match scope.kind {
            ScopeKind::Module => true,
            ScopeKind::Class => {
                if holds(&scope.globals, name) {
                    true
                } else {
                    scope.definite.remove(name);
                    false
                }
            }
            ScopeKind::Function | ScopeKind::Comprehension => holds(&scope.globals, name),
        };
        if !global {
            return;
        }
        self.deletes.insert(name);
        if deferred {
            if let Some(index) = self.current_definition {
                self.definitions[index].call_writes.insert(name.to_owned());
            }
        } else {
            self.scopes[0].definite.remove(name);
        }
    }

    /// Records that the object at the root of `expr` is changed in place.
    fn mutate_root(&mut self, expr: &'a Expr) {
        let Some(name) = root_name(expr) else {
            return;
        };
        if self.resolve(name) == Binding::Local {
            return;
        }
        if self.deferred() {
            self.deferred_mutations.insert(name);
            if let Some(index) = self.current_definition {
                self.definitions[index]
                    .call_mutations
                    .insert(name.to_owned());
            }
        } else {
            if !holds(&self.scopes[0].definite, name) && !is_builtin(name) {
                self.mutations.insert(name);
            }
            // `ys = xs; ys.append(1)`: the object changed is `xs`'s.
            if let Some(&held) = self.aliases.get(name)
                && !holds(&self.scopes[0].definite, held)
                && !is_builtin(held)
            {
                self.mutations.insert(held);
            }
        }
    }

    /// After a module-level `target = source` between plain names, records
    /// that `target` holds `source`'s object (or the object `source` itself
    /// holds as an alias).
    fn note_alias(&mut self, assign: &'a ast::StmtAssign) {
        if self.scopes.len() != 1 {
            return;
        }
        let Expr::Name(source) = &*assign.value else {
            return;
        };
        let source = source.id.as_str();
        let held = self.aliases.get(source).copied().unwrap_or(source);
        for target in &assign.targets {
            if let Expr::Name(target) = target
                && target.id.as_str() != held
            {
                self.aliases.insert(target.id.as_str(), held);
            }
        }
    }

    fn snapshot(&self) -> Option<NameSet<'a>> {
        let scope = self.current();
        scope.has_flow().then(|| scope.definite.clone())
    }

    fn restore(&mut self, snapshot: Option<NameSet<'a>>) {
        if let Some(definite) = snapshot {
            let scope = self.current_mut();
            if scope.has_flow() {
                scope.definite = definite;
            }
        }
    }

    fn push_type_params(&mut self, type_params: &'a ast::TypeParams) {
        let mut scope = Scope::new(ScopeKind::Function, self.deferred());
        for type_param in &type_params.type_params {
            scope.locals.insert(type_param.name().as_str());
        }
        self.scopes.push(scope);
        for type_param in &type_params.type_params {
            visitor::walk_type_param(self, type_param);
        }
    }

    fn begin_definition(&mut self, name: &ast::Identifier, kind: DefinitionKind) -> Option<usize> {
        if !self.at_module_level() {
            return self.current_definition;
        }
        let line = self.line(name.range.start());
        self.definitions.push(Definition {
            name: name.as_str().to_owned(),
            kind,
            line,
            call_writes: BTreeSet::new(),
            call_mutations: BTreeSet::new(),
        });
        let outer = self.current_definition;
        self.current_definition = Some(self.definitions.len() - 1);
        outer
    }

    fn function_def(&mut self, function: &'a ast::StmtFunctionDef) {
        for decorator in &function.decorator_list {
            self.visit_expr(&decorator.expression);
        }
        for parameter in function.parameters.iter_non_variadic_params() {
            if let Some(default) = &parameter.default {
                self.visit_expr(default);
            }
        }
        let outer_definition = self.begin_definition(&function.name, DefinitionKind::Function);
        if let Some(type_params) = &function.type_params {
            self.push_type_params(type_params);
        }
        if self.annotations_evaluated() {
            for parameter in &*function.parameters {
                if let Some(annotation) = parameter.annotation() {
                    self.visit_expr(annotation);
                }
            }
            if let Some(returns) = &function.returns {
                self.visit_expr(returns);
            }
        }
        let mut bindings =
            BindingCollector::with_parameters(Some(&function.parameters), self.walrus_possible);
        bindings.visit_body(&function.body);
        self.scopes.push(Scope::from_bindings(bindings, true));
        self.visit_body(&function.body);
        self.scopes.pop();
        if function.type_params.is_some() {
            self.scopes.pop();
        }
        self.current_definition = outer_definition;
        self.store(function.name.as_str());
    }

    fn class_def(&mut self, class: &'a ast::StmtClassDef) {
        for decorator in &class.decorator_list {
            self.visit_expr(&decorator.expression);
        }
        let outer_definition = self.begin_definition(&class.name, DefinitionKind::Class);
        if let Some(type_params) = &class.type_params {
            self.push_type_params(type_params);
        }
        if let Some(arguments) = &class.arguments {
            self.visit_arguments(arguments);
        }
        let deferred = self.deferred();
        self.scopes.push(Scope::new(ScopeKind::Class, deferred));
        self.visit_body(&class.body);
        self.scopes.pop();
        if class.type_params.is_some() {
            self.scopes.pop();
        }
        self.current_definition = outer_definition;
        self.store(class.name.as_str());
    }

    fn lambda(&mut self, lambda: &'a ast::ExprLambda) {
        if let Some(parameters) = &lambda.parameters {
            for parameter in parameters.iter_non_variadic_params() {
                if let Some(default) = &parameter.default {
                    self.visit_expr(default);
                }
            }
        }
        let mut bindings =
            BindingCollector::with_parameters(lambda.parameters.as_deref(), self.walrus_possible);
        if self.walrus_possible {
            bindings.visit_expr(&lambda.body);
        }
        self.scopes.push(Scope::from_bindings(bindings, true));
        self.visit_expr(&lambda.body);
        self.scopes.pop();
    }

    fn comprehension(&mut self, generators: &'a [ast::Comprehension], elements: &[&'a Expr]) {
        // The first iterable is evaluated in the enclosing scope.
        if let Some(first) = generators.first() {
            self.visit_expr(&first.iter);
        }
        let mut scope = Scope::new(ScopeKind::Comprehension, self.deferred());
        for generator in generators {
            collect_target_names(&generator.target, &mut scope.locals);
        }
        self.scopes.push(scope);
        for (index, generator) in generators.iter().enumerate() {
            if index > 0 {
                self.visit_expr(&generator.iter);
            }
            self.visit_expr(&generator.target);
            for condition in &generator.ifs {
                self.visit_expr(condition);
            }
        }
        for element in elements {
            self.visit_expr(element);
        }
        self.scopes.pop();
    }

    /// `x := value` binds in the nearest scope that is not a comprehension.
    fn walrus(&mut self, named: &'a ast::ExprNamed) {
        self.visit_expr(&named.value);
        match &*named.target {
            Expr::Name(name) => {
                let index = self
                    .scopes
                    .iter()
                    .rposition(|scope| scope.kind != ScopeKind::Comprehension)
                    .unwrap_or(0);
                self.store_in(index, name.id.as_str());
            }
            other => self.visit_expr(other),
        }
    }

    fn call(&mut self, call: &'a ast::ExprCall) {
        self.visit_expr(&call.func);
        self.visit_arguments(&call.arguments);
        match &*call.func {
            Expr::Attribute(attribute)
                if is_mutating_method(attribute.attr.as_str())
                    || has_inplace_true(&call.arguments) =>
            {
                self.mutate_root(&attribute.value);
            }
            Expr::Name(name) => match name.id.as_str() {
                "setattr" | "delattr" if self.resolve(name.id.as_str()) == Binding::Global => {
                    if let Some(first) = call.arguments.args.first() {
                        self.mutate_root(first);
                    }
                }
                "vars"
                    if call.arguments.is_empty()
                        && self.at_module_level()
                        && !self.scopes[0].definite.contains("vars") =>
                {
                    self.flag(DynamicFeature::Vars, call.range, None);
                }
                _ => {}
            },
            _ => {}
        }
    }

    fn if_stmt(&mut self, stmt: &'a ast::StmtIf) {
        self.visit_expr(&stmt.test);
        let before = self.snapshot();
        let mut merge = BranchMerge::default();
        self.visit_body(&stmt.body);
        merge.add(self.snapshot());
        let mut has_else = false;
        for clause in &stmt.elif_else_clauses {
            self.restore(before.clone());
            match &clause.test {
                Some(test) => self.visit_expr(test),
                None => has_else = true,
            }
            self.visit_body(&clause.body);
            merge.add(self.snapshot());
        }
        if !has_else {
            merge.add(before);
        }
        self.restore(merge.merged);
    }

    fn loop_body(&mut self, body: &'a [Stmt], orelse: &'a [Stmt]) {
        // A loop body may run zero times and its `else` may be skipped by
        // `break`, so neither makes a binding certain.
        let before = self.snapshot();
        self.visit_body(body);
        self.restore(before.clone());
        self.visit_body(orelse);
        self.restore(before);
    }

    fn try_stmt(&mut self, stmt: &'a ast::StmtTry) {
        let before = self.snapshot();
        let mut merge = BranchMerge::default();
        self.visit_body(&stmt.body);
        self.visit_body(&stmt.orelse);
        merge.add(self.snapshot());
        for handler in &stmt.handlers {
            let ast::ExceptHandler::ExceptHandler(handler) = handler;
            // An exception may come before any binding of the body.
            self.restore(before.clone());
            if let Some(type_) = &handler.type_ {
                self.visit_expr(type_);
            }
            if let Some(name) = &handler.name {
                self.store(name.as_str());
            }
            self.visit_body(&handler.body);
            if let Some(name) = &handler.name {
                // Python unbinds the name when the handler ends.
                let scope = self.current_mut();
                if scope.has_flow() {
                    scope.definite.remove(name.as_str());
                }
            }
            merge.add(self.snapshot());
        }
        let mut merged = merge.merged;
        if !stmt.finalbody.is_empty() {
            self.restore(before.clone());
            self.visit_body(&stmt.finalbody);
            if let (Some(merged), Some(after), Some(before)) =
                (&mut merged, self.snapshot(), &before)
            {
                merged.extend(after.into_iter().filter(|name| !before.contains(name)));
            }
        }
        self.restore(merged);
    }

    fn match_stmt(&mut self, stmt: &'a ast::StmtMatch) {
        self.visit_expr(&stmt.subject);
        let before = self.snapshot();
        let mut merge = BranchMerge::default();
        let mut exhaustive = false;
        for case in &stmt.cases {
            self.restore(before.clone());
            self.visit_pattern(&case.pattern);
            if let Some(guard) = &case.guard {
                self.visit_expr(guard);
            }
            self.visit_body(&case.body);
            merge.add(self.snapshot());
            exhaustive |= case.guard.is_none() && is_irrefutable(&case.pattern);
        }
        if !exhaustive {
            merge.add(before);
        }
        self.restore(merge.merged);
    }

    fn import(&mut self, import: &'a ast::StmtImport) {
        let line = self.line(import.range.start());
        let top_level = self.at_module_level();
        for alias in &import.names {
            let bound = import_binding(alias);
            self.store(bound);
            self.imports.push(Import {
                module: alias.name.as_str().to_owned(),
                member: None,
                bound: Some(bound.to_owned()),
                line,
                top_level,
            });
        }
    }

    fn import_from(&mut self, import: &'a ast::StmtImportFrom) {
        let line = self.line(import.range.start());
        let top_level = self.at_module_level();
        let level = usize::try_from(import.level).unwrap_or(0);
        let module = format!(
            "{}{}",
            ".".repeat(level),
            import.module.as_ref().map_or("", ast::Identifier::as_str)
        );
        if module == "__future__"
            && import
                .names
                .iter()
                .any(|a| a.name.as_str() == "annotations")
        {
            self.future_annotations = true;
        }
        for alias in &import.names {
            let member = alias.name.as_str();
            let bound = if member == "*" {
                self.flag(
                    DynamicFeature::StarImport,
                    import.range,
                    Some(module.clone()),
                );
                None
            } else {
                let bound = import_binding(alias);
                self.store(bound);
                Some(bound.to_owned())
            };
            self.imports.push(Import {
                module: module.clone(),
                member: Some(member.to_owned()),
                bound,
                line,
                top_level,
            });
        }
    }

    fn type_alias(&mut self, alias: &'a ast::StmtTypeAlias) {
        // The value is evaluated lazily, in a scope that sees the type parameters.
        let mut scope = Scope::new(ScopeKind::Function, true);
        if let Some(type_params) = &alias.type_params {
            for type_param in &type_params.type_params {
                scope.locals.insert(type_param.name().as_str());
            }
        }
        self.scopes.push(scope);
        if let Some(type_params) = &alias.type_params {
            for type_param in &type_params.type_params {
                visitor::walk_type_param(self, type_param);
            }
        }
        self.visit_expr(&alias.value);
        self.scopes.pop();
        if let Expr::Name(name) = &*alias.name {
            self.store(name.id.as_str());
        }
    }

    fn escape(&mut self, range: TextRange) {
        let line = self.line(range.start());
        let command = self.source.get(range.start().into()..range.end().into());
        self.ipython_escapes.push(IpythonEscape {
            line,
            command: command.unwrap_or_default().trim_end().to_owned(),
        });
    }
}

impl<'a> Visitor<'a> for Analyzer<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(function) => self.function_def(function),
            Stmt::ClassDef(class) => self.class_def(class),
            Stmt::AugAssign(assign) => {
                self.visit_expr(&assign.value);
                match &*assign.target {
                    Expr::Name(name) => {
                        self.load(name.id.as_str(), name.range);
                        self.store(name.id.as_str());
                    }
                    other => self.visit_expr(other),
                }
            }
            Stmt::AnnAssign(assign) => {
                if let Some(value) = &assign.value {
                    self.visit_expr(value);
                }
                // Annotations of function locals are never evaluated.
                if self.annotations_evaluated() && self.current().kind != ScopeKind::Function {
                    self.visit_expr(&assign.annotation);
                }
                if assign.value.is_some() {
                    self.visit_expr(&assign.target);
                }
            }
            Stmt::For(for_stmt) => {
                self.visit_expr(&for_stmt.iter);
                let before = self.snapshot();
                self.branches += 1;
                self.visit_expr(&for_stmt.target);
                self.loop_body(&for_stmt.body, &for_stmt.orelse);
                self.branches -= 1;
                self.restore(before);
            }
            Stmt::While(while_stmt) => {
                self.visit_expr(&while_stmt.test);
                self.branches += 1;
                self.loop_body(&while_stmt.body, &while_stmt.orelse);
                self.branches -= 1;
            }
            Stmt::If(_) | Stmt::Try(_) | Stmt::Match(_) => {
                self.branches += 1;
                match stmt {
                    Stmt::If(if_stmt) => self.if_stmt(if_stmt),
                    Stmt::Try(try_stmt) => self.try_stmt(try_stmt),
                    Stmt::Match(match_stmt) => self.match_stmt(match_stmt),
                    _ => {}
                }
                self.branches -= 1;
            }
            Stmt::Import(import) => self.import(import),
            Stmt::ImportFrom(import) => self.import_from(import),
            Stmt::Global(global) => {
                let scope = self.current_mut();
                if scope.kind != ScopeKind::Module {
                    scope
                        .globals
                        .extend(global.names.iter().map(ast::Identifier::as_str));
                }
            }
            Stmt::Nonlocal(nonlocal) => {
                let scope = self.current_mut();
                scope
                    .nonlocals
                    .extend(nonlocal.names.iter().map(ast::Identifier::as_str));
            }
            Stmt::TypeAlias(alias) => self.type_alias(alias),
            Stmt::IpyEscapeCommand(command) => self.escape(command.range),
            Stmt::Assign(assign) => {
                visitor::walk_stmt(self, stmt);
                self.note_alias(assign);
            }
            _ => visitor::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(name) => match name.ctx {
                ExprContext::Load => self.load(name.id.as_str(), name.range),
                ExprContext::Store => self.store(name.id.as_str()),
                ExprContext::Del => self.delete(name.id.as_str(), name.range),
                ExprContext::Invalid => {}
            },
            Expr::Attribute(attribute) => {
                self.visit_expr(&attribute.value);
                if matches!(attribute.ctx, ExprContext::Store | ExprContext::Del) {
                    self.mutate_root(&attribute.value);
                }
            }
            Expr::Subscript(subscript) => {
                self.visit_expr(&subscript.value);
                self.visit_expr(&subscript.slice);
                if matches!(subscript.ctx, ExprContext::Store | ExprContext::Del) {
                    self.mutate_root(&subscript.value);
                }
            }
            Expr::Named(named) => self.walrus(named),
            Expr::Lambda(lambda) => self.lambda(lambda),
            Expr::Call(call) => self.call(call),
            Expr::ListComp(comp) => self.comprehension(&comp.generators, &[&comp.elt]),
            Expr::SetComp(comp) => self.comprehension(&comp.generators, &[&comp.elt]),
            Expr::Generator(comp) => self.comprehension(&comp.generators, &[&comp.elt]),
            Expr::DictComp(comp) => {
                self.comprehension(&comp.generators, &[&comp.key, &comp.value]);
            }
            Expr::IpyEscapeCommand(command) => self.escape(command.range),
            _ => visitor::walk_expr(self, expr),
        }
    }

    fn visit_pattern(&mut self, pattern: &'a Pattern) {
        match pattern {
            Pattern::MatchAs(as_pattern) => {
                if let Some(inner) = &as_pattern.pattern {
                    self.visit_pattern(inner);
                }
                if let Some(name) = &as_pattern.name {
                    self.store(name.as_str());
                }
            }
            Pattern::MatchStar(star) => {
                if let Some(name) = &star.name {
                    self.store(name.as_str());
                }
            }
            Pattern::MatchMapping(mapping) => {
                visitor::walk_pattern(self, pattern);
                if let Some(rest) = &mapping.rest {
                    self.store(rest.as_str());
                }
            }
            _ => visitor::walk_pattern(self, pattern),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn builtin_and_method_tables_are_sorted() {
        assert!(BUILTINS.windows(2).all(|w| w[0] < w[1]));
        assert!(MUTATING_METHODS.windows(2).all(|w| w[0] < w[1]));
    }
}
