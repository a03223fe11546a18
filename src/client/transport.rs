//! The connection plumbing every transport shares: requests waiting for their response,
//! the dispatcher thread that answers the server's own requests through the handlers, and
//! the newline-delimited JSON-RPC transport (a spawned server's stdio, or any stream pair).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufReader, Read, Write};
use std::panic::AssertUnwindSafe;
use std::process::Child;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::{ClientError, InputRequest};
use crate::protocol::jsonrpc::{
    self, Message, Request, RequestId, Response, RpcError, INTERNAL_ERROR,
};
use crate::protocol::lines::{read_line, Line};
use crate::protocol::v2025::{with_related_task_id, RELATED_TASK};

/// A handler for server input requests: gets the request, returns the result to answer.
pub(crate) type Handler = Arc<dyn Fn(&InputRequest) -> Result<Value, RpcError> + Send + Sync>;

/// The handlers a client registered, by method.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    pub(crate) elicitation: Option<Handler>,
    pub(crate) sampling: Option<Handler>,
    pub(crate) roots: Option<Handler>,
}

impl Handlers {
    /// Answers one input request through the matching handler.
    pub(crate) fn answer(&self, request: &InputRequest) -> Result<Value, RpcError> {
        let handler = match request.method.as_str() {
            "elicitation/create" => self.elicitation.as_ref(),
            "sampling/createMessage" => self.sampling.as_ref(),
            "roots/list" => self.roots.as_ref(),
            _ => None,
        };
        match handler {
            Some(handler) => handler(request),
            None => Err(RpcError::method_not_found(&request.method)),
        }
    }
}

type Reply = Sender<Result<Value, ClientError>>;

/// The outcome a request waits for.
pub(crate) type Pending = Receiver<Result<Value, ClientError>>;

struct State {
    pending: HashMap<RequestId, Reply>,
    closed: Option<String>,
}

/// What the dispatcher thread is asked to do.
pub(crate) enum Work {
    /// Answer a server request, which came in this HTTP session (`None`: no session, or
    /// stdio): its answer goes to that session, and to no other.
    Request(Request, Option<String>),
}

/// Server input requests seen for one task (2025-11-25, where they arrive as requests).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct TaskInputs {
    /// How many requests related to the task arrived so far.
    pub(crate) seen: u64,
    /// How many of them a handler is still working on.
    pub(crate) in_flight: u32,
}

/// Server requests (`elicitation/create`, `sampling/createMessage`, `ping`) that may wait
/// for the client's handlers, which answer one at a time and may take as long as a human
/// does, before the next ones are refused at once with a JSON-RPC error -32603 ("client
/// busy"): a server must not make the client hold its requests without bound. So are
/// those that find 64 MiB of requests waiting (one request waits whatever its size).
pub const MAX_QUEUED_SERVER_REQUESTS: usize = 1024;

/// One follower of a task: its key, and the channel that wakes it.
type TaskWatcher = (u64, Sender<()>);

/// "Client busy" answers that may wait to be sent before the next refused requests are
/// dropped without one (a server sending requests faster than the answers can go).
const MAX_QUEUED_REFUSALS: usize = 256;

/// State shared by the client, its transport's reader threads and its dispatcher.
pub(crate) struct Shared {
    state: Mutex<State>,
    next_id: AtomicI64,
    /// Server requests for the dispatcher ([`MAX_QUEUED_SERVER_REQUESTS`] at most).
    work: Sender<Work>,
    /// "Client busy" answers to requests the dispatcher had no room for, for the thread
    /// that sends them ([`MAX_QUEUED_REFUSALS`] at most).
    refusals: Sender<(Value, Option<String>)>,
    refusals_out: Receiver<(Value, Option<String>)>,
    /// Dropped to stop the dispatcher and the refusals' sender: `stopped` disconnects.
    stop: Mutex<Option<Sender<()>>>,
    stopped: Receiver<()>,
    inputs: Mutex<Inputs>,
    /// How many `notifications/tools/list_changed` the server sent: a tool list fetched
    /// under an older count may be out of date.
    tools_generation: AtomicU64,
    /// Followers of SEP-2663 tasks, by task id, each woken by a `notifications/tasks`
    /// about its task (see [`watch_task`](Self::watch_task)).
    task_watchers: Mutex<HashMap<String, Vec<TaskWatcher>>>,
    next_watcher: AtomicU64,
    /// Task subscriptions open over HTTP, where each holds a connection of the server's.
    connection_subscriptions: AtomicUsize,
    /// Bytes of the server requests waiting for the dispatcher and of the answers waiting
    /// for the refusals' thread ([`MAX_HELD_BYTES`] at most, but for one).
    held: AtomicUsize,
}

/// Bytes of server requests (and of the answers to those refused) the client holds while
/// they wait for the dispatcher (or the refusals' thread) before the next request is
/// refused ("client busy"; dropped unanswered if its answer does not fit either), a
/// request alone being held whatever its size: the queues are bounded in count, but a
/// server's requests may each be as large as a message.
const MAX_HELD_BYTES: usize = MAX_SERVER_MESSAGE;

/// About how many bytes `value` takes as JSON text (no escapes counted): a message's
/// share of [`MAX_HELD_BYTES`].
fn weight(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len() + 2,
        Value::Array(items) => items.iter().map(weight).fold(2, usize::saturating_add),
        Value::Object(members) => members
            .iter()
            .map(|(name, value)| name.len() + 3 + weight(value))
            .fold(2, usize::saturating_add),
        _ => 8,
    }
}

/// [`weight`] of a server request.
fn request_weight(request: &Request) -> usize {
    let id = match &request.id {
        RequestId::String(text) => text.len(),
        RequestId::Number(_) => 8,
    };
    let params = request.params.as_ref().map_or(0, weight);
    request.method.len() + id + params
}

