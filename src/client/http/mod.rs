//! A small plain-HTTP/1.1 client for Streamable HTTP (`http://` only, no TLS): one
//! connection per request (`Connection: close`), bodies with `Content-Length`, chunked
//! encoding or read to the end, and `text/event-stream` bodies read event by event, which
//! serves both SSE answers to a POST and the 2025-11-25 `GET` event stream. A POST's
//! response answers only the request it carried: a response there to another request is
//! dropped (server requests and notifications on it are handled as anywhere else).
//!
//! No thread waits on a server for good: a connection that makes no progress for
//! [`IDLE_TIMEOUT`] fails its exchange (event streams and `tasks/result` excepted, which may
//! rightly stay silent while a task runs), a request nobody waits for any more (it timed
//! out, or it is a held `tasks/result` whose call ended) has its connection shut down, and
//! shutting the client down shuts every open connection down before the session's
//! `DELETE`, which itself gets [`DELETE_TIMEOUT`].
//!
//! The `GET` event stream is opened again whenever it ends while the client is open (see
//! [`Inner::event_stream`]), waiting between attempts as the server's `retry:` or a doubling
//! backoff says, and resuming from the last event id; shutting the client down wakes it from
//! those waits. A POST's event stream that ends before its answer, after events with ids,
//! is resumed with `GET`s of the request's own (2025-11-25, [`resume`]).
//!
//! This module is the MCP transport: sessions and their renewal, the headers each message
//! carries, and routing what a POST's answer brings. Below it, [`wire`] speaks HTTP/1.1
//! (one exchange, a body's framing), [`sse`] reads event streams, [`connections`] keeps
//! the connections under way for shutdown to end, [`stream`] runs the `GET` stream's
//! reader, and [`resume`] resumes a POST's event stream.

mod connections;
mod resume;
mod sse;
mod stream;
mod wire;

use std::io::{self, BufRead};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;

use self::connections::OpenConnections;
use self::sse::{read_events, read_events_resuming, Resume, MAX_EVENT_ID};
use self::stream::{StreamControl, STREAM_SILENCE};
use self::wire::{
    body_text, exchange, header_safe, is_event_stream, parse_head, Endpoint, HttpResponse, Link,
};
use super::transport::{malformed_response, Shared, Transport};
use super::ClientError;
use crate::protocol::jsonrpc::{self, Message, RequestId, Response, RpcError};
use crate::protocol::{header_value, sep2663, v2025, Revision};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a POST's connection may stay silent (or refuse to take our bytes) before its
/// exchange fails. It is not a request timeout (the client's calls have their own); it only
/// keeps a server that accepts a connection and then never answers from holding a thread
/// for good, so it is generous: a synchronous `tools/call` answered with plain JSON may
/// take minutes.
///
/// Some exchanges may rightly stay silent for as long as a task runs, and get no read
/// timeout: a POST's event-stream body (once its head says so) and a `tasks/result` (which
/// blocks until the task ends; a server may hold even its head until then, as ours does).
/// Those end when the server ends them or when the client shuts down, which shuts down
/// every open connection. The `GET` stream has a limit of its own, [`STREAM_SILENCE`].
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Connect, read and write limit of the `DELETE` that ends a session, and of the whole
/// exchange: it is sent while the client is dropped, which must not hang on a server that
/// never answers it (or trickles its answer).
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);

/// `session`, the `Mcp-Session-Id` a server handed out, if the client can send it back:
/// one with a control character could not go into a header, so every later request of
/// the session would fail (and the `GET` stream be tried again for ever). It is refused
/// where it comes, with an error that names it.
fn checked_session(session: &str) -> Result<&str, ClientError> {
    if header_safe(session) {
        return Ok(session);
    }
    Err(ClientError::Protocol(format!(
        "the server's Mcp-Session-Id {session:?} holds a control character, which no \
         header can carry back"
    )))
}

/// Longest `Mcp-Name` value sent; SEP-2243 has a longer one left out.
const MAX_NAME_HEADER: usize = 8192;

/// `value` as SEP-2243 carries it in an `Mcp-Name` header (see
/// [`header_value`]); `None` when that is longer than 8192 bytes: the header is then left
/// out.
fn name_header(value: &str) -> Option<String> {
    let header = header_value::encode(value);
    (header.len() <= MAX_NAME_HEADER).then_some(header)
}

