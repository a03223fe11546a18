//! One client connection, independent of the transport: it parses incoming messages,
//! answers requests through a responder the transport supplies, sends server-to-client
//! requests and notifications through an outgoing channel, and routes the client's
//! responses back to the tool waiting for them.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{RecvTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::batch;
use super::context::{undeclared, Binding, ClientPeer, TaskContext};
use super::listen::{Ending, ListenKey, Sink, Subscriptions};
use super::tools::{Preflight, TaskSupport, Tool};
use super::ServerCore;
use crate::model::{CreateTask, Origin, Outcome, SessionId, StoreEvent, Task, TaskId, TaskStatus};
use crate::protocol::jsonrpc::{self, Message, Request, RequestId, RpcError, INTERNAL_ERROR};
use crate::protocol::meta::capability_for;
use crate::protocol::{rpc_error, sep2663, v2025, RequestMeta, Revision};
use crate::store::{CancelToken, WaitStop};
use crate::StoreError;

/// Where a request's response goes (the transport decides: a line on stdout, an HTTP body).
///
/// It is called exactly once per request: with the response, or with `Value::Null` for a
/// request that gets none because its client cancelled it (`notifications/cancelled`,
/// which receivers SHOULD NOT answer). A transport then writes nothing (stdio) or ends
/// the exchange without a body (HTTP: 202). It may block until the transport has room for
/// the response (stdio: until the client reads), which holds back the thread answering.
pub type Responder = Box<dyn FnOnce(Value) + Send>;

pub use crate::protocol::meta::SUPPORTED_VERSIONS;
pub(crate) use crate::protocol::meta::{supported_version, unsupported_version};

/// The protocol versions with JSON-RPC batches: 2025-03-26 says servers MUST accept them,
/// 2024-11-05 is plain JSON-RPC 2.0, which allows them; 2025-06-18 removed them.
const BATCH_VERSIONS: &[&str] = &["2025-03-26", "2024-11-05"];

/// How often a tool waiting for the client's answer looks whether its task ended, in case
/// the store event saying so was lost.
const TASK_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// A waiting `tasks/result` still waits...
const WAITING: u8 = 0;
/// ...its client cancelled it: it stops, unanswered...
const CANCELLED_BY_CLIENT: u8 = 1;
/// ...or its connection closed: it stops.
const CONNECTION_CLOSED: u8 = 2;

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
    /// Serves many clients at once (HTTP's stateless 2026-07-28 connection), whose request
    /// ids may collide: `notifications/cancelled` must not reach their calls.
    shared: bool,
    client_capabilities: Mutex<Value>,
    pending: Mutex<HashMap<RequestId, Pending>>,
    next_request_id: AtomicI64,
    blocked_results: AtomicUsize,
    /// Live 2025-11-25 tasks this connection created: the ones it sends
    /// `notifications/tasks/status` for (SEP-2663 has no unsolicited notifications), with
    /// the last status it sent (or the first, `working`).
    notified: Mutex<HashMap<TaskId, TaskStatus>>,
    /// False once `initialize` settled on a protocol version older than 2025-11-25, which
    /// has no tasks: the client is then served as if the server had none.
    tasks_negotiated: AtomicBool,
    /// True once `initialize` settled on a protocol version that has JSON-RPC batches
    /// (see [`batch`]).
    batches_negotiated: AtomicBool,
    /// Set by [`close`](Connection::close): nobody will answer a request sent from now on.
    closed: AtomicBool,
    /// Plain calls still running, by request id, so `notifications/cancelled` can stop
    /// them: 2025-11-25 calls, and SEP-2663 ones unless the connection is
    /// [`shared`](Self::shared). (Not a promotable SEP-2663 call: it becomes a task within
    /// the promotion budget, and a task takes `tasks/cancel`.)
    inline_runs: Mutex<HashMap<RequestId, Arc<Binding>>>,
    /// `tasks/result` calls waiting on threads of their own, by request id, each with the
    /// means that `notifications/cancelled` (or closing) ends its wait by. (A client may
    /// reuse an id, wrongly: every call under it is kept, and a cancel ends them all.)
    waiting_results: Mutex<HashMap<RequestId, Vec<Arc<Abandon>>>>,
    /// Open `subscriptions/listen` streams (SEP-2663 task status notifications).
    listens: Subscriptions,
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
    /// Read only where it means something (a 2025-11-25 client that negotiated tasks):
    /// anywhere else it is an unknown field, ignored whatever its shape.
    #[serde(default)]
    task: Option<Value>,
    /// SEP-2663 multi-round-trip: answers to the input requests of an earlier round.
    #[serde(default, rename = "inputResponses")]
    input_responses: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    #[serde(default)]
    protocol_version: Option<String>,
    /// An object, or absent (`null` counts as absent); anything else is a broken client's
    /// (-32602).
    #[serde(default)]
    capabilities: Option<serde_json::Map<String, Value>>,
}

impl Connection {
    pub(crate) fn new(
        core: Arc<ServerCore>,
        outgoing: Sender<Value>,
        session: Option<SessionId>,
        shared: bool,
        max_listens: usize,
    ) -> Arc<Connection> {
        Arc::new(Connection {
            core,
            outgoing,
            session,
            shared,
            client_capabilities: Mutex::new(json!({})),
            pending: Mutex::new(HashMap::new()),
            next_request_id: AtomicI64::new(1),
            blocked_results: AtomicUsize::new(0),
            notified: Mutex::new(HashMap::new()),
            tasks_negotiated: AtomicBool::new(true),
            batches_negotiated: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            inline_runs: Mutex::new(HashMap::new()),
            waiting_results: Mutex::new(HashMap::new()),
            listens: Subscriptions::with_limit(max_listens),
        })
    }

