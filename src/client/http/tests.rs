//! The HTTP client's tests: the framing and event-stream rules on their own, and the
//! transport against a scripted fake server on a loopback port (sessions, renewals, the
//! `GET` stream's reopening, timeouts, shutdown). One file, as most tests go through the
//! whole stack and share the fake server.

use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};

use crossbeam_channel::{Receiver, Sender};
use serde_json::json;

use std::time::Instant;

use super::super::transport::{Pending, Work};
use super::stream::{reopen_wait, FIRST_REOPEN_WAIT, MAX_REOPEN_WAIT, MIN_REOPEN_WAIT};
use super::wire::Chunked;
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

fn fake_server(respond: impl Fn(&Seen) -> Option<String> + Send + Sync + 'static) -> FakeServer {
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

/// A 200 answering request `id` with `result`.
fn result_reply(id: &Value, result: Value) -> String {
    json_reply(
        "200 OK",
        &json!({"jsonrpc": "2.0", "id": id, "result": result}),
        "",
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
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
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

#[test]
fn configured_header_fields_go_with_every_request() {
    let server = fake_server(|request| match request.method() {
        "GET" => Some(format!("{EVENT_STREAM}: open\n\n{HOLD}")),
        _ => session_basics(request).or_else(|| {
            let answer = json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {}});
            Some(json_reply("200 OK", &answer, ""))
        }),
    });
    let client = Client::builder()
        .http_header("Authorization", "Bearer t0k")
        .http_header("X-Tenant", "blue")
        .connect_http(&server.url)
        .unwrap();
    client.request("ping", json!({})).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let mut seen: Vec<Seen> = Vec::new();
    let mut collect_until = |method: &str| {
        while !seen.iter().any(|r| r.method() == method) {
            let request = server.seen.recv_deadline(until);
            seen.push(request.unwrap_or_else(|_| panic!("no {method} within 5 s")));
        }
    };
    collect_until("GET");
    drop(client);
    collect_until("DELETE");
    assert!(
        seen.len() >= 5,
        "initialize, initialized, ping, GET, DELETE: {seen:?}"
    );
    for request in &seen {
        assert_eq!(
            request.header("Authorization"),
            Some("Bearer t0k"),
            "{request:?}"
        );
        assert_eq!(request.header("X-Tenant"), Some("blue"), "{request:?}");
    }
}

#[test]
fn a_printed_builder_shows_header_names_but_not_their_values() {
    let builder = Client::builder().http_header("Authorization", "Bearer s3cret");
    let printed = format!("{builder:?}");
    assert!(printed.contains("Authorization"), "{printed}");
    assert!(!printed.contains("s3cret"), "{printed}");
}

#[test]
fn a_printed_endpoint_shows_header_names_but_not_their_values() {
    let headers = [("Authorization".to_owned(), "Bearer s3cret".to_owned())];
    let endpoint = super::wire::Endpoint::parse("http://127.0.0.1:9/mcp")
        .unwrap()
        .with_headers(&headers)
        .unwrap();
    let printed = format!("{endpoint:?}");
    assert!(printed.contains("Authorization"), "{printed}");
    assert!(!printed.contains("s3cret"), "{printed}");
}

#[test]
fn header_fields_the_transport_sets_or_cannot_send_are_refused() {
    for (name, value) in [
        ("Mcp-Session-Id", "s9"),
        ("content-length", "5"),
        ("Host", "elsewhere"),
        ("X Tenant", "blue"),
        ("", "blue"),
        ("X-Tenant", "blue\r\nX-Injected: yes"),
    ] {
        // Refused before any connection is tried (nothing listens on port 9).
        let error = Client::builder()
            .http_header(name, value)
            .connect_http("http://127.0.0.1:9/mcp")
            .unwrap_err();
        assert!(
            matches!(error, ClientError::Unsupported(_)),
            "{name:?}: {error}"
        );
    }
    let twice = Client::builder()
        .http_header("X-Tenant", "blue")
        .http_header("x-tenant", "green")
        .connect_http("http://127.0.0.1:9/mcp")
        .unwrap_err();
    assert!(
        matches!(&twice, ClientError::Unsupported(why) if why.contains("twice")),
        "{twice}"
    );
}

/// A transport of its own (no client around it), whose idle timeout is `idle`.
fn transport(
    server: &FakeServer,
    revision: Revision,
    idle: Duration,
) -> (HttpTransport, Arc<Shared>, Receiver<Work>) {
    let (shared, jobs) = Shared::new();
    let mut transport =
        HttpTransport::new(&server.url, revision, shared.clone(), Duration::MAX, &[]).unwrap();
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

/// A renewed session must settle on the version the client asked for, as the first one
/// had to: a server that came back speaking another gets no request in it.
#[test]
fn a_session_renewed_on_another_protocol_version_is_refused() {
    let sessions = Arc::new(AtomicUsize::new(0));
    let opened = sessions.clone();
    let server = fake_server(move |request| {
        let id = &request.body["id"];
        match (request.method(), request.rpc_method()) {
            ("GET", _) => Some(empty_reply("405 Method Not Allowed")),
            ("DELETE", _) => Some(empty_reply("200 OK")),
            (_, Some("initialize")) if opened.fetch_add(1, Ordering::SeqCst) == 0 => {
                Some(initialized(request, "s1"))
            }
            (_, Some("initialize")) => Some(json_reply(
                "200 OK",
                &json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "serverInfo": {"name": "fake", "version": "1"}}}),
                "Mcp-Session-Id: s2\r\n",
            )),
            (_, Some("notifications/initialized")) => Some(empty_reply("202 Accepted")),
            _ if request.body["params"]["second"] == true => Some(json_reply(
                "404 Not Found",
                &json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32001, "message": "session not found"}}),
                "",
            )),
            _ => Some(json_reply(
                "200 OK",
                &json!({"jsonrpc": "2.0", "id": id, "result": {}}),
                "",
            )),
        }
    });
    let client = Client::builder().connect_http(&server.url).unwrap();
    client.request("ping", json!({})).unwrap();
    let error = client
        .request("ping", json!({"second": true}))
        .expect_err("no request in a session on another version");
    assert!(
        matches!(&error, ClientError::Protocol(why) if why.contains("2025-06-18")),
        "{error:?}"
    );
    drop(client);
    let seen: Vec<Seen> = server.seen.try_iter().collect();
    let in_s2 = seen
        .iter()
        .filter(|r| r.header("Mcp-Session-Id") == Some("s2"))
        .count();
    assert_eq!(in_s2, 0, "nothing went to the new session");
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
    // Not even a healthy stream's end is followed by a reopening at once: a server that
    // sends a message, ends each stream and asks for no wait would get a tight loop.
    assert_eq!(reopen_wait(Some(Duration::ZERO), 0), MIN_REOPEN_WAIT);
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
            Some("tasks/result") if results.fetch_add(1, Ordering::SeqCst) == 0 => Some(format!(
                "{EVENT_STREAM}id: ev-1\nretry: 100\ndata: \n\n{END}"
            )),
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
        Some(result_reply(id, result))
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
        Some(result_reply(id, result))
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
        // With the notification the call ends long before its deadline (ample, so a loaded
        // machine never reaches it); without, the deadline ends the wait.
        let deadline = match listen {
            Some(_) => Duration::from_secs(10),
            None => Duration::from_millis(500),
        };
        let client = Client::builder()
            .revision(Revision::Sep2663)
            .max_poll_interval(Duration::from_secs(3600))
            .deadline(deadline)
            .connect_http(&server.url)
            .unwrap();
        let outcome = within(Duration::from_secs(30), move || {
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
        Some(result_reply(id, result))
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

/// What is sent is the path and query only; parts of a URL the client cannot honour are
/// refused up front with a reason, not at the first connection.
#[test]
fn urls_send_path_and_query_and_refuse_what_they_cannot_honour() {
    let parts = |url: &str| {
        let e = Endpoint::parse(url).unwrap();
        (e.authority, e.path)
    };
    let expect = |authority: &str, path: &str| (authority.to_owned(), path.to_owned());
    assert_eq!(
        parts("http://h:8080/mcp?k=v#top"),
        expect("h:8080", "/mcp?k=v")
    );
    assert_eq!(parts("http://h?k=v"), expect("h:80", "/?k=v"));
    assert_eq!(parts("http://h#top"), expect("h:80", "/"));
    assert_eq!(parts("http://[::1]/mcp"), expect("[::1]:80", "/mcp"));
    assert_eq!(parts("http://[::1]:9/mcp"), expect("[::1]:9", "/mcp"));
    for (url, why) in [
        ("http://user:pw@h/mcp", "user information"),
        ("http://h:/mcp", "not a port"),
        ("http://h:http/mcp", "not a port"),
        ("http://h:70000/mcp", "not a port"),
        ("http://?k=v", "names no host"),
    ] {
        let error = Endpoint::parse(url).err().unwrap().to_string();
        assert!(error.contains(why), "{url}: {error}");
    }
}

/// Over HTTP every request has a connection of its own: one that breaks before its answer
/// fails that request with `Closed`, and the next request goes through.
#[test]
fn a_connection_that_breaks_fails_its_request_alone() {
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let server = fake_server(move |request| {
        let id = &request.body["id"];
        let result = match request.rpc_method() {
            Some("server/discover") => discovered(),
            // The first ping's connection closes without a word.
            Some("ping") if first.swap(false, Ordering::SeqCst) => return Some(String::new()),
            _ => json!({}),
        };
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
        Some(json_reply("200 OK", &answer, ""))
    });
    let client = Client::builder()
        .revision(Revision::Sep2663)
        .connect_http(&server.url)
        .unwrap();
    let error = request_within(&client, "ping").unwrap_err();
    assert!(matches!(error, ClientError::Closed { .. }), "{error}");
    assert_eq!(request_within(&client, "ping").unwrap(), json!({}));
}

/// A subscription whose event stream breaks off (a proxy's idle limit, a server that drops
/// a slow reader) while its task runs is opened again: the task's notifications are not
/// lost for the rest of the call, which would then wait for the next poll (in an hour).
#[test]
fn a_subscription_that_breaks_off_is_opened_again() {
    let listens = Arc::new(AtomicUsize::new(0));
    let heard = listens.clone();
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tasks",
                         "params": {"taskId": "t1", "status": "completed"}});
    let server = fake_server(move |request| {
        let id = &request.body["id"];
        let result = match request.rpc_method() {
            Some("server/discover") => discovered(),
            Some("tools/call") => json!({"resultType": "task", "taskId": "t1",
                "status": "working", "pollIntervalMs": 3_600_000}),
            // The first subscription's stream ends at once, without its result.
            Some("subscriptions/listen") if heard.fetch_add(1, Ordering::SeqCst) == 0 => {
                return Some(format!("{EVENT_STREAM}{END}"));
            }
            // The task ends once the client subscribed again, which hears of it.
            Some("subscriptions/listen") => {
                return Some(format!("{EVENT_STREAM}data: {changed}\n\n{HOLD}"));
            }
            Some("tasks/get") if heard.load(Ordering::SeqCst) > 1 => {
                json!({"taskId": "t1", "status": "completed", "result": {"content": []}})
            }
            Some("tasks/get") => json!({"taskId": "t1", "status": "working"}),
            _ => json!({}),
        };
        Some(result_reply(id, result))
    });
    let client = Client::builder()
        .revision(Revision::Sep2663)
        .max_poll_interval(Duration::from_secs(3600))
        .deadline(Duration::from_secs(20))
        .connect_http(&server.url)
        .unwrap();
    let outcome = within(Duration::from_secs(30), move || {
        client.call_tool("work", json!({}))
    })
    .expect("the call hangs");
    assert_eq!(outcome.unwrap(), json!({"content": []}));
    let cancelled = (server.seen.try_iter()).any(|r| r.rpc_method() == Some("tasks/cancel"));
    assert!(!cancelled, "the call waited for its deadline");
    assert_eq!(listens.load(Ordering::SeqCst), 2);
}

