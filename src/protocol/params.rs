//! Parameters both revisions share.

use serde::Deserialize;
use serde_json::Value;

use super::errors::rpc_error;
use super::jsonrpc::{self, RpcError};
use crate::model::TaskId;
use crate::StoreError;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskIdParams {
    task_id: String,
}

/// The task a `tasks/*` request names in `params.taskId`. A missing or mistyped field is
/// -32602 like any bad parameter; text that is not a task id is the same -32602 as an
/// unknown task.
pub(crate) fn task_id(params: Option<Value>) -> Result<TaskId, RpcError> {
    let TaskIdParams { task_id } = jsonrpc::params(params)?;
    parse_task_id(&task_id)
}

/// A task id from the wire; text that is not one is reported like an unknown task.
pub(crate) fn parse_task_id(text: &str) -> Result<TaskId, RpcError> {
    TaskId::parse(text).ok_or_else(|| rpc_error(&StoreError::NotFound))
}
