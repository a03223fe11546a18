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
//! those waits.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::Value;

use super::transport::{malformed_response, Shared, Transport, MAX_SERVER_MESSAGE};
use super::ClientError;
use crate::protocol::jsonrpc::{self, Message, RequestId, Response, RpcError};
use crate::protocol::lines::{read_line, Line};
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

/// How long the `GET` event stream may stay silent before it is taken for dead and opened
/// again: a NAT or proxy that drops an idle connection without a word leaves a half-open
/// socket that would otherwise be read forever, and the server's requests for the session
/// with it. A server that sends keep-alives (ours does every 15 s) never comes close.
const STREAM_SILENCE: Duration = Duration::from_secs(300);

/// Connect, read and write limit of the `DELETE` that ends a session, and of the whole
/// exchange: it is sent while the client is dropped, which must not hang on a server that
/// never answers it (or trickles its answer).
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the client waits before it opens the `GET` stream again after a healthy stream
/// ended (see [`HEALTHY_STREAM`]), unless the server asked for another wait with `retry:`.
/// The wait doubles after each stream that was not healthy and each attempt that failed,
/// up to [`MAX_REOPEN_WAIT`], so a server or proxy that keeps ending the stream at once is
/// not hammered, while one that ends a long-lived stream (a proxy's idle limit) costs
/// little.
const FIRST_REOPEN_WAIT: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to open the `GET` stream (a server's `retry:`
/// may ask for a longer one).
const MAX_REOPEN_WAIT: Duration = Duration::from_secs(5);

/// A `GET` stream that stayed open this long, or brought a message, was healthy: its end
/// starts the reopen waits afresh.
const HEALTHY_STREAM: Duration = Duration::from_secs(10);

/// Where the MCP endpoint is.
#[derive(Clone, Debug)]
struct Endpoint {
    /// `host:port`, for connecting and for the `Host` header.
    authority: String,
    /// The request target (`/mcp`).
    path: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Endpoint, ClientError> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(ClientError::Unsupported(format!(
                "'{url}': only http:// URLs are supported (no TLS)"
            )));
        };
        if rest
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(ClientError::Unsupported(format!(
                "{url:?}: a URL with whitespace or control characters"
            )));
        }
        let (authority, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(ClientError::Unsupported(format!("'{url}' names no host")));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.contains(']'))
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint {
            authority,
            path: path.to_owned(),
        })
    }

    fn connect(&self, timeout: Duration) -> io::Result<TcpStream> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the host has no address");
        for addr in self.authority.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => return Ok(stream),
                Err(error) => last = error,
            }
        }
        Err(last)
    }
}

/// Connections of exchanges under way, so that shutting the client down ends them all:
/// their threads would otherwise wait on servers that may never answer. Once closed, no
/// new exchange starts.
#[derive(Default)]
struct OpenConnections {
    state: Mutex<OpenState>,
}

#[derive(Default)]
struct OpenState {
    next: u64,
    /// Each connection, with the request whose exchange it carries, if any.
    streams: HashMap<u64, (TcpStream, Option<RequestId>)>,
    closed: bool,
}

/// One connection's place in [`OpenConnections`], given up when dropped.
struct OpenConnection {
    set: Arc<OpenConnections>,
    key: u64,
}

impl OpenConnections {
    /// Keeps `stream` among the open connections, as carrying request `owner`'s exchange.
    fn add(
        self: &Arc<Self>,
        stream: &TcpStream,
        owner: Option<&RequestId>,
    ) -> io::Result<OpenConnection> {
        let copy = stream.try_clone()?;
        let mut state = self.state.lock();
        if state.closed {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the client is shutting down",
            ));
        }
        let key = state.next;
        state.next += 1;
        state.streams.insert(key, (copy, owner.cloned()));
        Ok(OpenConnection {
            set: self.clone(),
            key,
        })
    }

    fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Shuts every open connection down: a thread blocked on one sees it end at once.
    fn close_all(&self) {
        let streams = {
            let mut state = self.state.lock();
            state.closed = true;
            std::mem::take(&mut state.streams)
        };
        for (stream, _) in streams.into_values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Shuts the connections of request `id`'s exchange down: nobody waits for its
    /// answer any more, so its thread ends as soon as they do.
    fn abandon(&self, id: &RequestId) {
        let state = self.state.lock();
        for (stream, _) in state
            .streams
            .values()
            .filter(|(_, o)| o.as_ref() == Some(id))
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.set.state.lock().streams.remove(&self.key);
    }
}

/// What the `GET` stream's reader shares with session renewal and shutdown, which both
/// wake it from its waits.
#[derive(Default)]
struct StreamControl {
    state: Mutex<StreamState>,
    wake: Condvar,
}

#[derive(Default)]
struct StreamState {
    /// How many times a new session replaced a forgotten one: a stream opened before a
    /// renewal belongs to the forgotten session.
    renewals: u64,
    /// The connection of the stream being read, for a renewal to end it: the reader then
    /// opens the new session's stream, and a session never has two.
    socket: Option<TcpStream>,
}

/// Why a wait of the `GET` stream's reader ended.
#[derive(Debug, PartialEq)]
enum Wake {
    /// The client shut down: the reader ends.
    Closed,
    /// A new session replaced the one the reader knew.
    Renewed,
    /// The wait is over.
    TimedOut,
}

impl StreamControl {
    /// The number of renewals so far.
    fn renewals(&self) -> u64 {
        self.state.lock().renewals
    }

    /// A new session replaced a forgotten one: the stream of the forgotten one ends, and
    /// the reader opens the new one's.
    fn renewed(&self) {
        let mut state = self.state.lock();
        state.renewals += 1;
        if let Some(socket) = state.socket.take() {
            let _ = socket.shutdown(Shutdown::Both);
        }
        self.wake.notify_all();
    }

    /// Wakes the reader once `open` is closed (call after [`OpenConnections::close_all`]).
    fn closed(&self) {
        // Notifying under the lock the reader checks `open` under: a reader that saw
        // `open` still open is already waiting, so the notification reaches it.
        let _state = self.state.lock();
        self.wake.notify_all();
    }

    /// Waits until `open` is closed, a renewal comes after the `seen`th, or `wait` is
    /// over (`None`: no limit).
    fn pause(&self, open: &OpenConnections, seen: u64, wait: Option<Duration>) -> Wake {
        // A `retry:` too long to add to the clock is waited for as having no limit.
        let deadline = wait.and_then(|wait| Instant::now().checked_add(wait));
        let mut state = self.state.lock();
        loop {
            if open.is_closed() {
                return Wake::Closed;
            }
            if state.renewals != seen {
                return Wake::Renewed;
            }
            match deadline {
                Some(at) => {
                    if self.wake.wait_until(&mut state, at).timed_out() {
                        return Wake::TimedOut;
                    }
                }
                None => self.wake.wait(&mut state),
            }
        }
    }
}

/// How an exchange treats its connection.
struct Link<'a> {
    connect: Duration,
    /// Read and write timeout of the connection (see [`IDLE_TIMEOUT`]); `None` waits as
    /// long as the server takes.
    idle: Option<Duration>,
    /// When the whole exchange (connecting, sending, reading the head and whatever of the
    /// body is read) must be over, however steadily the server trickles; `None`: no such
    /// bound.
    deadline: Option<Instant>,
    /// Where the connection is kept while the exchange is under way.
    open: Option<&'a Arc<OpenConnections>>,
    /// The request whose exchange this is, and where it waits for its answer: once it is
    /// kept among the open connections, an exchange nobody waits for any more ends (see
    /// [`OpenConnections::abandon`]).
    owner: Option<(&'a RequestId, &'a Shared)>,
}

/// A response whose head was read; the body is read from `body`.
struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Box<dyn BufRead + Send>,
    /// The connection, to lift its read timeout for an event-stream body.
    socket: TcpStream,
    /// The session the request named (`Mcp-Session-Id`), if any: what the server sends on
    /// this response belongs to it.
    session: Option<String>,
    /// Keeps the connection among the open ones until the response is dropped.
    _open: Option<OpenConnection>,
}

impl HttpResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn is_event_stream(&self) -> bool {
        is_event_stream(self.header("Content-Type"))
    }

    /// An event stream may stay silent as long as the server likes (see [`IDLE_TIMEOUT`]).
    fn wait_for_events(&self) -> io::Result<()> {
        self.socket.set_read_timeout(None)
    }

    fn text(self) -> io::Result<String> {
        body_text(self.body)
    }
}

/// Whether a `Content-Type` names an event stream.
fn is_event_stream(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"))
}

/// A body read whole as text, at most [`MAX_SERVER_MESSAGE`] bytes of it.
fn body_text(mut body: impl Read) -> io::Result<String> {
    let mut bytes = Vec::new();
    (&mut body)
        .take(MAX_SERVER_MESSAGE as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > MAX_SERVER_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the server's answer is larger than {MAX_SERVER_MESSAGE} bytes"),
        ));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Longest HTTP head line or chunk-size line accepted from a server.
const MAX_HEAD_LINE: usize = 64 * 1024;

/// One line (without its line ending) from a server, at most `max` bytes: `None` when the
/// input ended, an error when the line is longer (a broken or hostile server must not make
/// the client allocate without bound).
fn line_of(reader: &mut impl BufRead, max: usize) -> io::Result<Option<String>> {
    let mut buf = Vec::new();
    match read_line(reader, &mut buf, max)? {
        Line::End => Ok(None),
        Line::TooLong => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the server sent a line longer than {max} bytes"),
        )),
        Line::Complete => {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
        }
    }
}

/// Whether `value` may go into a header as it is: no control character but HTAB.
fn header_safe(value: &str) -> bool {
    !value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f)
}

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

/// A connection whose reads and writes end by a deadline (see [`Link::deadline`]): each
/// one gets the idle limit, cut to what is left until then.
struct Bounded {
    stream: TcpStream,
    idle: Option<Duration>,
    /// The deadline, and how long the exchange had in all (for the error).
    deadline: Option<(Instant, Duration)>,
}

impl Bounded {
    /// Sets the timeout of the next read (or write) by the deadline; an error once it
    /// passed.
    fn arm(&self, read: bool) -> io::Result<()> {
        let Some((deadline, total)) = self.deadline else {
            return Ok(());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the exchange was not over within {total:?}"),
            ));
        }
        let timeout = Some(self.idle.map_or(left, |idle| idle.min(left)));
        if read {
            self.stream.set_read_timeout(timeout)
        } else {
            self.stream.set_write_timeout(timeout)
        }
    }

    /// `error`, said to be the deadline's if it passed.
    fn past(&self, error: io::Error) -> io::Error {
        match self.deadline {
            Some((deadline, total))
                if Instant::now() >= deadline
                    && matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
            {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the exchange was not over within {total:?}"),
                )
            }
            _ => error,
        }
    }
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm(true)?;
        (&self.stream).read(buf).map_err(|e| self.past(e))
    }
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm(false)?;
        (&self.stream).write(buf).map_err(|e| self.past(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        (&self.stream).flush()
    }
}

