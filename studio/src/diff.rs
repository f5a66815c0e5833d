//! The change a checkpoint made to the state, as a list of paths.

use serde::Serialize;
use serde_json::Value;

/// One changed place in the state.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Change {
    /// Where: `/field/0/name` (a JSON pointer).
    pub(crate) path: String,
    /// `added`, `removed`, `changed` or `appended` (items added at the end
    /// of an array).
    pub(crate) op: &'static str,
    /// The value before (absent when added or appended).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) before: Option<Value>,
    /// The value after (absent when removed); the new items when appended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) after: Option<Value>,
}

/// The changes from `before` to `after`, in document order.
pub(crate) fn diff(before: &Value, after: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    walk(&mut String::new(), before, after, &mut out);
    out
}

fn pointer_part(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn walk(path: &mut String, before: &Value, after: &Value, out: &mut Vec<Change>) {
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
                    None => out.push(Change {
                        path: path.clone(),
                        op: "removed",
                        before: Some(bv.clone()),
                        after: None,
                    }),
                }
                path.truncate(len);
            }
            for (k, av) in a {
                if !b.contains_key(k) {
                    out.push(Change {
                        path: format!("{path}/{}", pointer_part(k)),
                        op: "added",
                        before: None,
                        after: Some(av.clone()),
                    });
                }
            }
        }
        (Value::Array(b), Value::Array(a)) if a.len() > b.len() && a[..b.len()] == b[..] => {
            out.push(Change {
                path: path.clone(),
                op: "appended",
                before: None,
                after: Some(Value::Array(a[b.len()..].to_vec())),
            });
        }
        _ => out.push(Change {
            path: if path.is_empty() {
                "/".into()
            } else {
                path.clone()
            },
            op: "changed",
            before: Some(before.clone()),
            after: Some(after.clone()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_of_change_is_named_with_its_path() {
        let before = json!({"n": 1, "log": ["a"], "gone": true, "deep": {"x/y": 1}, "same": [1]});
        let after =
            json!({"n": 2, "log": ["a", "b", "c"], "new": null, "deep": {"x/y": 2}, "same": [1]});
        let d = diff(&before, &after);
        let mut summary: Vec<_> = d.iter().map(|c| (c.path.as_str(), c.op)).collect();
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
        let at = |p: &str| d.iter().find(|c| c.path == p).expect(p);
        assert_eq!(at("/log").after, Some(json!(["b", "c"])));
        assert_eq!(at("/n").before, Some(json!(1)));
        assert_eq!(at("/gone").after, None);
    }

    #[test]
    fn equal_states_have_no_changes_and_a_replaced_root_is_one() {
        assert!(diff(&json!({"a": [1, 2]}), &json!({"a": [1, 2]})).is_empty());
        let d = diff(&json!([1, 2]), &json!([2]));
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].path.as_str(), d[0].op), ("/", "changed"));
    }
}
