//! Typed loop state: the [`HarnessState`] trait that `#[derive(HarnessState)]`
//! implements, and the built-in reducers in [`reduce`].
//!
//! A state is a struct whose fields each have a default and a reducer. A step
//! never mutates the state: it returns a partial update (the generated
//! `<Name>Update` type, one optional value per field) and the harness merges
//! it through the reducers. That makes every change to the state a value that
//! can be observed, streamed and stored.
//!
//! ```
//! use harness::{HarnessState, JsonSchema, schemars};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
//! struct Chat {
//!     /// Messages so far; an update's messages are appended.
//!     #[field(reduce = append)]
//!     messages: Vec<String>,
//!     /// Turns taken; an update's value is added.
//!     #[field(reduce = add)]
//!     turns: u32,
//!     /// The model to use; an update replaces it.
//!     #[field(default = "small".to_string())]
//!     model: String,
//! }
//!
//! let mut chat = Chat::default();
//! assert_eq!(chat.model, "small");
//! chat.apply(ChatUpdate::new().messages(vec!["hi".into()]).turns(1));
//! chat.apply(ChatUpdate::new().messages(vec!["hello".into()]).turns(1).model("large"));
//! assert_eq!(chat.messages, ["hi", "hello"]);
//! assert_eq!(chat.turns, 2);
//! assert_eq!(chat.model, "large");
//! ```
//!
//! # Reducers
//!
//! | attribute | field types | effect |
//! |---|---|---|
//! | (none) or `reduce = replace` | any | the update's value replaces the field |
//! | `reduce = append` | `Vec<T>`, `VecDeque<T>`, `String` | the update's items are appended |
//! | `reduce = extend` | maps and sets (`HashMap`, `BTreeMap`, `HashSet`, `BTreeSet`) | entries are inserted, replacing equal keys |
//! | `reduce = add` | numbers, `Duration` | the update's value is added |
//! | `reduce = max` / `min` | numbers, `String`, `char`, `bool`, `Duration` | the larger / smaller value is kept |
//! | `reduce = path::to::f` | any `T` | `f(&mut field, value)` with `f: fn(&mut T, T)` |

pub mod reduce;

/// One field of a state, as [`HarnessState::fields`] describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// The field's name.
    pub name: &'static str,
    /// How an update merges into it.
    pub reducer: ReducerKind,
}

/// How a field merges an update: the `reduce = ..` of `#[field(..)]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReducerKind {
    /// The update's value replaces the field.
    Replace,
    /// The update's items are appended.
    Append,
    /// The update's entries are inserted.
    Extend,
    /// The update's value is added.
    Add,
    /// The larger value is kept.
    Max,
    /// The smaller value is kept.
    Min,
    /// A function of the user's.
    Custom,
}

impl ReducerKind {
    /// Whether two updates of the field both count: every reducer but
    /// `replace`, which keeps only the last one. (A custom reducer is
    /// trusted to merge.)
    pub fn merges(self) -> bool {
        self != ReducerKind::Replace
    }
}

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// A loop's state: a struct whose fields each have a default and a reducer.
///
/// Derive it with `#[derive(HarnessState)]`; see the [module docs](self).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a harness state",
    label = "not a state",
    note = "derive it: #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)] (with `use harness::{{JsonSchema, schemars}};`)"
)]
pub trait HarnessState:
    Clone + Debug + Default + Send + Sync + Serialize + DeserializeOwned + JsonSchema + 'static
{
    /// The partial update a step returns: one optional value per field.
    type Update: Clone
        + Debug
        + Default
        + Send
        + Sync
        + Serialize
        + DeserializeOwned
        + JsonSchema
        + 'static;

    /// Merges `update` into the state, field by field, through each field's
    /// reducer. Fields the update leaves `None` are untouched.
    fn apply(&mut self, update: Self::Update);

    /// An empty update, to fill in with the generated setters.
    fn update() -> Self::Update {
        Self::Update::default()
    }

    /// The state's fields and how each merges an update, when known
    /// (`#[derive(HarnessState)]` always says). The harness checks parallel
    /// branches against it when a loop is built: a field that two branches
    /// may write must have a reducer that merges. A state that does not
    /// say (`None`, the default for a hand-written implementation) is
    /// treated as if every field were replaced, so branches that may both
    /// write are refused.
    fn fields() -> Option<&'static [FieldInfo]> {
        None
    }

    /// The names of the fields `update` sets. Used to hold a step that
    /// declares what it writes ([`StepBuilder::writes`](crate::StepBuilder::writes))
    /// to its word. The default (a hand-written implementation) says
    /// nothing, and nothing is checked.
    fn written(update: &Self::Update) -> Vec<&'static str> {
        let _ = update;
        Vec::new()
    }

    /// The JSON schema of the state.
    fn state_schema() -> schemars::Schema {
        schemars::schema_for!(Self)
    }

    /// The JSON schema of an update.
    fn update_schema() -> schemars::Schema {
        schemars::schema_for!(Self::Update)
    }
}
