//! How deeply a stored value may nest, checked before anything is written.
//!
//! JSON readers refuse nesting past a limit that JSON writers do not have:
//! `serde_json` writes a value of any depth but reads at most 128 levels,
//! so a state nested deeper would be stored fine and could never be read
//! back. Every commit is checked here before it reaches the store, and one
//! holding a value deeper than [`MAX_VALUE_DEPTH`] is refused with
//! [`ValueTooDeep`] naming the step, the value and its depth.
//!
//! Refusing on write, rather than reading without the limit, is what works
//! for every store: the limit of the reader is the store's (a Redis script
//! decodes heads with its own JSON library), and a value read without a
//! limit would still be walked recursively — serialized, merged, dropped,
//! rendered — on the thread's stack, where a hostile depth overflows it.
//! Values parsed with `serde_json` (a model's tool arguments, say) never
//! exceed 128 levels in the first place.

use super::{CheckpointKind, Commit, SessionPhase, ValueTooDeep};
use serde_json::Value;

/// The deepest nesting of arrays and objects a value stored in a session
/// may have (a state, an update, a run input, an interrupt's payload or
/// answer, a `once` result): an empty array or object is 1 level, `[[1]]`
/// is 2. A commit holding a deeper value is refused with
/// [`StoreError::TooDeep`](super::StoreError::TooDeep).
///
/// A typed state counts as its JSON: a struct or a map is an object, a
/// `Vec` an array, an `Option` adds no level, an enum variant with data
/// adds one (`{"Variant": ..}`). The limit leaves a store 27 levels of its
/// own records around the value within `serde_json`'s 128; the stores of
/// `harness-stores` use at most 4, and their conformance suite checks that
/// values of exactly this depth read back in every place a record holds
/// one.
pub const MAX_VALUE_DEPTH: usize = 100;

/// Refuses `commit` if any value it would store nests deeper than
/// [`MAX_VALUE_DEPTH`]. Walks each value at most `MAX_VALUE_DEPTH + 1`
/// levels down; allocates nothing unless it refuses.
pub(crate) fn check_commit(commit: &Commit) -> Result<(), ValueTooDeep> {
    let head = &commit.head;
    let too_deep = |step: &str, what: String, value: &Value| ValueTooDeep {
        session: head.session_id.clone(),
        step: step.to_string(),
        what,
        depth: depth(value),
        limit: MAX_VALUE_DEPTH,
    };
    for cp in &commit.append {
        let check = |what: &str, value: &Value| {
            if deeper_than(value, MAX_VALUE_DEPTH) {
                Err(too_deep(&cp.step, what.to_string(), value))
            } else {
                Ok(())
            }
        };
        match &cp.kind {
            CheckpointKind::Snapshot(v) => check("the state", v)?,
            // A run's input is the update of step `$input`.
            CheckpointKind::Update(v) => check("the update", v)?,
            CheckpointKind::Branch(b) => check("the update", &b.update)?,
            CheckpointKind::Fork(f) => {
                for input in f.branches.iter().filter_map(|b| b.input.as_ref()) {
                    check("a branch's input", input)?;
                }
            }
            CheckpointKind::Join(_) => {}
            CheckpointKind::Child(c) => match &*c.record {
                CheckpointKind::Update(v) | CheckpointKind::Snapshot(v) => check("the update", v)?,
                CheckpointKind::Branch(b) => check("the update", &b.update)?,
                _ => {}
            },
        }
    }
    // Each journal's step, named only when one of its values is refused.
    let step = head.next_step.as_deref().unwrap_or("");
    let journals = std::iter::once((None, &head.journal))
        .chain(head.branch_journals.iter().map(|(path, j)| (Some(path), j)));
    for (path, journal) in journals {
        let step = || match path {
            None => step.to_string(),
            Some(path) => format!("{step} (branch {path})"),
        };
        for (i, answer) in journal.responses.iter().enumerate() {
            if deeper_than(answer, MAX_VALUE_DEPTH) {
                return Err(too_deep(&step(), format!("interrupt answer {i}"), answer));
            }
        }
        for (key, result) in &journal.once {
            if deeper_than(result, MAX_VALUE_DEPTH) {
                return Err(too_deep(
                    &step(),
                    format!("the `once` result `{key}`"),
                    result,
                ));
            }
        }
    }
    if let SessionPhase::Interrupted { interrupt } = &head.phase
        && deeper_than(&interrupt.payload, MAX_VALUE_DEPTH)
    {
        return Err(too_deep(
            &interrupt.step,
            format!("the payload of interrupt {}", interrupt.id),
            &interrupt.payload,
        ));
    }
    for (i, input) in head.queued.iter().enumerate() {
        if deeper_than(input, MAX_VALUE_DEPTH) {
            // Stored as the update of step `$input` when its run starts.
            return Err(too_deep(
                "$input",
                format!("queued run input {}", i + 1),
                input,
            ));
        }
    }
    Ok(())
}

