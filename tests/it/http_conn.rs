//! The HTTP transport's connection layer over real sockets: bounded waits (read, idle),
//! the connection limit, interim `100 Continue`, chunked request bodies, HTTP/1.0, and a
//! stop that ends open connections and event streams. Every read is bounded by [`HANG`];
//! nothing sleeps to synchronise (the short timeouts under test do the waiting).

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use mcp_task_store::server::{
    demo, text_result, HttpOptions, HttpServer, Server, TaskSupport, Tool,
};
use serde_json::{json, Value};

use crate::fixtures::demo_http_server;
use crate::raw_http::{read_head, read_reply, Reply};

/// Longest any read may block; only failing runs wait this long.
const HANG: Duration = Duration::from_secs(10);

fn server(options: HttpOptions) -> HttpServer {
    demo_http_server(options).0
}

fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(HANG)).unwrap();
    BufReader::new(stream)
}

fn send(conn: &mut BufReader<TcpStream>, raw: &[u8]) {
    conn.get_mut().write_all(raw).unwrap();
}

/// A keep-alive POST of `body` (with a session id, if any).
fn post_raw(body: &Value, session: Option<&str>) -> Vec<u8> {
    let body = body.to_string();
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\n"))
        .unwrap_or_default();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n{session}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Whether the server closed the connection (end of file, or a reset).
fn closed(conn: &mut BufReader<TcpStream>) -> bool {
    let mut rest = Vec::new();
    match conn.read_to_end(&mut rest) {
        Ok(_) => rest.is_empty(),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

fn initialize(conn: &mut BufReader<TcpStream>) -> String {
    send(
        conn,
        &post_raw(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}}),
            None,
        ),
    );
    let reply = read_reply(conn);
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.header("Mcp-Session-Id").unwrap().to_string()
}

/// Drops the server on another thread; panics if that takes longer than [`HANG`].
fn drop_within_hang(http: HttpServer) {
    let (done, dropped) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        drop(http);
        let _ = done.send(());
    });
    dropped
        .recv_timeout(HANG)
        .expect("dropping the server hangs");
}

/// A new connection with a 2025-11-25 session initialized on it.
fn open_session(addr: SocketAddr) -> (BufReader<TcpStream>, String) {
    let mut conn = connect(addr);
    let session = initialize(&mut conn);
    (conn, session)
}

fn ping(conn: &mut BufReader<TcpStream>, session: &str) -> Reply {
    send(
        conn,
        &post_raw(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}),
            Some(session),
        ),
    );
    read_reply(conn)
}

#[test]
fn a_request_that_stalls_gets_408_and_the_connection_closes() {
    let http = server(HttpOptions {
        read_timeout: Duration::from_millis(200),
        ..HttpOptions::default()
    });
    // A body that stops short, and a head that never ends: both arrive in part and then
    // nothing more, while the client keeps the connection open.
    for stalled in [
        &b"POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{}"[..],
        b"POST /mcp HTTP/1.1\r\nContent-Type: appl",
        b"POST /mcp HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    ] {
        let mut conn = connect(http.local_addr());
        send(&mut conn, stalled);
        let reply = read_reply(&mut conn);
        assert_eq!(reply.status, 408, "{reply:?}");
        assert_eq!(reply.json()["error"]["code"], -32600);
        assert_eq!(reply.header("Connection"), Some("close"));
        assert!(closed(&mut conn));
    }
    let (mut conn, session) = open_session(http.local_addr());
    assert_eq!(ping(&mut conn, &session).status, 200);
}

#[test]
fn an_idle_connection_closes_but_not_while_an_answer_is_due() {
    let http = server(HttpOptions {
        idle_timeout: Duration::from_millis(100),
        ..HttpOptions::default()
    });
    let mut idle = connect(http.local_addr());
    assert!(closed(&mut idle), "an idle connection stays open");

    // A plain call that takes five idle timeouts: its connection waits for it. (The session
    // is opened on a connection of its own: the call's connection must not idle out between
    // the initialize answer and the call, which on a busy machine can take 100 ms.)
    let (_, session) = open_session(http.local_addr());
    let mut conn = connect(http.local_addr());
    send(
        &mut conn,
        &post_raw(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "sleep", "arguments": {"ms": 500}}}),
            Some(&session),
        ),
    );
    // Three idle timeouts into the call (the client's pace, not a synchronisation: the
    // call's answer is due for at least 200 ms more whatever the machine's speed), the
    // connection still reads: a request sent now is served after the call.
    std::thread::sleep(Duration::from_millis(300));
    send(
        &mut conn,
        &post_raw(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
            Some(&session),
        ),
    );
    let reply = read_reply(&mut conn);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json()["id"], 2, "{reply:?}");
    assert!(reply.json()["result"].is_object(), "{reply:?}");
    let pong = read_reply(&mut conn);
    assert_eq!(
        (pong.status, &pong.json()["id"]),
        (200, &json!(3)),
        "{pong:?}"
    );
    // Then nothing is due, and it idles out.
    assert!(closed(&mut conn));
}

