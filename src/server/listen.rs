//! `subscriptions/listen` with `notifications.taskIds` (SEP-2663 task status notifications
//! on a 2026-07-28 listen stream): a client names tasks, the server acknowledges the ones it
//! will report on, then sends each one's full state (`notifications/tasks`, a `DetailedTask`
//! as `tasks/get` would return it) now and after every change, until the task ends.
//!
//! Decisions the spec leaves to the server:
//! - Right after the acknowledgement every agreed task's current state is sent, so a client
//!   that subscribes after creating a task cannot miss a change made in between.
//! - Only tasks the requester could `tasks/get` are agreed; others are left out of the
//!   acknowledgement (an unknown or foreign id is not an error, as for the core filters the
//!   server does not support, which are left out too).
//! - A subscription ends gracefully (the `subscriptions/listen` result, with its
//!   `subscriptionId`) once every task it follows has ended and that end was sent, or is
//!   gone: there is nothing left to report, and a task cannot be added to a subscription.
//! - A state is sent once: a change that leaves the task as the client last saw it (a store
//!   event for a change already reported) sends nothing.
//!
//! Where messages go is the transport's: stdio shares the connection's writer queue, an HTTP
//! listen stream has a queue of its own that its thread writes out. Over stdio a message
//! waits for room as an answer does (a client that reads late gets everything; a stdio
//! subscription has no stream whose end could tell the client it was dropped), though not
//! past the subscription's end (its cancel, the connection closing). Over HTTP a
//! subscription whose client stops reading (its queue full, in count or in bytes) ends at
//! once, without its result: the client sees its stream end, as after a dropped
//! connection, and subscribes again.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{select, Receiver, Sender, TrySendError};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use crate::model::{SessionId, StoreEvent, TaskDetail, TaskId};
use crate::protocol::jsonrpc::{self, RequestId, RpcError};
use crate::protocol::{sep2663, RequestMeta};
use crate::{StoreError, TaskStore};

/// Most tasks one `subscriptions/listen` may name.
pub const MAX_LISTEN_TASKS: usize = 1024;

/// Most subscriptions open at once on one connection. On HTTP, where the count is over all
/// clients and each subscription also holds a TCP connection of its own, no more than half
/// of `HttpOptions::max_connections` either: subscriptions never take the connections that
/// other requests (a poll, a call) need.
pub const MAX_LISTENS: usize = 1024;

/// Most subscriptions open at once over HTTP, with `max_connections` client connections:
/// [`MAX_LISTENS`], and at most half of them. Each subscription holds a connection for as
/// long as it runs, so without this subscriptions alone could take every connection (the
/// default `max_connections` is [`MAX_LISTENS`]), and the server would turn away every
/// other request, polls included, with 503; refused instead, a client only polls. (The
/// HTTP transport also bounds subscriptions and sessions' `GET` streams together by half
/// of its connections.)
#[cfg(feature = "http")]
pub(crate) fn listen_limit(max_connections: usize) -> usize {
    MAX_LISTENS.min(max_connections / 2)
}

/// Longest string request id a `subscriptions/listen` may have, in bytes: every message of
/// the subscription repeats it (`_meta` of the acknowledgement and of each state, the
/// result), so a request of a few megabytes would otherwise make the server queue a copy
/// per task, over HTTP before the client reads a byte. Request ids are short in practice.
pub const MAX_LISTEN_ID_BYTES: usize = 256;

/// Room in an HTTP listen stream's own queue: the acknowledgement, a first state per task,
/// one change per task while the stream waits to start, and the result.
#[cfg(feature = "http")]
pub(crate) const STREAM_QUEUE: usize = 2 * MAX_LISTEN_TASKS + 16;

/// Bytes of messages an HTTP listen stream's queue may hold: a task's state carries its
/// result, which may be large, so a count alone would let a client that subscribes to many
/// such tasks and never reads make the server hold gigabytes per stream. A message is
/// taken whatever its size when the queue is empty, so one large state never ends a
/// subscription whose client reads. The answers waiting on a connection have a like bound.
#[cfg(feature = "http")]
pub(crate) const STREAM_QUEUE_BYTES: usize = 16 * 1024 * 1024;

/// The sending end of an HTTP listen stream's queue: each message rendered once, as JSON
/// text, and bounded by count and by bytes. Full means the client stopped reading.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
#[derive(Clone)]
pub(crate) struct StreamQueue {
    messages: Sender<String>,
    bytes: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// The reading end of a [`StreamQueue`], which its stream's thread writes out.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) struct StreamMessages {
    messages: Receiver<String>,
    bytes: Arc<AtomicUsize>,
}

/// A stream queue holding at most `max_messages` messages and, past the first,
/// `max_bytes` bytes of them.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn stream_queue(max_messages: usize, max_bytes: usize) -> (StreamQueue, StreamMessages) {
    let (sender, receiver) = crossbeam_channel::bounded(max_messages);
    let bytes = Arc::new(AtomicUsize::new(0));
    let queue = StreamQueue {
        messages: sender,
        bytes: bytes.clone(),
        max_bytes,
    };
    let messages = StreamMessages {
        messages: receiver,
        bytes,
    };
    (queue, messages)
}

