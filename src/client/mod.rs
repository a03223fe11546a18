//! A blocking MCP client that calls tools and follows their tasks to the end.
//!
//! It connects over stdio (spawning the server) or Streamable HTTP (with the `http`
//! feature), speaks either revision of MCP tasks, and handles tasks by itself:
//! [`Client::call_tool`] polls `tasks/get` at the server's suggested interval (following
//! changes to it), answers the server's input requests through registered elicitation and
//! sampling handlers (each request once), and returns the tool's final result, or a typed
//! [`ClientError`] for a task that failed, was cancelled, expired, got stuck in
//! `input_required`, outlived the call's deadline, or could not be followed (its polls or
//! updates failed three times in a row: `TaskAbandoned`). Passing failures are retried at
//! the poll interval.
//!
//! - **2025-11-25**: `initialize` + `notifications/initialized`; a task is asked for
//!   (`params.task`) when the tool's `execution.taskSupport` is `optional` or `required`
//!   and the server declared `capabilities.tasks.requests.tools.call` (otherwise the call
//!   goes plain). While it polls, the client holds a `tasks/result` open: the server's
//!   `elicitation/create` / `sampling/createMessage` requests (tagged with the related
//!   task) are answered as they arrive, on stdio or on the HTTP `GET` event stream, and
//!   the answers carry the same related-task `_meta`.
//! - **SEP-2663** (protocol 2026-07-28): `server/discover`; every request declares the
//!   tasks extension in its `_meta`, and the server decides whether a call becomes a task.
//!   A call answered `input_required` (multi-round-trip) is answered through the handlers
//!   and repeated with `inputResponses`; a task's `inputRequests` are answered with
//!   `tasks/update`. A followed task is also subscribed to (`subscriptions/listen`), and
//!   each `notifications/tasks` about it brings the next poll forward (see
//!   [`ClientBuilder::task_notifications`]).
//!
//! ```no_run
//! use mcp_task_store::client::Client;
//! use serde_json::json;
//!
//! let client = Client::builder()
//!     .on_elicitation(|request| Ok(json!({"action": "accept", "content": {"answer": "42"}})))
//!     .connect_stdio(std::process::Command::new("mcp-task-server"))?;
//! let result = client.call_tool("ask", json!({"question": "What is the answer?"}))?;
//! println!("{result}");
//! # Ok::<(), mcp_task_store::client::ClientError>(())
//! ```

mod builder;
mod error;
mod follow;
#[cfg(feature = "http")]
mod http;
mod transport;
mod types;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{json, Value};

use builder::Config;
pub use builder::{
    ClientBuilder, DEFAULT_MAX_POLL_INTERVAL, DEFAULT_POLL_INTERVAL, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STUCK_POLLS,
};
pub use error::ClientError;
use follow::Follow;
pub use follow::MAX_HTTP_TASK_SUBSCRIPTIONS;
#[cfg(feature = "http")]
#[doc(hidden)]
pub use http::fuzz_response;
pub use types::{
    CallOutcome, InputRequest, InputRequests, InputResponses, PolledTask, Progress, TaskInfo,
    TaskList, ToolCall,
};

use crate::protocol::jsonrpc;
use crate::protocol::meta::{CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY, TASKS_EXTENSION};
pub use crate::protocol::Revision;
use crate::protocol::{sep2663, v2025};
pub use crate::server::TaskSupport;
pub use transport::MAX_QUEUED_SERVER_REQUESTS;
use transport::{Handlers, Pending, Shared, Transport};

/// The most `tools/list` pages the client follows before it takes the listing for one that
/// never ends ([`ClientError::Protocol`]).
pub const MAX_TOOL_PAGES: usize = 1000;
/// The most tools the client accepts from one `tools/list` listing, all pages together,
/// before it fails with [`ClientError::Protocol`] rather than hold them all.
pub const MAX_TOOLS: usize = 100_000;

