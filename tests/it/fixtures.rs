//! Pieces several test files share: tools with odd behaviour, a writer to read back, the
//! spec's reading of a JSON-RPC message (what it should get), and a server to serve over HTTP.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcp_task_store::protocol::RpcError;
#[cfg(feature = "http")]
use mcp_task_store::server::{demo, HttpOptions, HttpServer, Server};
use mcp_task_store::server::{TaskSupport, Tool};
use mcp_task_store::{
    CancelOutcome, CancelToken, CreateTask, InputRequests, InputResponses, Outcome, SessionId,
    StoreError, StoreEvent, StoreHandle, Task, TaskDetail, TaskId, TaskPage, TaskResult,
    TaskStatus, TaskStore,
};
use parking_lot::Mutex;
use serde_json::{json, Value};

/// A tool that fails with a JSON-RPC error (code -32000, with data).
pub fn boom_tool() -> Tool {
    Tool::new(
        "boom",
        "Fails with a JSON-RPC error",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |_, _| Err(RpcError::new(-32000, "boom").with_data(json!({"why": "testing"}))),
    )
}

/// A tool that panics: the server must turn it into an error, not lose the worker.
pub fn panic_tool() -> Tool {
    Tool::new(
        "panic",
        "Panics",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |_, _| panic!("tool bug"),
    )
}

/// A writer the test can read back while the server still holds it.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The JSON-RPC messages written so far, one per line.
    pub fn messages(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().clone();
        String::from_utf8(bytes)
            .expect("only UTF-8 goes out")
            .lines()
            .map(|line| serde_json::from_str(line).expect("only JSON-RPC goes out"))
            .collect()
    }
}

/// An HTTP server on a free loopback port with the demo tools, and its store (to look behind
/// a session that ended).
#[cfg(feature = "http")]
pub fn demo_http_server(options: HttpOptions) -> (HttpServer, Arc<dyn TaskStore>) {
    let mut builder = Server::builder();
    for tool in demo::tools() {
        builder = builder.tool(tool);
    }
    let server = builder.build().unwrap();
    let store = server.store();
    let http = HttpServer::bind(server, "127.0.0.1:0", options).unwrap();
    (http, store)
}

// ----- what a message is -----------------------------------------------------------------

pub const SEP_VERSION: &str = "2026-07-28";
pub const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CAPS_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";
/// Versions a request's `_meta` may name (2026-07-28 plus those `initialize` accepts).
pub const SUPPORTED: &[&str] = &[
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

/// What the spec says a message is, read independently of the server's parser.
#[derive(Debug)]
pub enum Kind {
    /// Wants exactly one response with `id`.
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    /// Gets nothing.
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// Shaped as a response (`result` or `error`, no `method`): gets nothing, whether it
    /// answers a request of the server's or cannot (a null id, say). JSON-RPC never answers
    /// a response; two peers that did would trade errors for ever.
    Response,
    /// Gets one error: -32700 when it is not JSON (or an object in it names a member
    /// twice), else -32600 (or -32602 for params that
    /// are not an object); its id when it had a usable one, else null.
    Malformed {
        parse_error: bool,
        id: Option<Value>,
    },
    /// A JSON array its connection may take as a batch. [`kind`] never says this: a test
    /// that knows the connection's version does.
    ///
    /// `Some(items)`: the connection takes batches, and `items` is what each of the
    /// batch's messages gets as if it came alone (an `initialize` or a 2026-07-28 request,
    /// which no batch may hold, is `Malformed` with its id): the array of the answers due,
    /// in order, nothing when none is, or one -32600 error for `[]` or a batch too long.
    /// `None`: the connection may have settled on a version with batches meanwhile (or
    /// not): the array of some answers, nothing, or one -32600 error.
    Batch(Option<Vec<Kind>>),
}

/// MCP ids are strings or integers (never null, never fractional); this server reads
/// integers as i64.
pub fn valid_id(id: &Value) -> bool {
    id.is_string() || id.as_i64().is_some()
}

pub fn kind(text: &str) -> Kind {
    // An object naming a member twice is refused as unreadable: other readers take the
    // first of the two where a `Value` keeps the last.
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return Kind::Malformed {
            parse_error: true,
            id: None,
        };
    };
    if names_a_member_twice(text) {
        return Kind::Malformed {
            parse_error: true,
            id: None,
        };
    }
    let Value::Object(object) = value else {
        return Kind::Malformed {
            parse_error: false,
            id: None,
        };
    };
    if !object.contains_key("method")
        && (object.contains_key("result") || object.contains_key("error"))
    {
        return Kind::Response;
    }
    let id = object.get("id").cloned();
    let usable_id = id.clone().filter(valid_id);
    let malformed = Kind::Malformed {
        parse_error: false,
        id: usable_id.clone(),
    };
    if id.is_some() && usable_id.is_none() || object.get("jsonrpc") != Some(&json!("2.0")) {
        return malformed;
    }
    // `null` params count as absent, as the server reads them.
    let params = object.get("params").filter(|p| !p.is_null()).cloned();
    if let (Some(Value::String(method)), None) = (object.get("method"), &id) {
        // Params that are not structured make it no JSON-RPC message at all.
        if params
            .as_ref()
            .is_some_and(|p| !p.is_object() && !p.is_array())
        {
            return malformed;
        }
        // Otherwise never answered, whatever its params.
        return Kind::Notification {
            method: method.clone(),
            params,
        };
    }
    match (object.get("method"), usable_id) {
        // A request's params are an object; a response's stray params mean nothing.
        (Some(Value::String(_)), Some(_)) if params.as_ref().is_some_and(|p| !p.is_object()) => {
            malformed
        }
        (Some(Value::String(method)), Some(id)) => Kind::Request {
            id,
            method: method.clone(),
            params,
        },
        _ => malformed,
    }
}

