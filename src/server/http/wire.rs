//! HTTP/1.1 messages on the wire (RFC 9112), as much as the MCP endpoint needs: request
//! heads, bodies framed by `Content-Length` or chunked, and responses. Pure functions over
//! a `BufRead`, so every rule is tested without a socket.
//!
//! The rules, strict where leniency lets requests be read two ways (request smuggling
//! behind a proxy):
//! - a head is ASCII: visible characters, spaces and tabs, lines ending in CRLF or LF; at
//!   most [`Limits::head_bytes`] bytes and [`Limits::headers`] fields, else 431. Empty
//!   lines before the request line are skipped (RFC 9112 §2.2);
//! - the request line is `METHOD SP target SP HTTP/d.d`; a later HTTP/1 minor version
//!   (1.2 to 1.9) is read as 1.1, the version this reader conforms to (RFC 9110 §2.5),
//!   another major version gets 505, anything malformed 400, as does a field name that is
//!   not a token, a field line without a colon, or a folded field line;
//! - a body is framed by `Transfer-Encoding: chunked` or by `Content-Length`, never both
//!   (400); another transfer coding gets 501; `Content-Length` values must be digits and
//!   agree (400). A declared body past the limit gets 413 unread, and a chunked one is read
//!   no further than the limit: nothing is ever allocated from what a client declares. A
//!   chunked body's lines end in CRLF only, and its trailer lines are field lines as in a
//!   head (400 otherwise), read and ignored;
//! - an HTTP/1.1 request has exactly one `Host` field, an HTTP/1.0 one at most one, and
//!   its value is `host[:port]` (400, RFC 9112 §3.2);
//! - `Expect` is `100-continue` or nothing (417).
//!
//! Every refusal ends the connection: after a head or body it could not read, the server
//! cannot know where the next request starts.

use std::io::{self, BufRead, Read};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) use crate::protocol::header_value::is_token;

/// Bounds on what one request head may hold.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Bytes in the head: request line, fields and line ends (also bounds a chunked body's
    /// trailer section and each chunk-size line).
    pub(super) head_bytes: usize,
    /// Field lines in the head.
    pub(super) headers: usize,
    /// Bytes of body.
    pub(super) body_bytes: usize,
}

/// The HTTP version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Version {
    Http10,
    Http11,
}

/// A request head as read.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) method: String,
    pub(super) target: String,
    pub(super) version: Version,
    /// Field lines in order, names as sent, values with surrounding whitespace trimmed.
    pub(super) fields: Vec<(String, String)>,
}

/// A header field the request repeats where it may hold one value only.
#[derive(Debug)]
pub(super) struct Repeated;

/// Why a request could not be read.
#[derive(Debug)]
pub(super) enum ReadError {
    /// The connection ended (or failed) before the request did: nobody to answer.
    Closed,
    /// The request did not arrive in time.
    TimedOut,
    /// A request that must not be served: answer with this status and end the connection.
    Refused(u16, String),
}

fn refused(status: u16, why: impl Into<String>) -> ReadError {
    ReadError::Refused(status, why.into())
}

impl From<io::Error> for ReadError {
    fn from(error: io::Error) -> Self {
        match error.kind() {
            // Linux reports a socket read timeout as WouldBlock.
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ReadError::TimedOut,
            _ => ReadError::Closed,
        }
    }
}

/// How a request's body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Framing {
    /// Exactly this many bytes (0: no body).
    Length(usize),
    Chunked,
}

impl Head {
    /// The first field named `name` (case-insensitive).
    pub(super) fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The value of the one field called `name`: `Err` when the request repeats it. A
    /// field that is no list has one value (RFC 9110 §5.3), and a client that sends two
    /// lets whoever reads the request (an intermediary, the server) pick a different one.
    pub(super) fn single_field(&self, name: &str) -> Result<Option<&str>, Repeated> {
        let mut values = (self.fields.iter()).filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let first = values.next().map(|(_, v)| v.as_str());
        match values.next() {
            Some(_) => Err(Repeated),
            None => Ok(first),
        }
    }

