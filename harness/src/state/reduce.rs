//! The built-in reducers, as traits so that a reducer used on a field of the
//! wrong type is a compile error that names the reducer and the field type.
//!
//! These traits are what `#[derive(HarnessState)]` calls; implement one for
//! your own type to make the matching reducer accept it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

/// `#[field(reduce = append)]`: the update's items are appended.
#[diagnostic::on_unimplemented(
    message = "reducer `append` does not fit a field of type `{Self}`",
    label = "`append` needs a sequence",
    note = "`append` works on Vec<T>, VecDeque<T> and String; use `extend` for maps and sets, \
            or a custom reducer `fn(&mut T, T)`"
)]
pub trait Appendable {
    /// Appends `other`'s items to `self`.
    fn append_from(&mut self, other: Self);
}

impl<T> Appendable for Vec<T> {
    fn append_from(&mut self, mut other: Self) {
        self.append(&mut other);
    }
}

impl<T> Appendable for VecDeque<T> {
    fn append_from(&mut self, mut other: Self) {
        self.append(&mut other);
    }
}

impl Appendable for String {
    fn append_from(&mut self, other: Self) {
        self.push_str(&other);
    }
}

/// `#[field(reduce = extend)]`: entries are inserted, equal keys replaced.
#[diagnostic::on_unimplemented(
    message = "reducer `extend` does not fit a field of type `{Self}`",
    label = "`extend` needs a map or a set",
    note = "`extend` works on HashMap, BTreeMap, HashSet and BTreeSet; use `append` for sequences"
)]
pub trait Extendable {
    /// Inserts every entry of `other` into `self`.
    fn extend_from(&mut self, other: Self);
}

impl<K: Eq + Hash, V, H: BuildHasher> Extendable for HashMap<K, V, H> {
    fn extend_from(&mut self, other: Self) {
        self.extend(other);
    }
}

impl<K: Ord, V> Extendable for BTreeMap<K, V> {
    fn extend_from(&mut self, other: Self) {
        self.extend(other);
    }
}

impl<T: Eq + Hash, H: BuildHasher> Extendable for HashSet<T, H> {
    fn extend_from(&mut self, other: Self) {
        self.extend(other);
    }
}

impl<T: Ord> Extendable for BTreeSet<T> {
    fn extend_from(&mut self, other: Self) {
        self.extend(other);
    }
}

/// `#[field(reduce = add)]`: the update's value is added.
#[diagnostic::on_unimplemented(
    message = "reducer `add` does not fit a field of type `{Self}`",
    label = "`add` needs a number",
    note = "`add` works on the integer and float types and Duration; \
            integers saturate instead of overflowing"
)]
pub trait Addable {
    /// Adds `other` to `self`.
    fn add_from(&mut self, other: Self);
}

macro_rules! addable_int {
    ($($t:ty)*) => {$(
        impl Addable for $t {
            fn add_from(&mut self, other: Self) {
                // A counter in a long-lived session must not panic in debug
                // builds or wrap in release builds.
                *self = self.saturating_add(other);
            }
        }
    )*};
}
addable_int!(i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize);

impl Addable for f32 {
    fn add_from(&mut self, other: Self) {
        *self += other;
    }
}

impl Addable for f64 {
    fn add_from(&mut self, other: Self) {
        *self += other;
    }
}

impl Addable for Duration {
    fn add_from(&mut self, other: Self) {
        *self = self.saturating_add(other);
    }
}

/// `#[field(reduce = max)]` and `#[field(reduce = min)]`.
#[diagnostic::on_unimplemented(
    message = "reducers `max` and `min` do not fit a field of type `{Self}`",
    label = "`max`/`min` need an ordered value",
    note = "`max` and `min` work on numbers, String, char, bool and Duration"
)]
pub trait Comparable {
    /// Keeps the larger of `self` and `other`.
    fn keep_max(&mut self, other: Self);
    /// Keeps the smaller of `self` and `other`.
    fn keep_min(&mut self, other: Self);
}

macro_rules! comparable {
    ($($t:ty)*) => {$(
        impl Comparable for $t {
            fn keep_max(&mut self, other: Self) {
                if other > *self {
                    *self = other;
                }
            }
            fn keep_min(&mut self, other: Self) {
                if other < *self {
                    *self = other;
                }
            }
        }
    )*};
}
comparable!(i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize String char bool Duration);

macro_rules! comparable_float {
    ($($t:ty)*) => {$(
        impl Comparable for $t {
            // NaN never wins, so one bad measurement cannot erase a good one.
            fn keep_max(&mut self, other: Self) {
                if other > *self || self.is_nan() {
                    *self = other;
                }
            }
            fn keep_min(&mut self, other: Self) {
                if other < *self || self.is_nan() {
                    *self = other;
                }
            }
        }
    )*};
}
comparable_float!(f32 f64);

// Token usage adds up, as a state field with `reduce = add` (the `llm`
// module is a leaf, so the impls live here).
impl Addable for crate::llm::Usage {
    fn add_from(&mut self, other: Self) {
        *self += other;
    }
}

impl Addable for crate::llm::UsageByModel {
    fn add_from(&mut self, other: Self) {
        *self += other;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_saturates_instead_of_overflowing() {
        let mut n = u8::MAX - 1;
        n.add_from(5);
        assert_eq!(n, u8::MAX);
    }

    #[test]
    fn float_max_replaces_nan() {
        let mut x = f64::NAN;
        x.keep_max(1.0);
        assert_eq!(x, 1.0);
        x.keep_max(f64::NAN);
        assert_eq!(x, 1.0);
    }

    #[test]
    fn extend_replaces_equal_keys() {
        let mut m = BTreeMap::from([("a", 1), ("b", 2)]);
        m.extend_from(BTreeMap::from([("b", 3), ("c", 4)]));
        assert_eq!(m, BTreeMap::from([("a", 1), ("b", 3), ("c", 4)]));
    }
}
