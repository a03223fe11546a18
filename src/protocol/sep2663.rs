//! The SEP-2663 tasks extension (`io.modelcontextprotocol/tasks`, protocol 2026-07-28):
//! flat task results with `resultType`, `ttlMs` / `pollIntervalMs`, `tasks/get` with the
//! outcome or the input requests inline, `tasks/update` for input responses, and an
//! acknowledging `tasks/cancel`.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::errors::rpc_error;
use super::jsonrpc::{self, RpcError, INTERNAL_ERROR};
use super::meta::{capability_for, RequestMeta, TASKS_EXTENSION};
use super::params::{parse_task_id, task_id};
use crate::model::{InputResponses, Outcome, SessionId, Task, TaskDetail, TaskStatus};
use crate::{StoreError, TaskStore};

/// The protocol version this module speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Missing required client capability (SEP-2575).
pub const MISSING_CAPABILITY: i64 = -32021;
/// HTTP headers disagree with the body (SEP-2243).
pub const HEADER_MISMATCH: i64 = -32020;
/// The request's protocol version is not one the server supports (2026-07-28,
/// `UnsupportedProtocolVersionError`).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// How long a client may cache `server/discover` and `tools/list` results, in ms.
pub const CACHE_TTL_MS: u64 = 60_000;

/// The cache fields 2026-07-28 requires on cacheable results (`ttlMs`, `cacheScope`).
pub fn with_cache_fields(mut value: Value) -> Value {
    if let Value::Object(object) = &mut value {
        object.insert("ttlMs".into(), json!(CACHE_TTL_MS));
        object.insert("cacheScope".into(), json!("public"));
    }
    value
}

/// The server's `capabilities.extensions` entry.
pub fn extension_capability() -> Value {
    json!({ TASKS_EXTENSION: {} })
}

/// -32021: the request needs the tasks extension and the client did not declare it.
pub fn missing_capability(what: &str) -> RpcError {
    RpcError::new(
        MISSING_CAPABILITY,
        format!("{what} requires the client capability extensions[\"{TASKS_EXTENSION}\"]"),
    )
    .with_data(json!({ "requiredCapabilities": { "extensions": { TASKS_EXTENSION: {} } } }))
}

/// -32021 for input a request cannot be asked for: the server would need to send `method`
/// (an `inputRequests` entry), and the request did not declare the client capability it
/// takes, which 2026-07-28 forbids (a client could not answer it, and the call or task
/// would wait for an answer that never comes).
pub fn missing_input_capability(method: &str, capability: &str) -> RpcError {
    RpcError::new(
        MISSING_CAPABILITY,
        format!(
            "asking for input through {method} requires the client capability \
             {capability}, which the request did not declare"
        ),
    )
    .with_data(json!({ "requiredCapabilities": { capability: {} } }))
}

/// The -32021 for the first of `methods` (the methods of input requests) whose client
/// capability `declares` says the request did not declare; `None` when it may ask them all.
pub fn undeclared_input<'a>(
    methods: impl IntoIterator<Item = &'a str>,
    declares: impl Fn(&str) -> bool,
) -> Option<RpcError> {
    methods.into_iter().find_map(|method| {
        let capability = capability_for(method)?;
        (!declares(capability)).then(|| missing_input_capability(method, capability))
    })
}

/// Adds `resultType` to a result object (every 2026-07-28 result carries one).
pub fn with_result_type(mut value: Value, result_type: &str) -> Value {
    if let Value::Object(object) = &mut value {
        object.insert("resultType".into(), json!(result_type));
    }
    value
}

/// The base task as this revision names its fields.
pub fn task_value(task: &Task) -> Map<String, Value> {
    let mut object = Map::new();
    object.insert("taskId".into(), json!(task.task_id));
    object.insert("status".into(), json!(task.status));
    if let Some(message) = &task.status_message {
        object.insert("statusMessage".into(), json!(message));
    }
    object.insert("createdAt".into(), json!(task.created_at));
    object.insert("lastUpdatedAt".into(), json!(task.last_updated_at));
    object.insert("ttlMs".into(), json!(task.ttl));
    if let Some(poll) = task.poll_interval {
        object.insert("pollIntervalMs".into(), json!(poll));
    }
    object
}

