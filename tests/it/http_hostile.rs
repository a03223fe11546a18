//! Hostile input over real sockets: raw bytes to a running `HttpServer`, property-tested.
//! Whatever a client sends (arbitrary bytes, or plausible HTTP/1.1 with random methods,
//! paths, headers from the transport's real set, framing and bodies):
//!
//! * nothing panics on the transport's threads, and the connection ends within a hang
//!   bound;
//! * the bytes are read as the transport's HTTP/1.1 layer documents (`src/server/http/`,
//!   `wire.rs` and `conn.rs`), which [`conversation`] restates from the bytes alone: every
//!   request read whole gets one response, in order (a `GET` event stream stays open once
//!   its head came); a request that breaks a rule gets its refusal (400, 413, 417, 431, 501
//!   or 505, with a JSON-RPC -32600 error, id null, and `Connection: close`) and nothing
//!   after it is answered; so does one the server's authentication hook refuses (401 with
//!   its challenge, decided from the head: its body is never read, nor `100 Continue`
//!   sent), which the hook does for [`REFUSED_CREDENTIALS`], taking every other request as
//!   sent by one identity; a request the bytes end inside gets nothing; `100 Continue`
//!   comes, just before its answer, exactly when an HTTP/1.1 request with a body asks for
//!   it (the writer sends it once the answers before it are written); a response
//!   to `HEAD` has no content (a refusal's neither, once the head was read whole), and
//!   `Connection: close` is sent exactly when the connection ends after the response (RFC
//!   9112 §9.3);
//! * the status of a request read whole is the one the transport documents for the
//!   situation (`src/server/http/mod.rs`, the README's HTTP section); never 500, which is
//!   what a request dropped unanswered gets;
//! * a body the server calls `application/json` is a JSON-RPC message, an error object on
//!   every error status, carrying the request's id where it had one;
//! * afterwards the same server still serves initialize -> tools/call (task) -> tasks/get,
//!   and a stateless 2026-07-28 call.
//!
//! The plausible requests go one connection each, in order; pipelined on one keep-alive
//! connection (each answered, in order, and handled in order); and from several clients
//! at once.
//!
//! The client writes the whole request and then closes its write side, so a body shorter
//! than its framing promises, or a head cut short, ends in end-of-file: the server answers
//! nothing and closes (it would wait for the rest up to `read_timeout`, then answer 408).
//! After a refusal the server reads on for a moment, so its answer is not lost to a reset;
//! only after a request that ends the connection (`Connection: close`, HTTP/1.0) are bytes
//! of ours left unread (what followed the body its framing gave). Only there may the close
//! come as a reset, which can swallow answers, and only then may one be missing.
//!
//! Every read is bounded by [`HANG`]; nothing sleeps to synchronise. The file takes about
//! five seconds in a debug build; set `PROPTEST_CASES` to hunt longer.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use mcp_task_store::server::{HttpOptions, HttpServer, RequestHead, Unauthorized};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

use crate::fixtures::{
    demo_http_server, kind, names_a_member_twice, valid_id, Kind, SEP_VERSION, SUPPORTED,
    VERSION_KEY,
};
use crate::raw_http::Reply;

/// Longest a connection may take to end (or an event stream to open). Only failing runs
/// wait this long.
const HANG: Duration = Duration::from_secs(10);
/// Small, so bodies past it stay cheap to send.
const MAX_BODY: usize = 16 * 1024;
/// The transport's caps on a request head: bytes (line ends included) and field lines.
const HEAD_BYTES: usize = 64 * 1024;
const HEAD_FIELDS: usize = 100;
/// A browser origin the server is told to allow besides loopback ones.
const LISTED_ORIGIN: &str = "https://app.example";

/// The credentials the server's authentication hook refuses (one `Authorization` field
/// with exactly this value); it takes every other request as sent by [`ANYONE`].
const REFUSED_CREDENTIALS: &str = "Bearer refused";
const ANYONE: &str = "anyone";
/// The challenge its refusals carry.
const CHALLENGE: &str = "Bearer realm=\"hostile\"";

fn server() -> HttpServer {
    let hook = |head: &RequestHead<'_>| match head.header("Authorization") {
        Some(REFUSED_CREDENTIALS) => Err(Unauthorized::new("refused").with_challenge(CHALLENGE)),
        _ => Ok(ANYONE.to_owned()),
    };
    demo_http_server(HttpOptions {
        max_body_bytes: MAX_BODY,
        allowed_origins: vec![LISTED_ORIGIN.into()],
        authenticate: Some(Arc::new(hook)),
        ..HttpOptions::default()
    })
    .0
}

/// The properties' settings: 128 cases each, or `PROPTEST_CASES`.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(128);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Panics so far on the transport's threads (`mcp-http-*`), counted by a hook installed on
/// first use. Tools panic on purpose in other tests, on threads of their own; nothing may
/// panic on the transport's.
fn transport_panics() -> usize {
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = std::thread::current().name().map(str::to_owned);
            if name.is_some_and(|n| n.starts_with("mcp-http")) {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}

// ----- the wire --------------------------------------------------------------------------

/// How a connection ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The server closed it.
    Closed,
    /// The server reset it (it closed with bytes of ours unread).
    Reset,
    /// An event stream's head arrived; the stream stays open.
    Stream,
}

#[derive(Debug)]
struct Exchange {
    replies: Vec<Reply>,
    /// Interim statuses after the last response: a `100 Continue` for a body that never
    /// came whole.
    interim: Vec<u16>,
    end: End,
}

/// Sends `raw` on a fresh connection, closes the write side, and reads every response
/// until the server closes the connection or an event stream opens. `bodiless[n]`: the
/// `n`th response answers a `HEAD` request, so it has no content. Errs on a hang or on
/// bytes that are not HTTP responses.
fn exchange(addr: SocketAddr, raw: &[u8], bodiless: &[bool]) -> Result<Exchange, String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            // The server may stop reading (it refused the head): its answer still counts.
            let _ = writer.write_all(raw);
            let _ = writer.shutdown(Shutdown::Write);
        });
        let read = read_until_end(&stream);
        // A writer still blocked on a server that stopped reading gives up now.
        let _ = stream.shutdown(Shutdown::Both);
        let (raw, end) = read?;
        let (replies, interim, tail) = parse_replies(&raw, bodiless)?;
        let end = if tail == Tail::Stream {
            End::Stream
        } else {
            end
        };
        if let Tail::Broken(why) = tail {
            // A reset may cut the last response short.
            if end != End::Reset {
                return Err(format!("{why}: {:?}", String::from_utf8_lossy(&raw)));
            }
        }
        Ok(Exchange {
            replies,
            interim,
            end,
        })
    })
}

fn read_until_end(mut stream: &TcpStream) -> Result<(Vec<u8>, End), String> {
    let deadline = Instant::now() + HANG;
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "hang: the connection did not end within {HANG:?}; got {:?}",
                String::from_utf8_lossy(&raw)
            ));
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return Ok((raw, End::Closed)),
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if opens_stream(&raw) {
                    return Ok((raw, End::Stream));
                }
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok((raw, End::Reset)),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// Whether `raw` holds the whole head of an event stream (the transport writes it itself).
fn opens_stream(raw: &[u8]) -> bool {
    let marker = b"\r\nContent-Type: text/event-stream\r\n";
    find(raw, marker).is_some_and(|at| find(&raw[at..], b"\r\n\r\n").is_some())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What followed the last whole response.
#[derive(Debug, PartialEq)]
enum Tail {
    Nothing,
    /// An event stream's head: the stream's events follow.
    Stream,
    /// Bytes that are not (the start of) a response.
    Broken(String),
}

/// Splits `raw` into responses, strictly: a status line `HTTP/x.y NNN reason`, header lines
/// `Name: value`, then exactly the body its `Content-Length` or chunked coding frames (none
/// when `bodiless` says it answers `HEAD`). Also returns the interim statuses after the
/// last response.
fn parse_replies(
    mut raw: &[u8],
    bodiless: &[bool],
) -> Result<(Vec<Reply>, Vec<u16>, Tail), String> {
    let mut replies = Vec::new();
    let mut interim = Vec::new();
    while !raw.is_empty() {
        let Some(end) = find(raw, b"\r\n\r\n") else {
            let why = "a response head that never ends".into();
            return Ok((replies, interim, Tail::Broken(why)));
        };
        let Ok(text) = std::str::from_utf8(&raw[..end]) else {
            return Err("a response head that is not text".into());
        };
        raw = &raw[end + 4..];
        let mut lines = text.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let status = parse_status_line(status_line)
            .ok_or_else(|| format!("not a status line: {status_line:?}"))?;
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line
                .split_once(": ")
                .filter(|(n, _)| !n.is_empty() && !n.contains(char::is_whitespace))
                .ok_or_else(|| format!("not a header line: {line:?}"))?;
            headers.push((name.to_string(), value.to_string()));
        }
        let mut reply = Reply {
            interim: Vec::new(),
            status,
            headers,
            body: Vec::new(),
        };
        if (100..200).contains(&status) {
            interim.push(status);
            continue;
        }
        reply.interim = std::mem::take(&mut interim);
        if status == 200 && reply.is_stream() {
            replies.push(reply);
            return Ok((replies, interim, Tail::Stream));
        }
        if bodiless.get(replies.len()).copied().unwrap_or(false) {
            // RFC 9112 §6.3: whatever its fields say, it ends with its head.
            if !raw.is_empty() && !raw.starts_with(b"HTTP/") {
                return Err(format!(
                    "content after the response to a HEAD request ({reply:?}): {:?}",
                    String::from_utf8_lossy(raw)
                ));
            }
        } else if status != 204 && status != 304 {
            let chunked = reply
                .header("Transfer-Encoding")
                .is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
            if chunked {
                let Some((data, used)) = dechunk(raw) else {
                    replies.push(reply);
                    let why = "a broken chunked body".into();
                    return Ok((replies, interim, Tail::Broken(why)));
                };
                reply.body = data;
                raw = &raw[used..];
            } else {
                let length: usize = reply
                    .header("Content-Length")
                    .ok_or("a response with neither Content-Length nor chunked coding")?
                    .parse()
                    .map_err(|_| "a Content-Length that is not a number")?;
                if raw.len() < length {
                    replies.push(reply);
                    return Ok((replies, interim, Tail::Broken("a body cut short".into())));
                }
                reply.body = raw[..length].to_vec();
                raw = &raw[length..];
            }
        }
        replies.push(reply);
    }
    Ok((replies, interim, Tail::Nothing))
}

fn parse_status_line(line: &str) -> Option<u16> {
    let rest = line.strip_prefix("HTTP/")?;
    let (version, rest) = rest.split_once(' ')?;
    let (major, minor) = version.split_once('.')?;
    let digit = |s: &str| s.len() == 1 && s.as_bytes()[0].is_ascii_digit();
    if !digit(major) || !digit(minor) {
        return None;
    }
    let code = rest.get(..3)?;
    if !code.bytes().all(|b| b.is_ascii_digit()) || !matches!(rest.as_bytes().get(3), Some(b' ')) {
        return None;
    }
    code.parse().ok()
}

/// A chunked response body (RFC 9112 §7.1, without trailers): its data and the bytes it
/// took, or `None` when it is broken or cut short.
fn dechunk(wire: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        let line_end = find(&wire[at..], b"\r\n")?;
        let line = &wire[at..at + line_end];
        let size = line.split(|&b| b == b';').next().unwrap_or(b"");
        let size = std::str::from_utf8(size)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|s| usize::from_str_radix(s, 16).ok())?;
        at += line_end + 2;
        if size == 0 {
            return (wire.get(at..at + 2) == Some(b"\r\n")).then_some((data, at + 2));
        }
        data.extend_from_slice(wire.get(at..at + size)?);
        at += size;
        if wire.get(at..at + 2) != Some(b"\r\n") {
            return None;
        }
        at += 2;
    }
}

// ----- how the server reads the bytes ----------------------------------------------------
//
// The rules of `wire.rs` and `conn.rs`, restated from the bytes alone: what the server makes
// of each request a client sends on one connection, until it answers nothing more.