/// A server (or proxy) that cuts every subscription at once is not asked again and again:
/// past a few, the task is only polled.
#[test]
fn subscriptions_that_keep_breaking_off_are_given_up() {
    let (listens, polls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (heard, polled) = (listens.clone(), polls.clone());
    let server = fake_server(move |request| {
        let id = &request.body["id"];
        let result = match request.rpc_method() {
            Some("server/discover") => discovered(),
            Some("tools/call") => json!({"resultType": "task", "taskId": "t1",
                "status": "working", "pollIntervalMs": 10}),
            Some("subscriptions/listen") => {
                heard.fetch_add(1, Ordering::SeqCst);
                return Some(format!("{EVENT_STREAM}{END}"));
            }
            Some("tasks/get") if polled.fetch_add(1, Ordering::SeqCst) >= 30 => {
                json!({"taskId": "t1", "status": "completed", "result": {"content": []}})
            }
            Some("tasks/get") => json!({"taskId": "t1", "status": "working"}),
            _ => json!({}),
        };
        Some(result_reply(id, result))
    });
    let client = Client::builder()
        .revision(Revision::Sep2663)
        .connect_http(&server.url)
        .unwrap();
    let outcome = within(Duration::from_secs(30), move || {
        client.call_tool("work", json!({}))
    })
    .expect("the call hangs");
    assert_eq!(outcome.unwrap(), json!({"content": []}));
    assert_eq!(
        listens.load(Ordering::SeqCst),
        1 + crate::client::follow::MAX_QUICK_BREAKS as usize
    );
}

/// The answer to request `id` as an SSE event with id `event`.
fn answer_event(id: &Value, event: &str) -> String {
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"resumed": true}});
    format!("id: {event}\ndata: {answer}\n\n")
}