    /// Handles one incoming message (a line of stdio, an HTTP body). Requests are answered
    /// through `respond` (called exactly once, possibly later and from another thread; see
    /// [`Responder`] for the requests their client cancelled); notifications and responses
    /// never call it.
    ///
    /// A message it cannot understand is answered with its error, unless it is a response
    /// (one with `"id": null`, say), which is logged and dropped: `respond` is not called.
    ///
    /// A JSON-RPC batch (an array of messages) is welcome once `initialize` settled on a
    /// version that has them (2025-03-26, 2024-11-05): `respond` then gets the array of
    /// its answers, or `Value::Null` when none is due. Otherwise it is refused (-32600).
    pub fn handle_text(self: &Arc<Self>, text: &str, respond: Responder) {
        let message = match jsonrpc::parse_value(text) {
            Ok(Value::Array(items)) if self.accepts_batches() => {
                return self.handle_batch(items, respond)
            }
            Ok(value) => jsonrpc::classify(value),
            Err(rejected) => Err(rejected),
        };
        match message {
            Ok(message) => self.handle_message(message, respond),
            Err(rejected) => match rejected.answer() {
                Some(answer) => respond(answer),
                None => log::debug!("dropped a response: {}", rejected.error),
            },
        }
    }

    /// Whether this connection takes JSON-RPC batches: its `initialize` settled on a
    /// protocol version that has them.
    pub fn accepts_batches(&self) -> bool {
        self.batches_negotiated.load(Ordering::Acquire)
    }

    /// Handles a JSON-RPC batch's messages, in order, and answers `respond` once with the
    /// array of their answers, or `Value::Null` when none is due (an empty or oversized
    /// batch, see [`MAX_BATCH_LEN`](super::MAX_BATCH_LEN), gets one error). Meant for a
    /// connection that [accepts batches](Self::accepts_batches); on another the whole
    /// batch is refused (-32600).
    pub fn handle_batch(self: &Arc<Self>, items: Vec<Value>, respond: Responder) {
        if !self.accepts_batches() {
            let error = RpcError::invalid_request(jsonrpc::BATCHES_REFUSED);
            return respond(jsonrpc::error_response(None, &error));
        }
        batch::handle(self, items, respond)
    }