/// A request head as the transport reads it.
#[derive(Clone, Debug)]
struct Head {
    method: String,
    target: String,
    http10: bool,
    /// Field lines in order: names as sent, values without the spaces and tabs around them.
    fields: Vec<(String, String)>,
}

impl Head {
    fn fields_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first field called `name` (names are case-insensitive).
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The comma-separated elements of every field called `name`, trimmed.
    fn list<'a>(&'a self, name: &'a str) -> Vec<&'a str> {
        self.fields_named(name)
            .flat_map(|v| v.split(','))
            .map(|t| t.trim_matches([' ', '\t']))
            .collect()
    }

    /// Whether the connection stays open after the response (RFC 9112 §9.3): not when
    /// `Connection` names `close`; else in HTTP/1.1, and in HTTP/1.0 when it names
    /// `keep-alive`.
    fn keeps_alive(&self) -> bool {
        let options = self.list("Connection");
        let named = |option: &str| options.iter().any(|o| o.eq_ignore_ascii_case(option));
        !named("close") && (!self.http10 || named("keep-alive"))
    }
}

/// What the server makes of one request on a connection.
#[derive(Debug)]
enum Step {
    /// Read whole, and served.
    Served {
        head: Head,
        body: Vec<u8>,
        /// A `100 Continue` is due before the body: it was asked for, and there is a body.
        continued: bool,
    },
    /// Refused with `status`, after which the connection ends; `head` once it was read
    /// whole.
    Refused {
        status: u16,
        head: Option<Head>,
        continued: bool,
    },
    /// The bytes end inside it: nothing to answer.
    Cut { continued: bool },
}

impl Step {
    fn head(&self) -> Option<&Head> {
        match self {
            Step::Served { head, .. } => Some(head),
            Step::Refused { head, .. } => head.as_ref(),
            Step::Cut { .. } => None,
        }
    }

    fn continued(&self) -> bool {
        match self {
            Step::Served { continued, .. }
            | Step::Refused { continued, .. }
            | Step::Cut { continued } => *continued,
        }
    }

    /// Whether its response has no content: it answers a head read whole as `HEAD`.
    fn bodiless(&self) -> bool {
        self.head().is_some_and(|h| h.method == "HEAD")
    }

    /// Whether the connection ends after its response.
    fn closes(&self) -> bool {
        match self {
            Step::Served { head, .. } => !head.keeps_alive(),
            _ => true,
        }
    }
}

/// What the server makes of all the bytes a client sends on one connection.
#[derive(Debug)]
struct Conversation {
    /// Each request in order, up to the one after which the server reads no more.
    steps: Vec<Step>,
    /// Whether bytes are left unread when the server closes (after a request that ends
    /// the connection): the close may then come as a reset.
    unread: bool,
}

impl Conversation {
    /// Whether each response (in order) answers `HEAD`.
    fn bodiless(&self) -> Vec<bool> {
        self.steps.iter().map(Step::bodiless).collect()
    }

    /// The requests that get a response.
    fn answered(&self) -> impl Iterator<Item = &Step> {
        self.steps
            .iter()
            .filter(|step| !matches!(step, Step::Cut { .. }))
    }
}

/// Why a request was not read whole.
enum Stop {
    Refused(u16),
    /// The bytes ended first.
    Cut,
}

/// Takes one line of at most `budget` bytes (its LF included) off `rest`, and its length
/// off `budget`: the line without its end (LF or CRLF), or `None` when no byte is left. A
/// line that does not end within the budget gets `too_long`; one the bytes end inside,
/// `Stop::Cut`.
/// `crlf_only`: a line that ends in a bare LF is refused (400), as in a chunked body.
fn take_line<'a>(
    rest: &mut &'a [u8],
    budget: &mut usize,
    too_long: u16,
    crlf_only: bool,
) -> Result<Option<&'a [u8]>, Stop> {
    if *budget == 0 {
        return Err(Stop::Refused(too_long));
    }
    let all: &'a [u8] = rest;
    let window = &all[..all.len().min(*budget)];
    match window.iter().position(|&b| b == b'\n') {
        Some(lf) => {
            *budget -= lf + 1;
            *rest = &all[lf + 1..];
            let line = &window[..lf];
            match line.strip_suffix(b"\r") {
                Some(line) => Ok(Some(line)),
                None if crlf_only => Err(Stop::Refused(400)),
                None => Ok(Some(line)),
            }
        }
        None if window.is_empty() => Ok(None),
        None => {
            *budget -= window.len();
            *rest = &all[window.len()..];
            Err(if *budget == 0 {
                Stop::Refused(too_long)
            } else {
                Stop::Cut
            })
        }
    }
}

/// What a head line may hold: visible ASCII, spaces and tabs.
fn text(line: &[u8]) -> bool {
    line.iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// An RFC 9110 token.
fn token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn ascii(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("checked to be ASCII")
}

/// A request head: empty lines first are skipped; the request line is `METHOD SP target SP
/// HTTP/d.d` (1.0 and 1.1 are served, a later 1.x as 1.1, other versions get 505,
/// anything else 400); each
/// field line is `token ":" value`, not folded (else 400); all ASCII text (else 400), at
/// most [`HEAD_BYTES`] and [`HEAD_FIELDS`] fields (else 431).
fn read_head(rest: &mut &[u8]) -> Result<Head, Stop> {
    let mut budget = HEAD_BYTES;
    let line = loop {
        match take_line(rest, &mut budget, 431, false)? {
            None => return Err(Stop::Cut),
            Some([]) => {}
            Some(line) => break line,
        }
    };
    if !text(line) {
        return Err(Stop::Refused(400));
    }
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(Stop::Refused(400));
    };
    if !token(method) || target.is_empty() || target.contains(&b'\t') {
        return Err(Stop::Refused(400));
    }
    let http10 = match version {
        b"HTTP/1.1" => false,
        b"HTTP/1.0" => true,
        // RFC 9110 §2.5: a later minor version is read as the latest one the server knows.
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', minor] if minor.is_ascii_digit() => false,
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            return Err(Stop::Refused(505))
        }
        _ => return Err(Stop::Refused(400)),
    };
    let mut fields = Vec::new();
    loop {
        let line = take_line(rest, &mut budget, 431, false)?.ok_or(Stop::Cut)?;
        if line.is_empty() {
            break;
        }
        if fields.len() == HEAD_FIELDS {
            return Err(Stop::Refused(431));
        }
        fields.push(field_line(line)?);
    }
    Ok(Head {
        method: ascii(method),
        target: ascii(target),
        http10,
        fields,
    })
}

/// A field line (of a head, or of a chunked body's trailer section): `token ":" value`,
/// not folded, ASCII text; else 400. The value without surrounding whitespace.
fn field_line(line: &[u8]) -> Result<(String, String), Stop> {
    if !text(line) || matches!(line[0], b' ' | b'\t') {
        return Err(Stop::Refused(400));
    }
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return Err(Stop::Refused(400));
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if !token(name) {
        return Err(Stop::Refused(400));
    }
    Ok((
        ascii(name),
        ascii(value).trim_matches([' ', '\t']).to_string(),
    ))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Framing {
    Length(usize),
    Chunked,
}

/// How a request's body is framed, or the status that refuses it: `Transfer-Encoding`
/// exactly `chunked` (with `Content-Length` too, or in HTTP/1.0: 400; another coding: 501),
/// else `Content-Length` values that are all the same digits (else 400) and at most
/// [`MAX_BODY`] (else 413, digits past 64 bits included), else no body.
fn framing(head: &Head) -> Result<Framing, u16> {
    let codings = head.list("Transfer-Encoding");
    if !codings.is_empty() {
        return match codings[..] {
            _ if head.field("Content-Length").is_some() || head.http10 => Err(400),
            [only] if only.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
            _ => Err(501),
        };
    }
    let lengths = head.list("Content-Length");
    let Some(&first) = lengths.first() else {
        return Ok(Framing::Length(0));
    };
    let digits = |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit());
    if !lengths.iter().all(|&l| digits(l) && l == first) {
        return Err(400);
    }
    match first.parse::<usize>() {
        Ok(n) if n <= MAX_BODY => Ok(Framing::Length(n)),
        _ => Err(413),
    }
}

/// A chunked body (RFC 9112 §7.1): size lines of hex digits (an extension after `;`), each
/// chunk's data followed by CRLF, then trailer field lines up to an empty one, every line
/// ending in CRLF. Malformed: 400; more than [`MAX_BODY`] in all (a size past 64 bits included):
/// 413.
fn read_chunked(rest: &mut &[u8]) -> Result<Vec<u8>, Stop> {
    let mut body = Vec::new();
    loop {
        let mut budget = HEAD_BYTES;
        let line = take_line(rest, &mut budget, 400, true)?.ok_or(Stop::Cut)?;
        if !text(line) {
            return Err(Stop::Refused(400));
        }
        let size = line.split(|&b| b == b';').next().unwrap_or(b"");
        let size = ascii(size);
        let size = size.trim_end_matches([' ', '\t']);
        if size.is_empty() || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Stop::Refused(400));
        }
        let size = match usize::from_str_radix(size, 16) {
            Ok(size) if size <= MAX_BODY - body.len() => size,
            _ => return Err(Stop::Refused(413)),
        };
        if size == 0 {
            break;
        }
        if rest.len() < size {
            *rest = &[];
            return Err(Stop::Cut);
        }
        body.extend_from_slice(&rest[..size]);
        *rest = &rest[size..];
        let mut budget = 2;
        let line = take_line(rest, &mut budget, 400, true)?.ok_or(Stop::Cut)?;
        if !line.is_empty() {
            return Err(Stop::Refused(400));
        }
    }
    let mut budget = HEAD_BYTES;
    loop {
        let line = take_line(rest, &mut budget, 400, true)?.ok_or(Stop::Cut)?;
        if line.is_empty() {
            return Ok(body);
        }
        field_line(line)?;
    }
}

/// Whether a head names its host as RFC 9112 §3.2 asks: one `Host` field (HTTP/1.0 may
/// have none) whose value is `uri-host [":" port]` (RFC 3986 §3.2.2).
fn names_its_host(head: &Head) -> bool {
    let hosts: Vec<&str> = head.fields_named("Host").collect();
    let host = match hosts[..] {
        [] => return head.http10,
        [host] => host,
        _ => return false,
    };
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b);
    let (name_ok, port) = if let Some(literal) = host.strip_prefix('[') {
        match literal.split_once(']') {
            Some((inside, port)) => (
                !inside.is_empty() && inside.bytes().all(|b| b == b':' || plain(b)),
                port,
            ),
            None => return false,
        }
    } else {
        let (name, port) = host.split_at(host.find(':').unwrap_or(host.len()));
        let bytes = name.as_bytes();
        let mut ok = true;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                ok &= bytes
                    .get(i + 1..i + 3)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
                i += 3;
            } else {
                ok &= plain(bytes[i]);
                i += 1;
            }
        }
        (ok, port)
    };
    name_ok
        && (port.is_empty()
            || port
                .strip_prefix(':')
                .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit())))
}

/// Reads one request off `rest`: its head, then its `Host` (else 400), then `Expect`
/// (`100-continue` or nothing, else 417), then its framing, then its body.
fn next_step(rest: &mut &[u8]) -> Step {
    let head = match read_head(rest) {
        Ok(head) => head,
        Err(Stop::Cut) => return Step::Cut { continued: false },
        Err(Stop::Refused(status)) => {
            return Step::Refused {
                status,
                head: None,
                continued: false,
            }
        }
    };
    let refused = |status, head, continued| Step::Refused {
        status,
        head: Some(head),
        continued,
    };
    if !names_its_host(&head) {
        return refused(400, head, false);
    }
    let expects = match head.field("Expect") {
        None => false,
        Some(e) if e.eq_ignore_ascii_case("100-continue") => true,
        Some(_) => return refused(417, head, false),
    };
    let framing = match framing(&head) {
        Ok(framing) => framing,
        Err(status) => return refused(status, head, false),
    };
    // The authentication hook, before the body is read (nor 100 Continue sent).
    if turned_away(&head) {
        return refused(401, head, false);
    }
    // An HTTP/1.0 client's expectation is ignored: no interim answer to it (RFC 9110
    // §10.1.1, §15.2).
    let continued = expects && framing != Framing::Length(0) && !head.http10;
    let body = match framing {
        Framing::Length(n) if rest.len() < n => Err(Stop::Cut),
        Framing::Length(n) => {
            let body = rest[..n].to_vec();
            *rest = &rest[n..];
            Ok(body)
        }
        Framing::Chunked => read_chunked(rest),
    };
    match body {
        Ok(body) => Step::Served {
            head,
            body,
            continued,
        },
        Err(Stop::Cut) => Step::Cut { continued },
        Err(Stop::Refused(status)) => refused(status, head, continued),
    }
}

