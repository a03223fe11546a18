//! The Streamable HTTP transport over real sockets: every kind of bad input gets its HTTP
//! status and JSON-RPC error and the server keeps serving; 2025-11-25 sessions isolate
//! their tasks; 2026-07-28 requests are stateless and checked against their routing headers.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_task_store::server::{
    demo, text_result, HttpOptions, HttpServer, Server, TaskSupport, Tool,
};
use mcp_task_store::{SessionId, Store, StoreConfig, StoreError, TaskId, TaskStatus, TaskStore};
use serde_json::{json, Value};

use crate::fixtures::demo_http_server;
use crate::raw_http::{self, Reply};

fn options() -> HttpOptions {
    HttpOptions {
        max_body_bytes: 64 * 1024,
        ..HttpOptions::default()
    }
}

fn start() -> HttpServer {
    demo_http_server(options()).0
}

/// One HTTP/1.1 exchange on a fresh connection (tried again while it is turned away at
/// `max_connections`, see [`turned_away`]).
pub(crate) fn send(addr: SocketAddr, method: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = try_write_request(addr, method, headers, body).and_then(|stream| {
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            raw_http::try_read_reply(&mut BufReader::new(stream))
        });
        match reply {
            Ok(reply) if !turned_away(reply.status, &reply.body) => return reply,
            Ok(reply) if Instant::now() > deadline => return reply,
            Ok(_) => {}
            Err(error) if turned_off(&error) && Instant::now() < deadline => {}
            Err(error) => panic!("{method} {headers:?}: {error}"),
        }
    }
}

/// Whether an answer is the accept loop's refusal at `max_connections`. A test with a low
/// limit meets it now and then on a request of its own pace, not of the behaviour under
/// test: a connection the test closed counts until the server's threads for it end, a
/// moment later. Such a request is simply sent again.
fn turned_away(status: u16, body: &[u8]) -> bool {
    status == 503 && String::from_utf8_lossy(body).contains("too many connections")
}

/// Whether an exchange failed as one the accept loop turned away may: it answers 503 and
/// closes at once, so writing the rest of the request can meet a broken pipe, and the
/// answer can be lost to the reset. Such a request is sent again too.
fn turned_off(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
    )
}

/// Opens a connection and sends one request on it, without waiting for the answer.
pub(crate) fn write_request(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> TcpStream {
    try_write_request(addr, method, headers, body).unwrap()
}

/// [`write_request`], an I/O error returned rather than a panic.
fn try_write_request(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr)?;
    let mut head = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    Ok(stream)
}

/// Reads the answer to the request sent on `stream`.
fn read_reply(stream: TcpStream) -> Reply {
    raw_http::read_reply(&mut BufReader::new(stream))
}

fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &Value) -> Reply {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    send(addr, "POST", &all, body.to_string().as_bytes())
}

pub(crate) fn meta_2026(declare: bool) -> Value {
    let capabilities = if declare {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

fn initialize(addr: SocketAddr) -> String {
    initialize_on(addr, "2025-11-25")
}

/// Opens a session on a protocol version; returns its id.
fn initialize_on(addr: SocketAddr, version: &str) -> String {
    let reply = post(
        addr,
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.json());
    reply
        .header("Mcp-Session-Id")
        .expect("a session id")
        .to_string()
}

fn ping_works(addr: SocketAddr) {
    let session = initialize(addr);
    let reply = post(
        addr,
        &[("Mcp-Session-Id", &session)],
        &json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
    );
    assert_eq!((reply.status, &reply.json()["result"]), (200, &json!({})));
}

#[test]
fn bad_http_input_gets_its_status_and_error_and_the_server_keeps_serving() {
    let http = start();
    let addr = http.local_addr();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();

    let wrong_type = send(
        addr,
        "POST",
        &[("Content-Type", "text/plain")],
        ping.as_bytes(),
    );
    assert_eq!((wrong_type.status, wrong_type.code()), (415, -32600));
    let look_alike = send(
        addr,
        "POST",
        &[("Content-Type", "application/jsonx")],
        ping.as_bytes(),
    );
    assert_eq!((look_alike.status, look_alike.code()), (415, -32600));
    let with_charset = send(
        addr,
        "POST",
        &[("Content-Type", "Application/JSON; charset=utf-8")],
        ping.as_bytes(),
    );
    assert_ne!(
        with_charset.status, 415,
        "parameters and case do not matter"
    );

    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100 * 1024)
    );
    let too_big = send(
        addr,
        "POST",
        &[("Content-Type", "application/json")],
        huge.as_bytes(),
    );
    assert_eq!((too_big.status, too_big.code()), (413, -32600));

    let invalid = send(
        addr,
        "POST",
        &[("Content-Type", "application/json")],
        b"{not json",
    );
    assert_eq!((invalid.status, invalid.code()), (400, -32700));

    let batch = send(
        addr,
        "POST",
        &[("Content-Type", "application/json")],
        format!("[{ping}]").as_bytes(),
    );
    assert_eq!((batch.status, batch.code()), (400, -32600));

    let no_session = post(
        addr,
        &[],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    assert_eq!((no_session.status, no_session.code()), (400, -32600));

    let unknown = post(
        addr,
        &[("Mcp-Session-Id", "no-such-session")],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    );
    assert_eq!((unknown.status, unknown.code()), (404, -32600));

    let wrong_verb = send(
        addr,
        "PUT",
        &[("Content-Type", "application/json")],
        ping.as_bytes(),
    );
    assert_eq!(wrong_verb.status, 405);

    let evil = post(
        addr,
        &[("Origin", "http://evil.example")],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
    );
    assert_eq!(evil.status, 403);

    let get_without_accept = send(addr, "GET", &[], b"");
    assert_eq!(get_without_accept.status, 406);

    let greet = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "x"}, "_meta": meta_2026(false)}});
    let no_method = post(addr, &[], &greet);
    assert_eq!((no_method.status, no_method.code()), (400, -32020));
    let mismatched_method = post(
        addr,
        &[("Mcp-Method", "tasks/get"), ("Mcp-Name", "greet")],
        &greet,
    );
    assert_eq!(
        (mismatched_method.status, mismatched_method.code()),
        (400, -32020)
    );
    let mismatched_name = post(
        addr,
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "echo")],
        &greet,
    );
    assert_eq!(
        (mismatched_name.status, mismatched_name.code()),
        (400, -32020)
    );
    let no_name = post(addr, &[("Mcp-Method", "tools/call")], &greet);
    assert_eq!((no_name.status, no_name.code()), (400, -32020));

    ping_works(addr);
}