/// Whether `value` nests more than `limit` levels; recurses at most
/// `limit + 1` calls deep, whatever the value.
fn deeper_than(value: &Value, limit: usize) -> bool {
    match value {
        Value::Array(items) => limit == 0 || items.iter().any(|v| deeper_than(v, limit - 1)),
        Value::Object(map) => limit == 0 || map.values().any(|v| deeper_than(v, limit - 1)),
        _ => false,
    }
}

/// How many levels `value` nests, for the error message; iterative, so a
/// value of any depth is measured without deep recursion.
pub(crate) fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(above + 1);
        stack.extend(children.map(|child| (child, above + 1)));
    }
    deepest
}

/// Redacts the secrets the process holds ([`crate::secrets`]) from what a
/// commit's head carries besides the state: the failure message, the
/// interrupt's payload, the step journals (interrupt answers and `once`
/// results). The state and its updates are redacted by the engine as it
/// encodes them, and a run's input by the agent. Does nothing (one atomic
/// load) while no secret is registered.
pub(crate) fn redact_commit(commit: &mut Commit) {
    if !crate::secrets::is_active() {
        return;
    }
    let head = &mut commit.head;
    match &mut head.phase {
        SessionPhase::Failed { error } => {
            crate::secrets::redact_string(error);
        }
        SessionPhase::Interrupted { interrupt } => {
            crate::secrets::redact_json(&mut interrupt.payload);
        }
        SessionPhase::Running | SessionPhase::Completed { .. } => {}
    }
    for journal in std::iter::once(&mut head.journal).chain(head.branch_journals.values_mut()) {
        for value in journal
            .responses
            .iter_mut()
            .chain(journal.once.values_mut())
        {
            crate::secrets::redact_json(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn arrays(levels: usize) -> Value {
        (0..levels).fold(json!(0), |inner, _| Value::Array(vec![inner]))
    }

    #[test]
    fn depth_counts_containers_not_scalars() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!([])), 1);
        assert_eq!(depth(&json!({})), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": []}], "c": 2})), 4);
        assert_eq!(depth(&arrays(500)), 500);
    }

    #[test]
    fn deeper_than_agrees_with_depth_around_the_limit() {
        for levels in [0, 1, 2, 99, 100, 101, 102, 1000] {
            let value = arrays(levels);
            for limit in [0, 1, 100] {
                assert_eq!(
                    deeper_than(&value, limit),
                    levels > limit,
                    "{levels} levels, limit {limit}"
                );
            }
        }
    }

    /// What the stores rely on: `serde_json` reads back the deepest value
    /// allowed inside 27 levels of a store's own records.
    #[test]
    fn serde_json_reads_the_limit_with_room_to_spare() {
        let record = arrays(MAX_VALUE_DEPTH + 27);
        let text = serde_json::to_string(&record).unwrap_or_default();
        let back: Result<Value, _> = serde_json::from_str(&text);
        assert!(back.is_ok(), "{back:?}");
        let record = arrays(128);
        let text = serde_json::to_string(&record).unwrap_or_default();
        assert!(serde_json::from_str::<Value>(&text).is_err());
    }
}