/// Whether a page of `origin` may use the server (else 403): the listed origin, and any
/// on a loopback host (`localhost`, `127.0.0.1`, `[::1]`, any port or scheme).
fn origin_allowed(origin: &str) -> bool {
    let authority = origin.split("://").nth(1).unwrap_or("");
    let authority = authority.trim_end_matches('/');
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    origin == LISTED_ORIGIN || ["localhost", "127.0.0.1", "::1"].contains(&host)
}

/// Whether the authentication hook refuses a request: it sees those `/mcp` would otherwise
/// serve (not another path, a foreign origin, an unknown protocol version, a preflight),
/// and refuses [`REFUSED_CREDENTIALS`] in a single `Authorization` field.
fn turned_away(head: &Head) -> bool {
    let origin_ok = head.field("Origin").is_none_or(origin_allowed);
    let version_ok = (head.field("MCP-Protocol-Version")).is_none_or(|v| SUPPORTED.contains(&v));
    let credentials: Vec<&str> = head.fields_named("Authorization").collect();
    targets_mcp(head)
        && origin_ok
        && version_ok
        && head.method != "OPTIONS"
        && credentials == [REFUSED_CREDENTIALS]
}

/// What the server makes of `raw`, sent on one connection and followed by end-of-file: its
/// requests in order until one is refused, cut short, or ends the connection.
fn conversation(raw: &[u8]) -> Conversation {
    let mut rest = raw;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        let step = next_step(&mut rest);
        let goes_on = matches!(&step, Step::Served { .. }) && !step.closes();
        steps.push(step);
        if !goes_on {
            break;
        }
    }
    // A refusal reads on (and drops) what follows; a request cut short read it all.
    let unread = !rest.is_empty() && matches!(steps.last(), Some(Step::Served { .. }));
    Conversation { steps, unread }
}

// ----- what every response must be ------------------------------------------------------

/// Statuses the transport sends to these tests for a request read whole: no 500 (a request
/// dropped unanswered), no 503 (too many sessions or connections, or stopping).
const SERVED: &[u16] = &[200, 202, 204, 400, 403, 404, 405, 406, 415];
/// Statuses of its refusals (408 needs a client slower than these tests).
const REFUSALS: &[u16] = &[400, 401, 413, 417, 431, 501, 505];

/// What any response must be, whatever was asked: a known status, only `100 Continue`
/// before it, and a body that is a JSON-RPC message when it says `application/json` (an
/// error object on an error status), else none. `bodiless`: it answers `HEAD`, so it has
/// no content, but says how long its body would be.
fn check_reply(reply: &Reply, bodiless: bool) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{why}: {reply:?}"));
    if !SERVED.contains(&reply.status) && !REFUSALS.contains(&reply.status) {
        return fail("unexpected status");
    }
    if reply.interim.iter().any(|&s| s != 100) {
        return fail("unexpected interim response");
    }
    if reply.status == 204 && reply.header("Content-Length").is_some() {
        return fail("a 204 with a Content-Length (RFC 9110 §8.6)");
    }
    if bodiless {
        if reply.header("Content-Length").is_none() {
            return fail("a response to HEAD without the Content-Length of its body");
        }
        return Ok(());
    }
    if !reply.is_json() {
        if !reply.body.is_empty() {
            return fail("a body that is not JSON");
        }
        return Ok(());
    }
    let Ok(message) = serde_json::from_slice::<Value>(&reply.body) else {
        return fail("an application/json body that is not JSON");
    };
    if message["jsonrpc"] != "2.0" || message.get("id").is_none() {
        return fail("not a JSON-RPC response");
    }
    match (message.get("result"), message.get("error")) {
        (Some(_), None) if reply.status < 400 => Ok(()),
        (None, Some(error)) if error["code"].is_i64() && error["message"].is_string() => Ok(()),
        _ => fail("not a JSON-RPC response (an error status needs an error object)"),
    }
}

fn code(reply: &Reply) -> Option<i64> {
    reply.json()["error"]["code"].as_i64()
}

/// Checks what came back on a connection against what the server made of the bytes: one
/// valid response per request read whole or refused, in order, and none for the rest
/// (fewer only when an event stream holds the connection, or a reset may have swallowed
/// them); `100 Continue` exactly before the answer to an HTTP/1.1 request with a body
/// that asked for it; `Connection: close` exactly
/// when the connection ends after the response; each refusal with its status and a
/// JSON-RPC -32600 error, id null.
fn check_connection(conv: &Conversation, done: &Exchange) -> Result<(), String> {
    let answered: Vec<&Step> = conv.answered().collect();
    let complete = match done.end {
        End::Stream => done.replies.len() <= answered.len(),
        End::Reset if conv.unread => done.replies.len() <= answered.len(),
        _ => done.replies.len() == answered.len(),
    };
    if !complete {
        return Err(format!(
            "{} requests to answer, {} responses ({:?})",
            answered.len(),
            done.replies.len(),
            done.end
        ));
    }
    for (i, (step, reply)) in answered.iter().zip(&done.replies).enumerate() {
        let fail = |why: &str| Err(format!("response {i}: {why}: {reply:?}"));
        check_reply(reply, step.bodiless()).map_err(|why| format!("response {i}: {why}"))?;
        match reply.interim[..] {
            [] if step.continued() => return fail("no 100 Continue for the body it asked to send"),
            [] => {}
            [100] if step.continued() => {}
            _ => return fail("an interim response nobody asked for"),
        }
        if !reply.is_stream() && reply.closes() != step.closes() {
            return fail(if step.closes() {
                "no Connection: close, and the connection ends"
            } else {
                "Connection: close, and the connection goes on"
            });
        }
        match step {
            Step::Refused { status, .. } if reply.status != *status => {
                return fail(&format!("wanted the refusal {status}"))
            }
            Step::Refused { status: 401, .. }
                if reply.header("WWW-Authenticate") != Some(CHALLENGE) =>
            {
                return fail("a 401 without the hook's challenge")
            }
            Step::Refused { status, .. } if !step.bodiless() => {
                expect_error(reply, *status, &[-32600], IdRule::Null)
                    .map_err(|why| format!("response {i}: {why}"))?;
            }
            Step::Refused { .. } => {}
            _ if !SERVED.contains(&reply.status) => {
                return fail("a refusal's status for a request read whole")
            }
            _ => {}
        }
    }
    let cut = |continued| matches!(conv.steps.last(), Some(Step::Cut { continued: c }) if *c == continued);
    match done.interim[..] {
        [] if cut(true) && conv.steps.len() == 1 => {
            Err("no 100 Continue for the body it asked to send".into())
        }
        [] => Ok(()),
        [100] if cut(true) && done.replies.len() == answered.len() => Ok(()),
        _ => Err(format!(
            "an interim response nobody asked for: {:?}",
            done.interim
        )),
    }
}
// ----- a normal conversation -------------------------------------------------------------

/// A well-formed `POST /mcp` with a JSON body and `extra` headers.
fn post_bytes(extra: &[(&str, &str)], body: &Value) -> Vec<u8> {
    let body = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body.as_bytes());
    raw
}

/// One well-formed exchange that must get exactly one valid response.
fn post(addr: SocketAddr, extra: &[(&str, &str)], body: &Value) -> Result<Reply, String> {
    let done = exchange(addr, &post_bytes(extra, body), &[])?;
    let mut replies = done.replies.into_iter();
    match (replies.next(), replies.next(), done.end) {
        (Some(reply), None, End::Closed) => {
            check_reply(&reply, false)?;
            Ok(reply)
        }
        (first, second, end) => Err(format!(
            "one response, then the close: {first:?} {second:?} {end:?}"
        )),
    }
}

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "hostile", "version": "0"}}})
}

/// Opens a 2025-11-25 session.
fn open_session(addr: SocketAddr) -> Result<String, String> {
    let reply = post(addr, &[], &initialize_body())?;
    match (reply.status, reply.header("Mcp-Session-Id")) {
        (200, Some(id)) => Ok(id.to_string()),
        _ => Err(format!("initialize: {reply:?}")),
    }
}

fn sep_meta() -> Value {
    json!({
        VERSION_KEY: SEP_VERSION,
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    })
}

/// initialize -> notifications/initialized -> tools/call (a task) -> tasks/get, then a
/// stateless 2026-07-28 call: the server still serves both revisions.
fn still_serves(addr: SocketAddr) -> Result<(), TestCaseError> {
    let fail = |why: String| TestCaseError::fail(format!("after the hostile input: {why}"));
    let session = open_session(addr).map_err(fail)?;
    let with = [("Mcp-Session-Id", session.as_str())];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = post(addr, &with, &initialized).map_err(fail)?;
    prop_assert_eq!(reply.status, 202, "{:?}", reply);
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}});
    let created = post(addr, &with, &call).map_err(fail)?.json();
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .ok_or_else(|| fail(format!("no task: {created}")))?
        .to_string();
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": id}});
    let got = post(addr, &with, &get).map_err(fail)?.json();
    prop_assert_eq!(&got["result"]["taskId"], &json!(id), "{}", got);
    let greet = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "again"}, "_meta": sep_meta()}});
    let routed = [("Mcp-Method", "tools/call"), ("Mcp-Name", "greet")];
    let greeted = post(addr, &routed, &greet).map_err(fail)?.json();
    prop_assert_eq!(
        &greeted["result"]["content"][0]["text"],
        "Hello, again!",
        "{}",
        greeted
    );
    Ok(())
}

/// Runs `case` against a fresh server, then checks that no transport thread panicked and
/// that the server still serves.
fn on_fresh_server(
    case: impl FnOnce(SocketAddr) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let panics = transport_panics();
    let http = server();
    let addr = http.local_addr();
    case(addr)?;
    still_serves(addr)?;
    prop_assert_eq!(transport_panics(), panics, "a transport thread panicked");
    Ok(())
}

// ----- (a) arbitrary bytes ---------------------------------------------------------------

/// Whole requests to mangle: each kind the transport serves, well framed.
fn plausible_requests() -> Vec<Vec<u8>> {
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    vec![
        post_bytes(&[], &initialize_body()),
        post_bytes(
            &[("Mcp-Session-Id", "00000000-0000-4000-8000-000000000000")],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        ),
        post_bytes(
            &[("Mcp-Method", "tools/call"), ("Mcp-Name", "greet")],
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "greet", "arguments": {"name": "x"}, "_meta": sep_meta()}}),
        ),
        post_bytes(
            &[("Expect", "100-continue")],
            &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
        ),
        post_bytes(
            &[("Authorization", REFUSED_CREDENTIALS), ("Expect", "100-continue")],
            &json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
        ),
        b"GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\nMcp-Session-Id: x\r\n\r\n".to_vec(),
        b"DELETE /mcp HTTP/1.1\r\nHost: localhost\r\nMcp-Session-Id: x\r\nConnection: close\r\n\r\n".to_vec(),
        b"HEAD /mcp HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
        format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{ping}\r\n0\r\n\r\n",
            ping.len()
        )
        .into_bytes(),
    ]
}

/// A small edit of a request's bytes, at a position.
#[derive(Clone, Debug)]
enum Edit {
    Truncate(Index),
    Insert(Index, u8),
    Delete(Index),
    Replace(Index, u8),
    /// Repeats a stretch (a header line twice, a doubled CRLF).
    Repeat(Index, Index),
}