/// The JSON-RPC response to request `id` a POST's answer carries, as a JSON body or in its
/// event stream (for an exchange the client runs itself, outside the request table).
/// Responses there to other requests are dropped, as [`Inner::answer`] drops them; an
/// error under another id in a JSON body still answers `id`.
fn read_response(response: HttpResponse, id: &RequestId) -> io::Result<Response> {
    let events = response.is_event_stream();
    if events {
        response.wait_for_events()?;
    }
    response_in(response.status, events, response.body, id)
}

/// [`read_response`] from a response's parts: its status, whether it is an event stream,
/// and its body.
fn response_in(
    status: u16,
    events: bool,
    mut body: Box<dyn BufRead + Send>,
    id: &RequestId,
) -> io::Result<Response> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    if events {
        let mut found = None;
        read_events(&mut body, |data| {
            match jsonrpc::parse_message(data) {
                Ok(Message::Response(r)) if &r.id == id => found = Some(r),
                Ok(Message::Response(r)) => log::warn!(
                    "mcp client: the answer to request {id} carried a response to {}; dropped",
                    r.id
                ),
                _ => {}
            }
            found.is_none()
        })?;
        return found.ok_or_else(|| invalid("the event stream ended without a response".into()));
    }
    let text = body_text(body)?;
    match jsonrpc::parse_message(&text) {
        Ok(Message::Response(r)) if &r.id == id || r.outcome.is_err() => Ok(r),
        _ => Err(invalid(format!(
            "HTTP {status} without a JSON-RPC response to request {id}: {text}"
        ))),
    }
}

struct Inner {
    endpoint: Endpoint,
    revision: Revision,
    shared: Arc<Shared>,
    session: Mutex<Option<String>>,
    /// The protocol version the server chose in its `initialize` answer (2025-11-25).
    negotiated: Mutex<Option<String>>,
    /// Every exchange's connection while it is under way, the `GET` stream's included.
    open: Arc<OpenConnections>,
    /// See [`IDLE_TIMEOUT`]; shorter in tests.
    idle: Duration,
    /// The client's request timeout, which also bounds sending a notification or an
    /// answer (see [`Inner::link`]).
    request_timeout: Duration,
    /// See [`STREAM_SILENCE`]; shorter in tests.
    stream_silence: Duration,
    /// The `initialize` request this client sent: repeated to start a new session when the
    /// server has forgotten this one (2025-11-25).
    initialize: Mutex<Option<Value>>,
    /// Held while a new session starts, so that requests meeting the same forgotten
    /// session renew it once.
    renewing: Mutex<()>,
    /// Shared with the `GET` stream's reader (2025-11-25).
    stream: StreamControl,
}

/// Streamable HTTP: every message is a POST; 2026-07-28 requests carry the routing headers;
/// 2025-11-25 keeps the session from `initialize` and reads the `GET` event stream.
pub(crate) struct HttpTransport {
    inner: Arc<Inner>,
}

impl HttpTransport {
    /// `request_timeout` is the client's: a connection may stay silent at least that long.
    pub(crate) fn new(
        url: &str,
        revision: Revision,
        shared: Arc<Shared>,
        request_timeout: Duration,
        extra_headers: &[(String, String)],
    ) -> Result<HttpTransport, ClientError> {
        Ok(HttpTransport {
            inner: Arc::new(Inner {
                endpoint: Endpoint::parse(url)?.with_headers(extra_headers)?,
                revision,
                shared,
                session: Mutex::new(None),
                negotiated: Mutex::new(None),
                open: Arc::default(),
                idle: IDLE_TIMEOUT.max(request_timeout),
                request_timeout,
                stream_silence: STREAM_SILENCE,
                initialize: Mutex::new(None),
                renewing: Mutex::new(()),
                stream: StreamControl::default(),
            }),
        })
    }
}