#[test]
fn the_idle_time_counts_from_the_last_answer() {
    // A call longer than most of the idle timeout: the connection's idle time starts when
    // its answer is written, not when the request came, so a request sent a moment after
    // the answer still finds the connection open.
    let http = server(HttpOptions {
        idle_timeout: Duration::from_millis(2000),
        ..HttpOptions::default()
    });
    let (mut conn, session) = open_session(http.local_addr());
    send(&mut conn, &call(2, "sleep", json!({"ms": 1900}), &session));
    assert_eq!(read_reply(&mut conn).status, 200);
    // The client's pace: a moment after the answer, past the idle timeout counted from the
    // request (which a late ping only passes further), and 1.7 s inside the one counted from
    // the answer, slack for a busy machine.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ping(&mut conn, &session).status, 200);
}

#[test]
fn connections_beyond_the_limit_get_503_and_closed_ones_free_their_place() {
    let http = server(HttpOptions {
        max_connections: 2,
        ..HttpOptions::default()
    });
    let addr = http.local_addr();
    // Two connections, each known to be served (an answer came on it).
    let mut first = connect(addr);
    let session = initialize(&mut first);
    let mut second = connect(addr);
    assert_eq!(ping(&mut second, &session).status, 200);

    let mut third = connect(addr);
    let reply = read_reply(&mut third);
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(reply.header("Connection"), Some("close"));
    assert!(closed(&mut third));

    // Once a client leaves, its place is free again; the server notices in its own time,
    // so a few more connections may still be turned away meanwhile.
    drop(second);
    let served = (0..1000).any(|_| {
        let mut conn = connect(addr);
        let reply = ping(&mut conn, &session);
        assert!(matches!(reply.status, 200 | 503), "{reply:?}");
        reply.status == 200
    });
    assert!(served, "a closed connection kept its place");
    assert_eq!(ping(&mut first, &session).status, 200);
}

#[test]
fn a_chunked_body_waits_for_100_continue_and_is_served() {
    let http = server(HttpOptions::default());
    let mut conn = connect(http.local_addr());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}})
    .to_string();
    send(
        &mut conn,
        b"POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
          Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    // The client waits for the interim answer before it sends the body.
    let interim = read_head(&mut conn);
    assert_eq!(interim.status, 100, "{interim:?}");
    let (a, b) = body.split_at(body.len() / 2);
    let chunked = format!(
        "{:x}\r\n{a}\r\n{:X};note=x\r\n{b}\r\n0\r\nTrailer: t\r\n\r\n",
        a.len(),
        b.len()
    );
    send(&mut conn, chunked.as_bytes());
    let reply = read_reply(&mut conn);
    assert_eq!(reply.status, 200, "{reply:?}");
    let session = reply.header("Mcp-Session-Id").unwrap().to_string();
    assert_eq!(ping(&mut conn, &session).status, 200, "keep-alive goes on");
}

#[test]
fn an_http_1_1_request_without_one_valid_host_gets_400_and_the_connection_closes() {
    let http = server(HttpOptions::default());
    let (_conn, session) = open_session(http.local_addr());
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}).to_string();
    for (version, host) in [
        ("HTTP/1.1", ""),
        ("HTTP/1.1", "Host: t\r\nHost: t\r\n"),
        ("HTTP/1.0", "Host: a\r\nhost: b\r\n"),
        ("HTTP/1.1", "Host: evil.example/mcp\r\n"),
        ("HTTP/1.1", "Host: t:x\r\n"),
    ] {
        let raw = format!(
            "POST /mcp {version}\r\n{host}Content-Type: application/json\r\n\
             Mcp-Session-Id: {session}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut conn = connect(http.local_addr());
        // A second request behind it is never read: the connection ends with the refusal.
        send(&mut conn, format!("{raw}{raw}").as_bytes());
        let reply = read_reply(&mut conn);
        assert_eq!(reply.status, 400, "{version} {host:?}: {reply:?}");
        assert_eq!(reply.json()["error"]["code"], -32600);
        assert_eq!(reply.header("Connection"), Some("close"));
        assert!(closed(&mut conn), "{version} {host:?}");
    }
    // The same request with its Host is served.
    let raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: [::1]:3000\r\nContent-Type: application/json\r\n\
         Mcp-Session-Id: {session}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut conn = connect(http.local_addr());
    send(&mut conn, raw.as_bytes());
    let reply = read_reply(&mut conn);
    assert_eq!((reply.status, reply.json()["id"].clone()), (200, json!(3)));
}