fn edit() -> BoxedStrategy<Edit> {
    let special = prop::sample::select(vec![b'\r', b'\n', b':', b' ', b'0', b'9', 0, 0xff]);
    let byte = prop_oneof![any::<u8>(), special];
    prop_oneof![
        1 => any::<Index>().prop_map(Edit::Truncate),
        3 => (any::<Index>(), byte.clone()).prop_map(|(i, b)| Edit::Insert(i, b)),
        2 => any::<Index>().prop_map(Edit::Delete),
        3 => (any::<Index>(), byte).prop_map(|(i, b)| Edit::Replace(i, b)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(i, j)| Edit::Repeat(i, j)),
    ]
    .boxed()
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    if bytes.is_empty() {
        return;
    }
    match edit {
        Edit::Truncate(at) => bytes.truncate(at.index(bytes.len())),
        Edit::Insert(at, b) => bytes.insert(at.index(bytes.len() + 1), *b),
        Edit::Delete(at) => {
            bytes.remove(at.index(bytes.len()));
        }
        Edit::Replace(at, b) => {
            let at = at.index(bytes.len());
            bytes[at] = *b;
        }
        Edit::Repeat(a, b) => {
            let (a, b) = (a.index(bytes.len()), b.index(bytes.len()));
            let (from, to) = (a.min(b), a.max(b).min(a.min(b) + 64));
            let stretch = bytes[from..to].to_vec();
            bytes.splice(to..to, stretch);
        }
    }
}

fn raw_bytes() -> BoxedStrategy<Vec<u8>> {
    let requests = plausible_requests();
    prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..600),
        4 => (prop::sample::select(requests), prop::collection::vec(edit(), 1..5))
            .prop_map(|(mut bytes, edits)| {
                for edit in &edits {
                    apply(&mut bytes, edit);
                }
                bytes
            }),
        2 => "[ -~]{0,40}(\r\n[ -~]{0,40}){0,6}(\r\n\r\n)?[ -~]{0,40}"
            .prop_map(String::into_bytes),
        1 => (
            prop::sample::select(vec!["GET", "POST", "DELETE", "PUT", "HEAD", "X"]),
            prop::collection::vec(any::<u8>(), 0..200),
        )
            .prop_map(|(method, tail)| {
                let mut bytes = format!("{method} /mcp HTTP/1.1\r\n").into_bytes();
                bytes.extend(tail);
                bytes
            }),
        1 => prop::sample::select(vec![
            &b""[..], b"\r\n", b"\r\n\r\n", b"\n\n", b"\r\r\r", b" ", b"GET", b"GET /mcp",
            b"GET /mcp HTTP/1.1", b"GET /mcp HTTP/1.1\r\n", b"\x16\x03\x01\x02\x00\x01\x00",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"GET /mcp HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
            b"GET /mcp HTTP/1.1\r\nA: b\rc\r\n\r\n", b"\r\n\r\nGET /mcp HTTP/1.0\n\n",
        ])
        .prop_map(<[u8]>::to_vec),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// (a) Arbitrary bytes, each on a connection of its own: what comes back is what the
    /// server makes of the bytes, valid HTTP with a known status and a JSON-RPC body; the
    /// connection ends, and the server still serves.
    #[test]
    fn arbitrary_bytes(requests in prop::collection::vec(raw_bytes(), 1..5)) {
        on_fresh_server(|addr| {
            for raw in &requests {
                let conv = conversation(raw);
                let fail = |why: String| TestCaseError::fail(format!("{why}\nsent: {:?}", shown(raw)));
                let done = exchange(addr, raw, &conv.bodiless()).map_err(fail)?;
                prop_assert_ne!(&done.end, &End::Stream, "no session, no stream");
                check_connection(&conv, &done).map_err(|why| fail(format!("{why}\ngot: {done:?}")))?;
            }
            Ok(())
        })?;
    }
}

// ----- (b) plausible HTTP/1.1: what is sent ----------------------------------------------

/// The session a request names.
#[derive(Clone, Copy, Debug)]
enum SessionHeader {
    /// The case's own session (live until a `DELETE` ends it).
    Live,
    Unknown,
    Garbage,
    Huge,
    Empty,
}

/// A SEP-2243 routing header's value, relative to what the body names.
#[derive(Clone, Copy, Debug)]
enum Route {
    /// The right value as a client sends it: as it is when it is printable ASCII, else
    /// encoded.
    Right,
    /// The right value in the encoded form (`=?base64?...?=`).
    Encoded,
    /// The right value as it is, even when it is not ASCII (no header can carry that).
    Raw,
    Wrong,
    /// The encoded form around something that is not Base64.
    Undecodable,
}

/// A `Content-Length` relative to the bytes sent after the head.
#[derive(Clone, Copy, Debug)]
enum Length {
    Right,
    Less(usize),
    More(usize),
    /// `+N`: not digits (400).
    Plus,
    /// Spaces around N, which the field's parsing drops.
    Padded,
    /// `N, N`: a list whose values agree.
    Twice,
    /// `N, N+1`: a list whose values disagree (400).
    Disagreeing,
    /// A fixed value: zero, negative, not a number, past the body limit, past what 64 bits
    /// hold, or one nobody can allocate: the transport allocates nothing from it.
    Raw(&'static str),
}

#[derive(Clone, Debug)]
enum Hdr {
    Host(&'static str),
    Connection(&'static str),
    ContentType(&'static str),
    Accept(&'static str),
    Session(SessionHeader),
    Version(&'static str),
    Origin(&'static str),
    McpMethod(Route),
    McpName(Route),
    Expect(&'static str),
    Authorization(&'static str),
    /// The transfer codings the client accepts in the response.
    Te(&'static str),
    Length(Length),
    TransferEncoding(&'static str),
    /// A raw line: no header at all, or an odd one.
    Line(&'static str),
    /// This many more field lines (`X-Filler-N: N`): past [`HEAD_FIELDS`] in all, 431.
    Filler(usize),
}

/// How a header's name is spelt (names are case-insensitive).
#[derive(Clone, Copy, Debug)]
enum Spelling {
    AsIs,
    Lower,
    Upper,
}

/// How the body travels after the head.
#[derive(Clone, Debug)]
enum Wire {
    Plain,
    /// Chunked coding in chunks of these sizes (cycled), hex digits in upper case or not,
    /// with a chunk extension or not, and perhaps one flaw.
    Chunked {
        sizes: Vec<usize>,
        upper: bool,
        extension: bool,
        flaw: Option<Flaw>,
    },
}

#[derive(Clone, Copy, Debug)]
enum Flaw {
    /// The first size is not hex.
    NotHex,
    Negative,
    /// More hex digits than 64 bits hold: too large (413).
    Overflow,
    /// The first size is 2^64-1: too large (413), never read.
    Endless,
    /// No last (zero) chunk.
    NoLastChunk,
    /// The last chunk without the final CRLF.
    NoFinalCrlf,
    /// The first chunk's data without its CRLF.
    NoDataCrlf,
    /// The first size claims more than its data.
    Oversized,
    /// A trailer field after the last chunk: well-formed, so the request is served.
    Trailer,
    /// A trailer line that is not a field line (no colon): 400.
    BadTrailer,
}

/// What the body holds.
#[derive(Clone, Debug)]
enum Content {
    /// One of [`bodies`], perhaps edited as text.
    Rpc(Index, Option<Edit>),
    Raw(&'static [u8]),
    /// `[` this many times.
    Deep(usize),
    /// A ping padded to this many bytes.
    Padded(usize),
}

#[derive(Clone, Debug)]
struct Spec {
    method: &'static str,
    path: String,
    version: &'static str,
    headers: Vec<(Hdr, Spelling)>,
    content: Content,
    wire: Wire,
}

const UNKNOWN_SESSION: &str = "00000000-0000-4000-8000-000000000000";

/// JSON-RPC bodies of both revisions: requests the server answers at once, notifications,
/// a response, and requests it must refuse. No tool here waits for the client.
fn bodies() -> Vec<Value> {
    let sep = |declare: bool| {
        let capabilities = if declare {
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
        } else {
            json!({})
        };
        json!({VERSION_KEY: SEP_VERSION,
               "io.modelcontextprotocol/clientCapabilities": capabilities})
    };
    vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": "s", "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "greet", "arguments": {"name": "x"}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"ms": 1}, "task": {}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get",
            "params": {"taskId": UNKNOWN_SESSION}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/list"}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/result", "params": {"taskId": "x"}}),
        initialize_body(),
        json!({"jsonrpc": "2.0", "id": 8, "method": "initialize",
            "params": {"protocolVersion": 5}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 1}}),
        json!({"jsonrpc": "2.0", "id": 9, "result": {}}),
        json!({"jsonrpc": "2.0", "id": 10, "method": "no/such/method"}),
        json!({"jsonrpc": "2.0", "id": 11, "method": "ping",
            "params": {"_meta": {VERSION_KEY: "1999-01-01"}}}),
        json!({"jsonrpc": "2.0", "id": 14, "method": "ping",
            "params": {"_meta": {VERSION_KEY: 5}}}),
        json!({"jsonrpc": "2.0", "id": 12, "method": "ping", "params": [1]}),
        json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
        json!({"jsonrpc": "1.0", "id": 13, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 20, "method": "server/discover",
            "params": {"_meta": sep(false)}}),
        json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call",
            "params": {"name": "greet", "arguments": {"name": "y"}, "_meta": sep(false)}}),
        json!({"jsonrpc": "2.0", "id": 22, "method": "tools/call",
            "params": {"name": "sleep_required", "arguments": {"ms": 1}, "_meta": sep(true)}}),
        json!({"jsonrpc": "2.0", "id": 23, "method": "tasks/get",
            "params": {"taskId": "unknown", "_meta": sep(true)}}),
        json!({"jsonrpc": "2.0", "id": 24, "method": "tasks/cancel",
            "params": {"taskId": "unknown", "_meta": sep(false)}}),
        json!({"jsonrpc": "2.0", "id": 25, "method": "tasks/list", "params": {"_meta": sep(true)}}),
        json!({"jsonrpc": "2.0", "id": 26, "method": "tools/call",
            "params": {"name": "fail", "arguments": {"ms": 0}, "_meta": sep(true)}}),
        json!({"jsonrpc": "2.0", "id": 27, "method": "tools/call",
            "params": {"name": "ünïcödé tool", "_meta": sep(true)}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 1, "_meta": sep(true)}}),
        // Task subscriptions refused (a JSON answer; one accepted answers with an event
        // stream of its own, which http.rs tests).
        json!({"jsonrpc": "2.0", "id": 28, "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": []}, "_meta": sep(false)}}),
        json!({"jsonrpc": "2.0", "id": 29, "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": "x"}, "_meta": sep(true)}}),
    ]
}

/// SEP-2243's encoded form of a header value.
fn encoded(value: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::from("=?base64?");
    for chunk in value.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out + "?="
}

/// The name a body's routing header carries: the tool's, or the task's.
fn named(body: &Value) -> String {
    let params = &body["params"];
    let name = match body["method"].as_str() {
        Some("tasks/get" | "tasks/update" | "tasks/cancel") => &params["taskId"],
        _ => &params["name"],
    };
    name.as_str().unwrap_or("").to_string()
}

/// A request's bytes on the wire: its head (the case's live session where it names it),
/// then its body as its [`Wire`] carries it.
fn render(spec: &Spec, session: &str) -> Vec<u8> {
    let all = bodies();
    let (content, meant) = match &spec.content {
        Content::Rpc(index, edit) => {
            let body = all[index.index(all.len())].clone();
            let mut bytes = body.to_string().into_bytes();
            if let Some(edit) = edit {
                apply(&mut bytes, edit);
            }
            (bytes, body)
        }
        Content::Raw(bytes) => (bytes.to_vec(), Value::Null),
        Content::Deep(n) => ("[".repeat(*n).into_bytes(), Value::Null),
        Content::Padded(size) => {
            let frame = json!({"jsonrpc": "2.0", "id": "big", "method": "ping",
                "params": {"pad": ""}})
            .to_string();
            let pad = "x".repeat(size.saturating_sub(frame.len()));
            let body = json!({"jsonrpc": "2.0", "id": "big", "method": "ping",
                "params": {"pad": pad}});
            (body.to_string().into_bytes(), body)
        }
    };
    let wire = match &spec.wire {
        Wire::Plain => content,
        Wire::Chunked {
            sizes,
            upper,
            extension,
            flaw,
        } => chunked(&content, sizes, *upper, *extension, *flaw),
    };
    let method_name = meant["method"].as_str().unwrap_or("ping").to_string();
    let name = named(&meant);
    let route = |route: Route, right: &str| match route {
        Route::Right if right.bytes().all(|b| (0x20..0x7f).contains(&b)) => right.to_string(),
        Route::Right => encoded(right),
        Route::Raw => right.to_string(),
        Route::Encoded => encoded(right),
        Route::Wrong => format!("{right}-not"),
        Route::Undecodable => "=?base64?not base64!?=".to_string(),
    };
    let header_lines = spec
        .headers
        .iter()
        .flat_map(|(header, spelling)| {
            let (name_of, value) = match header {
                Hdr::Host(v) => ("Host", v.to_string()),
                Hdr::Connection(v) => ("Connection", v.to_string()),
                Hdr::ContentType(v) => ("Content-Type", v.to_string()),
                Hdr::Accept(v) => ("Accept", v.to_string()),
                Hdr::Session(s) => (
                    "Mcp-Session-Id",
                    match s {
                        SessionHeader::Live => session.to_string(),
                        SessionHeader::Unknown => UNKNOWN_SESSION.to_string(),
                        SessionHeader::Garbage => "../../etc/passwd\t;".to_string(),
                        SessionHeader::Huge => "a".repeat(32 * 1024),
                        SessionHeader::Empty => String::new(),
                    },
                ),
                Hdr::Version(v) => ("MCP-Protocol-Version", v.to_string()),
                Hdr::Origin(v) => ("Origin", v.to_string()),
                Hdr::McpMethod(r) => ("Mcp-Method", route(*r, &method_name)),
                Hdr::McpName(r) => ("Mcp-Name", route(*r, &name)),
                Hdr::Expect(v) => ("Expect", v.to_string()),
                Hdr::Authorization(v) => ("Authorization", v.to_string()),
                Hdr::Te(v) => ("TE", v.to_string()),
                Hdr::Length(length) => {
                    let n = wire.len();
                    let value = match length {
                        Length::Right => n.to_string(),
                        Length::Less(k) => n.saturating_sub(*k).to_string(),
                        Length::More(k) => (n + k).to_string(),
                        Length::Plus => format!("+{n}"),
                        Length::Padded => format!("  {n}  "),
                        Length::Twice => format!("{n}, {n}"),
                        Length::Disagreeing => format!("{n}, {}", n + 1),
                        Length::Raw(v) => v.to_string(),
                    };
                    ("Content-Length", value)
                }
                Hdr::TransferEncoding(v) => ("Transfer-Encoding", v.to_string()),
                Hdr::Line(line) => return vec![line.to_string()],
                Hdr::Filler(n) => return (0..*n).map(|i| format!("X-Filler-{i}: {i}")).collect(),
            };
            let name_of = match spelling {
                Spelling::AsIs => name_of.to_string(),
                Spelling::Lower => name_of.to_ascii_lowercase(),
                Spelling::Upper => name_of.to_ascii_uppercase(),
            };
            vec![format!("{name_of}: {value}")]
        })
        .collect::<Vec<_>>();
    let line = format!("{} {} {}", spec.method, spec.path, spec.version);
    let mut raw = Vec::new();
    raw.extend_from_slice(line.as_bytes());
    raw.extend_from_slice(b"\r\n");
    for header in &header_lines {
        raw.extend_from_slice(header.as_bytes());
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"\r\n");
    raw.extend_from_slice(&wire);
    raw
}

fn chunked(
    content: &[u8],
    sizes: &[usize],
    upper: bool,
    extension: bool,
    flaw: Option<Flaw>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = content;
    let mut sizes = sizes.iter().cycle();
    let mut first = true;
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap()).clamp(1, rest.len());
        let (data, more) = rest.split_at(n);
        rest = more;
        let mut size = if upper {
            format!("{n:X}")
        } else {
            format!("{n:x}")
        };
        let mut data_crlf = true;
        if first {
            match flaw {
                Some(Flaw::NotHex) => size = "zz".into(),
                Some(Flaw::Negative) => size = format!("-{n}"),
                Some(Flaw::Overflow) => size = format!("1{:016x}", n),
                Some(Flaw::Endless) => size = "ffffffffffffffff".into(),
                Some(Flaw::NoDataCrlf) => data_crlf = false,
                Some(Flaw::Oversized) => size = format!("{:x}", n + 50),
                _ => {}
            }
        }
        first = false;
        out.extend_from_slice(size.as_bytes());
        if extension {
            out.extend_from_slice(b";name=value");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(data);
        if data_crlf {
            out.extend_from_slice(b"\r\n");
        }
    }
    match flaw {
        Some(Flaw::NoLastChunk) => {}
        Some(Flaw::NoFinalCrlf) => out.extend_from_slice(b"0\r\n"),
        Some(Flaw::Trailer) => out.extend_from_slice(b"0\r\nX-Trailer: 1\r\n\r\n"),
        Some(Flaw::BadTrailer) => out.extend_from_slice(b"0\r\nX-Trailer 1\r\n\r\n"),
        _ => out.extend_from_slice(b"0\r\n\r\n"),
    }
    out
}

