//! The change a checkpoint made to the state, as a list of paths, each
//! value bounded: a state may hold anything a model wrote, as large as it
//! wrote it, and the timeline sends a page of these at a time.

use serde::Serialize;
use serde_json::Value;

/// How much a list of changes may carry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    /// The most bytes of a value before or after, as compact JSON: a larger
    /// one is sent as a [`Cut`].
    pub(crate) value_bytes: usize,
    /// The most changes listed; the others are only counted.
    pub(crate) changes: usize,
}

/// A value too large to send whole: the beginning of its compact JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Cut {
    /// At most the bound's bytes, cut at a character's boundary.
    pub(crate) preview: String,
    /// The whole value's size, as compact JSON.
    pub(crate) bytes: usize,
}

/// One changed place in the state.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Change {
    /// Where: `/field/0/name` (a JSON pointer).
    pub(crate) path: String,
    /// `added`, `removed`, `changed` or `appended` (items added at the end
    /// of an array).
    pub(crate) op: &'static str,
    /// The value before (absent when added or appended, or cut).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) before: Option<Value>,
    /// The value after (absent when removed, or cut); the new items when
    /// appended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) after: Option<Value>,
    /// The value before, when too large to send whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) before_cut: Option<Cut>,
    /// The value after, when too large to send whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) after_cut: Option<Cut>,
}

/// The changes listed, and how many more there are.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Changes {
    pub(crate) list: Vec<Change>,
    /// Changes past the bound, left out.
    pub(crate) more: usize,
}

/// The changes from `before` to `after`, in document order, within `bound`.
pub(crate) fn diff(before: &Value, after: &Value, bound: Bound) -> Changes {
    let mut out = Out {
        bound,
        changes: Changes::default(),
    };
    walk(&mut String::new(), before, after, &mut out);
    out.changes
}

/// `value` whole when its compact JSON is at most `max` bytes, else the
/// beginning of that JSON. Only the kept bytes are held: a large value is
/// measured, not copied.
pub(crate) fn bounded<T: Serialize + ?Sized>(value: &T, max: usize) -> Result<Value, Cut> {
    let mut w = Prefix {
        kept: Vec::new(),
        max,
        bytes: 0,
    };
    // Writing to `Prefix` cannot fail; a value that cannot be serialized
    // (a map with keys that are not strings) is sent as null.
    if serde_json::to_writer(&mut w, value).is_err() {
        return Ok(Value::Null);
    }
    if w.bytes <= max {
        return Ok(serde_json::to_value(value).unwrap_or_default());
    }
    let preview = match std::str::from_utf8(&w.kept) {
        Ok(text) => text.to_owned(),
        Err(e) => String::from_utf8_lossy(&w.kept[..e.valid_up_to()]).into_owned(),
    };
    Err(Cut {
        preview,
        bytes: w.bytes,
    })
}

/// A writer keeping the first `max` bytes and counting them all.
struct Prefix {
    kept: Vec<u8>,
    max: usize,
    bytes: usize,
}

impl std::io::Write for Prefix {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.max.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&buf[..room.min(buf.len())]);
        self.bytes += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Out {
    bound: Bound,
    changes: Changes,
}

impl Out {
    fn push<B: Serialize + ?Sized, A: Serialize + ?Sized>(
        &mut self,
        path: String,
        op: &'static str,
        before: Option<&B>,
        after: Option<&A>,
    ) {
        if self.changes.list.len() >= self.bound.changes {
            self.changes.more += 1;
            return;
        }
        let max = self.bound.value_bytes;
        let (before, before_cut) = split(before.map(|v| bounded(v, max)));
        let (after, after_cut) = split(after.map(|v| bounded(v, max)));
        self.changes.list.push(Change {
            path,
            op,
            before,
            after,
            before_cut,
            after_cut,
        });
    }
}

fn split(v: Option<Result<Value, Cut>>) -> (Option<Value>, Option<Cut>) {
    match v {
        None => (None, None),
        Some(Ok(v)) => (Some(v), None),
        Some(Err(cut)) => (None, Some(cut)),
    }
}

