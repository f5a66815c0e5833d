//! Identifiers of runs, sessions and interrupts.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// Cloning one is cheap: the text is shared, not copied.
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(std::sync::Arc<str>);

        impl $name {
            /// A new random identifier (a UUID v4).
            pub fn random() -> Self {
                Self::from(uuid::Uuid::new_v4().to_string())
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s.into())
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.into())
            }
        }

        impl Serialize for $name {
            fn serialize<Se: serde::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d).map(Self::from)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// Identifies one run: one call of `agent.run`, across its interrupts.
    RunId
);
id_type!(
    /// Identifies a session: the thread of runs that share a stored state.
    SessionId
);
id_type!(
    /// Identifies one pause of a run for a human; a resume must name it.
    InterruptId
);

/// Where in a run something happens: the run's own loop (the root, empty),
/// a branch of a parallel fork or a fan-out, or a sub-agent's loop; nested
/// paths are joined with `/`.
///
/// Each segment names a task: a static branch by the step it starts at
/// (`search`), an instance of a fan-out by its step and position
/// (`summarize#2`), a sub-agent by the step that runs it (`research`). So
/// `research/summarize#2` is the third instance of `summarize` fanned out
/// inside the sub-agent that step `research` runs.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskPath(std::sync::Arc<str>);

impl Serialize for TaskPath {
    fn serialize<Se: serde::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TaskPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self(String::deserialize(d)?.into()))
    }
}

impl TaskPath {
    /// The run's own loop.
    pub fn root() -> Self {
        Self::default()
    }

    /// Whether this is the run's own loop.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path of a task started under this one, named `segment`.
    pub fn child(&self, segment: &str) -> Self {
        if self.is_root() {
            Self(segment.into())
        } else {
            Self(format!("{}/{segment}", self.0).into())
        }
    }

    /// The path as text (`""` for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The segments, outermost first (none for the root).
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|s| !s.is_empty())
    }

    /// Whether `self` is `other` or lies inside it.
    pub fn starts_with(&self, other: &TaskPath) -> bool {
        other.is_root()
            || self.0.as_ref() == other.0.as_ref()
            || (self.0.starts_with(other.as_str())
                && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }
}

impl fmt::Display for TaskPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            f.write_str("(root)")
        } else {
            f.write_str(&self.0)
        }
    }
}

impl fmt::Debug for TaskPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for TaskPath {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}