// ----- (b) plausible HTTP/1.1: what it should get ----------------------------------------

/// What the response to a request must be.
#[derive(Debug)]
enum Want {
    /// None: the bytes end inside the request (a head cut short, a body shorter than its
    /// framing says), and the server closes the connection.
    Silent,
    /// The transport's refusal of a request it will not read (or serve) whole: this status,
    /// a JSON-RPC -32600 error with id null, and the connection ends (checked with the
    /// connection).
    Refused(u16),
    /// The transport's own error, before any JSON-RPC: this status and error code, id
    /// null.
    Error(u16, i64),
    /// `GET /mcp` on the live session: its event stream opens.
    Stream,
    /// `DELETE /mcp` on the live session: 200, no body; the session ends.
    Deleted,
    /// `OPTIONS /mcp`: 204, no body, `Allow` naming the methods.
    Options,
    /// The JSON-RPC layer answers this body.
    Rpc(Vec<u8>),
}

/// Browser origins this server must accept, and ones it must refuse.
const ORIGINS_ALLOWED: &[&str] = &[
    "http://localhost:3000",
    "http://127.0.0.1",
    "http://[::1]:8080",
    LISTED_ORIGIN,
];
const ORIGINS_REFUSED: &[&str] = &[
    "http://evil.example",
    "null",
    "http://localhost.evil.example",
    "",
    "http://127.0.0.2",
    "https://app.example.evil",
];

/// What a request should get, as the server read it, with `live` the live session.
fn expected(step: &Step, live: Option<&str>) -> Want {
    let (head, body) = match step {
        Step::Cut { .. } => return Want::Silent,
        Step::Refused { status, .. } => return Want::Refused(*status),
        Step::Served { head, body, .. } => (head, body),
    };
    // The transport: path, origin, protocol version, method.
    if !targets_mcp(head) {
        return Want::Error(404, -32600);
    }
    if let Some(origin) = head.field("Origin") {
        assert!(
            ORIGINS_ALLOWED.contains(&origin) || ORIGINS_REFUSED.contains(&origin),
            "{origin}"
        );
        if !ORIGINS_ALLOWED.contains(&origin) {
            return Want::Error(403, -32600);
        }
    }
    if head
        .field("MCP-Protocol-Version")
        .is_some_and(|v| !SUPPORTED.contains(&v))
    {
        // 2026-07-28's UnsupportedProtocolVersionError.
        return Want::Error(400, -32022);
    }
    let session = head.field("Mcp-Session-Id");
    match head.method.as_str() {
        "POST" => {}
        "GET" => {
            let streams = accepts_event_stream(head);
            return match session {
                _ if !streams => Want::Error(406, -32600),
                None => Want::Error(405, -32600),
                Some(s) if Some(s) != live => Want::Error(404, -32600),
                Some(_) => Want::Stream,
            };
        }
        "DELETE" => {
            return match session {
                None => Want::Error(400, -32600),
                Some(s) if Some(s) != live => Want::Error(404, -32600),
                Some(_) => Want::Deleted,
            }
        }
        // The methods served (and, for a browser's preflight, CORS fields).
        "OPTIONS" => return Want::Options,
        _ => return Want::Error(405, -32600),
    }
    // POST: the media type, parameters aside, then the body.
    let json = head.field("Content-Type").is_some_and(|t| {
        let media_type = t.split(';').next().unwrap_or("").trim();
        media_type.eq_ignore_ascii_case("application/json")
    });
    if !json {
        return Want::Error(415, -32600);
    }
    Want::Rpc(body.clone())
}

/// Whether `Accept` lets a `GET` have its event stream (RFC 9110 §12.5.1): some field must
/// be there, and of the ranges that cover `text/event-stream`, the most specific
/// (`text/event-stream`, `text/*`, `*/*`; any case, parameters other than `q` aside) with
/// the highest `q` must have a `q` above 0. Ranges that are not `type/subtype`, or whose
/// `q` is not a qvalue (0 to 1, three decimals at most), count for nothing. The values the
/// generator sends hold no quoted strings.
fn accepts_event_stream(head: &Head) -> bool {
    let ranges = head.list("Accept");
    if head.fields_named("Accept").next().is_none() {
        return false;
    }
    let mut best = (-1i32, 0u32);
    for range in ranges.iter().filter(|r| !r.is_empty()) {
        let mut parts = range.split(';').map(|p| p.trim_matches([' ', '\t']));
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let rank = match media.as_str() {
            "text/event-stream" => 2,
            "text/*" => 1,
            "*/*" => 0,
            _ => continue,
        };
        let mut q = Some(1000);
        for param in parts.filter(|p| !p.is_empty()) {
            match param.split_once('=') {
                Some((name, value)) if name.eq_ignore_ascii_case("q") => {
                    q = match value.split_once('.') {
                        None if value == "0" || value == "1" => {
                            value.parse::<u32>().ok().map(|v| v * 1000)
                        }
                        Some((whole, frac))
                            if frac.len() <= 3 && frac.bytes().all(|b| b.is_ascii_digit()) =>
                        {
                            let thousandths = format!("{frac:0<3}").parse::<u32>().unwrap();
                            match whole {
                                "0" => Some(thousandths),
                                "1" if thousandths == 0 => Some(1000),
                                _ => None,
                            }
                        }
                        _ => None,
                    }
                }
                Some(_) => {}
                None => q = None,
            }
        }
        let Some(q) = q else { continue };
        if (rank, q) > best {
            best = (rank, q);
        }
    }
    best.0 >= 0 && best.1 > 0
}

