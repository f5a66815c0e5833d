//! [`Signal`]: the name a `route` returns to pick the next transition.

use serde::{Deserialize, Serialize};
use std::borrow::{Borrow, Cow};
use std::fmt;

/// The name of a transition out of a step, returned by its `route`, and the
/// final signal of a run's [`Outcome`](crate::Outcome).
///
/// Names beginning with `$` are reserved for the harness itself:
/// [`Signal::INTERRUPT`], [`Signal::STOPPED`] and [`Signal::END`].
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Signal(Cow<'static, str>);

impl Signal {
    /// The signal of a run that paused for a human: `$interrupt`.
    pub const INTERRUPT: Signal = Signal(Cow::Borrowed("$interrupt"));
    /// The signal of a run stopped by [`Run::stop`](crate::Run::stop): `$stopped`.
    pub const STOPPED: Signal = Signal(Cow::Borrowed("$stopped"));
    /// The signal of a run whose last step ends it without a signal of its
    /// own (`.end()`, or `.next` into the end): `$end`.
    pub const END: Signal = Signal(Cow::Borrowed("$end"));

    /// A signal with this name.
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Signal(name.into())
    }

    /// The signal's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the name is reserved for the harness (begins with `$`).
    pub fn is_reserved(&self) -> bool {
        is_reserved(&self.0)
    }
}

/// Names beginning with `$` belong to the harness (`$interrupt`, `$stopped`).
pub(crate) fn is_reserved(name: &str) -> bool {
    name.starts_with('$')
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&'static str> for Signal {
    fn from(s: &'static str) -> Self {
        Signal(Cow::Borrowed(s))
    }
}

impl From<String> for Signal {
    fn from(s: String) -> Self {
        Signal(Cow::Owned(s))
    }
}

impl Borrow<str> for Signal {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Signal {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Signal {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}