/// Sends one request and reads the response head.
fn exchange(
    endpoint: &Endpoint,
    method: &str,
    headers: &[(&str, String)],
    body: &[u8],
    link: Link<'_>,
) -> io::Result<HttpResponse> {
    // A header value comes from message content (a tool name, a task id, a method) or from
    // the server (a session id): CR, LF or NUL in it would add headers or end the head.
    if let Some((name, _)) = headers.iter().find(|(_, value)| !header_safe(value)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to send the {name} header: its value holds a control character"),
        ));
    }
    let started = Instant::now();
    let connect = match link.deadline {
        Some(deadline) => link
            .connect
            .min(deadline.saturating_duration_since(started))
            .max(Duration::from_millis(1)),
        None => link.connect,
    };
    let stream = endpoint.connect(connect)?;
    stream.set_read_timeout(link.idle)?;
    stream.set_write_timeout(link.idle)?;
    let owner = link.owner.map(|(id, _)| id);
    let open = link.open.map(|open| open.add(&stream, owner)).transpose()?;
    // Abandoned before its connection was kept (where abandoning would have shut it
    // down): it ends here.
    if let Some((id, shared)) = link.owner {
        if !shared.is_pending(id) {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                format!("nobody waits for request {id} any more"),
            ));
        }
    }
    let socket = stream.try_clone()?;
    let mut stream = Bounded {
        stream,
        idle: link.idle,
        deadline: link
            .deadline
            .map(|deadline| (deadline, deadline.saturating_duration_since(started))),
    };
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        endpoint.path, endpoint.authority
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let mut response = read_head(BufReader::new(stream), socket)?;
    response._open = open;
    Ok(response)
}

fn read_head(reader: BufReader<Bounded>, socket: TcpStream) -> io::Result<HttpResponse> {
    let (status, headers, body) = parse_head(reader)?;
    Ok(HttpResponse {
        status,
        headers,
        body,
        socket,
        session: None,
        _open: None,
    })
}

/// A response's status, header fields and body (framed as its head says), read off
/// `reader`.
type Parsed = (u16, Vec<(String, String)>, Box<dyn BufRead + Send>);

fn parse_head(mut reader: impl BufRead + Send + 'static) -> io::Result<Parsed> {
    let (status, headers) = loop {
        let (status, headers) = read_one_head(&mut reader)?;
        // An interim response (100 Continue, 103 Early Hints) comes before the final one,
        // which HTTP/1.1 clients must read past even if they asked for none. (A 101 would
        // switch protocols, which the client never asks for: it stays the answer.)
        if !(100..200).contains(&status) || status == 101 {
            break (status, headers);
        }
    };
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _): &&(String, String)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let chunked =
        find("Transfer-Encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let length = find("Content-Length").and_then(|v| v.parse::<u64>().ok());
    let body: Box<dyn BufRead + Send> = if chunked {
        Box::new(BufReader::new(Chunked::new(reader)))
    } else if let Some(length) = length {
        Box::new(reader.take(length))
    } else {
        Box::new(reader)
    };
    Ok((status, headers, body))
}

/// One response head (the status and the header fields), read off `reader`.
fn read_one_head(reader: &mut impl BufRead) -> io::Result<(u16, Vec<(String, String)>)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let Some(status_line) = line_of(reader, MAX_HEAD_LINE)? else {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection before answering",
        ));
    };
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("malformed HTTP status line"))?;
    let mut headers = Vec::new();
    loop {
        let Some(line) = line_of(reader, MAX_HEAD_LINE)? else {
            return Err(bad("the connection ended inside the HTTP head"));
        };
        let text = line.trim_end();
        if text.is_empty() {
            break;
        }
        if headers.len() >= 256 {
            return Err(bad("the server sent more than 256 HTTP headers"));
        }
        if let Some((name, value)) = text.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    Ok((status, headers))
}

/// Decodes a chunked body.
struct Chunked<R> {
    inner: R,
    left: u64,
    /// The last chunk's data was read, not yet the line ending after it: it is checked
    /// before the next size line is read (not at once, so that a chunk's data reaches
    /// the reader without waiting for more bytes).
    ending_due: bool,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    fn new(inner: R) -> Chunked<R> {
        Chunked {
            inner,
            left: 0,
            ending_due: false,
            done: false,
        }
    }

    /// Reads the CRLF (or bare LF) that must follow a chunk's data: anything else means
    /// the data was longer than its size line said, and the body cannot be framed.
    fn chunk_ending(&mut self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        let mut next = |inner: &mut R| match inner.read_exact(&mut byte) {
            Ok(()) => Ok(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection ended inside a chunked body",
            )),
            Err(e) => Err(e),
        };
        let mut end = next(&mut self.inner)?;
        if end == b'\r' {
            end = next(&mut self.inner)?;
        }
        if end != b'\n' {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "malformed chunked body: a chunk's data is longer than its size line says \
                 (no CRLF after it)",
            ));
        }
        Ok(())
    }
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            if self.ending_due {
                self.chunk_ending()?;
                self.ending_due = false;
            }
            let Some(line) = line_of(&mut self.inner, MAX_HEAD_LINE)? else {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection ended inside a chunked body",
                ));
            };
            let size = line.trim().split(';').next().unwrap_or("");
            self.left = u64::from_str_radix(size.trim(), 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "malformed chunk size"))?;
            if self.left == 0 {
                // Trailers, up to the empty line.
                while let Some(trailer) = line_of(&mut self.inner, MAX_HEAD_LINE)? {
                    if trailer.trim().is_empty() {
                        break;
                    }
                }
                self.done = true;
                return Ok(0);
            }
        }
        // A chunk may be larger than `usize` on a 32-bit target (4 GiB and more): cut
        // to 32 bits, its size could come out as 0 (a read of nothing, taken for the
        // connection's end) or a few bytes.
        let want = usize::try_from(self.left).map_or(buf.len(), |left| buf.len().min(left));
        let read = self.inner.read(&mut buf[..want])?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection ended inside a chunk",
            ));
        }
        self.left -= read as u64;
        self.ending_due = self.left == 0;
        Ok(read)
    }
}

/// Reads server-sent events, calling `on_data` with each event's data; stops when the
/// stream ends or `on_data` returns false.
fn read_events(body: &mut dyn BufRead, on_data: impl FnMut(&str) -> bool) -> io::Result<()> {
    read_events_resuming(body, &mut Resume::default(), on_data)
}

/// Longest event id kept for `Last-Event-ID`: a longer one is ignored, as is one that could
/// not go into a header.
const MAX_EVENT_ID: usize = 1024;

/// What an event stream said about opening it again, as the SSE rules keep it across the
/// stream's events (and across its reopenings).
#[derive(Default, Debug, PartialEq)]
struct Resume {
    /// The last event id (`id:`), sent back in `Last-Event-ID` so that a resumable server
    /// can replay what came after it; empty when there is none.
    last_id: String,
    /// How long the server asks the client to wait before opening the stream again
    /// (`retry:`, in milliseconds).
    retry: Option<Duration>,
}

/// One line of an event stream (without its line ending), at most `max` bytes: `None`
/// when the stream ended (a last line with no line ending is dropped, as SSE drops an
/// event the stream ended in), an error when the line is longer.
///
/// SSE ends a line with CRLF, LF or a bare CR. A line is returned as soon as its CR is
/// read, without waiting for the next byte (a server may end an event with CR CR and
/// then stay silent): `after_cr` remembers that the last line ended in CR, so that an LF
/// the next read starts with (the rest of a CRLF split between two reads) is skipped.
fn event_line(
    input: &mut dyn BufRead,
    after_cr: &mut bool,
    max: usize,
) -> io::Result<Option<String>> {
    let mut buf = Vec::new();
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(None);
        }
        if std::mem::take(after_cr) && chunk[0] == b'\n' {
            input.consume(1);
            continue;
        }
        let end = chunk.iter().position(|&b| b == b'\n' || b == b'\r');
        let taken = end.unwrap_or(chunk.len());
        if buf.len() + taken > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the server sent a line longer than {max} bytes"),
            ));
        }
        buf.extend_from_slice(&chunk[..taken]);
        let Some(end) = end else {
            input.consume(taken);
            continue;
        };
        *after_cr = chunk[end] == b'\r';
        input.consume(end + 1);
        return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
    }
}