#[test]
fn an_http_1_0_request_is_answered_and_its_connection_closed_unless_kept() {
    let http = server(HttpOptions::default());
    let (_conn, session) = open_session(http.local_addr());
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}).to_string();
    let raw = format!(
        "POST /mcp HTTP/1.0\r\nContent-Type: application/json\r\nMcp-Session-Id: {session}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut old = connect(http.local_addr());
    send(&mut old, raw.as_bytes());
    let reply = read_reply(&mut old);
    assert_eq!((reply.status, reply.json()["id"].clone()), (200, json!(3)));
    assert_eq!(reply.header("Connection"), Some("close"));
    assert!(closed(&mut old));

    // One that asks to keep its connection is told it stays open, and it does.
    let kept = raw.replace("HTTP/1.0\r\n", "HTTP/1.0\r\nConnection: keep-alive\r\n");
    let mut old = connect(http.local_addr());
    for _ in 0..2 {
        send(&mut old, kept.as_bytes());
        let reply = read_reply(&mut old);
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.header("Connection"), Some("keep-alive"));
    }
}

/// Whether `value` is an IMF-fixdate (RFC 9110 §5.6.7), `Sun, 06 Nov 1994 08:49:37 GMT`.
fn is_imf_fixdate(value: &str) -> bool {
    let b = value.as_bytes();
    let digits = |range: std::ops::Range<usize>| b[range].iter().all(u8::is_ascii_digit);
    b.len() == 29
        && ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].contains(&&value[..3])
        && &value[3..5] == ", "
        && digits(5..7)
        && [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ]
        .contains(&&value[8..11])
        && digits(12..16)
        && digits(17..19)
        && digits(20..22)
        && digits(23..25)
        && &value[25..] == " GMT"
}

#[test]
fn every_answer_says_when_it_was_made() {
    // RFC 9110 §6.6.1: an origin server with a clock sends `Date` in every 2xx, 3xx and
    // 4xx response: answers, the transport's own refusals and event streams alike.
    let http = server(HttpOptions::default());
    let addr = http.local_addr();
    let (mut conn, session) = open_session(addr);
    let mut replies = vec![ping(&mut conn, &session)];
    send(
        &mut conn,
        b"DELETE /mcp HTTP/1.1\r\nHost: t\r\nMcp-Session-Id: gone\r\n\r\n",
    );
    replies.push(read_reply(&mut conn));
    send(&mut conn, b"GET /mcp HTTP/1.1\r\n\r\n");
    replies.push(read_reply(&mut conn));
    let mut stream = connect(addr);
    send(
        &mut stream,
        format!(
            "GET /mcp HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\r\n"
        )
        .as_bytes(),
    );
    let head = read_head(&mut stream);
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!((statuses, head.status), (vec![200, 404, 400], 200));
    for (status, date) in replies
        .iter()
        .map(|r| (r.status, r.header("Date")))
        .chain([(head.status, head.header("Date"))])
    {
        assert!(date.is_some_and(is_imf_fixdate), "{status}: Date {date:?}");
    }
}

#[test]
fn dropping_the_server_ends_its_connections_and_event_streams() {
    let http = server(HttpOptions::default());
    let addr = http.local_addr();
    let mut conn = connect(addr);
    let session = initialize(&mut conn);
    let mut stream = connect(addr);
    send(
        &mut stream,
        format!(
            "GET /mcp HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\r\n"
        )
        .as_bytes(),
    );
    let head = read_head(&mut stream);
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.header("Transfer-Encoding"), Some("chunked"));
    // A connection in the middle of a request, and one that sent nothing yet.
    let mut partial = connect(addr);
    send(&mut partial, b"POST /mcp HTTP/1.1\r\nContent-Le");
    let mut silent = connect(addr);

    drop_within_hang(http);
    // The stream ends with its last chunk, the others without a word.
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(
        rest.ends_with(b"0\r\n\r\n"),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
    for conn in [&mut conn, &mut partial, &mut silent] {
        assert!(closed(conn));
    }
}

