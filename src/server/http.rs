//! Streamable HTTP: `POST /mcp` with JSON responses, for both revisions.
//!
//! - 2026-07-28 (SEP-2663) requests are stateless: every request stands alone and must carry
//!   `Mcp-Method` (and `Mcp-Name` where it names a tool or a task) matching its body, else
//!   -32020 with HTTP 400. Task ids are bearer capabilities; such tasks are sessionless.
//!   Such requests share one connection, so only bodies that speak 2026-07-28 themselves
//!   (`_meta` protocol version, or `server/discover`) reach it: the `MCP-Protocol-Version`
//!   header alone gets -32020 (HTTP 400), and the removed `tasks/list`, `tasks/result` and
//!   `initialize` get -32601 (HTTP 200) whatever the headers say. An unsupported
//!   `MCP-Protocol-Version` gets HTTP 400.
//! - 2025-11-25 uses sessions: `initialize` opens one and answers with `Mcp-Session-Id`;
//!   every later request must carry it, and its tasks live in a store session of the same
//!   id, so one client never sees another's tasks. `GET /mcp` opens the session's event
//!   stream (server-sent events) for status notifications and server-to-client requests
//!   such as elicitation; `DELETE /mcp` ends the session.
//!
//! A fixed number of workers read requests and hand them to their connection. An answer
//! is written by whichever thread produces it, so a long tool call or a blocking
//! `tasks/result` holds no worker (the connection bounds its waiting `tasks/result`
//! calls), and each event stream runs on a thread of its own (one per session: a new `GET`
//! replaces the session's stream, which ends). Requests pipelined on one connection are
//! handed over in the order they came.
//! Bodies are limited in size, and a browser `Origin` other than loopback is refused (DNS
//! rebinding).
//!
//! 2025-11-25 sessions end on `DELETE` or after [`HttpOptions::session_idle_timeout`] with
//! no request in progress, no event stream open and no new request; either way the
//! session's live tasks are cancelled. A failed `initialize` opens no session.
//!
//! # Limits
//!
//! `tiny_http` 0.12 accepts connections itself and reads each on a thread of its own, with
//! no read or write timeout and no cap on the size of a header line; it offers no way to
//! set either (`Server::from_listener` takes a listener, not vetted streams, and a
//! `SO_RCVTIMEO` on the listener, which accepted sockets would inherit, also makes
//! `accept` time out, which ends tiny_http's accept loop for good). So many idle
//! connections cost a thread each, an endless header line grows without bound, and a body
//! that stalls holds a request worker until the client hangs up: `workers` stalled bodies
//! stall the transport. An answer is written by the thread that produced it, so a client
//! that stops reading a large answer holds that thread. Serve on loopback (the default),
//! or put a reverse proxy that enforces header/body timeouts and size limits in front of it
//! on an untrusted network.
//!
//! Two flaws of tiny_http 0.12 reach the process. A body that nobody read is drained, once
//! its request is dropped, through a buffer of the size its `Content-Length` still
//! promises. From 2^63 up that allocation panics (the client has its 413 by then, and the
//! worker survives unless panics abort; the bytes after the head are then read as the next
//! request), but a smaller size the machine cannot allocate (with Linux's default
//! overcommit, more than about its memory and swap) aborts the whole process: tiny_http's
//! `Request` offers no way to answer without that drain. And a request line naming
//! `HTTP/2.0` or `HTTP/3.0` is never answered: tiny_http's 505 waits for the request it
//! refuses to be answered first, so that connection, and the thread tiny_http reads it on,
//! hang until the process ends. Both need a fixed tiny_http, or the proxy in front.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use serde_json::Value;
use tiny_http::{Header, Method, Request, Response, StatusCode};

use super::connection::{supported_version, unsupported_version};
use super::{Connection, Server};
use crate::model::{SessionId, StoreEvent, TaskId};
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::{header_value, sep2663, RequestMeta};
use crate::TaskStore;