#[test]
fn sessions_never_see_each_others_tasks() {
    let http = start();
    let addr = http.local_addr();
    let (a, b) = (initialize(addr), initialize(addr));
    assert_ne!(a, b);
    let created = post(
        addr,
        &[("Mcp-Session-Id", &a)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
    );
    let id = created.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let get = |session: &str| {
        post(
            addr,
            &[("Mcp-Session-Id", session)],
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": id}}),
        )
    };
    assert_eq!(get(&a).json()["result"]["taskId"], id.as_str());
    assert_eq!(get(&b).code(), -32602, "another session's task is unknown");
    let list = |session: &str| {
        post(
            addr,
            &[("Mcp-Session-Id", session)],
            &json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/list"}),
        )
    };
    assert_eq!(
        list(&a).json()["result"]["tasks"].as_array().unwrap().len(),
        1
    );
    assert_eq!(list(&b).json()["result"]["tasks"], json!([]));
}

#[test]
fn deleting_a_session_ends_it() {
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    assert_eq!(
        send(addr, "DELETE", &[("Mcp-Session-Id", &session)], b"").status,
        200
    );
    let after = post(
        addr,
        &[("Mcp-Session-Id", &session)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    );
    assert_eq!(after.status, 404);
    assert_eq!(
        send(addr, "DELETE", &[("Mcp-Session-Id", &session)], b"").status,
        404
    );
}

#[test]
fn stateless_requests_run_tools_and_tasks_with_routing_headers() {
    let http = start();
    let addr = http.local_addr();
    let discover = post(
        addr,
        &[("Mcp-Method", "server/discover")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta_2026(false)}}),
    );
    assert_eq!(discover.status, 200);
    assert_eq!(
        discover.json()["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    assert!(
        discover.header("Mcp-Session-Id").is_none(),
        "2026-07-28 is stateless"
    );

    let greet = post(
        addr,
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "greet")],
        &json!({"jsonrpc": "2.0", "id": 2,
        "method": "tools/call", "params": {"name": "greet", "arguments": {"name": "HTTP"}, "_meta": meta_2026(false)}}),
    );
    assert_eq!(greet.json()["result"]["content"][0]["text"], "Hello, HTTP!");
    assert_eq!(greet.json()["result"]["resultType"], "complete");

    let required = post(
        addr,
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "failing_job")],
        &json!({"jsonrpc": "2.0", "id": 3,
        "method": "tools/call", "params": {"name": "failing_job", "_meta": meta_2026(false)}}),
    );
    assert_eq!((required.status, required.code()), (400, -32021));
    assert!(
        required.json()["error"]["data"]["requiredCapabilities"]["extensions"]
            ["io.modelcontextprotocol/tasks"]
            .is_object()
    );

    let task = post(
        addr,
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "sleep_required")],
        &json!({"jsonrpc": "2.0", "id": 4,
        "method": "tools/call", "params": {"name": "sleep_required", "arguments": {"ms": 0}, "_meta": meta_2026(true)}}),
    );
    assert_eq!(task.json()["result"]["resultType"], "task");
    let id = task.json()["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let got = post(
        addr,
        &[("Mcp-Method", "tasks/get"), ("Mcp-Name", &id)],
        &json!({"jsonrpc": "2.0", "id": 5,
        "method": "tasks/get", "params": {"taskId": id, "_meta": meta_2026(true)}}),
    );
    assert_eq!(
        got.json()["result"]["taskId"],
        id.as_str(),
        "readable at once: {}",
        got.json()
    );

    let removed = post(
        addr,
        &[],
        &json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/list", "params": {"_meta": meta_2026(true)}}),
    );
    assert_eq!(removed.code(), -32601);
}

#[test]
fn a_session_event_stream_carries_status_notifications() {
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    // The stream is open once its headers arrived; now cause a status change.
    let mut events = open_event_stream(addr, &session);
    post(
        addr,
        &[("Mcp-Session-Id", &session)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
    );
    let message = next_event(&mut events);
    assert_eq!(message["method"], "notifications/tasks/status");
    assert_eq!(message["params"]["status"], "completed");
}

/// The data of the next event on an open event stream.
pub(crate) fn next_event(events: &mut BufReader<TcpStream>) -> Value {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            events.read_line(&mut line).unwrap() > 0,
            "the stream ended early"
        );
        // (A priming event has an id and no data.)
        match line.strip_prefix("data: ").map(str::trim) {
            Some("") | None => {}
            Some(data) => return serde_json::from_str(data).unwrap(),
        }
    }
}

/// Opens the session's `GET` event stream and reads past its head.
fn open_event_stream(addr: SocketAddr, session: &str) -> BufReader<TcpStream> {
    resume_event_stream(addr, session, None)
}

/// Opens the session's `GET` event stream, resuming after event `last_seen` if given, and
/// reads past its head.
fn resume_event_stream(
    addr: SocketAddr,
    session: &str,
    last_seen: Option<&str>,
) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let resume = last_seen.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
    write!(stream, "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n{resume}\r\n").unwrap();
    let mut events = BufReader::new(stream);
    let mut line = String::new();
    events.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    while line != "\r\n" {
        line.clear();
        events.read_line(&mut line).unwrap();
    }
    events
}

#[test]
fn a_new_event_stream_replaces_the_sessions_old_one() {
    // A client opens a new stream when it takes the old one for dead (a NAT dropped it
    // without a word): the server must not refuse it for as long as TCP takes to notice.
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    let mut old = open_event_stream(addr, &session);
    let mut new = open_event_stream(addr, &session);
    // The old stream ends: its last chunk comes...
    let mut line = String::new();
    while line != "0\r\n" {
        line.clear();
        assert!(old.read_line(&mut line).unwrap() > 0, "no last chunk");
    }
    // ...and the session's messages go to the new one.
    post(
        addr,
        &[("Mcp-Session-Id", &session)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
    );
    let message = next_event(&mut new);
    assert_eq!(message["method"], "notifications/tasks/status");
}

/// Starts `sleep` (long) as a 2025-11-25 task in `session` and returns its id.
fn start_long_task(addr: SocketAddr, session: &str) -> String {
    let created = post(
        addr,
        &[("Mcp-Session-Id", session)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 600_000}, "task": {}}}),
    );
    created.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task in {}", created.json()))
        .to_string()
}

fn status_in_store(store: &dyn TaskStore, session: &str, id: &str) -> TaskStatus {
    let id: TaskId = id.parse().unwrap();
    store
        .get(id, Some(&SessionId::new(session)))
        .unwrap()
        .status
}

