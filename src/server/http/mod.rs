//! Streamable HTTP: `POST /mcp` with JSON responses, for both revisions.
//!
//! - 2026-07-28 (SEP-2663) requests are stateless: every request stands alone and must carry
//!   `Mcp-Method` (and `Mcp-Name` where it names a tool or a task) matching its body, else
//!   -32020 with HTTP 400. Task ids are bearer capabilities; such tasks are sessionless.
//!   Such requests share one connection, so only bodies that speak 2026-07-28 themselves
//!   (`_meta` protocol version, or `server/discover`) reach it: the `MCP-Protocol-Version`
//!   header alone gets -32020 (HTTP 400), and the removed `tasks/list`, `tasks/result` and
//!   `initialize` get -32601 (HTTP 200) whatever the headers say. An unsupported
//!   `MCP-Protocol-Version` gets HTTP 400. `subscriptions/listen` is answered with an
//!   event stream of its own that carries the subscription (task status notifications,
//!   see `listen`) until it ends or its client closes it.
//! - 2025-11-25 uses sessions: `initialize` opens one and answers with `Mcp-Session-Id`;
//!   every later request must carry it, and its tasks live in a store session of the same
//!   id, so one client never sees another's tasks. `GET /mcp` opens the session's event
//!   stream (server-sent events) for status notifications and server-to-client requests
//!   such as elicitation; `DELETE /mcp` ends the session.
//!
//! Each client connection has a reader, which hands every request to its MCP connection
//! and reads the next, and a writer, which writes the answers in the order the requests
//! came, whichever thread produced them (see `conn` and `outbox`). So a long tool call or a
//! blocking `tasks/result` holds no thread of the transport (each session bounds its
//! waiting `tasks/result` calls), and a client that stops reading holds only its own
//! writer. An event stream keeps its connection's reader while it lasts (one per session:
//! a new `GET` replaces the session's stream, which ends).
//! Bodies are limited in size, and a browser `Origin` other than loopback and
//! [`HttpOptions::allowed_origins`] is refused (DNS rebinding).
//!
//! 2025-11-25 sessions end on `DELETE` or after [`HttpOptions::session_idle_timeout`] with
//! no request in progress, no event stream open and no new request; either way the
//! session's live tasks are cancelled. A failed `initialize` opens no session. An
//! `initialize` at [`HttpOptions::max_sessions`] ends the least recently active session
//! with no request in progress, no event stream and no live task (so nothing is
//! cancelled), and gets HTTP 503 only if there is none: clients that open a session per
//! request and never `DELETE` it do not lock others out.
//!
//! # Limits
//!
//! The HTTP/1.1 layer is the crate's own (`wire`, `conn`, `outbox`): plain HTTP only (no
//! TLS, no HTTP/2), bodies framed by `Content-Length` or chunked, every wait bounded
//! ([`HttpOptions::read_timeout`], [`HttpOptions::idle_timeout`],
//! [`HttpOptions::write_timeout`]) and every size capped (heads at 64 KiB and 100 fields,
//! bodies at [`HttpOptions::max_body_bytes`], connections at
//! [`HttpOptions::max_connections`]). Nothing is allocated from what a client declares.
//! Serve on loopback (the default), or behind a reverse proxy for TLS and rate limits.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::Mutex;
use serde_json::Value;

use self::conn::{ConnOptions, Request, Transport};
use self::outbox::{EventStream, Responder};
use self::replay::Replay;
use self::wire::{Head, Limits};
use super::listen::{listen_limit, stream_queue, Ending, Sink, STREAM_QUEUE, STREAM_QUEUE_BYTES};

use super::connection::{supported_version, unsupported_version};
use super::{Connection, Server};
use crate::model::{SessionId, StoreEvent, TaskId};
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::{header_value, sep2663, RequestMeta};
use crate::TaskStore;

mod conn;
mod outbox;
mod replay;
mod wire;

/// Bytes a request head may hold (request line, fields, line ends).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Field lines a request head may hold.
const MAX_HEADER_FIELDS: usize = 100;
/// How many of the least recently active quiet sessions an `initialize` at
/// [`HttpOptions::max_sessions`] looks at (a store listing each) for one to end.
const EVICTION_CANDIDATES: usize = 32;
/// How many sessions one `initialize` may end to make room, should other ones take the
/// room first.
const EVICTIONS_PER_INITIALIZE: usize = 4;