/// [`read_events`], keeping the stream's event id and reconnection time in `resume`.
fn read_events_resuming(
    body: &mut dyn BufRead,
    resume: &mut Resume,
    mut on_data: impl FnMut(&str) -> bool,
) -> io::Result<()> {
    let mut data = String::new();
    // The SSE "last event ID buffer": it becomes the stream's last event id only when
    // its event is dispatched (at the blank line), whether or not that event has data.
    let mut id = resume.last_id.clone();
    let mut after_cr = false;
    loop {
        let Some(line) = event_line(body, &mut after_cr, MAX_SERVER_MESSAGE)? else {
            return Ok(());
        };
        let text = line.as_str();
        if text.is_empty() {
            resume.last_id.clone_from(&id);
            if !data.is_empty() {
                let keep_going = on_data(&data);
                data.clear();
                if !keep_going {
                    return Ok(());
                }
            }
            continue;
        }
        if let Some(value) = text.strip_prefix("data:") {
            if data.len() + value.len() > MAX_SERVER_MESSAGE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the server sent an event larger than {MAX_SERVER_MESSAGE} bytes"),
                ));
            }
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        } else if text == "id" {
            // A field with no colon has an empty value: the stream resets its event id.
            id.clear();
        } else if let Some(value) = text.strip_prefix("id:") {
            let value = value.strip_prefix(' ').unwrap_or(value);
            // SSE ignores an id with NUL; an id the client could not send back in a
            // header is no use to it either.
            if value.len() <= MAX_EVENT_ID && header_safe(value) {
                value.clone_into(&mut id);
            }
        } else if let Some(value) = text.strip_prefix("retry:") {
            let value = value.strip_prefix(' ').unwrap_or(value);
            if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(ms) = value.parse() {
                    resume.retry = Some(Duration::from_millis(ms));
                }
            }
        }
        // `event:` and `:` comments need nothing from us.
    }
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
    ) -> Result<HttpTransport, ClientError> {
        Ok(HttpTransport {
            inner: Arc::new(Inner {
                endpoint: Endpoint::parse(url)?,
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

    /// How the `GET` stream connects: silent for long only if the connection is dead
    /// (see [`STREAM_SILENCE`]).
    fn stream_link(&self) -> Link<'_> {
        self.link_within(Some(self.stream_silence), None)
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
        let outcome = self
            .post_in_session(message, Some(id))
            .and_then(|response| self.answer(id, initialize, response));
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
    fn answer(
        &self,
        id: &RequestId,
        initialize: bool,
        response: HttpResponse,
    ) -> Result<(), ClientError> {
        let status = response.status;
        let session = response.session.clone();
        if response.is_event_stream() {
            response.wait_for_events().map_err(ClientError::io)?;
            let mut body = response.body;
            let mut answered = false;
            read_events(&mut body, |data| {
                match jsonrpc::parse_message(data) {
                    Ok(Message::Response(r)) if &r.id == id => {
                        answered = true;
                        if initialize {
                            self.note_version(&r);
                        }
                        self.shared
                            .incoming_from(Message::Response(r), session.as_deref());
                    }
                    // Only this POST's request is answered on its response: another id
                    // is a broken server's (or a proxy's mix-up), and must not complete
                    // a request still waiting for its own answer.
                    Ok(Message::Response(r)) => log::warn!(
                        "mcp client: the answer to request {id} carried a response to {}; \
                         dropped",
                        r.id
                    ),
                    Ok(message) => self.shared.incoming_from(message, session.as_deref()),
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
                    Err(rejected) => self.shared.malformed_from(rejected, session.as_deref()),
                }
                !answered
            })
            .map_err(|e| self.io_error(e))?;
            if !answered {
                // This exchange ended, not the connection: the next request gets a new
                // one (a server may end a resumable stream early on purpose), so this is
                // no `Closed`.
                return Err(ClientError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the server ended its event stream without answering request {id}"),
                )));
            }
            return Ok(());
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

    /// Reads the session's `GET` event stream, and opens it again each time it ends (the
    /// server, or a proxy with an idle limit, may end it at any time, and the server's
    /// messages for the session would otherwise be lost), for as long as the client is
    /// open. It stops for good when the server offers no stream. There is one reader per
    /// client: after a session renewal it goes on with the new session, so a session never
    /// has two streams, and a forgotten one is not asked for its stream again.
    fn event_stream(self: &Arc<Self>) {
        let mut resume = Resume::default();
        // The renewal count `resume.last_id` belongs to: event ids are the old session's.
        let mut resume_for = 0;
        // Failed attempts and unhealthy streams since the last healthy one.
        let mut failures = 0u32;
        let mut warned = false;
        loop {
            let (session, renewals) = {
                // A renewal under way ends before the reader asks for the new session's
                // stream: the server hears `notifications/initialized` first.
                let _renewal_done = self.renewing.lock();
                (self.session.lock().clone(), self.stream.renewals())
            };
            if renewals != resume_for {
                resume.last_id.clear();
                resume_for = renewals;
            }
            let wait = match self.read_stream(session.as_deref(), renewals, &mut resume) {
                Attempt::Ended { healthy } => {
                    if self.open.is_closed() {
                        return;
                    }
                    warned = false;
                    failures = if healthy {
                        0
                    } else {
                        failures.saturating_add(1)
                    };
                    if self.stream.renewals() == renewals {
                        log::info!("mcp client: the server ended the event stream; reopening it");
                    }
                    Some(reopen_wait(resume.retry, failures))
                }
                Attempt::NoStream => return,
                Attempt::SessionGone => {
                    // The renewal path owns a forgotten session (a request meeting the
                    // same 404 starts a new one): wait for it, not to GET in vain.
                    log::info!(
                        "mcp client: the server no longer knows session {}; the event \
                         stream waits for a new session",
                        session.as_deref().unwrap_or_default()
                    );
                    None
                }
                Attempt::Renewed => continue,
                Attempt::Failed(error) => {
                    if self.open.is_closed() {
                        return;
                    }
                    failures = failures.saturating_add(1);
                    let wait = reopen_wait(resume.retry, failures);
                    if warned {
                        log::debug!(
                            "mcp client: cannot open the event stream: {error}; trying again \
                             in {wait:?}"
                        );
                    } else {
                        log::warn!(
                            "mcp client: cannot open the event stream: {error}; trying again \
                             until the client closes"
                        );
                        warned = true;
                    }
                    Some(wait)
                }
            };
            match self.stream.pause(&self.open, renewals, wait) {
                Wake::Closed => return,
                // The new session's stream is asked for at once.
                Wake::Renewed => failures = 0,
                Wake::TimedOut => {}
            }
        }
    }

    /// Opens the `GET` stream once, in `session` (current after `renewals` renewals), and
    /// reads it until it ends.
    fn read_stream(&self, session: Option<&str>, renewals: u64, resume: &mut Resume) -> Attempt {
        let mut headers = vec![
            ("Accept", "text/event-stream".to_owned()),
            ("MCP-Protocol-Version", self.version()),
        ];
        if let Some(session) = session {
            headers.push(("Mcp-Session-Id", session.to_owned()));
        }
        if !resume.last_id.is_empty() {
            headers.push(("Last-Event-ID", resume.last_id.clone()));
        }
        // Once the client shuts down, the connection is refused a place among the open ones
        // (or shut down with them), so a stream opened late never outlives the client.
        let response = match exchange(&self.endpoint, "GET", &headers, &[], self.stream_link()) {
            Ok(response) => response,
            Err(error) => return Attempt::Failed(error),
        };
        if response.status == 404 && session.is_some() {
            return Attempt::SessionGone;
        }
        if response.status == 409 {
            // A server allowing one stream per session may not have noticed yet that the
            // previous one is gone (a proxy cut it, say): it will, at its next write to it.
            // (Ours lets a new stream replace the old one.)
            return Attempt::Failed(io::Error::other(
                "HTTP 409: the server still holds the session's previous stream",
            ));
        }
        if matches!(response.status, 408 | 429 | 500..=599) {
            // Passing trouble (a proxy whose backend restarts, a busy server): the very
            // case reopening is for.
            return Attempt::Failed(io::Error::other(format!(
                "HTTP {}: the server cannot open the stream now",
                response.status
            )));
        }
        if !(200..300).contains(&response.status) || !response.is_event_stream() {
            log::info!(
                "mcp client: the server offers no event stream (HTTP {})",
                response.status
            );
            return Attempt::NoStream;
        }
        // Unlike a POST's event stream (`wait_for_events`), this one keeps its read timeout
        // from `stream_link`: it is never silent for long while alive.
        {
            let mut state = self.stream.state.lock();
            if state.renewals != renewals {
                // A renewal came while this stream opened: it is the forgotten session's.
                return Attempt::Renewed;
            }
            match response.socket.try_clone() {
                Ok(socket) => state.socket = Some(socket),
                Err(error) => return Attempt::Failed(error),
            }
        }
        let opened = Instant::now();
        let mut delivered = false;
        let mut body = response.body;
        let read = read_events_resuming(&mut body, resume, |data| {
            delivered = true;
            self.shared.incoming_text_from(data, session);
            true
        });
        self.stream.state.lock().socket = None;
        match read {
            _ if self.open.is_closed() => {}
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                log::info!(
                    "mcp client: the event stream was silent for {:?}; taking its connection \
                     for dead",
                    self.stream_silence
                );
            }
            Err(error) => log::debug!("mcp client: the event stream broke off: {error}"),
            Ok(()) => {}
        }
        Attempt::Ended {
            healthy: delivered || opened.elapsed() >= HEALTHY_STREAM,
        }
    }
}

/// How one opening of the `GET` stream went.
enum Attempt {
    /// The stream was read until it ended; `healthy` as [`HEALTHY_STREAM`] says.
    Ended { healthy: bool },
    /// The server offers no stream (405, another 4xx, or a 2xx that is not an event
    /// stream): the reader stops for good.
    NoStream,
    /// 404: the server no longer knows the session.
    SessionGone,
    /// A renewal came while the stream opened, which was then dropped.
    Renewed,
    /// The stream could not be opened (no connection, no answer, a 409 while the server
    /// still holds the previous one, a 408, 429 or 5xx): tried again after a wait.
    Failed(io::Error),
}

/// The wait before opening the `GET` stream again after `failures` failed attempts or
/// unhealthy streams in a row: the server's `retry` time (or [`FIRST_REOPEN_WAIT`]),
/// doubled for each failure, up to [`MAX_REOPEN_WAIT`] (or `retry` if longer). Once
/// something failed the base is at least [`FIRST_REOPEN_WAIT`]: a `retry` of 0 (or a few
/// ms) would otherwise hammer a server that keeps failing.
fn reopen_wait(retry: Option<Duration>, failures: u32) -> Duration {
    let first = retry.unwrap_or(FIRST_REOPEN_WAIT);
    let first = if failures > 0 {
        first.max(FIRST_REOPEN_WAIT)
    } else {
        first
    };
    let most = first.max(MAX_REOPEN_WAIT);
    first
        .checked_mul(1 << failures.min(16))
        .map_or(most, |wait| wait.min(most))
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
mod tests {
    use std::net::TcpListener;

    use crossbeam_channel::{Receiver, Sender};
    use serde_json::json;

    use std::time::Instant;

    use super::super::transport::{Pending, Work};
    use super::*;
    use crate::client::Client;

    /// One request as the fake server read it.
    #[derive(Clone, Debug)]
    struct Seen {
        /// The request line and the header lines, CRLF-separated.
        head: String,
        body: Value,
        /// When the server saw it (or saw its connection end), counted over all events.
        order: usize,
    }

    impl Seen {
        fn method(&self) -> &str {
            self.head.split(' ').next().unwrap_or("")
        }

        fn rpc_method(&self) -> Option<&str> {
            self.body["method"].as_str()
        }

        fn header(&self, name: &str) -> Option<&str> {
            self.head.split("\r\n").skip(1).find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim())
            })
        }
    }

    /// In a scripted response: wait [`PAUSE_FOR`] before writing the rest.
    const PAUSE: &str = "\u{1}pause\u{1}";
    const PAUSE_FOR: Duration = Duration::from_millis(700);
    /// At the end of a scripted response: keep the connection open once it is written.
    const HOLD: &str = "\u{1}hold\u{1}";
    /// At the end of a scripted response: end it (shut down the server's side) and report
    /// on `ended` once the client has closed its side, which says the client is done
    /// with the response.
    const END: &str = "\u{1}end\u{1}";

    /// A scripted Streamable HTTP server on a loopback port: `respond` returns the raw
    /// response to each request (with [`PAUSE`]s and a final [`HOLD`] or [`END`] if it
    /// likes), or `None` to keep that connection open and silent. Every request is
    /// reported on `seen`; the end of a silent, held or ended connection (the client
    /// closed it) on `ended`.
    struct FakeServer {
        url: String,
        seen: Receiver<Seen>,
        ended: Receiver<Seen>,
    }

    fn fake_server(
        respond: impl Fn(&Seen) -> Option<String> + Send + Sync + 'static,
    ) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let (seen_tx, seen) = crossbeam_channel::unbounded();
        let (ended_tx, ended) = crossbeam_channel::unbounded();
        let respond = Arc::new(respond);
        let order = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                let Ok(connection) = connection else { return };
                let (respond, seen_tx, ended_tx, order) = (
                    respond.clone(),
                    seen_tx.clone(),
                    ended_tx.clone(),
                    order.clone(),
                );
                std::thread::spawn(move || {
                    serve_one(connection, &*respond, &seen_tx, &ended_tx, &order);
                });
            }
        });
        FakeServer { url, seen, ended }
    }

    fn serve_one(
        mut connection: TcpStream,
        respond: &dyn Fn(&Seen) -> Option<String>,
        seen: &Sender<Seen>,
        ended: &Sender<Seen>,
        order: &AtomicUsize,
    ) {
        let mut reader = BufReader::new(connection.try_clone().unwrap());
        let mut head = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut request = Seen {
            head: head.trim_end().to_owned(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            order: order.fetch_add(1, Ordering::SeqCst),
        };
        let _ = seen.send(request.clone());
        let response = respond(&request);
        let hold = match &response {
            Some(response) => {
                let script = response.trim_end_matches(HOLD).trim_end_matches(END);
                for (i, part) in script.split(PAUSE).enumerate() {
                    if i > 0 {
                        std::thread::sleep(PAUSE_FOR);
                    }
                    if connection.write_all(part.as_bytes()).is_err() {
                        return;
                    }
                }
                if response.ends_with(END) {
                    let _ = connection.shutdown(Shutdown::Write);
                }
                response.ends_with(HOLD) || response.ends_with(END)
            }
            None => true,
        };
        if hold {
            // Wait for the client to give up on the connection.
            let _ = reader.read_to_end(&mut Vec::new());
            request.order = order.fetch_add(1, Ordering::SeqCst);
            let _ = ended.send(request);
        }
    }

    fn json_reply(status: &str, body: &Value, extra: &str) -> String {
        let body = body.to_string();
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             {extra}\r\n{body}",
            body.len()
        )
    }

    fn empty_reply(status: &str) -> String {
        format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n")
    }

    /// A 2025-11-25 server's answer to `initialize`, opening `session`.
    fn initialized(request: &Seen, session: &str) -> String {
        json_reply(
            "200 OK",
            &json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {
                "protocolVersion": v2025::PROTOCOL_VERSION,
                "capabilities": {},
                "serverInfo": {"name": "fake", "version": "0"},
            }}),
            &format!("Mcp-Session-Id: {session}\r\n"),
        )
    }

    /// What a 2025-11-25 server answers to the handshake, the `GET` (no event stream) and
    /// the `DELETE`; `None` for anything else.
    fn session_basics(request: &Seen) -> Option<String> {
        match (request.method(), request.rpc_method()) {
            ("GET", _) => Some(empty_reply("405 Method Not Allowed")),
            ("DELETE", _) => Some(empty_reply("200 OK")),
            (_, Some("initialize")) => Some(initialized(request, "s1")),
            (_, Some("notifications/initialized")) => Some(empty_reply("202 Accepted")),
            _ => None,
        }
    }

    /// The next request with HTTP method `method` on `channel`, waiting 5 s at most.
    fn next(channel: &Receiver<Seen>, method: &str) -> Seen {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match channel.recv_deadline(until) {
                Ok(request) if request.method() == method => return request,
                Ok(_) => continue,
                Err(_) => panic!("no {method} within 5 s"),
            }
        }
    }

    /// The next request with HTTP method `method` on `channel` within `window`, if any.
    fn next_within(channel: &Receiver<Seen>, method: &str, window: Duration) -> Option<Seen> {
        let until = Instant::now() + window;
        loop {
            match channel.recv_deadline(until) {
                Ok(request) if request.method() == method => return Some(request),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    /// Runs `f` on a thread; `None` if it has not returned within `limit`.
    fn within<T: Send + 'static>(
        limit: Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit).ok()
    }

    fn request_within(client: &Client, method: &'static str) -> Result<Value, ClientError> {
        let client = client.clone();
        within(Duration::from_secs(5), move || {
            client.request(method, json!({}))
        })
        .unwrap_or_else(|| panic!("{method} still waits although its HTTP exchange ended"))
    }

    #[test]
    fn a_malformed_answer_in_an_event_stream_ends_the_request_with_an_error() {
        let server = fake_server(|request| {
            let id = &request.body["id"];
            session_basics(request).or_else(|| {
                // A server request the client cannot read, then its answer without
                // `jsonrpc`; the stream stays open.
                let bad_request = json!({"jsonrpc": "2.0", "id": "e1", "method": "ping",
                                         "params": "?"});
                let bad_answer = json!({"id": id, "result": {}});
                Some(format!(
                    "{EVENT_STREAM}data: {bad_request}\n\ndata: {bad_answer}\n\n{HOLD}"
                ))
            })
        });
        let client = Client::builder()
            .request_timeout(Duration::from_secs(600))
            .connect_http(&server.url)
            .unwrap();
        match request_within(&client, "ping") {
            Err(ClientError::Protocol(what)) => assert!(what.contains("malformed"), "{what}"),
            other => panic!("ping: {other:?}"),
        }
        // The server's request got its error answer.
        let answer = loop {
            let seen = server
                .seen
                .recv_timeout(Duration::from_secs(5))
                .expect("the malformed server request was never answered");
            if seen.body["id"] == "e1" {
                break seen;
            }
        };
        assert_eq!(answer.body["error"]["code"], -32602, "{:?}", answer.body);
    }

    #[test]
    fn interim_1xx_responses_before_the_answer_are_skipped() {
        let server = fake_server(|request| {
            let id = &request.body["id"];
            session_basics(request).or_else(|| {
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"pong": true}});
                Some(format!(
                    "HTTP/1.1 100 Continue\r\n\r\n\
                     HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n{}",
                    json_reply("200 OK", &answer, "")
                ))
            })
        });
        let client = Client::builder().connect_http(&server.url).unwrap();
        assert_eq!(
            request_within(&client, "ping").unwrap(),
            json!({"pong": true})
        );
    }

    #[test]
    fn a_json_body_without_the_answer_ends_the_request_with_an_error() {
        let server = fake_server(|request| {
            let id = &request.body["id"];
            let notification =
                json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
            session_basics(request).or_else(|| match request.rpc_method() {
                Some("ping") => Some(json_reply("200 OK", &notification, "")),
                Some("resources/list") => Some(json_reply("503 Unavailable", &notification, "")),
                Some("tools/list") => Some(json_reply(
                    "400 Bad Request",
                    &json!({"jsonrpc": "2.0", "id": id.to_string(),
                            "error": {"code": -32600, "message": "bad"}}),
                    "",
                )),
                Some("prompts/list") => Some(json_reply(
                    "400 Bad Request",
                    &json!({"jsonrpc": "2.0", "id": null,
                            "error": {"code": -32700, "message": "parse"}}),
                    "",
                )),
                _ => Some(json_reply(
                    "200 OK",
                    &json!({"jsonrpc": "2.0", "id": id, "result": {}}),
                    "",
                )),
            })
        });
        let client = Client::builder().connect_http(&server.url).unwrap();

        match request_within(&client, "ping") {
            Err(ClientError::Protocol(what)) => {
                assert!(what.contains("carried no answer to request"), "{what}")
            }
            other => panic!("ping: {other:?}"),
        }
        match request_within(&client, "resources/list") {
            Err(ClientError::Http { status: 503, body }) => {
                assert!(body.contains("notifications/message"), "{body}")
            }
            other => panic!("resources/list: {other:?}"),
        }
        match request_within(&client, "tools/list") {
            Err(ClientError::Rpc(error)) => assert_eq!(error.code, -32600),
            other => panic!("tools/list: {other:?}"),
        }
        match request_within(&client, "prompts/list") {
            Err(ClientError::Rpc(error)) => assert_eq!(error.code, -32700),
            other => panic!("prompts/list: {other:?}"),
        }
        assert!(request_within(&client, "completion/complete").is_ok());
        let pings: Vec<Seen> = server
            .seen
            .try_iter()
            .filter(|r| r.rpc_method() == Some("ping"))
            .collect();
        assert_eq!(pings.len(), 1, "one POST, no retry");
        assert_eq!(pings[0].header("Mcp-Session-Id"), Some("s1"));
        assert!(
            server.ended.try_recv().is_err(),
            "every request was answered"
        );
    }

    #[test]
    fn chunked_bodies_and_events_are_decoded() {
        let raw = b"7\r\ndata: {\r\n9\r\n\"a\":1}\n\n\r\n0\r\n\r\n";
        let mut body = BufReader::new(Chunked::new(&raw[..]));
        let mut events = Vec::new();
        read_events(&mut body, |d| {
            events.push(d.to_owned());
            true
        })
        .unwrap();
        assert_eq!(events, vec!["{\"a\":1}".to_string()]);
    }

    /// A connection that delivers `pieces` one read at a time, then reports that nothing
    /// more came (a server that stays silent): a reader that waits for more bytes than
    /// the pieces hold gets the error.
    struct Pieces(std::collections::VecDeque<&'static [u8]>);

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let Some(piece) = self.0.pop_front() else {
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "silent"));
            };
            assert!(piece.len() <= buf.len());
            buf[..piece.len()].copy_from_slice(piece);
            Ok(piece.len())
        }
    }

    /// The events read from `pieces` (see [`Pieces`]) before the stream went silent.
    fn events_of(pieces: &[&'static [u8]]) -> (Vec<String>, Resume) {
        let mut body = BufReader::new(Pieces(pieces.iter().copied().collect()));
        let mut resume = Resume::default();
        let mut events = Vec::new();
        let read = read_events_resuming(&mut body, &mut resume, |d| {
            events.push(d.to_owned());
            true
        });
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        (events, resume)
    }

    #[test]
    fn event_lines_may_end_in_a_bare_cr() {
        let (events, resume) = events_of(&[b"id: 7\rretry: 40\rdata: a\rdata: b\r\r"]);
        assert_eq!(events, ["a\nb"]);
        assert_eq!(
            resume,
            Resume {
                last_id: "7".into(),
                retry: Some(Duration::from_millis(40)),
            }
        );
        // All three line endings in one stream.
        let (events, _) = events_of(&[b"data: a\r\ndata: b\n\rdata: c\r\r\ndata: d\n\n"]);
        assert_eq!(events, ["a\nb", "c", "d"]);
    }

    #[test]
    fn a_crlf_split_between_two_reads_ends_one_line() {
        // Were the LF a line of its own (a blank one), it would end the event after `a`
        // early: `a` and `b` would come as two events.
        let (events, _) = events_of(&[
            b"data: a\r",
            b"\ndata: b\r",
            b"\n\r",
            b"\ndata: c\r",
            b"\n\r",
            b"\n",
        ]);
        assert_eq!(events, ["a\nb", "c"]);
        // A CR that ends a read and then an event is dispatched at once: the reader does
        // not wait for the next byte to see whether an LF follows.
        let (events, _) = events_of(&[b"data: x\r", b"\r"]);
        assert_eq!(events, ["x"]);
    }

    /// The whole chunked body `raw`, decoded.
    fn unchunked(raw: &[u8]) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        Chunked::new(raw).read_to_end(&mut body).map(|_| body)
    }

    #[test]
    fn chunk_data_longer_than_its_size_is_a_clear_error() {
        assert_eq!(
            unchunked(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        // A bare LF after a chunk is let pass.
        assert_eq!(unchunked(b"3\r\nabc\n0\r\n\r\n").unwrap(), b"abc");
        // Six bytes under a size of 3: the rest must not pass for the next size line (nor
        // be skipped as a line of its own).
        for raw in [
            &b"3\r\nabcdef\r\n0\r\n\r\n"[..],
            b"3\r\nabc\rdef\r\n0\r\n\r\n",
            b"3\r\nabc2\r\nde\r\n0\r\n\r\n",
        ] {
            let error = unchunked(raw).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
            assert!(
                error.to_string().contains("longer than its size"),
                "{error}"
            );
        }
        let error = unchunked(b"3\r\nabc").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
        let error = unchunked(b"3\r\nabc\r").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
    }

    #[test]
    fn a_chunk_of_4_gib_or_more_is_read_on_32_bit_targets_too() {
        // Sizes of 2^32 and more: cut to 32 bits (`as usize`), the first would ask the
        // connection for 0 bytes (and pass for its end), the second for 5 bytes only.
        for size in ["100000000", "100000005", "ffffffffffffffff"] {
            let raw = format!("{size}\r\nabcdefgh");
            let mut body = Chunked::new(raw.as_bytes());
            let mut buf = [0u8; 8];
            assert_eq!(body.read(&mut buf).unwrap(), 8, "size {size}");
            assert_eq!(&buf, b"abcdefgh");
            let error = body.read(&mut buf).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
        }
    }

    #[test]
    fn a_chunk_reaches_the_reader_before_the_line_ending_after_it_arrives() {
        // An event in a chunk whose CRLF the server has not sent yet is read at once.
        let pieces = Pieces([&b"f\r\ndata: {\"a\":1}\n\n"[..]].into_iter().collect());
        let mut body = BufReader::new(Chunked::new(BufReader::new(pieces)));
        let mut events = Vec::new();
        let read = read_events(&mut body, |d| {
            events.push(d.to_owned());
            true
        });
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert_eq!(events, ["{\"a\":1}"]);
    }

    #[test]
    fn event_ids_and_the_retry_time_are_kept_for_reopening_the_stream() {
        let raw = "id: 1\ndata: a\n\n\
                   retry: 2500\nid: 2\n\n\
                   id: bad\u{1}\nretry: 1e3\ndata: b\n\n\
                   id: 3\ndata: c\n";
        let mut resume = Resume::default();
        let mut events = Vec::new();
        read_events_resuming(&mut raw.as_bytes(), &mut resume, |d| {
            events.push(d.to_owned());
            true
        })
        .unwrap();
        assert_eq!(events, ["a", "b"]);
        // An id counts once its event is dispatched, data or not; one that could not go
        // into a header is ignored, and so is an undispatched one at the end.
        assert_eq!(
            resume,
            Resume {
                last_id: "2".into(),
                retry: Some(Duration::from_millis(2500)),
            }
        );
        // The id goes on from one reading of the stream to the next.
        read_events_resuming(&mut "data: d\n\n".as_bytes(), &mut resume, |d| {
            events.push(d.to_owned());
            true
        })
        .unwrap();
        assert_eq!((resume.last_id.as_str(), events.len()), ("2", 3));
        // A bare `id` field resets it.
        read_events_resuming(&mut "id\ndata: e\n\n".as_bytes(), &mut resume, |_| true).unwrap();
        assert_eq!(resume.last_id, "");
    }

    #[test]
    fn every_message_after_initialize_carries_the_negotiated_version() {
        let server = fake_server(|request| {
            let id = &request.body["id"];
            match (request.method(), request.rpc_method()) {
                ("GET", _) => Some(empty_reply("405 Method Not Allowed")),
                ("DELETE", _) => Some(empty_reply("200 OK")),
                (_, Some("initialize")) => Some(json_reply(
                    "200 OK",
                    &json!({"jsonrpc": "2.0", "id": id, "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "serverInfo": {"name": "fake", "version": "0"},
                    }}),
                    "Mcp-Session-Id: s1\r\n",
                )),
                (_, Some("notifications/initialized")) => Some(empty_reply("202 Accepted")),
                _ => Some(json_reply(
                    "200 OK",
                    &json!({"jsonrpc": "2.0", "id": id, "result": {}}),
                    "",
                )),
            }
        });
        let client = Client::builder().connect_http(&server.url).unwrap();
        client.request("ping", json!({})).unwrap();
        drop(client);
        let seen: Vec<Seen> = server.seen.try_iter().collect();
        let what = |r: &Seen| (r.method().to_owned(), r.rpc_method().map(str::to_owned));
        let versions: Vec<_> = seen
            .iter()
            .map(|r| (what(r), r.header("MCP-Protocol-Version")))
            .collect();
        let initialize = seen
            .iter()
            .find(|r| r.rpc_method() == Some("initialize"))
            .unwrap();
        assert_eq!(
            initialize.header("MCP-Protocol-Version"),
            None,
            "{versions:?}"
        );
        for method in ["notifications/initialized", "ping"] {
            let request = seen
                .iter()
                .find(|r| r.rpc_method() == Some(method))
                .unwrap();
            assert_eq!(
                request.header("MCP-Protocol-Version"),
                Some("2025-11-25"),
                "{versions:?}"
            );
        }
        for request in seen.iter().filter(|r| r.method() != "POST") {
            assert_eq!(
                request.header("MCP-Protocol-Version"),
                Some("2025-11-25"),
                "{versions:?}"
            );
        }
        assert!(seen.iter().any(|r| r.method() == "DELETE"), "{versions:?}");
    }

    /// A transport of its own (no client around it), whose idle timeout is `idle`.
    fn transport(
        server: &FakeServer,
        revision: Revision,
        idle: Duration,
    ) -> (HttpTransport, Arc<Shared>, Receiver<Work>) {
        let (shared, jobs) = Shared::new();
        let mut transport =
            HttpTransport::new(&server.url, revision, shared.clone(), Duration::MAX).unwrap();
        Arc::get_mut(&mut transport.inner).unwrap().idle = idle;
        (transport, shared, jobs)
    }

    fn ping(shared: &Shared, transport: &HttpTransport) -> Pending {
        let (id, pending) = shared.register().unwrap();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        transport.send_request(&id, message).unwrap();
        pending
    }

    const EVENT_STREAM: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";

    #[test]
    fn a_forgotten_session_is_renewed_and_the_request_sent_again() {
        // The server "restarts" after the first ping: it forgets session s1 (404) and the
        // next initialize opens s2.
        let sessions = Arc::new(AtomicUsize::new(0));
        let opened = sessions.clone();
        let server = fake_server(move |request| {
            let id = &request.body["id"];
            let session = request.header("Mcp-Session-Id").map(str::to_owned);
            match (request.method(), request.rpc_method()) {
                ("GET", _) => Some(empty_reply("405 Method Not Allowed")),
                ("DELETE", _) => Some(empty_reply("200 OK")),
                (_, Some("initialize")) => {
                    let n = opened.fetch_add(1, Ordering::SeqCst) + 1;
                    Some(initialized(request, &format!("s{n}")))
                }
                _ if session.as_deref() != Some("s2")
                    && opened.load(Ordering::SeqCst) == 1
                    && request.rpc_method() == Some("ping")
                    && request.body["params"]["second"] == true =>
                {
                    Some(json_reply(
                        "404 Not Found",
                        &json!({"jsonrpc": "2.0", "id": null,
                                "error": {"code": -32001, "message": "session not found"}}),
                        "",
                    ))
                }
                (_, Some("notifications/initialized")) => Some(empty_reply("202 Accepted")),
                _ => Some(json_reply(
                    "200 OK",
                    &json!({"jsonrpc": "2.0", "id": id, "result": {"session": session}}),
                    "",
                )),
            }
        });
        let client = Client::builder().connect_http(&server.url).unwrap();
        let first = client.request("ping", json!({})).unwrap();
        assert_eq!(first["session"], "s1");
        let second = client.request("ping", json!({"second": true})).unwrap();
        assert_eq!(second["session"], "s2", "sent again in the new session");
        assert_eq!(sessions.load(Ordering::SeqCst), 2);
        let third = client.request("ping", json!({})).unwrap();
        assert_eq!(third["session"], "s2");
        drop(client);
        let seen: Vec<Seen> = server.seen.try_iter().collect();
        let renewal = seen
            .iter()
            .filter(|r| r.rpc_method() == Some("initialize"))
            .nth(1)
            .expect("a second initialize");
        assert_eq!(renewal.header("Mcp-Session-Id"), None);
        let initialized: Vec<_> = seen
            .iter()
            .filter(|r| r.rpc_method() == Some("notifications/initialized"))
            .map(|r| r.header("Mcp-Session-Id").map(str::to_owned))
            .collect();
        assert_eq!(
            initialized,
            vec![Some("s1".to_owned()), Some("s2".to_owned())]
        );
    }

    #[test]
    fn requests_racing_a_session_renewal_all_land_in_the_new_session() {
        // After `forget` the server knows no session; the next initialize opens s2. A
        // request without a session gets 400, one with a forgotten session 404.
        let opened = Arc::new(AtomicUsize::new(0));
        let forgotten = Arc::new(AtomicUsize::new(0));
        let (opens, forgets) = (opened.clone(), forgotten.clone());
        let server = fake_server(move |request| {
            let id = &request.body["id"];
            let session = request.header("Mcp-Session-Id");
            // One reading: a renewal landing between two would make s1 look live again.
            let open = opens.load(Ordering::SeqCst);
            let live = format!("s{open}");
            let known = session == Some(live.as_str()) && open > forgets.load(Ordering::SeqCst);
            match (request.method(), request.rpc_method()) {
                ("GET", _) => Some(empty_reply("405 Method Not Allowed")),
                ("DELETE", _) => Some(empty_reply("200 OK")),
                (_, Some("initialize")) => {
                    let n = opens.fetch_add(1, Ordering::SeqCst) + 1;
                    // A renewal takes a while, so other requests meet the 404 meanwhile.
                    std::thread::sleep(Duration::from_millis(if n > 1 { 100 } else { 0 }));
                    Some(initialized(request, &format!("s{n}")))
                }
                _ if session.is_none() => Some(empty_reply("400 Bad Request")),
                _ if !known => Some(empty_reply("404 Not Found")),
                (_, Some("notifications/initialized")) => Some(empty_reply("202 Accepted")),
                _ => Some(json_reply(
                    "200 OK",
                    &json!({"jsonrpc": "2.0", "id": id, "result": {"session": session}}),
                    "",
                )),
            }
        });
        let client = Client::builder().connect_http(&server.url).unwrap();
        assert_eq!(client.request("ping", json!({})).unwrap()["session"], "s1");
        forgotten.store(1, Ordering::SeqCst); // the server restarts
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let client = client.clone();
                std::thread::spawn(move || {
                    (0..5)
                        .map(|_| client.request("ping", json!({})))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for caller in callers {
            for outcome in caller.join().unwrap() {
                assert_eq!(outcome.unwrap()["session"], "s2");
            }
        }
        assert_eq!(opened.load(Ordering::SeqCst), 2, "renewed once");
    }

    #[test]
    fn dropping_the_client_ends_the_event_stream_and_does_not_wait_long_for_the_delete() {
        let server = fake_server(|request| match request.method() {
            "GET" => Some(format!("{EVENT_STREAM}: open\n\n{HOLD}")),
            "DELETE" => None,
            _ => session_basics(request),
        });
        let client = Client::builder().connect_http(&server.url).unwrap();
        let get = next(&server.seen, "GET");
        within(Duration::from_secs(6), move || drop(client))
            .expect("dropping the client still blocked after 6 s");
        next(&server.seen, "DELETE");
        // The client shuts the event stream down before it sends the DELETE, but the fake
        // server's threads may notice the two in either order: only that both ended is
        // certain.
        let get_ended = next(&server.ended, "GET");
        assert!(get.order < get_ended.order);
        // The unanswered DELETE was given up too.
        next(&server.ended, "DELETE");
    }

    #[test]
    fn shutdown_ends_the_requests_under_way() {
        let server = fake_server(|_| None);
        let (transport, shared, _jobs) = transport(&server, Revision::Sep2663, IDLE_TIMEOUT);
        let pending = ping(&shared, &transport);
        server.seen.recv_timeout(Duration::from_secs(5)).unwrap();
        transport.shutdown();
        match pending.recv_timeout(Duration::from_secs(5)) {
            Ok(Err(error)) => assert!(error.is_transport(), "{error}"),
            other => panic!("the request thread is still blocked: {other:?}"),
        }
        let ended = server.ended.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(ended.rpc_method(), Some("ping"));
        // And nothing starts any more.
        let late = ping(&shared, &transport);
        assert!(matches!(
            late.recv_timeout(Duration::from_secs(5)),
            Ok(Err(_))
        ));
        assert!(server
            .seen
            .recv_timeout(Duration::from_millis(200))
            .is_err());
    }

    #[test]
    fn a_server_that_never_answers_does_not_hold_the_request_thread() {
        let server = fake_server(|_| None);
        let idle = Duration::from_millis(200);
        let (transport, shared, _jobs) = transport(&server, Revision::Sep2663, idle);
        let pending = ping(&shared, &transport);
        match pending.recv_timeout(Duration::from_secs(5)) {
            Ok(Err(ClientError::Io(error))) => {
                assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}")
            }
            other => panic!("the request thread is still blocked: {other:?}"),
        }
        // Its connection was given up.
        let ended = server.ended.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(ended.rpc_method(), Some("ping"));
    }

    /// An `elicitation/create` request `id` as an SSE event.
    fn elicitation_event(id: &str) -> String {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create",
                             "params": {"message": "?", "requestedSchema": {"type": "object"}}});
        format!("data: {request}\n\n")
    }

    /// A client whose elicitation handler reports each request's key on the channel.
    fn eliciting_client(server: &FakeServer) -> (Client, Receiver<String>) {
        let (asked_tx, asked) = crossbeam_channel::unbounded();
        let client = Client::builder()
            .on_elicitation(move |request| {
                let _ = asked_tx.send(request.key.clone());
                Ok(json!({"action": "decline"}))
            })
            .connect_http(&server.url)
            .unwrap();
        (client, asked)
    }

    /// Until the `GET` stream's reader of a transport ends: `jobs` disconnects once
    /// every holder of the transport's `Shared` is gone, the reader the last of them
    /// (the caller drops the transport and its own `Shared` first). `false` if it has
    /// not ended within 5 s.
    fn reader_ends(jobs: Receiver<Work>) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match jobs.recv_deadline(until) {
                Ok(_) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return true,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    #[test]
    fn a_notification_waits_no_longer_than_the_request_timeout() {
        // The server takes `notifications/initialized` and never says a word about it.
        let server = fake_server(|request| match request.rpc_method() {
            Some("notifications/initialized") => None,
            _ => session_basics(request),
        });
        let url = server.url.clone();
        let connected = within(Duration::from_secs(10), move || {
            Client::builder()
                .request_timeout(Duration::from_millis(500))
                .connect_http(&url)
        })
        .expect("the handshake still waits for the silent server after 10 s");
        match connected {
            Err(ClientError::Io(error)) => {
                assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_answer_to_the_server_waits_no_longer_than_the_request_timeout() {
        // The server takes the answers to its requests and never says a word about them.
        let server = fake_server(|request| match (request.method(), request.rpc_method()) {
            ("POST", None) => None,
            (_, Some("ping")) => {
                let answer = json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {}});
                Some(format!(
                    "{EVENT_STREAM}{}{}data: {answer}\n\n",
                    elicitation_event("e1"),
                    elicitation_event("e2")
                ))
            }
            _ => session_basics(request),
        });
        let (asked_tx, asked) = crossbeam_channel::unbounded();
        let client = Client::builder()
            .request_timeout(Duration::from_millis(500))
            .on_elicitation(move |request| {
                let _ = asked_tx.send(request.key.clone());
                Ok(json!({"action": "decline"}))
            })
            .connect_http(&server.url)
            .unwrap();
        client.request("ping", json!({})).unwrap();
        // The dispatcher answers one request at a time: the second is asked once the
        // first answer's POST has given up.
        let wait = Duration::from_secs(5);
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e1"));
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e2"));
    }

    #[test]
    fn the_event_stream_is_opened_again_when_the_server_ends_it() {
        let gets = AtomicUsize::new(0);
        let server = fake_server(move |request| {
            if request.method() == "GET" {
                // The first stream ends after one request, as a proxy's idle limit would
                // end it; the next one stays open.
                return Some(match gets.fetch_add(1, Ordering::SeqCst) {
                    0 => format!("{EVENT_STREAM}id: 7\n{}", elicitation_event("e1")),
                    _ => format!("{EVENT_STREAM}{}{HOLD}", elicitation_event("e2")),
                });
            }
            // Past the handshake: the client's answers to the elicitations.
            session_basics(request).or_else(|| Some(empty_reply("202 Accepted")))
        });
        let (client, asked) = eliciting_client(&server);
        let first = next(&server.seen, "GET");
        assert_eq!(first.header("Last-Event-ID"), None);
        let wait = Duration::from_secs(5);
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e1"));
        let second = next(&server.seen, "GET");
        assert_eq!(second.header("Mcp-Session-Id"), Some("s1"));
        assert_eq!(
            second.header("Last-Event-ID"),
            Some("7"),
            "resumes the stream"
        );
        assert_eq!(
            asked.recv_timeout(wait).as_deref(),
            Ok("e2"),
            "the reopened stream's request never reached the handler"
        );
        within(Duration::from_secs(6), move || drop(client))
            .expect("dropping the client still blocked after 6 s");
        next(&server.ended, "GET");
    }

    #[test]
    fn a_conflict_with_the_previous_stream_is_waited_out() {
        // The server has not noticed yet that the first stream is gone, and refuses the
        // second for a while, as ours does.
        let gets = AtomicUsize::new(0);
        let server = fake_server(move |request| {
            assert_eq!(request.method(), "GET");
            Some(match gets.fetch_add(1, Ordering::SeqCst) {
                0 => format!("{EVENT_STREAM}data: {}\n\n", server_ping("p1")),
                1 | 2 => empty_reply("409 Conflict"),
                _ => format!("{EVENT_STREAM}data: {}\n\n{HOLD}", server_ping("p2")),
            })
        });
        let (transport, _shared, jobs) = transport(&server, Revision::V2025, IDLE_TIMEOUT);
        transport.ready();
        expect_pings(&jobs, &["p1", "p2"], "after the 409s");
        transport.shutdown();
        next(&server.ended, "GET");
    }

    /// A `ping` from the server, as an event's data.
    fn server_ping(id: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
    }

    /// Waits for the server's `ping` requests with these ids, in order; `why` says what
    /// a missing one means.
    fn expect_pings(jobs: &Receiver<Work>, ids: &[&str], why: &str) {
        for id in ids {
            match jobs.recv_timeout(Duration::from_secs(5)) {
                Ok(Work::Request(request, _)) => {
                    assert_eq!(request.id, RequestId::String((*id).into()))
                }
                Err(_) => panic!("{id} never arrived: {why}"),
            }
        }
    }

    #[test]
    fn an_event_stream_silent_for_too_long_is_taken_for_dead_and_opened_again() {
        let gets = AtomicUsize::new(0);
        let server = fake_server(move |request| {
            assert_eq!(request.method(), "GET");
            // The first stream goes silent with its connection open, as a half-open one.
            let id = if gets.fetch_add(1, Ordering::SeqCst) == 0 {
                "p1"
            } else {
                "p2"
            };
            Some(format!("{EVENT_STREAM}data: {}\n\n{HOLD}", server_ping(id)))
        });
        let (mut transport, _shared, jobs) = transport(&server, Revision::V2025, IDLE_TIMEOUT);
        Arc::get_mut(&mut transport.inner).unwrap().stream_silence = Duration::from_millis(300);
        transport.ready();
        expect_pings(&jobs, &["p1", "p2"], "the silent stream was read forever");
        transport.shutdown();
    }

    #[test]
    fn a_passing_server_error_on_reopening_is_tried_again() {
        let gets = AtomicUsize::new(0);
        let server = fake_server(move |request| {
            assert_eq!(request.method(), "GET");
            Some(match gets.fetch_add(1, Ordering::SeqCst) {
                0 => format!("{EVENT_STREAM}data: {}\n\n", server_ping("p1")),
                1 => empty_reply("502 Bad Gateway"),
                2 => empty_reply("503 Service Unavailable"),
                _ => format!("{EVENT_STREAM}data: {}\n\n{HOLD}", server_ping("p2")),
            })
        });
        let (transport, _shared, jobs) = transport(&server, Revision::V2025, IDLE_TIMEOUT);
        transport.ready();
        expect_pings(&jobs, &["p1", "p2"], "the reader gave up on a 5xx");
        transport.shutdown();
    }

    #[test]
    fn a_server_that_offers_no_stream_is_not_asked_again() {
        // Whether the first GET or a reopening one meets the 405, the reader stops there.
        for streams_before in [0, 1] {
            let gets = AtomicUsize::new(0);
            let server = fake_server(move |request| {
                assert_eq!(request.method(), "GET");
                Some(if gets.fetch_add(1, Ordering::SeqCst) < streams_before {
                    let ask = json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"});
                    format!("{EVENT_STREAM}data: {ask}\n\n")
                } else {
                    empty_reply("405 Method Not Allowed")
                })
            });
            let (transport, shared, jobs) = transport(&server, Revision::V2025, IDLE_TIMEOUT);
            transport.ready();
            // Not shut down: the reader must end on its own.
            drop((transport, shared));
            assert!(reader_ends(jobs), "the reader still runs after a 405");
            let gets = server.seen.try_iter().filter(|r| r.method() == "GET");
            assert_eq!(gets.count(), streams_before + 1, "one GET after the stream");
        }
    }

    #[test]
    fn shutdown_ends_the_event_stream_reader_while_it_waits() {
        // Waiting to open the stream again: two streams end at once, the second asking
        // for a wait of ten minutes before the next.
        let gets = AtomicUsize::new(0);
        let server = fake_server(move |request| {
            Some(
                match (request.method(), gets.fetch_add(1, Ordering::SeqCst)) {
                    ("GET", 0) => EVENT_STREAM.to_owned(),
                    ("GET", _) => format!("{EVENT_STREAM}retry: 600000\n\n{END}"),
                    _ => empty_reply("200 OK"),
                },
            )
        });
        shut_down_while_waiting(&server, None, 2);
        // Waiting for a new session, the server having forgotten this one.
        let server = fake_server(|request| {
            Some(match request.method() {
                "GET" => format!("{}{END}", empty_reply("404 Not Found")),
                _ => empty_reply("200 OK"),
            })
        });
        shut_down_while_waiting(&server, Some("s1"), 1);
    }

    /// Starts a transport's `GET` stream reader (in `session`), waits until it is done
    /// with the `gets`th stream's answer (which ends with [`END`]), shuts the transport
    /// down and checks that the reader ends.
    fn shut_down_while_waiting(server: &FakeServer, session: Option<&str>, gets: usize) {
        let (transport, shared, jobs) = transport(server, Revision::V2025, IDLE_TIMEOUT);
        *transport.inner.session.lock() = session.map(str::to_owned);
        transport.ready();
        for _ in 0..gets {
            next(&server.seen, "GET");
        }
        // The reader closed the last answer's connection: it is about to wait, or waiting.
        next(&server.ended, "GET");
        within(Duration::from_secs(6), move || {
            transport.shutdown();
            drop((transport, shared));
        })
        .expect("shutting the transport down still blocked after 6 s");
        assert!(
            reader_ends(jobs),
            "the reader outlived the shutdown (session {session:?})"
        );
    }

    #[test]
    fn reopen_waits_double_up_to_a_cap_and_follow_the_servers_retry() {
        let waits: Vec<_> = (0..8).map(|n| reopen_wait(None, n)).collect();
        assert_eq!(waits[0], FIRST_REOPEN_WAIT);
        assert_eq!(waits[1], 2 * FIRST_REOPEN_WAIT);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(reopen_wait(None, u32::MAX), MAX_REOPEN_WAIT);
        let retry = Duration::from_millis(30);
        assert_eq!(reopen_wait(Some(retry), 0), retry);
        // After a failure a short retry (0 included) no longer sets the pace: it doubles
        // from the usual first wait.
        assert_eq!(reopen_wait(Some(retry), 1), 2 * FIRST_REOPEN_WAIT);
        assert_eq!(reopen_wait(Some(Duration::ZERO), 0), Duration::ZERO);
        assert_eq!(reopen_wait(Some(Duration::ZERO), 3), 8 * FIRST_REOPEN_WAIT);
        // A server asking for a long wait gets it, and no longer.
        let long = Duration::from_secs(60);
        assert_eq!(reopen_wait(Some(long), 0), long);
        assert_eq!(reopen_wait(Some(long), 5), long);
        let endless = Duration::from_millis(u64::MAX);
        assert_eq!(reopen_wait(Some(endless), 3), endless);
    }

    #[test]
    fn a_renewed_session_gets_one_event_stream_and_the_forgotten_one_no_more() {
        // The server forgets s1 after its first stream ends: s1's GET and ping then meet
        // a 404, and the next initialize opens s2.
        let opened = Arc::new(AtomicUsize::new(0));
        let s1_streams = AtomicUsize::new(0);
        let opens = opened.clone();
        let server = fake_server(move |request| {
            let session = request.header("Mcp-Session-Id");
            let forgotten = session == Some("s1") && s1_streams.load(Ordering::SeqCst) > 0;
            match (request.method(), request.rpc_method()) {
                ("GET", _) if forgotten => Some(empty_reply("404 Not Found")),
                ("GET", _) if session == Some("s1") => {
                    s1_streams.fetch_add(1, Ordering::SeqCst);
                    Some(format!("{EVENT_STREAM}id: 1\n{}", elicitation_event("e1")))
                }
                ("GET", _) => Some(format!("{EVENT_STREAM}{}{HOLD}", elicitation_event("e2"))),
                (_, Some("initialize")) => {
                    let n = opens.fetch_add(1, Ordering::SeqCst) + 1;
                    Some(initialized(request, &format!("s{n}")))
                }
                ("DELETE", _) => Some(empty_reply("200 OK")),
                // Only the test's ping is let meet the 404 (the client's answer to e1
                // may come late, and would renew the session on its own).
                (_, Some("ping")) if forgotten => Some(empty_reply("404 Not Found")),
                (_, Some("ping")) => Some(json_reply(
                    "200 OK",
                    &json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {}}),
                    "",
                )),
                _ => Some(empty_reply("202 Accepted")),
            }
        });
        let (client, asked) = eliciting_client(&server);
        let wait = Duration::from_secs(5);
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e1"));
        assert_eq!(
            next(&server.seen, "GET").header("Mcp-Session-Id"),
            Some("s1")
        );
        let gone = next(&server.seen, "GET");
        assert_eq!(gone.header("Mcp-Session-Id"), Some("s1"));
        // A 404 to the GET leaves the session to the renewal path: no GET loop on it. (A
        // bounded window can only show the loop's absence, never fail spuriously.)
        let quiet = Duration::from_millis(500);
        if let Some(get) = next_within(&server.seen, "GET", quiet) {
            panic!("the client asked the forgotten session for its stream again: {get:?}");
        }
        client.request("ping", json!({})).unwrap();
        let mut before = Vec::new();
        let stream = loop {
            let request = server
                .seen
                .recv_timeout(wait)
                .expect("no GET after the renewal");
            if request.method() == "GET" {
                break request;
            }
            before.push(request);
        };
        assert_eq!(stream.header("Mcp-Session-Id"), Some("s2"));
        assert!(
            before
                .iter()
                .any(|r| r.rpc_method() == Some("notifications/initialized")
                    && r.header("Mcp-Session-Id") == Some("s2")),
            "s2's stream was asked for before s2 was initialized: {before:?}"
        );
        assert_eq!(
            stream.header("Last-Event-ID"),
            None,
            "s1's ids mean nothing to s2"
        );
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e2"));
        // Only one stream for s2 (the renewal starts none of its own), and no other GET.
        if let Some(get) = next_within(&server.seen, "GET", quiet) {
            panic!("a second GET after the renewal: {get:?}");
        }
        drop(client);
        let seen: Vec<Seen> = server.seen.try_iter().collect();
        assert!(seen.iter().all(|r| r.method() != "GET"), "{seen:?}");
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }

    /// A 2025-11-25 server that forgets session s1 after its first ping (the next
    /// initialize opens s2). Each session's first ping is answered on an event stream
    /// that asks an elicitation first: `e0` in s1, `e1` in s2. Answers posted in s1 meet
    /// the 404 of a forgotten session.
    fn forgetting_server() -> FakeServer {
        let opened = AtomicUsize::new(0);
        fake_server(move |request| {
            let session = request.header("Mcp-Session-Id");
            let first = request.body["params"]["first"] == true;
            match (request.method(), request.rpc_method()) {
                (_, Some("initialize")) => {
                    let n = opened.fetch_add(1, Ordering::SeqCst) + 1;
                    Some(initialized(request, &format!("s{n}")))
                }
                (_, Some("ping")) if session == Some("s1") && !first => {
                    Some(empty_reply("404 Not Found"))
                }
                (_, Some("ping")) => {
                    let ask = elicitation_event(if first { "e0" } else { "e1" });
                    let answer = json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {}});
                    Some(format!("{EVENT_STREAM}{ask}data: {answer}\n\n"))
                }
                ("POST", None) if session == Some("s1") => Some(empty_reply("404 Not Found")),
                ("POST", None) => Some(empty_reply("202 Accepted")),
                _ => session_basics(request),
            }
        })
    }

    /// The client's answers to server request `id` the server saw, by session.
    fn answers_to(seen: &Receiver<Seen>, id: &str) -> Vec<Option<String>> {
        seen.try_iter()
            .filter(|r| r.body["id"] == id && r.rpc_method().is_none())
            .map(|r| r.header("Mcp-Session-Id").map(str::to_owned))
            .collect()
    }

    #[test]
    fn an_answer_that_meets_its_forgotten_session_is_not_sent_again_in_the_new_one() {
        let server = forgetting_server();
        let (client, asked) = eliciting_client(&server);
        let wait = Duration::from_secs(5);
        client.request("ping", json!({"first": true})).unwrap();
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e0"));
        // s1 is forgotten: a request renews the session, and s2 asks e1.
        client.request("ping", json!({})).unwrap();
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e1"));
        // The dispatcher answers one request at a time: e0's answer went (or was given up
        // on) before e1 was handled. In s2, e0 names nothing (or another request).
        drop(client);
        let answers = answers_to(&server.seen, "e0");
        assert!(
            answers.iter().all(|s| s.as_deref() == Some("s1")),
            "{answers:?}"
        );
    }

    #[test]
    fn an_answer_given_after_a_renewal_does_not_go_to_the_new_session() {
        let server = forgetting_server();
        let (asked_tx, asked) = crossbeam_channel::unbounded();
        let (release_tx, release) = crossbeam_channel::bounded::<()>(1);
        let client = Client::builder()
            .on_elicitation(move |request| {
                let _ = asked_tx.send(request.key.clone());
                if request.key == "e0" {
                    let _ = release.recv();
                }
                Ok(json!({"action": "decline"}))
            })
            .connect_http(&server.url)
            .unwrap();
        let wait = Duration::from_secs(5);
        client.request("ping", json!({"first": true})).unwrap();
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e0"));
        // While a human ponders e0, s1 is forgotten and s2 takes its place.
        client.request("ping", json!({})).unwrap();
        release_tx.send(()).unwrap();
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("e1"));
        drop(client);
        let answers = answers_to(&server.seen, "e0");
        assert!(
            answers.iter().all(|s| s.as_deref() != Some("s2")),
            "{answers:?}"
        );
    }

    #[test]
    fn a_new_session_may_reuse_the_request_ids_of_the_forgotten_one() {
        let opened = AtomicUsize::new(0);
        let server = fake_server(move |request| {
            let session = request.header("Mcp-Session-Id");
            match (request.method(), request.rpc_method()) {
                (_, Some("initialize")) => {
                    let n = opened.fetch_add(1, Ordering::SeqCst) + 1;
                    Some(initialized(request, &format!("s{n}")))
                }
                // The server restarts: it forgets s1.
                (_, Some("ping"))
                    if session == Some("s1") && request.body["params"]["restart"] == true =>
                {
                    Some(empty_reply("404 Not Found"))
                }
                // It asks first (its request "0" in every session), then answers.
                (_, Some("ping")) => {
                    let answer = json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {}});
                    Some(format!(
                        "{EVENT_STREAM}{}data: {answer}\n\n",
                        elicitation_event("0")
                    ))
                }
                ("POST", None) => Some(empty_reply("202 Accepted")),
                _ => session_basics(request),
            }
        });
        let (client, asked) = eliciting_client(&server);
        let wait = Duration::from_secs(5);
        client.request("ping", json!({})).unwrap();
        assert_eq!(asked.recv_timeout(wait).as_deref(), Ok("0"));
        client.request("ping", json!({"restart": true})).unwrap();
        assert_eq!(
            asked.recv_timeout(wait).as_deref(),
            Ok("0"),
            "the new session's request was dropped as a repeat"
        );
    }

    #[test]
    fn event_streams_and_held_tasks_result_may_stay_silent_longer_than_the_idle_timeout() {
        let server = fake_server(|request| {
            let id = &request.body["id"];
            if request.method() == "GET" {
                // The head comes late too, and then the first event.
                let ask = json!({"jsonrpc": "2.0", "id": "s1", "method": "ping"});
                return Some(format!("{PAUSE}{EVENT_STREAM}{PAUSE}data: {ask}\n\n{HOLD}"));
            }
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"late": true}});
            if request.rpc_method() == Some("tasks/result") {
                // Held until the task ends, then answered with plain JSON, as our server does.
                return Some(format!("{PAUSE}{}", json_reply("200 OK", &answer, "")));
            }
            Some(format!("{EVENT_STREAM}{PAUSE}data: {answer}\n\n"))
        });
        let idle = Duration::from_millis(200);
        assert!(PAUSE_FOR > 3 * idle);
        let (transport, shared, jobs) = transport(&server, Revision::V2025, idle);
        let pending = ping(&shared, &transport);
        let (id, held) = shared.register().unwrap();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tasks/result",
                             "params": {"taskId": "t1"}});
        transport.send_request(&id, message).unwrap();
        transport.ready();
        let answer = pending.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(answer.unwrap()["late"], true);
        let answer = held.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(answer.unwrap()["late"], true);
        match jobs.recv_timeout(Duration::from_secs(5)) {
            Ok(Work::Request(request, _)) => assert_eq!(request.method, "ping"),
            Err(_) => panic!("the server's request on the event stream never arrived"),
        }
        transport.shutdown();
    }

    /// A 2025-11-25 task t1 in `status`, polled every 20 ms.
    fn task_of(status: &str) -> Value {
        json!({"taskId": "t1", "status": status, "createdAt": "2026-01-01T00:00:00Z",
               "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": null, "pollInterval": 20})
    }

    #[test]
    fn a_tasks_result_stream_the_server_ends_early_is_held_again_while_the_task_works() {
        let results = AtomicUsize::new(0);
        let polls = AtomicUsize::new(0);
        let done = json!({"content": [], "isError": false});
        let answer = done.clone();
        let server = fake_server(move |request| {
            let reply = |result: Value| {
                let body = json!({"jsonrpc": "2.0", "id": request.body["id"], "result": result});
                Some(json_reply("200 OK", &body, ""))
            };
            match request.rpc_method() {
                Some("initialize") => Some(json_reply(
                    "200 OK",
                    &json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {
                        "protocolVersion": v2025::PROTOCOL_VERSION,
                        "capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}},
                        "serverInfo": {"name": "fake", "version": "0"},
                    }}),
                    "Mcp-Session-Id: s1\r\n",
                )),
                Some("tools/list") => reply(json!({"tools": [{"name": "work",
                    "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}]})),
                Some("tools/call") => reply(json!({"task": task_of("working")})),
                Some("tasks/get") => reply(task_of(if polls.fetch_add(1, Ordering::SeqCst) == 0 {
                    "working"
                } else {
                    "completed"
                })),
                // A resumable stream the server ends after its priming event, while the
                // task works on.
                Some("tasks/result") if results.fetch_add(1, Ordering::SeqCst) == 0 => Some(
                    format!("{EVENT_STREAM}id: ev-1\nretry: 100\ndata: \n\n{END}"),
                ),
                Some("tasks/result") => reply(answer.clone()),
                _ => session_basics(request),
            }
        });
        let client = Client::builder().connect_http(&server.url).unwrap();
        let outcome = within(Duration::from_secs(10), move || {
            client.call_tool("work", json!({}))
        })
        .expect("the call still runs after 10 s");
        assert_eq!(outcome.unwrap(), done);
        let seen: Vec<Seen> = server.seen.try_iter().collect();
        let asked = |method| {
            seen.iter()
                .filter(|r| r.rpc_method() == Some(method))
                .count()
        };
        assert_eq!(asked("tasks/result"), 2, "{seen:?}");
        assert_eq!(asked("tasks/cancel"), 0, "{seen:?}");
    }

    #[test]
    fn names_are_encoded_and_left_out_past_the_limit() {
        // The encoding itself is protocol::header_value's (tested there); the client
        // adds the length limit.
        assert_eq!(
            name_header("Hello, 世界").unwrap(),
            header_value::encode("Hello, 世界")
        );
        assert!(name_header(&"x".repeat(MAX_NAME_HEADER)).is_some());
        assert!(name_header(&"x".repeat(MAX_NAME_HEADER + 1)).is_none());
        assert!(name_header(&"é".repeat(4000)).is_none());
    }

    #[test]
    fn no_message_content_reaches_the_request_head_raw() {
        let server = fake_server(|request| {
            let id = &request.body["id"];
            let result = match request.rpc_method() {
                Some("server/discover") => discovered(),
                _ => json!({"content": [{"type": "text", "text": "done"}]}),
            };
            Some(json_reply(
                "200 OK",
                &json!({"jsonrpc": "2.0", "id": id, "result": result}),
                "",
            ))
        });
        let client = Client::builder()
            .revision(Revision::Sep2663)
            .connect_http(&server.url)
            .unwrap();
        let name = "echo\r\nX-Injected: yes";
        let result = client.call_tool(name, json!({})).unwrap();
        assert_eq!(result["content"][0]["text"], "done");
        // A method is not encoded: one with CR/LF is refused before anything is sent.
        match client.request("x\r\nX-Injected: yes", json!({})) {
            Err(ClientError::Io(error)) => {
                assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{error}")
            }
            other => panic!("{other:?}"),
        }
        let seen: Vec<Seen> = server.seen.try_iter().collect();
        for request in &seen {
            assert!(
                !request.head.to_ascii_lowercase().contains("x-injected"),
                "{}",
                request.head
            );
        }
        let call = seen
            .iter()
            .find(|r| r.rpc_method() == Some("tools/call"))
            .unwrap();
        assert_eq!(call.body["params"]["name"], name);
        assert_eq!(
            call.header("Mcp-Name"),
            Some(header_value::encode(name).as_str())
        );
        assert_eq!(call.header("Mcp-Method"), Some("tools/call"));
        assert_eq!(seen.len(), 2, "the refused request never went out");
    }

    #[test]
    fn a_session_id_with_a_control_character_is_refused_at_initialize() {
        let server = fake_server(|request| match request.rpc_method() {
            Some("initialize") => Some(initialized(request, "s1\u{1}x")),
            _ => session_basics(request),
        });
        let connected = within(Duration::from_secs(5), {
            let url = server.url.clone();
            move || Client::builder().connect_http(&url).map(drop)
        })
        .expect("connect_http never returned");
        match connected {
            Err(ClientError::Protocol(what)) => {
                assert!(what.contains("Mcp-Session-Id"), "{what}")
            }
            other => panic!("{other:?}"),
        }
        // Nothing more went out in that session: no initialized, no GET stream.
        let seen: Vec<Seen> = server.seen.try_iter().collect();
        assert_eq!(seen.len(), 1, "{seen:?}");
    }

    #[test]
    fn a_sep2663_client_keeps_no_session_and_deletes_none() {
        // A server that hands out a session id anyway: 2026-07-28 is stateless, so the
        // client neither sends it back nor ends it with a DELETE (which it would send
        // under 2025-11-25's version).
        let server = fake_server(|request| {
            let id = &request.body["id"];
            let result = match request.rpc_method() {
                Some("server/discover") => discovered(),
                _ => json!({}),
            };
            match request.method() {
                "DELETE" => Some(empty_reply("200 OK")),
                _ => Some(json_reply(
                    "200 OK",
                    &json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    "Mcp-Session-Id: s1\r\n",
                )),
            }
        });
        let client = Client::builder()
            .revision(Revision::Sep2663)
            .connect_http(&server.url)
            .unwrap();
        client.request("ping", json!({})).unwrap();
        // Dropping the client sends its DELETE, if any, and waits for the answer's head:
        // the server has seen it by then.
        drop(client);
        let seen: Vec<Seen> = server.seen.try_iter().collect();
        for request in &seen {
            assert_ne!(request.method(), "DELETE", "{}", request.head);
            assert_eq!(request.header("Mcp-Session-Id"), None, "{}", request.head);
            assert_eq!(
                request.header("MCP-Protocol-Version"),
                Some(sep2663::PROTOCOL_VERSION),
                "{}",
                request.head
            );
        }
    }

    /// A fake SEP-2663 server's `server/discover` result: it speaks 2026-07-28.
    fn discovered() -> Value {
        json!({"supportedVersions": [sep2663::PROTOCOL_VERSION], "capabilities": {}})
    }

    /// A SEP-2663 server that suggests polling once an hour, whose task t1 is completed,
    /// and whose subscription answers with `listen` (`None`: silence).
    fn hourly_server(listen: Option<String>) -> FakeServer {
        fake_server(move |request| {
            let id = &request.body["id"];
            let result = match request.rpc_method() {
                Some("server/discover") => discovered(),
                Some("tools/list") => json!({"tools": [{"name": "work",
                    "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}]}),
                Some("tools/call") => json!({"resultType": "task", "taskId": "t1",
                    "status": "working", "pollIntervalMs": 3_600_000}),
                Some("subscriptions/listen") => return listen.clone(),
                Some("tasks/get") => json!({"taskId": "t1", "status": "completed",
                    "result": {"content": []}}),
                _ => json!({}),
            };
            Some(json_reply(
                "200 OK",
                &json!({"jsonrpc": "2.0", "id": id, "result": result}),
                "",
            ))
        })
    }

    /// A notification on the subscription's own event stream wakes the follower (polling
    /// alone would look again in an hour); a subscription the server holds open, or never
    /// answers, has its connection closed once the call ends, and its thread ends with it.
    #[test]
    fn a_listen_streams_notifications_are_heard_and_it_ends_with_the_call() {
        let changed = json!({"jsonrpc": "2.0", "method": "notifications/tasks",
                             "params": {"taskId": "t1", "status": "completed"}});
        for listen in [
            Some(format!("{EVENT_STREAM}data: {changed}\n\n{HOLD}")),
            None,
        ] {
            let server = hourly_server(listen.clone());
            let client = Client::builder()
                .revision(Revision::Sep2663)
                .max_poll_interval(Duration::from_secs(3600))
                .deadline(Duration::from_millis(500))
                .connect_http(&server.url)
                .unwrap();
            let outcome = within(Duration::from_secs(10), move || {
                client.call_tool("work", json!({}))
            })
            .expect("the call hangs");
            // Silent: found completed by the look after the deadline's cancel.
            assert_eq!(outcome.unwrap(), json!({"content": []}));
            let cancelled = server
                .seen
                .try_iter()
                .any(|r| r.rpc_method() == Some("tasks/cancel"));
            assert_eq!(cancelled, listen.is_none(), "{listen:?}");
            let ended = server
                .ended
                .recv_timeout(Duration::from_secs(5))
                .expect("the listen stream is still open");
            assert_eq!(ended.rpc_method(), Some("subscriptions/listen"));
        }
    }

    /// Each subscription holds a connection of the server's while its task runs: a client
    /// following more tasks than [`MAX_HTTP_TASK_SUBSCRIPTIONS`] at once only polls the
    /// rest, so its polls always find a connection.
    #[test]
    fn at_most_so_many_task_subscriptions_hold_a_connection_at_once() {
        use crate::client::MAX_HTTP_TASK_SUBSCRIPTIONS as MAX;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let finished = done.clone();
        let server = fake_server(move |request| {
            let id = &request.body["id"];
            let result = match request.rpc_method() {
                Some("server/discover") => discovered(),
                Some("tools/list") => json!({"tools": [{"name": "work",
                    "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}]}),
                Some("tools/call") => json!({"resultType": "task", "taskId": "t1",
                    "status": "working", "pollIntervalMs": 10}),
                // Open until the client closes it.
                Some("subscriptions/listen") => return Some(format!("{EVENT_STREAM}{HOLD}")),
                Some("tasks/get") if finished.load(Ordering::SeqCst) => json!({"taskId": "t1",
                    "status": "completed", "result": {"content": []}}),
                Some("tasks/get") => json!({"taskId": "t1", "status": "working"}),
                _ => json!({}),
            };
            Some(json_reply(
                "200 OK",
                &json!({"jsonrpc": "2.0", "id": id, "result": result}),
                "",
            ))
        });
        let client = Client::builder()
            .revision(Revision::Sep2663)
            .connect_http(&server.url)
            .unwrap();
        let calls: Vec<_> = (0..MAX + 4)
            .map(|_| {
                let client = client.clone();
                std::thread::spawn(move || client.call_tool("work", json!({})))
            })
            .collect();
        // Every call follows its task (its first polls came) before any may end.
        let mut polled = 0;
        let mut listens = 0;
        while polled < 2 * (MAX + 4) {
            let request = (server.seen)
                .recv_timeout(Duration::from_secs(10))
                .expect("the calls stopped polling");
            match request.rpc_method() {
                Some("tasks/get") => polled += 1,
                Some("subscriptions/listen") => listens += 1,
                _ => {}
            }
        }
        done.store(true, Ordering::SeqCst);
        for call in calls {
            assert_eq!(call.join().unwrap().unwrap(), json!({"content": []}));
        }
        listens += (server.seen.try_iter())
            .filter(|r| r.rpc_method() == Some("subscriptions/listen"))
            .count();
        assert_eq!(listens, MAX);
    }

    #[test]
    fn urls_are_http_only() {
        let e = Endpoint::parse("http://127.0.0.1:3000/mcp").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("127.0.0.1:3000", "/mcp")
        );
        assert_eq!(
            Endpoint::parse("http://example").unwrap().authority,
            "example:80"
        );
        assert!(Endpoint::parse("https://example/mcp").is_err());
        assert!(Endpoint::parse("http://example/mcp HTTP/1.0\r\nX: y").is_err());
    }
}