/// Settings of the HTTP transport.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Largest request body accepted, in bytes (default 4 MiB); larger ones get HTTP 413.
    pub max_body_bytes: usize,
    /// Threads that read requests and dispatch them (default 64). A request holds one
    /// while its body is read and it is handed to its connection: answers that take time
    /// (tool calls, a blocking `tasks/result`) and event streams do not hold one. Requests
    /// pipelined on one connection take their turns, each holding a worker while it waits,
    /// and an answer written on a worker waits for the earlier answers on its connection.
    pub workers: usize,
    /// Most 2025-11-25 sessions open at once (default 1024).
    pub max_sessions: usize,
    /// A 2025-11-25 session with no request in progress, no open event stream and no
    /// request for this long is ended as if the client had sent `DELETE` (its live tasks
    /// are cancelled). Default 30 minutes.
    pub session_idle_timeout: Duration,
    /// Browser origins allowed besides loopback ones (`http://localhost:*` and so on).
    pub allowed_origins: Vec<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body_bytes: 4 * 1024 * 1024,
            workers: 64,
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
    http: Arc<tiny_http::Server>,
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
    /// Ends the session's current `GET` stream: a new one replaces it.
    stream: Mutex<Option<Arc<Closer>>>,
    ended: Closer,
    /// Requests in progress and open event streams (each holds an [`Activity`]).
    active: AtomicUsize,
    /// When the last [`Activity`] began or ended.
    last_active: Mutex<Instant>,
}

impl Session {
    /// Whether the idle reaper may end it: nothing in progress and quiet for `timeout`.
    fn idle(&self, now: Instant, timeout: Duration) -> bool {
        self.active.load(Ordering::Acquire) == 0
            && now.saturating_duration_since(*self.last_active.lock()) >= timeout
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
    /// Held while a worker takes the next request and its turn, so turns follow arrival.
    receiving: Mutex<()>,
    turns: Arc<Turns>,
}

/// Whose turn it is on each client connection. tiny_http reads a connection's pipelined
/// requests ahead (when their bodies are small) and hands them to different workers at
/// once, but a request must be handled after the ones sent before it on its connection:
/// a pipelined POST or DELETE may not overtake them (RFC 9112 §9.3.2). A request's turn
/// ends once it was handed to its connection, or when its worker starts writing an answer
/// (see [`respond`]), whichever comes first: never when it is answered, since tiny_http
/// writes a connection's answers in order, and a cancel pipelined behind a long call must
/// reach it before the call's answer is written. (A worker's turn is told from others by
/// the client's address: an answer to another request from the same address, written on
/// this worker, would end it early. No path does that today.) Work a handler does after
/// its answer (a task's bookkeeping after its creation is answered) may overlap the next
/// request's.
#[derive(Default)]
struct Turns {
    /// Per client address: the next turn to give out, and the turn being served.
    connections: Mutex<HashMap<SocketAddr, (u64, u64)>>,
    changed: Condvar,
}

/// A request's place on its connection; dropping it lets the next request go.
struct Turn {
    turns: Arc<Turns>,
    place: Option<(SocketAddr, u64)>,
}

impl Turns {
    /// The next turn on `from`'s connection (none for a client without an address).
    fn take(self: &Arc<Self>, from: Option<SocketAddr>) -> Turn {
        let place = from.map(|from| {
            let mut connections = self.connections.lock();
            let (next, _) = connections.entry(from).or_insert((0, 0));
            *next += 1;
            (from, *next - 1)
        });
        Turn {
            turns: self.clone(),
            place,
        }
    }
}

thread_local! {
    /// The turn of the request this worker handles, until it is over (see [`Turns`]).
    static TURN: std::cell::RefCell<Option<Turn>> = const { std::cell::RefCell::new(None) };
}

/// Ends this worker's turn, if it holds one for a request from `from` (any, for `None`).
fn end_turn(from: Option<SocketAddr>) {
    let turn = TURN.with(|turn| {
        let mut turn = turn.borrow_mut();
        match (&*turn, from) {
            (
                Some(Turn {
                    place: Some((mine, _)),
                    ..
                }),
                Some(from),
            ) if *mine != from => None,
            _ => turn.take(),
        }
    });
    drop(turn);
}

impl Turn {
    /// Waits until the requests before this one on its connection were handled.
    fn wait(&self) {
        let Some((from, place)) = self.place else {
            return;
        };
        let mut connections = self.turns.connections.lock();
        while connections
            .get(&from)
            .is_some_and(|&(_, serving)| serving < place)
        {
            self.turns.changed.wait(&mut connections);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some((from, _)) = self.place else { return };
        let mut connections = self.turns.connections.lock();
        if let Some((next, serving)) = connections.get_mut(&from) {
            *serving += 1;
            if serving == next {
                connections.remove(&from);
            }
        }
        self.turns.changed.notify_all();
    }
}

/// An HTTP answer before it is written.
struct Answer {
    status: u16,
    body: Option<Value>,
    session: Option<String>,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer {
            status,
            body: Some(body),
            session: None,
        }
    }