// ----- answers that take time, and clients that do not read ------------------------------

fn call(id: u64, tool: &str, arguments: Value, session: &str) -> Vec<u8> {
    post_raw(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}),
        Some(session),
    )
}

fn tasks_listed(addr: SocketAddr, session: &str) -> usize {
    let mut conn = connect(addr);
    send(
        &mut conn,
        &post_raw(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/list"}),
            Some(session),
        ),
    );
    read_reply(&mut conn).json()["result"]["tasks"]
        .as_array()
        .map_or(0, Vec::len)
}

/// A demo server plus `big`: a tool that waits until the returned sender is dropped, then
/// answers with 3 MiB of text.
fn gated_server(options: HttpOptions) -> (HttpServer, crossbeam_channel::Sender<()>) {
    let (open, gate) = crossbeam_channel::bounded::<()>(0);
    let big = Tool::new(
        "big",
        "Waits for the test, then answers 3 MiB",
        json!({"type": "object"}),
        TaskSupport::Optional,
        move |_, _| {
            let _ = gate.recv();
            Ok(text_result("x".repeat(3 << 20)))
        },
    );
    let mut builder = Server::builder().tool(big);
    for tool in demo::tools() {
        builder = builder.tool(tool);
    }
    let server = builder.build().unwrap();
    (
        HttpServer::bind(server, "127.0.0.1:0", options).unwrap(),
        open,
    )
}

/// A client that pipelines calls to `big` and never reads their answers: as many as the
/// loopback buffers can hold at most (`tcp_rmem` and `tcp_wmem`), and two for each of the
/// server's 16 tool workers besides, so more answers than there are workers stay
/// unwritten. Returns once the server has read them all (the task the call after them
/// creates is listed); dropping the gate then lets the workers produce the answers.
fn never_reads(addr: SocketAddr) -> BufReader<TcpStream> {
    let mut conn = connect(addr);
    let session = initialize(&mut conn);
    let mut raw = Vec::new();
    let buffered: usize = ["tcp_rmem", "tcp_wmem"]
        .iter()
        .map(|name| {
            let limits = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).unwrap();
            limits
                .split_whitespace()
                .last()
                .unwrap()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    for id in 0..(buffered / (3 << 20) + 32) as u64 {
        raw.extend(call(100 + id, "big", json!({}), &session));
    }
    raw.extend(post_raw(
        &json!({"jsonrpc": "2.0", "id": 999, "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
        Some(&session),
    ));
    send(&mut conn, &raw);
    let start = std::time::Instant::now();
    while tasks_listed(addr, &session) == 0 {
        assert!(
            start.elapsed() < HANG,
            "the server never read the last call"
        );
    }
    conn
}

#[test]
fn a_client_that_does_not_read_holds_no_tool_worker() {
    // Answers are written by the connection's writer, never by the tool worker that
    // produced them: with every worker's answer stuck behind a client that does not read,
    // another client's call still gets a worker and its answer.
    let (http, gate) = gated_server(HttpOptions {
        write_timeout: Duration::from_secs(60),
        ..HttpOptions::default()
    });
    let addr = http.local_addr();
    let _stuck = never_reads(addr);
    drop(gate);
    let mut other = connect(addr);
    let session = initialize(&mut other);
    send(
        &mut other,
        &call(1, "greet", json!({"name": "b"}), &session),
    );
    let reply = read_reply(&mut other);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.json()["result"].is_object(), "{reply:?}");
}

#[test]
fn dropping_the_server_does_not_wait_for_a_client_that_does_not_read() {
    let (http, gate) = gated_server(HttpOptions {
        write_timeout: Duration::from_secs(60),
        ..HttpOptions::default()
    });
    let stuck = never_reads(http.local_addr());
    drop(gate);
    // Once the writer is stuck, the client's socket holds all it can: wait for the first
    // answer's bytes to show there, without reading them.
    let mut peek = [0u8; 1];
    stuck.get_ref().peek(&mut peek).unwrap();
    drop_within_hang(http);
}

#[test]
fn an_event_stream_does_not_wait_for_ever_behind_a_long_call() {
    // A GET pipelined behind a call waits for its turn no longer than the read timeout:
    // then it is refused (503), and the connection closes once the answer before it is
    // written. (The call takes forty read timeouts: only a machine stalled that long could
    // let the stream start.)
    let http = server(HttpOptions {
        read_timeout: Duration::from_millis(50),
        ..HttpOptions::default()
    });
    let (mut conn, session) = open_session(http.local_addr());
    let mut raw = call(2, "sleep", json!({"ms": 2000}), &session);
    raw.extend(
        format!(
            "GET /mcp HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\
             Mcp-Session-Id: {session}\r\n\r\n"
        )
        .into_bytes(),
    );
    send(&mut conn, &raw);
    let answered = read_reply(&mut conn);
    assert_eq!(
        (answered.status, answered.json()["id"].clone()),
        (200, json!(2))
    );
    let refused = read_reply(&mut conn);
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("Connection"), Some("close"));
    assert!(closed(&mut conn));
}

/// The data of the next event on an open event stream, or `None` if the stream ended (its
/// last chunk came) first.
fn next_event_or_end(stream: &mut BufReader<TcpStream>) -> Option<Value> {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stream.read_line(&mut line).unwrap() > 0,
            "the connection closed"
        );
        if line == "0\r\n" {
            return None;
        }
        // (A priming event has an id and no data.)
        match line.strip_prefix("data: ").map(str::trim) {
            Some("") | None => {}
            Some(data) => return Some(serde_json::from_str(data).unwrap()),
        }
    }
}

