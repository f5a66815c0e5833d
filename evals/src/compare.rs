//! Comparing reports: a baseline and a candidate, or several models.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::report::{Report, render, short};

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
    /// Its mean over the cases both reports have, in the baseline.
    pub baseline: f64,
    /// In the candidate.
    pub candidate: f64,
}

impl MeanDelta {
    /// `candidate − baseline`.
    pub fn delta(&self) -> f64 {
        self.candidate - self.baseline
    }
}

/// A baseline report against a candidate: cases matched by name,
/// evaluators by name.
///
/// ```
/// # fn demo(baseline: &harness_evals::Report, candidate: &harness_evals::Report) {
/// use harness_evals::Comparison;
///
/// let comparison = Comparison::new(baseline, candidate);
/// println!("{}", comparison.table());
/// if comparison.regressed(0.05) {
///     std::process::exit(1);
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The baseline's experiment.
    pub baseline: String,
    /// The candidate's experiment.
    pub candidate: String,
    /// Per case, in the baseline's order then the candidate's new cases.
    pub cases: Vec<CaseDelta>,
    /// Per evaluator both reports have, over the cases both have.
    pub means: Vec<MeanDelta>,
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
        let mut names: Vec<&str> = baseline.cases.iter().map(|c| c.name.as_str()).collect();
        let known: BTreeSet<&str> = names.iter().copied().collect();
        names.extend(
            candidate
                .cases
                .iter()
                .map(|c| c.name.as_str())
                .filter(|n| !known.contains(n)),
        );
        let mut sums = vec![(0.0, 0.0); evaluators.len()];
        let mut both = 0usize;
        for name in names {
            let b = baseline.case(name);
            let c = candidate.case(name);
            let scores: Vec<(String, Option<f64>, Option<f64>)> = evaluators
                .iter()
                .map(|e| (e.clone(), b.map(|b| b.value(e)), c.map(|c| c.value(e))))
                .collect();
            let change = match (b, c) {
                (None, _) => Change::Added,
                (_, None) => Change::Removed,
                (Some(_), Some(_)) => {
                    both += 1;
                    for (i, (_, bv, cv)) in scores.iter().enumerate() {
                        sums[i].0 += bv.unwrap_or(0.0);
                        sums[i].1 += cv.unwrap_or(0.0);
                    }
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
            .zip(sums)
            .map(|(name, (b, c))| MeanDelta {
                name: name.clone(),
                baseline: if both == 0 { 0.0 } else { b / both as f64 },
                candidate: if both == 0 { 0.0 } else { c / both as f64 },
            })
            .collect();
        let mut comparison = Self {
            baseline: baseline.experiment.clone(),
            candidate: candidate.experiment.clone(),
            cases,
            means,
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

    /// Whether the candidate is worse beyond `threshold`: an evaluator's
    /// mean dropped by more than it, or a case's value did. With `0.0`,
    /// any drop counts.
    pub fn regressed(&self, threshold: f64) -> bool {
        self.means.iter().any(|m| -m.delta() > threshold + 1e-9)
            || self.cases.iter().any(|c| c.worst_drop() > threshold + 1e-9)
    }

    /// The comparison as a terminal table: the means, then every case that
    /// moved.
    pub fn table(&self) -> String {
        let header: Vec<String> = ["evaluator", "baseline", "candidate", "Δ"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let rows: Vec<Vec<String>> = self
            .means
            .iter()
            .map(|m| {
                vec![
                    m.name.clone(),
                    format!("{:.3}", m.baseline),
                    format!("{:.3}", m.candidate),
                    format!("{:+.3}", m.delta()),
                ]
            })
            .collect();
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
            out.push_str(&render(
                &format!(
                    "{} improved, {} regressed",
                    self.improved().count(),
                    self.regressions().count()
                ),
                &header,
                &moved,
                None,
            ));
        }
        out
    }
}

/// Several reports of one dataset side by side (several models, say): a
/// row per case, a column per report and evaluator, and the means.
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
    let mut names: Vec<&str> = Vec::new();
    for report in reports {
        for case in &report.cases {
            if !names.contains(&case.name.as_str()) {
                names.push(&case.name);
            }
        }
    }
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|name| {
            let mut row = vec![(*name).to_owned()];
            for (i, evaluator) in &columns {
                row.push(
                    reports[*i]
                        .case(name)
                        .map_or("-".to_owned(), |c| short(c.value(evaluator))),
                );
            }
            row
        })
        .collect();
    let mut footer = vec!["mean".to_owned()];
    for (i, evaluator) in &columns {
        let summary = reports[*i].summary();
        let mean = summary
            .evaluators
            .iter()
            .find(|e| &e.name == evaluator)
            .map_or(0.0, |e| e.mean);
        footer.push(format!("{mean:.3}"));
    }
    let title = reports
        .iter()
        .map(|r| r.experiment.as_str())
        .collect::<Vec<_>>()
        .join(" | ");
    render(&title, &header, &rows, Some(&footer))
}