    fn fields_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the connection stays open after this request (RFC 9112 §9.3): `close`
    /// ends it whatever the version; HTTP/1.0 stays only when it asks `keep-alive`.
    pub(super) fn keeps_alive(&self) -> bool {
        let tokens = || {
            self.fields_named("Connection")
                .flat_map(|v| v.split(','))
                .map(str::trim)
        };
        if tokens().any(|t| t.eq_ignore_ascii_case("close")) {
            return false;
        }
        match self.version {
            Version::Http11 => true,
            Version::Http10 => tokens().any(|t| t.eq_ignore_ascii_case("keep-alive")),
        }
    }

    /// Refuses (400) a head that does not name its host as RFC 9112 §3.2 asks: exactly one
    /// `Host` field, whose value is `uri-host [":" port]`. Only HTTP/1.0 may leave it out.
    pub(super) fn check_host(&self) -> Result<(), ReadError> {
        let mut hosts = self.fields_named("Host");
        match (hosts.next(), hosts.next()) {
            (None, _) if self.version == Version::Http10 => Ok(()),
            (None, _) => Err(refused(400, "an HTTP/1.1 request must name its Host")),
            (Some(_), Some(_)) => Err(refused(400, "more than one Host field")),
            (Some(host), None) if is_host(host) => Ok(()),
            (Some(_), None) => Err(refused(400, "the Host field is not host[:port]")),
        }
    }

    /// Whether the `Accept` fields let the answer be of `media_type` (`type/subtype`, no
    /// parameters), as RFC 9110 §12.5.1 reads them: the most specific media range that
    /// matches it (`type/subtype`, then `type/*`, then `*/*`; names are case-insensitive,
    /// parameters other than `q` are ignored) decides, and its `q` must not be 0. An
    /// element that cannot be read (a malformed range or `q`) counts for nothing. `None`
    /// when the request has no `Accept` field at all.
    pub(super) fn accepts(&self, media_type: &str) -> Option<bool> {
        let mut values = self.fields_named("Accept").peekable();
        values.peek()?;
        let (wanted_type, wanted_subtype) = media_type.split_once('/')?;
        // (specificity, q in thousandths) of the best match so far.
        let mut best: Option<(u8, u16)> = None;
        for element in values.flat_map(|v| split_outside_quotes(v, ',')) {
            let Some((range_type, range_subtype, q)) = media_range(element) else {
                continue;
            };
            let specificity = match (range_type, range_subtype) {
                ("*", "*") => 0,
                (t, "*") if t.eq_ignore_ascii_case(wanted_type) => 1,
                (t, s)
                    if t.eq_ignore_ascii_case(wanted_type)
                        && s.eq_ignore_ascii_case(wanted_subtype) =>
                {
                    2
                }
                _ => continue,
            };
            // Equally specific ranges: the most favourable one counts.
            if best.is_none_or(|(s, b)| specificity > s || (specificity == s && q > b)) {
                best = Some((specificity, q));
            }
        }
        Some(best.is_some_and(|(_, q)| q > 0))
    }

    /// Whether the client waits for `100 Continue` before it sends the body.
    pub(super) fn expects_continue(&self) -> Result<bool, ReadError> {
        match self.field("Expect") {
            None => Ok(false),
            Some(v) if v.eq_ignore_ascii_case("100-continue") => Ok(true),
            Some(_) => Err(refused(417, "the only expectation served is 100-continue")),
        }
    }

    /// The body's framing, refusing ambiguous framing and bodies past `max` bytes.
    pub(super) fn framing(&self, max: usize) -> Result<Framing, ReadError> {
        let mut codings = self
            .fields_named("Transfer-Encoding")
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .peekable();
        if codings.peek().is_some() {
            if self.field("Content-Length").is_some() {
                return Err(refused(
                    400,
                    "both Transfer-Encoding and Content-Length: the body's length is ambiguous",
                ));
            }
            if self.version == Version::Http10 {
                return Err(refused(400, "Transfer-Encoding in an HTTP/1.0 request"));
            }
            let codings: Vec<&str> = codings.collect();
            return match codings[..] {
                [only] if only.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
                _ => Err(refused(501, "the only transfer coding served is chunked")),
            };
        }
        let mut length: Option<&str> = None;
        for value in self
            .fields_named("Content-Length")
            .flat_map(|v| v.split(','))
        {
            let value = value.trim();
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(refused(400, "Content-Length is not a number"));
            }
            if length.is_some_and(|l| l != value) {
                return Err(refused(400, "Content-Length values disagree"));
            }
            length = Some(value);
        }
        let Some(length) = length else {
            return Ok(Framing::Length(0));
        };
        // Digits only: anything that does not parse is too large.
        match length.parse::<usize>() {
            Ok(n) if n <= max => Ok(Framing::Length(n)),
            _ => Err(too_large(max)),
        }
    }
}

