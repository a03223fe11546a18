//! What a request says about itself in `_meta` (SEP-2575 / SEP-2663): its protocol version
//! and the capabilities its client declares, request by request.

use serde_json::Value;

/// `_meta` key carrying the request's protocol version.
pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the client's capabilities for this request.
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
/// The tasks extension's identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

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

/// The per-request declarations of a request's `params._meta`.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RequestMeta {
    /// `io.modelcontextprotocol/protocolVersion`, if present.
    pub protocol_version: Option<String>,
    /// Whether the client declared the tasks extension for this request.
    pub declares_tasks: bool,
}

impl RequestMeta {
    /// Reads the declarations from a request's params.
    pub fn of(params: Option<&Value>) -> RequestMeta {
        let meta = params.and_then(|p| p.get("_meta"));
        let protocol_version = meta
            .and_then(|m| m.get(PROTOCOL_VERSION_KEY))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let declares_tasks = meta
            .and_then(|m| m.get(CLIENT_CAPABILITIES_KEY))
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(TASKS_EXTENSION))
            .is_some();
        RequestMeta {
            protocol_version,
            declares_tasks,
        }
    }

    /// The revision a request speaks: SEP-2663 when it names a 2026 protocol version in its
    /// `_meta`, otherwise 2025-11-25 (whatever the connection negotiated at `initialize`).
    pub fn revision(&self) -> Revision {
        match &self.protocol_version {
            Some(version) if version.as_str() >= "2026" => Revision::Sep2663,
            _ => Revision::V2025,
        }
    }
}