/// A 2025-11-25 server that answers `ping` with the event stream `first(id)` (which
/// should end it), and the `n`th `GET` resuming it (one with `Last-Event-ID`) with
/// `resumed(n, get, id)`, `id` the ping's. It offers no `GET` stream of its own (405),
/// and takes the client's answers to its requests.
fn resuming_server(
    first: impl Fn(&Value) -> String + Send + Sync + 'static,
    resumed: impl Fn(usize, &Seen, &Value) -> String + Send + Sync + 'static,
) -> FakeServer {
    let ping = Mutex::new(Value::Null);
    let resumptions = AtomicUsize::new(0);
    fake_server(
        move |request| match (request.method(), request.rpc_method()) {
            ("GET", _) if request.header("Last-Event-ID").is_some() => {
                let n = resumptions.fetch_add(1, Ordering::SeqCst);
                Some(resumed(n, request, &ping.lock()))
            }
            (_, Some("ping")) => {
                *ping.lock() = request.body["id"].clone();
                Some(first(&request.body["id"]))
            }
            ("POST", None) => Some(empty_reply("202 Accepted")),
            _ => session_basics(request),
        },
    )
}

/// The next `GET` resuming a stream (one with `Last-Event-ID`) on `channel` within
/// `window`, if any.
fn resumption_within(channel: &Receiver<Seen>, window: Duration) -> Option<Seen> {
    let until = Instant::now() + window;
    loop {
        let request = next_within(
            channel,
            "GET",
            until.saturating_duration_since(Instant::now()),
        )?;
        if request.header("Last-Event-ID").is_some() {
            return Some(request);
        }
    }
}