/// How many of the server's latest request ids are remembered, to drop a repeat of one;
/// and how many tasks' input counts are kept before those with nothing in flight go.
/// Repeats come soon after the first copy (the same request on two streams), and a
/// long-lived client must not remember every request of its life.
const REMEMBERED: usize = 4096;

/// The longest server request id, or related task id, that is remembered as it is: a
/// longer one (a hostile server's may be as long as a message, [`MAX_SERVER_MESSAGE`]) is
/// remembered by a digest, so that the [`REMEMBERED`] ids and tasks kept cannot hold
/// gigabytes.
const MAX_KEPT_ID: usize = 256;

/// A server request id or a related task id as [`Inputs`] remembers it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum Kept {
    Number(i64),
    Text(String),
    /// A digest of a text longer than [`MAX_KEPT_ID`], keyed at random per client: a
    /// server cannot aim two ids at one digest (which would only drop its own request).
    Digest(u64),
}

#[derive(Default)]
struct Inputs {
    per_task: HashMap<Kept, TaskInputs>,
    /// The latest server request ids ([`REMEMBERED`] at most): each is handled once,
    /// however often it arrives.
    seen: HashSet<Kept>,
    /// `seen` in arrival order, oldest first, to forget the oldest.
    seen_order: VecDeque<Kept>,
    /// The id the last `first_sight` forgot to make room, until the next one.
    evicted: Option<Kept>,
    /// The keys of [`Kept::Digest`].
    digests: std::hash::RandomState,
    /// The size of `per_task` at which tasks with nothing in flight are next forgotten.
    prune_at: usize,
    /// The HTTP session that replaced a forgotten one, if any did: requests that still
    /// come from another session (late, on its streams) are that forgotten session's.
    renewed_session: Option<String>,
}

impl Inputs {
    /// `text` as it is remembered.
    fn kept_text(&self, text: &str) -> Kept {
        if text.len() <= MAX_KEPT_ID {
            Kept::Text(text.to_owned())
        } else {
            use std::hash::BuildHasher;
            Kept::Digest(self.digests.hash_one(text))
        }
    }

    /// Request `id` as it is remembered.
    fn kept_id(&self, id: &RequestId) -> Kept {
        match id {
            RequestId::Number(n) => Kept::Number(*n),
            RequestId::String(text) => self.kept_text(text),
        }
    }

    /// Remembers a server request id; false if it is a repeat.
    fn first_sight(&mut self, id: &RequestId) -> bool {
        self.evicted = None;
        let id = self.kept_id(id);
        if !self.seen.insert(id.clone()) {
            return false;
        }
        self.seen_order.push_back(id);
        if self.seen_order.len() > REMEMBERED {
            if let Some(oldest) = self.seen_order.pop_front() {
                self.seen.remove(&oldest);
                self.evicted = Some(oldest);
            }
        }
        true
    }

    /// Forgets a server request id remembered by [`first_sight`](Self::first_sight) (a
    /// request dropped unanswered): the id was pushed last, so it is found from the back.
    /// It is called for the id the last `first_sight` took, which may have made room by
    /// forgetting the oldest id: that one is remembered again.
    fn forget(&mut self, id: &RequestId) {
        let id = self.kept_id(id);
        self.seen.remove(&id);
        if let Some(at) = self.seen_order.iter().rposition(|seen| *seen == id) {
            self.seen_order.remove(at);
        }
        if let Some(oldest) = self.evicted.take() {
            self.seen.insert(oldest.clone());
            self.seen_order.push_front(oldest);
        }
    }

    /// The input counts of `task`, made on first use.
    fn task(&mut self, task: &str) -> &mut TaskInputs {
        let task = self.kept_text(task);
        if self.per_task.len() >= self.prune_at.max(REMEMBERED)
            && !self.per_task.contains_key(&task)
        {
            self.per_task.retain(|_, inputs| inputs.in_flight > 0);
            // If most are still in flight, prune again only once the map has doubled:
            // a prune per new task would make each one cost as much as the whole map.
            self.prune_at = 2 * self.per_task.len();
        }
        self.per_task.entry(task).or_default()
    }
}