impl Inner {
    fn headers(&self, message: &Value) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("Content-Type", "application/json".to_owned()),
            ("Accept", "application/json, text/event-stream".to_owned()),
        ];
        match self.revision {
            Revision::Sep2663 => {
                headers.push(("MCP-Protocol-Version", sep2663::PROTOCOL_VERSION.to_owned()));
                if let Some(method) = message.get("method").and_then(Value::as_str) {
                    headers.push(("Mcp-Method", method.to_owned()));
                    let name = match method {
                        "tools/call" => message.pointer("/params/name"),
                        "tasks/get" | "tasks/update" | "tasks/cancel" => {
                            message.pointer("/params/taskId")
                        }
                        _ => None,
                    };
                    match name.and_then(Value::as_str).map(|n| (n, name_header(n))) {
                        Some((_, Some(header))) => headers.push(("Mcp-Name", header)),
                        Some((name, None)) => log::warn!(
                            "mcp client: Mcp-Name left out: '{}…' is over {MAX_NAME_HEADER} \
                             bytes once encoded",
                            name.chars().take(40).collect::<String>()
                        ),
                        None => {}
                    }
                }
            }
            Revision::V2025 => {
                // Every message after `initialize` carries the version, from
                // `notifications/initialized` on (the 2025-11-25 transport rules).
                // `initialize` starts a session, so it never carries one (not even when
                // it starts a new session in place of a forgotten one).
                let method = message.get("method").and_then(Value::as_str);
                if method != Some("initialize") {
                    headers.push(("MCP-Protocol-Version", self.version()));
                    if let Some(session) = self.session.lock().clone() {
                        headers.push(("Mcp-Session-Id", session));
                    }
                }
            }
        }
        headers
    }

    /// The version to send in `MCP-Protocol-Version`: the negotiated one, as the
    /// transport rules ask, or ours before `initialize` was answered (2025-11-25);
    /// 2026-07-28 under SEP-2663, which negotiates nothing.
    fn version(&self) -> String {
        if self.revision == Revision::Sep2663 {
            return sep2663::PROTOCOL_VERSION.to_owned();
        }
        self.negotiated
            .lock()
            .clone()
            .unwrap_or_else(|| v2025::PROTOCOL_VERSION.to_owned())
    }

    /// Keeps the version from the answer to `initialize`, before that answer is routed
    /// (its caller sends `notifications/initialized` as soon as it has it).
    fn note_version(&self, response: &Response) {
        let version = response
            .outcome
            .as_ref()
            .ok()
            .and_then(|result| result.get("protocolVersion").and_then(Value::as_str));
        if let Some(version) = version.filter(|v| header_safe(v)) {
            *self.negotiated.lock() = Some(version.to_owned());
        }
    }

    /// How a POST of `message` connects: see [`IDLE_TIMEOUT`]. A notification or an
    /// answer to a server request gets no longer than the request timeout either, for
    /// the whole exchange (a server trickling its answer does not stretch it): nobody
    /// waits for what comes back, and its sender (the handshake, the dispatcher that
    /// answers the server's requests one at a time) must not be held by the server for
    /// longer than a request would be.
    fn link(&self, message: &Value) -> Link<'_> {
        let method = message.get("method").and_then(Value::as_str);
        match method {
            // A `tasks/result` is held until its task ends, however long that is.
            Some("tasks/result") => self.link_within(None, None),
            Some(_) if message.get("id").is_some() => self.link_within(Some(self.idle), None),
            _ => self.within_request_timeout(),
        }
    }

    /// A link whose exchange gets the request timeout in all (see [`Inner::link`]).
    fn within_request_timeout(&self) -> Link<'_> {
        // A zero timeout would mean none to the socket.
        let idle = self
            .idle
            .min(self.request_timeout)
            .max(Duration::from_millis(1));
        self.link_within(Some(idle), Instant::now().checked_add(self.request_timeout))
    }

    fn link_within(&self, idle: Option<Duration>, deadline: Option<Instant>) -> Link<'_> {
        Link {
            connect: CONNECT_TIMEOUT,
            idle,
            deadline,
            open: Some(&self.open),
            owner: None,
        }
    }

    /// `error` as the client reports it; a timeout says it hit the idle limit.
    fn io_error(&self, error: io::Error) -> ClientError {
        self.io_error_after(error, self.idle)
    }

    /// [`io_error`](Self::io_error) on a connection whose idle limit was `limit`.
    fn io_error_after(&self, error: io::Error, limit: Duration) -> ClientError {
        match error.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no progress on the connection for {limit:?}: {error}"),
            )),
            _ => ClientError::io(error),
        }
    }

    fn post(&self, message: &Value) -> Result<HttpResponse, ClientError> {
        self.post_with(message, self.link(message))
    }

    /// [`post`](Self::post) over `link`.
    fn post_with(&self, message: &Value, link: Link<'_>) -> Result<HttpResponse, ClientError> {
        self.post_as(message, link, None)
    }

    /// [`post_with`](Self::post_with), in `session` rather than the current session if
    /// given (2025-11-25).
    fn post_as(
        &self,
        message: &Value,
        link: Link<'_>,
        session: Option<&str>,
    ) -> Result<HttpResponse, ClientError> {
        let body = serde_json::to_vec(message)
            .map_err(|e| ClientError::Protocol(format!("cannot serialise a message: {e}")))?;
        let limit = link.idle.unwrap_or(self.idle);
        let mut headers = self.headers(message);
        if let Some(session) = session {
            headers.retain(|(name, _)| *name != "Mcp-Session-Id");
            headers.push(("Mcp-Session-Id", session.to_owned()));
        }
        let mut response = exchange(&self.endpoint, "POST", &headers, &body, link)
            .map_err(|e| self.io_error_after(e, limit))?;
        response.session = headers
            .into_iter()
            .find_map(|(name, value)| (name == "Mcp-Session-Id").then_some(value));
        // Only 2025-11-25 has sessions: 2026-07-28 is stateless, and a session id its
        // server hands out anyway is never sent back, nor ended with a DELETE.
        let offered = response
            .header("Mcp-Session-Id")
            .filter(|_| self.revision == Revision::V2025);
        if let Some(session) = offered {
            let mut current = self.session.lock();
            if current.is_none() {
                *current = Some(checked_session(session)?.to_owned());
            }
        }
        Ok(response)
    }

    /// POSTs request `id` and delivers its answer (or why there is none).
    fn request(self: &Arc<Self>, id: &RequestId, message: &Value) {
        let initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
        if initialize {
            *self.initialize.lock() = Some(message.clone());
        }
        let idle = self.link(message).idle;
        let outcome = self
            .post_in_session(message, Some(id))
            .and_then(|response| self.answer(id, initialize, idle, response));
        if let Err(error) = outcome {
            self.shared.complete(id, Err(error));
        }
    }

    /// POSTs `message`. A 404 to the session it carried means the server no longer knows
    /// that session (it restarted, or ended an idle one): as 2025-11-25 requires, the
    /// client then starts a new session with a new `initialize` and sends `message` once
    /// more, in the new session. (Tasks of the old session are gone with it.)
    /// `owner`: the request `message` is, whose exchange ends once nobody waits for it.
    fn post_in_session(
        self: &Arc<Self>,
        message: &Value,
        owner: Option<&RequestId>,
    ) -> Result<HttpResponse, ClientError> {
        let post = || {
            let mut link = self.link(message);
            link.owner = owner.map(|id| (id, &*self.shared));
            self.post_with(message, link)
        };
        let carried = self.session.lock().clone();
        let response = post()?;
        let method = message.get("method").and_then(Value::as_str);
        let forgotten = response.status == 404
            && self.revision == Revision::V2025
            && method != Some("initialize");
        match carried {
            Some(stale) if forgotten => {
                drop(response);
                self.renew_session(&stale)?;
                post()
            }
            _ => Ok(response),
        }
    }

    /// Starts a new session in place of `stale`, unless another request already did. The
    /// `initialize` it sends gets the request timeout in all; if that passes, the renewal
    /// fails, and the next request to meet the forgotten session tries again.
    fn renew_session(&self, stale: &str) -> Result<(), ClientError> {
        let _one_at_a_time = self.renewing.lock();
        if self.session.lock().as_deref() != Some(stale) {
            return Ok(());
        }
        let Some(mut initialize) = self.initialize.lock().clone() else {
            return Err(ClientError::Protocol(
                "the server forgot the session before it was initialized".into(),
            ));
        };
        static RENEWALS: AtomicUsize = AtomicUsize::new(0);
        let n = RENEWALS.fetch_add(1, Ordering::Relaxed);
        let renewal = format!("session-renewal-{n}");
        initialize["id"] = Value::String(renewal.clone());
        let renewal_id = RequestId::String(renewal);
        // The forgotten session stays current until the new one exists: requests sent
        // meanwhile meet the same 404 and wait here for the renewal, rather than going
        // out without a session. So the renewal gets the request timeout in all, its
        // answer's event stream included: a server that never ends it must not hold
        // every request here for good (the next request to meet the 404 tries again).
        let link = self.within_request_timeout();
        let limit = link.idle.unwrap_or(self.idle);
        let response = self.post_with(&initialize, link)?;
        let session = response.header("Mcp-Session-Id").map(str::to_owned);
        let answer =
            read_response(response, &renewal_id).map_err(|e| self.io_error_after(e, limit))?;
        // The new session must speak the version this client asked for, as the first did
        // (the handshake refuses any other): it would not understand what follows.
        let asked = &initialize["params"]["protocolVersion"];
        if let Ok(result) = &answer.outcome {
            let settled = result.get("protocolVersion").unwrap_or(&Value::Null);
            if settled != asked {
                return Err(ClientError::Protocol(format!(
                    "the server renewed the forgotten session {stale} on protocol version \
                     {settled}, not {asked}"
                )));
            }
        }
        self.note_version(&answer);
        if let Err(error) = answer.outcome {
            return Err(ClientError::Rpc(error));
        }
        let Some(session) = session else {
            return Err(ClientError::Protocol(
                "the server answered a new initialize without a session".into(),
            ));
        };
        checked_session(&session)?;
        *self.session.lock() = Some(session.clone());
        self.shared.new_session(&session);
        let initialized = jsonrpc::notification("notifications/initialized", serde_json::json!({}));
        let sent = self.post(&initialized);
        // The event stream's reader goes on in the new session (it waits for this renewal
        // to end first), however the notification fared: the session is the current one
        // from now on.
        self.stream.renewed();
        let response = sent?;
        if !(200..300).contains(&response.status) {
            let status = response.status;
            let body = response.text().unwrap_or_default();
            return Err(ClientError::Http { status, body });
        }
        log::info!("mcp client: the server forgot session {stale}; continuing in {session}");
        Ok(())
    }

    /// Reads the answer to request `id` from `response`, routing the server requests and
    /// notifications it carries (an SSE answer may bring server requests first). A POST's
    /// response answers only the request it carried: a response there under another id
    /// is dropped (an error under another id, as a proxy may send, answers `id`).
    ///
    /// An event stream that ends without the answer, having given its events ids, is
    /// resumed with a `GET` (2025-11-25, see [`resume`]); `idle` is the read limit of the
    /// request's exchange until a response head comes.
    fn answer(
        &self,
        id: &RequestId,
        initialize: bool,
        idle: Option<Duration>,
        response: HttpResponse,
    ) -> Result<(), ClientError> {
        let status = response.status;
        let session = response.session.clone();
        if response.is_event_stream() {
            // An `initialize` goes out in no session: the one its answer's head offers is
            // the one a `GET` resuming its stream must name.
            let offered = (response.header("Mcp-Session-Id").filter(|_| initialize))
                .and_then(|offered| checked_session(offered).ok());
            let resume_in = session.clone().or_else(|| offered.map(str::to_owned));
            let mut resume = Resume::default();
            let outcome = self.answer_events(id, initialize, response, &mut resume);
            // Only a stream whose events had ids can be resumed, and only a session's
            // (2026-07-28 is stateless).
            let resumable = self.revision == Revision::V2025 && !resume.last_id.is_empty();
            let answered = match outcome {
                Ok(answered) => answered,
                // A stream that breaks off is resumed as one that ends (as a resumed one
                // is); an event too large to read is no passing trouble.
                Err(error) if resumable && error.kind() != io::ErrorKind::InvalidData => false,
                Err(error) => return Err(self.io_error(error)),
            };
            if answered {
                return Ok(());
            }
            if resumable {
                return self.resume_answer(id, initialize, idle, resume_in.as_deref(), resume);
            }
            // This exchange ended, not the connection: the next request gets a new one,
            // so this is no `Closed`.
            return Err(unanswered(id, ""));
        }
        let text = response.text().map_err(|e| self.io_error(e))?;
        let Ok(value) = serde_json::from_str::<Value>(&text) else {
            return Err(ClientError::Http { status, body: text });
        };
        // The HTTP exchange of this request is over, so whatever the body holds, the
        // request must end here: with its answer, or with an error saying why there is none.
        let no_answer = |text: String| {
            if (200..300).contains(&status) {
                ClientError::Protocol(format!(
                    "HTTP response carried no answer to request {id}: {text}"
                ))
            } else {
                ClientError::Http { status, body: text }
            }
        };
        match jsonrpc::classify(value.clone()) {
            Ok(Message::Response(response)) if &response.id == id => {
                if initialize {
                    self.note_version(&response);
                }
                self.shared
                    .incoming_from(Message::Response(response), session.as_deref());
                Ok(())
            }
            // An error under another id (a proxy's placeholder, say) still answers the
            // request this POST carried: no other request's answer comes on its response.
            Ok(Message::Response(Response {
                outcome: Err(error),
                ..
            })) => {
                self.shared.complete(id, Err(ClientError::Rpc(error)));
                Ok(())
            }
            // A success under another id answers nothing: no other request's answer
            // comes on this POST's response.
            Ok(Message::Response(response)) => {
                log::warn!(
                    "mcp client: the answer to request {id} carried a response to {}; dropped",
                    response.id
                );
                Err(no_answer(text))
            }
            Ok(message) => {
                self.shared.incoming_from(message, session.as_deref());
                Err(no_answer(text))
            }
            // An error the transport answered before any request id was read.
            Err(_)
                if value.get("error").is_some() && value.get("id").is_none_or(Value::is_null) =>
            {
                let error = RpcError::from_value(&value["error"]);
                self.shared.complete(id, Err(ClientError::Rpc(error)));
                Ok(())
            }
            Err(_) => Err(no_answer(text)),
        }
    }

    /// Reads the event stream `response` carries (a POST's answer, or a `GET` resuming
    /// it) until it answers request `id` (then `true`) or ends, routing the server requests
    /// and notifications on it; `resume` keeps its last event id and `retry:` time. Only
    /// `id` is answered there: a response to another id is dropped.
    fn answer_events(
        &self,
        id: &RequestId,
        initialize: bool,
        response: HttpResponse,
        resume: &mut Resume,
    ) -> io::Result<bool> {
        response.wait_for_events()?;
        let session = response.session.as_deref();
        let mut body = response.body;
        let mut answered = false;
        read_events_resuming(&mut body, resume, |data| {
            match jsonrpc::parse_message(data) {
                Ok(Message::Response(r)) if &r.id == id => {
                    answered = true;
                    if initialize {
                        self.note_version(&r);
                    }
                    self.shared.incoming_from(Message::Response(r), session);
                }
                // Only this POST's request is answered on its response: another id
                // is a broken server's (or a proxy's mix-up), and must not complete
                // a request still waiting for its own answer.
                Ok(Message::Response(r)) => log::warn!(
                    "mcp client: the answer to request {id} carried a response to {}; \
                     dropped",
                    r.id
                ),
                Ok(message) => self.shared.incoming_from(message, session),
                // A malformed answer to this request ends it (the stream may stay open
                // for as long as the server likes: no read timeout applies).
                Err(rejected) if rejected.response && rejected.id.as_ref() == Some(id) => {
                    answered = true;
                    self.shared
                        .complete(id, Err(malformed_response(id, &rejected.error)));
                }
                Err(rejected) if rejected.response => log::warn!(
                    "mcp client: the answer to request {id} carried a malformed response \
                     to {:?}; dropped",
                    rejected.id
                ),
                Err(rejected) => self.shared.malformed_from(rejected, session),
            }
            !answered
        })?;
        Ok(answered)
    }
}