fn pointer_part(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn walk(path: &mut String, before: &Value, after: &Value, out: &mut Out) {
    if before == after {
        return;
    }
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, bv) in b {
                let len = path.len();
                path.push('/');
                path.push_str(&pointer_part(k));
                match a.get(k) {
                    Some(av) => walk(path, bv, av, out),
                    None => out.push(path.clone(), "removed", Some(bv), None::<&Value>),
                }
                path.truncate(len);
            }
            for (k, av) in a {
                if !b.contains_key(k) {
                    out.push(
                        format!("{path}/{}", pointer_part(k)),
                        "added",
                        None::<&Value>,
                        Some(av),
                    );
                }
            }
        }
        (Value::Array(b), Value::Array(a)) if a.len() > b.len() && a[..b.len()] == b[..] => {
            out.push(
                path.clone(),
                "appended",
                None::<&Value>,
                Some(&a[b.len()..]),
            );
        }
        _ => out.push(
            if path.is_empty() {
                "/".into()
            } else {
                path.clone()
            },
            "changed",
            Some(before),
            Some(after),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WIDE: Bound = Bound {
        value_bytes: usize::MAX,
        changes: usize::MAX,
    };

    #[test]
    fn each_kind_of_change_is_named_with_its_path() {
        let before = json!({"n": 1, "log": ["a"], "gone": true, "deep": {"x/y": 1}, "same": [1]});
        let after =
            json!({"n": 2, "log": ["a", "b", "c"], "new": null, "deep": {"x/y": 2}, "same": [1]});
        let d = diff(&before, &after, WIDE);
        assert_eq!(d.more, 0);
        let mut summary: Vec<_> = d.list.iter().map(|c| (c.path.as_str(), c.op)).collect();
        summary.sort();
        assert_eq!(
            summary,
            [
                ("/deep/x~1y", "changed"),
                ("/gone", "removed"),
                ("/log", "appended"),
                ("/n", "changed"),
                ("/new", "added"),
            ]
        );
        let at = |p: &str| d.list.iter().find(|c| c.path == p).expect(p);
        assert_eq!(at("/log").after, Some(json!(["b", "c"])));
        assert_eq!(at("/n").before, Some(json!(1)));
        assert_eq!(at("/gone").after, None);
    }

    #[test]
    fn equal_states_have_no_changes_and_a_replaced_root_is_one() {
        assert!(
            diff(&json!({"a": [1, 2]}), &json!({"a": [1, 2]}), WIDE)
                .list
                .is_empty()
        );
        let d = diff(&json!([1, 2]), &json!([2]), WIDE).list;
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].path.as_str(), d[0].op), ("/", "changed"));
    }

    #[test]
    fn a_large_value_is_cut_at_a_character_and_changes_past_the_bound_are_counted() {
        let bound = Bound {
            value_bytes: 10,
            changes: 2,
        };
        let before = json!({"a": "short", "b": 1, "c": 1, "d": 1});
        let after = json!({"a": "ééééééééé", "b": 2, "c": 2, "d": 2});
        let d = diff(&before, &after, bound);
        assert_eq!((d.list.len(), d.more), (2, 2));
        let a = &d.list[0];
        assert_eq!(a.before, Some(json!("short")));
        assert!(a.after.is_none());
        // `"` then four two-byte characters: ten bytes would split the fifth.
        assert_eq!(
            a.after_cut,
            Some(Cut {
                preview: "\"éééé".into(),
                bytes: 20
            })
        );
        let json = serde_json::to_value(a).unwrap();
        assert!(json.get("after").is_none() && json.get("before_cut").is_none());
        let appended = diff(
            &json!(["x"]),
            &json!(["x", "a long item", "another"]),
            bound,
        );
        assert_eq!(appended.list[0].op, "appended");
        assert_eq!(appended.list[0].after_cut.as_ref().unwrap().bytes, 25);
    }
}
