//! The execution-state graph: cells of a notebook, the dependencies between
//! them, their run status and the history of their code.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use petgraph::Direction;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences};
use serde::{Deserialize, Serialize};

use crate::analyze::{AnalysisOptions, CellAnalysis, analyze_cell_with};
use crate::error::GraphError;
use crate::trace::CellTrace;

/// How many run timings a cell keeps; older ones are dropped.
pub const MAX_RUN_HISTORY: usize = 32;

/// Identifies a cell of an [`ExecutionStateGraph`]. Ids are given in the
/// order cells are added, starting at 0, so they are also the cell order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CellId(u32);

impl CellId {
    /// The id of the cell added at position `index` (0-based).
    pub const fn new(index: u32) -> Self {
        Self(index)
    }

    /// The 0-based position of the cell.
    pub const fn get(self) -> u32 {
        self.0
    }

    fn index(self) -> usize {
        self.0 as usize
    }

    fn node(self) -> NodeIndex {
        NodeIndex::new(self.index())
    }

    fn from_node(node: NodeIndex) -> Self {
        Self(u32::try_from(node.index()).unwrap_or(u32::MAX))
    }
}

impl fmt::Display for CellId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A point in time, in milliseconds since the Unix epoch.
///
/// ```
/// use harness_code::Timestamp;
///
/// assert!(Timestamp::from_millis(5) < Timestamp::from_millis(6));
/// assert!(Timestamp::now() > Timestamp::from_millis(0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The given number of milliseconds after the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis)
    }

    /// The current wall-clock time (the epoch if the clock is before it).
    pub fn now() -> Self {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }
}

/// Who or what produced a version of a cell's code, why, and when.
///
/// ```
/// use harness_code::{Provenance, Timestamp};
///
/// let p = Provenance::new("model:planner", "fix the off-by-one", Timestamp::from_millis(1_000));
/// assert_eq!(p.author, "model:planner");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The producer, e.g. `user`, `model:gpt-x`, `tool:autofix`.
    pub author: String,
    /// Why the code was written or changed.
    pub reason: String,
    /// When the version was produced.
    pub at: Timestamp,
}

impl Provenance {
    /// A provenance record at an explicit time.
    pub fn new(author: impl Into<String>, reason: impl Into<String>, at: Timestamp) -> Self {
        Self {
            author: author.into(),
            reason: reason.into(),
            at,
        }
    }

    /// A provenance record stamped with [`Timestamp::now`].
    pub fn now(author: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::new(author, reason, Timestamp::now())
    }
}

/// One version of a cell's code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellVersion {
    /// 1-based version number; the cell's first code is version 1.
    pub number: u32,
    /// The Python source.
    pub source: String,
    /// The analysis of `source`.
    pub analysis: CellAnalysis,
    /// Who produced this version, why and when.
    pub provenance: Provenance,
}

/// Run status of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    /// Never run.
    Pending,
    /// Last run succeeded and nothing it depends on changed since.
    Ok,
    /// Last run raised an error.
    Failed,
    /// Its code or something upstream changed since its last run.
    Stale,
}

impl CellStatus {
    /// Whether the cell must run (again) for the notebook to be up to date.
    pub const fn needs_run(self) -> bool {
        !matches!(self, Self::Ok)
    }
}

/// Outcome of one run of a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CellOutcome {
    /// The cell ran to completion.
    Ok,
    /// The cell raised an error.
    Failed {
        /// The error as reported by the executor.
        error: String,
    },
}

/// A short, serialisable description of what a run produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSummary {
    /// Printed output or the displayed result, possibly truncated.
    pub text: String,
    /// Per name bound or changed by the cell, a short description such as
    /// `DataFrame(100x3)`.
    pub values: BTreeMap<String, String>,
}

/// What an executor reports after running a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellRun {
    /// Success or failure.
    pub outcome: CellOutcome,
    /// When the run started.
    pub started_at: Timestamp,
    /// How long the run took.
    pub duration_ms: u64,
    /// What the run produced.
    pub outputs: OutputSummary,
}

impl CellRun {
    /// A successful run with no output summary.
    pub fn ok(started_at: Timestamp, duration_ms: u64) -> Self {
        Self {
            outcome: CellOutcome::Ok,
            started_at,
            duration_ms,
            outputs: OutputSummary::default(),
        }
    }
}

/// Timing of one past run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellTiming {
    /// The code version that ran.
    pub version: u32,
    /// When the run started.
    pub started_at: Timestamp,
    /// How long it took.
    pub duration_ms: u64,
    /// Whether it succeeded.
    pub succeeded: bool,
}