#[test]
fn the_2026_header_alone_never_reaches_the_2025_handlers() {
    let http = start();
    let addr = http.local_addr();
    // A SEP-2663 client's task: sessionless, its id a bearer capability.
    let created = post(
        addr,
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "sleep_required")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "sleep_required", "arguments": {"ms": 300}, "_meta": meta_2026(true)}}),
    );
    let id = created.json()["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task in {}", created.json()))
        .to_string();
    let v2026 = ("MCP-Protocol-Version", "2026-07-28");
    let leaks = |reply: &Reply| reply.json().to_string().contains(&id);

    // Bodies without `_meta`: 2025-11-25 requests sent with the 2026 header.
    let list = post(
        addr,
        &[v2026],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/list"}),
    );
    assert!(!leaks(&list), "{}", list.json());
    assert_eq!(list.code(), -32601, "tasks/list was removed");
    let result = post(
        addr,
        &[v2026],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": id}}),
    );
    assert_eq!(result.code(), -32601, "tasks/result was removed");
    assert!(result.json().get("result").is_none(), "{}", result.json());
    let initialize = post(
        addr,
        &[v2026, ("Mcp-Method", "initialize")],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}),
    );
    assert_eq!(initialize.code(), -32601, "2026-07-28 has no initialize");
    assert!(initialize.header("Mcp-Session-Id").is_none());
    let get = post(
        addr,
        &[v2026, ("Mcp-Method", "tasks/get"), ("Mcp-Name", &id)],
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": {"taskId": id}}),
    );
    assert_eq!((get.status, get.code()), (400, -32020), "{}", get.json());
    let legacy_task = post(
        addr,
        &[v2026, ("Mcp-Method", "tools/call"), ("Mcp-Name", "sleep")],
        &json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
    );
    assert_eq!((legacy_task.status, legacy_task.code()), (400, -32020));

    // The owner still reads it with a proper 2026-07-28 request.
    let owner = post(
        addr,
        &[v2026, ("Mcp-Method", "tasks/get"), ("Mcp-Name", &id)],
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get",
        "params": {"taskId": id, "_meta": meta_2026(true)}}),
    );
    assert_eq!(
        owner.json()["result"]["taskId"],
        id.as_str(),
        "{}",
        owner.json()
    );
}

/// The routing headers are there so that what stands before the server (a gateway that
/// routes or authorises by method and tool) can trust them without reading the body. A
/// request that repeats `Mcp-Method` or `Mcp-Name` carries two values, and such an
/// intermediary may read the other one than the server: it gets -32020 with HTTP 400
/// whichever of them matches the body, and the tool does not run.
#[test]
fn repeated_routing_headers_are_a_header_mismatch() {
    let http = start();
    let addr = http.local_addr();
    let greet = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "x"}, "_meta": meta_2026(false)}});
    for headers in [
        [
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "greet"),
            ("Mcp-Name", "fail"),
        ],
        [
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "greet"),
            ("Mcp-Name", "greet"),
        ],
        [
            ("Mcp-Method", "tools/call"),
            ("Mcp-Method", "tools/list"),
            ("Mcp-Name", "greet"),
        ],
    ] {
        let reply = post(addr, &headers, &greet);
        assert_eq!(
            (reply.status, reply.code()),
            (400, -32020),
            "{headers:?}: {}",
            reply.json()
        );
    }
    // Once each, it is served.
    let reply = post(
        addr,
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "greet")],
        &greet,
    );
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Hello, x!");
}

#[test]
fn an_unsupported_protocol_version_header_gets_400() {
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let bad = post(
        addr,
        &[
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "1999-01-01"),
        ],
        &ping,
    );
    // 2026-07-28's UnsupportedProtocolVersionError; the legacy revisions ask only for 400.
    assert_eq!((bad.status, bad.code()), (400, -32022), "{}", bad.json());
    // The same for a body whose `_meta` names a version that is no string: not served as
    // if it named none.
    let ping_5 = json!({"jsonrpc": "2.0", "id": 3, "method": "ping",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": 5}}});
    let bad = post(addr, &[("Mcp-Session-Id", &session)], &ping_5);
    assert_eq!((bad.status, bad.code()), (400, -32022), "{}", bad.json());
    let bad_get = send(
        addr,
        "GET",
        &[
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "2099-01-01"),
        ],
        b"",
    );
    assert_eq!(bad_get.status, 400);
    for good in ["2025-11-25", "2025-06-18"] {
        let ok = post(
            addr,
            &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", good)],
            &ping,
        );
        assert_eq!(
            (ok.status, &ok.json()["result"]),
            (200, &json!({})),
            "{good}"
        );
    }
}

#[test]
fn waiting_tasks_result_calls_leave_the_server_free_and_all_end_with_their_task() {
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    let id = start_long_task(addr, &session);
    let body =
        json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": id}})
            .to_string();
    let headers = [
        ("Content-Type", "application/json"),
        ("Mcp-Session-Id", session.as_str()),
    ];
    // Twelve waiting calls, each on a connection of its own.
    let blocked: Vec<TcpStream> = (0..12)
        .map(|_| write_request(addr, "POST", &headers, body.as_bytes()))
        .collect();

    let other = initialize(addr);
    let ping = write_request(
        addr,
        "POST",
        &[
            ("Content-Type", "application/json"),
            ("Mcp-Session-Id", other.as_str()),
        ],
        json!({"jsonrpc": "2.0", "id": 4, "method": "ping"})
            .to_string()
            .as_bytes(),
    );
    ping.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let pong = read_reply(ping);
    assert_eq!((pong.status, &pong.json()["result"]), (200, &json!({})));

    // Ending the task answers every waiting call.
    let cancel = post(
        addr,
        &[("Mcp-Session-Id", &session)],
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/cancel", "params": {"taskId": id}}),
    );
    assert_eq!(
        cancel.json()["result"]["status"],
        "cancelled",
        "{}",
        cancel.json()
    );
    for stream in blocked {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let answer = read_reply(stream);
        assert_eq!(answer.json()["id"], 3, "{}", answer.json());
    }
}

#[test]
fn deleting_a_session_cancels_its_live_tasks() {
    let (http, store) = demo_http_server(options());
    let addr = http.local_addr();
    let session = initialize(addr);
    let tasks = [
        start_long_task(addr, &session),
        start_long_task(addr, &session),
    ];
    assert_eq!(
        status_in_store(store.as_ref(), &session, &tasks[0]),
        TaskStatus::Working
    );
    assert_eq!(
        send(addr, "DELETE", &[("Mcp-Session-Id", &session)], b"").status,
        200
    );
    for id in &tasks {
        assert_eq!(
            status_in_store(store.as_ref(), &session, id),
            TaskStatus::Cancelled
        );
    }
}

#[test]
fn dropping_the_server_cancels_its_sessions_live_tasks() {
    // A store the embedder owns outlives the transport (an embedded one would close).
    let owned = Store::start(StoreConfig::default()).unwrap();
    let store: Arc<dyn TaskStore> = Arc::new(owned.handle());
    let mut builder = Server::builder().store(store.clone());
    for tool in demo::tools() {
        builder = builder.tool(tool);
    }
    let http = HttpServer::bind(builder.build().unwrap(), "127.0.0.1:0", options()).unwrap();
    let addr = http.local_addr();
    let session = initialize(addr);
    let id = start_long_task(addr, &session);
    drop(http);
    assert_eq!(
        status_in_store(store.as_ref(), &session, &id),
        TaskStatus::Cancelled,
        "nobody could reach the task once the transport is gone"
    );
}