    /// Handles one parsed message; see [`handle_text`](Self::handle_text).
    pub fn handle_message(self: &Arc<Self>, message: Message, respond: Responder) {
        match message {
            Message::Request(request) => self.handle_request(request, respond),
            Message::Notification(notification) => match notification.method.as_str() {
                "notifications/cancelled" => self.cancel_request(notification.params),
                other => log::debug!("notification {other}"),
            },
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

    /// `notifications/cancelled`: tells a plain call still running that its client gave up
    /// on it ([`TaskContext::is_cancelled`], its `sleep` wakes, and a request it waits on to
    /// the client ends and is withdrawn, see [`request_for`](Self::request_for)), and ends a waiting
    /// `tasks/result` (at once on a [`StoreHandle`](crate::StoreHandle), within
    /// [`STOP_POLL`](crate::store::STOP_POLL) on a store with the trait's default), which
    /// gives its place and thread back.
    /// Neither is answered (see [`Responder`]). A task is never cancelled this way: that
    /// takes `tasks/cancel`.
    fn cancel_request(&self, params: Option<Value>) {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Cancelled {
            request_id: RequestId,
        }
        let Ok(Cancelled { request_id }) = jsonrpc::params::<Cancelled>(params) else {
            return log::debug!("notifications/cancelled without a usable requestId");
        };
        let run = self.inline_runs.lock().get(&request_id).cloned();
        if run.is_some_and(|binding| binding.cancel_by_client()) {
            log::info!("request {request_id} cancelled by the client");
        }
        if let Some(calls) = self.waiting_results.lock().get(&request_id) {
            for abandon in calls {
                abandon.raise(CANCELLED_BY_CLIENT);
            }
            log::info!("tasks/result {request_id} cancelled by the client");
        }
        // Many clients' ids may collide on a shared connection, where a subscription ends
        // with its stream instead.
        if !self.shared && self.listens.cancel(&request_id) {
            log::info!("subscription {request_id} cancelled by the client");
        }
    }

    fn handle_request(self: &Arc<Self>, request: Request, respond: Responder) {
        let Request { id, method, params } = request;
        let request_id = id.clone();
        let reply = Reply::new(move |outcome: Option<Result<Value, RpcError>>| {
            respond(match outcome {
                Some(Ok(result)) => jsonrpc::response(&id, result),
                Some(Err(error)) => jsonrpc::error_response(Some(&id), &error),
                None => Value::Null,
            })
        });
        let meta = RequestMeta::of(params.as_ref());
        if let Some(version) = meta.protocol_version.as_deref() {
            if !supported_version(version) {
                return reply.send(Err(unsupported_version(version)));
            }
        }
        if meta.speaks_sep2663(&method) {
            return self.handle_sep2663(&method, params, meta, request_id, reply);
        }
        let tasks = self.tasks_negotiated.load(Ordering::Acquire);
        match method.as_str() {
            "initialize" => reply.send(self.initialize(params)),
            "ping" => reply.send(Ok(json!({}))),
            "tools/list" => reply.send(Ok(self.tools_list(Revision::V2025))),
            "tools/call" => self.tools_call(params, Revision::V2025, meta, request_id, reply),
            // Before 2025-11-25 there are no tasks to ask about.
            m if !tasks && v2025::is_tasks_method(m) => {
                reply.send(Err(RpcError::method_not_found(m)))
            }
            "tasks/result" => self.tasks_result(request_id, params, reply),
            m if v2025::is_tasks_method(m) => {
                let store = self.core.store.as_ref();
                let outcome = v2025::handle(store, self.session.as_ref(), m, params);
                reply.send(outcome.unwrap_or_else(|| Err(RpcError::method_not_found(m))))
            }
            other => reply.send(Err(RpcError::method_not_found(other))),
        }
    }

    /// A request that speaks protocol 2026-07-28: stateless, capabilities declared per
    /// request, every result tagged with `resultType`.
    fn handle_sep2663(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
        meta: RequestMeta,
        id: RequestId,
        reply: Reply,
    ) {
        let reply = reply.map(|value| {
            if value.get("resultType").is_some() {
                value
            } else {
                sep2663::with_result_type(value, "complete")
            }
        });
        match method {
            "server/discover" => reply.send(Ok(self.discover())),
            "ping" => reply.send(Ok(json!({}))),
            "tools/list" => reply.send(Ok(sep2663::with_cache_fields(
                self.tools_list(Revision::Sep2663),
            ))),
            "tools/call" => self.tools_call(params, Revision::Sep2663, meta, id, reply),
            "subscriptions/listen" if self.shared => reply.send(Err(RpcError::internal(
                "subscriptions/listen is served by the transport, on a stream of its own",
            ))),
            "subscriptions/listen" => {
                let sink = Sink::Shared(self.outgoing.clone());
                match self.open_listen(&id, params.as_ref(), sink) {
                    // Its messages, and in the end its result, go out as it runs.
                    Ok(_) => reply.withhold(),
                    Err(error) => reply.send(Err(error)),
                }
            }
            m if sep2663::is_tasks_method(m) => {
                let store = self.core.store.as_ref();
                let outcome = sep2663::handle(store, self.session.as_ref(), m, params);
                reply.send(outcome.unwrap_or_else(|| Err(RpcError::method_not_found(m))))
            }
            other => reply.send(Err(RpcError::method_not_found(other))),
        }
    }

    /// Opens a `subscriptions/listen` stream of task status notifications whose messages go
    /// to `sink` (see [`listen`](super::listen)); an error is the request's answer.
    pub(crate) fn open_listen(
        &self,
        id: &RequestId,
        params: Option<&Value>,
        sink: Sink,
    ) -> Result<ListenKey, RpcError> {
        let store = self.core.store.as_ref();
        let unique_ids = !self.shared;
        (self.listens).open(store, self.session.as_ref(), id, params, sink, unique_ids)
    }

    /// Ends a subscription [`open_listen`](Self::open_listen) opened: `Graceful` sends its
    /// result first, `Silent` nothing more.
    #[cfg(feature = "http")]
    pub(crate) fn close_listen(&self, key: ListenKey, ending: Ending) {
        self.listens.close(key, ending);
    }

    fn discover(&self) -> Value {
        sep2663::with_cache_fields(json!({
            "supportedVersions": crate::protocol::meta::all_versions(),
            "capabilities": {
                "tools": { "listChanged": false },
                "extensions": sep2663::extension_capability(),
            },
            "_meta": {
                "io.modelcontextprotocol/serverInfo": {
                    "name": self.core.name,
                    "version": self.core.version,
                },
            },
        }))
    }

    fn initialize(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let params: InitializeParams = jsonrpc::params(params)?;
        *self.client_capabilities.lock() = Value::Object(params.capabilities.unwrap_or_default());
        let requested = params.protocol_version.unwrap_or_default();
        let version = SUPPORTED_VERSIONS
            .iter()
            .find(|v| **v == requested)
            .unwrap_or(&SUPPORTED_VERSIONS[0]);
        let tasks = *version == v2025::PROTOCOL_VERSION;
        self.tasks_negotiated.store(tasks, Ordering::Release);
        let batches = BATCH_VERSIONS.contains(version);
        self.batches_negotiated.store(batches, Ordering::Release);
        let mut capabilities = json!({ "tools": { "listChanged": false } });
        if tasks {
            capabilities["tasks"] = v2025::capabilities();
        }
        Ok(json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": { "name": self.core.name, "version": self.core.version },
        }))
    }

    fn tools_list(&self, revision: Revision) -> Value {
        let tools: Vec<Value> = self
            .core
            .tools
            .iter()
            .map(|tool| {
                let mut descriptor = tool.descriptor();
                // `execution.taskSupport` does not exist in 2026-07-28 (the server decides),
                // nor before 2025-11-25 (no tasks at all).
                if revision == Revision::Sep2663 || !self.tasks_negotiated.load(Ordering::Acquire) {
                    if let Some(object) = descriptor.as_object_mut() {
                        object.remove("execution");
                    }
                }
                descriptor
            })
            .collect();
        json!({ "tools": tools })
    }