    fn empty(status: u16) -> Answer {
        Answer {
            status,
            body: None,
            session: None,
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
        let http = Arc::new(tiny_http::Server::http(addr).map_err(io::Error::other)?);
        let addr = http
            .server_addr()
            .to_ip()
            .ok_or_else(|| io::Error::other("not an IP listener"))?;
        // Stateless requests need no outgoing messages: drop the receiver so nothing queues.
        let (unread, _) = crossbeam_channel::bounded(1);
        let state = Arc::new(State {
            stateless: server.connect_shared(unread),
            server,
            sessions: Mutex::new(HashMap::new()),
            options,
            stopping: Closer::new(),
            receiving: Mutex::new(()),
            turns: Arc::new(Turns::default()),
        });
        let mut threads = Vec::new();
        for n in 0..state.options.workers.max(1) {
            let (http, state) = (http.clone(), state.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("mcp-http-{n}"))
                    .spawn(move || serve_requests(&http, &state))?,
            );
        }
        let reaper_state = state.clone();
        threads.push(
            std::thread::Builder::new()
                .name("mcp-http-reaper".into())
                .spawn(move || reap_idle_sessions(&reaper_state))?,
        );
        let events = state
            .server
            .store()
            .subscribe()
            .map_err(|e| io::Error::other(e.to_string()))?;
        let events_state = state.clone();
        threads.push(
            std::thread::Builder::new()
                .name("mcp-http-events".into())
                .spawn(move || route_events(&events_state, events))?,
        );
        Ok(HttpServer {
            addr,
            http,
            state,
            threads,
        })
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
        for _ in 0..self.threads.len() {
            self.http.unblock();
        }
        // Every thread ends now: the request workers (unblocked), the reaper and the event
        // router (both watch `stopping`). The router holds the state, and with it the
        // server and an embedded store: left running, it would keep them for good.
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn serve_requests(http: &tiny_http::Server, state: &Arc<State>) {
    while !state.stopping.is_closed() {
        let (request, turn) = {
            let _receiving = state.receiving.lock();
            let Ok(request) = http.recv() else { return };
            let turn = state.turns.take(request.remote_addr().copied());
            (request, turn)
        };
        turn.wait();
        TURN.with(|mine| *mine.borrow_mut() = Some(turn));
        // A panic while handling one request must not cost the transport a worker: with
        // all of them gone it would serve nothing more. tiny_http itself panics after we
        // answered some requests (see `handle`); a request dropped unanswered gets its 500.
        let handled = std::panic::catch_unwind(AssertUnwindSafe(|| handle(state, request)));
        if handled.is_err() {
            log::error!("a request worker panicked; it goes on serving");
        }
        end_turn(None);
    }
}

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
                continue;
            }
            _ => continue,
        };
        let Some(session) = session else { continue };
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

/// Cancels every task of `session` that has not ended. The ids are gathered first, so
/// cancelling does not disturb the paging.
fn cancel_live_tasks(store: &dyn TaskStore, session: &SessionId) {
    let mut live = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = match store.list(Some(session), cursor.as_deref()) {
            Ok(page) => page,
            Err(error) => {
                log::warn!("session {session}: cannot list its tasks to cancel them: {error}");
                break;
            }
        };
        live.extend(
            page.tasks
                .iter()
                .filter(|task| !task.status.is_terminal())
                .map(|task| task.task_id),
        );
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    for id in live {
        let message = Some("the session ended".to_string());
        if let Err(error) = store.cancel(id, Some(session), message) {
            log::debug!("session {session}: task {id} not cancelled: {error}");
        }
    }
}

fn header<'a>(request: &'a Request, name: &'static str) -> Option<&'a str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

fn handle(state: &Arc<State>, request: Request) {
    let path = request.url().split('?').next().unwrap_or("");
    let max = state.options.max_body_bytes;
    // Whatever the method: tiny_http 0.12 drains a body nobody read, once its request is
    // dropped, through a buffer as large as what is still to come. Past isize::MAX that
    // allocation panics, so such a request is answered here, on a worker that survives the
    // panic (`serve_requests`), and never reaches an event stream's thread. (An allocation
    // that fails below isize::MAX aborts the process: see "Limits" above.)
    let answer = if request.body_length().is_some_and(|len| len > max) {
        Answer::error(
            413,
            RpcError::invalid_request(format!("the body is larger than {max} bytes")),
        )
    } else if path != "/mcp" {
        Answer::error(404, RpcError::invalid_request("the MCP endpoint is /mcp"))
    } else if !origin_allowed(header(&request, "Origin"), &state.options.allowed_origins) {
        Answer::error(403, RpcError::invalid_request("origin not allowed"))
    } else if let Some(version) =
        header(&request, "MCP-Protocol-Version").filter(|v| !supported_version(v))
    {
        Answer::error(400, unsupported_version(version))
    } else {
        match request.method() {
            Method::Post => return post(state, request),
            Method::Get => return get(state, request),
            Method::Delete => delete(state, &request),
            _ => Answer::error(405, RpcError::invalid_request("use POST, GET or DELETE")),
        }
    };
    respond(request, answer);
}

fn respond(request: Request, answer: Answer) {
    // Writing may wait for the answers before this one on its connection (tiny_http
    // writes them in order): the requests after it need not wait for that.
    end_turn(request.remote_addr().copied());
    let body = answer
        .body
        .map(|b| serde_json::to_vec(&b).unwrap_or_default());
    let mut response = match body {
        Some(body) => Response::from_data(body).with_header(
            Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]).expect("ascii"),
        ),
        None => Response::from_data(Vec::new()),
    }
    .with_status_code(StatusCode(answer.status));
    if let Some(session) = answer.session {
        if let Ok(h) = Header::from_bytes(&b"Mcp-Session-Id"[..], session.as_bytes()) {
            response = response.with_header(h);
        }
    }
    let _ = request.respond(response);
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

