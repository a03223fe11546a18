//! Bad input through the stdio transport: every malformed line gets the right JSON-RPC
//! error, nothing panics or hangs, and a good request afterwards still works.

use std::io::{Cursor, Write};
use std::time::{Duration, Instant};

use mcp_task_store::server::{demo, Server};
use serde_json::{json, Value};

use crate::fixtures::Captured;

fn server() -> Server {
    let mut builder = Server::builder();
    for tool in demo::tools() {
        builder = builder.tool(tool);
    }
    builder.build().unwrap()
}

/// Runs `input` through a server and waits (bounded) until `expected` responses are out.
fn exchange(input: Vec<u8>, expected: usize) -> Vec<Value> {
    exchange_with(server(), input, expected)
}

/// [`exchange`] through `server`.
fn exchange_with(server: Server, input: Vec<u8>, expected: usize) -> Vec<Value> {
    let out = Captured::default();
    server.serve_lines(Cursor::new(input), out.clone()).unwrap();
    let started = Instant::now();
    loop {
        let responses: Vec<Value> = out
            .messages()
            .into_iter()
            .filter(|m| m.get("method").is_none())
            .collect();
        if responses.len() >= expected {
            return responses;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "only {} of {expected}: {responses:?}",
            responses.len()
        );
        std::thread::yield_now();
    }
}

