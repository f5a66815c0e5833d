//! Comparing reports: a baseline and a candidate, or several models.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::report::{CaseReport, Report, render, short};

/// How one case moved between two reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// A score went up, none went down.
    Improved,
    /// A score went down.
    Regressed,
    /// No score moved.
    Unchanged,
    /// Only in the candidate.
    Added,
    /// Only in the baseline.
    Removed,
}

/// One case of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseDelta {
    /// The case.
    pub name: String,
    /// How it moved.
    pub change: Change,
    /// Per evaluator: baseline value, candidate value (`None` where the
    /// case is absent).
    pub scores: Vec<(String, Option<f64>, Option<f64>)>,
}

impl CaseDelta {
    /// The largest drop of any evaluator's value (0 if none dropped).
    pub fn worst_drop(&self) -> f64 {
        self.scores
            .iter()
            .filter_map(|(_, b, c)| Some(b.as_ref()? - c.as_ref()?))
            .fold(0.0, f64::max)
    }
}

/// One evaluator's mean in both reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeanDelta {
    /// The evaluator.
    pub name: String,
    /// Its mean in the baseline, over all the baseline's cases (the
    /// baseline's own [summary](Report::summary)); `None` when the baseline
    /// has no cases.
    pub baseline: Option<f64>,
    /// Its mean in the candidate, over all the candidate's cases; `None`
    /// when the candidate has no cases.
    pub candidate: Option<f64>,
}

impl MeanDelta {
    /// `candidate − baseline`, when both reports have cases.
    pub fn delta(&self) -> Option<f64> {
        Some(self.candidate? - self.baseline?)
    }
}

/// A way in which the candidate falls short of the baseline: why a
/// comparison [regressed](Comparison::regressed). Its `Display` says it in
/// a sentence (names redacted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum Shortfall {
    /// A case of the baseline is not in the candidate.
    MissingCase {
        /// The case.
        case: String,
    },
    /// An evaluator of the baseline is not in the candidate.
    MissingEvaluator {
        /// The evaluator.
        evaluator: String,
    },
    /// An evaluator's mean dropped by more than the threshold.
    MeanDropped {
        /// The evaluator.
        evaluator: String,
        /// Its mean in the baseline.
        baseline: f64,
        /// Its mean in the candidate.
        candidate: f64,
    },
    /// A case's value for an evaluator dropped by more than the threshold.
    CaseDropped {
        /// The case.
        case: String,
        /// The evaluator.
        evaluator: String,
        /// The case's value in the baseline.
        baseline: f64,
        /// Its value in the candidate.
        candidate: f64,
    },
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Redacted, and its control characters escaped (these lines go to
        // a terminal).
        let shown = |s: &str| crate::report::printable(&crate::redact::shown(s)).into_owned();
        match self {
            Shortfall::MissingCase { case } => write!(
                f,
                "case `{}` of the baseline is missing from the candidate",
                shown(case)
            ),
            Shortfall::MissingEvaluator { evaluator } => write!(
                f,
                "evaluator `{}` of the baseline is missing from the candidate",
                shown(evaluator)
            ),
            Shortfall::MeanDropped {
                evaluator,
                baseline,
                candidate,
            } => write!(
                f,
                "the mean of evaluator `{}` dropped from {baseline:.3} to {candidate:.3}",
                shown(evaluator)
            ),
            Shortfall::CaseDropped {
                case,
                evaluator,
                baseline,
                candidate,
            } => write!(
                f,
                "case `{}` dropped from {} to {} on evaluator `{}`",
                shown(case),
                short(*baseline),
                short(*candidate),
                shown(evaluator)
            ),
        }
    }
}

/// A threshold that is not a finite number ≥ 0 (NaN, negative, infinite).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("threshold {threshold}: give a finite number ≥ 0, e.g. 0.05")]
#[non_exhaustive]
pub struct InvalidThreshold {
    /// The threshold given.
    pub threshold: f64,
}