/// `CreateTaskResult`: the task, flat, with `resultType: "task"`.
pub fn create_result(task: &Task) -> Value {
    with_result_type(Value::Object(task_value(task)), "task")
}

/// A `DetailedTask`: the base task plus what its status requires: `inputRequests` while
/// `input_required`, `result` once `completed`, `error` once `failed`.
pub fn detailed_task(detail: &TaskDetail) -> Value {
    let task = &detail.task;
    let mut object = task_value(task);
    match (task.status, &detail.outcome) {
        (TaskStatus::InputRequired, _) => {
            object.insert("inputRequests".into(), json!(detail.input_requests));
        }
        (TaskStatus::Completed, Some(Outcome::Result(result))) => {
            object.insert("result".into(), (**result).clone());
        }
        (TaskStatus::Failed, Some(Outcome::Error(error))) => {
            object.insert("error".into(), (**error).clone());
        }
        (TaskStatus::Completed, _) => {
            // Completed without a stored result (a status set by hand through
            // `update_status`, which the TypeScript store contract allows): `completed`
            // still needs a result, and an empty one claims nothing.
            object.insert(
                "result".into(),
                json!({"content": [], "resultType": "complete"}),
            );
        }
        (TaskStatus::Failed, _) => {
            // A task that failed without a JSON-RPC error (it expired, a 2025-11-25 tool
            // error, a status set by hand): `failed` still needs an error object.
            let message = task
                .status_message
                .clone()
                .unwrap_or_else(|| "the task failed".into());
            object.insert(
                "error".into(),
                json!({"code": INTERNAL_ERROR, "message": message}),
            );
        }
        _ => {}
    }
    Value::Object(object)
}

/// How a finished `tools/call` settles its task under this revision: any tool result, even
/// one with `isError: true`, ends `completed`; only a JSON-RPC error ends `failed`. The
/// stored result carries `resultType: "complete"`, as the original call's result would.
pub fn settle(outcome: Result<Value, RpcError>) -> (TaskStatus, Outcome, Option<String>) {
    match outcome {
        Ok(result) => (
            TaskStatus::Completed,
            Outcome::result(with_result_type(result, "complete")),
            None,
        ),
        Err(error) => {
            let message = error.message.clone();
            (
                TaskStatus::Failed,
                Outcome::error(error.to_value()),
                Some(message),
            )
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateParams {
    task_id: String,
    #[serde(default)]
    input_responses: InputResponses,
}

/// True for the `tasks/*` methods this revision knows (served or refused).
pub fn is_tasks_method(method: &str) -> bool {
    method.starts_with("tasks/")
}

/// Serves `tasks/get`, `tasks/update` and `tasks/cancel` (each needs the extension
/// declared, else -32021); `tasks/result`, `tasks/list` and other `tasks/*` names are
/// -32601. `None` for methods outside `tasks/`.
pub fn handle(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    method: &str,
    params: Option<Value>,
) -> Option<Result<Value, RpcError>> {
    if !is_tasks_method(method) {
        return None;
    }
    let known = matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel");
    if !known {
        return Some(Err(RpcError::method_not_found(method)));
    }
    if !RequestMeta::of(params.as_ref()).declares_tasks {
        return Some(Err(missing_capability(method)));
    }
    let result = match method {
        "tasks/get" => get(store, session, params),
        "tasks/update" => update(store, session, params),
        _ => cancel(store, session, params),
    };
    Some(result.map(|value| with_result_type(value, "complete")))
}

fn get(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let detail = store.get_detail(task_id(params)?, session)?;
    Ok(detailed_task(&detail))
}

fn update(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let UpdateParams {
        task_id,
        input_responses,
    } = jsonrpc::params(params)?;
    let id = parse_task_id(&task_id)?;
    match store.resolve_input(id, session, input_responses) {
        // Answers to a task that already ended are acknowledged and ignored.
        Ok(_) | Err(StoreError::AlreadyTerminal(_)) => Ok(json!({})),
        Err(error) => Err(rpc_error(&error)),
    }
}

fn cancel(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    store.cancel(
        task_id(params)?,
        session,
        Some("Cancelled by requestor".into()),
    )?;
    Ok(json!({}))
}