#[test]
fn a_refused_event_stream_leaves_the_sessions_stream_open() {
    // Only a stream that starts replaces the session's current one: a GET refused because
    // it could not wait behind a call on its connection must not end the stream the
    // session has, and leave it none. (The call takes forty read timeouts, as above.)
    let http = server(HttpOptions {
        read_timeout: Duration::from_millis(50),
        ..HttpOptions::default()
    });
    let addr = http.local_addr();
    let (mut conn, session) = open_session(addr);
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {session}\r\n\r\n"
    );
    let mut current = connect(addr);
    send(&mut current, get.as_bytes());
    assert_eq!(read_head(&mut current).status, 200);

    let mut raw = call(2, "sleep", json!({"ms": 2000}), &session);
    raw.extend(get.as_bytes());
    send(&mut conn, &raw);
    assert_eq!(read_reply(&mut conn).status, 200);
    assert_eq!(read_reply(&mut conn).status, 503);

    // The session's stream still carries its messages.
    let mut other = connect(addr);
    send(
        &mut other,
        &post_raw(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
            Some(&session),
        ),
    );
    assert_eq!(read_reply(&mut other).status, 200);
    let event = next_event_or_end(&mut current).expect("the session's stream was ended");
    assert_eq!(event["method"], "notifications/tasks/status");
}

#[test]
fn a_connection_with_an_answer_due_still_counts_against_the_limit() {
    let http = server(HttpOptions {
        max_connections: 1,
        ..HttpOptions::default()
    });
    let addr = http.local_addr();
    let mut conn = connect(addr);
    let session = initialize(&mut conn);
    send(
        &mut conn,
        &call(2, "sleep", json!({"ms": 600_000}), &session),
    );
    // The client sends nothing more, but its socket stays open for the answer: the server
    // sees the end of its requests at once, and must go on counting the connection.
    conn.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
    for attempt in 0..200 {
        let mut other = connect(addr);
        send(&mut other, b"GET /nothing HTTP/1.1\r\nHost: t\r\n\r\n");
        let reply = read_reply(&mut other);
        assert_eq!(reply.status, 503, "attempt {attempt}: {reply:?}");
    }
}

