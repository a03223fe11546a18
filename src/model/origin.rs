//! The request a task came from, kept with it as JSON text.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// A task's originating request (for example the JSON-RPC `tools/call`), kept as JSON text
/// for the task's whole life and written to the journal as it is.
///
/// Text, not a [`Value`]: a parsed tree takes many times the room of its text (about 17x
/// for a request of small numbers), and a store holds one per task until its TTL. Cloning
/// shares the text.
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct Origin(Arc<RawValue>);

impl<'de> Deserialize<'de> for Origin {
    /// Read through a [`Value`]: a raw value cannot be taken out of the buffer serde reads
    /// an internally tagged enum into, as a journal record is.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Origin, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Origin::new(&value).map_err(serde::de::Error::custom)
    }
}

impl Origin {
    /// Serialises `request` once, as the origin's text.
    pub fn new(request: &impl Serialize) -> Result<Origin, serde_json::Error> {
        serde_json::value::to_raw_value(request).map(|raw| Origin(Arc::from(raw)))
    }

    /// The origin as its JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// The origin parsed back into a [`Value`]. As deep as the request it was made from,
    /// even past serde_json's default limit of 128 levels (a request that deep reaches a
    /// store through a Rust caller, or through the wire's limit plus the levels the server
    /// wraps it in).
    pub fn to_value(&self) -> Value {
        let mut reader = serde_json::Deserializer::from_str(self.0.get());
        reader.disable_recursion_limit();
        Value::deserialize(&mut reader).expect("an origin holds the JSON it was made from")
    }
}

impl From<&Value> for Origin {
    fn from(value: &Value) -> Origin {
        // A `Value` always serialises: its map keys are strings.
        Origin::new(value).expect("a JSON value serialises")
    }
}

impl From<Value> for Origin {
    fn from(value: Value) -> Origin {
        Origin::from(&value)
    }
}

impl PartialEq for Origin {
    /// The same text (two spellings of one JSON value differ).
    fn eq(&self, other: &Origin) -> bool {
        self.as_json() == other.as_json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_origin_keeps_its_request_as_text_and_round_trips() {
        let request = json!({"method": "tools/call", "params": {"name": "t", "n": [1, 2.5, null]}});
        let origin = Origin::from(&request);
        assert_eq!(origin.to_value(), request);
        // Written as the JSON it holds, not as a string of it, and read back the same.
        let written = serde_json::to_string(&origin).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&written).unwrap(), request);
        assert_eq!(serde_json::from_str::<Origin>(&written).unwrap(), origin);
    }
}