/// The error of request `id` whose event stream ended without its answer, `why` saying
/// more (after a comma) if resuming it failed. An `Io` error, not `Closed`: the exchange
/// ended, not the connection (the next request gets a new one).
fn unanswered(id: &RequestId, why: &str) -> ClientError {
    ClientError::Io(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the server ended its event stream without answering request {id}{why}"),
    ))
}

impl Transport for HttpTransport {
    fn send_request(&self, id: &RequestId, message: Value) -> Result<(), ClientError> {
        let inner = self.inner.clone();
        let id = id.clone();
        std::thread::Builder::new()
            .name("mcp-client-http".into())
            .spawn(move || inner.request(&id, &message))
            .map(|_| ())
            .map_err(ClientError::Io)
    }

    fn abandon(&self, id: &RequestId) {
        self.inner.open.abandon(id);
        // It may be waiting to resume its event stream, with no connection to shut down.
        self.inner.stream.abandoned();
    }

    fn abandon_ends_exchange(&self) -> bool {
        true
    }

    /// POSTs a notification or an answer: within the request timeout, and done once the
    /// status says it was accepted. The body of a 2xx (the server should send none, but
    /// may send an event stream that never ends) is not read: the connection is closed
    /// (every request says `Connection: close`). An error status's body is read for the
    /// error, within what is left of the request timeout.
    fn send(&self, message: Value) -> Result<(), ClientError> {
        let response = self.inner.post_in_session(&message, None)?;
        let status = response.status;
        if (200..300).contains(&status) {
            return Ok(());
        }
        // The body is read with the limit the message was sent with.
        let limit = self.inner.link(&message).idle.unwrap_or(self.inner.idle);
        let text = response
            .text()
            .map_err(|e| self.inner.io_error_after(e, limit))?;
        Err(ClientError::Http { status, body: text })
    }

