//! Streamable HTTP: `POST /mcp` with JSON responses, for both revisions.
//!
//! - 2026-07-28 (SEP-2663) requests are stateless: every request stands alone and must carry
//!   `Mcp-Method` (and `Mcp-Name` where it names a tool or a task) matching its body, else
//!   -32020 with HTTP 400. Task ids are bearer capabilities; such tasks are sessionless
//!   (bound to their creator's identity with [`HttpOptions::authenticate`], see `auth`).
//!   Such requests share one connection (one per identity), so only bodies that speak
//!   2026-07-28 themselves (`_meta` protocol version, or `server/discover`) reach it: the
//!   `MCP-Protocol-Version` header alone gets -32020 (HTTP 400), and the removed
//!   `tasks/list`, `tasks/result` and `initialize` get -32601 (HTTP 200) whatever the
//!   headers say. An unsupported
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
//! [`HttpOptions::allowed_origins`] is refused (DNS rebinding). With
//! [`HttpOptions::authenticate`], every request names its sender, and sessions and
//! 2026-07-28 tasks belong to whoever opened or created them (see `auth`).
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::Mutex;
use serde_json::Value;

use self::auth::{identify, stateless_connection, Identity};
use self::conn::{ConnOptions, Hooks, Request, Transport, TurnedAway};
use self::outbox::Responder;
use self::session::{
    delete, end_session, get, post_batch, post_session, reap_idle_sessions, Session,
};
use self::stateless::{check_routing_headers, post_stateless};
use self::wire::{Head, Limits};
use super::listen::listen_limit;

use super::connection::{supported_version, unsupported_version};
use super::{Connection, Server};
use crate::model::StoreEvent;
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::{header_value, sep2663, RequestMeta};

mod auth;
mod conn;
mod options;
mod outbox;
mod replay;
mod session;
mod stateless;
mod wire;

pub use self::auth::{Authenticate, RequestHead, Unauthorized};
pub use self::options::HttpOptions;

/// Bytes a request head may hold (request line, fields, line ends).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Field lines a request head may hold.
const MAX_HEADER_FIELDS: usize = 100;

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

struct State {
    server: Server,
    /// Serves 2026-07-28 requests when no identity is known (no
    /// [`HttpOptions::authenticate`]).
    stateless: Arc<Connection>,
    /// Serves each identity's 2026-07-28 requests, by store session (see `auth`).
    identified: Mutex<HashMap<String, Arc<Connection>>>,
    /// Where stateless connections' outgoing messages go: nowhere (they need none).
    unread: Sender<Value>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    options: HttpOptions,
    stopping: Closer,
    streams: StreamBudget,
}

/// The event streams open at once: 2025-11-25 sessions' `GET` streams and 2026-07-28 task
/// subscriptions together. Each holds a connection for as long as it lasts and keeps it
/// alive (keep-alives), and a session with a stream is never ended for idleness, so without
/// a bound streams could take every connection and the server would answer every request
/// (a poll, a cancel, a `DELETE`) with 503 until clients left. They may hold at most half
/// of `max_connections`.
struct StreamBudget {
    open: AtomicUsize,
    limit: usize,
}

impl StreamBudget {
    fn new(max_connections: usize) -> StreamBudget {
        StreamBudget {
            open: AtomicUsize::new(0),
            limit: max_connections / 2,
        }
    }

    /// A place for a new stream, if one is free.
    fn claim(&self) -> Option<StreamSlot<'_>> {
        let claimed = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.limit).then_some(open + 1)
            });
        claimed.ok().map(|_| StreamSlot(&self.open))
    }

    /// A place for a stream that replaces one about to end (a session's new `GET` stream
    /// ends its old one): taken whatever the count, which is over by one for a moment.
    fn take(&self) -> StreamSlot<'_> {
        self.open.fetch_add(1, Ordering::AcqRel);
        StreamSlot(&self.open)
    }
}

