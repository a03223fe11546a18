//! The demo tools `mcp-task-server` offers, also used by the interop tests. Their exact
//! results are a contract shared with the reference server under `tests/interop/ts/`.

use std::time::Duration;

use serde_json::{json, Value};

use super::context::TaskContext;
use super::tools::{error_result, text_result, TaskSupport, Tool, ToolResult};
use crate::protocol::RpcError;

fn integer(args: &Value, name: &str) -> Result<u64, RpcError> {
    args.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| RpcError::invalid_params(format!("'{name}' must be a non-negative integer")))
}

fn string<'a>(args: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("'{name}' must be a string")))
}

fn ms_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "ms": { "type": "integer", "minimum": 0, "description": "milliseconds" } },
        "required": ["ms"],
    })
}

/// Waits `ms`, stopping early if the task is cancelled.
fn sleep(args: Value, ctx: &TaskContext) -> ToolResult {
    let ms = integer(&args, "ms")?;
    ctx.sleep(Duration::from_millis(ms))?;
    Ok(text_result(format!("slept {ms} ms")))
}

/// `sleep{ms}`: task optional.
pub fn sleep_tool() -> Tool {
    Tool::new(
        "sleep",
        "Waits `ms` milliseconds, then reports it. May run as a task.",
        ms_schema(),
        TaskSupport::Optional,
        sleep,
    )
}

/// `sleep_required{ms}`: the same, task required.
pub fn sleep_required_tool() -> Tool {
    Tool::new(
        "sleep_required",
        "Waits `ms` milliseconds, then reports it. Always a task.",
        ms_schema(),
        TaskSupport::Required,
        sleep,
    )
}

/// `fail{ms}`: waits, then ends with a tool execution error (`isError`).
pub fn fail_tool() -> Tool {
    Tool::new(
        "fail",
        "Waits `ms` milliseconds, then fails with a tool error. May run as a task.",
        ms_schema(),
        TaskSupport::Optional,
        |args, ctx| {
            let ms = integer(&args, "ms")?;
            ctx.sleep(Duration::from_millis(ms))?;
            Ok(error_result(format!("failed after {ms} ms")))
        },
    )
}

/// `echo{text}`: never a task.
pub fn echo_tool() -> Tool {
    Tool::new(
        "echo",
        "Returns `text`. Never a task.",
        json!({
            "type": "object",
            "properties": { "text": { "type": "string" } },
            "required": ["text"],
        }),
        TaskSupport::Forbidden,
        |args, _| Ok(text_result(string(&args, "text")?)),
    )
}

/// `ask{question}`: asks the client through elicitation, then completes with the answer.
pub fn ask_tool() -> Tool {
    Tool::new(
        "ask",
        "Asks the client `question` through elicitation and returns the answer. Always a task.",
        json!({
            "type": "object",
            "properties": { "question": { "type": "string" } },
            "required": ["question"],
        }),
        TaskSupport::Required,
        |args, ctx| {
            let question = string(&args, "question")?;
            let answer = ctx.elicit(json!({
                "mode": "form",
                "message": question,
                "requestedSchema": {
                    "type": "object",
                    "properties": { "answer": { "type": "string" } },
                    "required": ["answer"],
                },
            }))?;
            let action = answer
                .get("action")
                .and_then(Value::as_str)
                .unwrap_or("cancel");
            let text = answer.pointer("/content/answer").and_then(Value::as_str);
            Ok(match (action, text) {
                ("accept", Some(text)) => text_result(format!("answer: {text}")),
                _ => error_result(format!("no answer ({action})")),
            })
        },
    )
}

/// Every demo tool.
pub fn tools() -> Vec<Tool> {
    vec![
        sleep_tool(),
        sleep_required_tool(),
        fail_tool(),
        echo_tool(),
        ask_tool(),
    ]
}