/// The I/O error a request failed with.
fn io_failure(outcome: Result<Value, ClientError>) -> io::Error {
    match outcome {
        Err(ClientError::Io(error)) => error,
        other => panic!("expected an I/O error: {other:?}"),
    }
}

#[test]
fn a_post_stream_ended_before_its_answer_is_resumed_with_a_get() {
    // A priming event (an id, empty data), then the server ends the stream.
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}id: p1\ndata: \n\n{END}"),
        |_, _, id| format!("{EVENT_STREAM}{}{HOLD}", answer_event(id, "p2")),
    );
    let client = Client::builder()
        .http_header("X-Tenant", "blue")
        .connect_http(&server.url)
        .unwrap();
    assert_eq!(request_within(&client, "ping").unwrap()["resumed"], true);
    let get = resumption_within(&server.seen, Duration::from_secs(5)).expect("no resumption");
    assert_eq!(get.header("Last-Event-ID"), Some("p1"));
    assert_eq!(get.header("Mcp-Session-Id"), Some("s1"));
    assert_eq!(
        get.header("MCP-Protocol-Version"),
        Some(v2025::PROTOCOL_VERSION)
    );
    assert_eq!(get.header("Accept"), Some("text/event-stream"));
    assert_eq!(get.header("X-Tenant"), Some("blue"));
    // Once answered, the resumed stream's connection is given up.
    let until = Instant::now() + Duration::from_secs(5);
    while next_within(
        &server.ended,
        "GET",
        until.saturating_duration_since(Instant::now()),
    )
    .expect("the resumed stream's connection was kept after the answer")
    .header("Last-Event-ID")
    .is_none()
    {}
}