#[test]
fn dropping_the_server_stops_what_it_serves() {
    // An embedded store lives as long as the server that the transport serves: once the
    // transport is dropped, with nothing in flight, nothing may keep them running (each
    // costs a store thread and the tool workers).
    let (http, store) = demo_http_server(options());
    let addr = http.local_addr();
    ping_works(addr);
    drop(http);
    assert!(
        matches!(store.list(None, None), Err(StoreError::Closed)),
        "the embedded store still runs"
    );
}

#[test]
fn idle_sessions_are_ended_but_streaming_ones_are_kept() {
    let (http, store) = demo_http_server(HttpOptions {
        // Long enough for one request after another on a busy machine: each session has
        // one step to take within it (opening its stream; starting its task).
        session_idle_timeout: Duration::from_secs(2),
        ..options()
    });
    let addr = http.local_addr();
    let streaming = initialize(addr);
    let mut stream = write_request(
        addr,
        "GET",
        &[
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", &streaming),
        ],
        b"",
    );
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut status_line = [0u8; 12];
    stream.read_exact(&mut status_line).unwrap();
    assert_eq!(&status_line, b"HTTP/1.1 200");
    // The idle session's last request comes after the stream opened (and after the
    // streaming session's last request, so that session would have been ended first).
    let idle = initialize(addr);
    let id = start_long_task(addr, &idle);

    let deadline = Instant::now() + Duration::from_secs(10);
    while status_in_store(store.as_ref(), &idle, &id) != TaskStatus::Cancelled {
        assert!(Instant::now() < deadline, "the idle session was not ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    assert_eq!(post(addr, &[("Mcp-Session-Id", &idle)], &ping).status, 404);
    let kept = post(addr, &[("Mcp-Session-Id", &streaming)], &ping);
    assert_eq!((kept.status, &kept.json()["result"]), (200, &json!({})));
}

#[test]
fn a_failed_initialize_opens_no_session() {
    let (http, _) = demo_http_server(HttpOptions {
        max_sessions: 1,
        ..options()
    });
    let addr = http.local_addr();
    let failed = post(
        addr,
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 5}}),
    );
    assert_eq!(failed.code(), -32602);
    assert!(failed.header("Mcp-Session-Id").is_none());
    // The only slot is still free.
    initialize(addr);
}

/// A response that answers no request (its id null or absent) is taken with 202 and no
/// body, like any response: an error in the body would be one more message for a peer to
/// answer.
#[test]
fn a_response_without_a_usable_id_gets_no_error() {
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    for response in [
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}),
        json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid request"}}),
        json!({"jsonrpc": "2.0", "id": null, "result": {}}),
    ] {
        let reply = post(addr, &[("Mcp-Session-Id", &session)], &response);
        assert_eq!(
            (reply.status, reply.json()),
            (202, Value::Null),
            "{response}"
        );
    }
    ping_works(addr);
}

#[test]
fn a_request_its_client_cancels_gets_no_response() {
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "sleep", "arguments": {"ms": 600_000}}});
    let pending = write_request(
        addr,
        "POST",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", &session),
        ],
        call.to_string().as_bytes(),
    );
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 7}});
    // The two POSTs race on their two connections, and a cancel that arrives first finds
    // nothing to cancel: it is sent again until the call has stopped.
    pending
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(
            post(addr, &[("Mcp-Session-Id", &session)], &cancel).status,
            202
        );
        if pending.peek(&mut [0u8; 1]).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the call never stopped");
    }
    // The call stopped, and its exchange ends without a JSON-RPC response.
    pending
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let reply = read_reply(pending);
    assert_eq!((reply.status, &reply.json()), (202, &Value::Null));
}

#[test]
fn a_failed_bind_leaves_nothing_running() {
    // The store cannot be subscribed to (its owner is gone), so binding fails: no thread it
    // started may keep the server, and what it holds, alive (here: a tool's closure).
    let store = Store::start(StoreConfig::default()).unwrap();
    let handle = store.handle();
    drop(store);
    let alive = Arc::new(());
    let held = alive.clone();
    let tool = Tool::new(
        "hold",
        "Holds a reference",
        json!({"type": "object"}),
        TaskSupport::Optional,
        move |_, _| {
            let _ = &held;
            Ok(text_result(""))
        },
    );
    let server = Server::builder()
        .store(Arc::new(handle))
        .tool(tool)
        .build()
        .unwrap();
    assert!(HttpServer::bind(server, "127.0.0.1:0", options()).is_err());
    assert_eq!(
        Arc::strong_count(&alive),
        1,
        "a thread of the failed bind still holds the server"
    );
}

#[test]
fn a_2025_03_26_session_takes_batches_and_answers_them_in_one_body() {
    let http = start();
    let addr = http.local_addr();
    let session = initialize_on(addr, "2025-03-26");
    let in_session = [("Mcp-Session-Id", session.as_str())];
    let reply = post(
        addr,
        &in_session,
        &json!([
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "sleep", "arguments": {"ms": 1}}},
        ]),
    );
    assert_eq!(reply.status, 200);
    let answers = reply.json();
    assert_eq!(answers[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    assert_eq!(answers[1]["id"], 2, "{answers}");
    assert_eq!(answers[1]["result"]["content"][0]["text"], "slept 1 ms");
    assert_eq!(answers.as_array().unwrap().len(), 2, "{answers}");
    // Nothing to answer: 202, as for a lone notification.
    let notified = post(
        addr,
        &in_session,
        &json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
    );
    assert_eq!((notified.status, notified.json()), (202, Value::Null));
    // An empty batch is no request: 400, as for any message that is none.
    let empty = post(addr, &in_session, &json!([]));
    assert_eq!((empty.status, empty.code()), (400, -32600));
    // A batch needs its session; `initialize` never comes in one.
    let ping = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]);
    assert_eq!(post(addr, &[], &ping).status, 400);
    let init = json!([{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-03-26"}}]);
    assert_eq!(post(addr, &[], &init).status, 400);
    // 2026-07-28 has no batches: said so, not sent looking for a session (and not with
    // one, if a 2025-03-26 session id comes along).
    let v2026 = ("MCP-Protocol-Version", "2026-07-28");
    for headers in [
        vec![v2026],
        vec![v2026, ("Mcp-Session-Id", session.as_str())],
    ] {
        let refused = post(addr, &headers, &ping);
        assert_eq!((refused.status, refused.code()), (400, -32600));
        let message = refused.json()["error"]["message"].to_string();
        assert!(message.contains("batches are not supported"), "{message}");
    }
    // A 2025-11-25 session refuses batches.
    let later = initialize(addr);
    let refused = post(addr, &[("Mcp-Session-Id", &later)], &ping);
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.json()["error"]["code"],
        -32600,
        "{}",
        refused.json()
    );
    ping_works(addr);
}

/// The next event on an open event stream, priming events included: its id and its data
/// (`Null` for none).
fn next_event_with_id(events: &mut BufReader<TcpStream>) -> (String, Value) {
    let (mut id, mut data) = (String::new(), Value::Null);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(events.read_line(&mut line).unwrap() > 0, "the stream ended");
        let field = line.trim_end_matches(['\r', '\n']);
        if let Some(value) = field.strip_prefix("id: ") {
            id = value.to_string();
        } else if let Some(value) = field.strip_prefix("data: ") {
            data = serde_json::from_str(value).unwrap_or(Value::Null);
        } else if field.is_empty() && !id.is_empty() {
            return (id, data);
        }
    }
}