struct Inner {
    shared: Arc<Shared>,
    transport: Arc<dyn Transport>,
    config: Config,
    handlers: Handlers,
    server: Mutex<Value>,
    /// Each tool's task support, with the tools generation it was listed under.
    tools: Mutex<Option<(u64, BTreeMap<String, TaskSupport>)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.stop_dispatcher();
        self.transport.shutdown();
    }
}

/// A progress callback.
type ProgressFn<'a> = Box<dyn FnMut(&Progress) + 'a>;

/// Per-call options of [`Client::call_tool_with`] and [`Client::follow_task`].
#[derive(Default)]
pub struct CallOptions<'a> {
    deadline: Option<Duration>,
    task_ttl: Option<u64>,
    progress: Option<ProgressFn<'a>>,
}

impl std::fmt::Debug for CallOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("deadline", &self.deadline)
            .field("task_ttl", &self.task_ttl)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl<'a> CallOptions<'a> {
    /// The defaults: the client's deadline, the server's TTL, no progress reports.
    pub fn new() -> Self {
        CallOptions::default()
    }

    /// An overall deadline for this call (overrides the client's; see
    /// [`ClientBuilder::deadline`]).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The TTL to request for the task, in ms (2025-11-25 only; SEP-2663 servers choose).
    pub fn task_ttl(mut self, ttl_ms: u64) -> Self {
        self.task_ttl = Some(ttl_ms);
        self
    }

    /// Called after the task is created and after every poll.
    pub fn on_progress(mut self, progress: impl FnMut(&Progress) + 'a) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }
}

/// A blocking MCP client. Cheap to clone; clones share the connection, which closes (and a
/// spawned server is told to exit) when the last clone is dropped. Methods may be called
/// from several threads at once.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("revision", &self.inner.config.revision)
            .finish_non_exhaustive()
    }
}

/// A request on its way: its id and where its answer will arrive.
struct InFlight {
    id: jsonrpc::RequestId,
    pending: Pending,
    /// Whether a `notifications/cancelled` may end it once nobody waits for it: not an
    /// `initialize`, nor a `tools/call` that may have created a task (which only
    /// `tasks/cancel` may end).
    cancellable: bool,
}

impl Client {
    /// A builder with the defaults (2025-11-25, no handlers, stuck after 60 polls).
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The negotiated revision.
    pub fn revision(&self) -> Revision {
        self.inner.config.revision
    }

    /// The server's handshake answer: the `initialize` result (2025-11-25) or the
    /// `server/discover` result (SEP-2663).
    pub fn server_info(&self) -> Value {
        self.inner.server.lock().clone()
    }

    /// The spawned server's process id ([`ClientBuilder::connect_stdio`] only).
    pub fn server_process_id(&self) -> Option<u32> {
        self.inner.transport.process_id()
    }

    fn capabilities(&self) -> Value {
        let mut capabilities = self.inner.config.declared.clone();
        if self.inner.handlers.elicitation.is_some() {
            capabilities.insert("elicitation".into(), json!({ "form": {} }));
        }
        if self.inner.handlers.sampling.is_some() {
            capabilities.insert("sampling".into(), json!({}));
        }
        if self.inner.handlers.roots.is_some() {
            capabilities.insert("roots".into(), json!({}));
        }
        Value::Object(capabilities)
    }

    fn handshake(&self) -> Result<(), ClientError> {
        let answer = match self.revision() {
            Revision::V2025 => {
                let answer = self.request(
                    "initialize",
                    json!({
                        "protocolVersion": v2025::PROTOCOL_VERSION,
                        "capabilities": self.capabilities(),
                        "clientInfo": {
                            "name": self.inner.config.client_name,
                            "version": self.inner.config.client_version,
                        },
                    }),
                )?;
                // Tasks exist only in 2025-11-25: a server that settles on an older
                // version would not understand the requests this client goes on to send.
                let version = answer.get("protocolVersion").and_then(Value::as_str);
                if version != Some(v2025::PROTOCOL_VERSION) {
                    return Err(ClientError::Unsupported(format!(
                        "the server answered initialize with protocol version {}; this \
                         client speaks {}",
                        version.map_or_else(|| "(none)".to_owned(), |v| format!("'{v}'")),
                        v2025::PROTOCOL_VERSION
                    )));
                }
                self.inner.transport.send(jsonrpc::notification(
                    "notifications/initialized",
                    json!({}),
                ))?;
                answer
            }
            Revision::Sep2663 => {
                let answer = self.request("server/discover", json!({}))?;
                let versions = answer.get("supportedVersions").and_then(Value::as_array);
                let speaks = versions.is_some_and(|v| {
                    v.iter()
                        .any(|v| v.as_str() == Some(sep2663::PROTOCOL_VERSION))
                });
                if !speaks {
                    return Err(ClientError::Unsupported(format!(
                        "the server does not support protocol {} (server/discover: {answer})",
                        sep2663::PROTOCOL_VERSION
                    )));
                }
                answer
            }
        };
        *self.inner.server.lock() = answer;
        self.inner.transport.ready();
        Ok(())
    }

