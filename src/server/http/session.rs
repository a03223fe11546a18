//! 2025-11-25 sessions: the session table, `initialize` (which opens one, ending a quiet
//! session at the limit), the requests and batches that name one in `Mcp-Session-Id`, its
//! `GET` event stream, `DELETE`, and the reaper of idle sessions. Apart from `stateless`:
//! 2026-07-28 requests have none of this.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::Mutex;
use serde_json::Value;

use super::auth::Identity;
use super::outbox::{EventStream, Responder, CLIENT_CHECK};
use super::replay::Replay;
use super::wire::Head;
use super::{dispatch, respond, too_many_streams, Answer, Closer, State, KEEP_ALIVE};
use crate::model::{SessionId, TaskId};
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::server::Connection;
use crate::TaskStore;

/// How many of the least recently active quiet sessions an `initialize` at
/// [`HttpOptions::max_sessions`](super::HttpOptions::max_sessions) looks at (a store
/// listing each) for one to end: as many of its own identity's, then as many of the
/// others' (see [`evict_quiet_session`]).
const EVICTION_CANDIDATES: usize = 32;
/// How many sessions one `initialize` may end to make room, should other ones take the
/// room first.
const EVICTIONS_PER_INITIALIZE: usize = 4;

pub(super) struct Session {
    id: SessionId,
    /// Who opened it (see [`HttpOptions::authenticate`](super::HttpOptions::authenticate)):
    /// nobody else may use it.
    identity: Identity,
    pub(super) connection: Arc<Connection>,
    outgoing: Receiver<Value>,
    /// Ends the session's current `GET` stream (with its ticket, see [`get`]): a newer
    /// one replaces it.
    stream: Mutex<Option<(u64, Arc<Closer>)>>,
    /// Tickets handed to `GET` streams so far.
    streams_asked: AtomicU64,
    /// The latest messages its streams carried, for a client that resumes one.
    replay: Replay,
    /// Wakes the current stream when a replaced one recorded a message it did not write.
    handover: (Sender<()>, Receiver<()>),
    ended: Closer,
    /// Requests in progress and open event streams (each holds an [`Activity`]).
    active: AtomicUsize,
    /// How many [`Activity`]s ever began: eviction sees by it whether a request came while
    /// it looked at the session's tasks.
    begun: AtomicU64,
    /// When the last [`Activity`] began or ended.
    last_active: Mutex<Instant>,
}

impl Session {
    /// Whether the idle reaper may end it: nothing in progress and quiet for `timeout`.
    fn idle(&self, now: Instant, timeout: Duration) -> bool {
        self.active.load(Ordering::Acquire) == 0
            && now.saturating_duration_since(*self.last_active.lock()) >= timeout
    }

    /// Whether nothing is in progress on it: no request and no event stream.
    fn quiet(&self) -> bool {
        self.active.load(Ordering::Acquire) == 0 && self.stream.lock().is_none()
    }
}

/// A request in progress (or an open event stream) on a session: while one lives, the
/// idle reaper leaves the session alone.
struct Activity(Arc<Session>);

impl Activity {
    /// Must be called with the sessions map locked, so the reaper cannot end the session
    /// between the lookup and this.
    fn begin(session: &Arc<Session>) -> Activity {
        session.active.fetch_add(1, Ordering::AcqRel);
        session.begun.fetch_add(1, Ordering::AcqRel);
        *session.last_active.lock() = Instant::now();
        Activity(session.clone())
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        *self.0.last_active.lock() = Instant::now();
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Ends the sessions that have been idle for `session_idle_timeout`, as `DELETE` would.
pub(super) fn reap_idle_sessions(state: &State) {
    let timeout = state.options.session_idle_timeout;
    let tick = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        select! {
            recv(state.stopping.closed()) -> _ => return,
            default(tick) => {}
        }
        let now = Instant::now();
        let idle: Vec<Arc<Session>> = {
            let mut sessions = state.sessions.lock();
            let ids: Vec<String> = sessions
                .iter()
                .filter(|(_, session)| session.idle(now, timeout))
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| sessions.remove(id)).collect()
        };
        for session in idle {
            log::info!("HTTP session {} idle: ending it", session.id);
            end_session(state, &session);
        }
    }
}

