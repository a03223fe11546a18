use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// A task id: a random (v4) UUID, so ids are unguessable as both MCP revisions require.
///
/// Inside the store the id is a 16-byte key; it becomes text (the hyphenated UUID) only on
/// the wire. Ids that do not parse can never name a task, so callers treat a parse failure
/// exactly like an unknown id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(Uuid);

impl TaskId {
    /// A fresh random id from the operating system's CSPRNG.
    pub fn random() -> TaskId {
        TaskId(Uuid::new_v4())
    }

    /// Builds an id from raw bits; meant for deterministic tests and journal replay.
    pub const fn from_u128(bits: u128) -> TaskId {
        TaskId(Uuid::from_u128(bits))
    }

    /// The raw 128 bits of the id.
    pub const fn as_u128(&self) -> u128 {
        self.0.as_u128()
    }

    /// Parses the wire form; `None` for anything that is not a UUID.
    pub fn parse(text: &str) -> Option<TaskId> {
        Uuid::try_parse(text).ok().map(TaskId)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({})", self.0.hyphenated())
    }
}

impl FromStr for TaskId {
    type Err = crate::StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskId::parse(s).ok_or(crate::StoreError::NotFound)
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0.hyphenated())
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        TaskId::parse(&text).ok_or_else(|| serde::de::Error::custom("task id is not a UUID"))
    }
}

/// The session (or authorization context) a task is bound to.
///
/// Sessions are strict and fail-closed: a caller with no session sees only tasks created
/// without one, and a caller with a session sees only that session's tasks. Cloning is a
/// reference-count bump.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// Wraps any string as a session id.
    pub fn new(id: impl Into<Arc<str>>) -> SessionId {
        SessionId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({:?})", &*self.0)
    }
}

impl From<&str> for SessionId {
    fn from(value: &str) -> Self {
        SessionId::new(value)
    }
}

impl From<String> for SessionId {
    fn from(value: String) -> Self {
        SessionId::new(value)
    }
}