/// A baseline report against a candidate: cases matched by name,
/// evaluators by name. Case names are unique in a report an experiment
/// made or [`Report::load`] read; in one built by hand with a name twice,
/// the second case of that name is matched with the other report's second.
///
/// The candidate [regressed](Comparison::regressed) when it lost anything
/// the baseline had, or scored lower beyond a threshold; each reason is a
/// [`Shortfall`]:
///
/// - a case of the baseline that the candidate does not have
///   ([`Change::Removed`]), whatever the threshold: dropping a failing case
///   must not pass the gate;
/// - an evaluator of the baseline that the candidate does not have
///   ([`Comparison::missing_evaluators`]), whatever the threshold;
/// - an evaluator's mean (each report's own, over all its cases, as its
///   [summary](Report::summary) gives it) that dropped by more than the
///   threshold; the candidate's new cases count in its mean;
/// - a case both have whose value for an evaluator dropped by more than
///   the threshold. With pass/fail evaluators every drop is `1.0`, so one
///   flipped case fails any threshold below `1.0`.
///
/// The candidate's new cases and evaluators are listed, never a shortfall.
///
/// ```
/// # fn demo(baseline: &harness_evals::Report, candidate: &harness_evals::Report) -> Result<(), harness_evals::InvalidThreshold> {
/// use harness_evals::Comparison;
///
/// let comparison = Comparison::new(baseline, candidate);
/// println!("{}", comparison.table());
/// let shortfalls = comparison.shortfalls(0.05)?;
/// for shortfall in &shortfalls {
///     eprintln!("{shortfall}");
/// }
/// if !shortfalls.is_empty() {
///     std::process::exit(1);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The baseline's experiment.
    pub baseline: String,
    /// The candidate's experiment.
    pub candidate: String,
    /// Per case, in the baseline's order then the candidate's new cases.
    pub cases: Vec<CaseDelta>,
    /// Per evaluator both reports have, each report's own mean.
    pub means: Vec<MeanDelta>,
    /// The baseline's evaluators the candidate does not have, with their
    /// mean in the baseline (`None` when it has no cases).
    #[serde(default)]
    pub missing_evaluators: Vec<(String, Option<f64>)>,
}

impl Comparison {
    /// Compares `candidate` with `baseline`. Names are redacted (see the
    /// crate's docs on secrets).
    pub fn new(baseline: &Report, candidate: &Report) -> Self {
        let evaluators: Vec<String> = baseline
            .evaluators
            .iter()
            .filter(|e| candidate.evaluators.contains(e))
            .cloned()
            .collect();
        let mut cases = Vec::new();
        let (in_baseline, in_candidate) = (ranked(baseline), ranked(candidate));
        let mut keys = keys(baseline);
        keys.extend(
            self::keys(candidate)
                .into_iter()
                .filter(|k| !in_baseline.contains_key(k)),
        );
        for key in keys {
            let name = key.0;
            let b = in_baseline.get(&key).copied();
            let c = in_candidate.get(&key).copied();
            let scores: Vec<(String, Option<f64>, Option<f64>)> = evaluators
                .iter()
                .map(|e| (e.clone(), b.map(|b| b.value(e)), c.map(|c| c.value(e))))
                .collect();
            let change = match (b, c) {
                (None, _) => Change::Added,
                (_, None) => Change::Removed,
                (Some(_), Some(_)) => {
                    let down = scores
                        .iter()
                        .any(|(_, b, c)| c.unwrap_or(0.0) < b.unwrap_or(0.0) - 1e-9);
                    let up = scores
                        .iter()
                        .any(|(_, b, c)| c.unwrap_or(0.0) > b.unwrap_or(0.0) + 1e-9);
                    match (down, up) {
                        (true, _) => Change::Regressed,
                        (false, true) => Change::Improved,
                        (false, false) => Change::Unchanged,
                    }
                }
            };
            cases.push(CaseDelta {
                name: name.to_owned(),
                change,
                scores,
            });
        }
        let means = evaluators
            .iter()
            .map(|name| MeanDelta {
                name: name.clone(),
                baseline: own_mean(baseline, name),
                candidate: own_mean(candidate, name),
            })
            .collect();
        let missing_evaluators = baseline
            .evaluators
            .iter()
            .filter(|e| !candidate.evaluators.contains(e))
            .map(|e| (e.clone(), own_mean(baseline, e)))
            .collect();
        let mut comparison = Self {
            baseline: baseline.experiment.clone(),
            candidate: candidate.experiment.clone(),
            cases,
            means,
            missing_evaluators,
        };
        // It is printed and saved as JSON (`harness-evals compare --json`),
        // and a report read from a file may hold what a run would redact.
        crate::redact::comparison(&mut comparison);
        comparison
    }