/// Whether some object in the JSON `text` (well-formed) has two members of one name.
pub fn names_a_member_twice(text: &str) -> bool {
    /// Reads any JSON value, failing on the first object with a name seen twice.
    struct Names;
    impl<'de> serde::Deserialize<'de> for Names {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Names, D::Error> {
            d.deserialize_any(Names)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Names {
        type Value = Names;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_str<E>(self, _: &str) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_unit<E>(self) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
            while seq.next_element::<Names>()?.is_some() {}
            Ok(Names)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Names, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(name) = map.next_key::<String>()? {
                if !seen.insert(name) {
                    return Err(serde::de::Error::custom("twice"));
                }
                map.next_value::<Names>()?;
            }
            Ok(Names)
        }
    }
    serde_json::from_str::<Names>(text).is_err()
}

/// A store that implements only what the trait requires, by passing every call to a
/// handle: it has the trait's defaults. With `cancel_on_token`, taking a task's cancel
/// token cancels the task first, as a `tasks/cancel` racing the task's creation would.
/// It counts its `get_detail` calls ([`detail_lookups`](Self::detail_lookups)).
pub struct OnlyRequired(StoreHandle, bool, Arc<AtomicUsize>);

impl OnlyRequired {
    pub fn new(handle: StoreHandle) -> OnlyRequired {
        OnlyRequired(handle, false, Arc::default())
    }

    pub fn cancel_on_token(handle: StoreHandle) -> OnlyRequired {
        OnlyRequired(handle, true, Arc::default())
    }

    /// How many times `get_detail` was called, so far and from now on.
    pub fn detail_lookups(&self) -> Arc<AtomicUsize> {
        self.2.clone()
    }
}

impl TaskStore for OnlyRequired {
    fn create(&self, req: CreateTask) -> Result<Task, StoreError> {
        self.0.create(req)
    }
    fn get(&self, id: TaskId, session: Option<&SessionId>) -> Result<Task, StoreError> {
        self.0.get(id, session)
    }
    fn get_detail(&self, id: TaskId, s: Option<&SessionId>) -> Result<TaskDetail, StoreError> {
        self.2.fetch_add(1, Ordering::SeqCst);
        self.0.get_detail(id, s)
    }
    fn update_status(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        self.0.update_status(id, session, status, message)
    }
    fn store_result(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        self.0.store_result(id, session, status, outcome, message)
    }
    fn get_result(&self, id: TaskId, s: Option<&SessionId>) -> Result<TaskResult, StoreError> {
        self.0.get_result(id, s)
    }
    fn wait_terminal(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
    ) -> Result<Task, StoreError> {
        self.0.wait_terminal(id, session, timeout)
    }
    fn list(&self, s: Option<&SessionId>, cursor: Option<&str>) -> Result<TaskPage, StoreError> {
        self.0.list(s, cursor)
    }
    fn cancel(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<CancelOutcome, StoreError> {
        self.0.cancel(id, session, message)
    }
    fn set_input_requests(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        requests: InputRequests,
    ) -> Result<Task, StoreError> {
        self.0.set_input_requests(id, session, requests)
    }
    fn resolve_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        responses: InputResponses,
    ) -> Result<Task, StoreError> {
        self.0.resolve_input(id, session, responses)
    }
    fn wait_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        key: &str,
        timeout: Option<Duration>,
    ) -> Result<serde_json::Value, StoreError> {
        self.0.wait_input(id, session, key, timeout)
    }
    fn cancel_token(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<CancelToken, StoreError> {
        if self.1 {
            self.0.cancel(id, session, Some("raced".into()))?;
        }
        self.0.cancel_token(id, session)
    }
    fn subscribe(&self) -> Result<crossbeam_channel::Receiver<StoreEvent>, StoreError> {
        self.0.subscribe()
    }
}