#[test]
fn a_resumed_event_stream_gets_again_what_followed_the_last_event_seen() {
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    let finish_a_task = || {
        post(
            addr,
            &[("Mcp-Session-Id", &session)],
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
        )
    };
    let mut first = open_event_stream(addr, &session);
    // A stream opens with a priming event: an id to resume from, no data.
    assert_eq!(next_event_with_id(&mut first), ("0".into(), Value::Null));
    finish_a_task();
    let (one, status) = next_event_with_id(&mut first);
    assert_eq!(
        (one.as_str(), &status["method"]),
        ("1", &json!("notifications/tasks/status"))
    );
    finish_a_task();
    let (two, again) = next_event_with_id(&mut first);
    assert_eq!(two, "2");
    // Say the client missed event 2 (its connection died as it was written): the stream
    // it opens after event 1 gets event 2 again, then a priming event at the newest.
    drop(first);
    let mut resumed = resume_event_stream(addr, &session, Some(&one));
    assert_eq!(next_event_with_id(&mut resumed), ("2".into(), again));
    assert_eq!(next_event_with_id(&mut resumed), ("2".into(), Value::Null));
    // Up to date: nothing again; new messages carry on from there.
    drop(resumed);
    let mut current = resume_event_stream(addr, &session, Some("2"));
    assert_eq!(next_event_with_id(&mut current), ("2".into(), Value::Null));
    finish_a_task();
    let (three, status) = next_event_with_id(&mut current);
    assert_eq!(
        (three.as_str(), &status["params"]["status"]),
        ("3", &json!("completed"))
    );
}

#[test]
fn get_reads_accept_by_media_range_and_q_value() {
    // RFC 9110 §12.5.1: the most specific range decides, and q=0 means "not acceptable".
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    for refused in [
        "text/event-stream;q=0",
        "TEXT/Event-Stream ; Q=0.000",
        "application/json",
        "text/event-stream-x",
        "*/*;q=0",
        "text/*;q=0, application/json",
        "text/event-stream;q=0, */*",
    ] {
        let reply = send(
            addr,
            "GET",
            &[("Accept", refused), ("Mcp-Session-Id", &session)],
            b"",
        );
        assert_eq!((reply.status, reply.code()), (406, -32600), "{refused}");
    }
    for accepted in [
        "*/*",
        "text/*",
        "Text/Event-Stream;q=0.5",
        "application/json;q=0, text/event-stream;q=0.1",
        "*/*;q=0, text/event-stream",
    ] {
        let stream = write_request(
            addr,
            "GET",
            &[("Accept", accepted), ("Mcp-Session-Id", &session)],
            b"",
        );
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let head = raw_http::read_head(&mut BufReader::new(stream));
        assert_eq!(head.status, 200, "{accepted}: {head:?}");
        assert!(head.is_stream(), "{accepted}: {head:?}");
    }
}

fn ping_status(addr: SocketAddr, session: &str) -> u16 {
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    post(addr, &[("Mcp-Session-Id", session)], &ping).status
}

#[test]
fn at_the_session_limit_initialize_ends_the_least_recently_active_quiet_session() {
    let (http, store) = demo_http_server(HttpOptions {
        max_sessions: 3,
        ..options()
    });
    let addr = http.local_addr();
    let (a, b, c) = (initialize(addr), initialize(addr), initialize(addr));
    // b's task has finished: its result is all ending b gives up.
    let created = post(
        addr,
        &[("Mcp-Session-Id", &b)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
    );
    let task = created.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let result = post(
        addr,
        &[("Mcp-Session-Id", &b)],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result",
            "params": {"taskId": task}}),
    );
    assert_eq!(result.status, 200, "{}", result.json());
    // Activity, oldest first: b, c, a.
    assert_eq!(ping_status(addr, &c), 200);
    assert_eq!(ping_status(addr, &a), 200);

    let d = initialize(addr);
    assert_eq!(
        ping_status(addr, &b),
        404,
        "the least recently active one ended"
    );
    assert_eq!(
        status_in_store(store.as_ref(), &b, &task),
        TaskStatus::Completed
    );
    for kept in [&a, &c, &d] {
        assert_eq!(ping_status(addr, kept), 200);
    }
    // Then the next least recently active (a, c and d were just pinged in that order).
    let e = initialize(addr);
    assert_eq!(ping_status(addr, &a), 404);
    for kept in [&c, &d, &e] {
        assert_eq!(ping_status(addr, kept), 200);
    }
}

