//! The plan a planner model writes, and its check: a DAG of tasks, each
//! naming a registered sub-agent by role and the tasks whose results it
//! needs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A plan: the tasks that reach the goal. The planner answers with one
/// (a typed answer), and it is checked before any task runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Plan {
    /// The tasks, in any order: they run as their dependencies allow.
    pub tasks: Vec<PlanTask>,
}

/// One task of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlanTask {
    /// The task's id, unique in the plan: dependencies and results name it.
    /// One or more ASCII letters, digits, `-` and `_` (else the plan is
    /// refused with [`PlanProblem::InvalidId`]). A task whose id already
    /// has a result (from an earlier plan) is done, and does not run again.
    pub id: String,
    /// The role of the sub-agent that does it: one of the orchestrator's.
    pub agent: String,
    /// What the sub-agent is asked to do.
    pub instructions: String,
    /// The ids of the tasks whose results it needs.
    #[serde(default)]
    pub needs: Vec<String>,
}

/// What is wrong with a plan; the planner is asked again with the
/// problems, up to the orchestrator's limit of replans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum PlanProblem {
    /// The plan has no task left to run, and the goal has no result yet.
    #[error("the plan has no tasks")]
    Empty,
    /// A task's id, or an id in a task's `needs`, is empty or holds
    /// anything but ASCII letters, digits, `-` and `_`.
    #[error(
        "{} is not a valid task id: {reason}; use ASCII letters, digits, `-` and `_`",
        match needed_by {
            None => format!("the id {id:?}"),
            Some(task) => format!("{id:?}, in the `needs` of task {task:?},"),
        }
    )]
    InvalidId {
        /// The id.
        id: String,
        /// The task whose `needs` holds it; `None` for a task's own id.
        needed_by: Option<String>,
        /// What is wrong with it, and where.
        reason: String,
    },
    /// Two tasks share an id.
    #[error("task id `{id}` is used by more than one task")]
    DuplicateId {
        /// The id.
        id: String,
    },
    /// A task names a role no sub-agent has.
    #[error("task `{task}` names agent `{agent}`, which does not exist (agents: {})", known.join(", "))]
    UnknownAgent {
        /// The task.
        task: String,
        /// The role it names.
        agent: String,
        /// The roles there are.
        known: Vec<String>,
    },
    /// A task needs a task that is neither in the plan nor done.
    #[error(
        "task `{task}` needs `{missing}`, which is neither a task of the plan nor a finished one"
    )]
    MissingDependency {
        /// The task.
        task: String,
        /// The id it needs.
        missing: String,
    },
    /// Tasks need each other in a circle, so none of them can start.
    #[error("tasks need each other in a cycle: {}", cycle.join(" -> "))]
    Cycle {
        /// The cycle, its first task repeated at its end.
        cycle: Vec<String>,
    },
    /// The planner's answer was not a plan at all.
    #[error("the planner's answer is not a plan: {reason}")]
    Unreadable {
        /// Why (the typed answer's error).
        reason: String,
    },
}

/// Every problem of `plan`, given the registered roles and the ids of the
/// tasks already done; empty when it can run.
pub fn check_plan(plan: &Plan, roles: &[String], done: &BTreeSet<String>) -> Vec<PlanProblem> {
    let mut problems = Vec::new();
    let mut ids = BTreeSet::new();
    for t in &plan.tasks {
        if let Some(reason) = crate::ids::problem(&t.id) {
            let invalid = PlanProblem::InvalidId {
                id: t.id.clone(),
                needed_by: None,
                reason,
            };
            if !problems.contains(&invalid) {
                problems.push(invalid);
            }
        }
        if !ids.insert(t.id.as_str()) {
            let dup = PlanProblem::DuplicateId { id: t.id.clone() };
            if !problems.contains(&dup) {
                problems.push(dup);
            }
        }
    }
    if plan.tasks.iter().all(|t| done.contains(&t.id)) {
        problems.push(PlanProblem::Empty);
    }
    for t in &plan.tasks {
        if !roles.contains(&t.agent) {
            problems.push(PlanProblem::UnknownAgent {
                task: t.id.clone(),
                agent: t.agent.clone(),
                known: roles.to_vec(),
            });
        }
        for need in &t.needs {
            if let Some(reason) = crate::ids::problem(need) {
                problems.push(PlanProblem::InvalidId {
                    id: need.clone(),
                    needed_by: Some(t.id.clone()),
                    reason,
                });
            } else if !ids.contains(need.as_str()) && !done.contains(need) {
                problems.push(PlanProblem::MissingDependency {
                    task: t.id.clone(),
                    missing: need.clone(),
                });
            }
        }
    }
    if let Some(cycle) = find_cycle(plan, done) {
        problems.push(PlanProblem::Cycle { cycle });
    }
    problems
}