    /// Adds the SEP-2663 per-request declarations to `params._meta`.
    fn with_meta(&self, mut params: Value) -> Value {
        if self.revision() != Revision::Sep2663 {
            return params;
        }
        let mut capabilities = self.capabilities();
        // Beside the extensions the builder declared, if any (a declared `extensions`
        // that is no object cannot hold the tasks extension: it is replaced).
        let extensions = &mut capabilities["extensions"];
        if !extensions.is_object() {
            *extensions = json!({});
        }
        extensions[TASKS_EXTENSION] = json!({});
        if let Value::Object(object) = &mut params {
            let meta = object.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.insert(
                    PROTOCOL_VERSION_KEY.into(),
                    json!(sep2663::PROTOCOL_VERSION),
                );
                meta.insert(CLIENT_CAPABILITIES_KEY.into(), capabilities);
            }
        }
        params
    }

    fn start(&self, method: &str, mut params: Value) -> Result<InFlight, ClientError> {
        // No params (`null`) are an empty object: JSON-RPC params are an object or an
        // array, and a SEP-2663 request needs an object for its `_meta`.
        if params.is_null() {
            params = json!({});
        }
        let may_make_a_task = method == "tools/call"
            && (self.revision() == Revision::Sep2663 || params.get("task").is_some());
        let cancellable = method != "initialize" && !may_make_a_task;
        let (id, pending) = self.inner.shared.register()?;
        let message = jsonrpc::request(&id, method, self.with_meta(params));
        if let Err(error) = self.inner.transport.send_request(&id, message) {
            self.forget(&id);
            return Err(error);
        }
        Ok(InFlight {
            id,
            pending,
            cancellable,
        })
    }

    /// Gives up on a request whose answer did not come in time: it is forgotten and, as
    /// the lifecycle rules ask of a request that timed out, cancelled where forgetting it
    /// does not end its exchange for the server too (stdio; over HTTP its connection
    /// closes) and it may be (see [`InFlight::cancellable`]).
    fn give_up(&self, call: &InFlight) {
        self.forget(&call.id);
        if call.cancellable && !self.inner.transport.abandon_ends_exchange() {
            let cancel = json!({ "requestId": call.id, "reason": "timed out" });
            if let Err(error) = (self.inner.transport)
                .send(jsonrpc::notification("notifications/cancelled", cancel))
            {
                log::info!("mcp client: cannot cancel request {}: {error}", call.id);
            }
        }
    }

    /// Drops request `id`, which nobody waits for any more, and ends its exchange (over
    /// HTTP its connection is shut down, and the thread reading it ends).
    fn forget(&self, id: &jsonrpc::RequestId) {
        self.inner.shared.forget(id);
        self.inner.transport.abandon(id);
    }

    /// Waits for an answer; `Err(None)` when `deadline` passed first.
    fn wait(
        &self,
        call: InFlight,
        deadline: Option<Instant>,
    ) -> Result<Value, Option<ClientError>> {
        let outcome = match deadline {
            Some(at) => match call.pending.recv_deadline(at) {
                Ok(outcome) => outcome,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    self.give_up(&call);
                    return Err(None);
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(self.gone()),
            },
            None => call.pending.recv().unwrap_or_else(|_| Err(self.gone())),
        };
        outcome.map_err(Some)
    }

    fn gone(&self) -> ClientError {
        ClientError::closed(
            self.inner
                .shared
                .closed_reason()
                .unwrap_or_else(|| "the connection is closed".into()),
        )
    }

    /// Sends any request and waits for its result (on SEP-2663 the request's `_meta` gets
    /// the protocol version and the tasks extension). The escape hatch for methods this
    /// client has no wrapper for. `Value::Null` params are sent as an empty object.
    /// Waits at most the request timeout ([`ClientBuilder::request_timeout`]).
    pub fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.ask(method, params, None)
            .map(|answer| answer.expect("no deadline to miss"))
    }

    /// Sends a request and waits for its answer for at most the request timeout, and not
    /// past `deadline`: `Ok(None)` when the deadline came first, [`ClientError::Timeout`]
    /// when the timeout did. Either way the request is forgotten; a late answer is
    /// dropped. A request whose deadline already passed is not sent at all (`Ok(None)`):
    /// it could only be given up on, and a server would still act on it (a `tools/call`
    /// repeated with input a handler gave too late would run its tool, or start a task,
    /// for a call that failed).
    fn ask(
        &self,
        method: &str,
        params: Value,
        deadline: Option<Instant>,
    ) -> Result<Option<Value>, ClientError> {
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(None);
        }
        let call = self.start(method, params)?;
        self.wait_within(call, method, deadline)
    }

    /// Waits for a request already sent, as [`ask`](Self::ask) does.
    fn wait_within(
        &self,
        call: InFlight,
        method: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Value>, ClientError> {
        let timeout = self.inner.config.request_timeout;
        let timeout_at = Instant::now().checked_add(timeout);
        let by = match (deadline, timeout_at) {
            (Some(deadline), Some(timeout_at)) => Some(deadline.min(timeout_at)),
            (deadline, timeout_at) => deadline.or(timeout_at),
        };
        match self.wait(call, by) {
            Ok(value) => Ok(Some(value)),
            Err(Some(error)) => Err(error),
            Err(None) if deadline.is_some() && deadline == by => Ok(None),
            Err(None) => Err(ClientError::Timeout {
                method: method.to_owned(),
                after: timeout,
            }),
        }
    }

    /// Lists the server's tools (every page), and remembers each tool's
    /// `execution.taskSupport` for [`call_tool`](Self::call_tool).
    ///
    /// A listing that does not end fails with [`ClientError::Protocol`]: a `nextCursor`
    /// that repeats one already followed (the pages would go round for ever), or more
    /// than [`MAX_TOOL_PAGES`] pages or [`MAX_TOOLS`] tools.
    pub fn list_tools(&self) -> Result<Vec<Value>, ClientError> {
        self.list_tools_until(None)
            .map(|tools| tools.expect("no deadline to miss"))
    }

    /// [`list_tools`](Self::list_tools), `Ok(None)` if `deadline` passes first.
    fn list_tools_until(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Option<Vec<Value>>, ClientError> {
        // Read before asking: a change announced while the list is on its way makes it
        // out of date.
        let generation = self.inner.shared.tools_generation();
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        // The cursors followed so far: a server that hands one out again would have the
        // client list (and keep) the same pages for ever.
        let mut followed = HashSet::new();
        for page_number in 1.. {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let Some(page) = self.ask("tools/list", params, deadline)? else {
                return Ok(None);
            };
            let listed = page.get("tools").and_then(Value::as_array).ok_or_else(|| {
                ClientError::Protocol(format!("tools/list without tools: {page}"))
            })?;
            if tools.len() + listed.len() > MAX_TOOLS {
                return Err(ClientError::Protocol(format!(
                    "tools/list lists more than {MAX_TOOLS} tools"
                )));
            }
            tools.extend(listed.iter().cloned());
            let Some(next) = page.get("nextCursor").and_then(Value::as_str) else {
                break;
            };
            if !followed.insert(next.to_owned()) {
                return Err(ClientError::Protocol(format!(
                    "tools/list gave cursor {next:?} again (page {page_number}): its pages \
                     would never end"
                )));
            }
            if page_number >= MAX_TOOL_PAGES {
                return Err(ClientError::Protocol(format!(
                    "tools/list has more than {MAX_TOOL_PAGES} pages"
                )));
            }
            cursor = Some(next.to_owned());
        }
        let support = tools
            .iter()
            .filter_map(|tool| {
                let name = tool.get("name")?.as_str()?.to_owned();
                let support = match tool
                    .pointer("/execution/taskSupport")
                    .and_then(Value::as_str)
                {
                    Some("optional") => TaskSupport::Optional,
                    Some("required") => TaskSupport::Required,
                    _ => TaskSupport::Forbidden,
                };
                Some((name, support))
            })
            .collect();
        let mut cached = self.inner.tools.lock();
        // A listing that overtook this one may hold a newer list: keep that.
        if cached.as_ref().is_none_or(|(held, _)| *held <= generation) {
            *cached = Some((generation, support));
        }
        Ok(Some(tools))
    }

    /// A tool's `execution.taskSupport` (2025-11-25), from `tools/list` (fetched once, and
    /// again after the server sends `notifications/tools/list_changed`).
    pub fn task_support(&self, tool: &str) -> Result<TaskSupport, ClientError> {
        self.task_support_until(tool, None)
            .map(|support| support.expect("no deadline to miss"))
    }

    /// Whether the server declared task-augmented `tools/call` at `initialize`
    /// (`capabilities.tasks.requests.tools.call`, 2025-11-25).
    fn server_takes_tool_tasks(&self) -> bool {
        self.inner
            .server
            .lock()
            .pointer("/capabilities/tasks/requests/tools/call")
            .is_some()
    }

    /// [`task_support`](Self::task_support), `Ok(None)` if `deadline` passes first.
    fn task_support_until(
        &self,
        tool: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<TaskSupport>, ClientError> {
        // A list from before the server last said its tools changed may be wrong now.
        let current = self.inner.shared.tools_generation();
        let fresh = self
            .inner
            .tools
            .lock()
            .as_ref()
            .is_some_and(|(generation, _)| *generation == current);
        if !fresh && self.list_tools_until(deadline)?.is_none() {
            return Ok(None);
        }
        Ok(Some(
            self.inner
                .tools
                .lock()
                .as_ref()
                .and_then(|(_, tools)| tools.get(tool).copied())
                .unwrap_or(TaskSupport::Forbidden),
        ))
    }

    /// Calls a tool and returns its final result, following a task to its end if one
    /// comes back (see the [module docs](self)). `arguments` is an object (`Value::Null`
    /// for none is sent as `{}`). A tool result with `isError: true` is
    /// returned as a result when no task was involved, and on SEP-2663 (where such a task
    /// ends `completed`); on 2025-11-25 it ends its task `failed`:
    /// [`ClientError::TaskFailed`] with the result inside.
    pub fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, ClientError> {
        self.call_tool_with(name, arguments, CallOptions::new())
    }

    /// [`call_tool`](Self::call_tool) with per-call options (deadline, TTL, progress).
    pub fn call_tool_with(
        &self,
        name: &str,
        arguments: Value,
        mut options: CallOptions<'_>,
    ) -> Result<Value, ClientError> {
        let mut follow = Follow {
            started: Instant::now(),
            deadline: options.deadline.or(self.inner.config.deadline),
            progress: &mut options.progress,
            polls: 0,
        };
        let mut call = ToolCall::new(name, arguments);
        // A server that does not declare task-augmented `tools/call` must not get one,
        // whatever its tools say: the call goes plain (and needs no `tools/list`).
        if self.revision() == Revision::V2025 && self.server_takes_tool_tasks() {
            match self.task_support_until(name, follow.deadline_at())? {
                None => return Err(follow.deadline_error(None, false)),
                Some(TaskSupport::Forbidden) => {}
                Some(_) => call = call.as_task(options.task_ttl),
            }
        }
        let mut rounds = 0;
        loop {
            let deadline = follow.deadline_at();
            // A call sent now could only be given up on (and would run all the same).
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(follow.deadline_error(None, false));
            }
            // A call that may create a task gets a little longer for its answer: a task
            // created just as the deadline passed is the call's, to cancel, not to leave
            // running unknown.
            let may_make_a_task = self.revision() == Revision::Sep2663 || call.task.is_some();
            let answer_by = match deadline {
                Some(deadline) if may_make_a_task => deadline.checked_add(follow::CANCEL_WAIT),
                deadline => deadline,
            };
            let outcome = self.call_raw_until(&call, answer_by)?;
            let late = deadline.is_some_and(|deadline| Instant::now() >= deadline);
            match outcome {
                Some(CallOutcome::Complete(result)) => return Ok(result),
                Some(CallOutcome::Task(task)) if late => {
                    follow.report(&task);
                    return self.deadline_passed(&task.task_id, &follow);
                }
                Some(CallOutcome::Task(task)) => return self.follow(task, &mut follow),
                Some(CallOutcome::InputRequired { .. }) if late => {
                    return Err(follow.deadline_error(None, false))
                }
                Some(CallOutcome::InputRequired {
                    input_requests,
                    request_state,
                }) => {
                    rounds += 1;
                    if rounds > self.inner.config.stuck_polls {
                        return Err(ClientError::Protocol(format!(
                            "tools/call '{name}' still needs input after {rounds} rounds"
                        )));
                    }
                    let mut responses = call.input_responses.take().unwrap_or_default();
                    for (key, request) in &input_requests {
                        let answer = self.answer_input(key, request, None)?;
                        responses.insert(key.clone(), answer);
                    }
                    call.input_responses = Some(responses);
                    call.request_state = request_state;
                }
                None => return Err(follow.deadline_error(None, false)),
            }
        }
    }

    /// Sends one `tools/call` as given and returns what came back: the result, the created
    /// task, or (SEP-2663) the input the server needs first. Nothing is followed or
    /// answered: that is up to the caller.
    pub fn call_tool_raw(&self, call: &ToolCall) -> Result<CallOutcome, ClientError> {
        self.call_raw_until(call, None)
            .map(|outcome| outcome.expect("no deadline to miss"))
    }

    fn call_raw_until(
        &self,
        call: &ToolCall,
        deadline: Option<Instant>,
    ) -> Result<Option<CallOutcome>, ClientError> {
        let Some(reply) = self.ask("tools/call", call.params(), deadline)? else {
            return Ok(None);
        };
        let result_type = reply.get("resultType").and_then(Value::as_str);
        let outcome = match (self.revision(), result_type) {
            // A created task only answers a call that asked for one: a plain call's result
            // may have a field of any name.
            (Revision::V2025, _) => match (call.task, reply.get("task")) {
                (Some(_), Some(task)) => CallOutcome::Task(self.created_task(task)?),
                _ => CallOutcome::Complete(reply),
            },
            (Revision::Sep2663, Some("task")) => CallOutcome::Task(self.created_task(&reply)?),
            (Revision::Sep2663, Some("input_required")) => CallOutcome::InputRequired {
                input_requests: match reply.get("inputRequests") {
                    Some(Value::Object(map)) => {
                        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
                    }
                    _ => {
                        return Err(ClientError::Protocol(format!(
                            "input_required without inputRequests: {reply}"
                        )))
                    }
                },
                request_state: reply.get("requestState").cloned(),
            },
            (Revision::Sep2663, _) => CallOutcome::Complete(reply),
        };
        Ok(Some(outcome))
    }

    /// The task a `tools/call` created, as the server described it. One the client cannot
    /// read (no status it knows, say) cannot be followed: rather than leave it running
    /// with nobody to end it, the client cancels it when its id can be read (best effort,
    /// within the cancel's budget) and fails the call with `Protocol`.
    fn created_task(&self, value: &Value) -> Result<TaskInfo, ClientError> {
        let error = match TaskInfo::from_value(value) {
            Ok(task) => return Ok(task),
            Err(error) => error,
        };
        let Some(task_id) = value.get("taskId").and_then(Value::as_str) else {
            return Err(error);
        };
        let within = Instant::now() + follow::CANCEL_WAIT;
        let cancelled = (self
            .start("tasks/cancel", json!({ "taskId": task_id }))
            .ok())
        .is_some_and(|call| self.wait(call, Some(within)).is_ok());
        let outcome = match cancelled {
            true => "it was sent a tasks/cancel, which the server accepted",
            false => "it may still run: the server did not accept a tasks/cancel",
        };
        Err(ClientError::Protocol(format!(
            "the call created task {task_id}, which the client cannot follow ({error}); {outcome}"
        )))
    }

    /// Follows a task (from [`call_tool_raw`](Self::call_tool_raw)) to its end, exactly as
    /// [`call_tool`](Self::call_tool) does.
    pub fn follow_task(
        &self,
        task: TaskInfo,
        mut options: CallOptions<'_>,
    ) -> Result<Value, ClientError> {
        let mut follow = Follow {
            started: Instant::now(),
            deadline: options.deadline.or(self.inner.config.deadline),
            progress: &mut options.progress,
            polls: 0,
        };
        self.follow(task, &mut follow)
    }
    /// `tasks/get`: the task's current state (on SEP-2663 with its input requests, result
    /// or error inline).
    pub fn get_task(&self, task_id: &str) -> Result<PolledTask, ClientError> {
        let value = self.request("tasks/get", json!({ "taskId": task_id }))?;
        PolledTask::from_value(&value)
    }

    /// `tasks/result` (2025-11-25): blocks until the task is terminal and returns what the
    /// tool call would have returned (its JSON-RPC error as [`ClientError::Rpc`]). Server
    /// requests that arrive meanwhile are answered by the handlers. It waits for the task,
    /// however long it takes: the request timeout does not apply (the connection closing
    /// still ends it).
    pub fn get_task_result(&self, task_id: &str) -> Result<Value, ClientError> {
        self.require(Revision::V2025, "tasks/result")?;
        let call = self.start("tasks/result", json!({ "taskId": task_id }))?;
        self.wait(call, None)
            .map_err(|error| error.unwrap_or_else(|| self.gone()))
            .and_then(|value| follow::result_of(task_id, value))
    }

    /// `tasks/list` (2025-11-25): one page of this client's tasks.
    pub fn list_tasks(&self, cursor: Option<&str>) -> Result<TaskList, ClientError> {
        self.require(Revision::V2025, "tasks/list")?;
        let params = match cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let page = self.request("tasks/list", params)?;
        let tasks = page
            .get("tasks")
            .and_then(Value::as_array)
            .ok_or_else(|| ClientError::Protocol(format!("tasks/list without tasks: {page}")))?
            .iter()
            .map(TaskInfo::from_value)
            .collect::<Result<_, _>>()?;
        Ok(TaskList {
            tasks,
            next_cursor: page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// `tasks/update` (SEP-2663): answers input requests of a task, by key.
    pub fn update_task(&self, task_id: &str, responses: InputResponses) -> Result<(), ClientError> {
        self.require(Revision::Sep2663, "tasks/update")?;
        self.request(
            "tasks/update",
            json!({ "taskId": task_id, "inputResponses": responses }),
        )
        .map(|_| ())
    }

    /// `tasks/cancel`: on 2025-11-25 the cancelled task comes back (a task that already
    /// ended is a -32602 [`ClientError::Rpc`]); on SEP-2663 the server only acknowledges,
    /// so `None`.
    pub fn cancel_task(&self, task_id: &str) -> Result<Option<TaskInfo>, ClientError> {
        let answer = self.request("tasks/cancel", json!({ "taskId": task_id }))?;
        match self.revision() {
            Revision::V2025 => TaskInfo::from_value(&answer).map(Some),
            Revision::Sep2663 => Ok(None),
        }
    }

    fn require(&self, revision: Revision, method: &str) -> Result<(), ClientError> {
        if self.revision() == revision {
            Ok(())
        } else {
            Err(ClientError::Unsupported(format!(
                "{method} does not exist in revision {}",
                self.revision().as_str()
            )))
        }
    }
}
