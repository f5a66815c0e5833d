//! Dependency analysis of LLM-written Python and the execution-state graph.
//!
//! A session runs Python as a sequence of *steps* (notebook cells, or code
//! an agent sends to a kernel). [`analyze_step`] tells what one step does to
//! the shared namespace; [`ExecutionStateGraph`] links steps by the names
//! they exchange, tracks which steps are stale, computes minimal replay
//! orders, and keeps every version of a step's code with its [`Provenance`].
//!
//! Parsing uses Ruff's parser (`rustpython-ruff_python_parser`) rather than
//! `rustpython-parser` 0.4, which is unmaintained and rejects the Python 3.12
//! f-strings (PEP 701) that models now write.
//!
//! ```
//! use harness::code::{ExecutionStateGraph, Provenance};
//!
//! let mut graph = ExecutionStateGraph::new();
//! let a = graph.add_step("xs = [1, 2]", Provenance::now("user", "data")).unwrap();
//! let b = graph.add_step("xs.append(3)", Provenance::now("user", "extend")).unwrap();
//! let c = graph.add_step("total = sum(xs)", Provenance::now("user", "sum")).unwrap();
//! // `c` reads `xs`, last touched by the mutation in `b`, which read it from `a`.
//! assert_eq!(graph.dependencies(c).unwrap()[0].0, b);
//! assert_eq!(graph.ancestors(c, None).unwrap(), [a, b]);
//! ```
//!
//! # What a step reads and writes
//!
//! [`StepAnalysis`] follows Python's scoping rules:
//!
//! - **Reads** are names loaded from the module namespace before the step
//!   certainly binds them itself. A name bound in only one branch of an
//!   `if`, in a loop body or in one `try` path is not certainly bound, so a
//!   later load of it is still a read. Builtins go to
//!   [`StepAnalysis::builtins`], not to reads.
//! - **Function bodies and lambdas** run later, when called: their free
//!   names are reads of the step that defines them unless the step binds
//!   them by its end. Names bound anywhere in a function are local to it
//!   (parameters, assignments, `for`/`with`/`except` targets, imports,
//!   nested `def`/`class`, walrus targets in its comprehensions), unless
//!   declared `global` or `nonlocal`. Enclosing function scopes are seen by
//!   nested functions; class scopes are not.
//! - **Decorators, default arguments, base classes and annotations** are
//!   evaluated at definition time, in the enclosing scope (annotations are
//!   skipped under `from __future__ import annotations`, and annotations of
//!   function locals are never evaluated).
//! - **Class bodies** run at definition time in their own scope; a name the
//!   body has bound shadows the global.
//! - **Comprehensions and generator expressions** have their own scope for
//!   their targets; the first iterable is evaluated in the enclosing scope.
//!   A walrus (`:=`) binds in the nearest enclosing non-comprehension scope.
//! - **Other binders**: `import a.b` binds `a`; `match` captures, `except
//!   ... as e` (then unbound again, so a conditional write), `with ... as x`,
//!   `for` targets, `type X = ...`. `del x` reads `x` and records a delete.
//! - `global x` in a function makes its assignments to `x` conditional
//!   writes of the step (and [`Definition::call_writes`] of the function).
//!
//! # Mutation heuristics
//!
//! A step *mutates* a name when it changes the object in place:
//!
//! - assignment to or `del` of a subscript or attribute (`df["a"] = 1`,
//!   `obj.x = 2`, `del xs[0]`), including augmented assignment
//!   (`df["a"] += 1`): the root name of the chain is mutated;
//! - a call of a method whose name is in a list of in-place methods
//!   (`append`, `extend`, `insert`, `pop`, `remove`, `clear`, `update`,
//!   `setdefault`, `sort`, `reverse`, `add`, `discard`, `popitem`, the set
//!   `*_update` methods, deque methods, and the model-changing `fit`,
//!   `partial_fit`, `fit_transform`, `set_params`, `load_state_dict`), a
//!   public method ending in `_` (PyTorch in-place style, `x.add_(1)`), or
//!   any method called with `inplace=True` (pandas);
//! - `setattr(obj, ...)` and `delattr(obj, ...)`.
//!
//! `x += 1` on a plain name reads and writes `x`. Mutating a name the step
//! itself certainly bound is not reported (the step writes it anyway), and
//! the graph ignores mutations of names bound by an import (module
//! attributes such as `np.random.seed(0)` or `pd.options...`). Mutations
//! inside function bodies are recorded as [`Definition::call_mutations`]:
//! a later step that reads the function's name inherits them.
//!
//! Aliases made at module level within the step are followed: after
//! `ys = xs` (or `a = b = xs`, or `zs = ys` after it), changing `ys` in
//! place in the same step is a mutation of `xs`. A rebinding of `ys` outside
//! any branch, loop or `try` ends the alias; one inside keeps it, since it
//! may not happen. Aliases made in an earlier step are not known here.
//!
//! # Features that defeat analysis
//!
//! `exec`, `eval`, `globals`, module-level `locals()` and `vars()`, and
//! `from m import *` are reported in [`StepAnalysis::dynamic`]. In the
//! graph such a step depends on every earlier step, and later steps treat
//! it as a possible producer of every name they read.
//!
//! # Edges
//!
//! For each name a step reads (or mutates, or uses as a builtin), the graph
//! walks back through earlier steps: a step that certainly binds, deletes or
//! mutates the name is the producer and ends the walk; steps that only may
//! bind it are producers too but the walk goes on past them. Redefining a
//! name in a later step is normal: readers after it depend on the new
//! definition only.
//!
//! # Running steps
//!
//! [`kernel::Kernel`] is a persistent `python3` subprocess (standard library
//! only) spoken to over JSON lines on private pipes, with per-step timeouts,
//! a memory limit, a scrubbed environment and an optional sandbox prefix.
//! [`session::CodeSession`] ties the graph, a kernel and a content-addressed
//! [`blobs::BlobStore`] together: the values each step writes are pickled by
//! hash, a step gets back only the inputs it needs (recomputing unpicklable
//! ones by re-running their producers), and sessions are saved to a
//! directory or a [`SessionStore`](crate::session::SessionStore) and
//! reopened in another process. [`replay`] re-executes exactly the stale
//! subgraph after an edit, reusing cached runs whose code and input hashes
//! are unchanged. `harness run FILE` does this for a script or notebook.
//!
//! # Agents
//!
//! [`diagnose`] explains a failed step and [`patch`] proposes and applies a
//! fix; [`agent`] wires them with a model and a session into a loop (ready
//! steps, and the [`CodeAgent`](agent::CodeAgent) recipe) that proposes,
//! runs, diagnoses, patches and replays steps until a check passes.

pub mod agent;
mod analyze;
pub mod blobs;
mod cells;
pub mod diagnose;
mod error;
mod graph;
pub mod kernel;
pub mod patch;
pub mod replay;
pub mod session;

pub use analyze::{
    AnalysisOptions, Definition, DefinitionKind, DynamicFeature, DynamicUse, Import, IpythonEscape,
    StepAnalysis, analyze_step, analyze_step_with, check_syntax, is_builtin, is_mutating_method,
};
pub use cells::{CodeCell, notebook_code_cells, split_percent_script};
pub use error::{AnalysisError, GraphError, NestingKind, NotebookError};
pub use graph::{
    Dependency, DependencyEdge, Effects, ExecutionStateGraph, MAX_RUN_HISTORY, OutputSummary,
    Provenance, RunOutcome, RunRecord, RunTiming, StepId, StepNode, StepStatus, StepSubgraph,
    StepVersion, Timestamp,
};