impl Shared {
    pub(crate) fn new() -> (Arc<Shared>, Receiver<Work>) {
        let (work, jobs) = crossbeam_channel::bounded(MAX_QUEUED_SERVER_REQUESTS);
        let (refusals, refusals_out) = crossbeam_channel::bounded(MAX_QUEUED_REFUSALS);
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: HashMap::new(),
                closed: None,
            }),
            next_id: AtomicI64::new(1),
            work,
            refusals,
            refusals_out,
            stop: Mutex::new(Some(stop)),
            stopped,
            inputs: Mutex::new(Inputs::default()),
            tools_generation: AtomicU64::new(0),
            task_watchers: Mutex::new(HashMap::new()),
            next_watcher: AtomicU64::new(0),
            connection_subscriptions: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
        });
        (shared, jobs)
    }

    /// Wakes the returned receiver whenever a `notifications/tasks` about `task_id`
    /// arrives (many notifications between two looks wake it once), until
    /// [`unwatch_task`](Self::unwatch_task) with the returned key.
    pub(crate) fn watch_task(&self, task_id: &str) -> (u64, Receiver<()>) {
        let key = self.next_watcher.fetch_add(1, Ordering::Relaxed);
        let (wake, woken) = crossbeam_channel::bounded(1);
        let mut watchers = self.task_watchers.lock();
        watchers
            .entry(task_id.to_owned())
            .or_default()
            .push((key, wake));
        (key, woken)
    }

    /// Ends [`watch_task`](Self::watch_task)'s watch `key` of `task_id`.
    pub(crate) fn unwatch_task(&self, task_id: &str, key: u64) {
        let mut watchers = self.task_watchers.lock();
        if let Some(list) = watchers.get_mut(task_id) {
            list.retain(|(k, _)| *k != key);
            if list.is_empty() {
                watchers.remove(task_id);
            }
        }
    }

    /// Takes one of `limit` places for a task subscription that holds a connection; false
    /// when all are taken. Given back with [`release_subscription`](Self::release_subscription).
    pub(crate) fn claim_subscription(&self, limit: usize) -> bool {
        self.connection_subscriptions
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a place [`claim_subscription`](Self::claim_subscription) took.
    pub(crate) fn release_subscription(&self) {
        self.connection_subscriptions.fetch_sub(1, Ordering::AcqRel);
    }

    /// A `notifications/tasks` came: its task's followers look at it now.
    fn wake_task(&self, params: Option<&Value>) {
        let Some(task_id) = params.and_then(|p| p.get("taskId")).and_then(Value::as_str) else {
            return;
        };
        if let Some(list) = self.task_watchers.lock().get(task_id) {
            for (_, wake) in list {
                // Full: a wake-up is already due, which will see this change too.
                let _ = wake.try_send(());
            }
        }
    }

    /// A fresh request id with a slot for its response; fails once the connection closed.
    pub(crate) fn register(&self) -> Result<(RequestId, Pending), ClientError> {
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (reply, pending) = crossbeam_channel::bounded(1);
        let mut state = self.state.lock();
        if let Some(reason) = &state.closed {
            return Err(ClientError::closed(reason.clone()));
        }
        state.pending.insert(id.clone(), reply);
        Ok((id, pending))
    }

    /// Drops a request nobody waits for any more.
    pub(crate) fn forget(&self, id: &RequestId) {
        self.state.lock().pending.remove(id);
    }

    /// How many requests wait for their answer, and how many tasks are watched (tests).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> (usize, usize) {
        (
            self.state.lock().pending.len(),
            self.task_watchers.lock().len(),
        )
    }

    /// Whether request `id` still waits for its answer.
    #[cfg(feature = "http")]
    pub(crate) fn is_pending(&self, id: &RequestId) -> bool {
        self.is_waiting(id)
    }

    /// The reason the connection closed, if it did.
    pub(crate) fn closed_reason(&self) -> Option<String> {
        self.state.lock().closed.clone()
    }

    /// Completes request `id` with `outcome`.
    pub(crate) fn complete(&self, id: &RequestId, outcome: Result<Value, ClientError>) {
        let reply = self.state.lock().pending.remove(id);
        match reply {
            Some(reply) => {
                let _ = reply.send(outcome);
            }
            None => log::debug!("mcp client: a response to unknown request {id}"),
        }
    }

    /// Routes a message from the server that came in HTTP `session` (`None`: no session,
    /// or stdio): responses to their waiting request, requests to the dispatcher; of the
    /// notifications, `notifications/tools/list_changed` marks the tools the client knows
    /// as stale and `notifications/tasks` wakes its task's followers, the others are only
    /// logged. A request from a session a renewal replaced
    /// is dropped: that session and its tasks are gone, and its request ids could repeat
    /// the new session's. A request that finds [`MAX_QUEUED_SERVER_REQUESTS`] (or
    /// [`MAX_HELD_BYTES`]) already waiting for the dispatcher is refused ("client busy", sent by a thread of its own:
    /// the reader calling this never blocks), and counts neither as seen nor in flight for
    /// its task.
    pub(crate) fn incoming_from(&self, message: Message, session: Option<&str>) {
        match message {
            Message::Response(Response { id, outcome }) => {
                self.complete(&id, outcome.map_err(ClientError::Rpc))
            }
            Message::Request(request) => {
                let mut inputs = self.inputs.lock();
                let forgotten = match (&inputs.renewed_session, session) {
                    (Some(current), Some(from)) => current != from,
                    _ => false,
                };
                if forgotten {
                    log::debug!(
                        "mcp client: request {} of a forgotten session; ignored",
                        request.id
                    );
                    return;
                }
                if !inputs.first_sight(&request.id) {
                    log::debug!("mcp client: request {} arrived again; ignored", request.id);
                    return;
                }
                let task = related_task(request.params.as_ref());
                if let Some(task) = &task {
                    let entry = inputs.task(task);
                    entry.seen += 1;
                    entry.in_flight += 1;
                }
                // Queued under the `inputs` lock (`try_send` never blocks): the
                // dispatcher's `input_done` for it cannot come before the count.
                let size = request_weight(&request);
                let refused = if self.hold(size) {
                    let work = Work::Request(request, session.map(str::to_owned));
                    let sent = self.work.try_send(work);
                    if sent.is_ok() {
                        return;
                    }
                    self.release(size);
                    match sent {
                        Err(TrySendError::Full(Work::Request(request, _))) => Some(request),
                        // The dispatcher stopped: the client is going away.
                        _ => None,
                    }
                } else {
                    Some(request)
                };
                let key = task.map(|task| inputs.kept_text(&task));
                if let Some(entry) = key.and_then(|key| inputs.per_task.get_mut(&key)) {
                    entry.seen = entry.seen.saturating_sub(1);
                    entry.in_flight = entry.in_flight.saturating_sub(1);
                }
                // Under the lock too (it never blocks): a copy arriving meanwhile must
                // not pass for a repeat of one that is then dropped unanswered.
                if let Some(request) = refused {
                    self.refuse(&request, session, &mut inputs);
                }
            }
            Message::Notification(notification) => {
                log::debug!("mcp client: notification {}", notification.method);
                match notification.method.as_str() {
                    "notifications/tools/list_changed" => {
                        self.tools_generation.fetch_add(1, Ordering::SeqCst);
                    }
                    "notifications/tasks" => self.wake_task(notification.params.as_ref()),
                    _ => {}
                }
            }
        }
    }

    /// Answers a server request the dispatcher has no room for with "client busy", through
    /// the refusals' thread; drops it (with a warning) if that has no room either.
    fn refuse(&self, request: &Request, session: Option<&str>, inputs: &mut Inputs) {
        let error = RpcError::new(
            INTERNAL_ERROR,
            format!(
                "client busy: {MAX_QUEUED_SERVER_REQUESTS} server requests (or \
                 {MAX_HELD_BYTES} bytes of them) already wait for an answer"
            ),
        );
        let answer = jsonrpc::error_response(Some(&request.id), &error);
        let session = session.map(str::to_owned);
        if !self.hold_answer(answer, session) {
            // Not answered at all: a copy that comes again (on another stream) is not a
            // repeat to drop, nor is it forgotten early through a stale place in the order.
            inputs.forget(&request.id);
            log::warn!(
                "mcp client: too many server requests at once; {} {} dropped unanswered",
                request.method,
                request.id
            );
        } else {
            log::debug!(
                "mcp client: too many server requests at once; {} {} refused",
                request.method,
                request.id
            );
        }
    }

    /// Parses one message text and routes it (see [`incoming_from`](Self::incoming_from));
    /// one that is no JSON-RPC message goes to [`malformed_from`](Self::malformed_from).
    pub(crate) fn incoming_text_from(&self, text: &str, session: Option<&str>) {
        match jsonrpc::parse_message(text) {
            Ok(message) => self.incoming_from(message, session),
            Err(rejected) => self.malformed_from(rejected, session),
        }
    }

    /// A message from the server (in HTTP `session`, as for
    /// [`incoming_from`](Self::incoming_from)) that is no JSON-RPC message. Shaped as a
    /// response that names a request still waiting (no or another `jsonrpc`, both `result`
    /// and `error`), it ends that request with [`ClientError::Protocol`]: the request
    /// would otherwise wait for its timeout, and a `tasks/result` (which has none) for
    /// ever. Shaped as a request with an id (params that are no object, say), it is
    /// answered with its JSON-RPC error, through the refusals' thread as "client busy" is
    /// (the reader calling this never blocks), so that the server does not wait for an
    /// answer for ever; once per id, and not for a forgotten session. Anything else (no
    /// JSON, no usable id) is only logged: an answer with a null id could start two peers
    /// trading errors.
    pub(crate) fn malformed_from(&self, rejected: jsonrpc::Rejected, session: Option<&str>) {
        log::warn!(
            "mcp client: a malformed message from the server: {}",
            rejected.error
        );
        let Some(id) = &rejected.id else {
            return;
        };
        if rejected.response {
            if self.is_waiting(id) {
                self.complete(id, Err(malformed_response(id, &rejected.error)));
            }
            return;
        }
        let Some(answer) = rejected.answer() else {
            return;
        };
        let mut inputs = self.inputs.lock();
        let forgotten = matches!(
            (&inputs.renewed_session, session),
            (Some(current), Some(from)) if current != from
        );
        if forgotten || !inputs.first_sight(id) {
            return;
        }
        if !self.hold_answer(answer, session.map(str::to_owned)) {
            inputs.forget(id);
            log::warn!("mcp client: too many server requests at once; {id} dropped unanswered");
        }
    }

    /// Takes `size` bytes of [`MAX_HELD_BYTES`]; false if they do not fit (a request alone
    /// always does).
    fn hold(&self, size: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held == 0 || held.saturating_add(size) <= MAX_HELD_BYTES)
                    .then(|| held.saturating_add(size))
            })
            .is_ok()
    }

    /// Gives back what [`hold`](Self::hold) took.
    fn release(&self, size: usize) {
        self.held.fetch_sub(size, Ordering::AcqRel);
    }

    /// Queues `answer` for the refusals' thread, if it has room (in count and in bytes).
    fn hold_answer(&self, answer: Value, session: Option<String>) -> bool {
        let size = weight(&answer);
        if !self.hold(size) {
            return false;
        }
        if self.refusals.try_send((answer, session)).is_err() {
            self.release(size);
            return false;
        }
        true
    }

    /// Whether request `id` still waits for its answer.
    fn is_waiting(&self, id: &RequestId) -> bool {
        self.state.lock().pending.contains_key(id)
    }

    /// The connection is gone: every waiting request fails, and so does every later one.
    pub(crate) fn close(&self, reason: impl Into<String>) {
        let reason = reason.into();
        let pending: Vec<Reply> = {
            let mut state = self.state.lock();
            if state.closed.is_none() {
                state.closed = Some(reason.clone());
            }
            state.pending.drain().map(|(_, reply)| reply).collect()
        };
        for reply in pending {
            let _ = reply.send(Err(ClientError::closed(reason.clone())));
        }
    }

    /// `session` replaced a forgotten one (HTTP): the server numbers its requests afresh
    /// (a restarted server from 0 again), so the ids of the old session's requests are
    /// forgotten, lest a new request be dropped as a repeat of an old one; and requests
    /// still coming from the old session are dropped, in the same step, so none of them
    /// can pass for a new one.
    #[cfg(feature = "http")]
    pub(crate) fn new_session(&self, session: &str) {
        let mut inputs = self.inputs.lock();
        inputs.seen.clear();
        inputs.seen_order.clear();
        inputs.renewed_session = Some(session.to_owned());
    }

    /// How many times the server said its tools changed.
    pub(crate) fn tools_generation(&self) -> u64 {
        self.tools_generation.load(Ordering::SeqCst)
    }

    /// Input requests seen so far for `task` (2025-11-25).
    pub(crate) fn task_inputs(&self, task: &str) -> TaskInputs {
        let inputs = self.inputs.lock();
        let key = inputs.kept_text(task);
        inputs.per_task.get(&key).copied().unwrap_or_default()
    }

    /// Forgets the input counts of a task nobody follows any more.
    pub(crate) fn forget_task(&self, task: &str) {
        let mut inputs = self.inputs.lock();
        let key = inputs.kept_text(task);
        if inputs.per_task.get(&key).is_some_and(|t| t.in_flight == 0) {
            inputs.per_task.remove(&key);
        }
    }

    fn input_done(&self, task: &str) {
        let mut inputs = self.inputs.lock();
        let key = inputs.kept_text(task);
        if let Some(entry) = inputs.per_task.get_mut(&key) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
        }
    }

    /// Stops the dispatcher (once its handler, if one runs, returns) and the refusals'
    /// sender; server requests still queued go unanswered (the client is going away).
    pub(crate) fn stop_dispatcher(&self) {
        drop(self.stop.lock().take());
    }
}