/// The namespace effects of a cell as the graph sees them: the cell's own
/// analysis plus effects of functions from earlier cells that it calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    /// Names the cell certainly rebinds, deletes or mutates; a later reader
    /// needs this cell and nothing before it for these names.
    pub produces: BTreeSet<String>,
    /// Names the cell may rebind; a later reader needs this cell *and* the
    /// producer before it.
    pub may_produce: BTreeSet<String>,
    /// Names changed by calling functions defined in earlier cells (already
    /// included in `produces`/`may_produce`).
    pub via_calls: BTreeSet<String>,
    /// The cell defeats static analysis and may change any name.
    pub opaque: bool,
    /// Names (and `file:` paths, `@` states) the cell's last recorded run
    /// wrote, deleted or changed that its static analysis does not say it
    /// certainly produces (already included in `may_produce`).
    #[serde(default)]
    pub traced: BTreeSet<String>,
}

/// Why one cell depends on another.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    /// Names the consumer needs from the producer.
    pub names: BTreeSet<String>,
    /// Added with [`ExecutionStateGraph::add_edge`].
    pub explicit: bool,
    /// Added because one of the two cells defeats static analysis.
    pub conservative: bool,
    /// Names on this edge that only the consumer's or the producer's last
    /// recorded run ([`CellTrace`]) links, not the static analysis.
    #[serde(default)]
    pub traced: BTreeSet<String>,
}

/// An edge of the graph, from producer to consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyEdge {
    /// The producing (earlier) cell.
    pub from: CellId,
    /// The consuming (later) cell.
    pub to: CellId,
    /// Why.
    pub dependency: Dependency,
}

/// A set of cells and the edges among them, cells in execution order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellSubgraph {
    /// The cells, in a topological (execution) order.
    pub cells: Vec<CellId>,
    /// Edges whose both ends are in `cells`.
    pub edges: Vec<DependencyEdge>,
}

/// A cell of the graph: its code (current and past versions) and run state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellNode {
    id: CellId,
    current: CellVersion,
    previous: Vec<CellVersion>,
    status: CellStatus,
    effects: Effects,
    outputs: Option<OutputSummary>,
    error: Option<String>,
    run_count: u32,
    runs: Vec<CellTiming>,
    #[serde(default)]
    trace: Option<CellTrace>,
}

impl CellNode {
    /// The cell's id.
    pub fn id(&self) -> CellId {
        self.id
    }

    /// The current source.
    pub fn source(&self) -> &str {
        &self.current.source
    }

    /// The analysis of the current source.
    pub fn analysis(&self) -> &CellAnalysis {
        &self.current.analysis
    }

    /// The current version.
    pub fn current_version(&self) -> &CellVersion {
        &self.current
    }

    /// All versions, oldest first; the last one is current.
    pub fn versions(&self) -> impl Iterator<Item = &CellVersion> {
        self.previous.iter().chain(std::iter::once(&self.current))
    }

    /// The run status.
    pub fn status(&self) -> CellStatus {
        self.status
    }

    /// The effects the graph uses to infer edges to later cells.
    pub fn effects(&self) -> &Effects {
        &self.effects
    }

    /// The output summary of the last run, if it has run.
    pub fn outputs(&self) -> Option<&OutputSummary> {
        self.outputs.as_ref()
    }

    /// The error of the last run, if it failed.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// How many times the cell has run (any version).
    pub fn run_count(&self) -> u32 {
        self.run_count
    }

    /// Timings of the most recent runs (at most [`MAX_RUN_HISTORY`]), oldest first.
    pub fn timings(&self) -> &[CellTiming] {
        &self.runs
    }

    /// What the cell did in its last traced run (it is kept across an edit
    /// of its code until the cell runs again).
    pub fn trace(&self) -> Option<&CellTrace> {
        self.trace.as_ref()
    }
}

/// The cells of a notebook and the dependencies between them.
///
/// Cells are appended in execution order; each read of a name depends on the
/// last earlier cell that wrote or mutated it (see the [module
/// docs](crate) for the precise rules). The graph is serde
/// round-trippable so it can be stored with a notebook.
///
/// ```
/// use harness_code::{ExecutionStateGraph, Provenance, CellRun, CellStatus, Timestamp};
///
/// let mut graph = ExecutionStateGraph::new();
/// let at = Timestamp::from_millis(0);
/// let load = graph.add_cell("import pandas as pd\ndf = pd.read_csv('x.csv')", Provenance::new("user", "load", at)).unwrap();
/// let clean = graph.add_cell("df = df.dropna()", Provenance::new("user", "clean", at)).unwrap();
/// let plot = graph.add_cell("df.plot()", Provenance::new("user", "plot", at)).unwrap();
/// assert_eq!(graph.ancestors(plot, None).unwrap(), [load, clean]);
///
/// for cell in graph.stale_order() {
///     graph.record_run(cell, CellRun::ok(at, 1)).unwrap();
/// }
/// graph.mark_stale(clean).unwrap();
/// assert_eq!(graph.stale_order(), [clean, plot]);
/// assert_eq!(graph.cell(load).unwrap().status(), CellStatus::Ok);
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(try_from = "StoredGraph")]
pub struct ExecutionStateGraph {
    graph: StableDiGraph<CellNode, Dependency>,
    options: AnalysisOptions,
}

