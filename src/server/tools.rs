//! Tools: synchronous closures with a name, a JSON schema and a task-support level.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::{json, Value};

use super::context::TaskContext;
use crate::protocol::RpcError;

/// Whether a tool may, must or must not run as a task (`execution.taskSupport`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TaskSupport {
    /// Never a task; a task-augmented call is refused with -32601.
    Forbidden,
    /// The client chooses.
    Optional,
    /// Always a task; a plain call is refused with -32601.
    Required,
}

impl TaskSupport {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

/// What a tool returns: a `CallToolResult` object (which may carry `isError: true`), or a
/// JSON-RPC error. A result that is not an object is the tool's failure: the call gets an
/// internal error (-32603) instead.
pub type ToolResult = Result<Value, RpcError>;

type Handler = dyn Fn(Value, &TaskContext) -> ToolResult + Send + Sync;
type PreflightFn = dyn Fn(&Value, Option<&Value>) -> Preflight + Send + Sync;

/// What a tool's preflight decides before any task exists (the SEP-2663 multi-round-trip
/// flow: a call may first answer `input_required`, and the client repeats it with
/// `inputResponses`).
#[derive(Clone, PartialEq, Debug)]
pub enum Preflight {
    /// Go ahead: run the tool (as a task or inline, as usual).
    Proceed,
    /// Answer the call with these input requests; the client calls again with the answers.
    NeedInput(crate::InputRequests),
}

/// A tool the server offers.
#[derive(Clone)]
pub struct Tool {
    name: String,
    description: String,
    input_schema: Value,
    task_support: TaskSupport,
    handler: Arc<Handler>,
    preflight: Option<Arc<PreflightFn>>,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("task_support", &self.task_support)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// A tool; `handler` gets the call's `arguments` (an object, `{}` when absent) and the
    /// context of the run (task id, cancellation, status messages, input requests).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        task_support: TaskSupport,
        handler: impl Fn(Value, &TaskContext) -> ToolResult + Send + Sync + 'static,
    ) -> Tool {
        Tool {
            name: name.into(),
            description: description.into(),
            input_schema,
            task_support,
            handler: Arc::new(handler),
            preflight: None,
        }
    }

    /// Adds a preflight, run on SEP-2663 calls before any task is created: it sees the
    /// arguments and the call's `inputResponses` (if any) and may ask for input first. The
    /// handler later reads those answers with [`TaskContext::call_input`].
    ///
    /// The preflight runs on the thread that reads the client's messages, before the call
    /// takes a worker: keep it to quick checks of the arguments. While it runs, nothing
    /// else from that client is handled (over stdio, not even a `tasks/get` or a cancel);
    /// slow work, and anything that waits, belongs in the handler.
    pub fn with_preflight(
        mut self,
        preflight: impl Fn(&Value, Option<&Value>) -> Preflight + Send + Sync + 'static,
    ) -> Tool {
        self.preflight = Some(Arc::new(preflight));
        self
    }

    /// Runs the preflight, if the tool has one.
    pub fn preflight(&self, arguments: &Value, responses: Option<&Value>) -> Preflight {
        match &self.preflight {
            Some(preflight) => preflight(arguments, responses),
            None => Preflight::Proceed,
        }
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its task-support level.
    pub fn task_support(&self) -> TaskSupport {
        self.task_support
    }

    /// Runs the handler.
    pub fn call(&self, arguments: Value, context: &TaskContext) -> ToolResult {
        (self.handler)(arguments, context)
    }

    /// The tool as `tools/list` shows it.
    pub fn descriptor(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "execution": { "taskSupport": self.task_support.as_str() },
        })
    }
}

/// The tools a server offers, by name.
#[derive(Clone, Debug, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Tool>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Adds (or replaces) a tool.
    pub fn register(&mut self, tool: Tool) {
        self.tools.insert(tool.name.clone(), tool);
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// Every tool, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }
}

/// A successful `CallToolResult` with one text block.
pub fn text_result(text: impl Into<String>) -> Value {
    json!({ "content": [{ "type": "text", "text": text.into() }] })
}

/// A `CallToolResult` that reports a tool execution error (`isError: true`).
pub fn error_result(text: impl Into<String>) -> Value {
    json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true })
}