/// A stream's place in the [`StreamBudget`], given back when dropped.
struct StreamSlot<'a>(&'a AtomicUsize);

impl Drop for StreamSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The refusal of an event stream beyond the [`StreamBudget`].
fn too_many_streams() -> RpcError {
    RpcError::internal(
        "too many event streams are open (they may hold at most half of the server's \
         connections); try again later",
    )
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
        mut options: HttpOptions,
    ) -> io::Result<HttpServer> {
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind"))?;
        let listener = TcpListener::bind(addr)?;
        // Compared exactly with what browsers send, so written as they write it.
        for origin in &mut options.allowed_origins {
            *origin = browser_origin(origin);
        }
        // Stateless requests need no outgoing messages: drop the receiver so nothing queues.
        let (unread, _) = crossbeam_channel::bounded(1);
        let state = Arc::new(State {
            stateless: server.connect_stateless(
                unread.clone(),
                None,
                listen_limit(options.max_connections),
            ),
            identified: Mutex::new(HashMap::new()),
            unread,
            server,
            sessions: Mutex::new(HashMap::new()),
            streams: StreamBudget::new(options.max_connections),
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
        let (handler_state, admit_state) = (state.clone(), state.clone());
        let allowed_origins = state.options.allowed_origins.clone();
        let hooks = Hooks {
            handle: Box::new(move |request| handle(&handler_state, request)),
            always: Box::new(move |head| always_fields(head, &allowed_origins)),
            admit: Box::new(move |head| admit(&admit_state, head)),
        };
        let transport = Transport::start(listener, conn_options, hooks)?;
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
                let identified: Vec<_> = state.identified.lock().values().cloned().collect();
                for target in identified {
                    target.handle_store_event(&event);
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
            continue;
        }
        // An identity's 2026-07-28 task.
        let target = state.identified.lock().get(session.as_str()).cloned();
        if let Some(target) = target {
            target.handle_store_event(&event);
        }
    }
}

/// The methods `/mcp` serves.
const METHODS: &str = "POST, GET, DELETE, OPTIONS";
/// The request header fields a page of an allowed origin may send (CORS).
const CORS_ALLOWED_HEADERS: &str = "Content-Type, Accept, Authorization, Mcp-Session-Id, \
     MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name";
/// The answer header fields such a page may read.
const CORS_EXPOSED_HEADERS: &str = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate";

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

/// What a request gets before anyone is identified, if it is not served: the answer, or
/// (a CORS preflight) the means to make it.
enum Unidentified {
    Answer(Answer),
    Preflight,
}

/// What is answered to a request before (and without) the authentication hook: a wrong
/// path, a foreign origin, an unknown protocol version, a preflight. `None`: the request
/// is for the hook, then its method's handler.
fn unidentified(head: &Head, allowed: &[String]) -> Option<Unidentified> {
    let answer = if path_of(&head.target) != "/mcp" {
        Answer::error(404, RpcError::invalid_request("the MCP endpoint is /mcp"))
    } else if !origin_allowed(head.field("Origin"), allowed) {
        Answer::error(403, RpcError::invalid_request("origin not allowed"))
    } else if let Some(version) = head
        .field("MCP-Protocol-Version")
        .filter(|v| !supported_version(v))
    {
        Answer::error(400, unsupported_version(version))
    } else if head.method == "OPTIONS" {
        // A CORS preflight carries no credentials: answered before anyone is identified.
        return Some(Unidentified::Preflight);
    } else {
        return None;
    };
    Some(Unidentified::Answer(answer))
}

/// [`Hooks::admit`]: the authentication hook's verdict on a request it is for, before
/// the body is read.
fn admit(state: &State, head: &Head) -> Result<Identity, TurnedAway> {
    let asked = state.options.authenticate.is_some()
        && unidentified(head, &state.options.allowed_origins).is_none();
    match asked {
        true => identify(state, head),
        false => Ok(None),
    }
}

fn handle(state: &Arc<State>, request: Request) {
    let Request {
        head,
        identity,
        body,
        mut responder,
    } = request;
    let allowed = &state.options.allowed_origins;
    for (name, value) in always_fields(&head, allowed) {
        responder.always_send(name, value);
    }
    // A declared body past the limit was refused with 413 before it was read, and so was
    // a request the authentication hook refused (`conn`).
    let answer = match unidentified(&head, allowed) {
        Some(Unidentified::Answer(answer)) => answer,
        Some(Unidentified::Preflight) => {
            let cors = cors_origin(&head, allowed).is_some();
            preflight(&head, cors, &mut responder)
        }
        None => match head.method.as_str() {
            "POST" => return post(state, &head, &identity, body, responder),
            "GET" => return get(state, &head, &identity, responder),
            "DELETE" => delete(state, &head, &identity),
            _ => Answer::not_allowed(METHODS, "use POST, GET or DELETE"),
        },
    };
    respond(responder, answer);
}

/// The `Origin` of a request that gets CORS: one named in `allowed` (exactly as browsers
/// send it).
/// An origin as a browser serialises it in `Origin`: scheme and host in lower case, no
/// default port (80 for http, 443 for https). Anything else is left as it is.
fn browser_origin(origin: &str) -> String {
    let Some((scheme, authority)) = origin.split_once("://") else {
        return origin.to_owned();
    };
    let (scheme, authority) = (scheme.to_ascii_lowercase(), authority.to_ascii_lowercase());
    let default_port = match scheme.as_str() {
        "http" => ":80",
        "https" => ":443",
        _ => "",
    };
    let authority = match authority.strip_suffix(default_port) {
        Some(host) if !default_port.is_empty() => host,
        _ => &authority,
    };
    format!("{scheme}://{authority}")
}

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

/// Whether the `MCP-Protocol-Version` header names 2026-07-28.
fn speaks_sep2663_by_header(head: &Head) -> bool {
    head.field("MCP-Protocol-Version") == Some(sep2663::PROTOCOL_VERSION)
}

fn post(state: &Arc<State>, head: &Head, identity: &Identity, body: Vec<u8>, responder: Responder) {
    let body = match body_text(head, body) {
        Ok(body) => body,
        Err(answer) => return respond(responder, answer),
    };
    let message = match jsonrpc::parse_value(&body) {
        // 2026-07-28 has no batches: refused as such, not sent looking for a session.
        Ok(Value::Array(_)) if speaks_sep2663_by_header(head) => {
            let error = RpcError::invalid_request(jsonrpc::BATCHES_REFUSED);
            return respond(responder, Answer::error(400, error));
        }
        Ok(Value::Array(items)) => return post_batch(state, head, identity, responder, items),
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
    let by_header = speaks_sep2663_by_header(head);
    // The connection's own rule, so no 2025-11-25 handler ever runs on the shared
    // stateless connection.
    let by_body = method.is_some_and(|m| RequestMeta::of(params).speaks_sep2663(m));
    if by_header || by_body {
        // A body that names its version in `_meta` while the header names another one is
        // a header mismatch; `server/discover` is how versions are found, so it fits any.
        let mismatch =
            header_version.is_some() && by_header != by_body && method != Some("server/discover");
        let connection = stateless_connection(state, identity);
        post_stateless(
            state, connection, head, responder, message, by_body, mismatch,
        )
    } else {
        post_session(state, head, identity, responder, message)
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
    #[test]
    fn configured_origins_are_written_as_browsers_send_them() {
        for (given, sent) in [
            ("http://localhost:6274", "http://localhost:6274"),
            ("HTTP://LocalHost:6274", "http://localhost:6274"),
            ("https://App.Example:443", "https://app.example"),
            ("http://[::1]:80", "http://[::1]"),
            ("http://x:8080", "http://x:8080"),
            ("null", "null"),
        ] {
            assert_eq!(super::browser_origin(given), sent, "{given}");
        }
    }

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
