//! HTTP/1.1 on the wire, as much as the client needs: where the endpoint is, one exchange
//! (connect, send the head and body, read the response head), and the body's framing
//! (`Content-Length`, chunked, or to the end). It knows nothing of MCP or JSON-RPC; the
//! framing is pure functions over a `BufRead`, tested without a socket.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connections::{OpenConnection, OpenConnections};
use crate::client::transport::{Shared, MAX_SERVER_MESSAGE};
use crate::client::ClientError;
use crate::protocol::header_value;
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::lines::{read_line, Line};

/// Where the MCP endpoint is.
#[derive(Clone)]
pub(super) struct Endpoint {
    /// `host:port`, for connecting and for the `Host` header.
    pub(super) authority: String,
    /// The request target (`/mcp`).
    pub(super) path: String,
    /// Fields the user asked to send with every request (credentials, say).
    pub(super) extra_headers: Vec<(String, String)>,
}

/// Header fields the transport writes itself: one given again would contradict it (a
/// second `Content-Length` is request smuggling) or undo it (a session id).
const OWN_HEADERS: &[&str] = &[
    "Host",
    "Connection",
    "Content-Length",
    "Transfer-Encoding",
    "Content-Type",
    "Accept",
    "Mcp-Session-Id",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
    "Last-Event-ID",
];

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The extra fields' values are credentials, often: names only, as the builder does.
        let names: Vec<&str> = (self.extra_headers.iter())
            .map(|(n, _)| n.as_str())
            .collect();
        f.debug_struct("Endpoint")
            .field("authority", &self.authority)
            .field("path", &self.path)
            .field("extra_header_names", &names)
            .finish()
    }
}

impl Endpoint {
    pub(super) fn parse(url: &str) -> Result<Endpoint, ClientError> {
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
        // A fragment is the client's own business: it is never sent (RFC 9110 §7.1).
        let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
        // The authority ends at the path or, with no path, at the query.
        let (authority, path) = match rest.find(['/', '?']) {
            Some(end) if rest[end..].starts_with('?') => {
                (&rest[..end], format!("/{}", &rest[end..]))
            }
            Some(end) => (&rest[..end], rest[end..].to_owned()),
            None => (rest, "/".to_owned()),
        };
        if authority.is_empty() {
            return Err(ClientError::Unsupported(format!("'{url}' names no host")));
        }
        if authority.contains('@') {
            return Err(ClientError::Unsupported(format!(
                "'{url}': user information in the URL (user:password@) is not supported"
            )));
        }
        let port = authority
            .rsplit_once(':')
            .filter(|(_, port)| !port.contains(']'))
            .map(|(_, port)| port);
        let authority = match port {
            Some(port) if port.parse::<u16>().is_err() => {
                return Err(ClientError::Unsupported(format!(
                    "'{url}': '{port}' is not a port number"
                )))
            }
            Some(_) => authority.to_owned(),
            None => format!("{authority}:80"),
        };
        Ok(Endpoint {
            authority,
            path,
            extra_headers: Vec::new(),
        })
    }

    /// The endpoint, with `headers` sent on every request, once each is found sendable.
    pub(super) fn with_headers(
        mut self,
        headers: &[(String, String)],
    ) -> Result<Endpoint, ClientError> {
        for (i, (name, value)) in headers.iter().enumerate() {
            // A field sent twice is ambiguous, and a server may then take it as absent
            // (this crate's does, for the identity it reads).
            if headers[..i]
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                return Err(ClientError::Unsupported(format!(
                    "http_header: {name} is given twice"
                )));
            }
            if !header_value::is_token(name) {
                return Err(ClientError::Unsupported(format!(
                    "http_header: {name:?} is not a header field name"
                )));
            }
            if OWN_HEADERS.iter().any(|own| own.eq_ignore_ascii_case(name)) {
                return Err(ClientError::Unsupported(format!(
                    "http_header: the transport sets {name} itself"
                )));
            }
            if !header_safe(value) {
                return Err(ClientError::Unsupported(format!(
                    "http_header: the value of {name} holds a control character"
                )));
            }
        }
        self.extra_headers = headers.to_vec();
        Ok(self)
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

/// How an exchange treats its connection.
pub(super) struct Link<'a> {
    pub(super) connect: Duration,
    /// Read and write timeout of the connection (see [`IDLE_TIMEOUT`](super::IDLE_TIMEOUT)); `None` waits as
    /// long as the server takes.
    pub(super) idle: Option<Duration>,
    /// When the whole exchange (connecting, sending, reading the head and whatever of the
    /// body is read) must be over, however steadily the server trickles; `None`: no such
    /// bound.
    pub(super) deadline: Option<Instant>,
    /// Where the connection is kept while the exchange is under way.
    pub(super) open: Option<&'a Arc<OpenConnections>>,
    /// The request whose exchange this is, and where it waits for its answer: once it is
    /// kept among the open connections, an exchange nobody waits for any more ends (see
    /// [`OpenConnections::abandon`]).
    pub(super) owner: Option<(&'a RequestId, &'a Shared)>,
}

/// A response whose head was read; the body is read from `body`.
pub(super) struct HttpResponse {
    pub(super) status: u16,
    headers: Vec<(String, String)>,
    pub(super) body: Box<dyn BufRead + Send>,
    /// The connection, to lift its read timeout for an event-stream body.
    pub(super) socket: TcpStream,
    /// The session the request named (`Mcp-Session-Id`), if any: what the server sends on
    /// this response belongs to it.
    pub(super) session: Option<String>,
    /// Keeps the connection among the open ones until the response is dropped.
    _open: Option<OpenConnection>,
}

impl HttpResponse {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn is_event_stream(&self) -> bool {
        is_event_stream(self.header("Content-Type"))
    }

    /// An event stream may stay silent as long as the server likes (see [`IDLE_TIMEOUT`](super::IDLE_TIMEOUT)).
    pub(super) fn wait_for_events(&self) -> io::Result<()> {
        self.socket.set_read_timeout(None)
    }

    pub(super) fn text(self) -> io::Result<String> {
        body_text(self.body)
    }
}

/// Whether a `Content-Type` names an event stream.
pub(super) fn is_event_stream(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"))
}

/// A body read whole as text, at most [`MAX_SERVER_MESSAGE`] bytes of it.
pub(super) fn body_text(mut body: impl Read) -> io::Result<String> {
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
pub(super) fn header_safe(value: &str) -> bool {
    !value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f)
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
pub(super) fn exchange(
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
    let extra = (endpoint.extra_headers.iter()).map(|(name, value)| (name.as_str(), value));
    for (name, value) in headers
        .iter()
        .map(|(name, value)| (*name, value))
        .chain(extra)
    {
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
pub(super) type Parsed = (u16, Vec<(String, String)>, Box<dyn BufRead + Send>);

pub(super) fn parse_head(mut reader: impl BufRead + Send + 'static) -> io::Result<Parsed> {
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
pub(super) struct Chunked<R> {
    inner: R,
    left: u64,
    /// The last chunk's data was read, not yet the line ending after it: it is checked
    /// before the next size line is read (not at once, so that a chunk's data reaches
    /// the reader without waiting for more bytes).
    ending_due: bool,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    pub(super) fn new(inner: R) -> Chunked<R> {
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