#[test]
fn at_the_session_limit_initialize_gets_503_when_every_session_is_busy() {
    // A tool that says it started, then waits for the test.
    let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
    let (release, gate) = crossbeam_channel::bounded::<()>(0);
    let hold = Tool::new(
        "hold",
        "Says it started, then waits for the test",
        json!({"type": "object"}),
        TaskSupport::Optional,
        move |_, _| {
            let _ = started_tx.send(());
            let _ = gate.recv();
            Ok(text_result("released"))
        },
    );
    let mut builder = Server::builder().tool(hold);
    for tool in demo::tools() {
        builder = builder.tool(tool);
    }
    let server = builder.build().unwrap();
    let store = server.store();
    let options = HttpOptions {
        max_sessions: 3,
        ..options()
    };
    let http = HttpServer::bind(server, "127.0.0.1:0", options).unwrap();
    let addr = http.local_addr();
    let (streaming, tasked, calling) = (initialize(addr), initialize(addr), initialize(addr));
    let _events = open_event_stream(addr, &streaming);
    let task = start_long_task(addr, &tasked);
    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "hold", "arguments": {}}});
    let body = call.to_string();
    let in_flight = write_request(
        addr,
        "POST",
        &[
            ("Content-Type", "application/json"),
            ("Mcp-Session-Id", &calling),
        ],
        body.as_bytes(),
    );
    started
        .recv_timeout(Duration::from_secs(10))
        .expect("the call started");

    let refused = post(
        addr,
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
    );
    assert_eq!((refused.status, refused.code()), (503, -32603));
    assert_eq!(
        status_in_store(store.as_ref(), &tasked, &task),
        TaskStatus::Working,
        "no live task is cancelled to make room"
    );
    for kept in [&streaming, &tasked, &calling] {
        assert_eq!(ping_status(addr, kept), 200);
    }

    // Once its call is answered, the calling session is quiet, has no task, and makes room.
    drop(release);
    in_flight
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let answered = read_reply(in_flight);
    assert_eq!(answered.status, 200, "{}", answered.json());
    let newer = initialize(addr);
    assert_eq!(ping_status(addr, &calling), 404);
    for kept in [&streaming, &tasked, &newer] {
        assert_eq!(ping_status(addr, kept), 200);
    }
    assert_eq!(
        status_in_store(store.as_ref(), &tasked, &task),
        TaskStatus::Working
    );
}

#[test]
fn a_page_of_an_allowed_origin_may_use_the_endpoint_through_cors() {
    let http = demo_http_server(HttpOptions {
        allowed_origins: vec!["https://app.example".into(), "http://localhost:6274".into()],
        ..options()
    })
    .0;
    let addr = http.local_addr();
    for origin in ["http://localhost:6274", "https://app.example"] {
        // The browser's preflight for a POST with the MCP header fields.
        let preflight = send(
            addr,
            "OPTIONS",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                (
                    "Access-Control-Request-Headers",
                    "content-type, mcp-session-id, mcp-protocol-version, x-api-key, bad\"name",
                ),
            ],
            b"",
        );
        assert_eq!(preflight.status, 204, "{preflight:?}");
        assert_eq!(
            preflight.header("Access-Control-Allow-Origin"),
            Some(origin)
        );
        let methods = preflight
            .header("Access-Control-Allow-Methods")
            .unwrap_or("");
        assert!(
            methods.contains("POST") && methods.contains("DELETE"),
            "{preflight:?}"
        );
        let allowed = preflight
            .header("Access-Control-Allow-Headers")
            .unwrap_or("")
            .to_ascii_lowercase();
        // MCP's own fields, and the page's own (an API key), but nothing that is no
        // field name.
        for field in [
            "content-type",
            "mcp-session-id",
            "mcp-protocol-version",
            "last-event-id",
            "x-api-key",
        ] {
            assert!(allowed.contains(field), "{field}: {preflight:?}");
        }
        assert!(!allowed.contains("bad"), "{preflight:?}");
        assert_eq!(
            preflight.header("Content-Length"),
            None,
            "a 204 has no length"
        );
        // The POST itself: the page may read the answer and the session id.
        let init = post(
            addr,
            &[("Origin", origin)],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}),
        );
        assert_eq!(init.status, 200);
        assert_eq!(init.header("Access-Control-Allow-Origin"), Some(origin));
        assert!(init
            .header("Access-Control-Expose-Headers")
            .is_some_and(|e| e.contains("Mcp-Session-Id")));
        // Its errors too (a browser hides an answer without the field from the page).
        let error = post(
            addr,
            &[("Origin", origin)],
            &json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        );
        assert_eq!(error.status, 400);
        assert_eq!(error.header("Access-Control-Allow-Origin"), Some(origin));
    }
    // A loopback page not named is served but gets no CORS field: its browser keeps it
    // from sending a JSON POST (the preflight fails) and from reading answers, so a page
    // some other local program serves cannot drive the tools.
    let preflight = send(addr, "OPTIONS", &[("Origin", "http://localhost:5173")], b"");
    assert_eq!(preflight.status, 204);
    assert_eq!(preflight.header("Access-Control-Allow-Origin"), None);
    assert_eq!(preflight.header("Access-Control-Allow-Methods"), None);
    // Another origin gets 403 and no CORS field, preflight or not.
    for method in ["OPTIONS", "POST"] {
        let refused = send(addr, method, &[("Origin", "https://evil.example")], b"{}");
        assert_eq!(refused.status, 403, "{method}");
        assert_eq!(refused.header("Access-Control-Allow-Origin"), None);
    }
    // A client that is no browser sends no Origin and gets no CORS field; OPTIONS says
    // which methods the endpoint serves.
    let options = send(addr, "OPTIONS", &[], b"");
    assert_eq!(options.status, 204);
    assert!(options.header("Allow").is_some_and(|a| a.contains("POST")));
    assert_eq!(options.header("Access-Control-Allow-Origin"), None);
    ping_works(addr);
}

#[test]
fn a_page_of_an_allowed_origin_may_read_the_refusal_of_a_body_too_large() {
    // A body past `max_body_bytes` is refused (413) before the handler sees the request:
    // the refusal carries the CORS fields all the same, so the page learns why rather than
    // getting a bare network error.
    let origin = "https://app.example";
    let http = demo_http_server(HttpOptions {
        allowed_origins: vec![origin.into()],
        ..options()
    })
    .0;
    let addr = http.local_addr();
    let big = vec![b' '; options().max_body_bytes + 1];
    let refused = send(
        addr,
        "POST",
        &[("Content-Type", "application/json"), ("Origin", origin)],
        &big,
    );
    assert_eq!(refused.status, 413, "{refused:?}");
    assert_eq!(
        refused.header("Access-Control-Allow-Origin"),
        Some(origin),
        "{refused:?}"
    );
    assert_eq!(refused.header("Vary"), Some("Origin"), "{refused:?}");
    // Another origin's refusal carries none.
    let other = send(
        addr,
        "POST",
        &[
            ("Content-Type", "application/json"),
            ("Origin", "https://evil.example"),
        ],
        &big,
    );
    assert_eq!(other.status, 413, "{other:?}");
    assert_eq!(other.header("Access-Control-Allow-Origin"), None);
    ping_works(addr);
}