/// Which id an error must carry.
#[derive(Clone, Copy, Debug)]
enum IdRule<'a> {
    Null,
    Is(&'a Value),
    /// Its id when it had a usable one (the server may not have read it), else null.
    IsOrNull(&'a Value),
}

fn expect_error(reply: &Reply, status: u16, codes: &[i64], id: IdRule) -> Result<(), String> {
    let message = reply.json();
    let id_ok = match id {
        IdRule::Null => message["id"].is_null(),
        IdRule::Is(id) => message["id"] == *id,
        IdRule::IsOrNull(id) => message["id"] == *id || message["id"].is_null(),
    };
    if reply.status != status
        || !reply.is_json()
        || !code(reply).is_some_and(|c| codes.contains(&c))
        || !id_ok
    {
        return Err(format!(
            "wanted {status} with error {codes:?} and id {id:?}, got {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ));
    }
    // RFC 9110 §15.5.6: a 405 says which methods are allowed.
    if status == 405 && reply.header("Allow").is_none_or(|a| !a.contains("POST")) {
        return Err(format!("a 405 without an Allow naming POST: {reply:?}"));
    }
    Ok(())
}

fn expect_empty(reply: &Reply, status: u16) -> Result<(), String> {
    if reply.status != status || !reply.body.is_empty() {
        return Err(format!("wanted an empty {status}, got {reply:?}"));
    }
    Ok(())
}

/// A request the server served: 200 with its response (a result or any error), or 400
/// with one of `header_codes` (the errors HTTP maps to 400).
fn expect_served(reply: &Reply, id: &Value, header_codes: &[i64]) -> Result<(), String> {
    let message = reply.json();
    let ok = match reply.status {
        200 => message["id"] == *id && !code(reply).is_some_and(|c| header_codes.contains(&c)),
        400 => message["id"] == *id && code(reply).is_some_and(|c| header_codes.contains(&c)),
        _ => false,
    };
    if !ok {
        return Err(format!("wanted the response to {id}, got {reply:?}"));
    }
    Ok(())
}

/// What the JSON-RPC layer answers `body` (`post` in `src/server/http/mod.rs`): the message
/// as SPEC and JSON-RPC read it (the same oracle as hostile.rs), then its route: 2026-07-28
/// (by the body's `_meta`, or the `MCP-Protocol-Version` header) is stateless and checked
/// against its routing headers (SPEC §2.5(f)); anything else needs `initialize` or its
/// session.
fn check_rpc(body: &[u8], head: &Head, live: Option<&str>, reply: &Reply) -> Result<(), String> {
    let Ok(text) = std::str::from_utf8(body) else {
        return expect_error(reply, 400, &[-32700], IdRule::Null);
    };
    // A member named twice anywhere makes the whole text unreadable, batch or not.
    if matches!(serde_json::from_str::<Value>(text), Ok(Value::Array(_)))
        && !names_a_member_twice(text)
    {
        // A batch needs its session, whose version decides (2025-03-26 and 2024-11-05
        // have batches); the live session is on 2025-11-25, which refuses them.
        return match head.field("Mcp-Session-Id") {
            Some(s) if Some(s) != live => expect_error(reply, 404, &[-32600], IdRule::Null),
            _ => expect_error(reply, 400, &[-32600], IdRule::Null),
        };
    }
    let (id, method, params) = match kind(text) {
        Kind::Malformed { parse_error, id } => {
            let codes: &[i64] = if parse_error {
                &[-32700]
            } else {
                &[-32600, -32602]
            };
            let rule = id.as_ref().map_or(IdRule::Null, IdRule::IsOrNull);
            return expect_error(reply, 400, codes, rule);
        }
        Kind::Batch(_) => unreachable!("kind never says Batch"),
        Kind::Request { id, method, params } => (Some(id), Some(method), params),
        Kind::Notification { method, params } => (None, Some(method), params),
        Kind::Response => {
            // One that answers no request (its id, `jsonrpc` or result/error unusable) is
            // dropped at once, whatever the session: an error back would be one more
            // message for a peer to answer.
            let message: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            let routable = message.get("id").is_some_and(valid_id)
                && message["jsonrpc"] == "2.0"
                && message.get("result").is_some() != message.get("error").is_some();
            if !routable {
                return expect_empty(reply, 202);
            }
            (None, None, None)
        }
    };
    let method = method.as_deref();
    let named = params
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(VERSION_KEY));
    let version = named.and_then(Value::as_str);
    let id_rule = id.as_ref().map_or(IdRule::Null, IdRule::Is);
    // A version that is no string (null aside, which is absent) is none the server speaks.
    let unsupported = match named {
        None | Some(Value::Null) => false,
        Some(Value::String(v)) => !SUPPORTED.contains(&v.as_str()),
        Some(_) => true,
    };
    if unsupported {
        return expect_error(reply, 400, &[-32022], id_rule);
    }
    let header_version = head.field("MCP-Protocol-Version");
    let by_header = header_version == Some(SEP_VERSION);
    let by_body = method.is_some_and(|m| m == "server/discover" || version == Some(SEP_VERSION));
    if by_header || by_body {
        let (Some(id), Some(method)) = (&id, method) else {
            return expect_empty(reply, 202);
        };
        if matches!(method, "tasks/result" | "tasks/list" | "initialize") {
            return expect_error(reply, 200, &[-32601], IdRule::Is(id));
        }
        let mismatch =
            header_version.is_some() && by_header != by_body && method != "server/discover";
        if mismatch || !by_body || !routed(head, method, params.as_ref()) {
            return expect_error(reply, 400, &[-32020], IdRule::Is(id));
        }
        return expect_served(reply, id, &[-32020, -32021]);
    }
    if let (Some(id), Some("initialize")) = (&id, method) {
        expect_served(reply, id, &[])?;
        let opened = reply.header("Mcp-Session-Id").is_some();
        if opened != reply.json().get("result").is_some() {
            return Err(format!(
                "a session id only for a successful initialize: {reply:?}"
            ));
        }
        return Ok(());
    }
    match head.field("Mcp-Session-Id") {
        None => expect_error(reply, 400, &[-32600], IdRule::Null),
        Some(s) if Some(s) != live => expect_error(reply, 404, &[-32600], IdRule::Null),
        Some(_) => match &id {
            Some(id) => expect_served(reply, id, &[]),
            None => expect_empty(reply, 202),
        },
    }
}

/// Whether a 2026-07-28 request's routing headers match its body: `Mcp-Method` the
/// method, `Mcp-Name` (plain or encoded) the tool or task it names, each sent once.
fn routed(head: &Head, method: &str, params: Option<&Value>) -> bool {
    let once = |name| {
        let mut values = head.fields_named(name);
        let first = values.next();
        values.next().is_none().then_some(first).flatten()
    };
    if once("Mcp-Method") != Some(method) {
        return false;
    }
    let named = match method {
        "tools/call" => params.and_then(|p| p.get("name")),
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.and_then(|p| p.get("taskId")),
        _ => return true,
    };
    let named = named.and_then(Value::as_str).unwrap_or("");
    once("Mcp-Name")
        .is_some_and(|v| v == named && !v.starts_with("=?base64?") || v == encoded(named))
}

/// Checks the response to one request against `want` (its refusal, if it is one, was
/// checked with the connection); `last`: it is the last response, and `end` how the
/// connection ended after it. Returns whether the live session ended.
/// Whether a request is for `/mcp`, query aside; the absolute form names scheme and host
/// before the path (RFC 9112 §3.2.2).
fn targets_mcp(head: &Head) -> bool {
    let target = head.target.as_str();
    let path = ["http://", "https://"]
        .iter()
        .find_map(|scheme| {
            let rest = target.get(scheme.len()..)?;
            target[..scheme.len()]
                .eq_ignore_ascii_case(scheme)
                .then(|| rest.find(['/', '?']).map_or("/", |at| &rest[at..]))
        })
        .unwrap_or(target);
    path.split('?').next() == Some("/mcp")
}

/// CORS: an answer the handler gave names the page's origin in
/// `Access-Control-Allow-Origin` exactly when that origin is configured (loopback ones
/// are served without it, others refused without it), and every `/mcp` answer varies by
/// `Origin`.
fn check_cors(head: &Head, reply: &Reply) -> Result<(), String> {
    if !targets_mcp(head) {
        return match reply.header("Access-Control-Allow-Origin") {
            None => Ok(()),
            Some(_) => Err(format!("CORS fields off /mcp: {reply:?}")),
        };
    }
    let listed = head.field("Origin") == Some(LISTED_ORIGIN);
    let echoed = reply.header("Access-Control-Allow-Origin");
    if echoed != listed.then_some(LISTED_ORIGIN) {
        return Err(format!("Access-Control-Allow-Origin {echoed:?}: {reply:?}"));
    }
    if !reply.header("Vary").is_some_and(|v| v.contains("Origin")) {
        return Err(format!("an /mcp answer without Vary: Origin: {reply:?}"));
    }
    Ok(())
}

fn check_answer(
    want: &Want,
    step: &Step,
    live: Option<&str>,
    reply: &Reply,
    end: &End,
    last: bool,
) -> Result<bool, String> {
    // (A refusal may come before the head was read whole, with nothing to go by.)
    if let (Some(head), false) = (step.head(), matches!(want, Want::Refused(_) | Want::Silent)) {
        check_cors(head, reply)?;
    }
    if step.bodiless() {
        // No body to look at: the status must be the one wanted.
        return match want {
            Want::Refused(status) | Want::Error(status, _) if reply.status == *status => Ok(false),
            _ => Err(format!("wanted {want:?}, got {reply:?}")),
        };
    }
    // The task subscriptions sent here are meant to be refused (a JSON answer); one that a
    // mutation made acceptable (its `taskIds` key renamed: nothing to follow) answers with
    // an event stream of its own, which ends at once (http.rs checks what it carries).
    if let Want::Rpc(body) = want {
        let listen = serde_json::from_slice::<Value>(body)
            .is_ok_and(|message| message["method"] == "subscriptions/listen");
        if listen && reply.is_stream() && reply.status == 200 {
            return Ok(false);
        }
    }
    if reply.is_stream() != matches!(want, Want::Stream) {
        return Err(format!("wanted {want:?}, got {reply:?}"));
    }
    match (want, step.head()) {
        (Want::Silent, _) => Err(format!("an answer to a request cut short: {reply:?}")),
        (Want::Refused(_), _) => Ok(false),
        (Want::Error(status, code), _) => {
            expect_error(reply, *status, &[*code], IdRule::Null).map(|()| false)
        }
        (Want::Stream, _) if last && *end == End::Stream && reply.status == 200 => Ok(false),
        (Want::Stream, _) => Err(format!("wanted an event stream, got {reply:?}")),
        (Want::Deleted, _) => expect_empty(reply, 200).map(|()| true),
        (Want::Options, _) => {
            expect_empty(reply, 204)?;
            match reply.header("Allow") {
                Some(allow) if allow.contains("POST") && allow.contains("OPTIONS") => Ok(false),
                _ => Err(format!("an OPTIONS answer without Allow: {reply:?}")),
            }
        }
        (Want::Rpc(body), Some(head)) => check_rpc(body, head, live, reply).map(|()| false),
        (Want::Rpc(_), None) => unreachable!("a request served without a head"),
    }
}

fn shown(raw: &[u8]) -> String {
    if raw.len() > 1500 {
        let start = String::from_utf8_lossy(&raw[..1500]);
        format!("{start}... ({} bytes)", raw.len())
    } else {
        String::from_utf8_lossy(raw).into_owned()
    }
}

/// Sends `raw` on a connection of its own and checks every response against what the
/// server makes of the bytes and what the transport documents for each request; `live`:
/// the live session. Returns the live session after it (`None` once a `DELETE` ended it).
fn send_and_check(
    addr: SocketAddr,
    raw: &[u8],
    live: Option<&str>,
) -> Result<Option<String>, String> {
    let conv = conversation(raw);
    let mut live = live.map(str::to_string);
    // What each request should get, with the session it finds. A request served ends the
    // session or not whether its answer arrives or not; an event stream keeps the
    // connection's thread, so nothing after it is read.
    let mut wants = Vec::new();
    for step in &conv.steps {
        let want = expected(step, live.as_deref());
        let stream = matches!(want, Want::Stream);
        let was_live = live.clone();
        if matches!(want, Want::Deleted) {
            live = None;
        }
        wants.push((want, was_live));
        if stream {
            break;
        }
    }
    let fail = |why: String| format!("{why}\nsent: {:?}", shown(raw));
    let done = exchange(addr, raw, &conv.bodiless()).map_err(fail)?;
    check_connection(&conv, &done).map_err(|why| fail(format!("{why}\ngot: {done:?}")))?;
    let last = done.replies.len();
    for (i, (reply, (want, was_live))) in done.replies.iter().zip(&wants).enumerate() {
        check_answer(
            want,
            &conv.steps[i],
            was_live.as_deref(),
            reply,
            &done.end,
            i + 1 == last,
        )
        .map_err(|why| fail(format!("request {i}: {why}")))?;
    }
    Ok(live)
}

/// Sends each request on a connection of its own, in order, and checks what comes back.
fn run_requests(addr: SocketAddr, specs: &[Spec]) -> Result<(), TestCaseError> {
    let session = open_session(addr).map_err(TestCaseError::fail)?;
    let mut live = Some(session.clone());
    for (i, spec) in specs.iter().enumerate() {
        live = send_and_check(addr, &render(spec, &session), live.as_deref())
            .map_err(|why| TestCaseError::fail(format!("request {i}: {why}")))?;
    }
    Ok(())
}

/// Sends `specs` as a client would pipeline them: one keep-alive connection, HTTP/1.1,
/// the last asking to close it (an event stream only last: it holds the connection). Each
/// request is read whole and gets its response, in order, handled in order (the live
/// session ends where a `DELETE` is).
fn run_pipelined(addr: SocketAddr, specs: &[Spec]) -> Result<(), TestCaseError> {
    let session = open_session(addr).map_err(TestCaseError::fail)?;
    let mut raw = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let last = i + 1 == specs.len();
        let mut spec = spec.clone();
        spec.version = "HTTP/1.1";
        spec.headers
            .retain(|(h, _)| !matches!(h, Hdr::Connection(_)));
        let connection = if last { "close" } else { "keep-alive" };
        spec.headers
            .push((Hdr::Connection(connection), Spelling::AsIs));
        if spec.method == "GET" && !last {
            spec.method = "POST";
        }
        raw.extend(render(&spec, &session));
    }
    let conv = conversation(&raw);
    let served = conv
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Served { .. }))
        .count();
    prop_assert!(
        served == specs.len() && conv.steps.len() == specs.len(),
        "{} well-formed requests, {} read whole: {:?}",
        specs.len(),
        served,
        shown(&raw)
    );
    send_and_check(addr, &raw, Some(&session)).map_err(TestCaseError::fail)?;
    Ok(())
}