impl StreamQueue {
    fn try_send(&self, message: &Value) -> Result<(), TrySendError<()>> {
        let text = message.to_string();
        let len = text.len();
        let queued = self.bytes.fetch_add(len, Ordering::AcqRel);
        if queued > 0 && queued.saturating_add(len) > self.max_bytes {
            self.bytes.fetch_sub(len, Ordering::AcqRel);
            return Err(TrySendError::Full(()));
        }
        self.messages.try_send(text).map_err(|error| {
            self.bytes.fetch_sub(len, Ordering::AcqRel);
            match error {
                TrySendError::Full(_) => TrySendError::Full(()),
                TrySendError::Disconnected(_) => TrySendError::Disconnected(()),
            }
        })
    }
}

#[cfg_attr(not(feature = "http"), allow(dead_code))]
impl StreamMessages {
    /// The queue, to wait on: each message received must be handed to
    /// [`taken`](Self::taken).
    pub(crate) fn receiver(&self) -> &Receiver<String> {
        &self.messages
    }

    /// Frees the room `message`, just received, held in the queue.
    pub(crate) fn taken(&self, message: &str) {
        self.bytes.fetch_sub(message.len(), Ordering::AcqRel);
    }
}

/// The `_meta` key naming the subscription a message belongs to.
pub(crate) const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";

/// Where a subscription's messages go.
pub(crate) enum Sink {
    /// A queue of its own, written out by its stream's thread (HTTP). Full means the client
    /// stopped reading; dropped, it tells that thread the subscription ended.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Own(StreamQueue),
    /// The connection's writer queue (stdio), shared with answers: a message waits for room
    /// there, as an answer does, until the subscription is ended from outside.
    Shared(Sender<Value>),
}

impl Sink {
    /// False when the message could not be queued: the subscription is over. `halted`
    /// disconnects when the subscription is ended from outside.
    fn send(&self, message: Value, halted: &Receiver<()>) -> bool {
        match self {
            Sink::Own(queue) => match queue.try_send(&message) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    log::warn!("a task subscription's client stopped reading: ended");
                    false
                }
                Err(TrySendError::Disconnected(_)) => false,
            },
            Sink::Shared(queue) => select! {
                send(queue, message) -> sent => sent.is_ok(),
                recv(halted) -> _ => false,
            },
        }
    }
}

/// A subscription's handle, to end it (see [`Subscriptions::close`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub(crate) struct ListenKey(u64);

/// How a subscription ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Ending {
    /// The server ends it: its result goes out (2026-07-28's graceful close).
    Graceful,
    /// Its client left or cancelled it: nothing more goes out.
    Silent,
}

/// One open subscription.
struct Listen {
    id: RequestId,
    /// The tasks it was opened for: the only ones the registry may list it under.
    tasks: Vec<TaskId>,
    /// Dropped by [`halt`](Self::halt), which disconnects `halted`: a message waiting for
    /// room in a shared queue (with the state locked) gives up, so ending the subscription
    /// never waits for a client that may not read again.
    halt: Mutex<Option<Sender<()>>>,
    halted: Receiver<()>,
    state: Mutex<ListenState>,
}

struct ListenState {
    /// False until the acknowledgement went out: nothing is sent before it.
    acknowledged: bool,
    /// The tasks still followed, each with a fingerprint of the state last sent.
    followed: HashMap<TaskId, u64>,
    /// `None` once the subscription ended.
    sink: Option<Sink>,
}

impl Listen {
    /// Sends `task`'s state unless the client has seen it, and stops following it once it
    /// ended (or is gone). Called with the listen's state locked, so the states one
    /// subscription sends are in the order the store took them.
    fn report(
        &self,
        state: &mut ListenState,
        id: TaskId,
        detail: Result<&TaskDetail, &StoreError>,
    ) {
        let Some(&last) = state.followed.get(&id) else {
            return;
        };
        let detail = match detail {
            Ok(detail) => detail,
            Err(StoreError::NotFound) => {
                // Gone (expired and removed): nothing more will happen to it.
                log::debug!("task subscription {}: {id} is gone", self.id);
                state.followed.remove(&id);
                return;
            }
            Err(error) => {
                // A store of the embedder's that failed this once: the task may well live
                // on, and dropping it could end the subscription with its result, telling
                // the client nothing more will come. Its next event (or the next lag's
                // refresh) reports it.
                log::warn!(
                    "task subscription {}: could not look up {id} ({error}); reporting it \
                     at its next change",
                    self.id
                );
                return;
            }
        };
        let task = sep2663::detailed_task(detail);
        let print = fingerprint(&task);
        if print != last {
            state.followed.insert(id, print);
            if !self.send(state, self.notification(task)) {
                return;
            }
        }
        if detail.task.status.is_terminal() {
            state.followed.remove(&id);
        }
    }

    fn notification(&self, task: Value) -> Value {
        let mut params = match task {
            Value::Object(object) => object,
            _ => Map::new(),
        };
        params.insert("_meta".into(), self.meta());
        jsonrpc::notification("notifications/tasks", Value::Object(params))
    }

    fn meta(&self) -> Value {
        json!({ SUBSCRIPTION_ID_KEY: self.id })
    }