#[test]
fn every_answer_of_the_endpoint_varies_by_origin() {
    // The endpoint's answers depend on `Origin` (CORS fields for an allowed one, 403 for
    // another), so every one says so, those to requests without `Origin` too: else a
    // cache (the browser's own) may keep an answer given without the CORS fields and hand
    // it to a page, which then cannot read it (Fetch, "CORS protocol and HTTP caches").
    let http = start();
    let addr = http.local_addr();
    let session = initialize(addr);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let with_session = [("Mcp-Session-Id", session.as_str())];
    for (what, reply) in [
        ("OPTIONS", send(addr, "OPTIONS", &[], b"")),
        ("POST", post(addr, &with_session, &ping)),
        ("POST refused", post(addr, &[], &ping)),
        (
            "another origin",
            post(addr, &[("Origin", "https://evil.example")], &ping),
        ),
        (
            "a loopback origin",
            post(addr, &[("Origin", "http://localhost:5173")], &ping),
        ),
    ] {
        let vary = reply.header("Vary").unwrap_or("");
        assert!(vary.contains("Origin"), "{what}: {reply:?}");
    }
    // The event stream too.
    let stream = write_request(
        addr,
        "GET",
        &[
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", &session),
        ],
        b"",
    );
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = raw_http::read_head(&mut BufReader::new(stream));
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.header("Vary"), Some("Origin"), "{head:?}");
}

/// Sends a 2026-07-28 `subscriptions/listen` for `task_ids` and reads past the answer's
/// head, which must open an event stream.
fn open_listen(addr: SocketAddr, id: &str, task_ids: Value) -> BufReader<TcpStream> {
    try_listen(addr, id, task_ids)
        .unwrap_or_else(|answer| panic!("not an event stream but {answer}"))
}

/// Starts a long 2026-07-28 task and returns its id.
fn start_long_2026_task(addr: SocketAddr) -> String {
    let task = post(
        addr,
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "sleep_required")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "sleep_required", "arguments": {"ms": 600_000}, "_meta": meta_2026(true)}}),
    );
    task.json()["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task in {}", task.json()))
        .to_string()
}

fn cancel_2026_task(addr: SocketAddr, id: &str) {
    let ack = post(
        addr,
        &[("Mcp-Method", "tasks/cancel"), ("Mcp-Name", id)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel",
        "params": {"taskId": id, "_meta": meta_2026(true)}}),
    );
    assert_eq!(
        ack.json()["result"]["resultType"],
        "complete",
        "{}",
        ack.json()
    );
}

#[test]
fn a_task_subscription_streams_its_tasks_states_then_its_result() {
    let http = start();
    let addr = http.local_addr();
    let id = start_long_2026_task(addr);
    let mut events = open_listen(
        addr,
        "L",
        json!([id, "5c1e0000-0000-4000-8000-000000000000"]),
    );
    let ack = next_event(&mut events);
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
    let first = next_event(&mut events);
    assert_eq!(
        (&first["method"], &first["params"]["status"]),
        (&json!("notifications/tasks"), &json!("working"))
    );
    assert_eq!(
        first["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
    cancel_2026_task(addr, &id);
    let ended = next_event(&mut events);
    assert_eq!(ended["params"]["status"], "cancelled", "{ended}");
    let result = next_event(&mut events);
    assert_eq!(result["id"], "L");
    assert_eq!(result["result"]["resultType"], "complete");
    // The stream ends with the subscription: its last chunk comes.
    let mut rest = String::new();
    events.read_to_string(&mut rest).unwrap();
    assert!(rest.ends_with("0\r\n\r\n"), "{rest:?}");
}

#[test]
fn a_task_subscription_refused_is_a_json_answer() {
    let http = start();
    let addr = http.local_addr();
    let undeclared = post(
        addr,
        &[("Mcp-Method", "subscriptions/listen")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {"_meta": meta_2026(false), "notifications": {"taskIds": []}}}),
    );
    assert_eq!((undeclared.status, undeclared.code()), (400, -32021));
    let malformed = post(
        addr,
        &[("Mcp-Method", "subscriptions/listen")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {"_meta": meta_2026(true)}}),
    );
    assert_eq!((malformed.status, malformed.code()), (200, -32602));
    let mismatched = post(
        addr,
        &[("Mcp-Method", "tasks/get")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {"_meta": meta_2026(true), "notifications": {}}}),
    );
    assert_eq!((mismatched.status, mismatched.code()), (400, -32020));
    // A client that takes no event stream cannot be given one.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                      "params": {"_meta": meta_2026(true), "notifications": {}}});
    let json_only = send(
        addr,
        "POST",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
            ("Mcp-Method", "subscriptions/listen"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(json_only.status, 406);
}

#[test]
fn closing_a_task_subscriptions_stream_ends_it_and_the_server_carries_on() {
    let http = start();
    let addr = http.local_addr();
    let id = start_long_2026_task(addr);
    let mut events = open_listen(addr, "L", json!([id]));
    next_event(&mut events);
    next_event(&mut events);
    drop(events);
    // The client left: the change finds no reader, the subscription ends, and a new one
    // is served as before.
    cancel_2026_task(addr, &id);
    let mut again = open_listen(addr, "L", json!([id]));
    next_event(&mut again);
    assert_eq!(next_event(&mut again)["params"]["status"], "cancelled");
    assert_eq!(next_event(&mut again)["id"], "L");
}

#[test]
fn stopping_the_server_ends_task_subscriptions_with_their_result() {
    let http = start();
    let addr = http.local_addr();
    let id = start_long_2026_task(addr);
    let mut events = open_listen(addr, "L", json!([id]));
    next_event(&mut events);
    next_event(&mut events);
    let stopping = std::thread::spawn(move || drop(http));
    let result = next_event(&mut events);
    assert_eq!(result["id"], "L", "{result}");
    assert_eq!(result["result"]["resultType"], "complete");
    stopping.join().unwrap();
}

/// Sends a 2026-07-28 `subscriptions/listen` for `task_ids`: `Ok` with the stream read past
/// its head when the answer opens an event stream, `Err` with the JSON answer otherwise.
fn try_listen(addr: SocketAddr, id: &str, task_ids: Value) -> Result<BufReader<TcpStream>, Value> {
    try_listen_with(addr, &[], id, task_ids)
}

/// [`try_listen`] with `headers` besides the usual ones (credentials, say).
pub(crate) fn try_listen_with(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    id: &str,
    task_ids: Value,
) -> Result<BufReader<TcpStream>, Value> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                      "params": {"_meta": meta_2026(true), "notifications": {"taskIds": task_ids}}})
    .to_string();
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Mcp-Method", "subscriptions/listen"),
    ];
    all.extend_from_slice(headers);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(answer) = listen_once(addr, &all, &body) {
            return answer;
        }
        assert!(Instant::now() < deadline, "turned away for 10 s");
    }
}

