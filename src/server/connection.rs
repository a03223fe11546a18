//! One client connection, independent of the transport: it parses incoming messages,
//! answers requests through a responder the transport supplies, sends server-to-client
//! requests and notifications through an outgoing channel, and routes the client's
//! responses back to the tool waiting for them.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};

use super::context::{ClientPeer, TaskContext};
use super::tools::{TaskSupport, Tool};
use super::ServerCore;
use crate::model::{CreateTask, SessionId, StoreEvent, TaskId};
use crate::protocol::jsonrpc::{self, Message, Request, RequestId, RpcError, INTERNAL_ERROR};
use crate::protocol::{rpc_error, v2025};
use crate::store::CancelToken;
use crate::StoreError;

/// Where a request's response goes (the transport decides: a line on stdout, an HTTP body).
pub type Responder = Box<dyn FnOnce(Value) + Send>;

/// Protocol versions this server accepts at `initialize`, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Most `tasks/result` calls one connection may have blocked at once.
const MAX_BLOCKED_RESULTS: usize = 256;

struct Pending {
    task: Option<TaskId>,
    reply: Sender<Result<Value, RpcError>>,
}

/// A client connection's state.
pub struct Connection {
    core: Arc<ServerCore>,
    outgoing: Sender<Value>,
    session: Option<SessionId>,
    client_capabilities: Mutex<Value>,
    pending: Mutex<HashMap<RequestId, Pending>>,
    next_request_id: AtomicI64,
    blocked_results: AtomicUsize,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    task: Option<v2025::TaskMetadata>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    #[serde(default)]
    protocol_version: Option<String>,
    #[serde(default)]
    capabilities: Option<Value>,
}

impl Connection {
    pub(crate) fn new(
        core: Arc<ServerCore>,
        outgoing: Sender<Value>,
        session: Option<SessionId>,
    ) -> Arc<Connection> {
        Arc::new(Connection {
            core,
            outgoing,
            session,
            client_capabilities: Mutex::new(json!({})),
            pending: Mutex::new(HashMap::new()),
            next_request_id: AtomicI64::new(1),
            blocked_results: AtomicUsize::new(0),
        })
    }

    /// Handles one incoming message (a line of stdio, an HTTP body). Requests are answered
    /// through `respond` (called exactly once, possibly later and from another thread);
    /// notifications and responses never call it.
    pub fn handle_text(self: &Arc<Self>, text: &str, respond: Responder) {
        match jsonrpc::parse_message(text) {
            Ok(message) => self.handle_message(message, respond),
            Err(rejected) => respond(jsonrpc::error_response(
                rejected.id.as_ref(),
                &rejected.error,
            )),
        }
    }

    /// Handles one parsed message; see [`handle_text`](Self::handle_text).
    pub fn handle_message(self: &Arc<Self>, message: Message, respond: Responder) {
        match message {
            Message::Request(request) => self.handle_request(request, respond),
            Message::Notification(notification) => {
                log::debug!("notification {}", notification.method);
            }
            Message::Response(response) => {
                let pending = self.pending.lock().remove(&response.id);
                match pending {
                    Some(pending) => {
                        let _ = pending.reply.send(response.outcome);
                    }
                    None => log::debug!("response to unknown request {}", response.id),
                }
            }
        }
    }

    fn handle_request(self: &Arc<Self>, request: Request, respond: Responder) {
        let Request { id, method, params } = request;
        let reply = Reply::new(move |outcome: Result<Value, RpcError>| {
            respond(match outcome {
                Ok(result) => jsonrpc::response(&id, result),
                Err(error) => jsonrpc::error_response(Some(&id), &error),
            })
        });
        match method.as_str() {
            "initialize" => reply.send(self.initialize(params)),
            "ping" => reply.send(Ok(json!({}))),
            "tools/list" => reply.send(Ok(self.tools_list())),
            "tools/call" => self.tools_call(params, reply),
            "tasks/result" => self.tasks_result(params, reply),
            m if v2025::is_tasks_method(m) => {
                let store = self.core.store.as_ref();
                let outcome = v2025::handle(store, self.session.as_ref(), m, params);
                reply.send(outcome.unwrap_or_else(|| Err(RpcError::method_not_found(m))))
            }
            other => reply.send(Err(RpcError::method_not_found(other))),
        }
    }