    fn tools_call(
        self: &Arc<Self>,
        params: Option<Value>,
        revision: Revision,
        meta: RequestMeta,
        id: RequestId,
        reply: Reply,
    ) {
        // Kept with a task as its text, written before `params` is taken apart (no copy
        // of the tree is made).
        let origin = OriginRequest {
            method: "tools/call",
            params: &params,
            revision: revision.as_str(),
        };
        let origin = match Origin::new(&origin) {
            Ok(origin) => origin,
            Err(e) => return reply.send(Err(RpcError::invalid_params(e.to_string()))),
        };
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
        if revision == Revision::Sep2663 {
            // A call that can only be served as a task, from a client that did not declare
            // the extension, is refused before anything else (a preflight question would
            // be answered for nothing: the call is refused all the same).
            if tool.task_support() == TaskSupport::Required && !meta.declares_tasks {
                let what = format!("tool '{}'", call.name);
                return reply.send(Err(sep2663::missing_capability(&what)));
            }
            let responses = call.input_responses.as_ref();
            if let Preflight::NeedInput(requests) = tool.preflight(&arguments, responses) {
                let methods = requests
                    .values()
                    .filter_map(|request| request.get("method").and_then(Value::as_str));
                if let Some(error) = sep2663::undeclared_input(methods, |c| meta.declares(c)) {
                    return reply.send(Err(error));
                }
                return reply.send(Ok(json!({
                    "resultType": "input_required",
                    "inputRequests": requests,
                })));
            }
        }
        let run = Run {
            tool,
            arguments,
            origin,
            revision,
            responses: call.input_responses,
            request: id,
            declared: (revision == Revision::Sep2663).then(|| meta.capabilities.clone()),
        };
        match revision {
            // A client on a version without tasks declared none: `params.task` is ignored
            // and every tool runs as a plain call.
            Revision::V2025 if !self.tasks_negotiated.load(Ordering::Acquire) => {
                self.run_inline(run, Binding::inline(), reply)
            }
            Revision::V2025 => match (task_metadata(call.task), run.tool.task_support()) {
                (Err(error), _) => reply.send(Err(error)),
                (Ok(Some(_)), TaskSupport::Forbidden) => reply.send(Err(RpcError::new(
                    jsonrpc::METHOD_NOT_FOUND,
                    format!(
                        "Tool '{}' does not support task-augmented execution",
                        call.name
                    ),
                ))),
                (Ok(None), TaskSupport::Required) => reply.send(Err(RpcError::new(
                    jsonrpc::METHOD_NOT_FOUND,
                    format!(
                        "Tool '{}' must be called as a task (params.task)",
                        call.name
                    ),
                ))),
                (Ok(Some(task)), _) => self.start_task(run, task.ttl, reply),
                (Ok(None), _) => self.run_inline(run, Binding::inline(), reply),
            },
            // The server decides; a legacy `params.task` is ignored.
            // (A task-required call without the extension was refused above.)
            Revision::Sep2663 => match (run.tool.task_support(), meta.declares_tasks) {
                (TaskSupport::Required, _) => self.start_task(run, None, reply),
                (TaskSupport::Optional, true) => self.run_promotable(run, reply),
                _ => self.run_inline(run, Binding::inline(), reply),
            },
        }
    }

    /// Creates a task for the call in the store (so `tasks/get` finds it before the reply
    /// leaves), answers with it, then runs the tool on the worker pool.
    fn start_task(self: &Arc<Self>, run: Run, ttl: Option<u64>, reply: Reply) {
        let (task, token) = match self.create_task(&run, ttl) {
            Ok(created) => created,
            Err(error) => return reply.send(Err(error)),
        };
        reply.send(Ok(match run.revision {
            Revision::V2025 => v2025::create_result(&task),
            Revision::Sep2663 => sep2663::create_result(&task),
        }));
        let id = task.task_id;
        let revision = run.revision;
        if revision == Revision::V2025 {
            self.follow(id, task.status);
        }
        let connection = self.clone();
        let submitted = self.core.pool.submit(move || {
            let context = connection.context(Binding::task(id, token), &run);
            let outcome = run_tool(&run.tool, run.arguments, &context);
            connection.settle_task(id, revision, outcome, context.is_cancelled());
        });
        if submitted.is_err() {
            let busy = RpcError::internal("the server is busy; try again later");
            self.settle_task(id, revision, Err(busy), false);
        }
    }

    /// Starts sending status notifications for task `id`, created `created`. Before the
    /// run starts, so no change the tool makes is missed; a change made before this (a
    /// `tasks/cancel` sent as soon as the create result arrived, a TTL that ran out) found
    /// the task not followed yet, so the task is looked at once more: its status is
    /// notified, and a task that ended is not followed (it would stay in the map until
    /// the connection closes).
    fn follow(&self, id: TaskId, created: TaskStatus) {
        self.notified.lock().insert(id, created);
        match self.core.store.get(id, self.session.as_ref()) {
            Ok(task) => {
                let last = self.notified.lock().get(&id).copied();
                // `None`: its end was notified by the event meanwhile.
                if last.is_some_and(|last| last != task.status) {
                    self.handle_store_event(&StoreEvent::Status {
                        task,
                        session: self.session.clone(),
                    });
                }
            }
            Err(_) => {
                self.notified.lock().remove(&id);
            }
        }
    }

    /// Creates the call's task and takes its cancellation token. On a connection closed
    /// meanwhile the task is cancelled at once: whoever closed it (an HTTP `DELETE`, say)
    /// may have cancelled the session's tasks before this one existed, and nobody could
    /// reach it to cancel it later.
    fn create_task(&self, run: &Run, ttl: Option<u64>) -> Result<(Task, CancelToken), RpcError> {
        let store = &self.core.store;
        let mut create = CreateTask::new().origin(run.origin.clone());
        create.ttl = ttl;
        create.session = self.session.clone();
        let task = store.create(create).map_err(|e| rpc_error(&e))?;
        let token = store
            .cancel_token(task.task_id, self.session.as_ref())
            .map_err(|e| rpc_error(&e))?;
        if self.closed.load(Ordering::SeqCst) {
            let why = Some("the connection closed".to_owned());
            let _ = store.cancel(task.task_id, self.session.as_ref(), why);
        }
        Ok((task, token))
    }

