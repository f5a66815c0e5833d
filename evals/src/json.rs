//! A value's JSON form, or why it has none.
//!
//! `serde_json::to_value` turns a NaN or an infinite float into `null`
//! without a word, and refuses a map whose keys are not strings or numbers
//! with a message that does not say where. A report or an evaluator that
//! took `null` for such a value would record, compare and score something
//! the task never returned. So a value is first walked by [`Check`], which
//! refuses both and names the place (a JSON pointer into the value), then
//! converted.

use std::fmt;

use serde::Serialize;
use serde::ser::{self, SerializeMap as _};
use serde_json::Value;

/// `value` as JSON, or a sentence saying why it has no JSON form and where:
/// a float that is NaN or infinite, a map key that is not a string or a
/// number, or an error of the value's own `Serialize`.
pub(crate) fn json_form<T: Serialize + ?Sized>(value: &T) -> Result<Value, String> {
    value.serialize(&mut Check::default()).map_err(|e| e.0)?;
    serde_json::to_value(value).map_err(|e| format!("it cannot be written as JSON: {e}"))
}

/// `value` as compact JSON text (its fields in the order it writes them),
/// or why it has none, as [`json_form`] says.
pub(crate) fn json_text<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
    value.serialize(&mut Check::default()).map_err(|e| e.0)?;
    serde_json::to_string(value).map_err(|e| format!("it cannot be written as JSON: {e}"))
}

/// Walks a value as `serde_json` would write it, keeping the JSON pointer
/// of the current place.
#[derive(Default)]
struct Check {
    path: String,
}

/// Why a value has no JSON form.
#[derive(Debug)]
struct NoJson(String);

impl fmt::Display for NoJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoJson {}

impl ser::Error for NoJson {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self(format!("it cannot be written as JSON: {message}"))
    }
}

impl Check {
    fn place(&self) -> String {
        if self.path.is_empty() {
            "the value".to_owned()
        } else {
            format!("the value at `{}`", self.path)
        }
    }

    fn float(&self, value: f64) -> Result<(), NoJson> {
        if value.is_finite() {
            return Ok(());
        }
        let what = if value.is_nan() { "NaN" } else { "infinite" };
        Err(NoJson(format!(
            "{} is {what}, which JSON cannot hold",
            self.place()
        )))
    }

    /// Appends a segment to the path; returns the length to restore.
    fn enter(&mut self, segment: &str) -> usize {
        let restore = self.path.len();
        self.path.push('/');
        for c in segment.chars() {
            match c {
                '~' => self.path.push_str("~0"),
                '/' => self.path.push_str("~1"),
                c => self.path.push(c),
            }
        }
        restore
    }

    fn nested<T: Serialize + ?Sized>(&mut self, segment: &str, value: &T) -> Result<(), NoJson> {
        let restore = self.enter(segment);
        let checked = value.serialize(&mut *self);
        self.path.truncate(restore);
        checked
    }
}

/// A sequence, a tuple or a tuple variant's fields.
struct Items<'a> {
    check: &'a mut Check,
    index: usize,
    restore: usize,
}

impl Items<'_> {
    fn item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NoJson> {
        let checked = self.check.nested(&self.index.to_string(), value);
        self.index += 1;
        checked
    }

    fn done(self) -> Result<(), NoJson> {
        self.check.path.truncate(self.restore);
        Ok(())
    }
}

impl ser::SerializeSeq for Items<'_> {
    type Ok = ();
    type Error = NoJson;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NoJson> {
        self.item(value)
    }
    fn end(self) -> Result<(), NoJson> {
        self.done()
    }
}

impl ser::SerializeTuple for Items<'_> {
    type Ok = ();
    type Error = NoJson;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NoJson> {
        self.item(value)
    }
    fn end(self) -> Result<(), NoJson> {
        self.done()
    }
}

impl ser::SerializeTupleStruct for Items<'_> {
    type Ok = ();
    type Error = NoJson;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NoJson> {
        self.item(value)
    }
    fn end(self) -> Result<(), NoJson> {
        self.done()
    }
}

impl ser::SerializeTupleVariant for Items<'_> {
    type Ok = ();
    type Error = NoJson;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NoJson> {
        self.item(value)
    }
    fn end(self) -> Result<(), NoJson> {
        self.done()
    }
}

/// A struct's or a struct variant's fields.
struct Fields<'a> {
    check: &'a mut Check,
    restore: usize,
}

impl ser::SerializeStruct for Fields<'_> {
    type Ok = ();
    type Error = NoJson;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), NoJson> {
        self.check.nested(key, value)
    }
    fn end(self) -> Result<(), NoJson> {
        self.check.path.truncate(self.restore);
        Ok(())
    }
}

impl ser::SerializeStructVariant for Fields<'_> {
    type Ok = ();
    type Error = NoJson;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), NoJson> {
        self.check.nested(key, value)
    }
    fn end(self) -> Result<(), NoJson> {
        self.check.path.truncate(self.restore);
        Ok(())
    }
}

/// A map's entries: each key is written as `serde_json` writes a key (a
/// string, or a number or a bool as a string), which also names the place
/// of its value.
struct Entries<'a> {
    check: &'a mut Check,
    key: String,
}

/// A map of one entry, `key: null`, to learn from `serde_json` how it
/// writes `key`, or that it cannot.
struct KeyProbe<'a, T: ?Sized>(&'a T);

impl<T: Serialize + ?Sized> Serialize for KeyProbe<'_, T> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(self.0, &())?;
        map.end()
    }
}

