//! What a request says about itself in `_meta` (SEP-2575 / SEP-2663): its protocol version
//! and the capabilities its client declares, request by request.

use serde_json::Value;

use super::jsonrpc::RpcError;
use super::{sep2663, v2025};

/// `_meta` key carrying the request's protocol version.
pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the client's capabilities for this request.
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
/// The tasks extension's identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Protocol versions this server accepts at `initialize`, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &[
    v2025::PROTOCOL_VERSION,
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

/// Whether a protocol version a request names (in `_meta`, or the HTTP
/// `MCP-Protocol-Version` header) is one this server speaks: 2026-07-28 (SEP-2663) or one
/// `initialize` accepts.
pub fn supported_version(version: &str) -> bool {
    version == sep2663::PROTOCOL_VERSION || SUPPORTED_VERSIONS.contains(&version)
}

/// The client capability a server-to-client request of `method` needs (`elicitation` for
/// `elicitation/create`, `sampling` for `sampling/createMessage`, `roots` for
/// `roots/list`); `None` for one that needs none.
pub fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Every protocol version this server speaks, newest first: 2026-07-28 (SEP-2663), then
/// those `initialize` accepts. What `server/discover` lists as `supportedVersions` and an
/// unsupported version's error as `supported`.
pub fn all_versions() -> Vec<&'static str> {
    let mut versions = vec![sep2663::PROTOCOL_VERSION];
    versions.extend_from_slice(SUPPORTED_VERSIONS);
    versions
}

/// What a request naming a version this server does not speak gets: 2026-07-28's
/// `UnsupportedProtocolVersionError`, -32022 ("the server MUST respond with an
/// UnsupportedProtocolVersionError listing the versions it does support"), whose `data`
/// lists the versions it speaks (`supported`) and echoes the one asked for (`requested`),
/// so a client can retry with one of them.
pub fn unsupported_version(version: &str) -> RpcError {
    let supported = all_versions();
    RpcError::new(
        sep2663::UNSUPPORTED_PROTOCOL_VERSION,
        format!(
            "Unsupported protocol version '{version}' (supported: {})",
            supported.join(", ")
        ),
    )
    .with_data(serde_json::json!({ "supported": supported, "requested": version }))
}

/// Which revision of MCP tasks a request speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Revision {
    /// MCP 2025-11-25: tasks in core, `params.task`, `tasks/result`, `tasks/list`.
    V2025,
    /// The SEP-2663 tasks extension on protocol 2026-07-28.
    Sep2663,
}

impl Revision {
    /// The name a task's origin records.
    pub fn as_str(self) -> &'static str {
        match self {
            Revision::V2025 => "2025-11-25",
            Revision::Sep2663 => "sep-2663",
        }
    }
}

/// Whether a capability's value declares it: any value but `null` and `false`, which say
/// the client does not have it (a capability is an object; a client that sends `false` or
/// `null` for one is not to be asked for it).
pub(crate) fn is_declared(value: &Value) -> bool {
    !matches!(value, Value::Null | Value::Bool(false))
}

/// The per-request declarations of a request's `params._meta`.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RequestMeta {
    /// `io.modelcontextprotocol/protocolVersion`, if present (and not null); a value that
    /// is no string is kept as its JSON text (`5`, `{}`), which is no supported version.
    pub protocol_version: Option<String>,
    /// Whether the client declared the tasks extension for this request.
    pub declares_tasks: bool,
    /// The names of the client capabilities this request declares (`elicitation`,
    /// `sampling`, `roots`, `extensions`, ...): what a server may ask of this client while
    /// it serves the request.
    pub capabilities: Vec<String>,
}

impl RequestMeta {
    /// Reads the declarations from a request's params.
    pub fn of(params: Option<&Value>) -> RequestMeta {
        let meta = params.and_then(|p| p.get("_meta"));
        // A version that is no string names none this server speaks: kept as its JSON
        // text, it is refused (-32022) wherever a version is checked, rather than served
        // as if absent. A null one is absent, as a null `params` is.
        let protocol_version = meta
            .and_then(|m| m.get(PROTOCOL_VERSION_KEY))
            .and_then(|version| match version {
                Value::Null => None,
                Value::String(version) => Some(version.clone()),
                other => Some(other.to_string()),
            });
        let declared = meta.and_then(|m| m.get(CLIENT_CAPABILITIES_KEY));
        let declares_tasks = declared
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(TASKS_EXTENSION))
            .is_some_and(is_declared);
        let capabilities = declared
            .and_then(Value::as_object)
            .map(|c| {
                let declared = c.iter().filter(|(_, value)| is_declared(value));
                declared.map(|(name, _)| name.clone()).collect()
            })
            .unwrap_or_default();
        RequestMeta {
            protocol_version,
            declares_tasks,
            capabilities,
        }
    }

    /// Whether this request declares client capability `name`.
    pub fn declares(&self, name: &str) -> bool {
        self.capabilities.iter().any(|c| c == name)
    }

    /// The revision a request speaks: SEP-2663 when its `_meta` names protocol 2026-07-28,
    /// otherwise 2025-11-25 (whatever the connection negotiated at `initialize`). A server
    /// refuses a version it does not know before asking this.
    pub fn revision(&self) -> Revision {
        match &self.protocol_version {
            Some(version) if version == sep2663::PROTOCOL_VERSION => Revision::Sep2663,
            _ => Revision::V2025,
        }
    }

    /// Whether a message with this `_meta` and `method` is served as SEP-2663: a request
    /// that speaks it, or `server/discover` (how a client finds the versions). The one rule
    /// for both the connection's choice of handlers and the HTTP transport's choice of
    /// connection.
    pub fn speaks_sep2663(&self, method: &str) -> bool {
        method == "server/discover" || self.revision() == Revision::Sep2663
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_request_a_tool_may_send_needs_its_own_capability() {
        assert_eq!(capability_for("elicitation/create"), Some("elicitation"));
        assert_eq!(capability_for("sampling/createMessage"), Some("sampling"));
        assert_eq!(capability_for("roots/list"), Some("roots"));
        assert_eq!(capability_for("ping"), None);
        // What SEP-2663 refuses a call for: the first method whose capability the
        // request did not declare.
        let declared = |c: &str| c == "elicitation";
        let refused = sep2663::undeclared_input(["elicitation/create", "roots/list"], declared)
            .expect("roots were not declared");
        assert_eq!(
            refused.data.unwrap()["requiredCapabilities"],
            serde_json::json!({"roots": {}})
        );
    }
}