/// Settings of the HTTP transport.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Largest request body accepted, in bytes (default 4 MiB); larger ones get HTTP 413.
    pub max_body_bytes: usize,
    /// Client connections open at once (default 1024), each with a reader and a writer
    /// thread, counted until its socket closes; one more gets HTTP 503 and is closed. Task
    /// subscriptions (`subscriptions/listen`), each of which holds a connection while it
    /// runs, may take at most half of them (and [`MAX_LISTENS`](super::MAX_LISTENS)); one
    /// more is refused (-32603), so other requests always find a connection.
    pub max_connections: usize,
    /// A request must arrive whole (head and body) within this of its first byte, else it
    /// gets HTTP 408 and the connection closes (default 30 s). A body behind `Expect:
    /// 100-continue` has this from when the interim answer goes out, which waits for the
    /// answers before it on the connection.
    pub read_timeout: Duration,
    /// A connection with no request coming and no answer due closes after this (default
    /// 2 minutes).
    pub idle_timeout: Duration,
    /// An answer (or an event) not written within this, plus a second per 64 KiB of it,
    /// ends its connection (default 30 s): a client that reads steadily gets a large answer
    /// whole, and one that stopped reading holds its connection's writer no longer.
    pub write_timeout: Duration,
    /// Most 2025-11-25 sessions open at once (default 1024). An `initialize` beyond it
    /// ends the least recently active session that loses nothing by it (no request in
    /// progress, no event stream open, no live task), and gets HTTP 503 if none does.
    pub max_sessions: usize,
    /// A 2025-11-25 session with no request in progress, no open event stream and no
    /// request for this long is ended as if the client had sent `DELETE` (its live tasks
    /// are cancelled). Default 30 minutes.
    pub session_idle_timeout: Duration,
    /// Browser origins whose pages may use the server, exactly as a browser sends them in
    /// `Origin` (`https://app.example`, `http://localhost:6274`): they get CORS (a
    /// preflight `OPTIONS` is answered, allowing MCP's header fields and any other field
    /// names the page asks to send, and the page may read the answers, `Mcp-Session-Id`
    /// and `MCP-Protocol-Version`). Loopback origins not named here are served but get no
    /// CORS field, so a browser lets their pages do nothing that needs it (a JSON `POST`
    /// does). Any other `Origin` gets 403 (DNS rebinding).
    pub allowed_origins: Vec<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body_bytes: 4 * 1024 * 1024,
            max_connections: 1024,
            read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(30),
            max_sessions: 1024,
            session_idle_timeout: Duration::from_secs(30 * 60),
            allowed_origins: Vec::new(),
        }
    }
}

/// A running HTTP transport. Dropping it stops it and joins its threads, and ends every
/// session as `DELETE` would: their live tasks are cancelled, since no client could reach
/// them again.
pub struct HttpServer {
    addr: SocketAddr,
    transport: Transport,
    state: Arc<State>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Something that can be closed once, waking everyone who listens: closing drops the only
/// sender, so every `closed()` receiver disconnects at once.
struct Closer {
    sender: Mutex<Option<Sender<()>>>,
    receiver: Receiver<()>,
}

impl Closer {
    fn new() -> Closer {
        let (sender, receiver) = crossbeam_channel::bounded(0);
        Closer {
            sender: Mutex::new(Some(sender)),
            receiver,
        }
    }

    fn close(&self) {
        self.sender.lock().take();
    }

    fn is_closed(&self) -> bool {
        self.sender.lock().is_none()
    }

    fn closed(&self) -> &Receiver<()> {
        &self.receiver
    }
}

struct Session {
    id: SessionId,
    connection: Arc<Connection>,
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

struct State {
    server: Server,
    stateless: Arc<Connection>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    options: HttpOptions,
    stopping: Closer,
}

/// An HTTP answer before it is written.
struct Answer {
    status: u16,
    body: Option<Value>,
    session: Option<String>,
    /// The methods a 405 allows (RFC 9110 §15.5.6).
    allow: Option<&'static str>,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer {
            status,
            body: Some(body),
            session: None,
            allow: None,
        }
    }

    fn empty(status: u16) -> Answer {
        Answer {
            status,
            body: None,
            session: None,
            allow: None,
        }
    }

    /// 405: the method is not one of `allow`.
    fn not_allowed(allow: &'static str, why: &str) -> Answer {
        Answer {
            allow: Some(allow),
            ..Answer::error(405, RpcError::invalid_request(why))
        }
    }

    fn error(status: u16, error: RpcError) -> Answer {
        Answer::json(status, jsonrpc::error_response(None, &error))
    }
}