    fn initialize(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let params: InitializeParams = jsonrpc::params(params)?;
        *self.client_capabilities.lock() = params.capabilities.unwrap_or_else(|| json!({}));
        let requested = params.protocol_version.unwrap_or_default();
        let version = SUPPORTED_VERSIONS
            .iter()
            .find(|v| **v == requested)
            .unwrap_or(&SUPPORTED_VERSIONS[0]);
        Ok(json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": { "listChanged": false },
                "tasks": v2025::capabilities(),
            },
            "serverInfo": { "name": self.core.name, "version": self.core.version },
        }))
    }

    fn tools_list(&self) -> Value {
        let tools: Vec<Value> = self.core.tools.iter().map(Tool::descriptor).collect();
        json!({ "tools": tools })
    }

    fn tools_call(self: &Arc<Self>, params: Option<Value>, reply: Reply) {
        let origin = json!({ "method": "tools/call", "params": params.clone(), "revision": v2025::PROTOCOL_VERSION });
        let call: CallParams = match jsonrpc::params(params) {
            Ok(call) => call,
            Err(error) => return reply.send(Err(error)),
        };
        let Some(tool) = self.core.tools.get(&call.name).cloned() else {
            return reply.send(Err(RpcError::invalid_params(format!(
                "unknown tool '{}'",
                call.name
            ))));
        };
        let arguments = match call.arguments {
            None | Some(Value::Null) => json!({}),
            Some(object @ Value::Object(_)) => object,
            Some(_) => {
                return reply.send(Err(RpcError::invalid_params("arguments must be an object")))
            }
        };
        match (call.task, tool.task_support()) {
            (Some(_), TaskSupport::Forbidden) => reply.send(Err(RpcError::new(
                jsonrpc::METHOD_NOT_FOUND,
                format!(
                    "Tool '{}' does not support task-augmented execution",
                    call.name
                ),
            ))),
            (None, TaskSupport::Required) => reply.send(Err(RpcError::new(
                jsonrpc::METHOD_NOT_FOUND,
                format!(
                    "Tool '{}' must be called as a task (params.task)",
                    call.name
                ),
            ))),
            (Some(meta), _) => self.start_task(tool, arguments, meta, origin, reply),
            (None, _) => self.run_inline(tool, arguments, reply),
        }
    }

    /// Creates the task, answers with it, then runs the tool on the worker pool.
    fn start_task(
        self: &Arc<Self>,
        tool: Tool,
        arguments: Value,
        meta: v2025::TaskMetadata,
        origin: Value,
        reply: Reply,
    ) {
        let store = &self.core.store;
        let mut create = CreateTask::new().origin(origin);
        create.ttl = meta.ttl;
        create.session = self.session.clone();
        let task = match store.create(create) {
            Ok(task) => task,
            Err(error) => return reply.send(Err(rpc_error(&error))),
        };
        let id = task.task_id;
        let token = match store.cancel_token(id, self.session.as_ref()) {
            Ok(token) => token,
            Err(error) => return reply.send(Err(rpc_error(&error))),
        };
        reply.send(Ok(v2025::create_result(&task)));
        let connection = self.clone();
        let submitted = self.core.pool.submit(move || {
            let context = connection.context(Some(id), token.clone());
            let outcome = run_tool(&tool, arguments, &context);
            if token.is_cancelled() {
                log::info!("task {id} observed cancellation");
            }
            let (status, outcome, message) = v2025::settle(outcome);
            let session = connection.session.as_ref();
            match connection
                .core
                .store
                .store_result(id, session, status, outcome, message)
            {
                Ok(_) | Err(StoreError::AlreadyTerminal(_)) | Err(StoreError::NotFound) => {}
                Err(error) => log::warn!("task {id}: could not store its result: {error}"),
            }
        });
        if submitted.is_err() {
            let busy = RpcError::internal("the server is busy; try again later");
            let _ = store.store_result(
                id,
                self.session.as_ref(),
                crate::TaskStatus::Failed,
                crate::Outcome::error(busy.to_value()),
                Some("the server is busy".into()),
            );
        }
    }

    /// Runs a plain (non-task) call on the worker pool and answers with its result. If the
    /// pool refuses the job, dropping it drops the reply, which answers "busy".
    fn run_inline(self: &Arc<Self>, tool: Tool, arguments: Value, reply: Reply) {
        let connection = self.clone();
        let _ = self.core.pool.submit(move || {
            let context = connection.context(None, CancelToken::new());
            reply.send(run_tool(&tool, arguments, &context));
        });
    }

    /// `tasks/result` blocks until the task ends, so it waits on its own thread and never
    /// holds up the connection's reader.
    fn tasks_result(self: &Arc<Self>, params: Option<Value>, reply: Reply) {
        if self.blocked_results.fetch_add(1, Ordering::AcqRel) >= MAX_BLOCKED_RESULTS {
            self.blocked_results.fetch_sub(1, Ordering::AcqRel);
            return reply.send(Err(RpcError::internal(
                "too many tasks/result calls waiting",
            )));
        }
        let connection = self.clone();
        let spawned = std::thread::Builder::new()
            .name("mcp-tasks-result".into())
            .spawn(move || {
                let store = connection.core.store.as_ref();
                let session = connection.session.as_ref();
                let outcome = v2025::handle(store, session, "tasks/result", params)
                    .expect("tasks/result is a tasks method");
                connection.blocked_results.fetch_sub(1, Ordering::AcqRel);
                reply.send(outcome);
            });
        if let Err(error) = spawned {
            log::error!("cannot spawn a tasks/result waiter: {error}");
            self.blocked_results.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn context(self: &Arc<Self>, task: Option<TaskId>, token: CancelToken) -> TaskContext {
        TaskContext::new(
            task,
            self.session.clone(),
            self.core.store.clone(),
            token,
            self.clone(),
        )
    }

    /// Reacts to a store event: a status notification for this connection's tasks, and an
    /// end to any client request a task that just ended was waiting on.
    pub fn handle_store_event(&self, event: &StoreEvent) {
        let (task_id, session, task) = match event {
            StoreEvent::Status { task, session } => (task.task_id, session, Some(task)),
            StoreEvent::Expired { task_id, session } => (*task_id, session, None),
            _ => return,
        };
        if *session != self.session {
            return;
        }
        if let Some(task) = task {
            let _ = self.outgoing.send(v2025::status_notification(task));
            if !task.status.is_terminal() {
                return;
            }
        }
        // Dropping the reply sender wakes the tool blocked on it with an error.
        self.pending
            .lock()
            .retain(|_, pending| pending.task != Some(task_id));
    }

    /// Ends every outstanding client request (the transport closed).
    pub fn close(&self) {
        self.pending.lock().clear();
    }

    fn client_supports(&self, method: &str) -> bool {
        let capability = match method {
            "elicitation/create" => "elicitation",
            "sampling/createMessage" => "sampling",
            "roots/list" => "roots",
            _ => return true,
        };
        self.client_capabilities.lock().get(capability).is_some()
    }
}

/// The one answer a request gets. If it is dropped unanswered (a refused job, a panic, a
/// bug), it answers with an error itself, so a client is never left waiting.
struct Reply(Option<ReplyFn>);

type ReplyFn = Box<dyn FnOnce(Result<Value, RpcError>) + Send>;

impl Reply {
    fn new(f: impl FnOnce(Result<Value, RpcError>) + Send + 'static) -> Reply {
        Reply(Some(Box::new(f)))
    }

    fn send(mut self, outcome: Result<Value, RpcError>) {
        if let Some(f) = self.0.take() {
            f(outcome);
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(RpcError::internal(
                "the server could not complete the request (busy or shutting down)",
            )));
        }
    }
}