/// A POST's event stream that breaks off (its connection ends inside a chunked body, as
/// after a network failure or a server that drops it) once its events had ids is resumed
/// as one that ends cleanly: resuming broken streams is what the ids are for, and a
/// resumed stream that breaks off is resumed too.
#[test]
fn a_post_stream_that_breaks_off_before_its_answer_is_resumed() {
    let priming = "id: p1\ndata: \n\n";
    let server = resuming_server(
        move |_| {
            let chunked =
                EVENT_STREAM.replace("\r\n\r\n", "\r\nTransfer-Encoding: chunked\r\n\r\n");
            // One chunk, then the connection ends without the last chunk.
            format!("{chunked}{:x}\r\n{priming}\r\n{END}", priming.len())
        },
        |_, _, id| format!("{EVENT_STREAM}{}{HOLD}", answer_event(id, "p2")),
    );
    let client = Client::builder().connect_http(&server.url).unwrap();
    assert_eq!(request_within(&client, "ping").unwrap()["resumed"], true);
    let get = resumption_within(&server.seen, Duration::from_secs(5)).expect("no resumption");
    assert_eq!(get.header("Last-Event-ID"), Some("p1"));
}

/// A resumed stream that resets its event id (an `id` field with no value) leaves
/// nothing to resume from: the request fails rather than sending a `GET` with an empty
/// `Last-Event-ID`, which a server takes for the session's own event stream (replacing
/// the one the client's reader holds) rather than this request's.
#[test]
fn a_resumed_stream_that_resets_its_event_id_is_not_resumed_again() {
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}id: p1\ndata: \n\n{END}"),
        |n, _, id| match n {
            0 => format!("{EVENT_STREAM}id\ndata: \n\n{END}"),
            _ => format!("{EVENT_STREAM}{}", answer_event(id, "p2")),
        },
    );
    let client = Client::builder().connect_http(&server.url).unwrap();
    let what = io_failure(request_within(&client, "ping")).to_string();
    assert!(what.contains("event id"), "{what}");
    drop(client);
    let resumptions: Vec<String> = (server.seen.try_iter())
        .filter(|r| r.method() == "GET")
        .filter_map(|r| r.header("Last-Event-ID").map(str::to_owned))
        .collect();
    assert_eq!(resumptions, ["p1"]);
}