/// An [`ExecutionStateGraph`] as it is serialized (petgraph's layout of a
/// `StableGraph`), read into plain parts so that its shape is checked
/// before any method relies on it: a saved notebook is a file that cells
/// can write. Every method indexes cells by id, so the checks are those of
/// a graph this module built: cell `i` at position `i` with id `i`, no
/// hole where a cell was removed (none ever is), every edge between two
/// cells, forward, at most one per pair.
#[derive(Deserialize)]
struct StoredGraph {
    graph: StoredCells,
    options: AnalysisOptions,
}

#[derive(Deserialize)]
struct StoredCells {
    nodes: Vec<CellNode>,
    #[serde(default)]
    node_holes: Vec<u32>,
    edge_property: String,
    /// `None`: a free slot left by a removed edge (inference replaces edges).
    edges: Vec<Option<(u32, u32, Dependency)>>,
}

impl TryFrom<StoredGraph> for ExecutionStateGraph {
    type Error = String;

    fn try_from(stored: StoredGraph) -> Result<Self, String> {
        let StoredCells {
            nodes,
            node_holes,
            edge_property,
            edges,
        } = stored.graph;
        if edge_property != "directed" {
            return Err(format!(
                "the cell graph is {edge_property:?}, not \"directed\""
            ));
        }
        if let Some(hole) = node_holes.first() {
            return Err(format!(
                "the cell graph has a hole at position {hole}; cells are never removed"
            ));
        }
        let count = nodes.len();
        let mut graph = StableDiGraph::with_capacity(count, edges.len());
        for (position, node) in nodes.into_iter().enumerate() {
            if node.id.index() != position {
                return Err(format!(
                    "the cell at position {position} has id {}",
                    node.id
                ));
            }
            graph.add_node(node);
        }
        // Edges go back to the slots they had (free ones too, filled and
        // emptied again in order), so that the graph serializes as it was
        // read and later edges take the same slots.
        let mut free = Vec::new();
        let mut pairs = BTreeSet::new();
        for slot in edges {
            let Some((from, to, dependency)) = slot else {
                if count == 0 {
                    return Err("the cell graph has edges and no cells".to_owned());
                }
                let first = NodeIndex::new(0);
                free.push(graph.add_edge(first, first, Dependency::default()));
                continue;
            };
            let within = |cell: u32| usize::try_from(cell).is_ok_and(|c| c < count);
            if !within(from) || !within(to) {
                return Err(format!(
                    "an edge from cell {from} to cell {to}, in a graph of {count} cells"
                ));
            }
            if from >= to {
                return Err(format!(
                    "an edge from cell {from} to cell {to} does not point forward"
                ));
            }
            if !pairs.insert((from, to)) {
                return Err(format!("two edges from cell {from} to cell {to}"));
            }
            graph.add_edge(CellId(from).node(), CellId(to).node(), dependency);
        }
        for edge in free {
            graph.remove_edge(edge);
        }
        Ok(Self {
            graph,
            options: stored.options,
        })
    }
}

impl ExecutionStateGraph {
    /// An empty graph that analyses cells as plain Python.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty graph that analyses cells with the given options (e.g.
    /// IPython syntax for notebook cells).
    pub fn with_options(options: AnalysisOptions) -> Self {
        Self {
            graph: StableDiGraph::default(),
            options,
        }
    }

    /// The options cells are analysed with.
    pub fn options(&self) -> AnalysisOptions {
        self.options
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    /// Whether the graph has no cell.
    pub fn is_empty(&self) -> bool {
        self.graph.node_count() == 0
    }

    /// All cells, in execution order.
    pub fn cells(&self) -> impl Iterator<Item = &CellNode> {
        self.graph.node_weights()
    }

    /// A cell's details: source, analysis, status, outputs, run count, timings, versions.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn cell(&self, cell: CellId) -> Result<&CellNode, GraphError> {
        self.graph
            .node_weight(cell.node())
            .ok_or(GraphError::UnknownCell(cell))
    }

    fn cell_mut(&mut self, cell: CellId) -> Result<&mut CellNode, GraphError> {
        self.graph
            .node_weight_mut(cell.node())
            .ok_or(GraphError::UnknownCell(cell))
    }

    fn check(&self, cell: CellId) -> Result<(), GraphError> {
        self.cell(cell).map(|_| ())
    }

    /// Appends a cell: analyses `source`, infers its dependencies on earlier
    /// cells, and returns its id. The cell starts as [`CellStatus::Pending`].
    ///
    /// # Errors
    ///
    /// [`GraphError::Analysis`] if the source is not valid Python; the graph
    /// is unchanged.
    pub fn add_cell(
        &mut self,
        source: impl Into<String>,
        provenance: Provenance,
    ) -> Result<CellId, GraphError> {
        let source = source.into();
        let analysis = analyze_cell_with(&source, self.options)
            .map_err(|source| GraphError::Analysis { cell: None, source })?;
        let id = CellId::from_node(NodeIndex::new(self.graph.node_count()));
        let node = CellNode {
            id,
            current: CellVersion {
                number: 1,
                source,
                analysis,
                provenance,
            },
            previous: Vec::new(),
            status: CellStatus::Pending,
            effects: Effects::default(),
            outputs: None,
            error: None,
            run_count: 0,
            runs: Vec::new(),
            trace: None,
        };
        let index = self.graph.add_node(node);
        debug_assert_eq!(index, id.node());
        self.reinfer(id);
        Ok(id)
    }