/// One attempt of [`try_listen_with`]: `None` when the server turned the connection away.
fn listen_once(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<Result<BufReader<TcpStream>, Value>> {
    // Turned away by the accept loop, the exchange may also break (see `turned_off`).
    let stream = match try_write_request(addr, "POST", headers, body.as_bytes()) {
        Ok(stream) => stream,
        Err(error) if turned_off(&error) => return None,
        Err(error) => panic!("{error}"),
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = BufReader::new(stream);
    let mut line = String::new();
    match answer.read_line(&mut line) {
        Ok(0) => return None,
        Ok(_) => {}
        Err(error) if turned_off(&error) => return None,
        Err(error) => panic!("{error}"),
    }
    let status = line.starts_with("HTTP/1.1 503").then_some(503);
    assert!(
        line.starts_with("HTTP/1.1 200") || status.is_some(),
        "{line}"
    );
    let (mut event_stream, mut length) = (false, 0);
    while line != "\r\n" {
        line.clear();
        answer.read_line(&mut line).unwrap();
        let field = line.to_ascii_lowercase();
        event_stream |= field == "content-type: text/event-stream\r\n";
        if let Some(value) = field.strip_prefix("content-length: ") {
            length = value.trim().parse().unwrap();
        }
    }
    if event_stream {
        return Some(Ok(answer));
    }
    let mut body = vec![0; length];
    answer.read_exact(&mut body).unwrap();
    if let Some(status) = status {
        assert!(
            turned_away(status, &body),
            "{}",
            String::from_utf8_lossy(&body)
        );
        return None;
    }
    Some(Err(serde_json::from_slice(&body).unwrap()))
}

/// Opens session `session`'s `GET` event stream; returns the answer's head status, and the
/// stream (its head read) when one opened.
fn open_get_stream(addr: SocketAddr, session: &str) -> (u16, BufReader<TcpStream>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stream = write_request(
            addr,
            "GET",
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", session)],
            b"",
        );
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut reader = BufReader::new(stream);
        let head = raw_http::read_head(&mut reader);
        if head.status == 503 && Instant::now() < deadline {
            let mut body = Vec::new();
            let _ = reader.read_to_end(&mut body);
            if turned_away(head.status, &body) {
                continue;
            }
        }
        return (head.status, reader);
    }
}

/// Sessions' `GET` streams and task subscriptions together hold at most half of the
/// server's connections: each keeps its connection for as long as it lasts (and a session
/// with a stream is never ended for idleness), so without a shared bound clients that each
/// open a stream (the official TypeScript client does, right after `initialize`) could
/// take every connection, and every request would get 503. A session replacing its own
/// stream is never refused, and a place freed is taken again.
#[test]
fn event_streams_of_every_kind_leave_half_the_connections_to_requests() {
    let http = demo_http_server(HttpOptions {
        max_connections: 6,
        ..options()
    })
    .0;
    let addr = http.local_addr();
    let sessions: Vec<String> = (0..3).map(|_| initialize(addr)).collect();
    let task = start_long_2026_task(addr);
    // Three places: two sessions' streams and one subscription.
    let mut streams: Vec<_> = sessions[..2]
        .iter()
        .map(|session| {
            let (status, stream) = open_get_stream(addr, session);
            assert_eq!(status, 200, "{session}");
            stream
        })
        .collect();
    let mut listen = open_listen(addr, "L0", json!([task]));
    next_event(&mut listen);
    // A fourth stream of either kind is refused; requests are served.
    let (status, _) = open_get_stream(addr, &sessions[2]);
    assert_eq!(status, 503);
    let Err(refused) = try_listen(addr, "L1", json!([task])) else {
        panic!("a subscription beyond the bound is served");
    };
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(ping_status(addr, &sessions[2]), 200);
    // A session that replaces its stream keeps its place.
    let (status, replacement) = open_get_stream(addr, &sessions[0]);
    assert_eq!(status, 200, "a replacement is never refused");
    streams[0] = replacement;
    // The subscription ends with its task: its place goes to the waiting session.
    cancel_2026_task(addr, &task);
    let mut line = String::new();
    while listen.read_line(&mut line).unwrap_or(0) > 0 {
        line.clear();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, stream) = open_get_stream(addr, &sessions[2]);
        if status == 200 {
            streams.push(stream);
            break;
        }
        assert!(Instant::now() < deadline, "the place was never given back");
    }
}

/// A stream whose client closed its connection gives its place back within a second or so,
/// not when a keep-alive write fails (up to 30 s later): clients that reconnect often
/// (closing a page, a proxy's idle limit) must not keep others from streaming meanwhile.
#[test]
fn a_stream_its_client_closed_gives_its_place_back_soon() {
    let http = demo_http_server(HttpOptions {
        max_connections: 6,
        ..options()
    })
    .0;
    let addr = http.local_addr();
    let task = start_long_2026_task(addr);
    let session = initialize(addr);
    // The three places taken: two subscriptions and a session's stream.
    let mut listens: Vec<_> = (0..2)
        .map(|n| open_listen(addr, &format!("L{n}"), json!([task])))
        .collect();
    for listen in &mut listens {
        next_event(listen);
    }
    let (status, stream) = open_get_stream(addr, &session);
    assert_eq!(status, 200);
    assert!(
        try_listen(addr, "L9", json!([task])).is_err(),
        "no place left"
    );
    // Their clients go away without a word.
    drop((listens, stream));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut reopened = Vec::new();
    for n in 3..=5 {
        loop {
            if let Ok(mut events) = try_listen(addr, &format!("L{n}"), json!([task])) {
                next_event(&mut events);
                reopened.push(events);
                break;
            }
            assert!(Instant::now() < deadline, "place {n} was never given back");
        }
    }
}

/// Each task subscription holds one of the server's connections for as long as it runs:
/// at most half of `max_connections` may, so that however many clients subscribe, other
/// requests (a poll, a call) still find a connection. One beyond is refused with a JSON
/// answer (-32603), and its client only polls. (At `MAX_LISTENS` = `max_connections`,
/// the default, subscriptions could take every connection, and the server would turn
/// every request away with 503.)
#[test]
fn task_subscriptions_leave_half_the_connections_to_other_requests() {
    let http = demo_http_server(HttpOptions {
        max_connections: 8,
        ..options()
    })
    .0;
    let addr = http.local_addr();
    let id = start_long_2026_task(addr);
    let open: Vec<BufReader<TcpStream>> = (0..4)
        .map(|n| {
            let mut events = try_listen(addr, &format!("L{n}"), json!([id]))
                .unwrap_or_else(|answer| panic!("listen {n} refused: {answer}"));
            next_event(&mut events);
            events
        })
        .collect();
    let Err(refused) = try_listen(addr, "L4", json!([id])) else {
        panic!("a fifth listen is served");
    };
    assert_eq!(refused["id"], "L4", "{refused}");
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    // Polls are served meanwhile.
    let polled = post(
        addr,
        &[("Mcp-Method", "tasks/get"), ("Mcp-Name", &id)],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
                "params": {"taskId": id, "_meta": meta_2026(true)}}),
    );
    assert_eq!(polled.status, 200);
    assert_eq!(
        polled.json()["result"]["status"],
        "working",
        "{}",
        polled.json()
    );
    drop(open);
    cancel_2026_task(addr, &id);
}