impl ser::SerializeMap for Entries<'_> {
    type Ok = ();
    type Error = NoJson;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), NoJson> {
        match serde_json::to_value(KeyProbe(key)) {
            Ok(Value::Object(map)) => {
                self.key = map.keys().next().cloned().unwrap_or_default();
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(NoJson(format!(
                "{} is a map with a key JSON cannot hold ({e}); a JSON object's keys are strings",
                self.check.place()
            ))),
        }
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), NoJson> {
        let key = std::mem::take(&mut self.key);
        self.check.nested(&key, value)
    }
    fn end(self) -> Result<(), NoJson> {
        Ok(())
    }
}

impl<'a> ser::Serializer for &'a mut Check {
    type Ok = ();
    type Error = NoJson;
    type SerializeSeq = Items<'a>;
    type SerializeTuple = Items<'a>;
    type SerializeTupleStruct = Items<'a>;
    type SerializeTupleVariant = Items<'a>;
    type SerializeMap = Entries<'a>;
    type SerializeStruct = Fields<'a>;
    type SerializeStructVariant = Fields<'a>;

    fn serialize_bool(self, _: bool) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_f32(self, value: f32) -> Result<(), NoJson> {
        self.float(f64::from(value))
    }
    fn serialize_f64(self, value: f64) -> Result<(), NoJson> {
        self.float(value)
    }
    fn serialize_char(self, _: char) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), NoJson> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), NoJson> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), NoJson> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), NoJson> {
        self.nested(variant, value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Items<'a>, NoJson> {
        let restore = self.path.len();
        Ok(Items {
            check: self,
            index: 0,
            restore,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Items<'a>, NoJson> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Items<'a>, NoJson> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Items<'a>, NoJson> {
        let restore = self.enter(variant);
        Ok(Items {
            check: self,
            index: 0,
            restore,
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Entries<'a>, NoJson> {
        Ok(Entries {
            check: self,
            key: String::new(),
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields<'a>, NoJson> {
        let restore = self.path.len();
        Ok(Fields {
            check: self,
            restore,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Fields<'a>, NoJson> {
        let restore = self.enter(variant);
        Ok(Fields {
            check: self,
            restore,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde_json::json;

    use super::json_form;

    #[derive(serde::Serialize)]
    struct Point {
        x: f64,
        tags: Vec<f32>,
    }

    #[derive(serde::Serialize)]
    enum Shape {
        Circle { radius: f64 },
        Pair(f64, f64),
    }

    #[test]
    fn values_with_a_json_form_convert_as_serde_json_converts_them() {
        assert_eq!(json_form(&1.5).unwrap(), json!(1.5));
        let mut map = BTreeMap::new();
        map.insert(3_u8, "three");
        assert_eq!(json_form(&map).unwrap(), json!({"3": "three"}));
        assert_eq!(
            json_form(&Shape::Pair(1.0, 2.0)).unwrap(),
            json!({"Pair": [1.0, 2.0]})
        );
        assert_eq!(json_form(&Option::<f64>::None).unwrap(), json!(null));
    }

    #[test]
    fn a_float_json_cannot_hold_is_named_with_its_place() {
        let cases: Vec<(String, &str)> = vec![
            (json_form(&f64::NAN).unwrap_err(), "the value is NaN"),
            (
                json_form(&f64::INFINITY).unwrap_err(),
                "the value is infinite",
            ),
            (
                json_form(&vec![1.0, f64::NEG_INFINITY]).unwrap_err(),
                "the value at `/1` is infinite",
            ),
            (
                json_form(&Point {
                    x: 1.0,
                    tags: vec![0.5, f32::NAN],
                })
                .unwrap_err(),
                "the value at `/tags/1` is NaN",
            ),
            (
                json_form(&Shape::Circle { radius: f64::NAN }).unwrap_err(),
                "the value at `/Circle/radius` is NaN",
            ),
            (
                json_form(&HashMap::from([("a/b", Some(f64::NAN))])).unwrap_err(),
                "the value at `/a~1b` is NaN",
            ),
        ];
        for (error, want) in cases {
            assert!(
                error.starts_with(want),
                "{error:?} should start with {want:?}"
            );
            assert!(error.ends_with("which JSON cannot hold"), "{error}");
        }
    }

    #[test]
    fn a_map_key_json_cannot_hold_is_named_with_its_place() {
        let tuple_keys = BTreeMap::from([((1_u8, 2_u8), "v")]);
        let nested = BTreeMap::from([("outer", BTreeMap::from([(vec![1], 1)]))]);
        let nan_key = vec![BTreeMap::from([(ordered(f64::NAN), 1)])];
        for (error, place) in [
            (json_form(&tuple_keys).unwrap_err(), "the value is a map"),
            (
                json_form(&nested).unwrap_err(),
                "the value at `/outer` is a map",
            ),
            (
                json_form(&nan_key).unwrap_err(),
                "the value at `/0` is a map",
            ),
        ] {
            assert!(
                error.starts_with(place),
                "{error:?} should start with {place:?}"
            );
            assert!(error.contains("a key JSON cannot hold"), "{error}");
        }
    }

    /// A float that can be a `BTreeMap` key.
    fn ordered(value: f64) -> Ordered {
        Ordered(value)
    }

    #[derive(serde::Serialize)]
    struct Ordered(f64);
    impl PartialEq for Ordered {
        fn eq(&self, other: &Self) -> bool {
            self.cmp(other).is_eq()
        }
    }
    impl Eq for Ordered {}
    impl PartialOrd for Ordered {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Ordered {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&other.0)
        }
    }
}