/// A POST stream's resumption waits the whole `retry:` time the server asked for, however
/// long: SEP-1699 says clients MUST respect it (a server that ends its streams to be
/// polled sets the pace of the polling), as the session's `GET` stream does. A shorter wait
/// would have the client ask again and again before the server wants it to.
#[test]
fn a_resumption_waits_the_servers_whole_retry_time() {
    let long = 12 * MAX_REOPEN_WAIT;
    assert_eq!(resume::resume_wait(Some(long), 0), long);
    assert_eq!(resume::resume_wait(Some(long), 2), long);
    // A fruitless resumption still makes the next wait longer, as for the GET stream.
    let short = Duration::from_millis(300);
    assert_eq!(resume::resume_wait(Some(short), 0), short);
    assert!(resume::resume_wait(Some(short), 1) > short);
}

/// An `initialize` answered with an event stream that ends before its answer is resumed in
/// the session that same answer's head offered: the `GET` must name it (a 2025-11-25
/// server refuses a `GET` without its session), though the POST carried none.
#[test]
fn an_initialize_stream_ended_before_its_answer_is_resumed_in_its_new_session() {
    let asked = Mutex::new(Value::Null);
    let server = fake_server(
        move |request| match (request.method(), request.rpc_method()) {
            ("GET", _) if request.header("Last-Event-ID").is_some() => {
                if request.header("Mcp-Session-Id") != Some("s1") {
                    return Some(empty_reply("400 Bad Request"));
                }
                let answer = json!({"jsonrpc": "2.0", "id": *asked.lock(), "result": {
                    "protocolVersion": v2025::PROTOCOL_VERSION,
                    "capabilities": {},
                    "serverInfo": {"name": "fake", "version": "0"},
                }});
                Some(format!("{EVENT_STREAM}id: i2\ndata: {answer}\n\n{HOLD}"))
            }
            (_, Some("initialize")) => {
                *asked.lock() = request.body["id"].clone();
                let head = EVENT_STREAM.replace("\r\n\r\n", "\r\nMcp-Session-Id: s1\r\n\r\n");
                Some(format!("{head}id: i1\ndata: \n\n{END}"))
            }
            _ => session_basics(request),
        },
    );
    let (transport, shared, _jobs) = transport(&server, Revision::V2025, IDLE_TIMEOUT);
    let (id, pending) = shared.register().unwrap();
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {"protocolVersion": v2025::PROTOCOL_VERSION, "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}});
    transport.send_request(&id, message).unwrap();
    let answer = pending
        .recv_timeout(Duration::from_secs(5))
        .expect("no answer");
    assert!(answer.is_ok(), "{answer:?}");
    let get = resumption_within(&server.seen, Duration::from_secs(5)).expect("no resumption");
    assert_eq!(get.header("Mcp-Session-Id"), Some("s1"));
}

#[test]
fn a_resumption_waits_the_servers_retry_time() {
    let times = Arc::new(Mutex::new(Vec::new()));
    let (posted, resumed) = (times.clone(), times.clone());
    let server = resuming_server(
        move |_| {
            posted.lock().push(Instant::now());
            format!("{EVENT_STREAM}retry: 400\nid: p1\ndata: \n\n{END}")
        },
        move |_, _, id| {
            resumed.lock().push(Instant::now());
            format!("{EVENT_STREAM}{}", answer_event(id, "p2"))
        },
    );
    let client = Client::builder().connect_http(&server.url).unwrap();
    assert_eq!(request_within(&client, "ping").unwrap()["resumed"], true);
    let times = times.lock();
    assert_eq!(times.len(), 2, "one POST, one resumption");
    // The POST's stream ended after its head was written, so at least 400 ms passed
    // between the two.
    let gap = times[1] - times[0];
    assert!(gap >= Duration::from_millis(400), "{gap:?}");
}

#[test]
fn a_server_request_replayed_on_the_resumed_stream_is_handled_once() {
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}id: p1\n{}{END}", elicitation_event("e1")),
        // A server that replays its last event too.
        |_, _, id| {
            format!(
                "{EVENT_STREAM}id: p1\n{}{}{HOLD}",
                elicitation_event("e1"),
                answer_event(id, "p2")
            )
        },
    );
    let (client, asked) = eliciting_client(&server);
    assert_eq!(request_within(&client, "ping").unwrap()["resumed"], true);
    assert_eq!(
        asked.recv_timeout(Duration::from_secs(5)).as_deref(),
        Ok("e1")
    );
    assert!(
        asked.recv_timeout(Duration::from_millis(300)).is_err(),
        "the replayed request was handled again"
    );
}