    /// Stores a finished run's outcome in its task, as its revision says.
    fn settle_task(
        &self,
        id: TaskId,
        revision: Revision,
        outcome: Result<Value, RpcError>,
        cancelled: bool,
    ) {
        if cancelled {
            log::info!("task {id} observed cancellation");
        }
        let (status, outcome, message) = match revision {
            Revision::V2025 => v2025::settle(outcome),
            Revision::Sep2663 => sep2663::settle(outcome),
        };
        let session = self.session.as_ref();
        let store = &self.core.store;
        match store.store_result(id, session, status, outcome, message) {
            Ok(_) | Err(StoreError::AlreadyTerminal(_)) | Err(StoreError::NotFound) => {}
            // The store refused the outcome itself (nested past `MAX_PAYLOAD_DEPTH`, say):
            // the task still ends, failed with why, rather than stay `working` until its
            // TTL (or for ever, without one).
            Err(StoreError::InvalidArgument(why)) => {
                log::warn!("task {id}: its result could not be stored: {why}");
                let error = RpcError::internal(format!("the tool's result was refused: {why}"));
                let message = Some(error.message.clone());
                let outcome = Outcome::error(error.to_value());
                match store.store_result(id, session, TaskStatus::Failed, outcome, message) {
                    // (The depth is checked before the task is looked at: it may have
                    // ended meanwhile.)
                    Ok(_) | Err(StoreError::AlreadyTerminal(_)) | Err(StoreError::NotFound) => {}
                    Err(error) => log::warn!("task {id}: could not fail it either: {error}"),
                }
            }
            Err(error) => log::warn!("task {id}: could not store its result: {error}"),
        }
    }

    /// Runs a plain call on the worker pool and answers with its result. If the pool
    /// refuses the job, dropping it drops the reply, which answers "busy".
    fn run_inline(self: &Arc<Self>, run: Run, binding: Arc<Binding>, reply: Reply) {
        // Registered before the job is queued, so a cancel that overtakes it still counts.
        // A SEP-2663 call can be cancelled too, unless the connection is shared.
        let cancellable = run.revision == Revision::V2025 || !self.shared;
        let registered = cancellable.then(|| {
            let request = run.request.clone();
            self.inline_runs
                .lock()
                .insert(request.clone(), binding.clone());
            (request, binding.clone())
        });
        // `close` sets its flag before it cancels the registered runs: a run registered
        // after that sees the flag here.
        if registered.is_some() && self.closed.load(Ordering::SeqCst) {
            binding.cancel_inline();
        }
        let connection = self.clone();
        let submitted = self.core.pool.submit(move || {
            let context = connection.context(binding.clone(), &run);
            let outcome = run_tool(&run.tool, run.arguments, &context);
            if cancellable {
                connection.forget_inline_run(&run.request, &binding);
            }
            reply.send_unless(binding.is_withheld(), inline_outcome(run.revision, outcome));
        });
        if let (Err(_), Some((request, binding))) = (submitted, registered) {
            // The refused job is dropped, and its reply answered "busy".
            self.forget_inline_run(&request, &binding);
        }
    }

    /// Removes a finished plain call from [`inline_runs`](Self::inline_runs), unless a newer
    /// call reused its request id meanwhile.
    fn forget_inline_run(&self, request: &RequestId, binding: &Arc<Binding>) {
        let mut runs = self.inline_runs.lock();
        if runs.get(request).is_some_and(|b| Arc::ptr_eq(b, binding)) {
            runs.remove(request);
        }
    }

    /// SEP-2663 promotion: the call runs inline for up to the server's promotion budget. If
    /// it finishes in time the client gets a plain result and the store is never written;
    /// otherwise a task is created (before the reply leaves) and the same run carries on
    /// as that task.
    fn run_promotable(self: &Arc<Self>, run: Run, reply: Reply) {
        let binding = Binding::promotable();
        let (done_tx, done_rx) = crossbeam_channel::bounded::<Result<Value, RpcError>>(1);
        let connection = self.clone();
        let run_binding = binding.clone();
        let job = run.clone();
        let submitted = self.core.pool.submit(move || {
            let context = connection.context(run_binding.clone(), &job);
            let outcome = run_tool(&job.tool, job.arguments.clone(), &context);
            match run_binding.finish() {
                Some(id) => {
                    connection.settle_task(id, job.revision, outcome, context.is_cancelled())
                }
                None => {
                    let _ = done_tx.send(inline_outcome(job.revision, outcome));
                }
            }
        });
        if submitted.is_err() {
            return; // dropping `reply` answers busy
        }
        let connection = self.clone();
        let budget = self.core.promote_after;
        let waiting = binding.clone();
        let waiter = std::thread::Builder::new()
            .name("mcp-promote".into())
            .spawn(move || {
                let hurried = binding.hurried();
                crossbeam_channel::select! {
                    recv(done_rx) -> outcome => {
                        if let Ok(outcome) = outcome {
                            return reply.send(outcome);
                        }
                    }
                    // The run asked for input: only a task can wait for it.
                    recv(hurried) -> _ => {}
                    default(budget) => {}
                }
                let promoted = binding.promote(|| {
                    let (task, token) = connection.create_task(&run, None)?;
                    Ok::<_, RpcError>((task.task_id, token, task))
                });
                let finished_inline = || {
                    done_rx
                        .recv()
                        .unwrap_or_else(|_| Err(RpcError::internal("the tool vanished")))
                };
                match promoted {
                    Some(Ok(task)) => reply.send(Ok(sep2663::create_result(&task))),
                    // It finished just in time, or no task could be made (a limit, say):
                    // either way the answer is the inline result.
                    None | Some(Err(_)) => reply.send(finished_inline()),
                }
            });
        if let Err(error) = waiter {
            // Its reply went with it (the client hears the server is busy); a run that
            // asks for input must not wait for a promotion nobody will make.
            log::error!("cannot spawn a promotion waiter: {error}");
            waiting.never_task();
        }
    }