fn read_body(state: &State, request: &mut Request) -> Result<String, Answer> {
    let max = state.options.max_body_bytes;
    if !is_json_media_type(header(request, "Content-Type").unwrap_or("")) {
        return Err(Answer::error(
            415,
            RpcError::invalid_request("Content-Type must be application/json"),
        ));
    }
    let too_large = || {
        Answer::error(
            413,
            RpcError::invalid_request(format!("the body is larger than {max} bytes")),
        )
    };
    // A declared length past `max` was refused in `handle`.
    let mut body = Vec::new();
    let read = request
        .as_reader()
        .take(max as u64 + 1)
        .read_to_end(&mut body);
    if read.is_err() {
        return Err(Answer::error(
            400,
            RpcError::invalid_request("unreadable body"),
        ));
    }
    if body.len() > max {
        return Err(too_large());
    }
    String::from_utf8(body).map_err(|e| {
        Answer::json(
            400,
            jsonrpc::error_response(None, &RpcError::parse_error(e)),
        )
    })
}

fn post(state: &Arc<State>, mut request: Request) {
    let body = match read_body(state, &mut request) {
        Ok(body) => body,
        Err(answer) => return respond(request, answer),
    };
    let message = match jsonrpc::parse_message(&body) {
        Ok(message) => message,
        Err(rejected) => {
            let error = jsonrpc::error_response(rejected.id.as_ref(), &rejected.error);
            return respond(request, Answer::json(400, error));
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
            return respond(request, Answer::json(400, error));
        }
    }
    let header_version = header(&request, "MCP-Protocol-Version");
    let by_header = header_version == Some(sep2663::PROTOCOL_VERSION);
    // The connection's own rule, so no 2025-11-25 handler ever runs on the shared
    // stateless connection.
    let by_body = method.is_some_and(|m| RequestMeta::of(params).speaks_sep2663(m));
    if by_header || by_body {
        // A body that names its version in `_meta` while the header names another one is
        // a header mismatch; `server/discover` is how versions are found, so it fits any.
        let mismatch =
            header_version.is_some() && by_header != by_body && method != Some("server/discover");
        post_stateless(state, request, message, by_body, mismatch)
    } else {
        post_session(state, request, message)
    }
}