/// Whether `value` is a `Host` field value: `uri-host [":" port]` (RFC 9112 §3.2, RFC 3986
/// §3.2.2): an IP literal in brackets, or a registered name (an IPv4 address is one too)
/// of unreserved characters, sub-delimiters and percent-encodings, which may be empty;
/// then a port of digits, which may be empty too.
fn is_host(value: &str) -> bool {
    let unreserved_or_sub_delim =
        |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b);
    let (host_ok, port) = match value.strip_prefix('[') {
        Some(literal) => {
            let Some((inside, after)) = literal.split_once(']') else {
                return false;
            };
            let inside_ok = !inside.is_empty()
                && inside
                    .bytes()
                    .all(|b| b == b':' || unreserved_or_sub_delim(b));
            (inside_ok, after)
        }
        None => {
            let at = value.find(':').unwrap_or(value.len());
            let (name, port) = value.split_at(at);
            let mut bytes = name.bytes();
            let mut name_ok = true;
            while let Some(b) = bytes.next() {
                name_ok &= match b {
                    b'%' => {
                        bytes.next().is_some_and(|h| h.is_ascii_hexdigit())
                            && bytes.next().is_some_and(|h| h.is_ascii_hexdigit())
                    }
                    b => unreserved_or_sub_delim(b),
                };
            }
            (name_ok, port)
        }
    };
    let port_ok = match port.strip_prefix(':') {
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
        None => port.is_empty(),
    };
    host_ok && port_ok
}