    /// `tasks/result` blocks until the task ends, so it waits on its own thread and never
    /// holds up the connection's reader. Most calls come after the task ended (clients poll
    /// `tasks/get` first) and are answered here, without starting a thread.
    fn tasks_result(self: &Arc<Self>, request: RequestId, params: Option<Value>, reply: Reply) {
        let store = self.core.store.as_ref();
        let session = self.session.as_ref();
        let Some(task) = v2025::blocking_result_task(store, session, params.as_ref()) else {
            let outcome = v2025::handle(store, session, "tasks/result", params);
            return reply.send(outcome.expect("tasks/result is a tasks method"));
        };
        let Some(place) = WaitingPlace::take(self, request) else {
            return reply.send(Err(RpcError::internal(
                "too many tasks/result calls waiting",
            )));
        };
        let spawned = std::thread::Builder::new()
            .name("mcp-tasks-result".into())
            .spawn(move || {
                let connection = place.connection.clone();
                let store = connection.core.store.as_ref();
                let session = connection.session.as_ref();
                // Stopped when its client cancels it or its connection closes, which gives
                // its place and thread back.
                let stop = &place.abandon.stop;
                if let Err(StoreError::Stopped) =
                    store.wait_terminal_or_stop(task, session, None, stop)
                {
                    let why = place.abandon.why();
                    drop(place);
                    if why == CANCELLED_BY_CLIENT {
                        return reply.withhold();
                    }
                    return reply.send(Err(RpcError::internal(
                        "tasks/result ended: the connection closed",
                    )));
                }
                let outcome = v2025::handle(store, session, "tasks/result", params)
                    .expect("tasks/result is a tasks method");
                drop(place);
                reply.send(outcome);
            });
        if let Err(error) = spawned {
            // The closure, its place and its reply (which answers) are dropped.
            log::error!("cannot spawn a tasks/result waiter: {error}");
        }
    }

    fn context(self: &Arc<Self>, binding: Arc<Binding>, run: &Run) -> TaskContext {
        let peer = Arc::new(CallPeer {
            connection: self.clone(),
            binding: binding.clone(),
        });
        TaskContext::new(
            binding,
            run.revision,
            self.session.clone(),
            self.core.store.clone(),
            peer,
        )
        .with_call_responses(run.responses.clone())
        .with_declared(run.declared.clone())
        .with_places(self.core.pool.places())
    }

    /// Reacts to a store event: a status notification for this connection's tasks, and an
    /// end to any client request a task that just ended was waiting on.
    pub fn handle_store_event(&self, event: &StoreEvent) {
        let (task_id, session, task) = match event {
            StoreEvent::Status { task, session } => (task.task_id, session, Some(task)),
            StoreEvent::Expired { task_id, session } => (*task_id, session, None),
            StoreEvent::Lagged { missed } => {
                log::warn!("{missed} store events were lost; checking the tasks followed");
                let store = self.core.store.as_ref();
                self.listens.on_event(store, self.session.as_ref(), event);
                return self.resync();
            }
            _ => return,
        };
        if *session != self.session {
            return;
        }
        let store = self.core.store.as_ref();
        self.listens.on_event(store, self.session.as_ref(), event);
        if let Some(task) = task {
            let ended = task.status.is_terminal();
            let ours = {
                let mut notified = self.notified.lock();
                if ended {
                    notified.remove(&task_id).is_some()
                } else if let Some(last) = notified.get_mut(&task_id) {
                    *last = task.status;
                    true
                } else {
                    false
                }
            };
            if ours {
                // Notifications are optional: never block on a client that does not read.
                let _ = self.outgoing.try_send(v2025::status_notification(task));
            }
            if !ended {
                return;
            }
        } else {
            self.notified.lock().remove(&task_id);
        }
        // Dropping the reply sender wakes the tool blocked on it with an error.
        self.pending
            .lock()
            .retain(|_, pending| pending.task != Some(task_id));
    }

    /// True if `task` is terminal or gone.
    fn task_ended(&self, task: TaskId) -> bool {
        self.core
            .store
            .get(task, self.session.as_ref())
            .map_or(true, |t| t.status.is_terminal())
    }

    /// After store events were lost: the tasks this connection follows or waits on for the
    /// client are looked up, and the ones whose status changed since the last notification
    /// are handled as their lost events would have been (the status notified; for a task
    /// that ended, the requests it waits on ended too).
    fn resync(&self) {
        let followed: Vec<(TaskId, TaskStatus)> = self
            .notified
            .lock()
            .iter()
            .map(|(&id, &status)| (id, status))
            .collect();
        for (task_id, last) in followed {
            match self.core.store.get(task_id, self.session.as_ref()) {
                Ok(task) if task.status != last => {
                    self.handle_store_event(&StoreEvent::Status {
                        task,
                        session: self.session.clone(),
                    });
                }
                Ok(_) => {}
                Err(_) => {
                    self.notified.lock().remove(&task_id);
                }
            }
        }
        let waited_on: HashSet<TaskId> = self
            .pending
            .lock()
            .values()
            .filter_map(|pending| pending.task)
            .collect();
        let ended: HashSet<TaskId> = waited_on
            .into_iter()
            .filter(|&task| self.task_ended(task))
            .collect();
        self.pending
            .lock()
            .retain(|_, pending| pending.task.is_none_or(|task| !ended.contains(&task)));
    }

    /// Ends every outstanding client request (the transport closed) and cancels the plain
    /// calls still running; a tool that asks the client for something from now on gets an
    /// error at once. Its task subscriptions end without a word, and a
    /// `subscriptions/listen` from now on is refused.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.pending.lock().clear();
        self.notified.lock().clear();
        self.listens.close_all(Ending::Silent);
        // Nobody will read their answers: let plain calls stop and free their workers, and
        // waiting tasks/result calls their threads.
        for binding in self.inline_runs.lock().values() {
            binding.cancel_inline();
        }
        for abandon in self.waiting_results.lock().values().flatten() {
            abandon.raise(CONNECTION_CLOSED);
        }
    }

    fn client_supports(&self, method: &str) -> bool {
        capability_for(method)
            .is_none_or(|capability| self.client_capabilities.lock().get(capability).is_some())
    }
}