#[test]
fn a_resumption_the_server_refuses_fails_the_request_at_once() {
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}id: p1\ndata: \n\n{END}"),
        |_, _, _| empty_reply("405 Method Not Allowed"),
    );
    let client = Client::builder().connect_http(&server.url).unwrap();
    let error = io_failure(request_within(&client, "ping"));
    let what = error.to_string();
    assert!(
        what.contains("HTTP 405") && what.contains("refused"),
        "{what}"
    );
    resumption_within(&server.seen, Duration::from_secs(5)).expect("no resumption");
    assert!(
        resumption_within(&server.seen, Duration::from_millis(300)).is_none(),
        "asked again after a 405"
    );
}

#[test]
fn a_stream_without_event_ids_is_not_resumed() {
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": "working"}});
    let server = resuming_server(
        move |_| format!("{EVENT_STREAM}data: {note}\n\n{END}"),
        |_, _, id| format!("{EVENT_STREAM}{}", answer_event(id, "p2")),
    );
    let client = Client::builder().connect_http(&server.url).unwrap();
    let error = io_failure(request_within(&client, "ping"));
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
    let what = error.to_string();
    assert!(
        what.contains("without answering request") && !what.contains(", and"),
        "{what}"
    );
    assert!(resumption_within(&server.seen, Duration::from_millis(300)).is_none());
}

#[test]
fn resumptions_that_bring_nothing_new_are_given_up() {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}id: p1\ndata: \n\n{END}"),
        move |n, _, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            match n {
                // Passing trouble, a stream with nothing in it, the last event again.
                0 => empty_reply("503 Service Unavailable"),
                1 => format!("{EVENT_STREAM}: nothing\n\n{END}"),
                _ => format!("{EVENT_STREAM}id: p1\ndata: \n\n{END}"),
            }
        },
    );
    let client = Client::builder().connect_http(&server.url).unwrap();
    let what = io_failure(request_within(&client, "ping")).to_string();
    assert!(what.contains("brought no new event"), "{what}");
    assert_eq!(
        count.load(Ordering::SeqCst),
        resume::MAX_FRUITLESS_RESUMPTIONS as usize
    );
    let _ = server.seen.try_iter().count();
    assert!(resumption_within(&server.seen, Duration::from_millis(300)).is_none());
}

#[test]
fn resumptions_that_bring_new_events_go_on_until_the_answer() {
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}retry: 0\nid: p0\ndata: \n\n{END}"),
        |n, get, id| {
            // Each from the id the previous one ended on.
            assert_eq!(get.header("Last-Event-ID"), Some(format!("p{n}").as_str()));
            match n {
                0..=4 => format!("{EVENT_STREAM}id: p{}\ndata: \n\n{END}", n + 1),
                _ => format!("{EVENT_STREAM}{}", answer_event(id, "last")),
            }
        },
    );
    let client = Client::builder().connect_http(&server.url).unwrap();
    assert_eq!(request_within(&client, "ping").unwrap()["resumed"], true);
}