/// Hands a message to its connection. A request's answer is written by whichever thread
/// produces it (the reply moves the HTTP request along), so the worker is free again as
/// soon as the connection has taken the message, however long the answer takes. Other
/// messages are acknowledged with 202 at once.
fn dispatch(
    connection: &Arc<Connection>,
    request: Request,
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
                respond(request, answer)
            }),
        );
    } else {
        connection.handle_message(message, Box::new(|_| {}));
        respond(request, Answer::empty(202));
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
    request: Request,
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
            return respond(request, Answer::json(200, response));
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
            check_routing_headers(&request, &r.method, r.params.as_ref())
        };
        if let Err(error) = checked {
            let response = jsonrpc::error_response(Some(&r.id), &error);
            return respond(request, Answer::json(400, response));
        }
    } else if !speaks_sep2663 {
        // Nothing to answer, and nothing a 2025-11-25 notification or response could mean
        // to the stateless connection.
        return respond(request, Answer::empty(202));
    }
    dispatch(&state.stateless, request, message, |response| {
        Answer::json(status_of(&response), response)
    });
}

/// SEP-2243 routing headers: `Mcp-Method` must name the body's method, and `Mcp-Name` the
/// tool (for `tools/call`) or the task (for `tasks/get|update|cancel`).
fn check_routing_headers(
    request: &Request,
    method: &str,
    params: Option<&Value>,
) -> Result<(), RpcError> {
    let mismatch = |what: String| RpcError::new(sep2663::HEADER_MISMATCH, what);
    match header(request, "Mcp-Method") {
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
    match header(request, "Mcp-Name") {
        Some(value) if header_value::decode(value).as_deref() == Some(named) => Ok(()),
        Some(value) => Err(mismatch(format!(
            "Mcp-Name header '{value}' does not match '{named}'"
        ))),
        None => Err(mismatch("the Mcp-Name header is missing".into())),
    }
}

fn post_session(state: &Arc<State>, request: Request, message: Message) {
    if let Message::Request(r) = &message {
        if r.method == "initialize" {
            return open_session(state, request, message);
        }
    }
    let (session, activity) = match find_session(state, &request) {
        Ok(found) => found,
        Err(answer) => return respond(request, answer),
    };
    dispatch(&session.connection, request, message, move |response| {
        drop(activity);
        Answer::json(200, response)
    });
}

fn open_session(state: &Arc<State>, request: Request, message: Message) {
    let mut sessions = state.sessions.lock();
    // Checked under the lock that dropping the server drains the sessions under, after
    // it raised the flag: no session opens after that drain, never to be ended.
    if state.stopping.is_closed() {
        drop(sessions);
        let answer = Answer::error(503, RpcError::internal("the server is stopping"));
        return respond(request, answer);
    }
    if sessions.len() >= state.options.max_sessions {
        drop(sessions);
        let answer = Answer::error(503, RpcError::internal("too many open sessions"));
        return respond(request, answer);
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
        ended: Closer::new(),
        active: AtomicUsize::new(0),
        last_active: Mutex::new(Instant::now()),
    });
    let activity = Activity::begin(&session);
    sessions.insert(id.clone(), session);
    drop(sessions);
    let state = state.clone();
    dispatch(&connection, request, message, move |response| {
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
            status: 200,
            body: Some(response),
            session: Some(id),
        }
    });
}

