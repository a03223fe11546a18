//! MCP 2025-11-25 tasks: the `tasks/*` methods, the create result, status notifications
//! and the related-task `_meta`, rendered from the store's records.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::errors::rpc_error;
use super::jsonrpc::{self, RpcError, INTERNAL_ERROR, INVALID_PARAMS};
use super::params::task_id;
use crate::model::{Outcome, SessionId, Task, TaskId, TaskStatus};
use crate::{StoreError, TaskStore};

/// The protocol revision this module speaks.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// The `_meta` key that ties a message to a task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The server's `capabilities.tasks` object.
pub fn capabilities() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

/// The `tools/call` reply when a task was created: `{task: Task}`.
pub fn create_result(task: &Task) -> Value {
    json!({ "task": task })
}

/// `notifications/tasks/status` for a task (the params are the task, flat).
pub fn status_notification(task: &Task) -> Value {
    jsonrpc::notification("notifications/tasks/status", json!(task))
}

/// `{"io.modelcontextprotocol/related-task": {"taskId": ...}}`.
pub fn related_task(id: TaskId) -> Value {
    json!({ RELATED_TASK: { "taskId": id } })
}

/// Adds the related-task entry to an object's `_meta`, keeping what is already there.
pub fn with_related_task(value: Value, id: TaskId) -> Value {
    with_related_task_id(value, &id.to_string())
}

/// [`with_related_task`] for a task id as the peer wrote it (a client must echo another
/// server's ids, which need not be UUIDs).
pub(crate) fn with_related_task_id(mut value: Value, id: &str) -> Value {
    if let Value::Object(object) = &mut value {
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Value::Object(meta) = meta {
            meta.insert(RELATED_TASK.into(), json!({ "taskId": id }));
        }
    }
    value
}

/// How a finished `tools/call` settles its task under this revision: a tool result with
/// `isError: true` ends `failed` (and `tasks/result` still returns that result); a JSON-RPC
/// error ends `failed` with the error. A failed task gets a status message with the
/// diagnostics (the tool's first text block, or the error message).
pub fn settle(outcome: Result<Value, RpcError>) -> (TaskStatus, Outcome, Option<String>) {
    match outcome {
        Ok(result) => {
            if result.get("isError").and_then(Value::as_bool) != Some(true) {
                return (TaskStatus::Completed, Outcome::result(result), None);
            }
            let text = result
                .pointer("/content/0/text")
                .and_then(Value::as_str)
                .unwrap_or("the tool reported an error");
            let message = format!("Tool error: {text}");
            (TaskStatus::Failed, Outcome::result(result), Some(message))
        }
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

/// The `params.task` of a task-augmented request.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TaskMetadata {
    /// Requested TTL in milliseconds.
    #[serde(default)]
    pub ttl: Option<u64>,
}

#[derive(Deserialize)]
struct ListParams {
    #[serde(default)]
    cursor: Option<String>,
}

/// True for the methods [`handle`] serves.
pub fn is_tasks_method(method: &str) -> bool {
    matches!(
        method,
        "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel"
    )
}

/// Serves `tasks/get`, `tasks/list`, `tasks/cancel` and `tasks/result` for `session`.
/// `tasks/result` blocks until the task is terminal. `None` for any other method.
pub fn handle(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    method: &str,
    params: Option<Value>,
) -> Option<Result<Value, RpcError>> {
    let result = match method {
        "tasks/get" => get(store, session, params),
        "tasks/list" => list(store, session, params),
        "tasks/cancel" => cancel(store, session, params),
        "tasks/result" => result(store, session, params),
        _ => return None,
    };
    Some(result)
}

/// Whether `tasks/result` with these params would block: only when they name a task this
/// session can see that has not ended yet. Anything else (bad params, an unknown id, a
/// finished task) gets its answer at once, so a server can serve it on the thread that read
/// it rather than on a waiting thread of its own.
pub fn result_would_block(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<&Value>,
) -> bool {
    blocking_result_task(store, session, params).is_some()
}

/// The task a `tasks/result` would wait for (see [`result_would_block`]), if any.
pub(crate) fn blocking_result_task(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<&Value>,
) -> Option<TaskId> {
    let id = task_id(params.cloned()).ok()?;
    matches!(store.get(id, session), Ok(task) if !task.status.is_terminal()).then_some(id)
}

fn get(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let id = task_id(params)?;
    Ok(json!(store.get(id, session)?))
}

fn list(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let ListParams { cursor } = jsonrpc::params(params)?;
    let page = store.list(session, cursor.as_deref())?;
    let mut result = json!({ "tasks": page.tasks });
    if let Some(next) = page.next_cursor {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}

fn cancel(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let id = task_id(params)?;
    let outcome = store.cancel(id, session, Some("Cancelled by requestor".into()))?;
    if !outcome.cancelled {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!(
                "Cannot cancel task: already in terminal status '{}'",
                outcome.task.status
            ),
        ));
    }
    Ok(json!(outcome.task))
}

fn result(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let id = task_id(params)?;
    let task = store.wait_terminal(id, session, None)?;
    match store.get_result(id, session) {
        Ok(stored) => match stored.outcome {
            Outcome::Result(value) => Ok(with_related_task((*value).clone(), id)),
            Outcome::Error(error) => Err(RpcError::from_value(&error)),
        },
        Err(StoreError::NoResult { status, expired }) => Err(no_result(&task, status, expired)),
        Err(other) => Err(rpc_error(&other)),
    }
}

/// The error `tasks/result` answers for a terminal task without an outcome: -32602 for a
/// cancelled task (there is nothing to return) and for one that failed by expiring (the
/// spec's code for an expired task, though it stays readable for its grace period), -32603
/// for one set `failed` by hand.
fn no_result(task: &Task, status: TaskStatus, expired: bool) -> RpcError {
    let id = task.task_id;
    match status {
        TaskStatus::Cancelled => RpcError::new(
            INVALID_PARAMS,
            format!("Task {id} was cancelled and has no result"),
        ),
        _ if expired => RpcError::new(
            INVALID_PARAMS,
            match &task.status_message {
                Some(why) => format!("Failed to retrieve task: Task has expired ({why})"),
                None => "Failed to retrieve task: Task has expired".to_string(),
            },
        ),
        _ => RpcError::new(
            INTERNAL_ERROR,
            task.status_message
                .clone()
                .unwrap_or_else(|| format!("Task {id} ended '{status}' without a result")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn related_task_meta_names_the_task_under_the_spec_key() {
        let id = TaskId::from_u128(0x5c1e_0000_0000_4000_8000_0000_0000_0001);
        let expected =
            json!({ RELATED_TASK: { "taskId": "5c1e0000-0000-4000-8000-000000000001" } });
        assert_eq!(related_task(id), expected);
        let result = with_related_task(json!({"content": []}), id);
        assert_eq!(result["_meta"], expected);
    }

    #[test]
    fn the_related_task_joins_what_meta_already_holds_and_replaces_what_is_no_object() {
        let id = TaskId::from_u128(7);
        let kept = with_related_task(json!({"_meta": {"progressToken": 3}}), id);
        assert_eq!(kept["_meta"]["progressToken"], 3, "{kept}");
        assert_eq!(
            kept["_meta"][RELATED_TASK]["taskId"],
            id.to_string(),
            "{kept}"
        );
        let replaced = with_related_task(json!({"_meta": "junk"}), id);
        assert_eq!(replaced["_meta"], related_task(id), "{replaced}");
    }
}