/// A place among the `tasks/result` calls that may wait at once, on its connection and on
/// the server, held by the call with request id `request`; given back when dropped.
struct WaitingPlace {
    connection: Arc<Connection>,
    request: RequestId,
    abandon: Arc<Abandon>,
}

/// How a waiting `tasks/result` is ended early, and why it was.
struct Abandon {
    /// [`WAITING`], then [`CANCELLED_BY_CLIENT`] or [`CONNECTION_CLOSED`].
    why: AtomicU8,
    stop: WaitStop,
}

impl Abandon {
    /// Ends the wait, for the first reason given (a cancel also overrides a close: the
    /// client asked for no answer).
    fn raise(&self, why: u8) {
        if why == CANCELLED_BY_CLIENT {
            self.why.store(why, Ordering::Release);
        } else {
            let _ = self
                .why
                .compare_exchange(WAITING, why, Ordering::AcqRel, Ordering::Acquire);
        }
        self.stop.stop();
    }

    /// [`WAITING`], or why the wait was ended.
    fn why(&self) -> u8 {
        self.why.load(Ordering::Acquire)
    }
}

impl WaitingPlace {
    fn take(connection: &Arc<Connection>, request: RequestId) -> Option<WaitingPlace> {
        let core = &connection.core;
        if !claim(&connection.blocked_results, MAX_BLOCKED_RESULTS) {
            return None;
        }
        if !claim(&core.waiting_results, core.max_waiting_results) {
            connection.blocked_results.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        // `close` sets its flag before it raises the registered ones: a call registered
        // after that sees the flag here.
        let abandon = Arc::new(Abandon {
            why: AtomicU8::new(WAITING),
            stop: WaitStop::new(),
        });
        connection
            .waiting_results
            .lock()
            .entry(request.clone())
            .or_default()
            .push(abandon.clone());
        if connection.closed.load(Ordering::SeqCst) {
            abandon.raise(CONNECTION_CLOSED);
        }
        Some(WaitingPlace {
            connection: connection.clone(),
            request,
            abandon,
        })
    }
}

impl Drop for WaitingPlace {
    fn drop(&mut self) {
        let connection = &self.connection;
        {
            let mut waiting = connection.waiting_results.lock();
            if let Some(calls) = waiting.get_mut(&self.request) {
                calls.retain(|abandon| !Arc::ptr_eq(abandon, &self.abandon));
                if calls.is_empty() {
                    waiting.remove(&self.request);
                }
            }
        }
        connection.blocked_results.fetch_sub(1, Ordering::AcqRel);
        connection
            .core
            .waiting_results
            .fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes one of `limit` places counted by `counter`, if one is free.
fn claim(counter: &AtomicUsize, limit: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok()
}

/// The one answer a request gets. If it is dropped unanswered (a refused job, a panic, a
/// bug), it answers with an error itself, so a client is never left waiting.
struct Reply(Option<ReplyFn>);

/// Called with the outcome, or `None` when the response is withheld.
type ReplyFn = Box<dyn FnOnce(Option<Result<Value, RpcError>>) + Send>;

impl Reply {
    fn new(f: impl FnOnce(Option<Result<Value, RpcError>>) + Send + 'static) -> Reply {
        Reply(Some(Box::new(f)))
    }

    /// A reply that transforms a successful result before answering.
    fn map(mut self, f: impl FnOnce(Value) -> Value + Send + 'static) -> Reply {
        let inner = self.0.take();
        Reply::new(move |outcome| {
            if let Some(inner) = inner {
                inner(outcome.map(|outcome| outcome.map(f)));
            }
        })
    }

    fn send(mut self, outcome: Result<Value, RpcError>) {
        if let Some(f) = self.0.take() {
            f(Some(outcome));
        }
    }

    /// Sends no response: the client cancelled the request, and receivers SHOULD NOT
    /// answer a cancelled request. (The transport still hears of it, see [`Responder`].)
    fn withhold(mut self) {
        if let Some(f) = self.0.take() {
            f(None);
        }
    }

    /// Sends `outcome`, unless the client cancelled the request.
    fn send_unless(self, cancelled: bool, outcome: Result<Value, RpcError>) {
        if cancelled {
            self.withhold();
        } else {
            self.send(outcome);
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Some(Err(RpcError::internal(
                "the server could not complete the request (busy or shutting down)",
            ))));
        }
    }
}

/// The `params.task` of a 2025-11-25 `tools/call` that negotiated tasks: absent or null for
/// none, -32602 if it is not a valid `TaskMetadata`.
fn task_metadata(task: Option<Value>) -> Result<Option<v2025::TaskMetadata>, RpcError> {
    match task {
        None | Some(Value::Null) => Ok(None),
        // Only an object: serde would also read the struct from an array (`[]`, `[60000]`),
        // and start a task for a wrong type.
        Some(task @ Value::Object(_)) => serde_json::from_value(task)
            .map(Some)
            .map_err(|e| RpcError::invalid_params(format!("task: {e}"))),
        Some(_) => Err(RpcError::invalid_params("task must be an object")),
    }
}

/// What a task keeps of the `tools/call` it came from.
#[derive(Serialize)]
struct OriginRequest<'a> {
    method: &'static str,
    params: &'a Option<Value>,
    revision: &'a str,
}

/// A tool call on its way to running.
#[derive(Clone)]
struct Run {
    tool: Tool,
    arguments: Value,
    origin: Origin,
    revision: Revision,
    /// The call's own `inputResponses` (multi-round-trip answers).
    responses: Option<Value>,
    /// The `tools/call` request's id.
    request: RequestId,
    /// The client capabilities a SEP-2663 call declared (`None` on 2025-11-25).
    declared: Option<Vec<String>>,
}

/// A tool's outcome as a plain call answers it. On 2026-07-28 a tool result is `complete`
/// whatever `resultType` the tool put in it, as when its task stores it (see
/// [`sep2663::settle`]): `task` is for a `CreateTaskResult` only, and `input_required` for
/// the server's own multi-round-trip questions.
fn inline_outcome(revision: Revision, outcome: Result<Value, RpcError>) -> Result<Value, RpcError> {
    match revision {
        Revision::V2025 => outcome,
        Revision::Sep2663 => outcome.map(|result| sep2663::with_result_type(result, "complete")),
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
        self.request_for(method, params, task, None)
    }

    fn supports(&self, method: &str) -> bool {
        self.client_supports(method)
    }
}

/// The client as one tool call sees it: a request it sends for a plain call is abandoned
/// when the call is cancelled (see [`Connection::request_for`]).
struct CallPeer {
    connection: Arc<Connection>,
    binding: Arc<Binding>,
}

impl ClientPeer for CallPeer {
    fn request(
        &self,
        method: &str,
        params: Value,
        task: Option<TaskId>,
    ) -> Result<Value, RpcError> {
        let call = Some(&*self.binding);
        self.connection.request_for(method, params, task, call)
    }