    /// The cases that got better.
    pub fn improved(&self) -> impl Iterator<Item = &CaseDelta> {
        self.cases.iter().filter(|c| c.change == Change::Improved)
    }

    /// The cases that got worse.
    pub fn regressions(&self) -> impl Iterator<Item = &CaseDelta> {
        self.cases.iter().filter(|c| c.change == Change::Regressed)
    }

    /// The cases of the baseline that the candidate does not have.
    pub fn removed(&self) -> impl Iterator<Item = &CaseDelta> {
        self.cases.iter().filter(|c| c.change == Change::Removed)
    }

    /// Every way in which the candidate falls short of the baseline beyond
    /// `threshold` (see [`Comparison`]): missing cases and evaluators, then
    /// means and cases that dropped by more than `threshold`. Empty when
    /// the candidate passes. With `0.0`, any drop counts.
    ///
    /// A `threshold` that is NaN, negative or infinite is an error.
    pub fn shortfalls(&self, threshold: f64) -> Result<Vec<Shortfall>, InvalidThreshold> {
        if !(threshold.is_finite() && threshold >= 0.0) {
            return Err(InvalidThreshold { threshold });
        }
        let beyond = |drop: f64| drop > threshold + 1e-9;
        let mut out: Vec<Shortfall> = self
            .removed()
            .map(|c| Shortfall::MissingCase {
                case: c.name.clone(),
            })
            .collect();
        out.extend(
            self.missing_evaluators
                .iter()
                .map(|(e, _)| Shortfall::MissingEvaluator {
                    evaluator: e.clone(),
                }),
        );
        for m in &self.means {
            if let (Some(baseline), Some(candidate)) = (m.baseline, m.candidate)
                && beyond(baseline - candidate)
            {
                out.push(Shortfall::MeanDropped {
                    evaluator: m.name.clone(),
                    baseline,
                    candidate,
                });
            }
        }
        for case in &self.cases {
            for (evaluator, b, c) in &case.scores {
                if let (Some(baseline), Some(candidate)) = (*b, *c)
                    && beyond(baseline - candidate)
                {
                    out.push(Shortfall::CaseDropped {
                        case: case.name.clone(),
                        evaluator: evaluator.clone(),
                        baseline,
                        candidate,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Whether the candidate falls short of the baseline beyond
    /// `threshold`: whether [`shortfalls`](Comparison::shortfalls) finds
    /// any. A missing case or evaluator always counts. A threshold that is
    /// not a finite number ≥ 0 (NaN, negative, infinite) is taken as `0.0`,
    /// the strictest (`harness-evals compare` refuses it; use
    /// [`shortfalls`](Comparison::shortfalls) for the error).
    pub fn regressed(&self, threshold: f64) -> bool {
        let threshold = if threshold.is_finite() && threshold >= 0.0 {
            threshold
        } else {
            0.0
        };
        self.shortfalls(threshold)
            .map_or(true, |shortfalls| !shortfalls.is_empty())
    }

    /// The comparison as a terminal table: the means, then every case that
    /// moved.
    pub fn table(&self) -> String {
        let header: Vec<String> = ["evaluator", "baseline", "candidate", "Δ"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let mean = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
        let mut rows: Vec<Vec<String>> = self
            .means
            .iter()
            .map(|m| {
                vec![
                    m.name.clone(),
                    mean(m.baseline),
                    mean(m.candidate),
                    m.delta().map_or("-".to_owned(), |d| format!("{d:+.3}")),
                ]
            })
            .collect();
        rows.extend(self.missing_evaluators.iter().map(|(name, baseline)| {
            vec![
                name.clone(),
                mean(*baseline),
                "missing".to_owned(),
                "-".to_owned(),
            ]
        }));
        let mut out = render(
            &format!("{} → {}", self.baseline, self.candidate),
            &header,
            &rows,
            None,
        );
        let moved: Vec<Vec<String>> = self
            .cases
            .iter()
            .filter(|c| c.change != Change::Unchanged)
            .map(|c| {
                let mut row = vec![c.name.clone(), format!("{:?}", c.change).to_lowercase()];
                row.push(
                    c.scores
                        .iter()
                        .filter(|(_, b, c)| b != c)
                        .map(|(e, b, c)| {
                            let show = |v: &Option<f64>| v.map_or("-".to_owned(), short);
                            format!("{e}: {} → {}", show(b), show(c))
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                );
                row
            })
            .collect();
        if !moved.is_empty() {
            let header: Vec<String> = ["case", "change", "scores"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            out.push('\n');
            let mut title = format!(
                "{} improved, {} regressed",
                self.improved().count(),
                self.regressions().count()
            );
            let removed = self.removed().count();
            if removed > 0 {
                title.push_str(&format!(", {removed} missing from the candidate"));
            }
            let added = self
                .cases
                .iter()
                .filter(|c| c.change == Change::Added)
                .count();
            if added > 0 {
                title.push_str(&format!(", {added} new"));
            }
            out.push_str(&render(&title, &header, &moved, None));
        }
        out
    }
}

/// A case's name, and how many cases of that name come before it.
type Key<'r> = (&'r str, usize);

/// The key of each case of `report`, in order: its name, and `0` unless
/// the name was given before (only in a report built by hand: an
/// experiment and [`Report::load`] keep names unique), so that the second
/// case of a name is matched with the other report's second, never with
/// its first.
fn keys(report: &Report) -> Vec<Key<'_>> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    report
        .cases
        .iter()
        .map(|case| {
            let rank = seen.entry(case.name.as_str()).or_default();
            let key = (case.name.as_str(), *rank);
            *rank += 1;
            key
        })
        .collect()
}

/// `report`'s cases by [`Key`].
fn ranked(report: &Report) -> HashMap<Key<'_>, &CaseReport> {
    keys(report).into_iter().zip(&report.cases).collect()
}

/// `evaluator`'s mean over all of `report`'s cases (what its summary
/// says), or `None` when it has no cases.
fn own_mean(report: &Report, evaluator: &str) -> Option<f64> {
    if report.cases.is_empty() {
        return None;
    }
    let n = report.cases.len();
    Some(crate::report::mean(
        report.cases.iter().map(|c| c.value(evaluator)),
        n,
    ))
}

/// Several reports of one dataset side by side (several models, say): a
/// row per case, a column per report and evaluator (`-` where a report
/// lacks the case), and each report's own means over all its cases (`-`
/// for a report with no cases).
pub fn side_by_side(reports: &[Report]) -> String {
    let mut header = vec!["case".to_owned()];
    let mut columns = Vec::new();
    for (i, report) in reports.iter().enumerate() {
        for evaluator in &report.evaluators {
            header.push(format!(
                "{}:{evaluator}",
                report
                    .model
                    .clone()
                    .unwrap_or_else(|| format!("#{}", i + 1))
            ));
            columns.push((i, evaluator.clone()));
        }
    }
    let by_key: Vec<HashMap<Key<'_>, &CaseReport>> = reports.iter().map(ranked).collect();
    let mut rows_of: Vec<Key<'_>> = Vec::new();
    for report in reports {
        for key in keys(report) {
            if !rows_of.contains(&key) {
                rows_of.push(key);
            }
        }
    }
    let rows: Vec<Vec<String>> = rows_of
        .iter()
        .map(|key| {
            let mut row = vec![key.0.to_owned()];
            for (i, evaluator) in &columns {
                row.push(
                    by_key[*i]
                        .get(key)
                        .map_or("-".to_owned(), |c| short(c.value(evaluator))),
                );
            }
            row
        })
        .collect();
    let mut footer = vec!["mean".to_owned()];
    for (i, evaluator) in &columns {
        // Each report's own mean; none for a report without cases.
        footer
            .push(own_mean(&reports[*i], evaluator).map_or("-".to_owned(), |m| format!("{m:.3}")));
    }
    let title = reports
        .iter()
        .map(|r| r.experiment.as_str())
        .collect::<Vec<_>>()
        .join(" | ");
    render(&title, &header, &rows, Some(&footer))
}