    /// Queues `message`; a subscription whose message cannot be queued is over.
    fn send(&self, state: &mut ListenState, message: Value) -> bool {
        let sent = (state.sink.as_ref()).is_some_and(|sink| sink.send(message, &self.halted));
        if !sent {
            state.sink = None;
            state.followed.clear();
        }
        sent
    }

    /// Ends the subscription: `Graceful` sends its result first. Idempotent.
    fn end(&self, state: &mut ListenState, ending: Ending) {
        if ending == Ending::Graceful && state.sink.is_some() {
            let result = json!({ "resultType": "complete", "_meta": self.meta() });
            self.send(state, jsonrpc::response(&self.id, result));
        }
        state.sink = None;
        state.followed.clear();
    }

    /// Makes a message waiting for room give up (the subscription is being ended silently).
    fn halt(&self) {
        self.halt.lock().take();
    }

    /// Ends the subscription gracefully if it follows nothing any more. True once it ended.
    fn end_if_done(&self, state: &mut ListenState) -> bool {
        if state.followed.is_empty() {
            self.end(state, Ending::Graceful);
        }
        state.sink.is_none()
    }
}

/// A fingerprint of a task's state as sent: equal states, equal prints.
fn fingerprint(task: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    task.to_string().hash(&mut hasher);
    hasher.finish()
}

#[derive(Default)]
struct Registry {
    next: u64,
    by_key: HashMap<ListenKey, Arc<Listen>>,
    by_task: HashMap<TaskId, Vec<ListenKey>>,
    /// Set by [`Subscriptions::close_all`]: the connection is closed, and takes no more.
    closed: bool,
}

impl Registry {
    fn forget(&mut self, key: ListenKey, tasks: impl IntoIterator<Item = TaskId>) {
        for task in tasks {
            if let Some(keys) = self.by_task.get_mut(&task) {
                keys.retain(|k| *k != key);
                if keys.is_empty() {
                    self.by_task.remove(&task);
                }
            }
        }
    }

    /// Forgets subscription `key` (under the tasks it was opened for only: walking every
    /// followed task would make ending many large subscriptions quadratic).
    fn remove(&mut self, key: ListenKey) -> Option<Arc<Listen>> {
        let listen = self.by_key.remove(&key)?;
        self.forget(key, listen.tasks.iter().copied());
        Some(listen)
    }
}

/// A connection's task subscriptions.
pub(crate) struct Subscriptions {
    registry: Mutex<Registry>,
    /// How many are open: store events skip the registry while there are none.
    open: AtomicUsize,
    /// Most open at once.
    limit: usize,
}

impl Default for Subscriptions {
    fn default() -> Self {
        Subscriptions::with_limit(MAX_LISTENS)
    }
}