    fn supports(&self, method: &str) -> bool {
        self.connection.client_supports(method)
    }
}

impl Connection {
    /// Sends `method` to the client and waits for its answer: until `task` ends, if the
    /// request is for one, or else until `call` (the plain call asking) is cancelled, by
    /// its client or its connection closing. A request abandoned that way is withdrawn
    /// with `notifications/cancelled`, and its answer, if one comes, is dropped; the
    /// call's worker is free at once.
    fn request_for(
        &self,
        method: &str,
        params: Value,
        task: Option<TaskId>,
        call: Option<&Binding>,
    ) -> Result<Value, RpcError> {
        // Disconnected once the call is cancelled; never, for a call that cannot be.
        let cancelled = match (task, call) {
            (None, Some(call)) => call.cancelled_signal(),
            _ => crossbeam_channel::never(),
        };
        let cancelled_error =
            || RpcError::internal(format!("{method} was abandoned: the call was cancelled"));
        if !self.client_supports(method) {
            return Err(undeclared(method));
        }
        let id = RequestId::String(format!(
            "s-{}",
            self.next_request_id.fetch_add(1, Ordering::Relaxed)
        ));
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.pending
            .lock()
            .insert(id.clone(), Pending { task, reply });
        // `close` sets the flag before it empties `pending`: either it removed this entry
        // (dropping the sender ends the wait below) or the flag is seen here.
        if self.closed.load(Ordering::SeqCst) {
            self.pending.lock().remove(&id);
            return Err(RpcError::internal(format!(
                "{method} was not sent: the connection is closed"
            )));
        }
        // A call already cancelled sends nothing (a cancel from now on is seen below).
        if cancelled.try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected) {
            self.pending.lock().remove(&id);
            return Err(cancelled_error());
        }
        if let Err(error) = self
            .outgoing
            .try_send(jsonrpc::request(&id, method, params))
        {
            self.pending.lock().remove(&id);
            let why = match error {
                TrySendError::Full(_) => "the client is not reading its messages",
                TrySendError::Disconnected(_) => "the connection is closed",
            };
            return Err(RpcError::internal(why));
        }
        let abandoned = || {
            Err(RpcError::new(
                INTERNAL_ERROR,
                format!("{method} was abandoned: the task ended or the connection closed"),
            ))
        };
        // Tells the client the request is no longer wanted (its answer would be dropped);
        // not over a closed connection. Optional, like every notification: never blocks.
        // A request for a task is withdrawn tied to that task, as it was sent (2025-11-25:
        // every message related to a task carries the related-task `_meta`).
        let withdraw = |reason: &str| {
            if !self.closed.load(Ordering::SeqCst) {
                let mut params = json!({"requestId": id, "reason": reason});
                if let Some(task) = task {
                    params = v2025::with_related_task(params, task);
                }
                let withdrawn = jsonrpc::notification("notifications/cancelled", params);
                let _ = self.outgoing.try_send(withdrawn);
            }
        };
        let Some(task) = task else {
            return crossbeam_channel::select! {
                recv(answer) -> outcome => outcome.unwrap_or_else(|_| abandoned()),
                recv(cancelled) -> _ => {
                    // Still pending (neither answered nor ended by a close): withdrawn.
                    if self.pending.lock().remove(&id).is_some() {
                        withdraw("the tool call was cancelled");
                    }
                    Err(cancelled_error())
                }
            };
        };
        // The task's end normally reaches us as a store event, which drops our sender. A
        // task that ended while we registered sent it too early, and events can be lost (a
        // subscriber that falls behind): so the task is also looked at now and then, and
        // its worker is never held for good by a question nobody will answer.
        // When the task ends first, the request is withdrawn as for a cancelled call.
        loop {
            if self.task_ended(task) {
                self.pending.lock().remove(&id);
            }
            match answer.recv_timeout(TASK_CHECK_INTERVAL) {
                Ok(outcome) => return outcome,
                Err(RecvTimeoutError::Disconnected) => {
                    withdraw("the task ended");
                    return abandoned();
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}