/// The pieces of `value` between `separator`s outside quoted strings (RFC 9110 §5.6.4),
/// trimmed of spaces and tabs; empty ones (a list may hold them) left out.
fn split_outside_quotes(value: &str, separator: char) -> impl Iterator<Item = &str> {
    let mut pieces = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (at, c) in value.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                pieces.push(&value[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    pieces.push(&value[start..]);
    pieces
        .into_iter()
        .map(|p| p.trim_matches([' ', '\t']))
        .filter(|p| !p.is_empty())
}

/// One element of `Accept`: `type/subtype` (or `type/*`, or `*/*`), its parameters, and
/// its weight: the type, the subtype and `q` in thousandths (1000 when absent). `None`
/// when it is malformed (`*/json` included) or its `q` is not a qvalue.
fn media_range(element: &str) -> Option<(&str, &str, u16)> {
    let mut parts = split_outside_quotes(element, ';');
    let (range_type, range_subtype) = parts.next()?.split_once('/')?;
    if !is_token(range_type) || !is_token(range_subtype) {
        return None;
    }
    if range_type == "*" && range_subtype != "*" {
        return None;
    }
    let mut q = 1000;
    for parameter in parts {
        let (name, value) = parameter.split_once('=')?;
        if !is_token(name) {
            return None;
        }
        if name.eq_ignore_ascii_case("q") {
            q = qvalue(value)?;
        }
    }
    Some((range_type, range_subtype, q))
}

/// A qvalue (RFC 9110 §12.4.2), `0` to `1` with at most three decimals, in thousandths.
fn qvalue(value: &str) -> Option<u16> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = format!("{fraction:0<3}").parse::<u16>().ok()?;
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

fn too_large(max: usize) -> ReadError {
    refused(413, format!("the body is larger than {max} bytes"))
}

/// How a line may end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// CRLF or a bare LF (RFC 9112 §2.2 lets a head's lines end in LF).
    CrLfOrLf,
    /// CRLF only: the lines of a chunked body, where a proxy that reads a bare LF
    /// otherwise would see other chunks than this server.
    CrLf,
}

/// Reads one line of at most `budget` bytes (end included) into `line`, without its line
/// end, and takes its length off `budget`. `Ok(false)`: the stream ended before any byte.
fn read_line(
    reader: &mut impl BufRead,
    budget: &mut usize,
    line: &mut Vec<u8>,
    too_long: u16,
    ends: Ends,
) -> Result<bool, ReadError> {
    line.clear();
    if *budget == 0 {
        return Err(refused(too_long, "the request head is too large"));
    }
    let read = reader
        .take(*budget as u64)
        .read_until(b'\n', line)
        .map_err(ReadError::from)?;
    *budget -= read;
    if read == 0 {
        return Ok(false);
    }
    if line.pop() != Some(b'\n') {
        return Err(if *budget == 0 {
            refused(too_long, "the request head is too large")
        } else {
            ReadError::Closed
        });
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    } else if ends == Ends::CrLf {
        return Err(refused(400, "a line of a chunked body ends without CRLF"));
    }
    Ok(true)
}

/// Visible ASCII, spaces and tabs: what a head line may hold.
fn is_text(line: &[u8]) -> bool {
    line.iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// Splits a non-empty field line (of a head or of a chunked body's trailer section) into
/// its name and its value without surrounding whitespace.
fn field_line(line: &[u8]) -> Result<(&str, &str), ReadError> {
    if !is_text(line) {
        return Err(refused(400, "a header field is not ASCII text"));
    }
    if matches!(line[0], b' ' | b'\t') {
        return Err(refused(400, "folded header fields are not accepted"));
    }
    let text = std::str::from_utf8(line).expect("checked ASCII");
    let Some((name, value)) = text.split_once(':') else {
        return Err(refused(400, "a header field without a colon"));
    };
    if !is_token(name) {
        return Err(refused(400, "a header field name is not a token"));
    }
    Ok((name, value.trim_matches([' ', '\t'])))
}

/// Reads a request head. `ReadError::Closed` if the stream ends before a whole one.
pub(super) fn read_head(reader: &mut impl BufRead, limits: &Limits) -> Result<Head, ReadError> {
    let mut budget = limits.head_bytes;
    let mut line = Vec::with_capacity(256);
    // Empty lines before the request line are skipped (RFC 9112 §2.2).
    loop {
        if !read_line(reader, &mut budget, &mut line, 431, Ends::CrLfOrLf)? {
            return Err(ReadError::Closed);
        }
        if !line.is_empty() {
            break;
        }
    }
    if !is_text(&line) {
        return Err(refused(400, "the request line is not ASCII text"));
    }
    let request_line = String::from_utf8_lossy(&line).into_owned();
    let parts: Vec<&str> = request_line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(refused(
            400,
            "a request line is METHOD SP target SP version",
        ));
    };
    if !is_token(method) || target.is_empty() || target.contains('\t') {
        return Err(refused(400, "malformed request line"));
    }
    let version = match version.as_bytes() {
        b"HTTP/1.1" => Version::Http11,
        b"HTTP/1.0" => Version::Http10,
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', minor] if minor.is_ascii_digit() => {
            Version::Http11
        }
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            return Err(refused(505, "only HTTP/1 is served"));
        }
        _ => return Err(refused(400, "malformed HTTP version")),
    };
    let mut fields = Vec::new();
    loop {
        if !read_line(reader, &mut budget, &mut line, 431, Ends::CrLfOrLf)? {
            return Err(ReadError::Closed);
        }
        if line.is_empty() {
            break;
        }
        if fields.len() == limits.headers {
            return Err(refused(431, "too many header fields"));
        }
        let (name, value) = field_line(&line)?;
        fields.push((name.to_owned(), value.to_owned()));
    }
    Ok(Head {
        method: method.to_owned(),
        target: target.to_owned(),
        version,
        fields,
    })
}

/// Reads a body framed by `framing`, at most `limits.body_bytes` of it.
pub(super) fn read_body(
    reader: &mut impl BufRead,
    framing: Framing,
    limits: &Limits,
) -> Result<Vec<u8>, ReadError> {
    match framing {
        Framing::Length(n) => {
            // `n` was checked against the limit; the buffer grows with what arrives.
            let mut body = Vec::with_capacity(n.min(64 * 1024));
            reader.take(n as u64).read_to_end(&mut body)?;
            if body.len() < n {
                return Err(ReadError::Closed);
            }
            Ok(body)
        }
        Framing::Chunked => read_chunked(reader, limits),
    }
}