    /// Adds an explicit dependency of `to` on `from`, e.g. for a dependency
    /// through a file that analysis cannot see. If `from` needs to run, `to`
    /// and its downstream become stale.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`], [`GraphError::SelfEdge`], or
    /// [`GraphError::BackwardEdge`] when `from` comes after `to`.
    pub fn add_edge(&mut self, from: CellId, to: CellId) -> Result<(), GraphError> {
        self.check(from)?;
        self.check(to)?;
        if from == to {
            return Err(GraphError::SelfEdge(from));
        }
        if from > to {
            return Err(GraphError::BackwardEdge { from, to });
        }
        match self.graph.find_edge(from.node(), to.node()) {
            Some(edge) => {
                if let Some(dependency) = self.graph.edge_weight_mut(edge) {
                    dependency.explicit = true;
                }
            }
            None => {
                self.graph.add_edge(
                    from.node(),
                    to.node(),
                    Dependency {
                        explicit: true,
                        ..Dependency::default()
                    },
                );
            }
        }
        if self.cell(from)?.status.needs_run() {
            self.mark_stale(to)?;
        }
        Ok(())
    }

    /// Direct dependencies of a cell: (producer, why), in cell order.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn dependencies(&self, cell: CellId) -> Result<Vec<(CellId, &Dependency)>, GraphError> {
        self.check(cell)?;
        let mut out: Vec<_> = self
            .graph
            .edges_directed(cell.node(), Direction::Incoming)
            .map(|edge| (CellId::from_node(edge.source()), edge.weight()))
            .collect();
        out.sort_by_key(|(id, _)| *id);
        Ok(out)
    }

    /// Direct dependents of a cell: (consumer, why), in cell order.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn dependents(&self, cell: CellId) -> Result<Vec<(CellId, &Dependency)>, GraphError> {
        self.check(cell)?;
        let mut out: Vec<_> = self
            .graph
            .edges_directed(cell.node(), Direction::Outgoing)
            .map(|edge| (CellId::from_node(edge.target()), edge.weight()))
            .collect();
        out.sort_by_key(|(id, _)| *id);
        Ok(out)
    }

    /// All cells `cell` depends on, directly or not, in cell order.
    ///
    /// With `names`, only the producers of those names are followed from
    /// `cell` (and then everything those producers depend on).
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn ancestors(
        &self,
        cell: CellId,
        names: Option<&[&str]>,
    ) -> Result<Vec<CellId>, GraphError> {
        self.check(cell)?;
        let start: Vec<NodeIndex> = self
            .graph
            .edges_directed(cell.node(), Direction::Incoming)
            .filter(|edge| {
                names.is_none_or(|names| names.iter().any(|n| edge.weight().names.contains(*n)))
            })
            .map(|edge| edge.source())
            .collect();
        let found = self.reachable(start, Direction::Incoming);
        Ok(found.into_iter().map(CellId::from_node).collect())
    }

    fn reachable(&self, start: Vec<NodeIndex>, direction: Direction) -> BTreeSet<NodeIndex> {
        let mut seen: BTreeSet<NodeIndex> = start.iter().copied().collect();
        let mut queue: VecDeque<NodeIndex> = start.into();
        while let Some(node) = queue.pop_front() {
            for next in self.graph.neighbors_directed(node, direction) {
                if seen.insert(next) {
                    queue.push_back(next);
                }
            }
        }
        seen
    }

    fn downstream_set(&self, cell: CellId) -> BTreeSet<CellId> {
        self.reachable(vec![cell.node()], Direction::Outgoing)
            .into_iter()
            .map(CellId::from_node)
            .collect()
    }

    /// `cell` and every cell that depends on it, directly or not, with the
    /// edges among them.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn downstream(&self, cell: CellId) -> Result<CellSubgraph, GraphError> {
        self.check(cell)?;
        Ok(self.subgraph(&self.downstream_set(cell)))
    }

    fn subgraph(&self, cells: &BTreeSet<CellId>) -> CellSubgraph {
        let mut edges = Vec::new();
        for &from in cells {
            for edge in self.graph.edges_directed(from.node(), Direction::Outgoing) {
                let to = CellId::from_node(edge.target());
                if cells.contains(&to) {
                    edges.push(DependencyEdge {
                        from,
                        to,
                        dependency: edge.weight().clone(),
                    });
                }
            }
        }
        edges.sort_by_key(|edge| (edge.from, edge.to));
        CellSubgraph {
            cells: cells.iter().copied().collect(),
            edges,
        }
    }

    /// Marks `cell` and everything downstream of it as stale (cells that
    /// never ran stay [`CellStatus::Pending`]). Returns the affected cells.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn mark_stale(&mut self, cell: CellId) -> Result<Vec<CellId>, GraphError> {
        self.check(cell)?;
        let affected = self.downstream_set(cell);
        for &id in &affected {
            self.set_stale(id);
        }
        Ok(affected.into_iter().collect())
    }

    fn set_stale(&mut self, cell: CellId) {
        if let Some(node) = self.graph.node_weight_mut(cell.node())
            && node.status != CellStatus::Pending
        {
            node.status = CellStatus::Stale;
        }
    }

    /// All cells that need to run, in an order that respects every
    /// dependency: cells that are pending, failed or stale, and every cell
    /// downstream of one of those (a cell that ran while something upstream
    /// was out of date must run again). Running them in this order and
    /// recording each run brings the whole graph up to date.
    pub fn stale_order(&self) -> Vec<CellId> {
        let mut dirty = vec![false; self.graph.node_count()];
        let mut order = Vec::new();
        // Edges always point forward, so id order visits producers first.
        for node in self.cells() {
            let index = node.id.index();
            let upstream_dirty = self
                .graph
                .neighbors_directed(node.id.node(), Direction::Incoming)
                .any(|producer| dirty.get(producer.index()).copied().unwrap_or(false));
            if node.status.needs_run() || upstream_dirty {
                dirty[index] = true;
                order.push(node.id);
            }
        }
        order
    }

    /// The minimal replay from `cell`: `cell`, everything downstream of it,
    /// and the upstream cells they need that are not up to date (with the
    /// cells between those and the replay set), in execution order.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn replay_order(&self, cell: CellId) -> Result<Vec<CellId>, GraphError> {
        self.check(cell)?;
        let mut replay = self.downstream_set(cell);
        let upstream = self.reachable(
            replay.iter().map(|id| id.node()).collect(),
            Direction::Incoming,
        );
        let not_ok: Vec<NodeIndex> = upstream
            .iter()
            .copied()
            .filter(|node| {
                !replay.contains(&CellId::from_node(*node)) && self.graph[*node].status.needs_run()
            })
            .collect();
        // Cells between an out-of-date ancestor and the replay set see new
        // inputs once that ancestor reruns, so they rerun too.
        for node in self.reachable(not_ok, Direction::Outgoing) {
            if upstream.contains(&node) {
                replay.insert(CellId::from_node(node));
            }
        }
        Ok(replay.into_iter().collect())
    }

    /// Records a run of `cell` reported by an executor: sets its status,
    /// outputs, run count and timings. Cells downstream that were up to date
    /// become stale, since their inputs may have changed; they are returned.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn record_run(&mut self, cell: CellId, run: CellRun) -> Result<Vec<CellId>, GraphError> {
        let node = self.cell_mut(cell)?;
        let succeeded = run.outcome == CellOutcome::Ok;
        node.status = if succeeded {
            CellStatus::Ok
        } else {
            CellStatus::Failed
        };
        node.error = match run.outcome {
            CellOutcome::Ok => None,
            CellOutcome::Failed { error } => Some(error),
        };
        node.outputs = Some(run.outputs);
        node.run_count = node.run_count.saturating_add(1);
        node.runs.push(CellTiming {
            version: node.current.number,
            started_at: run.started_at,
            duration_ms: run.duration_ms,
            succeeded,
        });
        if node.runs.len() > MAX_RUN_HISTORY {
            let excess = node.runs.len() - MAX_RUN_HISTORY;
            node.runs.drain(..excess);
        }
        Ok(self.stale_up_to_date_downstream(cell))
    }

    /// Records what the last run of `cell` did ([`CellTrace`], from the
    /// kernel), replacing the previous record. From then on the graph links
    /// cells by the static analysis *and* by these records: a later cell
    /// depends on `cell` if what `cell` wrote, deleted or changed (by its
    /// analysis or in this run, files included) meets what the later cell
    /// reads or changes in place (by its analysis or in its own last run:
    /// a change in place depends on the value before it). Names only a trace
    /// gives are possible writes, never certain ones, so a trace only ever
    /// adds edges. Dependencies of `cell` and of the cells after it are
    /// inferred again; up-to-date cells that are now downstream of `cell`
    /// and were not before become stale and are returned.
    ///
    /// ```
    /// use harness_code::{CellTrace, ExecutionStateGraph, Provenance};
    ///
    /// let mut graph = ExecutionStateGraph::new();
    /// let a = graph.add_cell("xs = [1]\nys = xs", Provenance::now("user", "alias")).unwrap();
    /// let b = graph.add_cell("ys.append(2)", Provenance::now("user", "grow")).unwrap();
    /// let c = graph.add_cell("n = len(xs)", Provenance::now("user", "count")).unwrap();
    /// // Statically `c` needs only `a`: the change through `ys` is not seen.
    /// assert_eq!(graph.ancestors(c, None).unwrap(), [a]);
    /// let mut trace = CellTrace::default();
    /// trace.reads.insert("ys".into());
    /// trace.mutated.extend(["xs".to_owned(), "ys".to_owned()]);
    /// graph.record_trace(b, trace).unwrap();
    /// assert_eq!(graph.ancestors(c, None).unwrap(), [a, b]);
    /// ```
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn record_trace(
        &mut self,
        cell: CellId,
        trace: CellTrace,
    ) -> Result<Vec<CellId>, GraphError> {
        let before = self.downstream_set(cell);
        let node = self.cell_mut(cell)?;
        if node.trace.as_ref() == Some(&trace) {
            return Ok(Vec::new());
        }
        node.trace = Some(trace);
        for index in cell.index()..self.graph.node_count() {
            self.reinfer(CellId::from_node(NodeIndex::new(index)));
        }
        let mut staled = Vec::new();
        for id in self.downstream_set(cell) {
            if !before.contains(&id) && self.graph[id.node()].status == CellStatus::Ok {
                self.set_stale(id);
                staled.push(id);
            }
        }
        Ok(staled)
    }

    /// Marks the up-to-date cells downstream of `cell` stale (its outputs
    /// may have changed) and returns them.
    fn stale_up_to_date_downstream(&mut self, cell: CellId) -> Vec<CellId> {
        let mut staled = Vec::new();
        for id in self.downstream_set(cell) {
            if id != cell && self.graph[id.node()].status == CellStatus::Ok {
                self.set_stale(id);
                staled.push(id);
            }
        }
        staled
    }

    /// Records that `cell` is up to date without running it: an executor
    /// reused the outputs of an earlier run with the same code and inputs
    /// (a cache hit). Like [`record_run`](Self::record_run) with a success,
    /// except that the run count and timings do not change. Cells
    /// downstream that were up to date become stale; they are returned.
    ///
    /// ```
    /// use harness_code::{ExecutionStateGraph, OutputSummary, Provenance, CellStatus};
    ///
    /// let mut graph = ExecutionStateGraph::new();
    /// let a = graph.add_cell("x = 1", Provenance::now("user", "x")).unwrap();
    /// graph.record_reuse(a, OutputSummary::default()).unwrap();
    /// assert_eq!(graph.cell(a).unwrap().status(), CellStatus::Ok);
    /// assert_eq!(graph.cell(a).unwrap().run_count(), 0);
    /// ```
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn record_reuse(
        &mut self,
        cell: CellId,
        outputs: OutputSummary,
    ) -> Result<Vec<CellId>, GraphError> {
        let node = self.cell_mut(cell)?;
        node.status = CellStatus::Ok;
        node.error = None;
        node.outputs = Some(outputs);
        Ok(self.stale_up_to_date_downstream(cell))
    }

    /// Replaces the code of `cell`, keeping the old version with its
    /// provenance. Dependencies of this and later cells are inferred again;
    /// the cell, what depended on it before and what depends on it now
    /// become stale. Returns those cells.
    ///
    /// ```
    /// use harness_code::{ExecutionStateGraph, Provenance, Timestamp};
    ///
    /// let mut graph = ExecutionStateGraph::new();
    /// let t = Timestamp::from_millis;
    /// let a = graph.add_cell("x = 1", Provenance::new("user", "start", t(10))).unwrap();
    /// graph.replace_code(a, "x = 2", Provenance::new("model:m", "tweak", t(20))).unwrap();
    /// assert_eq!(graph.version_at(a, t(15)).unwrap().unwrap().source, "x = 1");
    /// graph.rollback(a, 1, Provenance::new("user", "undo", t(30))).unwrap();
    /// assert_eq!(graph.cell(a).unwrap().source(), "x = 1");
    /// assert_eq!(graph.cell(a).unwrap().versions().count(), 3);
    /// ```
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`], or [`GraphError::Analysis`] if the new
    /// source is not valid Python (the graph is then unchanged).
    pub fn replace_code(
        &mut self,
        cell: CellId,
        source: impl Into<String>,
        provenance: Provenance,
    ) -> Result<Vec<CellId>, GraphError> {
        self.check(cell)?;
        let source = source.into();
        let analysis =
            analyze_cell_with(&source, self.options).map_err(|source| GraphError::Analysis {
                cell: Some(cell),
                source,
            })?;
        let mut affected = self.downstream_set(cell);
        let node = self.cell_mut(cell)?;
        let number = node.current.number.saturating_add(1);
        let old = std::mem::replace(
            &mut node.current,
            CellVersion {
                number,
                source,
                analysis,
                provenance,
            },
        );
        node.previous.push(old);
        for index in cell.index()..self.graph.node_count() {
            self.reinfer(CellId::from_node(NodeIndex::new(index)));
        }
        affected.extend(self.downstream_set(cell));
        for &id in &affected {
            self.set_stale(id);
        }
        Ok(affected.into_iter().collect())
    }

    /// Restores the code of version `version` of `cell` as a new version
    /// (history is never rewritten). Returns the cells that became stale.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] or [`GraphError::UnknownVersion`].
    pub fn rollback(
        &mut self,
        cell: CellId,
        version: u32,
        provenance: Provenance,
    ) -> Result<Vec<CellId>, GraphError> {
        let node = self.cell(cell)?;
        let source = node
            .versions()
            .find(|v| v.number == version)
            .map(|v| v.source.clone())
            .ok_or(GraphError::UnknownVersion {
                cell,
                version,
                available: node.current.number,
            })?;
        self.replace_code(cell, source, provenance)
    }

    /// The version of `cell` that was current at time `at`: the latest one
    /// produced at or before `at`, or `None` if the cell had no code yet.
    ///
    /// # Errors
    ///
    /// [`GraphError::UnknownCell`] if `cell` is not in the graph.
    pub fn version_at(
        &self,
        cell: CellId,
        at: Timestamp,
    ) -> Result<Option<&CellVersion>, GraphError> {
        Ok(self
            .cell(cell)?
            .versions()
            .filter(|v| v.provenance.at <= at)
            .max_by_key(|v| (v.provenance.at, v.number)))
    }

    /// The cells a new cell appended now would depend on for `name`, latest
    /// first: every later cell that may bind it, then the last cell that
    /// certainly binds, deletes or mutates it.
    ///
    /// ```
    /// use harness_code::{ExecutionStateGraph, Provenance, CellId};
    ///
    /// let mut graph = ExecutionStateGraph::new();
    /// for source in ["x = 1", "x = 2", "if flag:\n    x = 3", "y = 0"] {
    ///     graph.add_cell(source, Provenance::now("user", "demo")).unwrap();
    /// }
    /// assert_eq!(graph.producers_of("x"), [CellId::new(2), CellId::new(1)]);
    /// assert_eq!(graph.producers_of("nothing"), []);
    /// ```
    pub fn producers_of(&self, name: &str) -> Vec<CellId> {
        self.producers(self.graph.node_count(), name)
            .into_iter()
            .map(|index| CellId::from_node(NodeIndex::new(index)))
            .collect()
    }

    /// Cells before `before` that produce `name`, latest first: those that
    /// may produce it, up to and including the last one that certainly does.
    fn producers(&self, before: usize, name: &str) -> Vec<usize> {
        let mut found = Vec::new();
        for index in (0..before).rev() {
            let effects = &self.graph[NodeIndex::new(index)].effects;
            if effects.produces.contains(name) {
                found.push(index);
                break;
            }
            if effects.opaque || effects.may_produce.contains(name) {
                found.push(index);
            }
        }
        found
    }

    /// Whether the last certain producer of `name` before `before` binds it by
    /// an import: changing attributes of a module is not data flow we track.
    fn bound_by_import(&self, before: usize, name: &str) -> bool {
        self.producers(before, name).first().is_some_and(|&index| {
            self.graph[NodeIndex::new(index)]
                .current
                .analysis
                .imports_name(name)
        })
    }

    /// Recomputes the effects and incoming inferred edges of `cell` from the
    /// effects of the cells before it.
    fn reinfer(&mut self, cell: CellId) {
        let index = cell.index();
        let node = &self.graph[cell.node()];
        let analysis = &node.current.analysis;
        let opaque = analysis.defeats_analysis();

        let mut effects = Effects {
            opaque,
            ..Effects::default()
        };
        effects
            .produces
            .extend(analysis.definite_writes().map(str::to_owned));
        effects.produces.extend(analysis.deletes.iter().cloned());
        effects
            .may_produce
            .extend(analysis.conditional_writes.iter().cloned());
        for name in &analysis.mutations {
            if !self.bound_by_import(index, name) {
                effects.produces.insert(name.clone());
            }
        }

        let mut needed: BTreeSet<String> = analysis
            .reads
            .iter()
            .chain(&analysis.builtins)
            .chain(&analysis.mutations)
            .cloned()
            .collect();
        let own_definite: BTreeSet<&str> = analysis.definite_writes().collect();
        // Calling (or passing along) a function from an earlier cell runs its
        // body now, with its effects on globals.
        for name in analysis.reads.iter().chain(&analysis.builtins) {
            for producer in self.producers(index, name) {
                let Some(definition) = self.graph[NodeIndex::new(producer)]
                    .current
                    .analysis
                    .definition(name)
                else {
                    continue;
                };
                for mutated in &definition.call_mutations {
                    if self.bound_by_import(index, mutated) {
                        continue;
                    }
                    effects.produces.insert(mutated.clone());
                    effects.via_calls.insert(mutated.clone());
                    // Mutating an object the cell bound itself needs nothing earlier.
                    if !own_definite.contains(mutated.as_str()) {
                        needed.insert(mutated.clone());
                    }
                }
                for written in &definition.call_writes {
                    effects.may_produce.insert(written.clone());
                    effects.via_calls.insert(written.clone());
                }
            }
        }
        // What the last run did: its writes are possible writes (the walk
        // back from a reader goes on past them), its reads and what it
        // changed in place are needed.
        let mut traced_needs: BTreeSet<String> = BTreeSet::new();
        if let Some(trace) = &node.trace {
            for name in trace.writes() {
                if !effects.produces.contains(&name) {
                    effects.traced.insert(name.clone());
                    effects.may_produce.insert(name);
                }
            }
            // A value changed in place was read too: what the cell left in
            // it depends on what it held before (through a name the cell
            // never loaded, too: a list changed through a dict holding it).
            for name in trace.inputs().chain(trace.mutated.iter().cloned()) {
                if !needed.contains(&name) {
                    traced_needs.insert(name.clone());
                    needed.insert(name);
                }
            }
        }
        let produced = effects.produces.clone();
        effects.may_produce.retain(|name| !produced.contains(name));

        let mut inferred: BTreeMap<usize, Dependency> = BTreeMap::new();
        for name in &needed {
            for producer in self.producers(index, name) {
                let dependency = inferred.entry(producer).or_default();
                dependency.names.insert(name.clone());
                if traced_needs.contains(name)
                    || self.graph[NodeIndex::new(producer)]
                        .effects
                        .traced
                        .contains(name)
                {
                    dependency.traced.insert(name.clone());
                }
            }
        }
        if opaque {
            for producer in 0..index {
                inferred.entry(producer).or_default();
            }
        }
        for (producer, dependency) in &mut inferred {
            dependency.conservative =
                opaque || self.graph[NodeIndex::new(*producer)].effects.opaque;
        }

        let incoming: Vec<_> = self
            .graph
            .edges_directed(cell.node(), Direction::Incoming)
            .map(|edge| (edge.id(), edge.source().index(), edge.weight().explicit))
            .collect();
        let mut explicit = BTreeSet::new();
        for (edge, source, is_explicit) in incoming {
            if is_explicit {
                explicit.insert(source);
            }
            self.graph.remove_edge(edge);
        }
        for source in &explicit {
            inferred.entry(*source).or_default().explicit = true;
        }
        for (producer, dependency) in inferred {
            self.graph
                .add_edge(NodeIndex::new(producer), cell.node(), dependency);
        }
        self.graph[cell.node()].effects = effects;
    }

    /// The graph in Graphviz DOT format, labelling each cell with its id and
    /// first line of code.
    pub fn to_dot(&self) -> String {
        self.to_dot_with_labels(|node| {
            let first_line = node
                .source()
                .lines()
                .find(|line| !line.trim().is_empty())
                .unwrap_or("");
            format!("cell {}: {}", node.id(), first_line.trim())
        })
    }

    /// The graph in Graphviz DOT format with custom cell labels. Edges are
    /// labelled with the names they carry; explicit edges are bold and
    /// conservative ones dashed.
    pub fn to_dot_with_labels(&self, label: impl Fn(&CellNode) -> String) -> String {
        let mut dot =
            String::from("digraph cells {\n  node [shape=box, fontname=\"monospace\"];\n");
        for node in self.cells() {
            dot.push_str(&format!(
                "  s{} [label=\"{}\"];\n",
                node.id(),
                escape_dot(&label(node))
            ));
        }
        let mut edges: Vec<_> = (&self.graph).edge_references().collect();
        edges.sort_by_key(|edge| (edge.source(), edge.target()));
        for edge in edges {
            let dependency = edge.weight();
            let names: Vec<&str> = dependency.names.iter().map(String::as_str).collect();
            let mut attributes = vec![format!("label=\"{}\"", escape_dot(&names.join(", ")))];
            if dependency.explicit {
                attributes.push("style=bold".to_owned());
            } else if dependency.conservative {
                attributes.push("style=dashed".to_owned());
            }
            dot.push_str(&format!(
                "  s{} -> s{} [{}];\n",
                edge.source().index(),
                edge.target().index(),
                attributes.join(", ")
            ));
        }
        dot.push_str("}\n");
        dot
    }
}

/// `text` inside a DOT string: quotes and backslashes escaped, newlines
/// as `\n`, and every other control character (C0, DEL, C1) shown as
/// text (`\x1b`, `\u{9b}`): edge labels carry names a cell's run chose
/// (the paths of files it wrote), and the DOT is printed to terminals.
fn escape_dot(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                // Shown as the text `\x1b`: its backslash escaped for DOT.
                out.push('\\');
                out.push_str(&control_text(c));
            }
            _ => out.push(c),
        }
    }
    out
}

/// A control character as text: `\x1b` for C0 and DEL, `\u{9b}` for C1.
fn control_text(c: char) -> String {
    let code = u32::from(c);
    if code < 0x80 {
        format!("\\x{code:02x}")
    } else {
        format!("\\u{{{code:x}}}")
    }
}