fn find_session(state: &State, request: &Request) -> Result<(Arc<Session>, Activity), Answer> {
    let Some(id) = header(request, "Mcp-Session-Id") else {
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

fn delete(state: &State, request: &Request) -> Answer {
    let Some(id) = header(request, "Mcp-Session-Id") else {
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
/// written straight to the socket so every event leaves at once. The stream runs on a
/// thread of its own (one per session: a new one replaces the old), never on a request
/// worker.
fn get(state: &Arc<State>, request: Request) {
    let accepts = header(&request, "Accept").is_some_and(|a| a.contains("text/event-stream"));
    if !accepts {
        let error = RpcError::invalid_request("GET /mcp serves text/event-stream only");
        return respond(request, Answer::error(406, error));
    }
    let (session, activity) = match find_session(state, &request) {
        Ok(found) => found,
        Err(answer) => {
            // Stateless (2026-07-28) clients have no stream to open.
            let answer = if header(&request, "Mcp-Session-Id").is_none() {
                Answer::error(
                    405,
                    RpcError::invalid_request("no session: nothing to stream"),
                )
            } else {
                answer
            };
            return respond(request, answer);
        }
    };
    // A new stream replaces the session's current one, which ends. The client opens a new
    // one when it takes the old for dead (a proxy or NAT dropped it without a word); the
    // server would only notice when TCP gives up on its keep-alives, many minutes later.
    let this_stream = Arc::new(Closer::new());
    if let Some(old) = session.stream.lock().replace(this_stream.clone()) {
        old.close();
    }
    let stream_state = state.clone();
    let stream_session = session.clone();
    let request = Arc::new(Mutex::new(Some(request)));
    let moved = request.clone();
    let mine = this_stream.clone();
    let spawned = std::thread::Builder::new()
        .name("mcp-http-stream".into())
        .spawn(move || {
            let Some(request) = moved.lock().take() else {
                return;
            };
            let mut writer = request.into_writer();
            let _ = stream_events(&mut writer, &stream_session, &stream_state, &mine);
            end_stream(&stream_session, &mine);
            drop(activity);
        });
    if let Err(error) = spawned {
        log::error!("cannot spawn an event stream thread: {error}");
        end_stream(&session, &this_stream);
        if let Some(request) = request.lock().take() {
            let error = RpcError::internal("the server cannot open a stream now");
            respond(request, Answer::error(503, error));
        }
    }
}

/// Forgets `stream` as the session's current one, unless a newer one replaced it.
fn end_stream(session: &Session, stream: &Arc<Closer>) {
    let mut current = session.stream.lock();
    if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, stream)) {
        *current = None;
    }
}

fn stream_events(
    writer: &mut dyn Write,
    session: &Session,
    state: &State,
    this_stream: &Closer,
) -> io::Result<()> {
    writer.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
          Transfer-Encoding: chunked\r\n\r\n",
    )?;
    writer.flush()?;
    let chunk = |writer: &mut dyn Write, data: &[u8]| -> io::Result<()> {
        write!(writer, "{:x}\r\n", data.len())?;
        writer.write_all(data)?;
        writer.write_all(b"\r\n")?;
        writer.flush()
    };
    loop {
        select! {
            recv(session.outgoing) -> message => {
                let Ok(message) = message else { break };
                let event = format!("event: message\ndata: {message}\n\n");
                chunk(writer, event.as_bytes())?;
            }
            recv(session.ended.closed()) -> _ => break,
            recv(state.stopping.closed()) -> _ => break,
            recv(this_stream.closed()) -> _ => break,
            // A comment keeps proxies from timing the stream out and finds dead clients.
            default(Duration::from_secs(15)) => chunk(writer, b": keep-alive\n\n")?,
        }
    }
    writer.write_all(b"0\r\n\r\n")?;
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::origin_allowed;

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