#[test]
fn every_bad_line_gets_its_error_and_the_server_keeps_serving() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":50,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(10 * 1024 * 1024)
    );
    // (line, id the error answers, expected code); id None = the response's id is null.
    let corpus: Vec<(String, Option<Value>, i64)> = vec![
        ("not json".into(), None, -32700),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":".into(), None, -32700),
        (deep, None, -32700),
        (r#"[{"jsonrpc":"2.0","id":2,"method":"ping"}]"#.into(), None, -32600),
        (r#""just a string""#.into(), None, -32600),
        (r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#.into(), Some(json!(3)), -32600),
        (r#"{"id":4,"method":"ping"}"#.into(), Some(json!(4)), -32600),
        (r#"{"jsonrpc":"2.0","id":5,"method":5}"#.into(), Some(json!(5)), -32600),
        (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#.into(), None, -32600),
        (r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#.into(), None, -32600),
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#.into(), None, -32600),
        (r#"{"jsonrpc":"2.0","id":6}"#.into(), Some(json!(6)), -32600),
        (r#"{"jsonrpc":"2.0"}"#.into(), None, -32600),
        (r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":"str"}"#.into(), Some(json!(7)), -32602),
        (r#"{"jsonrpc":"2.0","id":8,"method":"tasks/get","params":[1,2]}"#.into(), Some(json!(8)), -32602),
        (r#"{"jsonrpc":"2.0","id":9,"method":"tasks/get","params":{"taskId":5}}"#.into(), Some(json!(9)), -32602),
        (r#"{"jsonrpc":"2.0","id":10,"method":"tasks/get","params":{}}"#.into(), Some(json!(10)), -32602),
        (r#"{"jsonrpc":"2.0","id":11,"method":"tasks/get","params":{"taskId":"../../etc/passwd"}}"#.into(), Some(json!(11)), -32602),
        (r#"{"jsonrpc":"2.0","id":12,"method":"tasks/list","params":{"cursor":"AAAA"}}"#.into(), Some(json!(12)), -32602),
        (r#"{"jsonrpc":"2.0","id":"s","method":"tasks/cancel","params":{"taskId":null}}"#.into(), Some(json!("s")), -32602),
        (r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":1e300}}}"#.into(), Some(json!(13)), -32602),
        (r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":-1}}}"#.into(), Some(json!(14)), -32602),
        (r#"{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":1},"task":{"ttl":"soon"}}}"#.into(), Some(json!(15)), -32602),
        (r#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":7}}"#.into(), Some(json!(16)), -32602),
        (r#"{"jsonrpc":"2.0","id":17,"method":"no/such/method"}"#.into(), Some(json!(17)), -32601),
        (huge, None, -32600),
        // A notification is never answered, but one with scalar params is no JSON-RPC.
        (r#"{"jsonrpc":"2.0","method":"notifications/x","params":"s"}"#.into(), None, -32600),
    ];
    let mut input = Vec::new();
    for (line, _, _) in &corpus {
        input.extend_from_slice(line.as_bytes());
        input.push(b'\n');
    }
    // Lines that get no response at all: notifications (even with params MCP would not
    // send), a stray response, blank lines.
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\"}\n");
    input.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":[1]}\n",
    );
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":77,\"result\":{}}\n\n   \n");
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":78,\"result\":{},\"params\":1}\n");
    input.extend_from_slice(b"\xff\xfe not utf-8\n");
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\"}\n");
    let responses = exchange(input, corpus.len() + 2);

    let good = responses
        .iter()
        .find(|r| r["id"] == 99)
        .expect("the good request is answered");
    assert_eq!(good["result"], json!({}));
    assert!(
        responses.iter().all(|r| r["id"] != 77 && r["id"] != 78),
        "a stray response gets no answer, even with params"
    );
    let mut null_id_codes: Vec<i64> = responses
        .iter()
        .filter(|r| r["id"].is_null())
        .map(|r| r["error"]["code"].as_i64().unwrap())
        .collect();
    let mut expected_null: Vec<i64> = corpus
        .iter()
        .filter(|(_, id, _)| id.is_none())
        .map(|(_, _, c)| *c)
        .collect();
    expected_null.push(-32700); // the invalid UTF-8 line
    null_id_codes.sort();
    expected_null.sort();
    assert_eq!(null_id_codes, expected_null);
    for (line, id, code) in corpus.iter().filter(|(_, id, _)| id.is_some()) {
        let response = responses
            .iter()
            .find(|r| Some(&r["id"]) == id.as_ref())
            .unwrap_or_else(|| panic!("no answer to {line}"));
        assert_eq!(response["error"]["code"], *code, "{line} -> {response}");
        assert!(response["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
}

#[test]
fn a_task_round_trip_over_lines() {
    let input = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tasks/list"}"#,
    ]
    .join("\n");
    let responses = exchange(input.into_bytes(), 3);
    let by_id = |id: i64| responses.iter().find(|r| r["id"] == id).unwrap().clone();
    assert_eq!(by_id(1)["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(by_id(2)["result"]["content"][0]["text"], "hello");
    assert_eq!(by_id(3)["result"], json!({"tasks": []}));
}

#[test]
fn bad_command_lines_are_refused_with_a_message_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--bogus"], "unknown argument '--bogus'"),
        (
            &["--page-size", "ten"],
            "--page-size: 'ten' is not a whole number",
        ),
        (
            &["--default-ttl", "soon"],
            "--default-ttl: 'soon' is not a duration",
        ),
        (&["--expiry", "later"], "--expiry: 'later' is neither"),
        (
            &["--expiry", "remove", "--expiry-grace", "5s"],
            "--expiry-grace has no effect with --expiry remove",
        ),
        (
            &["--log", "loud"],
            "--log: use off, error, warn, info, debug or trace",
        ),
        (&["--http", "0.0.0.0:3000"], "add --allow-remote"),
        // The store's own checks are reported under the flag, not the config field.
        (&["--page-size", "0"], "--page-size: must be between 1 and"),
        (
            &["--poll-interval", "0s"],
            "--poll-interval: must be at least 1 ms",
        ),
        (&["--max-tasks", "0"], "--max-tasks: must be at least 1"),
        (
            &["--default-ttl", "2h", "--max-ttl", "1h"],
            "--default-ttl 2h is longer than --max-ttl 1h",
        ),
        (&["--workers", "0"], "--workers: must be between 1 and"),
        // Not a panic from a thread that cannot be spawned.
        (
            &["--workers", "100000000"],
            "--workers: must be between 1 and",
        ),
        (&["--max-ttl", "0s"], "--max-ttl: '0s' is shorter than 1 ms"),
        // A switch with a value is not the bare switch: `=no` must not turn it on.
        (&["--allow-remote=no"], "--allow-remote takes no value"),
        (&["--demo=false"], "--demo takes no value"),
        // A flag that would change nothing is refused, not ignored.
        (
            &["--durability", "flush"],
            "--durability has no effect without --data-dir",
        ),
        (
            &["--allow-remote"],
            "--allow-remote has no effect without --http",
        ),
        // The demo drives its server over stdio: with --http it would wait for ever.
        (
            &["--demo", "--http", "127.0.0.1:0"],
            "--demo talks to its server over stdio",
        ),
        (&["--data-dir="], "--data-dir needs a value"),
        // HTTP settings need --http, and take only what the transport can use.
        (
            &["--allow-origin", "http://localhost:6274"],
            "--allow-origin has no effect without --http",
        ),
        (
            &["--max-sessions", "5"],
            "--max-sessions has no effect without --http",
        ),
        (
            &[
                "--http",
                "127.0.0.1:0",
                "--allow-origin",
                "http://localhost:6274/",
            ],
            "is not an origin such as",
        ),
        (
            &["--http", "127.0.0.1:0", "--allow-origin", "*"],
            "is not an origin such as",
        ),
        (
            &["--http", "127.0.0.1:0", "--max-connections", "0"],
            // Left out, the transport's limit is its default, not "no limit".
            "--max-connections: must be at least 1 (leave it out for the default)",
        ),
        (
            &["--http", "127.0.0.1:0", "--max-body-bytes", "0"],
            "--max-body-bytes: must be at least 1 (leave it out for the default)",
        ),
        (
            &["--http", "127.0.0.1:0", "--session-idle-timeout", "0s"],
            "--session-idle-timeout: must be longer than 0",
        ),
        (
            &["--http", "127.0.0.1:0", "--max-body-bytes", "lots"],
            "--max-body-bytes: 'lots' is not a whole number",
        ),
        (
            &["--identity-header", "X-Forwarded-User"],
            "--identity-header has no effect without --http",
        ),
        (
            &["--http", "127.0.0.1:0", "--max-sessions-per-identity", "4"],
            "--max-sessions-per-identity has no effect without --identity-header",
        ),
        (
            &[
                "--http",
                "127.0.0.1:0",
                "--identity-header",
                "X-User",
                "--max-sessions-per-identity",
                "0",
            ],
            "--max-sessions-per-identity: must be at least 1",
        ),
        (
            &["--http", "127.0.0.1:0", "--identity-header", "X-User:"],
            "--identity-header: 'X-User:' is not a header name",
        ),
        (
            &["--http", "127.0.0.1:0", "--identity-challenge", "Bearer"],
            "--identity-challenge has no effect without --identity-header",
        ),
        (
            &["--identity-challenge", "Bearer"],
            "--identity-challenge has no effect without --http",
        ),
        (
            &[
                "--http",
                "127.0.0.1:0",
                "--identity-header",
                "X-User",
                "--identity-challenge",
                "Bearer\nX-Injected: 1",
            ],
            "--identity-challenge: 'Bearer\\nX-Injected: 1' is not a challenge",
        ),
    ];
    for (args, expected) in cases {
        let output = run_with_timeout(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: stdout stays protocol only"
        );
    }
}

/// The README's first command: the demo plays a whole conversation with a server of its
/// own and ends. Its server logs only warnings unless a --log says otherwise.
#[test]
fn the_demo_runs_to_the_end_and_honours_log() {
    let output = run_with_timeout(&["--demo", "--log", "info"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for step in ["# 1. Handshake", "# 5. tasks/result", "# 7. Every task"] {
        assert!(stdout.contains(step), "{step}: {stdout}");
    }
    assert!(stdout.contains(r#""text":"slept 1500 ms""#), "{stdout}");
    assert!(
        stderr.contains("mcp-task-server: serving MCP tasks"),
        "--log info reaches the server: {stderr}"
    );
}

/// The binary's HTTP flags reach the transport: an origin given with `--allow-origin` gets
/// CORS (a browser page such as the MCP Inspector's can use the server), a body over
/// `--max-body-bytes` is refused, and with `--identity-header` a request without that
/// header gets 401 (with `--identity-challenge`'s challenge) while one with it is served.
#[test]
fn the_binarys_http_flags_reach_the_transport() {
    use std::io::{BufRead, BufReader, Read};
    const CHALLENGE: &str = r#"Bearer resource_metadata="https://mcp.example/.well-known/x""#;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-task-server"))
        .args(["--http", "127.0.0.1:0", "--log", "info"])
        .args([
            "--allow-origin",
            "http://localhost:6274",
            "--max-body-bytes",
            "200",
            "--identity-header",
            "X-Forwarded-User",
            "--identity-challenge",
            CHALLENGE,
            "--max-sessions-per-identity",
            "1",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    // The address the kernel picked, from the log line saying where the server listens.
    let (found, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("serving MCP tasks at http://").nth(1) {
                let _ = found.send(rest.trim_end_matches("/mcp").to_string());
            }
        }
    });
    let address = address.recv_timeout(Duration::from_secs(10));
    let ask = |request: String| {
        let mut socket = std::net::TcpStream::connect(address.as_ref().unwrap()).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        socket.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = socket.read_to_string(&mut answer);
        answer
    };
    let preflight = ask(
        "OPTIONS /mcp HTTP/1.1\r\nHost: x\r\nOrigin: http://localhost:6274\r\n\
         Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n"
            .to_string(),
    );
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(200)
    );
    let post = |identity: &str, body: &str| {
        ask(format!(
            "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             {identity}Connection: close\r\n\r\n{body}",
            body.len()
        ))
    };
    let user = "X-Forwarded-User: alice\r\n";
    let too_big = post(user, &body);
    let initialize = r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let anonymous = post("", initialize);
    let identified = post(user, initialize);
    // Alice's one session, busy with a task, leaves no room for another of hers.
    let session = (identified.to_ascii_lowercase().lines())
        .find_map(|line| line.strip_prefix("mcp-session-id: ").map(str::to_owned))
        .unwrap_or_default();
    let in_session =
        format!("{user}Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n");
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":600000},"task":{}}}"#;
    let task = post(&in_session, call);
    let second = post(user, initialize);
    let _ = child.kill();
    let _ = child.wait();
    assert!(address.is_ok(), "the server never said where it listens");
    let preflight = preflight.to_ascii_lowercase();
    assert!(
        preflight.contains("access-control-allow-origin: http://localhost:6274"),
        "{preflight}"
    );
    assert!(too_big.starts_with("HTTP/1.1 413"), "{too_big}");
    assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
    assert!(
        anonymous.contains("the X-Forwarded-User header is required"),
        "{anonymous}"
    );
    assert!(
        anonymous.contains(&format!("WWW-Authenticate: {CHALLENGE}\r\n")),
        "{anonymous}"
    );
    assert!(identified.starts_with("HTTP/1.1 200"), "{identified}");
    assert!(task.contains(r#""status":"working""#), "{task}");
    assert!(second.starts_with("HTTP/1.1 503"), "{second}");
}

/// Runs the binary with `args` and no input, killing it if it runs past 10 s (a command line
/// it should have refused).
fn run_with_timeout(args: &[&str]) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-task-server"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Runs the binary with `args`, feeds it `requests` (one per line) and returns every
/// message it printed before it exited at the end of its input.
fn run_binary(args: &[&str], requests: &[Value]) -> Vec<Value> {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-task-server"))
        .args(args)
        .args(["--log", "off"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for request in requests {
        writeln!(stdin, "{request}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn the_binary_gives_tasks_a_finite_ttl_unless_told_otherwise() {
    let call = |ttl: Value| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "sleep", "arguments": {"ms": 0}, "task": ttl}})
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    let created_ttl = |args: &[&str], task: Value| {
        let messages = run_binary(args, &[initialize.clone(), call(task)]);
        let answer = messages.iter().find(|m| m["id"] == 2).expect("an answer");
        answer["result"]["task"]["ttl"].clone()
    };
    // One hour when none is asked for, at most a day when one is.
    assert_eq!(created_ttl(&[], json!({})), json!(3_600_000));
    assert_eq!(
        created_ttl(&[], json!({"ttl": 172_800_000})),
        json!(86_400_000)
    );
    assert_eq!(created_ttl(&[], json!({"ttl": 60_000})), json!(60_000));
    // Given one, the other gives way: a lower cap lowers the default, a longer default
    // raises the cap; `none` as the default means the cap.
    assert_eq!(
        created_ttl(&["--max-ttl", "30m"], json!({})),
        json!(1_800_000)
    );
    assert_eq!(
        created_ttl(&["--default-ttl", "48h"], json!({})),
        json!(172_800_000)
    );
    assert_eq!(
        created_ttl(&["--default-ttl", "none"], json!({})),
        json!(86_400_000)
    );
    // `none` for both keeps tasks that ask for no TTL for good.
    let unlimited = ["--default-ttl", "none", "--max-ttl", "none"];
    assert_eq!(created_ttl(&unlimited, json!({})), Value::Null);
    assert_eq!(
        created_ttl(&unlimited, json!({"ttl": 172_800_000})),
        json!(172_800_000)
    );
}

#[test]
fn a_call_its_client_cancels_writes_no_response() {
    // One worker: the echo runs only once the cancelled sleep has given it back, so by
    // the echo's answer the sleep's (none, now) has been decided.
    let mut builder = Server::builder().workers(1);
    for tool in demo::tools() {
        builder = builder.tool(tool);
    }
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "sleep", "arguments": {"ms": 600_000}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": 2}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "echo", "arguments": {"text": "after"}}}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let responses = exchange_with(builder.build().unwrap(), input.into_bytes(), 2);
    let ids: Vec<&Value> = responses.iter().map(|r| &r["id"]).collect();
    assert_eq!(ids, [&json!(1), &json!(3)], "{responses:?}");
}

/// JSON-RPC 2.0 §5: an error response whose request id could not be read carries
/// `"id": null`; it is still a response, and is never answered (two peers that both
/// answered such messages would trade errors for ever).
#[test]
fn a_response_without_a_usable_id_is_not_answered() {
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid request"}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":1.5,"error":{"code":-32600,"message":"x"}}"#,
        "\n",
        r#"{"id":null,"error":{"code":-32600,"message":"no jsonrpc"}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":5,"result":{},"error":{"code":1,"message":"both"}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":99,"method":"ping"}"#,
        "\n",
    );
    // Every line here is answered (or not) by the reader itself, and `serve_lines`
    // returns once what it queued is written: no answer can come later.
    let responses = exchange(input.as_bytes().to_vec(), 1);
    assert_eq!(
        responses,
        vec![json!({"jsonrpc": "2.0", "id": 99, "result": {}})],
        "only the ping is answered"
    );
}

/// A tool's preflight that panics (on arguments a client chose) fails its call, as a
/// panicking tool does, and the server goes on reading: it must not take the stdio
/// transport (and the process serving it) down with it.
#[test]
fn a_panicking_preflight_fails_its_call_and_the_server_keeps_serving() {
    use mcp_task_store::server::{text_result, Preflight, TaskSupport, Tool};
    let tool = Tool::new(
        "fragile",
        "panics in its preflight when told to",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |_, _| Ok(text_result("ran")),
    )
    .with_preflight(|args, _| {
        assert!(args.get("boom").is_none(), "the preflight broke");
        Preflight::Proceed
    });
    let server = Server::builder().tool(tool).build().unwrap();
    let meta = crate::http::meta_2026(true);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "fragile", "arguments": {"boom": true}, "_meta": meta}});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let input = format!("{call}\n{ping}\n").into_bytes();
    let out = Captured::default();
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        server.serve_lines(Cursor::new(input), out.clone())
    }));
    assert!(
        matches!(served, Ok(Ok(()))),
        "serving ended with a panic or an error"
    );
    let started = Instant::now();
    let responses = loop {
        let responses = out.messages();
        if responses.len() >= 2 || started.elapsed() > Duration::from_secs(10) {
            break responses;
        }
        std::thread::yield_now();
    };
    let by_id = |id: i64| responses.iter().find(|m| m["id"] == id);
    assert_eq!(
        by_id(1).map(|m| m["error"]["code"].clone()),
        Some(json!(-32603)),
        "{responses:?}"
    );
    // Said as it is, not as a busy server.
    let message = by_id(1).map(|m| m["error"]["message"].to_string());
    assert!(
        message.is_some_and(|m| m.contains("preflight of tool 'fragile' panicked")),
        "{responses:?}"
    );
    assert_eq!(
        by_id(2).map(|m| m["result"].clone()),
        Some(json!({})),
        "{responses:?}"
    );
}