/// Sends each group's requests in order, the groups at once from threads of their own,
/// each request on a connection of its own. No request ends the live session (a `DELETE`
/// names an unknown one), so every answer is known whatever the interleaving.
fn run_concurrently(addr: SocketAddr, groups: &[Vec<Spec>]) -> Result<(), TestCaseError> {
    let session = open_session(addr).map_err(TestCaseError::fail)?;
    let keep_live = |spec: &Spec| {
        let mut spec = spec.clone();
        if spec.method == "DELETE" {
            for (header, _) in &mut spec.headers {
                if let Hdr::Session(s @ SessionHeader::Live) = header {
                    *s = SessionHeader::Unknown;
                }
            }
        }
        spec
    };
    std::thread::scope(|scope| {
        let clients: Vec<_> = groups
            .iter()
            .map(|group| {
                let session = session.as_str();
                scope.spawn(move || -> Result<(), String> {
                    for (i, spec) in group.iter().enumerate() {
                        let raw = render(&keep_live(spec), session);
                        let live = send_and_check(addr, &raw, Some(session))
                            .map_err(|why| format!("request {i}: {why}"))?;
                        if live.is_none() {
                            return Err(format!("request {i} ended the session"));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap().map_err(TestCaseError::fail)?;
        }
        Ok(())
    })
}

// ----- (b) plausible HTTP/1.1: generators ------------------------------------------------

fn one_of<T: Clone + std::fmt::Debug + 'static>(values: &[T]) -> BoxedStrategy<T> {
    prop::sample::select(values.to_vec()).boxed()
}

fn spelling() -> BoxedStrategy<Spelling> {
    prop_oneof![6 => Just(Spelling::AsIs), 1 => Just(Spelling::Lower), 1 => Just(Spelling::Upper)]
        .boxed()
}

fn route() -> BoxedStrategy<Route> {
    prop_oneof![
        6 => Just(Route::Right),
        1 => Just(Route::Encoded),
        1 => Just(Route::Raw),
        2 => Just(Route::Wrong),
        1 => Just(Route::Undecodable),
    ]
    .boxed()
}

fn length(hostile: bool) -> BoxedStrategy<Length> {
    if !hostile {
        return prop_oneof![8 => Just(Length::Right), 1 => Just(Length::Padded)].boxed();
    }
    prop_oneof![
        6 => Just(Length::Right),
        2 => (1usize..64).prop_map(Length::Less),
        3 => (1usize..3000).prop_map(Length::More),
        2 => one_of(&[Length::Plus, Length::Twice, Length::Disagreeing]),
        3 => one_of(&[
            "0", "00", "-1", "abc", "0x10", "1e3", "", "1048576", "67108864",
            // 2^40, 2^63, 2^64 - 1, 2^64, and thirty digits.
            "1099511627776", "9223372036854775808", "18446744073709551615",
            "18446744073709551616", "123456789012345678901234567890",
        ])
        .prop_map(Length::Raw),
    ]
    .boxed()
}

/// `good` always, or now and then `odd` too when `hostile`.
fn or_odd<T: std::fmt::Debug + 'static>(
    hostile: bool,
    good: BoxedStrategy<T>,
    odd: BoxedStrategy<T>,
) -> BoxedStrategy<T> {
    if hostile {
        prop_oneof![2 => good, 1 => odd].boxed()
    } else {
        good
    }
}

/// Each header of the transport's real set, present with some probability, with the
/// values a client sends or (when `hostile`) odd ones, and a few odd lines; shuffled.
fn headers(hostile: bool) -> BoxedStrategy<Vec<(Hdr, Spelling)>> {
    let slot = |p: f64, header: BoxedStrategy<Hdr>| match p {
        p if p >= 1.0 => (header, spelling()).prop_map(Some).boxed(),
        p if p <= 0.0 => Just(None).boxed(),
        p => prop::option::weighted(p, (header, spelling())).boxed(),
    };
    let (often, sometimes, rarely) = if hostile {
        (0.7, 0.3, 0.08)
    } else {
        (0.95, 0.2, 0.0)
    };
    let mut slots = vec![
        slot(
            if hostile { 0.9 } else { 1.0 },
            or_odd(
                hostile,
                one_of(&["localhost", "127.0.0.1:3000", "[::1]:8080", ""]),
                one_of(&["a b", "evil.example/mcp", "localhost:http", "[::1", "%zz"]),
            )
            .prop_map(Hdr::Host)
            .boxed(),
        ),
        slot(
            often,
            or_odd(
                hostile,
                one_of(&["close", "close", "keep-alive"]),
                one_of(&["Upgrade", "keep-alive, close", "Close", "Keep-Alive"]),
            )
            .prop_map(Hdr::Connection)
            .boxed(),
        ),
        slot(
            if hostile { 0.85 } else { 1.0 },
            or_odd(
                hostile,
                one_of(&[
                    "application/json",
                    "application/json; charset=utf-8",
                    "Application/JSON",
                ]),
                one_of(&["text/plain", "", "multipart/form-data; boundary=x", "json"]),
            )
            .prop_map(Hdr::ContentType)
            .boxed(),
        ),
        slot(
            often,
            or_odd(
                hostile,
                one_of(&[
                    "application/json, text/event-stream",
                    "text/event-stream",
                    "*/*",
                    "text/*;q=0.5",
                    "Text/Event-Stream; q=1.000",
                ]),
                one_of(&[
                    "application/json",
                    "",
                    "text/event-stream;q=0",
                    "TEXT/EVENT-STREAM ;Q=0.0",
                    "*/*;q=0",
                    "text/event-stream;q=0, */*",
                    "*/*;q=0, text/event-stream;q=0.001",
                    "text/event-stream;q=2",
                    "text/event-stream-x",
                ]),
            )
            .prop_map(Hdr::Accept)
            .boxed(),
        ),
        slot(
            if hostile { 0.6 } else { 0.9 },
            or_odd(
                hostile,
                Just(SessionHeader::Live).boxed(),
                one_of(&[
                    SessionHeader::Unknown,
                    SessionHeader::Garbage,
                    SessionHeader::Huge,
                    SessionHeader::Empty,
                ]),
            )
            .prop_map(Hdr::Session)
            .boxed(),
        ),
        slot(
            sometimes,
            or_odd(
                hostile,
                one_of(&["2025-11-25", "2025-06-18", "2026-07-28", "2024-11-05"]),
                one_of(&["1999-01-01", ""]),
            )
            .prop_map(Hdr::Version)
            .boxed(),
        ),
        slot(
            if hostile { 0.2 } else { 0.1 },
            or_odd(hostile, one_of(ORIGINS_ALLOWED), one_of(ORIGINS_REFUSED))
                .prop_map(Hdr::Origin)
                .boxed(),
        ),
        slot(
            often,
            or_odd(hostile, Just(Route::Right).boxed(), route())
                .prop_map(Hdr::McpMethod)
                .boxed(),
        ),
        slot(
            often,
            or_odd(
                hostile,
                one_of(&[Route::Right, Route::Right, Route::Encoded]),
                route(),
            )
            .prop_map(Hdr::McpName)
            .boxed(),
        ),
        slot(
            if hostile { 0.08 } else { 0.04 },
            or_odd(
                hostile,
                one_of(&["100-continue", "100-Continue"]),
                one_of(&["bogus", "", "100-continue, x"]),
            )
            .prop_map(Hdr::Expect)
            .boxed(),
        ),
        slot(
            if hostile { 0.9 } else { 1.0 },
            length(hostile).prop_map(Hdr::Length).boxed(),
        ),
        // Credentials the hook takes, or (when `hostile`) refuses: 401 before the body.
        slot(
            sometimes,
            or_odd(
                hostile,
                one_of(&["Bearer ok", "Basic b2s6b2s="]),
                one_of(&[REFUSED_CREDENTIALS, "bearer refused", "Bearer refused, x"]),
            )
            .prop_map(Hdr::Authorization)
            .boxed(),
        ),
    ];
    if hostile {
        slots.extend([
            slot(
                rarely,
                one_of(&[
                    "chunked",
                    "trailers",
                    "gzip;q=0.5, chunked;q=0.9",
                    "chunked;q=abc",
                    "identity",
                ])
                .prop_map(Hdr::Te)
                .boxed(),
            ),
            // A second Authorization: ambiguous, so the hook refuses nobody for it.
            slot(
                rarely,
                Just(Hdr::Authorization(REFUSED_CREDENTIALS)).boxed(),
            ),
            // A second Host: 400, whatever its value.
            slot(rarely, Just(Hdr::Host("localhost")).boxed()),
            // A second Content-Length: its values must agree with the first's.
            slot(rarely, length(true).prop_map(Hdr::Length).boxed()),
            slot(
                rarely,
                one_of(&[
                    "NoColonHere",
                    "Bad Name: x",
                    "Name : x",
                    "X-\u{dc}nicode: \u{e9}",
                    ": no name",
                    " folded: continuation",
                    "\tfolded: continuation",
                    "X-Control: a\u{1}b",
                    "X-Cr: a\rb",
                    "X-Del: \u{7f}",
                    "X-Tab:\tvalue\t",
                    "X-Empty:",
                ])
                .prop_map(Hdr::Line)
                .boxed(),
            ),
            // Around the cap on field lines: 431 past it.
            slot(
                rarely,
                prop_oneof![(80usize..=100), Just(200)]
                    .prop_map(Hdr::Filler)
                    .boxed(),
            ),
        ]);
    }
    slots
        .prop_map(|slots| slots.into_iter().flatten().collect::<Vec<_>>())
        .prop_shuffle()
        .boxed()
}

fn flaw() -> BoxedStrategy<Flaw> {
    one_of(&[
        Flaw::NotHex,
        Flaw::Negative,
        Flaw::Overflow,
        Flaw::Endless,
        Flaw::NoLastChunk,
        Flaw::NoFinalCrlf,
        Flaw::NoDataCrlf,
        Flaw::Oversized,
        Flaw::Trailer,
        Flaw::BadTrailer,
    ])
}

fn chunked_wire(flawed: f64) -> BoxedStrategy<Wire> {
    (
        prop::collection::vec(1usize..300, 1..6),
        any::<bool>(),
        prop::bool::weighted(0.2),
        if flawed > 0.0 {
            prop::option::weighted(flawed, flaw()).boxed()
        } else {
            Just(None).boxed()
        },
    )
        .prop_map(|(sizes, upper, extension, flaw)| Wire::Chunked {
            sizes,
            upper,
            extension,
            flaw,
        })
        .boxed()
}

/// The body's framing: plain, or chunked under `Transfer-Encoding` (`spec` then drops
/// `Content-Length`, but now and then when `hostile`); when `hostile`, flawed chunks,
/// codings other than chunked, and chunks without the header now and then.
fn framing_choice(hostile: bool) -> BoxedStrategy<(Option<(Hdr, Spelling)>, Wire)> {
    let te = |values: &[&'static str]| {
        (one_of(values), spelling()).prop_map(|(v, s)| Some((Hdr::TransferEncoding(v), s)))
    };
    if !hostile {
        return prop_oneof![
            6 => Just((None, Wire::Plain)),
            1 => (te(&["chunked"]), chunked_wire(0.0)),
        ]
        .boxed();
    }
    prop_oneof![
        10 => Just((None, Wire::Plain)),
        4 => (te(&["chunked", "Chunked"]), chunked_wire(0.5)),
        1 => (
            te(&["gzip", "chunked, identity", "identity", "", "gzip, chunked", "chunked, chunked"]),
            Just(Wire::Plain),
        ),
        1 => (Just(None), chunked_wire(0.2)),
    ]
    .boxed()
}

fn content(hostile: bool) -> BoxedStrategy<Content> {
    let rpc = any::<Index>().prop_map(|i| Content::Rpc(i, None));
    if !hostile {
        return prop_oneof![
            12 => rpc,
            1 => (MAX_BODY - 200..=MAX_BODY).prop_map(Content::Padded),
        ]
        .boxed();
    }
    prop_oneof![
        6 => rpc,
        4 => (any::<Index>(), edit()).prop_map(|(i, e)| Content::Rpc(i, Some(e))),
        2 => one_of(&[
            &b""[..], b"null", b"[]", b"{}", b"\"ping\"", b"\xff\xfe{\x00", b"  \r\n ",
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"} trailing"#,
            br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        ])
        .prop_map(Content::Raw),
        1 => prop_oneof![Just(200usize), Just(20_000)].prop_map(Content::Deep),
        1 => prop_oneof![
            (MAX_BODY - 200..=MAX_BODY).boxed(),
            (MAX_BODY + 1..MAX_BODY + 4000).boxed(),
        ]
        .prop_map(Content::Padded),
    ]
    .boxed()
}

fn path(hostile: bool) -> BoxedStrategy<String> {
    if !hostile {
        return prop_oneof![8 => Just("/mcp".to_string()), 1 => Just("/mcp?x=1".to_string())]
            .boxed();
    }
    prop_oneof![
        8 => Just("/mcp".to_string()),
        1 => one_of(&[
            "/mcp?x=1", "/mcp?", "/mcp/", "/MCP", "/", "/other", "/%6Dcp", "/mcp%20", "*",
            "http://127.0.0.1/mcp", "/mcp#top", "/mcp x", "/mc\u{e9}", "", "//mcp", "/./mcp",
        ])
        .prop_map(str::to_string),
        1 => (1usize..60_000).prop_map(|n| format!("/{}", "a".repeat(n))),
        1 => "/(%[0-9a-zA-Z%]{0,3}){1,12}",
    ]
    .boxed()
}

/// A request as a client sends it, or (`hostile`) with any part of it odd.
fn spec(hostile: bool) -> BoxedStrategy<Spec> {
    let method = if hostile {
        prop_oneof![
            6 => Just("POST"),
            3 => Just("GET"),
            1 => Just("DELETE"),
            2 => one_of(&["PUT", "OPTIONS", "HEAD", "PATCH", "get", "BREW", "GE T", "G\u{c9}T"]),
        ]
        .boxed()
    } else {
        prop_oneof![12 => Just("POST"), 3 => Just("GET"), 1 => Just("DELETE")].boxed()
    };
    let version = if hostile {
        prop_oneof![
            8 => Just("HTTP/1.1"),
            2 => Just("HTTP/1.0"),
            2 => one_of(&[
                "HTTP/0.9", "HTTP/1.2", "HTTP/2.0", "HTTP/3.0", "http/1.1", "HTTP/1", "HTTP/1.1 ",
            ]),
        ]
        .boxed()
    } else {
        prop_oneof![6 => Just("HTTP/1.1"), 1 => Just("HTTP/1.0")].boxed()
    };
    // A body framed both ways, now and then when hostile.
    let both = if hostile {
        prop::bool::weighted(0.2).boxed()
    } else {
        Just(false).boxed()
    };
    (
        method,
        path(hostile),
        version,
        headers(hostile),
        framing_choice(hostile),
        content(hostile),
        both,
    )
        .prop_map(
            move |(method, path, version, mut headers, (mut te, mut wire), content, both)| {
                if !hostile && version == "HTTP/1.0" {
                    // Chunked coding is HTTP/1.1's.
                    (te, wire) = (None, Wire::Plain);
                }
                if te.is_some() && !both {
                    headers.retain(|(h, _)| !matches!(h, Hdr::Length(_)));
                }
                headers.extend(te);
                Spec {
                    method,
                    path,
                    version,
                    headers,
                    content,
                    wire,
                }
            },
        )
        .boxed()
}

fn any_spec() -> BoxedStrategy<Spec> {
    prop_oneof![spec(false), spec(true)].boxed()
}

proptest! {
    #![proptest_config(config())]

    /// (b) Plausible requests, each on a connection of its own, after the case's session
    /// opened: each gets what the transport documents for it, and the server still serves.
    #[test]
    fn plausible_requests_get_their_documented_answer(
        specs in prop::collection::vec(any_spec(), 1..8),
    ) {
        on_fresh_server(|addr| run_requests(addr, &specs))?;
    }

    /// (b) Well-formed requests pipelined on one keep-alive connection: each gets its
    /// answer, in order.
    #[test]
    fn pipelined_requests_get_their_answers_in_order(
        specs in prop::collection::vec(spec(false), 2..6),
    ) {
        on_fresh_server(|addr| run_pipelined(addr, &specs))?;
    }

    /// (b) Plausible requests from several clients at once.
    #[test]
    fn concurrent_clients_get_their_documented_answers(
        groups in prop::collection::vec(prop::collection::vec(any_spec(), 1..5), 2..5),
    ) {
        on_fresh_server(|addr| run_concurrently(addr, &groups))?;
    }
}

// ----- plain regression tests ------------------------------------------------------------

/// A request declaring a body of `length` bytes and sending none of it.
fn declaring(method: &str, session: &str, length: &str) -> Vec<u8> {
    format!(
        "{method} /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         Content-Length: {length}\r\n\r\n"
    )
    .into_bytes()
}

/// Sends `raw` and reads the first whole response, keeping the connection open: the
/// server gets no end-of-file, so it answers only what it need not wait for.
fn first_reply_while_open(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(raw).unwrap();
    let deadline = Instant::now() + HANG;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok((replies, _, Tail::Nothing)) = parse_replies(&got, &[]) {
            if let Some(reply) = replies.into_iter().next() {
                return reply;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let shown = String::from_utf8_lossy(&got);
        assert!(!left.is_zero(), "no response within {HANG:?}: {shown:?}");
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => panic!("closed without a whole response: {shown:?}"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}; got {shown:?}"),
        }
    }
}

#[test]
fn a_huge_declared_body_gets_413_at_once() {
    // Nothing is allocated from what a client declares, and a body past the limit is never
    // read: the refusal comes while the client still holds its connection open, long
    // before the read timeout (30 s) would end a wait for the body.
    let panics = transport_panics();
    let http = server();
    let addr = http.local_addr();
    let session = open_session(addr).unwrap();
    // 2^63, 2^64 - 1, 2^40 (nobody allocates that casually), thirty digits.
    for length in [
        "9223372036854775808",
        "18446744073709551615",
        "1099511627776",
        "123456789012345678901234567890",
    ] {
        for method in ["POST", "GET", "DELETE", "PUT"] {
            let reply = first_reply_while_open(addr, &declaring(method, &session, length));
            check_reply(&reply, false).unwrap();
            expect_error(&reply, 413, &[-32600], IdRule::Null)
                .unwrap_or_else(|why| panic!("{method} {length}: {why}"));
            assert!(reply.closes(), "{method} {length}: {reply:?}");
        }
    }
    still_serves(addr).unwrap();
    assert_eq!(transport_panics(), panics, "a transport thread panicked");
}

#[test]
fn an_http2_request_line_gets_505() {
    let http = server();
    for raw in [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        b"GET /mcp HTTP/3.0\r\n\r\n",
    ] {
        let done = exchange(http.local_addr(), raw, &[]).unwrap();
        let statuses: Vec<u16> = done.replies.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [505], "{done:?}");
        expect_error(&done.replies[0], 505, &[-32600], IdRule::Null).unwrap();
        assert!(done.replies[0].closes(), "{done:?}");
    }
}

#[test]
fn a_refusal_of_a_head_request_has_no_content() {
    // RFC 9110 §9.3.2: the response to HEAD has no content, a refusal's included once the
    // head was read whole; RFC 9112 §6.3: the client reads what follows its head as the
    // next response.
    let http = server();
    for (raw, status) in [
        (
            &b"HEAD /mcp HTTP/1.1\r\nExpect: bogus\r\nHost: h\r\n\r\n"[..],
            417,
        ),
        (b"HEAD /mcp HTTP/1.1\r\n\r\n", 400),
        (
            b"HEAD /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 99999\r\n\r\n",
            413,
        ),
        (
            b"HEAD /mcp HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
            501,
        ),
    ] {
        let shown = String::from_utf8_lossy(raw);
        let done = exchange(http.local_addr(), raw, &[true])
            .unwrap_or_else(|why| panic!("{shown:?}: {why}"));
        let statuses: Vec<u16> = done.replies.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [status], "{shown:?}: {done:?}");
    }
}

#[test]
fn close_ends_an_http_1_0_connection_too() {
    // RFC 9112 §9.3: the "close" option ends the connection after the response, whatever
    // else `Connection` names.
    let http = server();
    let raw = b"DELETE /mcp HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n";
    let done = exchange(http.local_addr(), raw, &[]).unwrap();
    let statuses: Vec<u16> = done.replies.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [400], "{done:?}");
    assert!(done.replies[0].closes(), "{done:?}");
}