/// The error that ends request `id` when its answer is no JSON-RPC response (`why`).
pub(crate) fn malformed_response(id: &RequestId, why: &RpcError) -> ClientError {
    ClientError::Protocol(format!(
        "a malformed response to request {id}: {}",
        why.message
    ))
}

/// The related task a request's `_meta` names.
fn related_task(params: Option<&Value>) -> Option<String> {
    params?
        .get("_meta")?
        .get(RELATED_TASK)?
        .get("taskId")?
        .as_str()
        .map(str::to_owned)
}

/// How messages get to the server. Responses come back through [`Shared`].
pub(crate) trait Transport: Send + Sync {
    /// Sends request `id` (already registered); its response arrives through `Shared`.
    fn send_request(&self, id: &RequestId, message: Value) -> Result<(), ClientError>;
    /// Sends a notification, or a response to a server request.
    fn send(&self, message: Value) -> Result<(), ClientError>;
    /// Sends the answer to a server request that came in HTTP `session` (see
    /// [`Work::Request`]): only to that session, never to one that replaced it.
    fn answer(&self, message: Value, session: Option<&str>) -> Result<(), ClientError> {
        let _ = session;
        self.send(message)
    }
    /// Request `id` is no longer waited for (it was forgotten): whatever its exchange
    /// still holds (an HTTP connection and its thread) may go.
    fn abandon(&self, _id: &RequestId) {}
    /// Whether [`abandon`](Self::abandon) ends the request's exchange for the server too
    /// (HTTP: its connection closes). Where it does not (stdio, one shared stream), a
    /// request that goes on until cancelled, such as `subscriptions/listen`, needs
    /// `notifications/cancelled`.
    fn abandon_ends_exchange(&self) -> bool {
        false
    }
    /// Called once the handshake is done (HTTP 2025-11-25 opens its event stream here).
    fn ready(&self) {}
    /// Ends the connection (the client is being dropped).
    fn shutdown(&self);
    /// The spawned server's process id, if the transport spawned one.
    fn process_id(&self) -> Option<u32> {
        None
    }
}

