//! A JSON document cut to a bounded size, with a list of what was cut and
//! where: a session's state holds whatever its steps and models wrote, as
//! large as they wrote it, and the studio sends it to a browser.
//!
//! A document within [`DOCUMENT_BYTES`] of compact JSON is sent whole.
//! A larger one is walked from its root: a value within [`VALUE_BYTES`]
//! is kept whole; a larger array or object is opened and its first
//! [`ENTRIES`] entries are walked (the rest counted); a larger string or
//! number, or a value nested deeper than [`DEPTH`], is replaced by `null`
//! and listed with the beginning of its JSON and its size. Once
//! [`DOCUMENT_BYTES`] have been kept, the entries left are counted, not
//! walked. Every cut is listed by its JSON pointer in the whole document,
//! so that a client can ask for the value there ([`at`]), and for an array
//! or object the entries from an offset.
//!
//! Only the kept bytes are copied: a value is measured by writing it to a
//! counter that stops at the bound, so deciding costs the bound, not the
//! value.

use serde::Serialize;
use serde_json::{Map, Value};

/// The most bytes of compact JSON a document is sent whole at, and about
/// the most a cut one keeps.
pub(crate) const DOCUMENT_BYTES: usize = 256 * 1024;

/// The most bytes a value of a cut document is kept whole at (the
/// timeline's bound), and the length of a cut value's preview.
pub(crate) const VALUE_BYTES: usize = 2048;

/// The most entries of one array or object a cut document keeps.
pub(crate) const ENTRIES: usize = 100;

/// The deepest a cut document is opened: a value below is cut whole.
pub(crate) const DEPTH: usize = 32;

/// What was left out of a document, and where.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Cut {
    /// A value replaced by `null`: a string or number larger than the
    /// bound, or a value nested too deep.
    Value {
        /// Where it is: a JSON pointer in the whole document.
        pointer: String,
        /// The beginning of its compact JSON, cut at a character.
        preview: String,
        /// Its size as compact JSON.
        bytes: usize,
    },
    /// An array or object of which only some entries are sent: those from
    /// `offset` (in its order), `kept` of them.
    Entries {
        /// Where it is: a JSON pointer in the whole document.
        pointer: String,
        /// The position of the first entry sent.
        offset: usize,
        /// How many are sent.
        kept: usize,
        /// How many it has.
        total: usize,
    },
}

/// A document, bounded: `value` with what was cut replaced or left out,
/// and `cuts` saying what and where.
#[derive(Debug)]
pub(crate) struct Trimmed {
    pub(crate) value: Value,
    pub(crate) cuts: Vec<Cut>,
}

/// `document` whole when within [`DOCUMENT_BYTES`], else cut as the
/// [module](self) says.
pub(crate) fn document(document: Value) -> Trimmed {
    if fits(&document, DOCUMENT_BYTES).is_some() {
        return Trimmed {
            value: document,
            cuts: Vec::new(),
        };
    }
    Walk::new(VALUE_BYTES).run(document, String::new(), 0)
}

/// Why [`at`] sends nothing.
#[derive(Debug, PartialEq)]
pub(crate) enum Missing {
    /// No value at the pointer.
    Pointer,
    /// An offset into a value that is no array or object, or past its
    /// entries (how many it has, if any).
    Offset(Option<usize>),
}

/// The value at `pointer` in `document`, bounded as a document is; with
/// `offset`, an array's or object's entries from there (as many as a
/// document keeps). A string or number at the pointer is previewed up to
/// [`DOCUMENT_BYTES`], not [`VALUE_BYTES`]. The cuts' pointers are in the
/// whole document.
pub(crate) fn at(
    mut document: Value,
    pointer: &str,
    offset: Option<usize>,
) -> Result<Trimmed, Missing> {
    let value = document
        .pointer_mut(pointer)
        .map(Value::take)
        .ok_or(Missing::Pointer)?;
    let offset = match (offset, &value) {
        (None, _) => {
            if fits(&value, DOCUMENT_BYTES).is_some() {
                return Ok(Trimmed {
                    value,
                    cuts: Vec::new(),
                });
            }
            0
        }
        (Some(n), Value::Array(items)) if n <= items.len() => n,
        (Some(n), Value::Object(map)) if n <= map.len() => n,
        (Some(_), Value::Array(items)) => return Err(Missing::Offset(Some(items.len()))),
        (Some(_), Value::Object(map)) => return Err(Missing::Offset(Some(map.len()))),
        (Some(_), _) => return Err(Missing::Offset(None)),
    };
    Ok(Walk::new(DOCUMENT_BYTES).run(value, pointer.to_owned(), offset))
}