#[test]
fn pipelined_requests_are_handled_in_order() {
    // A client may pipeline requests on one connection: the connection's thread reads them
    // in order and hands each on, and the answers are written in that order. A DELETE must
    // not overtake the requests sent before it (RFC 9112 §9.3.2): the pings before it find
    // their session, and the one after does not.
    let http = server();
    let addr = http.local_addr();
    for round in 0..20 {
        let session = open_session(addr).unwrap();
        let with = [("Mcp-Session-Id", session.as_str())];
        let ping = |id: usize| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        let keep_alive = |raw: Vec<u8>| {
            String::from_utf8(raw)
                .unwrap()
                .replace("Connection: close", "Connection: keep-alive")
                .into_bytes()
        };
        let mut raw = Vec::new();
        for id in 0..8 {
            raw.extend(keep_alive(post_bytes(&with, &ping(id))));
        }
        raw.extend(
            format!("DELETE /mcp HTTP/1.1\r\nHost: h\r\nMcp-Session-Id: {session}\r\n\r\n")
                .into_bytes(),
        );
        raw.extend(post_bytes(&with, &ping(8)));
        let done = exchange(addr, &raw, &[]).unwrap();
        let statuses: Vec<u16> = done.replies.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [200, 200, 200, 200, 200, 200, 200, 200, 200, 404],
            "round {round}"
        );
    }
}

#[test]
fn a_cancel_pipelined_behind_a_notification_reaches_the_long_call_before_it() {
    // The connection's thread hands a ten-minute call on and reads the requests after it at
    // once, while the call's answer waits its turn: the cancel for that very call must
    // reach it while it runs, not once it has ended.
    let http = server();
    let addr = http.local_addr();
    let session = open_session(addr).unwrap();
    let with = [("Mcp-Session-Id", session.as_str())];
    let keep_alive = |raw: Vec<u8>| {
        String::from_utf8(raw)
            .unwrap()
            .replace("Connection: close", "Connection: keep-alive")
            .into_bytes()
    };
    let mut raw = Vec::new();
    raw.extend(keep_alive(post_bytes(
        &with,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 600_000}}}),
    )));
    raw.extend(keep_alive(post_bytes(
        &with,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )));
    raw.extend(post_bytes(
        &with,
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 1}}),
    ));
    // Within the exchange's hang bound, far below the call's ten minutes: the cancelled
    // call ends unanswered (202), and so do the two notifications.
    let done = exchange(addr, &raw, &[]).unwrap();
    let statuses: Vec<u16> = done.replies.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [202, 202, 202]);
}