/// Starts the thread that answers the server's requests through the handlers (each request
/// id once: [`Shared::incoming_from`] drops repeats), and the one that sends the "client
/// busy" answers to those it had no room for.
pub(crate) fn start_dispatcher(
    jobs: Receiver<Work>,
    shared: Arc<Shared>,
    transport: Arc<dyn Transport>,
    handlers: Handlers,
) -> std::io::Result<()> {
    let (refusals, stopped, refusing, holding) = (
        shared.refusals_out.clone(),
        shared.stopped.clone(),
        transport.clone(),
        shared.clone(),
    );
    std::thread::Builder::new()
        .name("mcp-client-refuse".into())
        .spawn(move || loop {
            crossbeam_channel::select! {
                recv(refusals) -> answer => {
                    let Ok((answer, session)) = answer else { return };
                    holding.release(weight(&answer));
                    if let Err(error) = refusing.answer(answer, session.as_deref()) {
                        log::info!("mcp client: cannot refuse a server request: {error}");
                    }
                }
                recv(stopped) -> _ => return,
            }
        })?;
    let stopped = shared.stopped.clone();
    let on_failure = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("mcp-client-dispatch".into())
        .spawn(move || loop {
            let work = crossbeam_channel::select! {
                recv(jobs) -> work => work,
                recv(stopped) -> _ => return,
            };
            // `select!` picks at random among ready operations: a stop wins over queued
            // work, or a handler (a prompt to a human, say) could run after the drop.
            if stopped.try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected) {
                return;
            }
            {
                let Ok(Work::Request(request, session)) = work else {
                    return;
                };
                shared.release(request_weight(&request));
                let Request { id, method, params } = request;
                let task_id = related_task(params.as_ref());
                {
                    let outcome = match method.as_str() {
                        "ping" => Ok(json!({})),
                        _ => {
                            let input = InputRequest {
                                method: method.clone(),
                                params: params.unwrap_or_else(|| json!({})),
                                task_id: task_id.clone(),
                                key: match &id {
                                    RequestId::String(s) => s.clone(),
                                    RequestId::Number(n) => n.to_string(),
                                },
                            };
                            // A panicking handler must not take this thread with it: every
                            // later server request would go unanswered, and the task's
                            // input count would never drop, so its stuck detector would
                            // never fire.
                            let answered = std::panic::catch_unwind(AssertUnwindSafe(|| {
                                handlers.answer(&input)
                            }));
                            answered.unwrap_or_else(|_| {
                                Err(RpcError::internal(format!(
                                    "the client's handler for {method} panicked"
                                )))
                            })
                        }
                    };
                    let message = match outcome {
                        // A response related to a task carries it, as the request did.
                        Ok(result) => match &task_id {
                            Some(task) => {
                                jsonrpc::response(&id, with_related_task_id(result, task))
                            }
                            None => jsonrpc::response(&id, result),
                        },
                        Err(error) => jsonrpc::error_response(Some(&id), &error),
                    };
                    if let Err(error) = transport.answer(message, session.as_deref()) {
                        log::warn!("mcp client: cannot answer the server's {method}: {error}");
                    }
                }
                if let Some(task) = task_id {
                    shared.input_done(&task);
                }
            }
        });
    if spawned.is_err() {
        // No client will be built to stop the refusals' thread, which holds the transport.
        on_failure.stop_dispatcher();
    }
    spawned.map(|_| ())
}