#[test]
fn an_http_1_0_client_gets_no_interim_answer_and_no_chunks() {
    let http = server(HttpOptions::default());
    let addr = http.local_addr();
    let mut conn = connect(addr);
    let session = initialize(&mut conn);
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}).to_string();
    let mut old = connect(addr);
    send(
        &mut old,
        format!(
            "POST /mcp HTTP/1.0\r\nContent-Type: application/json\r\nMcp-Session-Id: {session}\r\n\
             Expect: 100-continue\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    assert_eq!(read_reply(&mut old).status, 200, "no 1xx to HTTP/1.0");

    // Its event stream ends with the connection instead.
    let mut old = connect(addr);
    send(
        &mut old,
        format!(
            "GET /mcp HTTP/1.0\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\r\n"
        )
        .as_bytes(),
    );
    let head = read_head(&mut old);
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.header("Transfer-Encoding"), None, "{head:?}");
    assert_eq!(head.header("Connection"), Some("close"), "{head:?}");
    // Its priming event (an id to resume from) comes as it is, unchunked.
    let mut priming = String::new();
    while !priming.ends_with("\n\n") {
        assert!(old.read_line(&mut priming).unwrap() > 0, "{priming:?}");
    }
    assert_eq!(priming, "id: 0\ndata: \n\n");
    // Ending the session ends the stream, and with it the connection.
    let delete = format!("DELETE /mcp HTTP/1.1\r\nHost: t\r\nMcp-Session-Id: {session}\r\n\r\n");
    send(&mut conn, delete.as_bytes());
    assert_eq!(read_reply(&mut conn).status, 200);
    assert!(closed(&mut old));
}

#[test]
fn a_cancel_pipelined_behind_many_waiting_calls_is_read() {
    // Answers in progress do not count against the bound on answers waiting their turn:
    // a hundred blocking tasks/result calls, then a cancel for the first. The cancel must
    // be read, or the first call (and every one behind it) waits for a ten-minute task.
    let http = server(HttpOptions::default());
    let (mut conn, session) = open_session(http.local_addr());
    send(
        &mut conn,
        &post_raw(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "sleep_required", "arguments": {"ms": 600_000}, "task": {}}}),
            Some(&session),
        ),
    );
    let created = read_reply(&mut conn).json();
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut raw = Vec::new();
    for id in 0..100 {
        raw.extend(post_raw(
            &json!({"jsonrpc": "2.0", "id": 1000 + id, "method": "tasks/result",
                    "params": {"taskId": task}}),
            Some(&session),
        ));
    }
    raw.extend(post_raw(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 1000}}),
        Some(&session),
    ));
    send(&mut conn, &raw);
    let first = read_reply(&mut conn);
    assert_eq!(first.status, 202, "the cancelled call: {first:?}");
}

#[test]
fn a_client_that_reads_steadily_gets_a_large_answer_whole() {
    // The write timeout bounds an answer's time by its size: 8 MiB read at about 6 MB/s
    // takes over a second, far past a 100 ms write timeout, and must still arrive whole.
    let http = server(HttpOptions {
        write_timeout: Duration::from_millis(100),
        max_body_bytes: 16 << 20,
        ..HttpOptions::default()
    });
    let (mut conn, session) = open_session(http.local_addr());
    send(
        &mut conn,
        &call(5, "echo", json!({"text": "x".repeat(8 << 20)}), &session),
    );
    let head = read_head(&mut conn);
    let length: usize = head.header("Content-Length").unwrap().parse().unwrap();
    let mut got = 0;
    let mut buf = vec![0; 64 * 1024];
    while got < length {
        let n = conn
            .read(&mut buf[..(length - got).min(64 * 1024)])
            .unwrap();
        assert!(n > 0, "cut off after {got} of {length} bytes");
        got += n;
        // The client's pace (the workload), not a synchronisation.
        std::thread::sleep(Duration::from_millis(10));
    }
}

extern "C" fn ignore_signal(_: libc::c_int) {}

#[test]
fn a_signal_on_a_waiting_reader_does_not_end_its_connection() {
    // An embedding program may install signal handlers; one that runs on a connection's
    // reader while it waits for the next request interrupts the read (Linux never restarts
    // reads that have a timeout). That is not the client leaving.
    // SAFETY: installs a handler that does nothing, for a signal nothing else here uses.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    let http = server(HttpOptions::default());
    let (mut conn, session) = open_session(http.local_addr());
    // This connection's reader, once it waits in recvfrom on the server's socket for it.
    let socket = server_fd(http.local_addr().port(), conn.get_ref());
    let start = std::time::Instant::now();
    let reader = loop {
        assert!(
            start.elapsed() < HANG,
            "the connection's reader never waits"
        );
        if let Some(reader) = thread_reading(socket) {
            break reader;
        }
    };
    // SAFETY: signals a thread of this process with a signal whose handler is above.
    unsafe {
        libc::syscall(libc::SYS_tgkill, libc::getpid(), reader, libc::SIGUSR1);
    }
    assert_eq!(ping(&mut conn, &session).status, 200);
}