/// The tasks a `subscriptions/listen` asks about: `None` when it asks about none.
fn requested_tasks(params: Option<&Value>) -> Result<Option<Vec<String>>, RpcError> {
    let notifications = params
        .and_then(|p| p.get("notifications"))
        .and_then(Value::as_object)
        .ok_or_else(|| {
            RpcError::invalid_params(
                "subscriptions/listen needs params.notifications, an object naming the \
                 notifications wanted",
            )
        })?;
    let ids = match notifications.get("taskIds") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(ids)) => ids,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "params.notifications.taskIds must be an array of task ids",
            ))
        }
    };
    if ids.len() > MAX_LISTEN_TASKS {
        return Err(RpcError::invalid_params(format!(
            "params.notifications.taskIds names {} tasks; at most {MAX_LISTEN_TASKS} per \
             subscription",
            ids.len()
        )));
    }
    ids.iter()
        .map(|id| {
            id.as_str().map(str::to_owned).ok_or_else(|| {
                RpcError::invalid_params("params.notifications.taskIds must hold strings only")
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

impl Subscriptions {
    /// No subscriptions yet, and at most `limit` (and [`MAX_LISTENS`]) open at once.
    pub(crate) fn with_limit(limit: usize) -> Subscriptions {
        Subscriptions {
            registry: Mutex::default(),
            open: AtomicUsize::new(0),
            limit: limit.min(MAX_LISTENS),
        }
    }

    /// Opens a subscription for request `id`: checks `params`, sends the acknowledgement and
    /// then every agreed task's current state to `sink`, and ends it at once when nothing
    /// is left to follow. An error is the request's answer; nothing was sent then.
    /// `unique_ids`: refuse an id an open subscription has (a connection of one client).
    pub(crate) fn open(
        &self,
        store: &dyn TaskStore,
        session: Option<&SessionId>,
        id: &RequestId,
        params: Option<&Value>,
        sink: Sink,
        unique_ids: bool,
    ) -> Result<ListenKey, RpcError> {
        if matches!(id, RequestId::String(text) if text.len() > MAX_LISTEN_ID_BYTES) {
            return Err(RpcError::invalid_request(format!(
                "a subscription repeats its request id in every message: \
                 at most {MAX_LISTEN_ID_BYTES} bytes"
            )));
        }
        let requested = requested_tasks(params)?;
        if requested.is_some() && !RequestMeta::of(params).declares_tasks {
            return Err(sep2663::missing_capability(
                "task status notifications on subscriptions/listen",
            ));
        }
        let mut wanted: Vec<TaskId> = Vec::new();
        for text in requested.iter().flatten() {
            // An id that cannot be one of ours names no task: left out, as unknown ones are.
            if let Some(task) = TaskId::parse(text) {
                if !wanted.contains(&task) {
                    wanted.push(task);
                }
            }
        }
        let (halt, halted) = crossbeam_channel::bounded(0);
        let listen = Arc::new(Listen {
            id: id.clone(),
            tasks: wanted.clone(),
            halt: Mutex::new(Some(halt)),
            halted,
            state: Mutex::new(ListenState {
                acknowledged: false,
                followed: wanted.iter().map(|&task| (task, 0)).collect(),
                sink: Some(sink),
            }),
        });
        // Registered before the tasks are looked at, so no change after that look is missed;
        // changes reported meanwhile wait for the acknowledgement (they find the state
        // locked, then `acknowledged`).
        let mut state = listen.state.lock();
        let key = {
            let mut registry = self.registry.lock();
            // Checked where `close_all` sets it: a listen handled as the connection closes
            // (on another thread) is either ended by it or refused here, never left open
            // with nothing to end it.
            if registry.closed {
                return Err(RpcError::internal(
                    "subscriptions/listen: the connection is closed",
                ));
            }
            if registry.by_key.len() >= self.limit {
                return Err(RpcError::internal(format!(
                    "too many open subscriptions (at most {}): close one first",
                    self.limit
                )));
            }
            if unique_ids && registry.by_key.values().any(|open| open.id == *id) {
                return Err(RpcError::invalid_request(format!(
                    "request id {id} is an open subscription's"
                )));
            }
            registry.next += 1;
            let key = ListenKey(registry.next);
            registry.by_key.insert(key, listen.clone());
            for &task in &wanted {
                registry.by_task.entry(task).or_default().push(key);
            }
            self.open.fetch_add(1, Ordering::AcqRel);
            key
        };
        let details: Vec<(TaskId, Result<TaskDetail, StoreError>)> = wanted
            .iter()
            .map(|&task| (task, store.get_detail(task, session)))
            .collect();
        let agreed: Vec<String> = details
            .iter()
            .filter(|(_, detail)| detail.is_ok())
            .map(|(task, _)| task.to_string())
            .collect();
        let mut honoured = Map::new();
        if requested.is_some() {
            honoured.insert("taskIds".into(), json!(agreed));
        }
        let ack = jsonrpc::notification(
            "notifications/subscriptions/acknowledged",
            json!({ "notifications": honoured, "_meta": listen.meta() }),
        );
        if listen.send(&mut state, ack) {
            state.acknowledged = true;
            for (task, detail) in &details {
                listen.report(&mut state, *task, detail.as_ref());
            }
        }
        let ended = listen.end_if_done(&mut state);
        let gone: Vec<TaskId> = wanted
            .into_iter()
            .filter(|task| !state.followed.contains_key(task))
            .collect();
        drop(state);
        if ended {
            self.remove(key);
        } else {
            self.registry.lock().forget(key, gone);
        }
        Ok(key)
    }

    /// Ends subscription `key` (its client left: `Silent`; the server stops: `Graceful`).
    #[cfg(any(feature = "http", test))]
    pub(crate) fn close(&self, key: ListenKey, ending: Ending) {
        self.close_each([key], ending);
    }

    /// Ends subscriptions `keys`. Silently, every one is halted before any is locked: one
    /// report holds all the subscriptions following its task, and once the first it waits
    /// for room for is halted it waits for room for the next, which must not be waiting to
    /// be halted until that report lets go of the first.
    fn close_each(&self, keys: impl IntoIterator<Item = ListenKey>, ending: Ending) {
        let listens: Vec<Arc<Listen>> = keys.into_iter().filter_map(|k| self.remove(k)).collect();
        if ending == Ending::Silent {
            // Before the locks, which a message waiting for room holds.
            for listen in &listens {
                listen.halt();
            }
        }
        for listen in &listens {
            listen.end(&mut listen.state.lock(), ending);
        }
    }

    /// Ends the subscriptions opened by request `id` (`notifications/cancelled` on a
    /// connection of one client), sending nothing more. True if there was one.
    pub(crate) fn cancel(&self, id: &RequestId) -> bool {
        let keys: Vec<ListenKey> = {
            let registry = self.registry.lock();
            registry
                .by_key
                .iter()
                .filter(|(_, listen)| listen.id == *id)
                .map(|(key, _)| *key)
                .collect()
        };
        let found = !keys.is_empty();
        self.close_each(keys, Ending::Silent);
        found
    }

    /// Ends every subscription (the connection closes, or the server stops); a later
    /// [`open`](Self::open) is refused.
    pub(crate) fn close_all(&self, ending: Ending) {
        let keys: Vec<ListenKey> = {
            let mut registry = self.registry.lock();
            registry.closed = true;
            registry.by_key.keys().copied().collect()
        };
        self.close_each(keys, ending);
    }

    /// Reports a store event of the connection's own tasks (or a lag, after which every
    /// followed task is looked at again).
    pub(crate) fn on_event(
        &self,
        store: &dyn TaskStore,
        session: Option<&SessionId>,
        event: &StoreEvent,
    ) {
        if self.open.load(Ordering::Acquire) == 0 {
            return;
        }
        match event {
            StoreEvent::Status { task, .. } => self.refresh(store, session, task.task_id),
            StoreEvent::Expired { task_id, .. } => self.refresh(store, session, *task_id),
            StoreEvent::Lagged { .. } => {
                let tasks: Vec<TaskId> = self.registry.lock().by_task.keys().copied().collect();
                for task in tasks {
                    self.refresh(store, session, task);
                }
            }
            StoreEvent::Created { .. } => {}
        }
    }

    /// Sends `task`'s state to each subscription following it, looked up once for all of
    /// them: after lost events every followed task is refreshed, and a lookup per
    /// subscription would cost up to [`MAX_LISTENS`] times as many.
    fn refresh(&self, store: &dyn TaskStore, session: Option<&SessionId>, task: TaskId) {
        let mut listens: Vec<(ListenKey, Arc<Listen>)> = {
            let registry = self.registry.lock();
            let Some(keys) = registry.by_task.get(&task) else {
                return;
            };
            keys.iter()
                .filter_map(|key| Some((*key, registry.by_key.get(key)?.clone())))
                .collect()
        };
        // Looked up with every one of their states locked: no other report to any of them
        // (a subscription opening, another event's) can come between the lookup and this
        // one, so a client never sees a task go back to an older state. Locked in key
        // order, as every thread that locks several does, and never with the registry.
        listens.sort_unstable_by_key(|(key, _)| *key);
        let mut states: Vec<_> = listens.iter().map(|(_, l)| l.state.lock()).collect();
        // One not yet acknowledged sends the current state with its acknowledgement.
        if !states.iter().any(|state| state.acknowledged) {
            return;
        }
        let detail = store.get_detail(task, session);
        let mut outcomes = Vec::with_capacity(listens.len());
        for ((key, listen), state) in listens.iter().zip(states.iter_mut()) {
            if !state.acknowledged {
                continue;
            }
            listen.report(state, task, detail.as_ref());
            let followed = state.followed.contains_key(&task);
            outcomes.push((*key, listen.end_if_done(state), followed));
        }
        drop(states);
        for (key, ended, followed) in outcomes {
            if ended {
                self.remove(key);
            } else if !followed {
                self.registry.lock().forget(key, [task]);
            }
        }
    }

    fn remove(&self, key: ListenKey) -> Option<Arc<Listen>> {
        let listen = self.registry.lock().remove(key)?;
        self.open.fetch_sub(1, Ordering::AcqRel);
        Some(listen)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{CreateTask, TaskStatus};
    use crate::Store;

    fn declared(task_ids: &[TaskId]) -> Value {
        let ids: Vec<String> = task_ids.iter().map(TaskId::to_string).collect();
        json!({
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": sep2663::PROTOCOL_VERSION,
                "io.modelcontextprotocol/clientCapabilities":
                    {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            },
            "notifications": {"taskIds": ids},
        })
    }

    /// The messages waiting in an HTTP stream's queue, taken out of it.
    fn drain(messages: &StreamMessages) -> Vec<Value> {
        let taken = messages
            .receiver()
            .try_iter()
            .inspect(|m| messages.taken(m));
        taken.map(|m| serde_json::from_str(&m).unwrap()).collect()
    }

    fn status_event(store: &dyn TaskStore, id: TaskId) -> StoreEvent {
        StoreEvent::Status {
            task: store.get(id, None).unwrap(),
            session: None,
        }
    }

    /// Only a task the store no longer has stops being followed: a lookup that failed
    /// otherwise (an embedder's store with a passing fault) leaves it followed, so the
    /// subscription does not end telling the client that nothing more will come.
    #[test]
    fn a_failed_lookup_keeps_the_task_followed() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let task = handle.create(CreateTask::new()).unwrap().task_id;
        let subscriptions = Subscriptions::default();
        let (queue, messages) = stream_queue(8, usize::MAX);
        let params = declared(&[task]);
        let id = RequestId::Number(1);
        subscriptions
            .open(&handle, None, &id, Some(&params), Sink::Own(queue), false)
            .unwrap();
        assert_eq!(drain(&messages).len(), 2);
        let listen = subscriptions
            .registry
            .lock()
            .by_key
            .values()
            .next()
            .cloned();
        let listen = listen.expect("the subscription");
        let mut state = listen.state.lock();
        listen.report(&mut state, task, Err(&StoreError::Journal("disk".into())));
        assert!(state.followed.contains_key(&task), "kept after a fault");
        listen.report(&mut state, task, Err(&StoreError::NotFound));
        assert!(!state.followed.contains_key(&task), "dropped once gone");
    }

    #[test]
    fn a_subscription_whose_client_stops_reading_ends_without_a_word() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let tasks: Vec<TaskId> = (0..2)
            .map(|_| handle.create(CreateTask::new()).unwrap().task_id)
            .collect();
        let subscriptions = Subscriptions::default();
        // Room for the acknowledgement and the first state only.
        let (queue, messages) = stream_queue(2, usize::MAX);
        let id = RequestId::Number(1);
        let params = declared(&tasks);
        subscriptions
            .open(&handle, None, &id, Some(&params), Sink::Own(queue), false)
            .unwrap();
        let sent = drain(&messages);
        assert_eq!(sent.len(), 2, "{sent:#?}");
        // The second task's state found no room: the subscription is over, and the queue's
        // sender is gone (an HTTP stream then ends).
        assert_eq!(subscriptions.open.load(Ordering::Acquire), 0);
        assert!(
            messages.receiver().recv().is_err(),
            "no result, no more messages"
        );
        handle
            .update_status(tasks[0], None, TaskStatus::Cancelled, None)
            .ok();
        subscriptions.on_event(&handle, None, &status_event(&handle, tasks[0]));
        assert!(subscriptions.registry.lock().by_task.is_empty());
    }

    /// Over HTTP, task subscriptions hold at most half the server's connections (and never
    /// more than [`MAX_LISTENS`]), leaving the rest to polls and calls. (The transport's
    /// bound on all event streams is half of them too, so over HTTP this one only decides
    /// which refusal a listen past the bound gets.)
    #[cfg(feature = "http")]
    #[test]
    fn http_subscriptions_hold_at_most_half_the_connections() {
        assert_eq!(listen_limit(9), 4);
        assert_eq!(listen_limit(4 * MAX_LISTENS), MAX_LISTENS);
    }

    /// An HTTP listen stream's queue holds all a subscription of the largest size sends
    /// before its client reads a byte (the stream may start late): the acknowledgement, a
    /// first state and one change (here its end, with a kilobyte of status message) for
    /// each of [`MAX_LISTEN_TASKS`] tasks, and the result. The client is not cut off.
    #[cfg(feature = "http")]
    #[test]
    fn a_largest_subscription_fits_its_stream_queue_unread() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let tasks: Vec<TaskId> = (0..MAX_LISTEN_TASKS)
            .map(|_| handle.create(CreateTask::new()).unwrap().task_id)
            .collect();
        let subscriptions = Subscriptions::default();
        let (queue, messages) = stream_queue(STREAM_QUEUE, STREAM_QUEUE_BYTES);
        let id = RequestId::Number(1);
        let params = declared(&tasks);
        subscriptions
            .open(&handle, None, &id, Some(&params), Sink::Own(queue), false)
            .unwrap();
        let why = "w".repeat(1024);
        for &task in &tasks {
            handle.cancel(task, None, Some(why.clone())).unwrap();
            subscriptions.on_event(&handle, None, &status_event(&handle, task));
        }
        let sent = drain(&messages);
        assert_eq!(sent.len(), 2 * MAX_LISTEN_TASKS + 2);
        let agreed = &sent[0]["params"]["notifications"]["taskIds"];
        assert_eq!(agreed.as_array().map(Vec::len), Some(MAX_LISTEN_TASKS));
        let result = sent.last().unwrap();
        assert_eq!(result["result"]["resultType"], "complete", "{result}");
    }

    /// An HTTP stream's queue is bounded by bytes too (a task's state carries its result):
    /// a client that does not read ends its subscription once the states waiting pass the
    /// bound, while one that reads gets every state, however large each is.
    #[test]
    fn a_subscription_whose_unread_messages_pass_the_byte_bound_ends() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let task = handle.create(CreateTask::new()).unwrap().task_id;
        let subscriptions = Subscriptions::default();
        // The sizes of the acknowledgement and the first state, from a subscription whose
        // queue has no byte bound.
        let (probe, probed) = stream_queue(64, usize::MAX);
        let id = RequestId::Number(0);
        let params = declared(&[task]);
        let key = subscriptions
            .open(&handle, None, &id, Some(&params), Sink::Own(probe), false)
            .unwrap();
        subscriptions.close(key, Ending::Silent);
        let sizes: Vec<usize> = probed.receiver().try_iter().map(|m| m.len()).collect();
        let [ack, first] = sizes[..] else {
            panic!("{sizes:?}")
        };
        assert!(ack < first, "{sizes:?}");
        // Room in count for many messages, in bytes for those two only.
        let (queue, messages) = stream_queue(64, ack + first);
        let id = RequestId::Number(1);
        let params = declared(&[task]);
        subscriptions
            .open(&handle, None, &id, Some(&params), Sink::Own(queue), false)
            .unwrap();
        // The acknowledgement and the first state: the client reads them.
        assert_eq!(drain(&messages).len(), 2);
        // A change the client reads, with a large message: taken, the queue being empty.
        let message = "m".repeat(1000);
        handle
            .update_status(task, None, TaskStatus::Working, Some(message))
            .unwrap();
        subscriptions.on_event(&handle, None, &status_event(&handle, task));
        let sent = drain(&messages);
        assert_eq!(sent.len(), 1, "{sent:#?}");
        assert_eq!(subscriptions.open.load(Ordering::Acquire), 1);
        // Two changes the client does not read: the second passes the bound.
        for n in 0..2 {
            let message = format!("step {n}");
            handle
                .update_status(task, None, TaskStatus::Working, Some(message))
                .unwrap();
            subscriptions.on_event(&handle, None, &status_event(&handle, task));
        }
        assert_eq!(subscriptions.open.load(Ordering::Acquire), 0, "ended");
        assert_eq!(drain(&messages).len(), 1, "the first change only");
        assert!(messages.receiver().recv().is_err(), "no result");
    }

    /// Over stdio a subscription's messages wait for room in the connection's queue as
    /// answers do: a client that reads late (one that writes all its requests before it
    /// reads, say) still gets every message, then the result. Had the subscription ended
    /// there, nothing would ever tell it: a stdio subscription has no stream to end.
    #[test]
    fn a_stdio_subscription_waits_for_a_client_that_reads_late() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let tasks: Vec<TaskId> = (0..4)
            .map(|_| handle.create(CreateTask::new()).unwrap().task_id)
            .collect();
        let subscriptions = Arc::new(Subscriptions::default());
        let (queue, messages) = crossbeam_channel::bounded(2);
        let params = declared(&tasks);
        let opening = {
            let (subscriptions, handle) = (subscriptions.clone(), handle.clone());
            std::thread::spawn(move || {
                let id = RequestId::Number(1);
                let sink = Sink::Shared(queue);
                subscriptions.open(&handle, None, &id, Some(&params), sink, true)
            })
        };
        // The client reads nothing for a while (longer than the second a message once
        // waited before its subscription was dropped)...
        std::thread::sleep(Duration::from_millis(1300));
        // ...then everything: the acknowledgement and each task's state.
        let mut sent: Vec<Value> = (0..5)
            .map(|_| messages.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        opening.join().unwrap().unwrap();
        // A change while the client does not read waits too.
        let first = tasks[0];
        handle.cancel(first, None, None).unwrap();
        let event = status_event(&handle, first);
        let reporting = {
            let (subscriptions, handle) = (subscriptions.clone(), handle.clone());
            std::thread::spawn(move || subscriptions.on_event(&handle, None, &event))
        };
        std::thread::sleep(Duration::from_millis(1300));
        sent.extend(messages.try_iter());
        reporting.join().unwrap();
        sent.extend(messages.try_iter());
        for &task in &tasks[1..] {
            handle.cancel(task, None, None).unwrap();
            subscriptions.on_event(&handle, None, &status_event(&handle, task));
            sent.extend(messages.try_iter());
        }
        let statuses = sent.iter().filter(|m| m["params"]["status"] == "cancelled");
        assert_eq!(statuses.count(), 4, "{sent:#?}");
        assert_eq!(sent.len(), 1 + 4 + 4 + 1, "{sent:#?}");
        assert_eq!(sent.last().unwrap()["id"], 1, "the result, last");
        assert_eq!(subscriptions.open.load(Ordering::Acquire), 0);
    }

    /// Longest a test waits for something a correct run does at once.
    const GUARD: Duration = Duration::from_secs(10);

    /// Reports `task`'s current state to `subscriptions` on a thread of its own, and
    /// returns once that report holds the state of every subscription open (its message
    /// waiting for room, when nothing reads): the channel hears when the report returns.
    fn report_until_stuck(
        subscriptions: &Arc<Subscriptions>,
        handle: &crate::StoreHandle,
        task: TaskId,
    ) -> crossbeam_channel::Receiver<()> {
        let event = status_event(handle, task);
        let listens: Vec<Arc<Listen>> = {
            let registry = subscriptions.registry.lock();
            registry.by_key.values().cloned().collect()
        };
        let (reported, reporting) = crossbeam_channel::bounded(1);
        {
            let (subscriptions, handle) = (subscriptions.clone(), handle.clone());
            std::thread::spawn(move || {
                subscriptions.on_event(&handle, None, &event);
                let _ = reported.send(());
            });
        }
        let started = std::time::Instant::now();
        while !listens.iter().all(|listen| listen.state.is_locked()) {
            assert!(started.elapsed() < GUARD, "the report never started");
            std::thread::yield_now();
        }
        reporting
    }

    /// A stdio subscription whose message waits for room is still ended at once by its
    /// cancel or its connection closing (which must not wait for a client that may never
    /// read again), and sends nothing more.
    #[test]
    fn ending_a_stdio_subscription_does_not_wait_for_room() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let task = handle.create(CreateTask::new()).unwrap().task_id;
        for cancel in [true, false] {
            let subscriptions = Arc::new(Subscriptions::default());
            let (queue, messages) = crossbeam_channel::bounded(2);
            let id = RequestId::Number(7);
            let params = declared(&[task]);
            let sink = Sink::Shared(queue);
            subscriptions
                .open(&handle, None, &id, Some(&params), sink, true)
                .unwrap();
            assert!(messages.is_full());
            handle
                .update_status(task, None, TaskStatus::InputRequired, None)
                .ok();
            // The report holds the subscription's state while its message waits for room
            // (nothing reads `messages`): the end must come while it waits.
            let reporting = report_until_stuck(&subscriptions, &handle, task);
            // Ended on a thread of its own, so that a broken end (waiting for the report,
            // which waits for room) fails the test instead of hanging it.
            let (ended, ending) = crossbeam_channel::bounded(1);
            {
                let (subscriptions, id) = (subscriptions.clone(), id.clone());
                std::thread::spawn(move || {
                    let found = if cancel {
                        subscriptions.cancel(&id)
                    } else {
                        subscriptions.close_all(Ending::Silent);
                        true
                    };
                    let _ = ended.send(found);
                });
            }
            // Only an end that waits for room (for ever: nothing reads) waits this long.
            let found = ending
                .recv_timeout(GUARD)
                .expect("ending the subscription waits for room");
            assert!(found, "the subscription was not found");
            reporting
                .recv_timeout(GUARD)
                .expect("the report still waits for room after its subscription ended");
            assert_eq!(messages.try_iter().count(), 2, "nothing after the end");
            assert_eq!(subscriptions.open.load(Ordering::Acquire), 0);
            let registry = subscriptions.registry.lock();
            assert!(registry.by_key.is_empty() && registry.by_task.is_empty());
            drop(registry);
            handle
                .update_status(task, None, TaskStatus::Working, None)
                .ok();
        }
    }

    /// Closing the connection ends its stdio subscriptions even while one report holds
    /// several of them (all following the task it reports) and waits for room for one:
    /// ending them one at a time would wait for that report, which, once the first is
    /// halted, waits for room for the next one, which nobody halts: the connection's close
    /// (and so the end of serving) would hang for good on a client that stopped reading.
    #[test]
    fn closing_the_connection_does_not_wait_for_a_report_to_several_subscriptions() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let task = handle.create(CreateTask::new()).unwrap().task_id;
        let subscriptions = Arc::new(Subscriptions::default());
        // Room for the two acknowledgements and first states only.
        let (queue, messages) = crossbeam_channel::bounded(4);
        for n in 0..2 {
            let id = RequestId::Number(n);
            let params = declared(&[task]);
            let sink = Sink::Shared(queue.clone());
            subscriptions
                .open(&handle, None, &id, Some(&params), sink, true)
                .unwrap();
        }
        assert!(messages.is_full());
        handle
            .update_status(task, None, TaskStatus::InputRequired, None)
            .ok();
        // The report holds both subscriptions' states while the first one's message waits
        // for room (nothing reads `messages`).
        let reporting = report_until_stuck(&subscriptions, &handle, task);
        let (ended, ending) = crossbeam_channel::bounded(1);
        {
            let subscriptions = subscriptions.clone();
            std::thread::spawn(move || {
                subscriptions.close_all(Ending::Silent);
                let _ = ended.send(());
            });
        }
        // Only a close that waits for room (for ever: nothing reads) waits this long.
        ending
            .recv_timeout(GUARD)
            .expect("closing waits for room for a report");
        reporting
            .recv_timeout(GUARD)
            .expect("the report still waits for room after the close");
        assert_eq!(messages.try_iter().count(), 4, "nothing after the close");
        assert_eq!(subscriptions.open.load(Ordering::Acquire), 0);
    }

    #[test]
    fn ending_one_subscription_leaves_the_others_on_its_tasks_registered() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let shared = handle.create(CreateTask::new()).unwrap().task_id;
        let own = handle.create(CreateTask::new()).unwrap().task_id;
        let subscriptions = Subscriptions::default();
        let (queue, _messages) = stream_queue(16, usize::MAX);
        let first = subscriptions
            .open(
                &handle,
                None,
                &RequestId::Number(1),
                Some(&declared(&[shared, own])),
                Sink::Own(queue.clone()),
                true,
            )
            .unwrap();
        let second = subscriptions
            .open(
                &handle,
                None,
                &RequestId::Number(2),
                Some(&declared(&[shared])),
                Sink::Own(queue),
                true,
            )
            .unwrap();
        subscriptions.close(first, Ending::Silent);
        let registry = subscriptions.registry.lock();
        assert_eq!(registry.by_task.get(&shared), Some(&vec![second]));
        assert!(!registry.by_task.contains_key(&own));
        assert_eq!(registry.by_key.len(), 1);
    }

    #[test]
    fn an_ended_subscription_leaves_nothing_registered() {
        let store = Store::builder().build().unwrap();
        let handle = store.handle();
        let task = handle.create(CreateTask::new()).unwrap().task_id;
        let subscriptions = Subscriptions::default();
        let (queue, messages) = stream_queue(16, usize::MAX);
        let params = declared(&[task, task]);
        for n in 0..3 {
            let sink = Sink::Own(queue.clone());
            let id = RequestId::Number(n);
            subscriptions
                .open(&handle, None, &id, Some(&params), sink, true)
                .unwrap();
        }
        assert_eq!(subscriptions.registry.lock().by_task[&task].len(), 3);
        handle.cancel(task, None, None).unwrap();
        subscriptions.on_event(&handle, None, &status_event(&handle, task));
        // Each sent its acknowledgement, two states and its result.
        assert_eq!(drain(&messages).len(), 3 * 4);
        let registry = subscriptions.registry.lock();
        assert!(registry.by_key.is_empty() && registry.by_task.is_empty());
        assert_eq!(subscriptions.open.load(Ordering::Acquire), 0);
    }
}