/// Newline-delimited JSON-RPC over a reader thread and a writer thread.
///
/// Messages go out through a bounded queue to a thread of their own, so a server that
/// stops reading its input never blocks a caller (whose request timeout then applies), nor
/// the client's drop.
pub(crate) struct LineTransport {
    outgoing: Mutex<Option<Sender<Vec<u8>>>>,
    /// Bytes of the messages queued or being written ([`MAX_QUEUED_BYTES`] at most, but
    /// for one message).
    queued: Arc<AtomicUsize>,
    child: Mutex<Option<Child>>,
    shared: Arc<Shared>,
}

/// Messages queued for a server that is not reading before sending fails.
const MAX_QUEUED_MESSAGES: usize = 1024;

/// Bytes of messages queued for a server that is not reading before sending fails (a
/// message alone is queued whatever its size): the answers to the server's requests echo
/// their ids, which may be as long as a message, so a count alone would let a server that
/// sends such requests and stops reading make the client hold gigabytes.
const MAX_QUEUED_BYTES: usize = MAX_SERVER_MESSAGE;

impl LineTransport {
    /// Starts the reader thread on `reader` and the writer thread on `writer`. `child`, if
    /// given, is the server process, reaped on shutdown.
    pub(crate) fn start(
        shared: Arc<Shared>,
        reader: Box<dyn Read + Send>,
        writer: Box<dyn Write + Send>,
        child: Option<Child>,
    ) -> std::io::Result<LineTransport> {
        let reading = shared.clone();
        std::thread::Builder::new()
            .name("mcp-client-reader".into())
            .spawn(move || read_lines(reader, &reading))?;
        let (outgoing, lines) = crossbeam_channel::bounded(MAX_QUEUED_MESSAGES);
        let writing = shared.clone();
        let queued = Arc::new(AtomicUsize::new(0));
        let written = queued.clone();
        std::thread::Builder::new()
            .name("mcp-client-writer".into())
            .spawn(move || write_lines(writer, &lines, &written, &writing))?;
        Ok(LineTransport {
            outgoing: Mutex::new(Some(outgoing)),
            queued,
            child: Mutex::new(child),
            shared,
        })
    }

    fn write(&self, message: &Value) -> Result<(), ClientError> {
        if let Some(reason) = self.shared.closed_reason() {
            return Err(ClientError::closed(reason));
        }
        let mut line = serde_json::to_vec(message)
            .map_err(|e| ClientError::Protocol(format!("cannot serialise a message: {e}")))?;
        line.push(b'\n');
        let outgoing = self.outgoing.lock();
        let Some(outgoing) = outgoing.as_ref() else {
            return Err(ClientError::closed("the client was shut down"));
        };
        let not_reading = |what: String| {
            ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!("the server is not reading its input ({what} queued)"),
            ))
        };
        let len = line.len();
        let room = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued == 0 || queued.saturating_add(len) <= MAX_QUEUED_BYTES)
                    .then(|| queued.saturating_add(len))
            });
        if let Err(queued) = room {
            return Err(not_reading(format!("{queued} bytes")));
        }
        outgoing.try_send(line).map_err(|error| {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            match error {
                TrySendError::Full(_) => not_reading(format!("{MAX_QUEUED_MESSAGES} messages")),
                TrySendError::Disconnected(_) => ClientError::closed(
                    self.shared
                        .closed_reason()
                        .unwrap_or_else(|| "the connection is closed".into()),
                ),
            }
        })
    }
}

/// Writes queued lines until the queue closes (shutdown), then drops `writer`, which
/// closes the server's input. A failed write ends the connection for every caller.
fn write_lines(
    mut writer: Box<dyn Write + Send>,
    lines: &Receiver<Vec<u8>>,
    queued: &AtomicUsize,
    shared: &Shared,
) {
    for line in lines {
        let mut written = writer.write_all(&line);
        queued.fetch_sub(line.len(), Ordering::AcqRel);
        // Flush when nothing else is queued, so a burst goes out in one write.
        if written.is_ok() && lines.is_empty() {
            written = writer.flush();
        }
        if let Err(error) = written {
            shared.close(format!("writing to the server failed: {error}"));
            return;
        }
    }
}

/// Longest message the client accepts from a server (tool results can be large); a longer
/// one ends the connection with a clear error rather than unbounded memory.
pub(crate) const MAX_SERVER_MESSAGE: usize = 64 * 1024 * 1024;

fn read_lines(reader: Box<dyn Read + Send>, shared: &Shared) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    let reason = loop {
        match read_line(&mut reader, &mut line, MAX_SERVER_MESSAGE) {
            Ok(Line::End) => break "the server closed its output (it exited or died)".to_string(),
            Ok(Line::TooLong) => {
                break format!("the server sent a message larger than {MAX_SERVER_MESSAGE} bytes")
            }
            Ok(Line::Complete) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim();
                if !text.is_empty() {
                    shared.incoming_text_from(text, None);
                }
            }
            Err(error) => break format!("reading from the server failed: {error}"),
        }
    };
    shared.close(reason);
}

impl Transport for LineTransport {
    fn send_request(&self, _id: &RequestId, message: Value) -> Result<(), ClientError> {
        self.write(&message)
    }

    fn send(&self, message: Value) -> Result<(), ClientError> {
        self.write(&message)
    }