/// A cycle among the plan's tasks not yet done, if there is one.
fn find_cycle(plan: &Plan, done: &BTreeSet<String>) -> Option<Vec<String>> {
    // Tasks that share an id (a problem of its own) need what each needs.
    let mut needs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in plan.tasks.iter().filter(|t| !done.contains(&t.id)) {
        needs
            .entry(t.id.as_str())
            .or_default()
            .extend(t.needs.iter().map(String::as_str));
    }
    // Depth-first, colouring: 1 on the current path, 2 finished.
    let mut colour: BTreeMap<&str, u8> = BTreeMap::new();
    for &start in needs.keys() {
        if colour.contains_key(start) {
            continue;
        }
        let mut path: Vec<&str> = vec![start];
        let mut next: Vec<usize> = vec![0];
        colour.insert(start, 1);
        while let Some(&node) = path.last() {
            let i = next.last().copied().unwrap_or(0);
            let deps = needs.get(node).map(Vec::as_slice).unwrap_or_default();
            match deps.get(i) {
                None => {
                    colour.insert(node, 2);
                    path.pop();
                    next.pop();
                }
                Some(&dep) => {
                    if let Some(n) = next.last_mut() {
                        *n += 1;
                    }
                    if !needs.contains_key(dep) {
                        continue;
                    }
                    match colour.get(dep) {
                        Some(1) => {
                            let from = path.iter().position(|p| *p == dep).unwrap_or(0);
                            let mut cycle: Vec<String> =
                                path[from..].iter().map(|s| s.to_string()).collect();
                            cycle.push(dep.to_string());
                            return Some(cycle);
                        }
                        Some(_) => {}
                        None => {
                            colour.insert(dep, 1);
                            path.push(dep);
                            next.push(0);
                        }
                    }
                }
            }
        }
    }
    None
}

