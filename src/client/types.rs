//! What the client hands back: tasks in either revision's wire shape, tool call outcomes,
//! input requests for the handlers, progress reports.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::ClientError;
use crate::model::TaskStatus;
use crate::protocol::RpcError;

/// A task as the client sees it. Both revisions' field names are read (`ttl` /
/// `ttlMs`, `pollInterval` / `pollIntervalMs`); ids are plain strings, since other servers
/// need not use UUIDs.
#[derive(Clone, PartialEq, Debug)]
pub struct TaskInfo {
    /// The server's id for the task.
    pub task_id: String,
    /// Its status.
    pub status: TaskStatus,
    /// Its status message, if any (progress, failure diagnostics).
    pub status_message: Option<String>,
    /// When it was created, as the server wrote it.
    pub created_at: Option<String>,
    /// When it last changed, as the server wrote it.
    pub last_updated_at: Option<String>,
    /// Retention in milliseconds from creation; `None` for unlimited (or not reported).
    pub ttl_ms: Option<u64>,
    /// The polling interval the server suggests, in milliseconds.
    pub poll_interval_ms: Option<u64>,
}

impl TaskInfo {
    /// Reads a task object (flat: `taskId`, `status`, ...), in either revision's names.
    pub fn from_value(value: &Value) -> Result<TaskInfo, ClientError> {
        let bad = || ClientError::Protocol(format!("not a task: {value}"));
        let task_id = value
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or_else(bad)?;
        let status = value
            .get("status")
            .cloned()
            .and_then(|s| serde_json::from_value::<TaskStatus>(s).ok())
            .ok_or_else(bad)?;
        let text = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_owned);
        let number = |a: &str, b: &str| {
            value
                .get(a)
                .or_else(|| value.get(b))
                .and_then(Value::as_u64)
        };
        Ok(TaskInfo {
            task_id: task_id.to_owned(),
            status,
            status_message: text("statusMessage"),
            created_at: text("createdAt"),
            last_updated_at: text("lastUpdatedAt"),
            ttl_ms: number("ttlMs", "ttl"),
            poll_interval_ms: number("pollIntervalMs", "pollInterval"),
        })
    }
}

/// Pending input requests of a task, by key (`{method, params}` each).
pub type InputRequests = BTreeMap<String, Value>;
/// Answers to input requests, by key.
pub type InputResponses = BTreeMap<String, Value>;

/// One `tasks/get` answer. On SEP-2663 it carries what the status implies: the input
/// requests while `input_required`, the result once `completed`, the error once `failed`.
/// On 2025-11-25 only `task` is filled (the outcome comes from `tasks/result`).
#[derive(Clone, PartialEq, Debug)]
pub struct PolledTask {
    /// The task.
    pub task: TaskInfo,
    /// Outstanding input requests (SEP-2663, `input_required`).
    pub input_requests: InputRequests,
    /// The tool result (SEP-2663, `completed`).
    pub result: Option<Value>,
    /// The JSON-RPC error (SEP-2663, `failed`).
    pub error: Option<RpcError>,
}

impl PolledTask {
    pub(crate) fn from_value(value: &Value) -> Result<PolledTask, ClientError> {
        let task = TaskInfo::from_value(value)?;
        let input_requests = match value.get("inputRequests") {
            Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => InputRequests::new(),
        };
        Ok(PolledTask {
            task,
            input_requests,
            result: value.get("result").cloned(),
            error: value.get("error").map(RpcError::from_value),
        })
    }
}

/// A page of `tasks/list` (2025-11-25).
#[derive(Clone, PartialEq, Debug, Default)]
pub struct TaskList {
    /// The tasks on this page.
    pub tasks: Vec<TaskInfo>,
    /// The cursor of the next page; `None` on the last one.
    pub next_cursor: Option<String>,
}

/// A `tools/call` as [`Client::call_tool_raw`](super::Client::call_tool_raw) sends it.
#[derive(Clone, PartialEq, Debug)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments (an object; `Value::Null`, for none, is sent as `{}`).
    pub arguments: Value,
    /// 2025-11-25: ask for a task (`params.task`), with this requested TTL in ms (`None`
    /// for the server's default). Ignored by SEP-2663 servers, which decide themselves.
    pub task: Option<Option<u64>>,
    /// SEP-2663 multi-round-trip: answers to the input requests of an earlier round.
    pub input_responses: Option<InputResponses>,
    /// SEP-2663 multi-round-trip: the `requestState` the server returned, echoed back.
    pub request_state: Option<Value>,
}

impl ToolCall {
    /// A call of `name` with `arguments`, no task requested.
    pub fn new(name: impl Into<String>, arguments: Value) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments,
            task: None,
            input_responses: None,
            request_state: None,
        }
    }

    /// Asks for a task (2025-11-25 `params.task`), optionally with a TTL in milliseconds.
    pub fn as_task(mut self, ttl_ms: Option<u64>) -> ToolCall {
        self.task = Some(ttl_ms);
        self
    }

    /// Sends answers to an earlier round's input requests (SEP-2663 multi-round-trip).
    pub fn input_responses(mut self, responses: InputResponses) -> ToolCall {
        self.input_responses = Some(responses);
        self
    }

    pub(crate) fn params(&self) -> Value {
        let mut params = Map::new();
        params.insert("name".into(), json!(self.name));
        // `arguments` is an object or left out: a server that checks its params (the
        // TypeScript SDK's) refuses a null one with -32602.
        let arguments = match &self.arguments {
            Value::Null => json!({}),
            arguments => arguments.clone(),
        };
        params.insert("arguments".into(), arguments);
        if let Some(ttl) = self.task {
            params.insert(
                "task".into(),
                match ttl {
                    Some(ttl) => json!({ "ttl": ttl }),
                    None => json!({}),
                },
            );
        }
        if let Some(responses) = &self.input_responses {
            params.insert("inputResponses".into(), json!(responses));
        }
        if let Some(state) = &self.request_state {
            params.insert("requestState".into(), state.clone());
        }
        Value::Object(params)
    }
}

/// What a raw `tools/call` came back with.
#[derive(Clone, PartialEq, Debug)]
pub enum CallOutcome {
    /// The tool's result (a `CallToolResult`, possibly with `isError: true`).
    Complete(Value),
    /// A task was created; follow it with [`Client::follow_task`](super::Client::follow_task)
    /// or the manual `tasks/*` methods.
    Task(TaskInfo),
    /// SEP-2663 multi-round-trip: the server needs these answers before it goes on; call
    /// again with [`ToolCall::input_responses`].
    InputRequired {
        /// The input requests, by key.
        input_requests: InputRequests,
        /// The opaque `requestState` to echo back, if the server sent one.
        request_state: Option<Value>,
    },
}

/// A request from the server for input (elicitation, sampling), as a handler sees it.
#[derive(Clone, PartialEq, Debug)]
pub struct InputRequest {
    /// `elicitation/create` or `sampling/createMessage`.
    pub method: String,
    /// The request's params (the elicitation form, the sampling messages...).
    pub params: Value,
    /// The task it is for, if any.
    pub task_id: Option<String>,
    /// Its key: the `inputRequests` key on SEP-2663, the JSON-RPC request id on 2025-11-25.
    pub key: String,
}

/// A progress report while a task is followed: after its creation, and after every poll.
#[derive(Clone, PartialEq, Debug)]
pub struct Progress {
    /// The task as last seen.
    pub task: TaskInfo,
    /// How many `tasks/get` polls were made so far.
    pub polls: u32,
    /// Time since the call started.
    pub elapsed: Duration,
}
