//! What a cell did when it ran, as the kernel recorded it: the dynamic
//! record that the [`ExecutionStateGraph`](crate::ExecutionStateGraph)
//! adds to the static analysis.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// What one run of a cell did, recorded by the kernel while it ran: the
/// dynamic counterpart of the static [`CellAnalysis`](crate::CellAnalysis).
///
/// Names starting with `@` stand for state kept inside modules that cells
/// change through calls: `@random` (the `random` module's generator),
/// `@numpy.random` (numpy's global generator) and `@matplotlib` (pyplot's
/// figures and `rcParams`). A cell that changed such a state is in both
/// [`reads`](Self::reads) and [`mutated`](Self::mutated); a cell that read a
/// name bound to a matplotlib module or object reads `@matplotlib`.
///
/// A figure's changes are seen the way matplotlib itself sees them: every
/// change that would show when the figure is drawn next marks its artist
/// stale, and the mark is passed up to the figure, where the kernel counts
/// it (saving the figure and pyplot's own redraws are not counted). So a
/// line restyled through any name, or none (`plt.gca().lines[0]`), changes
/// its figure, every pyplot figure is looked at after each cell, and a name
/// bound to one of a figure's artists (a figure, its axes, a line) is
/// changed with the others when a cell reaches any of them. Artists made
/// `animated` pass no marks up, and an attribute set directly, without
/// matplotlib's setters, is not seen.
///
/// ```
/// use harness_code::CellTrace;
///
/// let trace: CellTrace = serde_json::from_str(
///     r#"{"reads": ["df"], "mutated": ["df"], "files_written": ["/tmp/out.csv"]}"#,
/// ).unwrap();
/// assert!(trace.changes("df") && trace.reads.contains("df"));
/// assert_eq!(trace.writes().collect::<Vec<_>>(), ["df", "file:/tmp/out.csv"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellTrace {
    /// Global names read whose value existed before the cell (or that were
    /// missing and not builtins), by the cell's own code, by functions
    /// defined in cells that it called, by the bodies of the classes it
    /// defined (directly or through a function it called), and by code it
    /// ran through `exec` or `eval` (every name that code may load).
    #[serde(default)]
    pub reads: BTreeSet<String>,
    /// Names the cell bound to a new object (new or rebound).
    #[serde(default)]
    pub bound: BTreeSet<String>,
    /// Names the cell removed.
    #[serde(default)]
    pub deleted: BTreeSet<String>,
    /// Names whose object existed before the cell, is still bound to them,
    /// and changed in place (its fingerprint differs), plus the `@` states
    /// the cell changed. Every name bound to a changed object, or to a value
    /// sharing memory with it (a numpy view and its base, a pandas Series
    /// and the block of its frame), is listed, so a change through an alias
    /// shows on each name. A numpy array past 256 MiB, which the kernel only
    /// samples, is listed whenever the cell could have reached it.
    #[serde(default)]
    pub mutated: BTreeSet<String>,
    /// Files opened for reading (absolute paths; the interpreter's own
    /// files, `/proc`, `/sys` and `/dev` left out).
    #[serde(default)]
    pub files_read: BTreeSet<String>,
    /// Files opened for writing, appending or creating.
    #[serde(default)]
    pub files_written: BTreeSet<String>,
    /// Top-level modules first imported by the cell.
    #[serde(default)]
    pub imports: BTreeSet<String>,
    /// Groups of names that share an object at the end of the run: bound
    /// to one object (or to numpy arrays over the same memory, a view and
    /// its base), or holding one mutable object that their pickles would
    /// copy apart (a list held by a dict and by a name of its own, a pandas
    /// Series and the block of its frame; not what is pickled by reference,
    /// such as a class of the notebook). Values are pickled one by one, so
    /// a notebook re-runs the cell that made such a group rather than load
    /// its names from separate blobs.
    #[serde(default)]
    pub aliases: Vec<BTreeSet<String>>,
    /// Entries left out past the kernel's bounds (4 096 names, 256 files per
    /// list); when not 0 the trace is incomplete.
    #[serde(default)]
    pub dropped: u64,
    /// Time the kernel spent fingerprinting and comparing, outside the
    /// cell's own [`duration_us`](crate::kernel::CellResult::duration_us), in microseconds.
    #[serde(default)]
    pub overhead_us: u64,
}