#[test]
fn a_resumption_that_meets_a_forgotten_session_fails_and_renews_nothing() {
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}id: p1\ndata: \n\n{END}"),
        |_, _, _| empty_reply("404 Not Found"),
    );
    let client = Client::builder().connect_http(&server.url).unwrap();
    let what = io_failure(request_within(&client, "ping")).to_string();
    assert!(what.contains("no longer knows its session s1"), "{what}");
    drop(client);
    let seen: Vec<Seen> = server.seen.try_iter().collect();
    let count = |method| {
        seen.iter()
            .filter(|r| r.rpc_method() == Some(method))
            .count()
    };
    assert_eq!(count("initialize"), 1, "renewed: {seen:?}");
    assert_eq!(count("ping"), 1, "sent again: {seen:?}");
}

#[test]
fn a_resumed_stream_nobody_waits_for_is_ended() {
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}id: p1\ndata: \n\n{END}"),
        |_, _, _| format!("{EVENT_STREAM}: working\n\n{HOLD}"),
    );
    let client = Client::builder()
        .request_timeout(Duration::from_millis(500))
        .connect_http(&server.url)
        .unwrap();
    let error = request_within(&client, "ping").unwrap_err();
    assert!(matches!(error, ClientError::Timeout { .. }), "{error}");
    let until = Instant::now() + Duration::from_secs(5);
    while next_within(
        &server.ended,
        "GET",
        until.saturating_duration_since(Instant::now()),
    )
    .expect("the resumed stream was kept after its request timed out")
    .header("Last-Event-ID")
    .is_none()
    {}
}

/// A request whose POST stream ended asking for a long wait (a minute) before it is
/// resumed, once it waits: `end` is then called, and the request's thread must be gone
/// within a second.
fn waiting_to_resume(end: impl FnOnce(&HttpTransport, &Shared, &RequestId)) {
    let server = resuming_server(
        |_| format!("{EVENT_STREAM}retry: 60000\nid: p1\ndata: \n\n{END}"),
        |_, _, id| format!("{EVENT_STREAM}{}", answer_event(id, "p2")),
    );
    let (transport, shared, jobs) = transport(&server, Revision::V2025, IDLE_TIMEOUT);
    let (id, pending) = shared.register().unwrap();
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    transport.send_request(&id, message).unwrap();
    let waits = Instant::now() + Duration::from_secs(5);
    assert!(
        transport.inner.stream.paused(1, waits),
        "it never waits to resume"
    );
    end(&transport, &shared, &id);
    drop((pending, transport, shared));
    // `jobs` disconnects once the request's thread let go of the transport.
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        match jobs.recv_deadline(until) {
            Ok(_) => continue,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                panic!("the request's thread still waits to resume")
            }
        }
    }
    assert!(resumption_within(&server.seen, Duration::from_millis(100)).is_none());
}

#[test]
fn abandoning_a_request_ends_its_wait_to_resume() {
    waiting_to_resume(|transport, shared, id| {
        shared.forget(id);
        transport.abandon(id);
    });
}

#[test]
fn shutdown_ends_a_wait_to_resume() {
    waiting_to_resume(|transport, _, _| transport.shutdown());
}

#[test]
fn a_sep2663_stream_is_not_resumed() {
    let server = fake_server(|request| {
        let id = &request.body["id"];
        match request.rpc_method() {
            Some("ping") => Some(format!("{EVENT_STREAM}id: p1\ndata: \n\n{END}")),
            _ => {
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": discovered()});
                Some(json_reply("200 OK", &answer, ""))
            }
        }
    });
    let client = Client::builder()
        .revision(Revision::Sep2663)
        .connect_http(&server.url)
        .unwrap();
    let what = io_failure(request_within(&client, "ping")).to_string();
    assert!(!what.contains(", and"), "{what}");
    assert!(next_within(&server.seen, "GET", Duration::from_millis(300)).is_none());
}