fn read_chunked(reader: &mut impl BufRead, limits: &Limits) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    let mut line = Vec::new();
    loop {
        let mut budget = limits.head_bytes;
        if !read_line(reader, &mut budget, &mut line, 400, Ends::CrLf)? {
            return Err(ReadError::Closed);
        }
        let text = std::str::from_utf8(&line)
            .ok()
            .filter(|_| is_text(&line))
            .ok_or_else(|| refused(400, "a chunk size line is not ASCII text"))?;
        let size = text
            .split(';')
            .next()
            .unwrap_or("")
            .trim_end_matches([' ', '\t']);
        if size.is_empty() || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(refused(400, "malformed chunk size"));
        }
        let size = match usize::from_str_radix(size, 16) {
            Ok(size) if size <= limits.body_bytes - body.len() => size,
            _ => return Err(too_large(limits.body_bytes)),
        };
        if size == 0 {
            break;
        }
        let start = body.len();
        reader.take(size as u64).read_to_end(&mut body)?;
        if body.len() - start < size {
            return Err(ReadError::Closed);
        }
        let mut budget = 2;
        if !read_line(reader, &mut budget, &mut line, 400, Ends::CrLf)? {
            return Err(ReadError::Closed);
        }
        if !line.is_empty() {
            return Err(refused(400, "a chunk's data is longer than its size"));
        }
    }
    // The trailer section: field lines, as in a head, checked and ignored.
    let mut budget = limits.head_bytes;
    loop {
        if !read_line(reader, &mut budget, &mut line, 400, Ends::CrLf)? {
            return Err(ReadError::Closed);
        }
        if line.is_empty() {
            return Ok(body);
        }
        field_line(&line)?;
    }
}

