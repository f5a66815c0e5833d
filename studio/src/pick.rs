//! The JSON of some fields of a state, without serializing the others:
//! what the timeline needs to show what a record changed costs the fields
//! the record wrote, not the whole state (which may grow at every step).

use serde::Serialize;
use serde::ser::{self, Impossible, SerializeStruct, Serializer};
use serde_json::{Map, Value};
use std::fmt;

/// The fields of `value` named in `wanted`, serialized, and those named in
/// `marked`, as `null` (the caller fills them in). A field `value` leaves
/// out (`skip_serializing_if`) is absent.
///
/// `None` when `value` does not serialize as a struct whose every field is
/// one of `known`: a field renamed by serde would not be found by its
/// name, so the caller serializes the whole value instead.
pub(crate) fn fields<T: Serialize + ?Sized>(
    value: &T,
    known: &[&str],
    wanted: &[&str],
    marked: &[&str],
) -> Option<Map<String, Value>> {
    value
        .serialize(Picker {
            known,
            wanted,
            marked,
        })
        .ok()
}

/// Why a value could not be picked from; never shown.
#[derive(Debug)]
struct NotPicked;

impl fmt::Display for NotPicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a struct of known fields")
    }
}

impl std::error::Error for NotPicked {}

impl ser::Error for NotPicked {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NotPicked
    }
}

struct Picker<'a> {
    known: &'a [&'a str],
    wanted: &'a [&'a str],
    marked: &'a [&'a str],
}

struct Fields<'a> {
    picker: Picker<'a>,
    map: Map<String, Value>,
}

impl SerializeStruct for Fields<'_> {
    type Ok = Map<String, Value>;
    type Error = NotPicked;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), NotPicked> {
        if !self.picker.known.contains(&key) {
            return Err(NotPicked);
        }
        if self.picker.wanted.contains(&key) {
            let v = value
                .serialize(serde_json::value::Serializer)
                .map_err(|_| NotPicked)?;
            self.map.insert(key.to_owned(), v);
        } else if self.picker.marked.contains(&key) {
            self.map.insert(key.to_owned(), Value::Null);
        }
        Ok(())
    }

    fn end(self) -> Result<Self::Ok, NotPicked> {
        Ok(self.map)
    }
}

type No = Impossible<Map<String, Value>, NotPicked>;

macro_rules! not_a_struct {
    ($($name:ident($($arg:ty),*)),* $(,)?) => {
        $(fn $name(self, $(_: $arg),*) -> Result<Self::Ok, NotPicked> {
            Err(NotPicked)
        })*
    };
}

impl<'a> Serializer for Picker<'a> {
    type Ok = Map<String, Value>;
    type Error = NotPicked;
    type SerializeSeq = No;
    type SerializeTuple = No;
    type SerializeTupleStruct = No;
    type SerializeTupleVariant = No;
    type SerializeMap = No;
    type SerializeStruct = Fields<'a>;
    type SerializeStructVariant = No;

    not_a_struct!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    );

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<Self::Ok, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Self::Ok, NotPicked> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Self::Ok, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<No, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_tuple(self, _: usize) -> Result<No, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<No, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<No, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<No, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields<'a>, NotPicked> {
        Ok(Fields {
            picker: self,
            map: Map::new(),
        })
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<No, NotPicked> {
        Err(NotPicked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static SERIALIZED: AtomicUsize = AtomicUsize::new(0);

    /// Counts its own serializations.
    struct Big;

    impl Serialize for Big {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            SERIALIZED.fetch_add(1, Ordering::SeqCst);
            s.serialize_str("big")
        }
    }

    #[derive(Serialize)]
    struct State {
        n: u32,
        big: Big,
        log: Vec<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        maybe: Option<u32>,
    }

    const KNOWN: &[&str] = &["n", "big", "log", "maybe"];

    #[test]
    fn only_the_wanted_fields_are_serialized() {
        let s = State {
            n: 3,
            big: Big,
            log: vec![1, 2],
            maybe: None,
        };
        let before = SERIALIZED.load(Ordering::SeqCst);
        let m = fields(&s, KNOWN, &["n", "maybe"], &["log"]).unwrap();
        assert_eq!(SERIALIZED.load(Ordering::SeqCst), before, "big untouched");
        assert_eq!(Value::Object(m.clone()), json!({"n": 3, "log": null}));
        let m = fields(&s, KNOWN, &["big"], &[]).unwrap();
        assert_eq!(Value::Object(m), json!({"big": "big"}));
    }

    #[test]
    fn a_value_that_is_not_a_struct_of_known_fields_is_not_picked() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Renamed {
            my_field: u32,
        }
        assert!(fields(&Renamed { my_field: 1 }, &["my_field"], &["my_field"], &[]).is_none());
        assert!(fields(&json!({"a": 1}), &["a"], &["a"], &[]).is_none());
        assert!(fields(&3, &[], &[], &[]).is_none());
    }
}