    /// [`send`](Self::send), for the answer to a server request that came in `session`.
    /// The answer goes to that session only: once a renewal replaced it (the server forgot
    /// it), the request is gone with it, and in the new session, whose requests are
    /// numbered afresh, the answer's id could name another request. So an answer is
    /// dropped if its session is no longer current, and one that meets the 404 of a
    /// forgotten session is not sent again in a new one.
    fn answer(&self, message: Value, session: Option<&str>) -> Result<(), ClientError> {
        let Some(from) = session.filter(|_| self.inner.revision == Revision::V2025) else {
            return self.send(message);
        };
        let link = self.inner.link(&message);
        let limit = link.idle.unwrap_or(self.inner.idle);
        if self.inner.session.lock().as_deref() != Some(from) {
            return Err(ClientError::closed(format!(
                "the session {from} the request came in was replaced"
            )));
        }
        // In `from` even if a renewal comes meanwhile (its 404 then ends the answer).
        let response = self.inner.post_as(&message, link, Some(from))?;
        let status = response.status;
        if (200..300).contains(&status) {
            return Ok(());
        }
        let text = response
            .text()
            .map_err(|e| self.inner.io_error_after(e, limit))?;
        Err(ClientError::Http { status, body: text })
    }

    fn ready(&self) {
        if self.inner.revision != Revision::V2025 {
            return;
        }
        let inner = self.inner.clone();
        let spawned = std::thread::Builder::new()
            .name("mcp-client-events".into())
            .spawn(move || inner.event_stream());
        if let Err(error) = spawned {
            log::warn!("mcp client: cannot start the event stream reader: {error}");
        }
    }