/// Problems, one per line, as the planner is shown them.
pub(crate) struct Lines<'a>(pub(crate) &'a [PlanProblem]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in self.0 {
            writeln!(f, "- {p}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, agent: &str, needs: &[&str]) -> PlanTask {
        PlanTask {
            id: id.into(),
            agent: agent.into(),
            instructions: format!("do {id}"),
            needs: needs.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn roles() -> Vec<String> {
        vec!["research".into(), "write".into()]
    }

    #[test]
    fn a_good_plan_has_no_problems() {
        let plan = Plan {
            tasks: vec![
                task("a", "research", &[]),
                task("b", "research", &[]),
                task("c", "write", &["a", "b", "z"]),
            ],
        };
        let done = BTreeSet::from(["z".to_string()]);
        assert_eq!(check_plan(&plan, &roles(), &done), []);
    }

    #[test]
    fn every_problem_of_a_plan_is_reported() {
        let plan = Plan {
            tasks: vec![
                task("a", "paint", &["b"]),
                task("b", "write", &["c"]),
                task("c", "write", &["a", "ghost"]),
                task("a", "research", &[]),
            ],
        };
        let problems = check_plan(&plan, &roles(), &BTreeSet::new());
        assert!(problems.contains(&PlanProblem::DuplicateId { id: "a".into() }));
        assert!(problems.contains(&PlanProblem::UnknownAgent {
            task: "a".into(),
            agent: "paint".into(),
            known: roles()
        }));
        assert!(problems.contains(&PlanProblem::MissingDependency {
            task: "c".into(),
            missing: "ghost".into()
        }));
        let cycle = problems
            .iter()
            .find_map(|p| match p {
                PlanProblem::Cycle { cycle } => Some(cycle.clone()),
                _ => None,
            })
            .expect("the cycle a -> b -> c -> a");
        assert_eq!(cycle.first(), cycle.last());
        assert_eq!(cycle.len(), 4, "{cycle:?}");
    }

    #[test]
    fn cycles_of_every_length_are_found_and_done_tasks_break_them() {
        assert_eq!(
            check_plan(
                &Plan {
                    tasks: vec![task("a", "write", &["a"])]
                },
                &roles(),
                &BTreeSet::new()
            ),
            [PlanProblem::Cycle {
                cycle: vec!["a".into(), "a".into()]
            }]
        );
        let long = Plan {
            tasks: (0..6)
                .map(|i| task(&format!("t{i}"), "write", &[&format!("t{}", (i + 1) % 6)]))
                .collect(),
        };
        let problems = check_plan(&long, &roles(), &BTreeSet::new());
        assert!(
            matches!(&problems[..], [PlanProblem::Cycle { cycle }] if cycle.len() == 7),
            "{problems:?}"
        );
        // With t3 done, the chain is no longer circular.
        let done = BTreeSet::from(["t3".to_string()]);
        assert_eq!(check_plan(&long, &roles(), &done), []);
    }

    #[test]
    fn ids_that_are_empty_or_hold_other_characters_are_refused_saying_where() {
        let invalid = |id: &str, needed_by: Option<&str>, reason: &str| PlanProblem::InvalidId {
            id: id.into(),
            needed_by: needed_by.map(Into::into),
            reason: reason.into(),
        };
        // (the plan's tasks, a problem it must have)
        let cases = [
            (
                vec![task("", "write", &[])],
                invalid("", None, "it is empty"),
            ),
            (
                vec![task("a/b", "write", &[])],
                invalid("a/b", None, "it holds '/' at byte 1"),
            ),
            (
                vec![task("x\ny", "write", &[])],
                invalid("x\ny", None, r"it holds '\n' at byte 1"),
            ),
            (
                vec![task("a b", "write", &[])],
                invalid("a b", None, "it holds ' ' at byte 1"),
            ),
            (
                vec![task("a", "write", &[""])],
                invalid("", Some("a"), "it is empty"),
            ),
            (
                vec![task("a", "write", &["b/c"]), task("b", "write", &[])],
                invalid("b/c", Some("a"), "it holds '/' at byte 1"),
            ),
        ];
        for (tasks, expected) in cases {
            let plan = Plan { tasks };
            let problems = check_plan(&plan, &roles(), &BTreeSet::new());
            assert!(problems.contains(&expected), "{plan:?}: {problems:?}");
            // A bad need is not also reported as missing.
            assert!(
                !problems
                    .iter()
                    .any(|p| matches!(p, PlanProblem::MissingDependency { .. })),
                "{problems:?}"
            );
        }
        // Two tasks with the same bad id: one problem.
        let twice = Plan {
            tasks: vec![task("", "write", &[]), task("", "write", &[])],
        };
        let problems = check_plan(&twice, &roles(), &BTreeSet::new());
        assert_eq!(
            problems
                .iter()
                .filter(|p| matches!(p, PlanProblem::InvalidId { .. }))
                .count(),
            1,
            "{problems:?}"
        );
        // The planner is told what and where.
        assert_eq!(
            invalid("", Some("a"), "it is empty").to_string(),
            "\"\", in the `needs` of task \"a\", is not a valid task id: it is empty; use ASCII letters, digits, `-` and `_`"
        );
        assert_eq!(
            invalid("x\ny", None, r"it holds '\n' at byte 1").to_string(),
            r#"the id "x\ny" is not a valid task id: it holds '\n' at byte 1; use ASCII letters, digits, `-` and `_`"#
        );
    }

    #[test]
    fn a_plan_of_nothing_left_to_do_is_empty() {
        let done = BTreeSet::from(["a".to_string()]);
        for plan in [
            Plan::default(),
            Plan {
                tasks: vec![task("a", "write", &[])],
            },
        ] {
            assert_eq!(check_plan(&plan, &roles(), &done), [PlanProblem::Empty]);
        }
    }
}
