//! The demo tools `mcp-task-server` offers, also used by the interop tests. Their exact
//! results are a contract shared with the reference server under `tests/interop/ts/`; the
//! fixtures (`greet`, `slow_compute`, ...) are the ones the official conformance suite's
//! `tasks-*` scenarios call.

use std::time::Duration;

use serde_json::{json, Value};

use super::context::TaskContext;
use super::tools::{error_result, text_result, Preflight, TaskSupport, Tool, ToolResult};
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

/// `count{to, ms}`: task optional; counts to `to`, one step every `ms` milliseconds,
/// setting the status message to `step i of n` as it goes (progress for pollers).
pub fn count_tool() -> Tool {
    Tool::new(
        "count",
        "Counts to `to`, one step every `ms` ms, reporting `step i of n` as its status \
         message. May run as a task.",
        json!({
            "type": "object",
            "properties": {
                "to": { "type": "integer", "minimum": 0 },
                "ms": { "type": "integer", "minimum": 0, "description": "milliseconds per step" },
            },
            "required": ["to", "ms"],
        }),
        TaskSupport::Optional,
        |args, ctx| {
            let to = integer(&args, "to")?;
            let ms = integer(&args, "ms")?;
            for step in 1..=to {
                // Only a task has a status message; a failure here is not the tool's.
                let _ = ctx.set_status_message(format!("step {step} of {to}"));
                ctx.sleep(Duration::from_millis(ms))?;
            }
            Ok(text_result(format!("counted to {to}")))
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

fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

fn form(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": object_schema(properties, required),
    })
}

fn accepted(answer: &Value) -> bool {
    answer.get("action").and_then(Value::as_str) == Some("accept")
}

/// `greet{name}`: never a task; `Hello, {name}!`.
pub fn greet_tool() -> Tool {
    Tool::new(
        "greet",
        "Greets `name`. Never a task.",
        object_schema(json!({ "name": { "type": "string" } }), &["name"]),
        TaskSupport::Forbidden,
        |args, _| Ok(text_result(format!("Hello, {}!", string(&args, "name")?))),
    )
}

/// `slow_compute{seconds, label?}`: task-supporting; waits, stopping early when cancelled.
pub fn slow_compute_tool() -> Tool {
    Tool::new(
        "slow_compute",
        "Computes for `seconds` (stops early when cancelled). May run as a task.",
        object_schema(
            json!({ "seconds": { "type": "number", "minimum": 0 }, "label": { "type": "string" } }),
            &["seconds"],
        ),
        TaskSupport::Optional,
        |args, ctx| {
            let seconds = args
                .get("seconds")
                .and_then(Value::as_f64)
                .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
                .ok_or_else(|| RpcError::invalid_params("'seconds' must be between 0 and 86400"))?;
            let label = args
                .get("label")
                .and_then(Value::as_str)
                .unwrap_or("result");
            ctx.sleep(Duration::from_secs_f64(seconds))?;
            Ok(text_result(format!("computed {label} in {seconds} s")))
        },
    )
}

/// `failing_job`: task required; a tool execution error after about a second.
pub fn failing_job_tool() -> Tool {
    Tool::new(
        "failing_job",
        "Fails with a tool execution error after about a second. Always a task.",
        object_schema(json!({}), &[]),
        TaskSupport::Required,
        |_, ctx| {
            ctx.sleep(Duration::from_secs(1))?;
            Ok(error_result("the job failed"))
        },
    )
}

/// `protocol_error_job`: task-supporting; ends with a JSON-RPC error. It works for a moment
/// first, so a SEP-2663 call is promoted to a task before it fails.
pub fn protocol_error_job_tool() -> Tool {
    Tool::new(
        "protocol_error_job",
        "Ends with a JSON-RPC error (the task ends failed). May run as a task.",
        object_schema(json!({}), &[]),
        TaskSupport::Optional,
        |_, ctx| {
            ctx.sleep(Duration::from_millis(300))?;
            Err(RpcError::new(-32000, "the job hit a protocol error"))
        },
    )
}

/// `confirm_delete{filename}`: asks for confirmation (one input request), then completes.
pub fn confirm_delete_tool() -> Tool {
    Tool::new(
        "confirm_delete",
        "Asks the client to confirm deleting `filename`, then reports. Always a task.",
        object_schema(json!({ "filename": { "type": "string" } }), &["filename"]),
        TaskSupport::Required,
        |args, ctx| {
            let filename = string(&args, "filename")?;
            let answer = ctx.elicit(form(
                &format!("Delete {filename}?"),
                json!({ "confirm": { "type": "boolean" } }),
                &["confirm"],
            ))?;
            let confirmed = accepted(&answer)
                && answer.pointer("/content/confirm").and_then(Value::as_bool) == Some(true);
            Ok(text_result(if confirmed {
                format!("deleted {filename}")
            } else {
                format!("kept {filename}")
            }))
        },
    )
}

/// `multi_input`: two input requests pending at once, then completes with both answers.
pub fn multi_input_tool() -> Tool {
    Tool::new(
        "multi_input",
        "Asks two questions at once, then reports both answers. Always a task.",
        object_schema(json!({}), &[]),
        TaskSupport::Required,
        |_, ctx| {
            let properties =
                json!({ "name": { "type": "string" }, "confirm": { "type": "boolean" } });
            let answers = ctx.request_input(vec![
                (
                    "elicitation/create".into(),
                    form("What is your name?", properties.clone(), &[]),
                ),
                (
                    "elicitation/create".into(),
                    form("Shall I proceed?", properties, &[]),
                ),
            ])?;
            let summary: Vec<String> = answers
                .iter()
                .map(|a| a.get("content").map_or("(none)".into(), Value::to_string))
                .collect();
            Ok(text_result(format!("answers: {}", summary.join(", "))))
        },
    )
}

/// `test_tool_with_task`: task required. On SEP-2663 it first asks `user_name` through the
/// multi-round-trip flow (no task yet); the repeated call becomes a task whose result
/// greets that name. On 2025-11-25 it asks from inside the task instead.
pub fn test_tool_with_task_tool() -> Tool {
    fn name_form() -> Value {
        form(
            "What is your name?",
            json!({ "name": { "type": "string" } }),
            &["name"],
        )
    }
    fn name_in(answer: &Value) -> Option<String> {
        answer
            .pointer("/content/name")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
    Tool::new(
        "test_tool_with_task",
        "Asks the caller's name, then greets it from a task. Always a task.",
        object_schema(json!({}), &[]),
        TaskSupport::Required,
        |_, ctx| {
            let name = match ctx.call_input("user_name") {
                Some(answer) => name_in(answer),
                None => name_in(&ctx.elicit(name_form())?),
            }
            .unwrap_or_else(|| "stranger".into());
            ctx.sleep(Duration::from_millis(300))?;
            Ok(text_result(format!("Hello, {name}! (from task)")))
        },
    )
    .with_preflight(
        |_, responses| match responses.and_then(|r| r.get("user_name")) {
            Some(_) => Preflight::Proceed,
            None => Preflight::NeedInput(
                [(
                    "user_name".to_string(),
                    json!({ "method": "elicitation/create", "params": name_form() }),
                )]
                .into(),
            ),
        },
    )
}

/// Every demo tool, the conformance fixtures included.
pub fn tools() -> Vec<Tool> {
    vec![
        sleep_tool(),
        sleep_required_tool(),
        fail_tool(),
        count_tool(),
        echo_tool(),
        ask_tool(),
        greet_tool(),
        slow_compute_tool(),
        failing_job_tool(),
        protocol_error_job_tool(),
        confirm_delete_tool(),
        multi_input_tool(),
        test_tool_with_task_tool(),
    ]
}