/// Ends a session already removed from the map: its stream and pending client requests
/// end, and its live tasks are cancelled (nobody can reach them any more, and they would
/// hold tool workers).
pub(super) fn end_session(state: &State, session: &Session) {
    session.ended.close();
    session.connection.close();
    cancel_live_tasks(state.server.store().as_ref(), &session.id);
}

/// Walks the tasks of `session` that have not ended, page by page, until `each` returns
/// false.
fn each_live_task(
    store: &dyn TaskStore,
    session: &SessionId,
    mut each: impl FnMut(TaskId) -> bool,
) -> Result<(), crate::StoreError> {
    let mut cursor: Option<String> = None;
    loop {
        let page = store.list(Some(session), cursor.as_deref())?;
        for task in page.tasks.iter().filter(|task| !task.status.is_terminal()) {
            if !each(task.task_id) {
                return Ok(());
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(()),
        }
    }
}

/// Cancels every task of `session` that has not ended. The ids are gathered first, so
/// cancelling does not disturb the paging.
fn cancel_live_tasks(store: &dyn TaskStore, session: &SessionId) {
    let mut live = Vec::new();
    if let Err(error) = each_live_task(store, session, |id| {
        live.push(id);
        true
    }) {
        log::warn!("session {session}: cannot list its tasks to cancel them: {error}");
    }
    for id in live {
        let message = Some("the session ended".to_string());
        if let Err(error) = store.cancel(id, Some(session), message) {
            log::debug!("session {session}: task {id} not cancelled: {error}");
        }
    }
}

/// A JSON-RPC batch: only a session whose `initialize` settled on a protocol version with
/// batches (2025-03-26, 2024-11-05) takes one (`initialize` itself never comes in one).
/// Its answers come back together as one JSON array; a batch with nothing to answer
/// (notifications and responses only) gets 202, as a lone notification does; `[]` and
/// one longer than [`MAX_BATCH_LEN`](crate::server::MAX_BATCH_LEN) get 400 with -32600.
pub(super) fn post_batch(
    state: &Arc<State>,
    head: &Head,
    identity: &Identity,
    responder: Responder,
    items: Vec<Value>,
) {
    let (session, activity) = match find_session(state, head, identity) {
        Ok(found) => found,
        Err(answer) => return respond(responder, answer),
    };
    if !session.connection.accepts_batches() {
        let error = RpcError::invalid_request(jsonrpc::BATCHES_REFUSED);
        return respond(responder, Answer::error(400, error));
    }
    session.connection.handle_batch(
        items,
        Box::new(move |answers| {
            drop(activity);
            let answer = match answers {
                Value::Null => Answer::empty(202),
                answers @ Value::Array(_) => Answer::json(200, answers),
                // One error for the whole batch (`[]`, too many messages): refused, as a
                // single message that is no request is.
                error => Answer::json(400, error),
            };
            respond(responder, answer)
        }),
    );
}

pub(super) fn post_session(
    state: &Arc<State>,
    head: &Head,
    identity: &Identity,
    responder: Responder,
    message: Message,
) {
    if let Message::Request(r) = &message {
        if r.method == "initialize" {
            return open_session(state, identity, responder, message);
        }
    }
    let (session, activity) = match find_session(state, head, identity) {
        Ok(found) => found,
        Err(answer) => return respond(responder, answer),
    };
    dispatch(&session.connection, responder, message, move |response| {
        drop(activity);
        Answer::json(200, response)
    });
}

fn open_session(state: &Arc<State>, identity: &Identity, responder: Responder, message: Message) {
    let mut sessions = state.sessions.lock();
    // Checked under the lock that dropping the server drains the sessions under, after
    // it raised the flag: no session opens after that drain, never to be ended.
    if state.stopping.is_closed() {
        drop(sessions);
        let answer = Answer::error(503, RpcError::internal("the server is stopping"));
        return respond(responder, answer);
    }
    let mut evictions = 0;
    loop {
        // An identity's own limit first: it may only ever end its own sessions.
        let own_full = identity.is_some()
            && held_by(&sessions, identity) >= state.options.max_sessions_per_identity.max(1);
        if !own_full && sessions.len() < state.options.max_sessions {
            break;
        }
        drop(sessions);
        if evictions == EVICTIONS_PER_INITIALIZE || !evict_quiet_session(state, identity, own_full)
        {
            let why = match own_full {
                true => "too many open sessions for this identity",
                false => "too many open sessions",
            };
            return respond(responder, Answer::error(503, RpcError::internal(why)));
        }
        evictions += 1;
        sessions = state.sessions.lock();
        if state.stopping.is_closed() {
            drop(sessions);
            let answer = Answer::error(503, RpcError::internal("the server is stopping"));
            return respond(responder, answer);
        }
    }
    let id = TaskId::random().to_string();
    let (outgoing_tx, outgoing) = crossbeam_channel::bounded(1024);
    let session_id = SessionId::new(id.as_str());
    let connection = state.server.connect(outgoing_tx, Some(session_id.clone()));
    let session = Arc::new(Session {
        id: session_id,
        identity: identity.clone(),
        connection: connection.clone(),
        outgoing,
        stream: Mutex::new(None),
        streams_asked: AtomicU64::new(0),
        replay: Replay::default(),
        handover: crossbeam_channel::bounded(1),
        ended: Closer::new(),
        active: AtomicUsize::new(0),
        begun: AtomicU64::new(0),
        last_active: Mutex::new(Instant::now()),
    });
    let activity = Activity::begin(&session);
    sessions.insert(id.clone(), session);
    drop(sessions);
    let state = state.clone();
    dispatch(&connection, responder, message, move |response| {
        drop(activity);
        if response.get("error").is_some() {
            // A failed initialize opens nothing.
            let removed = state.sessions.lock().remove(&id);
            if let Some(session) = removed {
                end_session(&state, &session);
            }
            return Answer::json(200, response);
        }
        Answer {
            session: Some(id),
            ..Answer::json(200, response)
        }
    });
}

/// Ends the least recently active session that loses nothing by it, to make room for a
/// new one: no request in progress, no event stream open, and no live task (ending a
/// session cancels those; a finished one's result is all it gives up). Looks at the
/// [`EVICTION_CANDIDATES`] least recently active quiet sessions; false if none can go.
/// With identities, `identity`'s own sessions come first (an identity that opens sessions
/// and never ends them ends its own before anyone else's), then as many of the other
/// identities' (own ones that all hold live tasks must not hide every other session),
/// and with `only_own` its own are the only ones looked at.
///
/// Their tasks are listed with the sessions lock released: every request takes that lock,
/// and would wait behind the store (a journal's fsync, say) otherwise. So a request that
/// begins meanwhile (and might create a task) is seen afterwards, by `begun`, under the
/// lock, and leaves its session alone: tasks are only created by a session's requests.
fn evict_quiet_session(state: &State, identity: &Identity, only_own: bool) -> bool {
    let mut candidates: Vec<(Arc<Session>, u64, Instant)> = state
        .sessions
        .lock()
        .values()
        .filter(|session| session.quiet() && (!only_own || session.identity == *identity))
        .map(|session| {
            let begun = session.begun.load(Ordering::Acquire);
            (session.clone(), begun, *session.last_active.lock())
        })
        .collect();
    candidates.sort_by_key(|&(_, _, last_active)| last_active);
    let (own, others): (Vec<_>, Vec<_>) =
        (candidates.into_iter()).partition(|(session, _, _)| session.identity == *identity);
    let looked_at = (own.into_iter().take(EVICTION_CANDIDATES))
        .chain(others.into_iter().take(EVICTION_CANDIDATES));
    let store = state.server.store();
    for (session, begun, last_active) in looked_at {
        match has_live_tasks(store.as_ref(), &session.id) {
            Ok(false) => {}
            Ok(true) => continue,
            Err(error) => {
                log::warn!(
                    "HTTP session {}: cannot list its tasks: {error}",
                    session.id
                );
                continue;
            }
        }
        let mut sessions = state.sessions.lock();
        let unchanged = sessions
            .get(session.id.as_str())
            .is_some_and(|current| Arc::ptr_eq(current, &session))
            && session.begun.load(Ordering::Acquire) == begun
            && session.quiet();
        if !unchanged {
            continue;
        }
        sessions.remove(session.id.as_str());
        drop(sessions);
        log::info!(
            "HTTP sessions at their limit: ending session {}, quiet for {:?} and with no live \
             task, to open a new one",
            session.id,
            last_active.elapsed(),
        );
        end_session(state, &session);
        return true;
    }
    false
}

/// How many sessions `identity` holds.
fn held_by(sessions: &HashMap<String, Arc<Session>>, identity: &Identity) -> usize {
    sessions
        .values()
        .filter(|s| s.identity == *identity)
        .count()
}

/// Whether `session` has a task that has not ended.
fn has_live_tasks(store: &dyn TaskStore, session: &SessionId) -> Result<bool, crate::StoreError> {
    let mut found = false;
    each_live_task(store, session, |_| {
        found = true;
        false
    })?;
    Ok(found)
}

/// The session named in `head`, if `identity` opened it: another identity's session is
/// answered as an unknown one is, which tells nothing of it.
fn find_session(
    state: &State,
    head: &Head,
    identity: &Identity,
) -> Result<(Arc<Session>, Activity), Answer> {
    let Some(id) = head.field("Mcp-Session-Id") else {
        return Err(Answer::error(
            400,
            RpcError::invalid_request(
                "Mcp-Session-Id header required (send initialize first, or speak 2026-07-28)",
            ),
        ));
    };
    let sessions = state.sessions.lock();
    match sessions.get(id) {
        Some(session) if session.identity == *identity => {
            Ok((session.clone(), Activity::begin(session)))
        }
        _ => Err(unknown_session()),
    }
}

fn unknown_session() -> Answer {
    Answer::error(404, RpcError::invalid_request("unknown or ended session"))
}

pub(super) fn delete(state: &State, head: &Head, identity: &Identity) -> Answer {
    let Some(id) = head.field("Mcp-Session-Id") else {
        return Answer::error(
            400,
            RpcError::invalid_request("Mcp-Session-Id header required"),
        );
    };
    let removed = {
        let mut sessions = state.sessions.lock();
        match sessions.get(id) {
            Some(session) if session.identity == *identity => sessions.remove(id),
            _ => None,
        }
    };
    match removed {
        Some(session) => {
            end_session(state, &session);
            Answer::empty(200)
        }
        None => unknown_session(),
    }
}

/// `GET /mcp`: the session's event stream, as server-sent events in chunked encoding,
/// every event written at once. The stream keeps its connection's thread while it lasts
/// (one per session: a new one replaces the old).
pub(super) fn get(state: &Arc<State>, head: &Head, identity: &Identity, responder: Responder) {
    // The spec has clients name the stream in `Accept`: one without it is refused too.
    if head.accepts("text/event-stream") != Some(true) {
        let error = RpcError::invalid_request("GET /mcp serves text/event-stream only");
        return respond(responder, Answer::error(406, error));
    }
    let (session, activity) = match find_session(state, head, identity) {
        Ok(found) => found,
        Err(answer) => {
            // Stateless (2026-07-28) clients have no stream to open.
            let answer = if head.field("Mcp-Session-Id").is_none() {
                Answer::not_allowed("POST", "no session: nothing to stream")
            } else {
                answer
            };
            return respond(responder, answer);
        }
    };
    // A session's first stream needs a place among the server's streams; one that
    // replaces the session's current stream (which ends) takes that one's place.
    let replacing = session.stream.lock().is_some();
    let slot = match replacing {
        true => Some(state.streams.take()),
        false => state.streams.claim(),
    };
    let Some(_slot) = slot else {
        drop(activity);
        return respond(responder, Answer::error(503, too_many_streams()));
    };
    // Streams rank by when their GET arrived, not by when they started (two can start in
    // either order): a client that opened a new one after the old one's head reached it
    // must never see the new one ended and the old one kept.
    let ticket = session.streams_asked.fetch_add(1, Ordering::Relaxed) + 1;
    let fields = [
        ("Content-Type", "text/event-stream"),
        ("Cache-Control", "no-cache"),
    ];
    let Some(stream) = responder.stream(&fields) else {
        // Refused (it could not wait behind the answers due on its connection) or its
        // client left: the session's current stream, if any, carries on.
        drop(activity);
        return;
    };
    // A new stream replaces the session's current one, which ends. The client opens a new
    // one when it takes the old for dead (a proxy or NAT dropped it without a word); the
    // server would only notice when TCP gives up on its keep-alives, many minutes later.
    // Only once it started: until then the old one may be all the session has.
    let this_stream = Arc::new(Closer::new());
    {
        let mut current = session.stream.lock();
        if current.as_ref().is_some_and(|(newer, _)| *newer > ticket) {
            // A GET that came after this one started first: this one ends, as if replaced.
            drop(current);
            drop(stream);
            drop(activity);
            return;
        }
        if let Some((_, old)) = current.replace((ticket, this_stream.clone())) {
            old.close();
        }
    }
    let last_seen = head.field("Last-Event-ID");
    let _ = stream_events(&stream, &session, state, &this_stream, last_seen);
    drop(stream);
    end_stream(&session, &this_stream);
    drop(activity);
}

/// Forgets `stream` as the session's current one, unless a newer one replaced it.
fn end_stream(session: &Session, stream: &Arc<Closer>) {
    let mut current = session.stream.lock();
    if current
        .as_ref()
        .is_some_and(|(_, c)| Arc::ptr_eq(c, stream))
    {
        *current = None;
    }
}

fn stream_events(
    stream: &EventStream,
    session: &Session,
    state: &State,
    this_stream: &Closer,
    last_seen: Option<&str>,
) -> io::Result<()> {
    let (mut cursor, replayed) = session.replay.start(last_seen);
    for event in replayed {
        stream.send(event.as_bytes())?;
    }
    loop {
        select! {
            recv(session.outgoing) -> message => {
                let Ok(message) = message else { break };
                session.replay.record(&message);
            }
            recv(session.ended.closed()) -> _ => break,
            recv(state.stopping.closed()) -> _ => break,
            recv(this_stream.closed()) -> _ => break,
            recv(session.handover.1) -> _ => {}
            // A client gone is noticed, and a comment keeps proxies from timing the
            // stream out.
            default(CLIENT_CHECK) => stream.idle_tick(KEEP_ALIVE)?,
        }
        // What this stream just recorded, and anything a stream it replaced recorded as
        // it ended. A stream replaced meanwhile leaves it to its successor, and wakes it
        // (through whichever other replaced streams are still ending, each passing the
        // word on) rather than let it wait for its next message or keep-alive.
        if this_stream.is_closed() {
            let _ = session.handover.0.try_send(());
            break;
        }
        for event in session.replay.after(&mut cursor) {
            stream.send(event.as_bytes())?;
        }
    }
    Ok(())
}