/// `name` as a JSON pointer's segment (`~` as `~0`, `/` as `~1`).
fn push_segment(pointer: &mut String, name: &str) {
    pointer.push('/');
    for c in name.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

/// The size of `value` as compact JSON when at most `max` bytes; writing
/// stops past `max`.
fn fits(value: &Value, max: usize) -> Option<usize> {
    let mut counter = Counter { bytes: 0, max };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.bytes)
}

/// Counts bytes written, failing past `max`.
struct Counter {
    bytes: usize,
    max: usize,
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len();
        if self.bytes > self.max {
            return Err(std::io::Error::other("past the bound"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A walk down a document, keeping at most [`DOCUMENT_BYTES`].
struct Walk {
    /// How much of a string or number at the root is previewed.
    root_preview: usize,
    /// Bytes kept so far, about (values, keys, cuts).
    spent: usize,
    cuts: Vec<Cut>,
}

impl Walk {
    fn new(root_preview: usize) -> Self {
        Walk {
            root_preview,
            spent: 0,
            cuts: Vec::new(),
        }
    }

    /// Walks `value`, found at `pointer`; an array's or object's entries
    /// from `offset`.
    fn run(mut self, value: Value, mut pointer: String, offset: usize) -> Trimmed {
        let value = match value {
            Value::Array(_) | Value::Object(_) => self.open(value, &mut pointer, 0, offset),
            leaf => self.cut(&leaf, &pointer, self.root_preview),
        };
        Trimmed {
            value,
            cuts: self.cuts,
        }
    }

    fn walk(&mut self, value: Value, pointer: &mut String, depth: usize) -> Value {
        if let Some(bytes) = fits(&value, VALUE_BYTES) {
            self.spent += bytes;
            return value;
        }
        match value {
            Value::Array(_) | Value::Object(_) if depth < DEPTH => {
                self.open(value, pointer, depth, 0)
            }
            other => self.cut(&other, pointer, VALUE_BYTES),
        }
    }

    /// `null`, listing `value` as cut with a preview of `preview` bytes.
    fn cut(&mut self, value: &Value, pointer: &str, preview: usize) -> Value {
        let (preview, bytes) = match crate::diff::bounded(value, preview) {
            Err(cut) => (cut.preview, cut.bytes),
            // Within the preview's bound (a value nested too deep, small).
            Ok(whole) => {
                let text = whole.to_string();
                let bytes = text.len();
                (text, bytes)
            }
        };
        self.spent += preview.len() + pointer.len() + 64;
        self.cuts.push(Cut::Value {
            pointer: pointer.to_owned(),
            preview,
            bytes,
        });
        Value::Null
    }

    /// An array or object with its entries from `offset` walked, as many
    /// as the bounds allow.
    fn open(&mut self, value: Value, pointer: &mut String, depth: usize, offset: usize) -> Value {
        let len = pointer.len();
        let (value, total, kept) = match value {
            Value::Array(items) => {
                let total = items.len();
                let mut out = Vec::new();
                for (i, item) in items.into_iter().enumerate().skip(offset) {
                    if out.len() == ENTRIES || self.spent >= DOCUMENT_BYTES {
                        break;
                    }
                    push_segment(pointer, &i.to_string());
                    out.push(self.walk(item, pointer, depth + 1));
                    pointer.truncate(len);
                    self.spent += 1;
                }
                let kept = out.len();
                (Value::Array(out), total, kept)
            }
            Value::Object(map) => {
                let total = map.len();
                let mut out = Map::new();
                for (key, item) in map.into_iter().skip(offset) {
                    if out.len() == ENTRIES || self.spent >= DOCUMENT_BYTES {
                        break;
                    }
                    push_segment(pointer, &key);
                    let item = self.walk(item, pointer, depth + 1);
                    pointer.truncate(len);
                    self.spent += key.len() + 4;
                    out.insert(key, item);
                }
                let kept = out.len();
                (Value::Object(out), total, kept)
            }
            leaf => return leaf,
        };
        if offset > 0 || kept < total {
            self.spent += pointer.len() + 64;
            self.cuts.push(Cut::Entries {
                pointer: pointer.clone(),
                offset,
                kept,
                total,
            });
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_small_document_is_whole() {
        let doc = json!({"state": {"log": ["a", "b"], "n": 1}});
        let t = document(doc.clone());
        assert_eq!(t.value, doc);
        assert!(t.cuts.is_empty());
    }

    #[test]
    fn a_large_string_is_cut_and_listed_by_its_pointer() {
        let big = "x".repeat(DOCUMENT_BYTES + 10);
        let doc = json!({"state": {"a/b": big, "n": 1}});
        let t = document(doc);
        assert_eq!(t.value, json!({"state": {"a/b": null, "n": 1}}));
        let [
            Cut::Value {
                pointer,
                preview,
                bytes,
            },
        ] = t.cuts.as_slice()
        else {
            panic!("{:?}", t.cuts)
        };
        assert_eq!(pointer, "/state/a~1b");
        assert_eq!(preview.len(), VALUE_BYTES);
        assert_eq!(*bytes, DOCUMENT_BYTES + 12);
    }

    #[test]
    fn a_long_array_keeps_its_first_entries_and_the_rest_by_offset() {
        let items: Vec<String> = (0..5000).map(|i| format!("{i:0>100}")).collect();
        let doc = json!({"state": {"log": items}});
        let t = document(doc.clone());
        assert_eq!(t.value["state"]["log"].as_array().unwrap().len(), ENTRIES);
        assert_eq!(
            t.cuts,
            [Cut::Entries {
                pointer: "/state/log".into(),
                offset: 0,
                kept: ENTRIES,
                total: 5000,
            }]
        );
        let tail = at(doc.clone(), "/state/log", Some(4950)).unwrap();
        assert_eq!(tail.value.as_array().unwrap().len(), 50);
        assert_eq!(tail.value[0], json!(items[4950]));
        assert_eq!(
            tail.cuts,
            [Cut::Entries {
                pointer: "/state/log".into(),
                offset: 4950,
                kept: 50,
                total: 5000,
            }]
        );
        assert_eq!(
            at(doc.clone(), "/state/nope", None).unwrap_err(),
            Missing::Pointer
        );
        assert_eq!(
            at(doc.clone(), "/state/log", Some(5001)).unwrap_err(),
            Missing::Offset(Some(5000))
        );
        assert_eq!(
            at(doc, "/state/log/0", Some(1)).unwrap_err(),
            Missing::Offset(None)
        );
    }

    #[test]
    fn a_cut_document_stays_near_its_bound_however_wide_or_deep() {
        // Many fields each just over the value bound, in many objects.
        let field = "y".repeat(VALUE_BYTES);
        let wide: Map<String, Value> = (0..60)
            .map(|i| {
                let inner: Map<String, Value> =
                    (0..60).map(|j| (format!("f{j}"), json!(field))).collect();
                (format!("o{i}"), Value::Object(inner))
            })
            .collect();
        let t = document(json!({ "state": wide }));
        let sent = serde_json::to_string(&t.value).unwrap().len()
            + serde_json::to_string(&t.cuts).unwrap().len();
        assert!(sent < DOCUMENT_BYTES + 16 * 1024, "{sent}");
        // A value nested past the depth is cut whole.
        let mut deep = json!("x".repeat(VALUE_BYTES));
        for _ in 0..(DEPTH + 5) {
            deep = json!([deep]);
        }
        let t = document(json!({ "d": deep, "pad": "z".repeat(DOCUMENT_BYTES) }));
        assert!(
            t.cuts.iter().any(
                |c| matches!(c, Cut::Value { pointer, .. } if pointer.matches('/').count() == DEPTH)
            ),
            "{:?}",
            t.cuts
        );
    }

    #[test]
    fn a_string_asked_for_by_its_pointer_is_previewed_up_to_the_document_bound() {
        let big = "é".repeat(DOCUMENT_BYTES);
        let doc = json!({"state": {"text": big}});
        let t = at(doc, "/state/text", None).unwrap();
        assert_eq!(t.value, Value::Null);
        let [Cut::Value { preview, bytes, .. }] = t.cuts.as_slice() else {
            panic!("{:?}", t.cuts)
        };
        assert!(preview.len() > DOCUMENT_BYTES - 4 && preview.len() <= DOCUMENT_BYTES);
        assert_eq!(*bytes, 2 * DOCUMENT_BYTES + 2);
    }
}