    fn shutdown(&self) {
        // Closing the server's input is how a stdio server is told to exit: the writer
        // thread writes what is queued, then drops it.
        drop(self.outgoing.lock().take());
        let Some(mut child) = self.child.lock().take() else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn process_id(&self) -> Option<u32> {
        self.child.lock().as_ref().map(Child::id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: i64, task: &str) -> Message {
        Message::Request(Request {
            id: RequestId::Number(id),
            method: "elicitation/create".into(),
            params: Some(json!({"_meta": {RELATED_TASK: {"taskId": task}}})),
        })
    }

    #[test]
    fn forgetting_the_newest_id_brings_back_the_one_it_pushed_out() {
        let mut inputs = Inputs::default();
        for id in 1..=REMEMBERED as i64 {
            assert!(inputs.first_sight(&RequestId::Number(id)));
        }
        let dropped = RequestId::Number(0);
        assert!(inputs.first_sight(&dropped));
        inputs.forget(&dropped);
        assert!(
            !inputs.first_sight(&RequestId::Number(1)),
            "1 is still remembered"
        );
        assert_eq!(inputs.seen.len(), REMEMBERED);
        assert_eq!(inputs.seen_order.len(), REMEMBERED);
    }

    /// A writer that takes nothing (a server that stops reading) until dropped.
    struct Stalled(Receiver<()>);

    impl Write for Stalled {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A reader that says nothing until dropped.
    struct Silent(Receiver<()>);

    impl Read for Silent {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            Ok(0)
        }
    }

    #[test]
    fn messages_queued_for_a_server_that_stops_reading_are_bounded_in_bytes() {
        // Answers echo the server's request ids, which may be as long as a message: a
        // server that sends such requests and stops reading must not make the client
        // queue a thousand of them.
        let (shared, _jobs) = Shared::new();
        let (release, stalled) = crossbeam_channel::bounded::<()>(0);
        let transport = LineTransport::start(
            shared,
            Box::new(Silent(stalled.clone())),
            Box::new(Stalled(stalled)),
            None,
        )
        .unwrap();
        let big = json!({"jsonrpc": "2.0", "id": "x".repeat(256 * 1024), "result": {}});
        let mut queued = 0;
        let error = loop {
            match transport.send(big.clone()) {
                Ok(()) => queued += 1,
                Err(error) => break error,
            }
        };
        assert!(
            queued * 256 * 1024 <= MAX_SERVER_MESSAGE + 2 * 256 * 1024,
            "{queued} messages of 256 KiB queued"
        );
        assert!(
            matches!(&error, ClientError::Io(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{error}"
        );
        drop(release);
        transport.shutdown();
    }

    #[test]
    fn server_requests_waiting_for_the_handlers_are_bounded_in_bytes() {
        // Handlers answer one request at a time, as slowly as a human: a server sending
        // large requests meanwhile must not make the client hold a thousand of them.
        let (shared, jobs) = Shared::new();
        let size = 256 * 1024;
        for id in 0..(MAX_QUEUED_SERVER_REQUESTS as i64) {
            let mut big = request(id, "t");
            if let Message::Request(request) = &mut big {
                request.params.as_mut().unwrap()["message"] = json!("x".repeat(size));
            }
            shared.incoming_from(big, None);
        }
        assert!(
            jobs.len() * size <= MAX_SERVER_MESSAGE + size,
            "{} requests of 256 KiB queued",
            jobs.len()
        );
        // The others were refused ("client busy"), as many as the refusals' queue takes.
        let refused = shared.refusals_out.len();
        assert!(refused > 0);
        // Once the dispatcher and the refusals' thread took them, there is room again.
        let taken = jobs.len();
        for Work::Request(request, _) in jobs.try_iter() {
            shared.release(request_weight(&request));
        }
        for (answer, _) in shared.refusals_out.try_iter() {
            shared.release(weight(&answer));
        }
        assert_eq!(shared.held.load(Ordering::Acquire), 0);
        shared.incoming_from(request(-1, "t"), None);
        assert_eq!(jobs.len(), 1, "after {taken} taken");
    }

    #[test]
    fn long_ids_are_not_kept_whole() {
        // A hostile server's ids and related task ids may be as long as a message: the
        // thousands of each kept must not hold that much.
        let (shared, jobs) = Shared::new();
        let long = |n: usize| format!("{n}{}", "x".repeat(64 * 1024));
        for n in 0..64 {
            let mut request = request(0, &long(n));
            if let Message::Request(request) = &mut request {
                request.id = RequestId::String(long(n));
            }
            shared.incoming_from(request, None);
            // Taken by a dispatcher that never answers (its input stays in flight).
            drop(jobs.try_recv());
        }
        let inputs = shared.inputs.lock();
        let kept = format!(
            "{:?}{:?}{:?}",
            inputs.seen, inputs.seen_order, inputs.per_task
        );
        assert!(kept.len() < 64 * 1024, "{} bytes kept", kept.len());
        // A repeat is still known for one.
        drop(inputs);
        let mut again = request(0, &long(3));
        if let Message::Request(request) = &mut again {
            request.id = RequestId::String(long(3));
        }
        shared.incoming_from(again, None);
        assert!(jobs.try_recv().is_err(), "a repeat was dispatched");
    }

    #[test]
    fn a_forgotten_request_id_leaves_no_place_in_the_order() {
        let mut inputs = Inputs::default();
        let first = RequestId::Number(1);
        assert!(inputs.first_sight(&first));
        inputs.forget(&first);
        assert!(inputs.seen.is_empty() && inputs.seen_order.is_empty());
        // Seen again, it is remembered as long as any id seen after it: no stale place
        // from its first sight evicts it early.
        assert!(inputs.first_sight(&first));
        for id in 2..=REMEMBERED as i64 {
            assert!(inputs.first_sight(&RequestId::Number(id)));
        }
        assert!(!inputs.first_sight(&first), "forgotten too early");
    }

    #[test]
    fn a_request_dropped_unanswered_is_taken_when_it_comes_again() {
        let (shared, jobs) = Shared::new();
        let mut id = 0;
        // The queue and the refusals' queue full: the next request gets no answer at all.
        while jobs.len() < MAX_QUEUED_SERVER_REQUESTS || !shared.refusals_out.is_full() {
            shared.incoming_from(request(id, "t"), None);
            id += 1;
        }
        shared.incoming_from(request(id, "t"), None);
        // Room again, and the same request arrives once more (another stream).
        jobs.try_iter().for_each(drop);
        shared.refusals_out.try_iter().for_each(drop);
        shared.incoming_from(request(id, "t"), None);
        assert_eq!(jobs.len(), 1, "request {id} is queued this time");
    }

    /// A transport that sends nowhere.
    struct Nowhere;

    impl Transport for Nowhere {
        fn send_request(&self, _: &RequestId, _: Value) -> Result<(), ClientError> {
            Ok(())
        }
        fn send(&self, _: Value) -> Result<(), ClientError> {
            Ok(())
        }
        fn shutdown(&self) {}
    }

    #[test]
    fn no_handler_runs_for_requests_still_queued_when_the_dispatcher_stops() {
        // `select!` would take a queued request half the time: twenty tries.
        for _ in 0..20 {
            let (shared, jobs) = Shared::new();
            let (started_tx, started) = crossbeam_channel::unbounded::<()>();
            let (release_tx, release) = crossbeam_channel::bounded::<()>(0);
            let handler: Handler = Arc::new(move |_| {
                let _ = started_tx.send(());
                let _ = release.recv();
                Ok(json!({"action": "decline"}))
            });
            let handlers = Handlers {
                elicitation: Some(handler),
                sampling: None,
                roots: None,
            };
            let transport: Arc<dyn Transport> = Arc::new(Nowhere);
            start_dispatcher(jobs, shared.clone(), transport, handlers).unwrap();
            for id in 0..5 {
                shared.incoming_from(request(id, "t"), None);
            }
            started
                .recv_timeout(Duration::from_secs(10))
                .expect("the first request is handled");
            shared.stop_dispatcher();
            drop(release_tx);
            // The dispatcher ends (its queue's receiver goes with it) without taking
            // another request.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !matches!(
                shared.work.try_send(Work::Request(
                    Request {
                        id: RequestId::Number(-1),
                        method: "ping".into(),
                        params: None,
                    },
                    None
                )),
                Err(TrySendError::Disconnected(_))
            ) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the dispatcher never ended"
                );
                std::thread::yield_now();
            }
            assert!(started.try_recv().is_err(), "a queued request was handled");
        }
    }

    #[test]
    fn requests_beyond_the_queue_are_refused_and_not_counted_for_their_task() {
        let (shared, jobs) = Shared::new();
        let extra = 5;
        for id in 0..(MAX_QUEUED_SERVER_REQUESTS + extra) as i64 {
            shared.incoming_from(request(id, "t"), None);
        }
        assert_eq!(jobs.len(), MAX_QUEUED_SERVER_REQUESTS);
        let queued = MAX_QUEUED_SERVER_REQUESTS as u64;
        assert_eq!(
            shared.task_inputs("t"),
            TaskInputs {
                seen: queued,
                in_flight: queued as u32
            }
        );
        let refusals: Vec<Value> = shared.refusals_out.try_iter().map(|(a, _)| a).collect();
        assert_eq!(refusals.len(), extra);
        assert_eq!(refusals[0]["id"], MAX_QUEUED_SERVER_REQUESTS);
        assert_eq!(refusals[0]["error"]["code"], INTERNAL_ERROR);
        // Once the dispatcher made room, the next one is queued again.
        drop(jobs.recv());
        shared.input_done("t");
        shared.incoming_from(request(-1, "t"), None);
        assert_eq!(jobs.len(), MAX_QUEUED_SERVER_REQUESTS);
        assert!(shared.refusals_out.is_empty());
        assert_eq!(shared.task_inputs("t").in_flight, queued as u32);
    }

    #[test]
    fn repeats_are_dropped_and_only_the_latest_ids_are_remembered() {
        let (shared, jobs) = Shared::new();
        shared.incoming_from(request(1, "t"), None);
        shared.incoming_from(request(1, "t"), None);
        assert_eq!(jobs.try_iter().count(), 1, "a repeat is dispatched once");
        for id in 2..=(3 * REMEMBERED as i64) {
            shared.incoming_from(request(id, &format!("t{id}")), None);
            // Taken by a dispatcher that never answers.
            drop(jobs.try_recv());
        }
        let inputs = shared.inputs.lock();
        assert!(inputs.seen.len() <= REMEMBERED && inputs.seen_order.len() <= REMEMBERED);
        assert!(inputs.seen.contains(&Kept::Number(3 * REMEMBERED as i64)));
        // Every request is still in flight (nobody ran the dispatcher): none is forgotten.
        assert_eq!(inputs.per_task.len(), 3 * REMEMBERED);
    }

    #[cfg(feature = "http")]
    #[test]
    fn after_a_renewal_requests_of_the_forgotten_session_are_dropped() {
        let (shared, jobs) = Shared::new();
        shared.incoming_from(request(1, "t"), Some("old"));
        assert_eq!(
            jobs.try_iter().count(),
            1,
            "no renewal yet: any session is current"
        );
        shared.new_session("new");
        // A late copy of the old session's request, and a new one of its own: both gone.
        shared.incoming_from(request(1, "t"), Some("old"));
        shared.incoming_from(request(2, "t"), Some("old"));
        assert_eq!(jobs.try_iter().count(), 0);
        // The new session numbers afresh: its request 1 is not a repeat.
        shared.incoming_from(request(1, "t"), Some("new"));
        shared.incoming_from(request(1, "t"), Some("new"));
        assert_eq!(jobs.try_iter().count(), 1);
    }

    #[test]
    fn input_counts_of_finished_tasks_do_not_pile_up() {
        let (shared, jobs) = Shared::new();
        for id in 0..(3 * REMEMBERED as i64) {
            let task = format!("t{id}");
            shared.incoming_from(request(id, &task), None);
            drop(jobs.try_recv());
            shared.input_done(&task);
        }
        assert!(shared.inputs.lock().per_task.len() <= REMEMBERED);
        shared.incoming_from(request(-1, "followed"), None);
        shared.input_done("followed");
        assert_eq!(shared.task_inputs("followed").seen, 1);
        shared.forget_task("followed");
        assert_eq!(shared.task_inputs("followed"), TaskInputs::default());
    }
}