/// The prefix of the names that stand for files in a trace's
/// [`writes`](CellTrace::writes) and [`inputs`](CellTrace::inputs).
pub const FILE_PREFIX: &str = "file:";

impl CellTrace {
    /// Whether the cell bound, deleted or changed `name`.
    pub fn changes(&self, name: &str) -> bool {
        self.bound.contains(name) || self.deleted.contains(name) || self.mutated.contains(name)
    }

    /// Whether `name` shared its object with another name at the end of
    /// the run ([`aliases`](Self::aliases)).
    pub fn aliased(&self, name: &str) -> bool {
        self.aliases.iter().any(|group| group.contains(name))
    }

    /// Everything the run wrote: names bound, deleted or mutated, and the
    /// files it wrote as `file:PATH`.
    pub fn writes(&self) -> impl Iterator<Item = String> + '_ {
        let mut names: BTreeSet<String> = self
            .bound
            .iter()
            .chain(&self.deleted)
            .chain(&self.mutated)
            .cloned()
            .collect();
        names.extend(
            self.files_written
                .iter()
                .map(|p| format!("{FILE_PREFIX}{p}")),
        );
        names.into_iter()
    }

    /// Everything the run read: names, and the files it read as
    /// `file:PATH`.
    pub fn inputs(&self) -> impl Iterator<Item = String> + '_ {
        let mut names: BTreeSet<String> = self.reads.clone();
        names.extend(self.files_read.iter().map(|p| format!("{FILE_PREFIX}{p}")));
        names.into_iter()
    }
}

/// The cells after `from` that depend on it according to recorded traces
/// alone (the truth the benchmark and the tests hold the graph to), by
/// index in `traces` (one per cell, in order; `None` for a cell without a
/// trace, which then links nothing).
///
/// Cell `j` depends directly on an earlier cell `i` when something `j`
/// read ([`CellTrace::inputs`]) was written by `i` ([`CellTrace::writes`])
/// and no cell between them rebound or deleted it (a change in place or a
/// file write does not hide the earlier writers); dependents of dependents
/// count.
///
/// ```
/// use harness_code::{CellTrace, traced_downstream};
///
/// let mut make = CellTrace::default();
/// make.bound.insert("xs".into());
/// let mut grow = CellTrace::default();
/// grow.reads.insert("ys".into());
/// grow.mutated.extend(["xs".to_owned(), "ys".to_owned()]);
/// let mut count = CellTrace::default();
/// count.reads.insert("xs".into());
/// let traces = [Some(&make), Some(&grow), Some(&count)];
/// assert_eq!(traced_downstream(&traces, 1).into_iter().collect::<Vec<_>>(), [2]);
/// assert_eq!(traced_downstream(&traces, 0).into_iter().collect::<Vec<_>>(), [2]);
/// ```
pub fn traced_downstream(traces: &[Option<&CellTrace>], from: usize) -> BTreeSet<usize> {
    let writes: Vec<BTreeSet<String>> = traces
        .iter()
        .map(|t| t.map(|t| t.writes().collect()).unwrap_or_default())
        .collect();
    let mut reached = BTreeSet::new();
    let mut frontier = BTreeSet::from([from]);
    for (j, trace) in traces.iter().enumerate().skip(from + 1) {
        let Some(trace) = trace else { continue };
        let depends = trace.inputs().any(|name| {
            for i in (0..j).rev() {
                if writes[i].contains(&name) && frontier.contains(&i) {
                    return true;
                }
                let rebinds =
                    traces[i].is_some_and(|t| t.bound.contains(&name) || t.deleted.contains(&name));
                if rebinds {
                    return false;
                }
            }
            false
        });
        if depends {
            reached.insert(j);
            frontier.insert(j);
        }
    }
    reached
}