/// The inodes of the TCP sockets with local `port` (a server's listener and its ends of
/// connections) that the kernel lists now.
fn sockets_on(port: u16) -> HashSet<String> {
    let local = format!(":{port:04X}");
    let table = std::fs::read_to_string("/proc/self/net/tcp").unwrap();
    table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() > 9 && fields[1].ends_with(&local) && fields[9] != "0")
                .then(|| format!("socket:[{}]", fields[9]))
        })
        .collect()
}

/// Which of `sockets` this process still holds a descriptor of.
fn still_open(sockets: &HashSet<String>) -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| target.to_str().map(str::to_owned))
        .filter(|target| sockets.contains(target))
        .collect()
}

#[test]
fn no_socket_outlives_its_connection() {
    // Every way a connection ends leaves no descriptor behind: a request that asks to
    // close, a refusal, a client that leaves, and one still open when the server is
    // dropped. (A socket closed on both ends may leave the kernel's table while a leaked
    // descriptor still holds it: so its inode is noted while it is open.)
    let http = server(HttpOptions::default());
    let addr = http.local_addr();
    let port = addr.port();
    let mut seen = sockets_on(port);
    let (mut kept, session) = open_session(addr);
    for _ in 0..10 {
        let mut conn = connect(addr);
        send(
            &mut conn,
            b"GET /nothing HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        );
        let mut refused = connect(addr);
        send(&mut refused, b"GET /mcp HTTP/2.0\r\n\r\n");
        let (left, _) = open_session(addr);
        seen.extend(sockets_on(port));
        assert_eq!(read_reply(&mut conn).status, 404);
        assert!(closed(&mut conn));
        assert_eq!(read_reply(&mut refused).status, 505);
        assert!(closed(&mut refused));
        drop(left);
    }
    assert_eq!(ping(&mut kept, &session).status, 200);
    assert!(seen.len() > 30, "{seen:?}");
    drop_within_hang(http);
    assert!(closed(&mut kept));
    let open = still_open(&seen);
    assert!(
        open.is_empty(),
        "sockets left open after the server was dropped: {open:?}"
    );
}

/// The file descriptor of the server's end of `client`'s connection to `port`, found
/// through the socket's inode (`/proc/self/net/tcp`, `/proc/self/fd`).
fn server_fd(port: u16, client: &TcpStream) -> i64 {
    let peer = format!(":{:04X}", client.local_addr().unwrap().port());
    let local = format!(":{port:04X}");
    let table = std::fs::read_to_string("/proc/self/net/tcp").unwrap();
    let inode = table
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() > 9 && fields[1].ends_with(&local) && fields[2].ends_with(&peer))
                .then(|| fields[9].to_string())
        })
        .expect("the server's end of the connection");
    let link = format!("socket:[{inode}]");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .find_map(|fd| {
            let fd = fd.ok()?;
            let target = std::fs::read_link(fd.path()).ok()?;
            (target.to_str()? == link).then(|| fd.file_name().to_str()?.parse().ok())?
        })
        .expect("a descriptor for the server's socket")
}

/// The thread waiting in `recvfrom` on `fd`, if one is.
fn thread_reading(fd: i64) -> Option<i32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .find_map(|task| {
            let path = task.ok()?.path();
            let syscall = std::fs::read_to_string(path.join("syscall")).ok()?;
            let mut fields = syscall.split(' ');
            let number: i64 = fields.next()?.parse().ok()?;
            let first = i64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
            (number == libc::SYS_recvfrom && first == fd)
                .then(|| path.file_name()?.to_str()?.parse().ok())
                .flatten()
        })
}

// ----- `Expect: 100-continue` behind answers still due --------------------------------

/// A POST of `body` with `Expect: 100-continue`, its body sent at once without waiting for
/// the interim answer (RFC 9110 §10.1.1 lets a client do so).
fn post_expecting(body: &Value, session: &str) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Mcp-Session-Id: {session}\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn a_cancel_pipelined_without_expect_is_read_at_once() {
    // Control for the next test: the same cancel, without `Expect`.
    let http = server(HttpOptions {
        read_timeout: Duration::from_secs(20),
        ..HttpOptions::default()
    });
    let (mut conn, session) = open_session(http.local_addr());
    let mut raw = call(2, "sleep", json!({"ms": 600_000}), &session);
    raw.extend(post_raw(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 2}}),
        Some(&session),
    ));
    send(&mut conn, &raw);
    assert_eq!(read_reply(&mut conn).status, 202, "the cancelled call");
    assert_eq!(read_reply(&mut conn).status, 202, "the cancel");
}