    fn shutdown(&self) {
        // First the event stream and every request still under way: nobody waits for
        // them any more, and their threads end as soon as their connections do (the event
        // stream's reader as soon as it is woken, if it is waiting to open it again).
        self.inner.open.close_all();
        self.inner.stream.closed();
        let session = self.inner.session.lock().clone();
        if let Some(session) = session {
            let headers = [
                ("Mcp-Session-Id", session),
                ("MCP-Protocol-Version", self.inner.version()),
            ];
            let link = Link {
                connect: DELETE_TIMEOUT,
                idle: Some(DELETE_TIMEOUT),
                deadline: Instant::now().checked_add(DELETE_TIMEOUT),
                open: None,
                owner: None,
            };
            // The status line and head are all we wait for; the body is not read.
            if let Err(error) = exchange(&self.inner.endpoint, "DELETE", &headers, &[], link) {
                log::info!("mcp client: the session's DELETE failed: {error}");
            }
        }
    }
}

/// A fuzzing hook, not API: reads `bytes` as a server's answer to the POST of request `id`
/// (head, framing, then the JSON-RPC response in a JSON body or an event stream, as
/// [`read_response`] does), then the same bytes' body as the `GET` event stream would be
/// read. Returns whether a response to `id` was found.
#[doc(hidden)]
pub fn fuzz_response(bytes: &[u8], id: i64) -> bool {
    let id = RequestId::Number(id);
    let found = match parse_head(io::Cursor::new(bytes.to_vec())) {
        Ok((status, headers, body)) => {
            let content_type = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("Content-Type"))
                .map(|(_, v)| v.as_str());
            let events = is_event_stream(content_type);
            response_in(status, events, body, &id).is_ok()
        }
        Err(_) => false,
    };
    if let Ok((_, _, mut body)) = parse_head(io::Cursor::new(bytes.to_vec())) {
        let mut resume = Resume::default();
        let _ = read_events_resuming(&mut body, &mut resume, |data| {
            let _ = jsonrpc::parse_message(data);
            true
        });
        assert!(resume.last_id.len() <= MAX_EVENT_ID && header_safe(&resume.last_id));
    }
    found
}

#[cfg(test)]
mod tests;