/// The reason phrase of the statuses this transport sends.
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// A whole response: status line, `fields`, `Content-Length`, and the body unless the
/// request was `HEAD`. `close` adds `Connection: close`.
pub(super) fn response(
    status: u16,
    fields: &[(&str, &str)],
    body: &[u8],
    head_only: bool,
    close: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", reason(status)).as_bytes());
    date_field(&mut out);
    for (name, value) in fields {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    // A 204 has no body, and says nothing of its length (RFC 9110 §8.6).
    if status != 204 {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// The head of an event stream: a response that stays open, in chunks (or, for HTTP/1.0,
/// delimited by the end of the connection).
pub(super) fn stream_head(fields: &[(&str, &str)], chunked: bool) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\n".to_vec();
    date_field(&mut out);
    if chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    for (name, value) in fields {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The `Date` field every final response carries: an origin server with a clock must send
/// it in all 2xx, 3xx and 4xx responses (RFC 9110 §6.6.1), and may in 5xx ones.
fn date_field(out: &mut Vec<u8>) {
    out.extend_from_slice(format!("Date: {}\r\n", http_date(SystemTime::now())).as_bytes());
}

/// `at` as an HTTP-date in its preferred form, IMF-fixdate (RFC 9110 §5.6.7):
/// `Sun, 06 Nov 1994 08:49:37 GMT`, from the RFC 3339 form humantime writes. Times before
/// 1970 are written as 1970 began, and after 9999 as it ends.
fn http_date(at: SystemTime) -> String {
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    const LAST: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs().min(LAST));
    // `YYYY-MM-DDTHH:MM:SSZ`
    let civil = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs));
    let civil = civil.to_string();
    let month: usize = civil[5..7].parse().unwrap_or(1);
    format!(
        "{}, {} {} {} {} GMT",
        WEEKDAYS[(secs / 86_400 % 7) as usize],
        &civil[8..10],
        MONTHS[month.clamp(1, 12) - 1],
        &civil[0..4],
        &civil[11..19],
    )
}

/// One chunk of a chunked response; an empty `data` is the last chunk.
pub(super) fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod differential;

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        head_bytes: 256,
        headers: 4,
        body_bytes: 64,
    };

    fn head(raw: &str) -> Result<Head, ReadError> {
        read_head(&mut raw.as_bytes(), &LIMITS)
    }

    fn status(result: Result<impl std::fmt::Debug, ReadError>) -> u16 {
        match result {
            Err(ReadError::Refused(status, _)) => status,
            other => panic!("not refused: {other:?}"),
        }
    }

    fn request(raw: &str) -> Result<Vec<u8>, ReadError> {
        let mut reader = raw.as_bytes();
        let head = read_head(&mut reader, &LIMITS)?;
        head.expects_continue()?;
        let framing = head.framing(LIMITS.body_bytes)?;
        read_body(&mut reader, framing, &LIMITS)
    }

    #[test]
    fn a_plain_request_is_read_with_its_fields() {
        let h =
            head("\r\nPOST /mcp?x=1 HTTP/1.1\r\nHost: a\r\ncontent-type:  application/json \n\r\n")
                .unwrap();
        assert_eq!((h.method.as_str(), h.target.as_str()), ("POST", "/mcp?x=1"));
        assert_eq!(h.version, Version::Http11);
        assert_eq!(h.field("Content-Type"), Some("application/json"));
        assert!(h.keeps_alive());
    }

    #[test]
    fn a_later_http1_minor_version_is_read_as_http11() {
        // RFC 9110 §2.5: processed as the highest minor version this reader conforms to.
        let h = head("GET /mcp HTTP/1.2\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(h.version, Version::Http11);
        assert!(h.keeps_alive());
        assert!(h.check_host().is_ok());
        // And so needs its Host, as HTTP/1.1 does.
        let hostless = head("GET /mcp HTTP/1.9\r\n\r\n").unwrap();
        assert!(hostless.check_host().is_err());
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection_tokens() {
        let alive = |raw: &str| head(raw).unwrap().keeps_alive();
        assert!(!alive(
            "GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n"
        ));
        assert!(!alive("GET / HTTP/1.0\r\n\r\n"));
        assert!(alive("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
        assert!(!alive(
            "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"
        ));
        assert!(!alive(
            "GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
        ));
    }

    #[test]
    fn malformed_heads_are_refused_with_the_right_status() {
        for (raw, want) in [
            ("GET /mcp HTTP/2.0\r\n\r\n", 505),
            ("PRI * HTTP/3.0\r\n\r\n", 505),
            ("GET /mcp HTTP/0.9\r\n\r\n", 505),
            ("GET /mcp HTTP/1.10\r\n\r\n", 400),
            ("GET /mcp HTTP/1.1 x\r\n\r\n", 400),
            ("GET  /mcp HTTP/1.1\r\n\r\n", 400),
            ("GET /mcp HTTP/1\r\n\r\n", 400),
            ("G(T /mcp HTTP/1.1\r\n\r\n", 400),
            ("GET /m\u{e9} HTTP/1.1\r\n\r\n", 400),
            ("GET /mcp HTTP/1.1\r\nNo colon\r\n\r\n", 400),
            ("GET /mcp HTTP/1.1\r\nBad name: x\r\n\r\n", 400),
            ("GET /mcp HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400),
            ("GET /mcp HTTP/1.1\r\nA: b\x00c\r\n\r\n", 400),
            ("GET /mcp HTTP/1.1\r\nA: b\rc\r\n\r\n", 400),
            (
                "GET /mcp HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n",
                431,
            ),
        ] {
            assert_eq!(status(head(raw)), want, "{raw:?}");
        }
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(300));
        assert_eq!(status(head(&long)), 431);
    }

    #[test]
    fn an_http_1_1_head_names_one_valid_host() {
        let host = |raw: &str| head(raw).unwrap().check_host();
        for ok in [
            "GET /mcp HTTP/1.1\r\nHost: localhost:3000\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: [v1.fe80::a+en1]\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: my%2Dhost.example:\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost:\r\n\r\n",
            "GET /mcp HTTP/1.0\r\n\r\n",
            "GET http://localhost/mcp HTTP/1.1\r\nHost: localhost\r\n\r\n",
        ] {
            assert!(host(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "GET /mcp HTTP/1.1\r\n\r\n",
            "GET http://localhost/mcp HTTP/1.1\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: a\r\nHOST: a\r\n\r\n",
            "GET /mcp HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET /mcp HTTP/1.0\r\nHost: a b\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: a:b\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: a:1:2\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: a/b\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: a@b\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: %zz\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: [::1\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: []\r\n\r\n",
            "GET /mcp HTTP/1.1\r\nHost: [::1]x\r\n\r\n",
        ] {
            assert_eq!(status(host(bad)), 400, "{bad:?}");
        }
    }

    #[test]
    fn accept_is_read_by_its_most_specific_range_and_q_0_refuses() {
        let accepts = |fields: &str| {
            let fields = match fields {
                "" => String::new(),
                fields => format!("{fields}\r\n"),
            };
            head(&format!("GET /mcp HTTP/1.1\r\n{fields}\r\n"))
                .unwrap()
                .accepts("text/event-stream")
        };
        assert_eq!(accepts(""), None);
        for yes in [
            "Accept: text/event-stream",
            "Accept: application/json, text/event-stream",
            "Accept: TEXT/Event-Stream",
            "Accept: */*",
            "Accept: text/*",
            "Accept: text/event-stream;q=0.001",
            "Accept: text/event-stream ; Q=1.000",
            "Accept: text/event-stream;charset=utf-8",
            "Accept: text/event-stream;x=\"a;q=0,b\"",
            "Accept: */*;q=0, text/event-stream",
            "Accept: text/*;q=0, text/event-stream;q=0.5",
            "Accept: text/event-stream;q=0, text/event-stream;q=0.2",
            "Accept: application/json\r\nAccept: text/event-stream",
            "Accept: ,, text/event-stream ,",
            "Accept: text/event-stream;q=bad, */*",
        ] {
            assert_eq!(accepts(yes), Some(true), "{yes:?}");
        }
        for no in [
            "Accept:",
            "Accept: application/json",
            "Accept: text/event-stream;q=0",
            "Accept: text/event-stream;Q=0.000",
            "Accept: text/event-stream ;\tq=0",
            "Accept: text/event-stream;q=0, */*",
            "Accept: text/event-stream;q =0",
            "Accept: text/event-stream;q=0, text/*",
            "Accept: text/*;q=0",
            "Accept: */*;q=0",
            "Accept: text/event-streamx",
            "Accept: text/event-stream-x, textual/event-stream",
            "Accept: text/event-stream;q=1.5",
            "Accept: text/event-stream;q=0.0001",
            "Accept: text/event-stream;q=",
            "Accept: text/event-stream;q",
            "Accept: */event-stream",
            "Accept: text/",
            "Accept: text/event-stream/x",
            "Accept: \"text/event-stream\"",
        ] {
            assert_eq!(accepts(no), Some(false), "{no:?}");
        }
    }

    #[test]
    fn a_head_cut_short_is_closed_not_refused() {
        for raw in [
            "",
            "\r\n",
            "GET /mcp HTTP/1.1",
            "GET /mcp HTTP/1.1\r\nA: b\r\n",
        ] {
            assert!(matches!(head(raw), Err(ReadError::Closed)), "{raw:?}");
        }
    }

    #[test]
    fn bodies_are_framed_by_length_or_chunks() {
        let post = "POST /mcp HTTP/1.1\r\n";
        assert_eq!(
            request(&format!("{post}Content-Length: 3\r\n\r\nabcdef")).unwrap(),
            b"abc"
        );
        assert_eq!(request(&format!("{post}\r\nabc")).unwrap(), b"");
        assert_eq!(
            request(&format!(
                "{post}Content-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc"
            ))
            .unwrap(),
            b"abc"
        );
        let chunked = format!(
            "{post}Transfer-Encoding: Chunked\r\n\r\n3;ext=1\r\nabc\r\nA \r\n0123456789\r\n0\r\nT: x\r\n\r\n"
        );
        assert_eq!(request(&chunked).unwrap(), b"abc0123456789");
    }

    #[test]
    fn chunked_lines_end_in_crlf_only() {
        let post = "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        for chunks in [
            "3\nabc\r\n0\r\n\r\n",
            "3\r\nabc\n0\r\n\r\n",
            "3\r\nabc\r\n0\n\r\n",
            "3\r\nabc\r\n0\r\nT: x\n\r\n",
            "3\r\nabc\r\n0\r\n\n",
        ] {
            assert_eq!(
                status(request(&format!("{post}{chunks}"))),
                400,
                "{chunks:?}"
            );
        }
    }

    #[test]
    fn ambiguous_or_oversized_framing_is_refused() {
        let post = "POST /mcp HTTP/1.1\r\n";
        for (fields, want) in [
            ("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", 400),
            ("Transfer-Encoding: gzip, chunked\r\n", 501),
            ("Transfer-Encoding: identity\r\n", 501),
            ("Content-Length: 3\r\nContent-Length: 4\r\n", 400),
            ("Content-Length: +3\r\n", 400),
            ("Content-Length: -1\r\n", 400),
            ("Content-Length: \r\n", 400),
            ("Content-Length: 65\r\n", 413),
            ("Content-Length: 18446744073709551616\r\n", 413),
            ("Content-Length: 99999999999999999999999999999\r\n", 413),
            ("Expect: 200-ok\r\n", 417),
        ] {
            assert_eq!(
                status(request(&format!("{post}{fields}\r\n"))),
                want,
                "{fields:?}"
            );
        }
        let old = "POST /mcp HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(status(request(old)), 400);
    }

    #[test]
    fn malformed_or_oversized_chunks_are_refused() {
        let post = "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (chunks, want) in [
            ("x\r\n", 400),
            ("-1\r\n", 400),
            ("\r\n", 400),
            ("3\r\nabcd\r\n0\r\n\r\n", 400),
            ("41\r\n", 413),
            ("40\r\n", 0),
            ("20\r\n0123456789abcdef0123456789abcdef\r\n21\r\n", 413),
            ("ffffffffffffffffffffffff\r\n", 413),
            // Trailer lines are field lines, as in a head.
            ("0\r\nNo colon\r\n\r\n", 400),
            ("0\r\n: no name\r\n\r\n", 400),
            ("0\r\n folded\r\n\r\n", 400),
        ] {
            let result = request(&format!("{post}{chunks}"));
            if want == 0 {
                assert!(matches!(result, Err(ReadError::Closed)), "{chunks:?}");
            } else {
                assert_eq!(status(result), want, "{chunks:?}");
            }
        }
    }

    #[test]
    fn a_body_cut_short_is_closed() {
        let result = request("POST /mcp HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
        assert!(matches!(result, Err(ReadError::Closed)));
        let result = request("POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab");
        assert!(matches!(result, Err(ReadError::Closed)));
    }

    #[test]
    fn dates_are_written_as_imf_fixdate() {
        let at = |secs: u64| http_date(UNIX_EPOCH + std::time::Duration::from_secs(secs));
        for (secs, date) in [
            (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
            (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT"),
            (951_782_400, "Tue, 29 Feb 2000 00:00:00 GMT"),
            (1_709_251_199, "Thu, 29 Feb 2024 23:59:59 GMT"),
            (4_107_542_400, "Mon, 01 Mar 2100 00:00:00 GMT"),
        ] {
            assert_eq!(at(secs), date, "{secs}");
        }
        assert_eq!(
            http_date(UNIX_EPOCH - std::time::Duration::from_secs(1)),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
        assert_eq!(at(u64::MAX / 2), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn responses_carry_their_length_and_chunks_their_size() {
        let r = response(
            200,
            &[("Content-Type", "application/json")],
            b"{}",
            false,
            true,
        );
        let r = String::from_utf8(r).unwrap();
        let (status_line, rest) = r.split_once("\r\n").unwrap();
        assert_eq!(status_line, "HTTP/1.1 200 OK");
        let (date, rest) = rest.split_once("\r\n").unwrap();
        assert!(
            date.starts_with("Date: ") && date.ends_with(" GMT"),
            "{date}"
        );
        assert_eq!(
            rest,
            "Content-Type: application/json\r\nContent-Length: 2\r\n\
             Connection: close\r\n\r\n{}"
        );
        let r = response(405, &[], b"abc", true, false);
        assert!(r.ends_with(b"Content-Length: 3\r\n\r\n"));
        assert_eq!(chunk(b"hello, world"), b"c\r\nhello, world\r\n");
        assert_eq!(chunk(b""), b"0\r\n\r\n");
    }
}