impl HttpServer {
    /// Binds `addr` and starts serving `server` at `http://addr/mcp`.
    pub fn bind(
        server: Server,
        addr: impl ToSocketAddrs,
        options: HttpOptions,
    ) -> io::Result<HttpServer> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
        let listener = TcpListener::bind(addr)?;
        // Stateless requests need no outgoing messages: drop the receiver so nothing queues.
        let (unread, _) = crossbeam_channel::bounded(1);
        let state = Arc::new(State {
            stateless: server.connect_shared(unread, listen_limit(options.max_connections)),
            server,
            sessions: Mutex::new(HashMap::new()),
            options,
            stopping: Closer::new(),
        });
        let options = &state.options;
        let conn_options = ConnOptions {
            limits: Limits {
                head_bytes: MAX_HEAD_BYTES,
                headers: MAX_HEADER_FIELDS,
                body_bytes: options.max_body_bytes,
            },
            max_connections: options.max_connections.max(1),
            read_timeout: options.read_timeout.max(Duration::from_millis(1)),
            idle_timeout: options.idle_timeout.max(Duration::from_millis(1)),
            write_timeout: options.write_timeout.max(Duration::from_millis(1)),
        };
        // Nothing that can fail comes after a thread starts, but through `http`, whose drop
        // stops them: a thread left running holds the state, and with it the server.
        let events = state
            .server
            .store()
            .subscribe()
            .map_err(|e| io::Error::other(e.to_string()))?;
        let handler_state = state.clone();
        let allowed_origins = state.options.allowed_origins.clone();
        let transport = Transport::start(
            listener,
            conn_options,
            Arc::new(move |request| handle(&handler_state, request)),
            Arc::new(move |head| always_fields(head, &allowed_origins)),
        )?;
        let mut http = HttpServer {
            addr: transport.local_addr(),
            transport,
            state,
            threads: Vec::new(),
        };
        let reaper_state = http.state.clone();
        http.threads.push(
            std::thread::Builder::new()
                .name("mcp-http-reaper".into())
                .spawn(move || reap_idle_sessions(&reaper_state))?,
        );
        let events_state = http.state.clone();
        http.threads.push(
            std::thread::Builder::new()
                .name("mcp-http-events".into())
                .spawn(move || route_events(&events_state, events))?,
        );
        Ok(http)
    }

    /// The address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until the transport stops (it runs until the process ends or it is dropped).
    pub fn join(mut self) {
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.state.stopping.close();
        // Every session ends as on `DELETE`: nobody can reach its tasks once this transport
        // is gone (a new one hands out new session ids), so they are cancelled and their
        // workers told to stop. Stateless 2026-07-28 tasks are reachable by id alone and
        // stay as they are.
        let sessions: Vec<_> = self.state.sessions.lock().drain().collect();
        for (_, session) in sessions {
            end_session(&self.state, &session);
        }
        // Every thread ends now: the connections' (closed), the reaper and the event router
        // (both watch `stopping`). The router holds the state, and with it the server and
        // an embedded store: left running, it would keep them for good.
        self.transport.stop();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// How often an idle event stream sends a comment: it keeps proxies from timing the stream
/// out, and finds clients that left.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

fn route_events(state: &State, events: Receiver<StoreEvent>) {
    loop {
        // The store's events end only when the store closes, which an embedded store does
        // only once the state it belongs to is gone, and this thread holds that state: the
        // router stops when the transport does.
        let event = select! {
            recv(events) -> event => match event {
                Ok(event) => event,
                Err(_) => return,
            },
            recv(state.stopping.closed()) -> _ => return,
        };
        let session = match &event {
            StoreEvent::Status { session, .. } | StoreEvent::Expired { session, .. } => session,
            StoreEvent::Lagged { .. } => {
                // Nobody knows whose events were lost: every session looks at its tasks.
                let sessions: Vec<_> = state.sessions.lock().values().cloned().collect();
                for target in sessions {
                    target.connection.handle_store_event(&event);
                }
                state.stateless.handle_store_event(&event);
                continue;
            }
            _ => continue,
        };
        let Some(session) = session else {
            // A sessionless (2026-07-28) task: its subscriptions are the stateless
            // connection's.
            state.stateless.handle_store_event(&event);
            continue;
        };
        let target = state.sessions.lock().get(session.as_str()).cloned();
        if let Some(target) = target {
            target.connection.handle_store_event(&event);
        }
    }
}

/// Ends the sessions that have been idle for `session_idle_timeout`, as `DELETE` would.
fn reap_idle_sessions(state: &State) {
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
fn end_session(state: &State, session: &Session) {
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

/// The methods `/mcp` serves.
const METHODS: &str = "POST, GET, DELETE, OPTIONS";
/// The request header fields a page of an allowed origin may send (CORS).
const CORS_ALLOWED_HEADERS: &str = "Content-Type, Accept, Authorization, Mcp-Session-Id, \
     MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name";
/// The answer header fields such a page may read.
const CORS_EXPOSED_HEADERS: &str = "Mcp-Session-Id, MCP-Protocol-Version";

/// The header fields every answer to a request with `head` carries, whatever it is (an
/// answer, an error, a stream, or the refusal of a body `conn` would not read): for
/// `/mcp`, `Vary: Origin`, and CORS for a page of a configured origin
/// ([`HttpOptions::allowed_origins`]), which may then read what it gets, the session id
/// included. Loopback pages are served but get no CORS field: a browser then keeps them
/// from reading answers and from sending what needs a preflight (any JSON POST), as before
/// CORS existed here, so that no page some other local program serves can drive the
/// server's tools unless it was named. Other origins get 403.
fn always_fields(head: &Head, allowed: &[String]) -> Vec<(&'static str, String)> {
    if path_of(&head.target) != "/mcp" {
        return Vec::new();
    }
    // Whatever `/mcp` answers depends on `Origin` (the CORS fields, or 403): a cache must
    // not hand an answer given without one (or to another origin) to a page (Fetch, "CORS
    // protocol and HTTP caches").
    let mut fields = vec![("Vary", "Origin".to_owned())];
    if let Some(origin) = cors_origin(head, allowed) {
        fields.push(("Access-Control-Allow-Origin", origin.to_owned()));
        fields.push(("Access-Control-Expose-Headers", CORS_EXPOSED_HEADERS.into()));
    }
    fields
}

fn handle(state: &Arc<State>, request: Request) {
    let Request {
        head,
        body,
        mut responder,
    } = request;
    let path = path_of(&head.target);
    let origin = head.field("Origin");
    for (name, value) in always_fields(&head, &state.options.allowed_origins) {
        responder.always_send(name, value);
    }
    // A declared body past the limit was refused with 413 before it was read (`conn`).
    let answer = if path != "/mcp" {
        Answer::error(404, RpcError::invalid_request("the MCP endpoint is /mcp"))
    } else if !origin_allowed(origin, &state.options.allowed_origins) {
        Answer::error(403, RpcError::invalid_request("origin not allowed"))
    } else if let Some(version) = head
        .field("MCP-Protocol-Version")
        .filter(|v| !supported_version(v))
    {
        Answer::error(400, unsupported_version(version))
    } else {
        match head.method.as_str() {
            "POST" => return post(state, &head, body, responder),
            "GET" => return get(state, &head, responder),
            "DELETE" => delete(state, &head),
            "OPTIONS" => preflight(
                &head,
                cors_origin(&head, &state.options.allowed_origins).is_some(),
                &mut responder,
            ),
            _ => Answer::not_allowed(METHODS, "use POST, GET or DELETE"),
        }
    };
    respond(responder, answer);
}

/// The `Origin` of a request that gets CORS: one named in `allowed` (exactly as browsers
/// send it).
fn cors_origin<'h>(head: &'h Head, allowed: &[String]) -> Option<&'h str> {
    head.field("Origin")
        .filter(|origin| allowed.iter().any(|a| a == origin))
}

/// `OPTIONS /mcp`: the methods served, and for a browser's CORS preflight (it names a
/// configured `Origin`) the methods and header fields its page may use, for ten minutes:
/// MCP's own, and whatever else the page asks to send (an API key of its own, say), since
/// its origin is trusted anyway.
fn preflight(head: &Head, cors: bool, responder: &mut Responder) -> Answer {
    if cors {
        let mut headers = CORS_ALLOWED_HEADERS.to_owned();
        let asked = head.field("Access-Control-Request-Headers").unwrap_or("");
        for name in asked.split(',').map(str::trim) {
            // Field names only (RFC 9110 tokens): nothing else is echoed.
            if wire::is_token(name) {
                headers.push_str(", ");
                headers.push_str(name);
            }
        }
        responder.always_send("Access-Control-Allow-Methods", "POST, GET, DELETE".into());
        responder.always_send("Access-Control-Allow-Headers", headers);
        responder.always_send("Access-Control-Max-Age", "600".into());
    }
    Answer {
        allow: Some(METHODS),
        ..Answer::empty(204)
    }
}

fn respond(responder: Responder, answer: Answer) {
    let body = answer
        .body
        .map(|b| serde_json::to_vec(&b).unwrap_or_default());
    let mut fields = Vec::with_capacity(2);
    if body.is_some() {
        fields.push(outbox::JSON);
    }
    if let Some(session) = &answer.session {
        fields.push(("Mcp-Session-Id", session.as_str()));
    }
    if let Some(allow) = answer.allow {
        fields.push(("Allow", allow));
    }
    responder.send(answer.status, &fields, body.as_deref().unwrap_or_default());
}

/// The path of a request target, query aside. The absolute form, which a server must
/// accept too (RFC 9112 §3.2.2), names its scheme and host before the path.
fn path_of(target: &str) -> &str {
    let scheme = ["http://", "https://"].into_iter().find(|s| {
        target
            .get(..s.len())
            .is_some_and(|t| t.eq_ignore_ascii_case(s))
    });
    let path = match scheme {
        Some(scheme) => {
            let rest = &target[scheme.len()..];
            rest.find(['/', '?']).map_or("/", |at| &rest[at..])
        }
        None => target,
    };
    path.split('?').next().unwrap_or("")
}

/// Browsers send `Origin`; only loopback pages (and configured ones) may talk to us.
fn origin_allowed(origin: Option<&str>, allowed: &[String]) -> bool {
    let Some(origin) = origin else { return true };
    if allowed.iter().any(|a| a == origin) {
        return true;
    }
    let host = origin
        .split("://")
        .nth(1)
        .unwrap_or("")
        .trim_end_matches('/');
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// Whether a `Content-Type` names `application/json`, parameters (`; charset=utf-8`) aside;
/// `application/jsonx` does not.
fn is_json_media_type(content_type: &str) -> bool {
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    media_type.eq_ignore_ascii_case("application/json")
}

fn body_text(head: &Head, body: Vec<u8>) -> Result<String, Answer> {
    if !is_json_media_type(head.field("Content-Type").unwrap_or("")) {
        return Err(Answer::error(
            415,
            RpcError::invalid_request("Content-Type must be application/json"),
        ));
    }
    String::from_utf8(body).map_err(|e| {
        Answer::json(
            400,
            jsonrpc::error_response(None, &RpcError::parse_error(e)),
        )
    })
}

fn post(state: &Arc<State>, head: &Head, body: Vec<u8>, responder: Responder) {
    let body = match body_text(head, body) {
        Ok(body) => body,
        Err(answer) => return respond(responder, answer),
    };
    let message = match jsonrpc::parse_value(&body) {
        Ok(Value::Array(items)) => return post_batch(state, head, responder, items),
        Ok(value) => jsonrpc::classify(value),
        Err(rejected) => Err(rejected),
    };
    let message = match message {
        Ok(message) => message,
        Err(rejected) => {
            let Some(error) = rejected.answer() else {
                // A response that answers no request (like one to an unknown id): taken and
                // dropped, never answered with an error a peer might answer in turn.
                log::debug!("dropped a response: {}", rejected.error);
                return respond(responder, Answer::empty(202));
            };
            return respond(responder, Answer::json(400, error));
        }
    };
    let (method, params) = match &message {
        Message::Request(r) => (Some(r.method.as_str()), r.params.as_ref()),
        Message::Notification(n) => (Some(n.method.as_str()), n.params.as_ref()),
        Message::Response(_) => (None, None),
    };
    if let Some(version) = RequestMeta::of(params).protocol_version {
        if !supported_version(&version) {
            let id = match &message {
                Message::Request(r) => Some(&r.id),
                _ => None,
            };
            let error = jsonrpc::error_response(id, &unsupported_version(&version));
            return respond(responder, Answer::json(400, error));
        }
    }
    let header_version = head.field("MCP-Protocol-Version");
    let by_header = header_version == Some(sep2663::PROTOCOL_VERSION);
    // The connection's own rule, so no 2025-11-25 handler ever runs on the shared
    // stateless connection.
    let by_body = method.is_some_and(|m| RequestMeta::of(params).speaks_sep2663(m));
    if by_header || by_body {
        // A body that names its version in `_meta` while the header names another one is
        // a header mismatch; `server/discover` is how versions are found, so it fits any.
        let mismatch =
            header_version.is_some() && by_header != by_body && method != Some("server/discover");
        post_stateless(state, head, responder, message, by_body, mismatch)
    } else {
        post_session(state, head, responder, message)
    }
}

/// Hands a message to its connection. A request's answer is written by whichever thread
/// produces it (the reply moves the responder along), so the connection's thread reads
/// the next request as soon as the connection has taken the message, however long the
/// answer takes. Other messages are acknowledged with 202 at once.
fn dispatch(
    connection: &Arc<Connection>,
    responder: Responder,
    message: Message,
    answer: impl FnOnce(Value) -> Answer + Send + 'static,
) {
    if matches!(message, Message::Request(_)) {
        connection.handle_message(
            message,
            Box::new(move |value| {
                // Null: a request its client cancelled, which gets no response.
                let answer = if value.is_null() {
                    Answer::empty(202)
                } else {
                    answer(value)
                };
                respond(responder, answer)
            }),
        );
    } else {
        connection.handle_message(message, Box::new(|_| {}));
        respond(responder, Answer::empty(202));
    }
}

fn status_of(response: &Value) -> u16 {
    match response.pointer("/error/code").and_then(Value::as_i64) {
        Some(sep2663::HEADER_MISMATCH | sep2663::MISSING_CAPABILITY) => 400,
        _ => 200,
    }
}

/// A message for the shared stateless connection, which must only ever see 2026-07-28
/// requests: every SEP-2663 task is sessionless and lives there, so a 2025-11-25 handler
/// (`tasks/list`, `tasks/result`, `initialize`) run there would hand them to anyone.
fn post_stateless(
    state: &Arc<State>,
    head: &Head,
    responder: Responder,
    message: Message,
    speaks_sep2663: bool,
    version_mismatch: bool,
) {
    if let Message::Request(r) = &message {
        // Removed methods are refused before any header or parameter is looked at.
        if matches!(
            r.method.as_str(),
            "tasks/result" | "tasks/list" | "initialize"
        ) {
            let error = RpcError::method_not_found(&r.method);
            let response = jsonrpc::error_response(Some(&r.id), &error);
            return respond(responder, Answer::json(200, response));
        }
        let checked = if version_mismatch || !speaks_sep2663 {
            Err(RpcError::new(
                sep2663::HEADER_MISMATCH,
                format!(
                    "the MCP-Protocol-Version header does not match the body: a {} request \
                     names its protocol version in params._meta[\"{}\"]",
                    sep2663::PROTOCOL_VERSION,
                    crate::protocol::meta::PROTOCOL_VERSION_KEY,
                ),
            ))
        } else {
            check_routing_headers(head, &r.method, r.params.as_ref())
        };
        if let Err(error) = checked {
            let response = jsonrpc::error_response(Some(&r.id), &error);
            return respond(responder, Answer::json(400, response));
        }
    } else if !speaks_sep2663 {
        // Nothing to answer, and nothing a 2025-11-25 notification or response could mean
        // to the stateless connection.
        return respond(responder, Answer::empty(202));
    }
    let message = match message {
        Message::Request(request) if request.method == "subscriptions/listen" => {
            return listen(state, head, responder, request)
        }
        other => other,
    };
    dispatch(&state.stateless, responder, message, |response| {
        Answer::json(status_of(&response), response)
    });
}

/// `subscriptions/listen`: an event stream of its own carries the subscription's messages
/// (the acknowledgement, task states, and the result when the server ends it) until it
/// ends, or its client closes the stream, which ends the subscription. A refusal is a JSON
/// answer, as for any request.
fn listen(state: &Arc<State>, head: &Head, responder: Responder, request: jsonrpc::Request) {
    let jsonrpc::Request { id, params, .. } = request;
    let (queue, messages) = stream_queue(STREAM_QUEUE, STREAM_QUEUE_BYTES);
    let key = match state
        .stateless
        .open_listen(&id, params.as_ref(), Sink::Own(queue))
    {
        Ok(key) => key,
        Err(error) => {
            let response = jsonrpc::error_response(Some(&id), &error);
            return respond(responder, Answer::json(status_of(&response), response));
        }
    };
    // Looked at once the request is found sound: a refusal is JSON, which such a client
    // takes.
    if head.accepts("text/event-stream") == Some(false) {
        state.stateless.close_listen(key, Ending::Silent);
        let error =
            RpcError::invalid_request("subscriptions/listen answers with text/event-stream");
        return respond(responder, Answer::error(406, error));
    }
    let fields = [
        ("Content-Type", "text/event-stream"),
        ("Cache-Control", "no-cache"),
    ];
    let Some(stream) = responder.stream(&fields) else {
        return state.stateless.close_listen(key, Ending::Silent);
    };
    let send = |message: String| {
        messages.taken(&message);
        stream.send(format!("event: message\ndata: {message}\n\n").as_bytes())
    };
    let ending = loop {
        select! {
            recv(messages.receiver()) -> message => match message {
                Ok(message) => if send(message).is_err() {
                    break Ending::Silent;
                },
                // Ended, and everything it queued is written.
                Err(_) => return,
            },
            recv(state.stopping.closed()) -> _ => break Ending::Graceful,
            default(KEEP_ALIVE) => if stream.send(b": keep-alive\n\n").is_err() {
                break Ending::Silent;
            },
        }
    };
    state.stateless.close_listen(key, ending);
    if ending == Ending::Graceful {
        for message in messages.receiver().try_iter() {
            if send(message).is_err() {
                break;
            }
        }
    }
}

/// SEP-2243 routing headers: `Mcp-Method` must name the body's method, and `Mcp-Name` the
/// tool (for `tools/call`) or the task (for `tasks/get|update|cancel`).
fn check_routing_headers(
    head: &Head,
    method: &str,
    params: Option<&Value>,
) -> Result<(), RpcError> {
    let mismatch = |what: String| RpcError::new(sep2663::HEADER_MISMATCH, what);
    match head.field("Mcp-Method") {
        Some(value) if value == method => {}
        Some(value) => {
            return Err(mismatch(format!(
                "Mcp-Method header '{value}' does not match the method '{method}'"
            )))
        }
        None => return Err(mismatch("the Mcp-Method header is missing".into())),
    }
    let named = match method {
        "tools/call" => params.and_then(|p| p.get("name")),
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.and_then(|p| p.get("taskId")),
        _ => return Ok(()),
    };
    let named = named.and_then(Value::as_str).unwrap_or("");
    // A name that cannot ride in a header as it is arrives encoded (SEP-2243).
    match head.field("Mcp-Name") {
        Some(value) if header_value::decode(value).as_deref() == Some(named) => Ok(()),
        Some(value) => Err(mismatch(format!(
            "Mcp-Name header '{value}' does not match '{named}'"
        ))),
        None => Err(mismatch("the Mcp-Name header is missing".into())),
    }
}

/// A JSON-RPC batch: only a session whose `initialize` settled on a protocol version with
/// batches (2025-03-26, 2024-11-05) takes one (`initialize` itself never comes in one).
/// Its answers come back together as one JSON array; a batch with nothing to answer
/// (notifications and responses only) gets 202, as a lone notification does; `[]` and
/// one longer than [`MAX_BATCH_LEN`](crate::server::MAX_BATCH_LEN) get 400 with -32600.
fn post_batch(state: &Arc<State>, head: &Head, responder: Responder, items: Vec<Value>) {
    let (session, activity) = match find_session(state, head) {
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

fn post_session(state: &Arc<State>, head: &Head, responder: Responder, message: Message) {
    if let Message::Request(r) = &message {
        if r.method == "initialize" {
            return open_session(state, responder, message);
        }
    }
    let (session, activity) = match find_session(state, head) {
        Ok(found) => found,
        Err(answer) => return respond(responder, answer),
    };
    dispatch(&session.connection, responder, message, move |response| {
        drop(activity);
        Answer::json(200, response)
    });
}

fn open_session(state: &Arc<State>, responder: Responder, message: Message) {
    let mut sessions = state.sessions.lock();
    // Checked under the lock that dropping the server drains the sessions under, after
    // it raised the flag: no session opens after that drain, never to be ended.
    if state.stopping.is_closed() {
        drop(sessions);
        let answer = Answer::error(503, RpcError::internal("the server is stopping"));
        return respond(responder, answer);
    }
    let mut evictions = 0;
    while sessions.len() >= state.options.max_sessions {
        drop(sessions);
        if evictions == EVICTIONS_PER_INITIALIZE || !evict_quiet_session(state) {
            let answer = Answer::error(503, RpcError::internal("too many open sessions"));
            return respond(responder, answer);
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
///
/// Their tasks are listed with the sessions lock released: every request takes that lock,
/// and would wait behind the store (a journal's fsync, say) otherwise. So a request that
/// begins meanwhile (and might create a task) is seen afterwards, by `begun`, under the
/// lock, and leaves its session alone: tasks are only created by a session's requests.
fn evict_quiet_session(state: &State) -> bool {
    let mut candidates: Vec<(Arc<Session>, u64, Instant)> = state
        .sessions
        .lock()
        .values()
        .filter(|session| session.quiet())
        .map(|session| {
            let begun = session.begun.load(Ordering::Acquire);
            (session.clone(), begun, *session.last_active.lock())
        })
        .collect();
    candidates.sort_by_key(|&(_, _, last_active)| last_active);
    let store = state.server.store();
    for (session, begun, last_active) in candidates.into_iter().take(EVICTION_CANDIDATES) {
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
            "HTTP sessions at their limit ({}): ending session {}, quiet for {:?} and with no \
             live task, to open a new one",
            state.options.max_sessions,
            session.id,
            last_active.elapsed(),
        );
        end_session(state, &session);
        return true;
    }
    false
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

fn find_session(state: &State, head: &Head) -> Result<(Arc<Session>, Activity), Answer> {
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
        Some(session) => Ok((session.clone(), Activity::begin(session))),
        None => Err(Answer::error(
            404,
            RpcError::invalid_request("unknown or ended session"),
        )),
    }
}

fn delete(state: &State, head: &Head) -> Answer {
    let Some(id) = head.field("Mcp-Session-Id") else {
        return Answer::error(
            400,
            RpcError::invalid_request("Mcp-Session-Id header required"),
        );
    };
    let removed = state.sessions.lock().remove(id);
    match removed {
        Some(session) => {
            end_session(state, &session);
            Answer::empty(200)
        }
        None => Answer::error(404, RpcError::invalid_request("unknown or ended session")),
    }
}

/// `GET /mcp`: the session's event stream, as server-sent events in chunked encoding,
/// every event written at once. The stream keeps its connection's thread while it lasts
/// (one per session: a new one replaces the old).
fn get(state: &Arc<State>, head: &Head, responder: Responder) {
    // The spec has clients name the stream in `Accept`: one without it is refused too.
    if head.accepts("text/event-stream") != Some(true) {
        let error = RpcError::invalid_request("GET /mcp serves text/event-stream only");
        return respond(responder, Answer::error(406, error));
    }
    let (session, activity) = match find_session(state, head) {
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
                session.replay.record(&message.to_string());
            }
            recv(session.ended.closed()) -> _ => break,
            recv(state.stopping.closed()) -> _ => break,
            recv(this_stream.closed()) -> _ => break,
            recv(session.handover.1) -> _ => {}
            // A comment keeps proxies from timing the stream out and finds dead clients.
            default(KEEP_ALIVE) => stream.send(b": keep-alive\n\n")?,
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

/// A fuzzing hook, not API: reads requests off `bytes` as a connection's reader does (head,
/// expectation, framing, body, until a refusal, the end of the input or a request that
/// closes the connection), and for each runs the checks the handler makes of a head and a
/// body before any session or store is involved. `small` swaps the limits for tiny ones so
/// that every bound is within reach; `chunk` bounds how many bytes each read of the
/// underlying stream returns (0: no bound), so requests split across reads are read too.
/// Returns how many requests were read whole.
#[doc(hidden)]
pub fn fuzz_requests(bytes: &[u8], small: bool, chunk: usize) -> usize {
    /// A stream that hands out at most `chunk` bytes per read.
    struct Trickle<'a>(&'a [u8], usize);
    impl io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = match self.1 {
                0 => buf.len(),
                chunk => buf.len().min(chunk),
            };
            io::Read::read(&mut self.0, &mut buf[..n])
        }
    }
    let limits = if small {
        Limits {
            head_bytes: 256,
            headers: 4,
            body_bytes: 64,
        }
    } else {
        Limits {
            head_bytes: MAX_HEAD_BYTES,
            headers: MAX_HEADER_FIELDS,
            body_bytes: HttpOptions::default().max_body_bytes,
        }
    };
    let mut reader = io::BufReader::with_capacity(16 * 1024, Trickle(bytes, chunk));
    let mut read = 0;
    loop {
        let Ok(head) = wire::read_head(&mut reader, &limits) else {
            return read;
        };
        let body = head
            .check_host()
            .and_then(|_| head.expects_continue())
            .and_then(|_| head.framing(limits.body_bytes))
            .and_then(|framing| wire::read_body(&mut reader, framing, &limits));
        let Ok(body) = body else {
            return read;
        };
        assert!(
            body.len() <= limits.body_bytes,
            "a body past the limit was read"
        );
        read += 1;
        let _ = path_of(&head.target);
        let _ = origin_allowed(head.field("Origin"), &[]);
        if let Some(name) = head.field("Mcp-Name") {
            if let Some(decoded) = header_value::decode(name) {
                let again = header_value::encode(&decoded);
                assert_eq!(
                    header_value::decode(&again).as_deref(),
                    Some(decoded.as_str())
                );
            }
        }
        if let Ok(text) = body_text(&head, body) {
            if let Ok(Message::Request(r)) = jsonrpc::parse_message(&text) {
                let _ = check_routing_headers(&head, &r.method, r.params.as_ref());
                let name = r.params.as_ref().and_then(|p| p.get("name"));
                if let Some(name) = name.and_then(Value::as_str) {
                    let header = header_value::encode(name);
                    assert_eq!(header_value::decode(&header).as_deref(), Some(name));
                }
            }
        }
        if !head.keeps_alive() {
            return read;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{origin_allowed, path_of};

    #[test]
    fn paths_come_from_origin_and_absolute_form_targets() {
        for (target, path) in [
            ("/mcp", "/mcp"),
            ("/mcp?x=1", "/mcp"),
            ("http://127.0.0.1:3000/mcp", "/mcp"),
            ("HTTP://localhost/mcp?x", "/mcp"),
            ("https://h/mcp/", "/mcp/"),
            ("http://h", "/"),
            ("*", "*"),
            ("http:/mcp", "http:/mcp"),
        ] {
            assert_eq!(path_of(target), path, "{target}");
        }
    }

    #[test]
    fn only_loopback_and_listed_origins_are_allowed() {
        let listed = vec!["https://app.example".to_string()];
        for ok in [
            None,
            Some("http://localhost:3000"),
            Some("http://127.0.0.1"),
            Some("http://[::1]:8080"),
            Some("https://app.example"),
        ] {
            assert!(origin_allowed(ok, &listed), "{ok:?}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "null",
            "http://127.0.0.2",
        ] {
            assert!(!origin_allowed(Some(bad), &listed), "{bad}");
        }
    }
}