fn run_tool(tool: &Tool, arguments: Value, context: &TaskContext) -> Result<Value, RpcError> {
    std::panic::catch_unwind(AssertUnwindSafe(|| tool.call(arguments, context))).unwrap_or_else(
        |_| {
            Err(RpcError::internal(format!(
                "tool '{}' panicked",
                tool.name()
            )))
        },
    )
}

impl ClientPeer for Connection {
    fn request(
        &self,
        method: &str,
        params: Value,
        task: Option<TaskId>,
    ) -> Result<Value, RpcError> {
        if !self.client_supports(method) {
            return Err(RpcError::new(
                INTERNAL_ERROR,
                format!("the client did not declare support for {method}"),
            ));
        }
        let id = RequestId::String(format!(
            "s-{}",
            self.next_request_id.fetch_add(1, Ordering::Relaxed)
        ));
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.pending
            .lock()
            .insert(id.clone(), Pending { task, reply });
        if self
            .outgoing
            .send(jsonrpc::request(&id, method, params))
            .is_err()
        {
            self.pending.lock().remove(&id);
            return Err(RpcError::internal("the connection is closed"));
        }
        // A task that ended while we were registering would never drop our sender: check.
        if let Some(task) = task {
            let ended = self
                .core
                .store
                .get(task, self.session.as_ref())
                .map(|t| t.status.is_terminal())
                .unwrap_or(true);
            if ended {
                self.pending.lock().remove(&id);
            }
        }
        answer.recv().unwrap_or_else(|_| {
            Err(RpcError::new(
                INTERNAL_ERROR,
                format!("{method} was abandoned: the task ended or the connection closed"),
            ))
        })
    }
}
