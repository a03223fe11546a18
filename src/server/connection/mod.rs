//! One client connection, independent of the transport: it parses incoming messages,
//! answers requests through a responder the transport supplies, sends server-to-client
//! requests and notifications through an outgoing channel, and routes the client's
//! responses back to the tool waiting for them.
//!
//! This file holds the connection itself: parsing, the handshake, routing each request,
//! store events and closing. `tools/call` and the runs it starts are in `calls`, the
//! blocking `tasks/result` in `results`, and requests to the client on a tool's behalf in
//! `peer`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};

use super::batch;
use super::context::Binding;
use super::listen::{Ending, ListenKey, Sink, Subscriptions};
use super::ServerCore;
use crate::model::{SessionId, StoreEvent, TaskId, TaskStatus};
use crate::protocol::jsonrpc::{self, Message, Request, RequestId, RpcError};
use crate::protocol::meta::{capability_for, is_declared};
use crate::protocol::{sep2663, v2025, RequestMeta, Revision};

mod calls;
mod peer;
mod results;

use self::results::{Abandon, CANCELLED_BY_CLIENT, CONNECTION_CLOSED};

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
    /// on it ([`TaskContext::is_cancelled`](super::TaskContext::is_cancelled), its `sleep`
    /// wakes, and a request it waits on to the client ends and is withdrawn, see
    /// [`request_for`](Self::request_for)), and ends a waiting
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
            let ours = self.notified.lock().contains_key(&task_id);
            // Notifications are optional: never block on a client that does not read.
            let sent = ours
                && room_for_optional(&self.outgoing)
                && (self.outgoing)
                    .try_send(v2025::status_notification(task))
                    .is_ok();
            // A status is remembered as sent only once it is queued: one dropped for lack
            // of room is sent by the next catch-up (after lost events) if it still stands.
            // A task that ended is forgotten once its end is sent (or when it expires).
            if sent {
                let mut notified = self.notified.lock();
                if ended {
                    notified.remove(&task_id);
                } else if let Some(last) = notified.get_mut(&task_id) {
                    *last = task.status;
                }
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
        capability_for(method).is_none_or(|capability| {
            let capabilities = self.client_capabilities.lock();
            capabilities.get(capability).is_some_and(is_declared)
        })
    }
}

/// Whether an optional message (a status notification) may be queued for the client:
/// only while the queue is less than half full. The rest stays for what may not be lost:
/// a tool's request to the client (an elicitation it waits on) and, over stdio, answers.
/// A task reporting many changes while its client reads nothing (an HTTP session between
/// two `GET` streams) would otherwise fill it, and the next elicitation would fail.
fn room_for_optional(outgoing: &Sender<Value>) -> bool {
    outgoing
        .capacity()
        .is_none_or(|capacity| outgoing.len() < capacity / 2)
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