#[test]
fn a_cancel_pipelined_with_expect_is_read_at_once() {
    // The cancel's body is already on the socket: it is read at once, although its
    // `100 Continue` waits behind the call it cancels. (A reader that waited for the
    // interim would hold the cancel for the read timeout, far past the hang bound.)
    let http = server(HttpOptions {
        read_timeout: Duration::from_secs(600),
        ..HttpOptions::default()
    });
    let (mut conn, session) = open_session(http.local_addr());
    let mut raw = call(2, "sleep", json!({"ms": 600_000}), &session);
    raw.extend(post_expecting(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 2}}),
        &session,
    ));
    send(&mut conn, &raw);
    let first = read_reply(&mut conn);
    assert_eq!(first.status, 202, "the cancelled call: {first:?}");
}

fn set_buffer(stream: &TcpStream, option: libc::c_int, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: sets an int socket option on a socket this test owns.
    let set = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
}

fn sysctl_max(name: &str) -> usize {
    let limits = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).unwrap();
    limits.split_whitespace().last().unwrap().parse().unwrap()
}

#[test]
fn a_client_that_sends_then_reads_is_not_stalled_by_its_expect() {
    // A plain synchronous client: it writes two pipelined requests, then reads. The first
    // gets a large answer, the second (`Expect: 100-continue`, body sent at once) is large.
    // The writer waits for the client to read the first answer while the client sends the
    // second body: the reader must read it without waiting for the second one's
    // `100 Continue` (which waits for the writer), or nothing moves until the read timeout,
    // far past the hang bound of the client's writes.
    let http = server(HttpOptions {
        read_timeout: Duration::from_secs(600),
        max_body_bytes: 128 << 20,
        ..HttpOptions::default()
    });
    let (mut conn, session) = open_session(http.local_addr());
    set_buffer(conn.get_ref(), libc::SO_RCVBUF, 64 * 1024);
    set_buffer(conn.get_ref(), libc::SO_SNDBUF, 64 * 1024);
    conn.get_ref().set_write_timeout(Some(HANG)).unwrap();
    // Past what the server may buffer on send (and the client on receive), and on receive.
    let answer = sysctl_max("tcp_wmem") + (2 << 20);
    let body = sysctl_max("tcp_rmem") + (2 << 20);
    let mut raw = call(2, "echo", json!({"text": "x".repeat(answer)}), &session);
    raw.extend(
        format!(
            "POST /nothing HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n\
             Content-Length: {body}\r\n\r\n"
        )
        .into_bytes(),
    );
    raw.resize(raw.len() + body, b'x');
    conn.get_mut()
        .write_all(&raw)
        .unwrap_or_else(|e| panic!("the server stopped reading the body: {e}"));
    let echoed = read_reply(&mut conn);
    assert_eq!(echoed.status, 200);
    assert_eq!(read_head(&mut conn).status, 100);
    assert_eq!(read_reply(&mut conn).status, 404);
}

#[test]
fn a_client_that_waits_for_100_continue_behind_a_slow_answer_is_not_timed_out() {
    // The interim answer waits for the answers before it (here a call that takes one and a
    // half read timeouts); a client that waits for it before sending its body has a read
    // timeout from when it goes out. (A whole second: the client reads the call's answer
    // and the interim one before it sends the body, which a busy machine may take a while
    // to get to.)
    let http = server(HttpOptions {
        read_timeout: Duration::from_millis(1000),
        ..HttpOptions::default()
    });
    let (mut conn, session) = open_session(http.local_addr());
    let raw = post_expecting(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
        &session,
    );
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut first = call(2, "sleep", json!({"ms": 1500}), &session);
    first.extend_from_slice(&raw[..head_end]);
    send(&mut conn, &first);
    assert_eq!(read_reply(&mut conn).status, 200, "the call");
    assert_eq!(read_head(&mut conn).status, 100);
    send(&mut conn, &raw[head_end..]);
    let reply = read_reply(&mut conn);
    assert_eq!((reply.status, reply.json()["id"].clone()), (200, json!(3)));
}
