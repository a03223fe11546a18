//! The client against scripted servers that misbehave: silent, slow, with absurd poll
//! intervals, a protocol version without tasks. Each server is a thread on one end of a
//! socket pair that answers by method and records what it was asked.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_task_store::client::{Client, ClientBuilder, ClientError, Revision};
use serde_json::{json, Value};

/// What a scripted server does with one request.
enum Act {
    Answer(Value),
    /// Says nothing, ever.
    Ignore,
    /// Sends these messages first (server requests, say), then the answer.
    SendThenAnswer(Vec<Value>, Value),
    /// Answers with a JSON-RPC error of this code.
    Fail(i64),
    /// Sends these messages as they are, except that an `"id": "$id"` becomes the
    /// request's id (a malformed answer, say), and nothing else.
    Raw(Vec<Value>),
}

/// The methods of every request, and `response <id> <message>` for every response, the
/// server got, in order.
type Log = Arc<Mutex<Vec<String>>>;

fn scripted(act: impl FnMut(&str, &Value) -> Act + Send + 'static) -> (UnixStream, Log) {
    scripted_into(Log::default(), act)
}

/// [`scripted`], recording into `log` (which `act` may read too).
fn scripted_into(
    log: Log,
    mut act: impl FnMut(&str, &Value) -> Act + Send + 'static,
) -> (UnixStream, Log) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let seen = log.clone();
    std::thread::spawn(move || {
        let mut out = theirs.try_clone().unwrap();
        for line in BufReader::new(theirs).lines() {
            let Ok(line) = line else { return };
            let message: Value = serde_json::from_str(&line).unwrap();
            let Some(method) = message["method"].as_str() else {
                seen.lock()
                    .unwrap()
                    .push(format!("response {} {message}", message["id"]));
                continue;
            };
            seen.lock().unwrap().push(method.to_owned());
            let Some(id) = message.get("id") else {
                continue;
            };
            let (before, outcome) = match act(method, &message["params"]) {
                Act::Ignore => continue,
                Act::Raw(messages) => {
                    for mut raw in messages {
                        if raw["id"] == "$id" {
                            raw["id"] = id.clone();
                        }
                        writeln!(out, "{raw}").unwrap();
                    }
                    continue;
                }
                Act::Answer(result) => (Vec::new(), json!({ "result": result })),
                Act::SendThenAnswer(before, result) => (before, json!({ "result": result })),
                Act::Fail(code) => (
                    Vec::new(),
                    json!({"error": {"code": code, "message": format!("scripted {code}")}}),
                ),
            };
            for message in before {
                writeln!(out, "{message}").unwrap();
            }
            let mut reply = json!({"jsonrpc": "2.0", "id": id});
            reply
                .as_object_mut()
                .unwrap()
                .extend(outcome.as_object().unwrap().clone());
            if writeln!(out, "{reply}").is_err() {
                return;
            }
        }
    });
    (ours, log)
}

/// The deadline of a call the server never finishes: it must not pass before the task is
/// created (the handshake's tools/list and the tools/call answered), which on a busy
/// machine can take a good part of a second.
const DEADLINE: Duration = Duration::from_secs(1);

/// Runs `f` on a thread of its own and returns what it returned; fails the test if it has
/// not returned within `limit` (a hang becomes a failure instead of a stuck test run).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done_tx, done) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = done_tx.send(f());
    });
    done.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("still running after {limit:?}"))
}

fn connect(builder: ClientBuilder, stream: UnixStream) -> Result<Client, ClientError> {
    builder.connect_streams(stream.try_clone().unwrap(), stream)
}

/// Connects `builder` over `stream` and calls the tool `work`, failing the test if that
/// takes over 10 s.
fn call_work(builder: ClientBuilder, stream: UnixStream) -> Result<Value, ClientError> {
    let client = connect(builder, stream).unwrap();
    within(Duration::from_secs(10), move || {
        client.call_tool("work", json!({}))
    })
}

fn initialized(version: &str) -> Act {
    Act::Answer(json!({
        "protocolVersion": version,
        "capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}},
        "serverInfo": {"name": "scripted", "version": "0"}
    }))
}

fn discovered() -> Act {
    Act::Answer(json!({
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "serverInfo": {"name": "scripted", "version": "0"}
    }))
}

fn tool_list(support: &str) -> Act {
    Act::Answer(json!({"tools": [
        {"name": "work", "inputSchema": {"type": "object"}, "execution": {"taskSupport": support}}
    ]}))
}

fn task(status: &str) -> Value {
    json!({"taskId": "t1", "status": status, "createdAt": "2026-01-01T00:00:00Z",
           "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": null, "pollInterval": 20})
}

fn methods(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

#[test]
fn the_deadline_bounds_a_poll_the_server_never_answers_on_both_revisions() {
    for revision in [Revision::V2025, Revision::Sep2663] {
        let (stream, log) = scripted(move |method, _| match method {
            "initialize" => initialized("2025-11-25"),
            "server/discover" => discovered(),
            "tools/list" => tool_list("optional"),
            "tools/call" if revision == Revision::V2025 => {
                Act::Answer(json!({"task": task("working")}))
            }
            "tools/call" => Act::Answer(
                json!({"resultType": "task", "taskId": "t1", "status": "working", "pollIntervalMs": 20}),
            ),
            "tasks/cancel" => Act::Answer(task("cancelled")),
            _ => Act::Ignore, // tasks/get, tasks/result
        });
        let builder = Client::builder().revision(revision).deadline(DEADLINE);
        let client = connect(builder, stream).unwrap();
        let error = within(Duration::from_secs(10), move || {
            client.call_tool("work", json!({})).unwrap_err()
        });
        assert!(
            matches!(&error, ClientError::Deadline { task_id: Some(id), .. } if id == "t1"),
            "{revision:?}: {error}"
        );
        assert!(
            methods(&log).contains(&"tasks/cancel".to_owned()),
            "{revision:?}: the abandoned task was not cancelled: {:?}",
            methods(&log)
        );
    }
}

#[test]
fn the_deadline_bounds_the_tools_list_a_call_starts_with() {
    let (stream, _) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        _ => Act::Ignore,
    });
    let client = connect(Client::builder(), stream).unwrap();
    let options = mcp_task_store::client::CallOptions::new().deadline(Duration::from_millis(200));
    let error = client
        .call_tool_with("work", json!({}), options)
        .unwrap_err();
    assert!(
        matches!(error, ClientError::Deadline { task_id: None, .. }),
        "{error}"
    );
}

#[test]
fn a_server_that_never_answers_the_handshake_times_out() {
    for revision in [Revision::V2025, Revision::Sep2663] {
        let (stream, _) = scripted(|_, _| Act::Ignore);
        let builder = Client::builder()
            .revision(revision)
            .request_timeout(Duration::from_millis(200));
        let error = connect(builder, stream).unwrap_err();
        assert!(
            matches!(&error, ClientError::Timeout { method, after }
                if method == ["initialize", "server/discover"][(revision == Revision::Sep2663) as usize]
                    && *after == Duration::from_millis(200)),
            "{revision:?}: {error}"
        );
        assert!(error.is_transport());
    }
}

#[test]
fn a_request_that_times_out_is_forgotten_and_the_connection_goes_on() {
    let slow = Arc::new(Mutex::new(true));
    let first = slow.clone();
    let (stream, _) = scripted(move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        // The first ping is answered only after the next request arrives: too late.
        "ping" if std::mem::replace(&mut *first.lock().unwrap(), false) => Act::Ignore,
        "ping" => Act::Answer(json!({"second": true})),
        _ => Act::Ignore,
    });
    // Long enough for the handshake to get through on a busy machine.
    let builder = Client::builder().request_timeout(Duration::from_secs(1));
    let client = connect(builder, stream).unwrap();
    let error = client.request("ping", json!({})).unwrap_err();
    assert!(
        matches!(&error, ClientError::Timeout { method, .. } if method == "ping"),
        "{error}"
    );
    assert_eq!(
        client.request("ping", json!({})).unwrap(),
        json!({"second": true})
    );
}

/// How many bytes a pipe holds before a write to it blocks (Linux; elsewhere a bound no
/// system's default exceeds).
fn pipe_capacity(pipe: &std::io::PipeReader) -> usize {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: F_GETPIPE_SZ only reads the size of a pipe this process holds open.
        let size = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ) };
        assert!(
            size > 0,
            "F_GETPIPE_SZ: {}",
            std::io::Error::last_os_error()
        );
        size as usize
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pipe;
        1 << 20
    }
}

#[test]
fn a_server_writing_a_lot_before_it_reads_does_not_deadlock_the_stdio_client() {
    // Real pipes, as to a spawned server. Once initialized, the server writes several
    // pipes' worth of notifications (a server request among them) before it reads its
    // input again; meanwhile the client writes a request larger than a pipe holds. Were
    // the client reading only after its write went through (or its reader waiting on
    // anything its writer holds), both sides would block for good on full pipes.
    let (from_client, to_server) = std::io::pipe().unwrap();
    let (from_server, to_client) = std::io::pipe().unwrap();
    let capacity = pipe_capacity(&from_server).max(pipe_capacity(&from_client));
    let flood = 8 * capacity;
    let pad = "x".repeat(4 * capacity);
    let (got_tx, got) = crossbeam_channel::unbounded::<Value>();
    let server = std::thread::spawn(move || {
        let mut input = BufReader::new(from_client);
        let mut out = std::io::BufWriter::new(to_client);
        let mut next = || {
            let mut line = String::new();
            input.read_line(&mut line).unwrap();
            serde_json::from_str::<Value>(&line).unwrap()
        };
        let initialize = next();
        let answer = json!({"jsonrpc": "2.0", "id": initialize["id"], "result": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "serverInfo": {"name": "flooding", "version": "0"}}});
        writeln!(out, "{answer}").unwrap();
        out.flush().unwrap();
        assert_eq!(next()["method"], "notifications/initialized");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": "y".repeat(1000)}});
        let mut written = 0;
        let mut pinged = false;
        while written < flood {
            let line = if !pinged && written >= flood / 2 {
                pinged = true;
                json!({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"}).to_string()
            } else {
                note.to_string()
            };
            writeln!(out, "{line}").unwrap();
            written += line.len() + 1;
        }
        out.flush().unwrap();
        // Only now the client's input: its big request and the answer to the ping, in
        // whichever order the client sent them.
        for _ in 0..2 {
            let message = next();
            if message["method"] == "echo" {
                let pad = message["params"]["pad"].as_str().unwrap_or_default();
                let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                                    "result": {"echoed": pad.len()}});
                writeln!(out, "{answer}").unwrap();
                out.flush().unwrap();
            }
            got_tx.send(message).unwrap();
        }
        // Ends when the client closes its side.
        while input.read_line(&mut String::new()).is_ok_and(|n| n > 0) {}
    });
    let builder = Client::builder().request_timeout(Duration::from_secs(60));
    let client = builder.connect_streams(from_server, to_server).unwrap();
    let answer = within(Duration::from_secs(30), move || {
        let answer = client.request("echo", json!({ "pad": pad }));
        drop(client);
        answer
    });
    assert_eq!(answer.unwrap(), json!({"echoed": 4 * capacity}));
    // The server ends once the dropped client closed its input.
    server.join().unwrap();
    let got: Vec<Value> = got.try_iter().collect();
    assert_eq!(got.len(), 2);
    let ping_answer = got
        .iter()
        .find(|message| message["id"] == "srv-1")
        .expect("the server's ping was answered");
    assert_eq!(ping_answer["result"], json!({}), "{ping_answer}");
}

#[test]
fn a_malformed_answer_fails_its_request_at_once_instead_of_leaving_it_waiting() {
    // Each is shaped as an answer to the request, with its id, but is no JSON-RPC response.
    let malformed = [
        json!({"id": "$id", "result": {}}),
        json!({"jsonrpc": "1.0", "id": "$id", "result": {}}),
        json!({"jsonrpc": "2.0", "id": "$id", "result": {}, "error": {"code": 1, "message": "?"}}),
    ];
    for answer in malformed {
        let sent = answer.clone();
        let (stream, _) = scripted(move |method, _| match method {
            "initialize" => initialized("2025-11-25"),
            _ => Act::Raw(vec![sent.clone()]),
        });
        // Neither the request timeout nor a task's end would end these waits soon:
        // `tasks/result` waits with no timeout at all.
        let builder = Client::builder().request_timeout(Duration::from_secs(600));
        let client = connect(builder, stream).unwrap();
        let (ping, result) = within(Duration::from_secs(10), move || {
            (
                client.request("ping", json!({})),
                client.get_task_result("t1"),
            )
        });
        for outcome in [ping, result] {
            match outcome {
                Err(ClientError::Protocol(message)) => {
                    assert!(message.contains("malformed"), "{answer}: {message}")
                }
                other => panic!("{answer}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_malformed_server_request_gets_an_error_answer() {
    // Params that are no object: the server must hear that its request was refused, not
    // wait for an answer that never comes.
    let bad = json!({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": [1]});
    let (stream, log) = scripted(move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "ping" => Act::SendThenAnswer(vec![bad.clone()], json!({})),
        // Asked once the client has answered (or not) what came before: stdio keeps order.
        _ => Act::Answer(json!({})),
    });
    let builder = Client::builder().on_elicitation(|_| Ok(json!({"action": "decline"})));
    let client = connect(builder, stream).unwrap();
    client.request("ping", json!({})).unwrap();
    let answer = within(Duration::from_secs(10), move || loop {
        if let Some(answer) = answered(&log, "e1") {
            return answer;
        }
        // The answer goes out on the dispatcher's side: a round trip lets it through.
        client.request("other", json!({})).unwrap();
    });
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
}

#[test]
fn a_suggested_poll_interval_is_capped() {
    let (stream, log) = scripted(|method, _| match method {
        "server/discover" => discovered(),
        "tools/call" => Act::Answer(json!({
            "resultType": "task", "taskId": "t1", "status": "working", "pollIntervalMs": u64::MAX
        })),
        "tasks/get" => Act::Answer(json!({
            "taskId": "t1", "status": "completed", "result": {"content": []}
        })),
        _ => Act::Ignore,
    });
    let builder = Client::builder()
        .revision(Revision::Sep2663)
        .max_poll_interval(Duration::from_millis(50));
    let client = connect(builder, stream).unwrap();
    let result = within(Duration::from_secs(10), move || {
        client.call_tool("work", json!({})).unwrap()
    });
    assert_eq!(result, json!({"content": []}));
    assert!(methods(&log).contains(&"tasks/get".to_owned()));
}

#[test]
fn a_panicking_input_handler_answers_with_an_error_and_the_stuck_detector_still_fires() {
    let asked = Arc::new(Mutex::new(false));
    let (stream, log) = scripted(move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("input_required")})),
        "tasks/get" if !std::mem::replace(&mut *asked.lock().unwrap(), true) => {
            Act::SendThenAnswer(vec![elicitation_e1()], task("input_required"))
        }
        "tasks/get" => Act::Answer(task("input_required")),
        "tasks/cancel" => Act::Answer(task("cancelled")),
        _ => Act::Ignore,
    });
    let builder = Client::builder()
        .stuck_polls(3)
        .on_elicitation(|_| panic!("a bug in the handler"));
    let client = connect(builder, stream).unwrap();
    let error = client.call_tool("work", json!({})).unwrap_err();
    assert!(matches!(error, ClientError::Stuck { .. }), "{error}");
    assert!(
        answered(&log, "e1").is_some(),
        "the server's request got no answer: {:?}",
        methods(&log)
    );
}

/// An `elicitation/create` with id "e1" for task "t1".
fn elicitation_e1() -> Value {
    json!({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": {
        "message": "?", "requestedSchema": {"type": "object"},
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t1"}}
    }})
}

/// The client's response to server request `id`, if the server got one.
fn answered(log: &Log, id: &str) -> Option<Value> {
    let prefix = format!("response \"{id}\" ");
    log.lock()
        .unwrap()
        .iter()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|message| serde_json::from_str(message).unwrap())
}

#[test]
fn a_server_that_declares_no_task_augmented_tool_calls_gets_plain_ones() {
    let (calls_tx, calls) = crossbeam_channel::unbounded();
    let (stream, _) = scripted(move |method, params| match method {
        "initialize" => Act::Answer(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}, "tasks": {"list": {}}},
            "serverInfo": {"name": "scripted", "version": "0"}
        })),
        "tools/list" => tool_list("optional"),
        "tools/call" => {
            calls_tx.send(params.clone()).unwrap();
            Act::Answer(json!({"content": []}))
        }
        _ => Act::Ignore,
    });
    let client = connect(Client::builder(), stream).unwrap();
    let result = within(Duration::from_secs(10), move || {
        client.call_tool("work", json!({})).unwrap()
    });
    assert_eq!(result, json!({"content": []}));
    let params = calls.try_recv().unwrap();
    assert!(params.get("task").is_none(), "{params}");
}

/// A plain call's result is the result, whatever fields it has: one that happens to carry
/// a `task` (structured tool output, say) is not taken for a created task, which only a
/// call that asked for one gets (2025-11-25).
#[test]
fn a_plain_calls_result_with_a_task_field_is_the_result() {
    let reply = json!({"content": [], "task": task("working")});
    let answer = reply.clone();
    let (stream, log) = scripted(move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("forbidden"),
        "tools/call" => Act::Answer(answer.clone()),
        _ => Act::Ignore,
    });
    let result = call_work(Client::builder(), stream).unwrap();
    assert_eq!(result, reply);
    let asked = methods(&log);
    assert!(!asked.iter().any(|m| m.starts_with("tasks/")), "{asked:?}");
}

#[test]
fn answers_to_a_tasks_requests_carry_the_related_task() {
    let log = Log::default();
    let seen = log.clone();
    let asked = Arc::new(Mutex::new(false));
    let (stream, log) = scripted_into(log, move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/get" if !std::mem::replace(&mut *asked.lock().unwrap(), true) => {
            Act::SendThenAnswer(vec![elicitation_e1()], task("input_required"))
        }
        // The task ends once its question is answered.
        "tasks/get" if answered(&seen, "e1").is_some() => Act::Answer(task("completed")),
        "tasks/get" => Act::Answer(task("input_required")),
        // The held tasks/result stays unanswered: answering it would end the call before
        // the question is asked. The call then ends by the request timeout.
        _ => Act::Ignore,
    });
    let builder = Client::builder()
        .request_timeout(Duration::from_millis(500))
        .on_elicitation(|_| Ok(json!({"action": "accept", "content": {"answer": "42"}})));
    let ended = call_work(builder, stream).unwrap_err();
    assert!(matches!(ended, ClientError::Timeout { .. }), "{ended}");
    let answer = answered(&log, "e1").expect("the elicitation was answered");
    assert_eq!(answer["result"]["action"], "accept", "{answer}");
    assert_eq!(
        answer["result"]["_meta"]["io.modelcontextprotocol/related-task"],
        json!({"taskId": "t1"}),
        "{answer}"
    );
}

#[test]
fn a_server_that_settles_on_a_version_without_tasks_is_refused() {
    let (stream, log) = scripted(|method, _| match method {
        "initialize" => initialized("2025-06-18"),
        _ => Act::Ignore,
    });
    let error = connect(Client::builder(), stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::Unsupported(what) if what.contains("'2025-06-18'")),
        "{error}"
    );
    assert!(!methods(&log).contains(&"notifications/initialized".to_owned()));
}

#[test]
fn a_server_that_stops_reading_neither_blocks_a_request_past_its_timeout_nor_the_drop() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    // Answers initialize, then never reads again (but keeps its end open).
    let server = std::thread::spawn(move || {
        let mut out = theirs.try_clone().unwrap();
        let mut lines = BufReader::new(theirs.try_clone().unwrap()).lines();
        let init: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let result = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                            "serverInfo": {"name": "deaf", "version": "0"}});
        writeln!(
            out,
            "{}",
            json!({"jsonrpc": "2.0", "id": init["id"], "result": result})
        )
        .unwrap();
        (lines, out)
    });
    let builder = Client::builder().request_timeout(Duration::from_secs(1));
    let client = connect(builder, ours).unwrap();
    let _deaf = server.join().unwrap();
    // Far more than the socket buffers hold: the writes block for good.
    let padding = "x".repeat(4 << 20);
    // Neither the requests nor the drop may hang.
    let outcomes = within(Duration::from_secs(10), move || {
        let outcomes = [
            client.request("ping", json!({ "padding": padding })),
            client.request("ping", json!({})),
        ];
        drop(client);
        outcomes
    });
    for outcome in outcomes {
        let error = outcome.unwrap_err();
        assert!(matches!(error, ClientError::Timeout { .. }), "{error}");
    }
}

#[test]
fn a_held_tasks_result_that_never_comes_after_the_task_ended_times_out() {
    let (stream, _) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/get" => Act::Answer(task("completed")),
        _ => Act::Ignore, // tasks/result
    });
    let builder = Client::builder().request_timeout(Duration::from_secs(1));
    let client = connect(builder, stream).unwrap();
    let error = client.call_tool("work", json!({})).unwrap_err();
    assert!(
        matches!(&error, ClientError::Timeout { method, .. } if method == "tasks/result"),
        "{error}"
    );
}

#[test]
fn a_deadline_too_far_off_to_reach_is_no_deadline() {
    for per_call in [false, true] {
        let (stream, _) = scripted(|method, _| match method {
            "server/discover" => discovered(),
            "tools/call" => Act::Answer(json!({
                "resultType": "task", "taskId": "t1", "status": "working", "pollIntervalMs": 10
            })),
            "tasks/get" => Act::Answer(json!({
                "taskId": "t1", "status": "completed", "result": {"content": []}
            })),
            _ => Act::Ignore,
        });
        let mut builder = Client::builder().revision(Revision::Sep2663);
        let mut options = mcp_task_store::client::CallOptions::new();
        if per_call {
            options = options.deadline(Duration::MAX);
        } else {
            builder = builder.deadline(Duration::MAX);
        }
        let client = connect(builder, stream).unwrap();
        let result = client.call_tool_with("work", json!({}), options).unwrap();
        assert_eq!(result, json!({"content": []}), "per call: {per_call}");
    }
}

/// The count of `method` in `log`.
fn count(log: &Log, method: &str) -> usize {
    log.lock().unwrap().iter().filter(|m| *m == method).count()
}

fn done() -> Value {
    json!({"content": [{"type": "text", "text": "done"}], "isError": false})
}

/// A SEP-2663 `tools/call` answer: task t1, working.
fn sep_task() -> Act {
    Act::Answer(json!({
        "resultType": "task", "taskId": "t1", "status": "working", "pollIntervalMs": 20
    }))
}

#[test]
fn a_tasks_result_that_ends_early_while_the_task_works_is_held_again() {
    let (mut results, mut polls) = (0, 0);
    let (stream, log) = scripted(move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        // The first breaks off while the task works (a proxy reset it, say).
        "tasks/result" => {
            results += 1;
            if results == 1 {
                Act::Fail(-32603)
            } else {
                Act::Answer(done())
            }
        }
        "tasks/get" => {
            polls += 1;
            Act::Answer(task(if polls == 1 { "working" } else { "completed" }))
        }
        "tasks/cancel" => Act::Answer(task("cancelled")),
        _ => Act::Ignore,
    });
    let result = call_work(Client::builder(), stream);
    assert_eq!(result.unwrap(), done());
    assert_eq!(count(&log, "tasks/result"), 2, "{:?}", methods(&log));
    assert_eq!(count(&log, "tasks/cancel"), 0, "{:?}", methods(&log));
}

#[test]
fn a_tasks_result_that_keeps_ending_early_is_polled_at_the_interval_until_the_deadline() {
    let (stream, log) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/result" => Act::Fail(-32603),
        "tasks/get" => Act::Answer(task("working")),
        "tasks/cancel" => Act::Answer(task("cancelled")),
        _ => Act::Ignore,
    });
    let builder = Client::builder().deadline(DEADLINE);
    let error = call_work(builder, stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::Deadline { task_id: Some(id), cancelled: true, .. }
            if id == "t1"),
        "{error}"
    );
    assert_eq!(count(&log, "tasks/cancel"), 1, "{:?}", methods(&log));
    // Sent again after a poll, never more often (not in a loop as fast as it fails).
    let (results, polls) = (count(&log, "tasks/result"), count(&log, "tasks/get"));
    assert!(
        results >= 2 && results <= polls + 1,
        "{results} after {polls} polls: {:?}",
        methods(&log)
    );
}

#[test]
fn a_poll_that_times_out_once_is_tried_again() {
    let mut polls = 0;
    let (stream, log) = scripted(move |method, _| match method {
        "server/discover" => discovered(),
        "tools/call" => sep_task(),
        "tasks/get" => {
            polls += 1;
            if polls == 1 {
                Act::Ignore
            } else {
                Act::Answer(json!({"taskId": "t1", "status": "completed", "result": done()}))
            }
        }
        _ => Act::Ignore,
    });
    let builder = Client::builder()
        .revision(Revision::Sep2663)
        .request_timeout(Duration::from_millis(500));
    let result = call_work(builder, stream);
    assert_eq!(result.unwrap(), done());
    assert_eq!(count(&log, "tasks/get"), 2);
}

#[test]
fn polls_that_keep_failing_abandon_the_task_and_name_it() {
    let (stream, log) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        // No such status: the answer cannot be read.
        "tasks/get" => Act::Answer(json!({"taskId": "t1", "status": "paused"})),
        "tasks/cancel" => Act::Answer(task("cancelled")),
        _ => Act::Ignore,
    });
    let error = call_work(Client::builder(), stream).unwrap_err();
    assert_eq!(error.task_id(), Some("t1"), "{error}");
    assert!(error.is_transport(), "{error}");
    assert!(error.to_string().contains("t1"), "{error}");
    assert!(
        matches!(&error, ClientError::TaskAbandoned { task_id, cancelled: true, error }
            if task_id == "t1" && matches!(**error, ClientError::Protocol(_))),
        "{error:?}"
    );
    assert_eq!(count(&log, "tasks/get"), 3, "{:?}", methods(&log));
    assert_eq!(count(&log, "tasks/cancel"), 1, "{:?}", methods(&log));
}

#[test]
fn a_failed_tasks_update_is_sent_again_without_asking_the_handler_twice() {
    let (mut updates, mut answered) = (0, false);
    let (stream, log) = scripted(move |method, _| match method {
        "server/discover" => discovered(),
        "tools/call" => sep_task(),
        "tasks/get" if answered => {
            Act::Answer(json!({"taskId": "t1", "status": "completed", "result": done()}))
        }
        "tasks/get" => Act::Answer(json!({
            "taskId": "t1", "status": "input_required", "inputRequests": {"k1": {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "?", "requestedSchema": {"type": "object"}}
            }}
        })),
        "tasks/update" => {
            updates += 1;
            if updates == 1 {
                Act::Fail(-32603)
            } else {
                answered = true;
                Act::Answer(json!({"resultType": "complete"}))
            }
        }
        _ => Act::Ignore,
    });
    let asked = Arc::new(Mutex::new(0));
    let counter = asked.clone();
    let builder = Client::builder()
        .revision(Revision::Sep2663)
        .on_elicitation(move |_| {
            *counter.lock().unwrap() += 1;
            Ok(json!({"action": "accept", "content": {}}))
        });
    let result = call_work(builder, stream);
    assert_eq!(result.unwrap(), done());
    assert_eq!(*asked.lock().unwrap(), 1);
    assert_eq!(count(&log, "tasks/update"), 2, "{:?}", methods(&log));
}

#[test]
fn a_deadline_whose_cancel_is_refused_as_the_task_completed_returns_the_result() {
    let mut ended = false;
    let (stream, log) = scripted(move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/get" => Act::Answer(task(if ended { "completed" } else { "working" })),
        "tasks/result" if ended => Act::Answer(done()),
        "tasks/result" => Act::Ignore,
        // The task completes just as the deadline passes: the cancel comes too late.
        "tasks/cancel" => {
            ended = true;
            Act::Fail(-32602)
        }
        _ => Act::Ignore,
    });
    let builder = Client::builder().deadline(DEADLINE);
    let result = call_work(builder, stream);
    assert_eq!(result.unwrap(), done(), "{:?}", methods(&log));
}

#[test]
fn a_deadline_whose_cancel_fails_does_not_claim_the_task_was_cancelled() {
    let (stream, _) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/get" => Act::Answer(task("working")),
        "tasks/cancel" => Act::Fail(-32603),
        _ => Act::Ignore,
    });
    let builder = Client::builder().deadline(DEADLINE);
    let error = call_work(builder, stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::Deadline { task_id: Some(id), .. } if id == "t1"),
        "{error}"
    );
    assert!(!error.to_string().contains("was cancelled"), "{error}");
}

#[test]
fn a_result_in_hand_is_kept_when_the_last_poll_finds_the_task_gone() {
    let (stream, _) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/result" => Act::Answer(done()),
        "tasks/get" => Act::Fail(-32602),
        _ => Act::Ignore,
    });
    let result = call_work(Client::builder(), stream);
    assert_eq!(result.unwrap(), done());
}

#[test]
fn a_tool_error_in_hand_fails_the_call_even_when_the_last_poll_fails() {
    let (stream, _) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/result" => Act::Answer(json!({"content": [], "isError": true})),
        "tasks/get" => Act::Fail(-32603),
        _ => Act::Ignore,
    });
    let error = call_work(Client::builder(), stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::TaskFailed { result: Some(r), .. } if r["isError"] == true),
        "{error}"
    );
}

#[test]
fn a_tool_error_in_hand_fails_the_call_when_the_last_poll_still_says_working() {
    // tasks/result answered; the poll after it lags behind (an eventually consistent
    // server): the result's own `isError` tells how the task ended.
    let (stream, _) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/result" => Act::Answer(json!({"content": [], "isError": true})),
        "tasks/get" => Act::Answer(task("working")),
        _ => Act::Ignore,
    });
    let error = call_work(Client::builder(), stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::TaskFailed { result: Some(r), task, .. }
            if r["isError"] == true && task.status == mcp_task_store::TaskStatus::Failed),
        "{error}"
    );
}

#[test]
fn a_tasks_update_refused_with_invalid_params_is_retried_then_the_task_cancelled() {
    let (stream, log) = scripted(|method, _| match method {
        "server/discover" => discovered(),
        "tools/call" => sep_task(),
        "tasks/get" => Act::Answer(json!({
            "taskId": "t1", "status": "input_required", "inputRequests": {"k1": {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "?", "requestedSchema": {"type": "object"}}
            }}
        })),
        // The server refuses the answers, not the task: it still asks for them.
        "tasks/update" => Act::Fail(-32602),
        "tasks/cancel" => Act::Answer(json!({"taskId": "t1", "status": "cancelled"})),
        _ => Act::Ignore,
    });
    let builder = Client::builder()
        .revision(Revision::Sep2663)
        .on_elicitation(|_| Ok(json!({"action": "accept", "content": {}})));
    let error = call_work(builder, stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::TaskAbandoned { task_id, .. } if task_id == "t1"),
        "{error}"
    );
    assert_eq!(count(&log, "tasks/cancel"), 1, "{:?}", methods(&log));
}

#[test]
fn a_sep2663_deadline_racing_the_tasks_completion_returns_the_result() {
    let mut ended = false;
    let (stream, log) = scripted(move |method, _| match method {
        "server/discover" => discovered(),
        "tools/call" => sep_task(),
        "tasks/get" if ended => {
            Act::Answer(json!({"taskId": "t1", "status": "completed", "result": done()}))
        }
        "tasks/get" => Act::Answer(json!({"taskId": "t1", "status": "working"})),
        // The task completes just as the deadline passes; SEP-2663 acknowledges the cancel
        // all the same.
        "tasks/cancel" => {
            ended = true;
            Act::Answer(json!({"taskId": "t1", "status": "completed"}))
        }
        _ => Act::Ignore,
    });
    let builder = Client::builder()
        .revision(Revision::Sep2663)
        .deadline(DEADLINE);
    let result = call_work(builder, stream);
    assert_eq!(result.unwrap(), done(), "{:?}", methods(&log));
}

#[test]
fn a_held_tasks_result_lost_as_the_task_ends_is_asked_for_once_more() {
    let mut results = 0;
    let (stream, log) = scripted(move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/get" => Act::Answer(task("completed")),
        // The first one's answer is lost (as a stream cut off would lose it).
        "tasks/result" => {
            results += 1;
            if results == 1 {
                Act::Ignore
            } else {
                Act::Answer(done())
            }
        }
        _ => Act::Ignore,
    });
    let builder = Client::builder().request_timeout(Duration::from_millis(300));
    let result = call_work(builder, stream);
    assert_eq!(result.unwrap(), done(), "{:?}", methods(&log));
    assert_eq!(count(&log, "tasks/result"), 2);
}

#[test]
fn the_tools_are_listed_again_after_the_server_says_they_changed() {
    let mut lists = 0;
    let (stream, log) = scripted(move |method, params| match method {
        "initialize" => initialized("2025-11-25"),
        // "work" comes later (and requires a task).
        "tools/list" => {
            lists += 1;
            if lists == 1 {
                Act::Answer(
                    json!({"tools": [{"name": "other", "inputSchema": {"type": "object"}}]}),
                )
            } else {
                tool_list("required")
            }
        }
        "tools/call" if params["name"] == "other" => {
            let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
            Act::SendThenAnswer(vec![changed], json!({"content": []}))
        }
        "tools/call" if params.get("task").is_some() => {
            Act::Answer(json!({"content": [], "augmented": true}))
        }
        "tools/call" => Act::Fail(-32601),
        _ => Act::Ignore,
    });
    let client = connect(Client::builder(), stream).unwrap();
    client.call_tool("other", json!({})).unwrap();
    let result = client.call_tool("work", json!({}));
    assert_eq!(result.unwrap()["augmented"], true, "{:?}", methods(&log));
    assert_eq!(count(&log, "tools/list"), 2);
}

/// A `tools/list` page listing `work` (task support optional), with `cursor` as its
/// `nextCursor`.
fn tool_page(cursor: &str) -> Act {
    Act::Answer(json!({
        "tools": [{"name": "work", "inputSchema": {"type": "object"},
                   "execution": {"taskSupport": "optional"}}],
        "nextCursor": cursor
    }))
}

#[test]
fn a_tools_list_cursor_that_repeats_fails_the_call_instead_of_listing_for_ever() {
    let mut pages = 0;
    let (stream, log) = scripted(move |method, params| match method {
        "initialize" => initialized("2025-11-25"),
        // Page 1 leads to "c1", which leads to "c2", which leads back to "c1".
        "tools/list" => {
            pages += 1;
            assert!(
                pages <= 10,
                "the client keeps listing: page {pages}, {params}"
            );
            tool_page(if params["cursor"] == "c1" { "c2" } else { "c1" })
        }
        "tools/call" => Act::Answer(done()),
        _ => Act::Ignore,
    });
    let error = call_work(Client::builder(), stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::Protocol(what) if what.contains("\"c1\"")),
        "{error}"
    );
    assert_eq!(count(&log, "tools/list"), 3, "{:?}", methods(&log));
    assert_eq!(count(&log, "tools/call"), 0, "{:?}", methods(&log));
}

#[test]
fn a_tools_list_that_never_ends_stops_at_the_page_limit() {
    let mut pages = 0;
    let (stream, log) = scripted(move |method, _| match method {
        "initialize" => initialized("2025-11-25"),
        // A fresh cursor every time, for ever.
        "tools/list" => {
            pages += 1;
            tool_page(&format!("c{pages}"))
        }
        _ => Act::Ignore,
    });
    let client = connect(Client::builder(), stream).unwrap();
    let error = within(Duration::from_secs(30), move || client.list_tools()).unwrap_err();
    assert!(
        matches!(&error, ClientError::Protocol(what) if what.contains("pages")),
        "{error}"
    );
    assert_eq!(
        count(&log, "tools/list"),
        mcp_task_store::client::MAX_TOOL_PAGES
    );
}

#[test]
fn a_task_seen_cancelled_ends_the_call_without_waiting_for_tasks_result() {
    let (stream, log) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/get" => Act::Answer(task("cancelled")),
        // What tasks/result answers for a cancelled task is not defined: this server
        // never answers it. (The default request timeout, 60 s, is past the hang bound.)
        _ => Act::Ignore,
    });
    let error = call_work(Client::builder(), stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::TaskCancelled { task } if task.task_id == "t1"),
        "{error}"
    );
    assert_eq!(count(&log, "tasks/result"), 1, "{:?}", methods(&log));
}

#[test]
fn server_requests_beyond_what_the_handlers_can_take_are_refused_at_once() {
    use mcp_task_store::client::MAX_QUEUED_SERVER_REQUESTS;
    let extra = 100;
    let (ours, theirs) = UnixStream::pair().unwrap();
    // Answers initialize, sends more elicitations than the client can hold, then collects
    // the "client busy" answers the client sends while its handler is still busy.
    let server = std::thread::spawn(move || {
        theirs
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut out = std::io::BufWriter::new(theirs.try_clone().unwrap());
        let mut lines = BufReader::new(theirs).lines();
        let init: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let result = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                            "serverInfo": {"name": "flood", "version": "0"}});
        writeln!(
            out,
            "{}",
            json!({"jsonrpc": "2.0", "id": init["id"], "result": result})
        )
        .unwrap();
        for n in 0..MAX_QUEUED_SERVER_REQUESTS + 1 + extra {
            let mut request = elicitation_e1();
            request["id"] = json!(format!("e{n}"));
            writeln!(out, "{request}").unwrap();
        }
        out.flush().unwrap();
        let mut busy = Vec::new();
        while busy.len() < extra {
            // A read timeout (no refusal within 10 s) fails the test here.
            let message: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            if message.get("error").is_some() {
                busy.push(message);
            }
        }
        busy
    });
    let (release_tx, release) = crossbeam_channel::bounded::<()>(0);
    let builder = Client::builder().on_elicitation(move |_| {
        // A human who takes their time (until the test ends).
        let _ = release.recv_timeout(Duration::from_secs(30));
        Ok(json!({"action": "decline"}))
    });
    let client = connect(builder, ours).unwrap();
    let busy = within(Duration::from_secs(20), move || server.join());
    let busy = busy.expect("the client refused too few of the flood's requests in time");
    for refusal in &busy {
        assert_eq!(refusal["error"]["code"], -32603, "{refusal}");
        assert!(
            refusal["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("client busy")),
            "{refusal}"
        );
    }
    drop(release_tx);
    drop(client);
}

/// A `notifications/tasks` about task t1 (its full state is not read: any says "look").
fn t1_changed() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/tasks",
           "params": {"taskId": "t1", "status": "input_required"}})
}

/// A SEP-2663 task of a server that suggests polling once an hour, tells of a change on
/// its subscription at once (and never ends it), and precedes every `tasks/get` answer
/// with another: each poll is brought forward by a notification. `get` answers the polls.
fn notifying(get: impl FnMut() -> Act + Send + 'static) -> (UnixStream, Log) {
    let get = Mutex::new(get);
    scripted(move |method, _| match method {
        "server/discover" => discovered(),
        "tools/call" => Act::Answer(json!({
            "resultType": "task", "taskId": "t1", "status": "working",
            "pollIntervalMs": 3_600_000
        })),
        "subscriptions/listen" => Act::Raw(vec![t1_changed()]),
        "tasks/get" => match (get.lock().unwrap())() {
            Act::Answer(polled) => Act::SendThenAnswer(vec![t1_changed()], polled),
            Act::Fail(code) => Act::Raw(vec![
                t1_changed(),
                json!({"jsonrpc": "2.0", "id": "$id",
                       "error": {"code": code, "message": format!("scripted {code}")}}),
            ]),
            other => other,
        },
        "tasks/update" => Act::Answer(json!({"resultType": "complete"})),
        "tasks/cancel" => Act::Answer(json!({"taskId": "t1", "status": "cancelled"})),
        _ => Act::Ignore,
    })
}

/// A client for [`notifying`] servers: it waits up to an hour between polls.
fn hourly() -> ClientBuilder {
    Client::builder()
        .revision(Revision::Sep2663)
        .max_poll_interval(Duration::from_secs(3600))
}

#[test]
fn task_notifications_do_not_hurry_the_stuck_detector() {
    // The one question is answered; the task stays input_required with it (stuck), and
    // the server says it changed after every poll.
    let (stream, log) = notifying(|| {
        Act::Answer(json!({
            "taskId": "t1", "status": "input_required", "pollIntervalMs": 3_600_000,
            "inputRequests": {"k1": {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "?", "requestedSchema": {"type": "object"}}
            }}
        }))
    });
    let builder = hourly()
        .stuck_polls(3)
        .deadline(Duration::from_millis(500))
        .on_elicitation(|_| Ok(json!({"action": "accept", "content": {}})));
    // Stuck means 3 polls at the server's interval (3 hours) without news: the looks the
    // notifications brought forward are no such polls, so the deadline comes first.
    let error = call_work(builder, stream).unwrap_err();
    assert!(
        matches!(&error, ClientError::Deadline { task_id: Some(id), cancelled: true, .. }
            if id == "t1"),
        "{error}: {:?}",
        methods(&log)
    );
    assert!(count(&log, "tasks/get") > 3, "{:?}", methods(&log));
}

#[test]
fn task_notifications_do_not_hurry_giving_up_on_a_task_whose_polls_fail() {
    // A passing hiccup (a proxy's, say): the first three polls fail, the next one finds
    // the task completed. The server says the task changed after each of them.
    let mut polls = 0;
    let (stream, log) = notifying(move || {
        polls += 1;
        if polls <= 3 {
            Act::Fail(-32603)
        } else {
            Act::Answer(json!({"taskId": "t1", "status": "completed", "result": done()}))
        }
    });
    // Three failed polls in a row abandon a task: polls at the interval (hours apart
    // here), not the looks the notifications brought forward (milliseconds apart).
    let result = call_work(hourly(), stream);
    assert_eq!(count(&log, "tasks/cancel"), 0, "{:?}", methods(&log));
    assert_eq!(result.unwrap(), done(), "{:?}", methods(&log));
}

/// The client against scripted Streamable HTTP servers: raw TCP, one thread per
/// connection, answering each request as the test says.
#[test]
fn a_poll_answered_about_another_task_is_not_taken_for_the_followed_one() {
    for revision in [Revision::V2025, Revision::Sep2663] {
        let (stream, log) = scripted(move |method, _| match method {
            "initialize" => initialized("2025-11-25"),
            "server/discover" => discovered(),
            "tools/list" => tool_list("required"),
            "tools/call" if revision == Revision::V2025 => {
                Act::Answer(json!({"task": task("working")}))
            }
            "tools/call" => sep_task(),
            // Every poll of t1 is answered about t2, which has ended.
            "tasks/get" if revision == Revision::V2025 => {
                let mut other = task("cancelled");
                other["taskId"] = json!("t2");
                Act::Answer(other)
            }
            "tasks/get" => Act::Answer(json!({
                "resultType": "complete", "taskId": "t2", "status": "completed",
                "result": {"content": [{"type": "text", "text": "t2's"}]}
            })),
            "tasks/cancel" if revision == Revision::V2025 => Act::Answer(task("cancelled")),
            "tasks/cancel" => Act::Answer(json!({"resultType": "complete"})),
            _ => Act::Ignore,
        });
        let outcome = call_work(Client::builder().revision(revision), stream);
        assert!(
            matches!(&outcome, Err(ClientError::TaskAbandoned { task_id, .. }) if task_id == "t1"),
            "{revision:?}: {outcome:?}"
        );
        // Given up after the failed polls in a row (and, on SEP-2663, the look after the
        // cancel, answered about t2 again).
        assert!(
            count(&log, "tasks/get") >= 3 && count(&log, "tasks/cancel") == 1,
            "{revision:?}: {:?}",
            methods(&log)
        );
    }
}

#[test]
fn a_tasks_result_about_another_task_is_not_the_followed_tasks_result() {
    let (stream, log) = scripted(|method, _| match method {
        "initialize" => initialized("2025-11-25"),
        "tools/list" => tool_list("required"),
        "tools/call" => Act::Answer(json!({"task": task("working")})),
        "tasks/get" => Act::Answer(task("completed")),
        // Task t2's result, tagged as such.
        "tasks/result" => {
            let mut other = done();
            other["_meta"] = json!({"io.modelcontextprotocol/related-task": {"taskId": "t2"}});
            Act::Answer(other)
        }
        _ => Act::Ignore,
    });
    let outcome = call_work(Client::builder(), stream);
    assert!(
        matches!(&outcome, Err(ClientError::Protocol(what)) if what.contains("t2")),
        "{outcome:?}: {:?}",
        methods(&log)
    );
}

#[test]
fn a_request_without_params_still_carries_what_each_revision_asks_for() {
    for revision in [Revision::V2025, Revision::Sep2663] {
        let (stream, _) = scripted(move |method, params| match method {
            "initialize" => initialized("2025-11-25"),
            "server/discover" => discovered(),
            // JSON-RPC params are an object or an array, or left out; SEP-2663 requests
            // carry their protocol version and capabilities in `_meta`.
            "ping" if !params.is_object() => Act::Fail(-32600),
            "ping"
                if revision == Revision::Sep2663
                    && params["_meta"]["io.modelcontextprotocol/protocolVersion"]
                        != "2026-07-28" =>
            {
                Act::Fail(-32022)
            }
            _ => Act::Answer(json!({})),
        });
        let client = connect(Client::builder().revision(revision), stream).unwrap();
        let answer = within(Duration::from_secs(10), move || {
            client.request("ping", Value::Null)
        });
        assert!(answer.is_ok(), "{revision:?}: {answer:?}");
    }
}

#[test]
fn a_request_that_times_out_is_cancelled_unless_it_may_have_made_a_task() {
    for (revision, support) in [
        (Revision::V2025, "forbidden"),
        (Revision::V2025, "required"),
        (Revision::Sep2663, "forbidden"),
    ] {
        let (stream, log) = scripted(move |method, _| match method {
            "initialize" => initialized("2025-11-25"),
            "server/discover" => discovered(),
            "tools/list" => tool_list(support),
            "sync" => Act::Answer(json!({})),
            _ => Act::Ignore,
        });
        // Every request but the ping and the call is answered within it, on a busy
        // machine too.
        let builder = Client::builder()
            .revision(revision)
            .request_timeout(Duration::from_millis(500));
        let client = connect(builder, stream).unwrap();
        let (ping, call) = within(Duration::from_secs(10), move || {
            let ping = client.request("ping", json!({})).unwrap_err();
            let call = client.call_tool("work", json!({})).unwrap_err();
            // Answered after whatever the client sent before it (one queue, in order).
            client.request("sync", json!({})).unwrap();
            (ping, call)
        });
        let case = format!("{revision:?}, {support}");
        assert!(
            matches!(ping, ClientError::Timeout { .. }),
            "{case}: {ping}"
        );
        assert!(
            matches!(call, ClientError::Timeout { .. }),
            "{case}: {call}"
        );
        let sent = methods(&log);
        // The timed-out ping is cancelled, as the lifecycle rules ask of a request that
        // timed out; a tools/call is not when it may have created a task (2025-11-25 asked
        // for one; a SEP-2663 server decides), which only tasks/cancel may end.
        let expected = if support == "forbidden" && revision == Revision::V2025 {
            2
        } else {
            1
        };
        assert_eq!(
            sent.iter()
                .filter(|m| *m == "notifications/cancelled")
                .count(),
            expected,
            "{case}: {sent:?}"
        );
    }
}

#[test]
fn input_answered_after_the_deadline_does_not_send_the_call_again() {
    // The call asks for input first (multi-round-trip); the answer comes after the call's
    // deadline, as a human's may. The call then fails with the deadline: the tool must not
    // run (with that answer) behind the caller's back.
    let asked: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    let arrived = asked.clone();
    let (stream, log) = scripted(move |method, _| match method {
        "server/discover" => discovered(),
        "tools/call" => {
            arrived
                .lock()
                .unwrap()
                .get_or_insert_with(std::time::Instant::now);
            Act::Answer(
                json!({"resultType": "input_required", "inputRequests": {"q": {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "Deploy?", "requestedSchema": {"type": "object"}}
                }}}),
            )
        }
        _ => Act::Answer(json!({})),
    });
    let deadline = Duration::from_millis(100);
    let builder = Client::builder()
        .revision(Revision::Sep2663)
        .deadline(deadline)
        .on_elicitation(move |_| {
            // Answered once the deadline (counted from before the call was sent) passed.
            let sent = asked.lock().unwrap().expect("asked by the call");
            std::thread::sleep(
                (sent + deadline).saturating_duration_since(std::time::Instant::now()),
            );
            Ok(json!({"action": "accept", "content": {}}))
        });
    let error = call_work(builder, stream).unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Deadline {
                task_id: None,
                cancelled: false,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(count(&log, "tools/call"), 1, "{:?}", methods(&log));
}

#[test]
fn a_call_without_arguments_sends_an_empty_object() {
    for revision in [Revision::V2025, Revision::Sep2663] {
        let (stream, _) = scripted(move |method, params| match method {
            "initialize" => initialized("2025-11-25"),
            "server/discover" => discovered(),
            "tools/list" => tool_list("forbidden"),
            // `arguments` is an object, or left out (as the TypeScript SDK's schema says).
            "tools/call" if params.get("arguments").is_some_and(|a| !a.is_object()) => {
                Act::Fail(-32602)
            }
            "tools/call" => Act::Answer(done()),
            _ => Act::Answer(json!({})),
        });
        let client = connect(Client::builder().revision(revision), stream).unwrap();
        let result = within(Duration::from_secs(10), move || {
            client.call_tool("work", Value::Null)
        });
        assert_eq!(result.ok(), Some(done()), "{revision:?}");
    }
}

#[test]
fn a_task_created_just_after_the_deadline_is_cancelled() {
    // The server is slow to answer the call that creates the task: its answer comes just
    // after the call's deadline. The task it made is the call's, and must not be left to
    // run with nobody following it.
    let deadline = DEADLINE;
    for revision in [Revision::V2025, Revision::Sep2663] {
        let (stream, log) = scripted(move |method, _| match method {
            "initialize" => initialized("2025-11-25"),
            "server/discover" => discovered(),
            "tools/list" => tool_list("required"),
            "tools/call" => {
                // A server busy for longer than the caller's deadline.
                std::thread::sleep(deadline + Duration::from_millis(100));
                match revision {
                    Revision::V2025 => Act::Answer(json!({"task": task("working")})),
                    _ => sep_task(),
                }
            }
            "tasks/cancel" if revision == Revision::V2025 => Act::Answer(task("cancelled")),
            "tasks/cancel" => Act::Answer(json!({"resultType": "complete"})),
            "tasks/get" => Act::Answer(json!({"taskId": "t1", "status": "cancelled"})),
            _ => Act::Ignore,
        });
        let error = call_work(
            Client::builder().revision(revision).deadline(deadline),
            stream,
        )
        .unwrap_err();
        assert!(
            matches!(&error, ClientError::Deadline { task_id: Some(id), cancelled: true, .. } if id == "t1"),
            "{revision:?}: {error}"
        );
        assert_eq!(
            count(&log, "tasks/cancel"),
            1,
            "{revision:?}: {:?}",
            methods(&log)
        );
    }
}

#[test]
fn a_created_task_the_client_cannot_read_is_cancelled() {
    // The server makes a task but describes it with a status no revision has: the client
    // cannot follow it, and must not leave it running with nobody to end it.
    for revision in [Revision::V2025, Revision::Sep2663] {
        let (stream, log) = scripted(move |method, _| match method {
            "initialize" => initialized("2025-11-25"),
            "server/discover" => discovered(),
            "tools/list" => tool_list("required"),
            "tools/call" => {
                let task = json!({"taskId": "t1", "status": "pondering"});
                match revision {
                    Revision::V2025 => Act::Answer(json!({ "task": task })),
                    _ => Act::Answer(
                        json!({"resultType": "task", "taskId": "t1", "status": "pondering"}),
                    ),
                }
            }
            "tasks/cancel" if revision == Revision::V2025 => Act::Answer(task("cancelled")),
            "tasks/cancel" => Act::Answer(json!({"resultType": "complete"})),
            _ => Act::Ignore,
        });
        let error = call_work(Client::builder().revision(revision), stream).unwrap_err();
        assert!(
            matches!(&error, ClientError::Protocol(why) if why.contains("t1") && why.contains("accepted")),
            "{revision:?}: {error}"
        );
        assert_eq!(
            count(&log, "tasks/cancel"),
            1,
            "{revision:?}: {:?}",
            methods(&log)
        );
    }
}

#[cfg(feature = "http")]
mod over_http {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use mcp_task_store::client::{Client, ClientError};
    use serde_json::{json, Value};

    use super::within;

    /// One request as the server read it.
    struct Req {
        method: String,
        /// The `Mcp-Session-Id` the request carried.
        session: Option<String>,
        body: Value,
    }

    impl Req {
        /// The JSON-RPC method, if the body is a request or a notification.
        fn rpc(&self) -> Option<&str> {
            self.body["method"].as_str()
        }
    }

    /// Serves every connection on a thread of its own with `serve`; returns the URL.
    fn http_server(serve: impl Fn(&Req, &mut TcpStream) + Send + Sync + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let serve = std::sync::Arc::new(serve);
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                let Ok(mut connection) = connection else {
                    return;
                };
                let serve = serve.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(connection.try_clone().unwrap());
                    let mut first = String::new();
                    if reader.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0;
                    let mut session = None;
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
                            if name.eq_ignore_ascii_case("mcp-session-id") {
                                session = Some(value.trim().to_owned());
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let request = Req {
                        method: first.split(' ').next().unwrap().to_owned(),
                        session,
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    };
                    serve(&request, &mut connection);
                });
            }
        });
        url
    }

    fn json_reply(connection: &mut TcpStream, body: &Value, extra_headers: &str) {
        let body = body.to_string();
        let _ = write!(
            connection,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             {extra_headers}\r\n{body}",
            body.len()
        );
    }

    /// An event stream carrying `messages`, then ended.
    fn events_reply(connection: &mut TcpStream, messages: &[Value]) {
        let mut reply =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                .to_owned();
        for message in messages {
            reply.push_str(&format!("data: {message}\n\n"));
        }
        let _ = connection.write_all(reply.as_bytes());
    }

    fn empty(connection: &mut TcpStream, status: &str) {
        let _ = write!(connection, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
    }

    /// Holds the connection open, silent, until the client closes it (or `limit` passes).
    fn hold(connection: &mut TcpStream, limit: Duration) {
        connection.set_read_timeout(Some(limit)).unwrap();
        let _ = connection.read_to_end(&mut Vec::new());
    }

    /// Opens an event stream and sends an SSE comment every 50 ms, never a message, until
    /// the client hangs up (`true`) or `limit` passes (`false`).
    fn trickle(connection: &mut TcpStream, limit: Duration) -> bool {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";
        if connection.write_all(head.as_bytes()).is_err() {
            return true;
        }
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if connection.write_all(b": keep-alive\n\n").is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// A 2025-11-25 task `t1` in `status`, polled every 20 ms.
    fn task(status: &str) -> Value {
        super::task(status)
    }

    /// The answer to `initialize`, starting session `session`.
    fn initialize_answer(request: &Req, connection: &mut TcpStream, session: &str) {
        json_reply(
            connection,
            &json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "serverInfo": {"name": "scripted", "version": "0"}}}),
            &format!("Mcp-Session-Id: {session}\r\n"),
        );
    }

    /// What every scripted server does with the session's plumbing: `true` if `request`
    /// was one of it (and answered).
    fn plumbing(request: &Req, connection: &mut TcpStream) -> bool {
        match (request.method.as_str(), request.rpc()) {
            ("GET", _) => empty(connection, "405 Method Not Allowed"),
            ("DELETE", _) => empty(connection, "200 OK"),
            (_, Some("initialize")) => initialize_answer(request, connection, "s1"),
            (_, Some("notifications/initialized")) => empty(connection, "202 Accepted"),
            _ => return false,
        }
        true
    }

    #[test]
    fn a_response_on_one_posts_answer_never_completes_another_request() {
        for stream in [false, true] {
            let (cancel_tx, cancel_id) = crossbeam_channel::bounded(1);
            let url = http_server(move |request, connection| {
                if plumbing(request, connection) {
                    return;
                }
                match request.rpc() {
                    Some("tasks/cancel") => {
                        let _ = cancel_tx.send(request.body["id"].clone());
                        hold(connection, Duration::from_secs(10));
                    }
                    // A broken server (or a proxy mixing connections up) answers ping with
                    // the id of the other request in flight, which the test passes in.
                    Some("ping") => {
                        let answer = json!({"jsonrpc": "2.0", "id": request.body["params"]["as"],
                            "result": {"taskId": "t1", "status": "cancelled"}});
                        if stream {
                            events_reply(connection, &[answer]);
                        } else {
                            json_reply(connection, &answer, "");
                        }
                    }
                    _ => hold(connection, Duration::from_secs(10)),
                }
            });
            let client = Client::builder()
                .request_timeout(Duration::from_secs(1))
                .connect_http(&url)
                .unwrap();
            let canceller = client.clone();
            let cancel = std::thread::spawn(move || {
                canceller.request("tasks/cancel", json!({"taskId": "t1"}))
            });
            let id = cancel_id.recv_timeout(Duration::from_secs(10)).unwrap();
            let ping = client.request("ping", json!({ "as": id }));
            assert!(ping.is_err(), "stream {stream}: {ping:?}");
            let cancel = within(Duration::from_secs(10), move || cancel.join().unwrap());
            assert!(
                matches!(cancel, Err(ClientError::Timeout { .. })),
                "stream {stream}: tasks/cancel, never answered, got ping's answer: {cancel:?}"
            );
        }
    }

    #[test]
    fn connect_http_is_bounded_by_the_request_timeout_when_the_server_trickles() {
        let url = http_server(|request, connection| match request.rpc() {
            // Not 202 as it should be, but an event stream that never ends.
            Some("notifications/initialized") => {
                trickle(connection, Duration::from_secs(60));
            }
            _ if plumbing(request, connection) => {}
            _ => hold(connection, Duration::from_secs(60)),
        });
        let connected = within(Duration::from_secs(10), move || {
            Client::builder()
                .request_timeout(Duration::from_millis(300))
                .connect_http(&url)
                .map(|_| ())
        });
        connected.unwrap();
    }

    #[test]
    fn a_trickled_answer_to_a_server_request_leaves_the_stuck_detector_working() {
        let url = http_server(|request, connection| {
            let reply = |connection: &mut TcpStream, result: Value| {
                let message = json!({"jsonrpc": "2.0", "id": request.body["id"], "result": result});
                json_reply(connection, &message, "")
            };
            match (request.method.as_str(), request.rpc()) {
                (_, Some("initialize")) => json_reply(
                    connection,
                    &json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}},
                        "serverInfo": {"name": "scripted", "version": "0"}}}),
                    "Mcp-Session-Id: s1\r\n",
                ),
                _ if plumbing(request, connection) => {}
                (_, Some("tools/list")) => reply(
                    connection,
                    json!({"tools": [{"name": "work",
                    "inputSchema": {"type": "object"},
                    "execution": {"taskSupport": "required"}}]}),
                ),
                (_, Some("tools/call")) => reply(connection, json!({"task": task("working")})),
                (_, Some("tasks/get")) => reply(connection, task("input_required")),
                (_, Some("tasks/cancel")) => reply(connection, task("cancelled")),
                (_, Some("tasks/result")) => {
                    // The elicitation rides on the held tasks/result, which stays open.
                    let _ = write!(
                        connection,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n\
                         data: {}\n\n",
                        super::elicitation_e1()
                    );
                    hold(connection, Duration::from_secs(60));
                }
                // The client's answer to e1: an event stream that never ends.
                (_, None) => {
                    trickle(connection, Duration::from_secs(60));
                }
                _ => hold(connection, Duration::from_secs(60)),
            }
        });
        let client = Client::builder()
            .request_timeout(Duration::from_millis(300))
            .stuck_polls(3)
            .on_elicitation(|_| Ok(json!({"action": "decline"})))
            .connect_http(&url)
            .unwrap();
        let error = within(Duration::from_secs(10), move || {
            client.call_tool("work", json!({})).unwrap_err()
        });
        assert!(matches!(error, ClientError::Stuck { .. }), "{error}");
    }

    #[test]
    fn a_renewal_that_never_ends_does_not_wedge_the_client() {
        let initializes = AtomicUsize::new(0);
        let url = http_server(move |request, connection| {
            let first = request.body["params"]["first"] == true;
            match request.rpc() {
                Some("initialize") => match initializes.fetch_add(1, Ordering::SeqCst) {
                    0 => initialize_answer(request, connection, "s1"),
                    // The first renewal: its answer is an event stream that never ends.
                    1 => {
                        trickle(connection, Duration::from_secs(60));
                    }
                    _ => initialize_answer(request, connection, "s2"),
                },
                _ if plumbing(request, connection) => {}
                // s1 is forgotten once the first ping went through.
                Some("ping") if first || request.session.as_deref() == Some("s2") => {
                    let answer = json!({"jsonrpc": "2.0", "id": request.body["id"], "result": {}});
                    json_reply(connection, &answer, "")
                }
                _ => empty(connection, "404 Not Found"),
            }
        });
        let client = Client::builder()
            .request_timeout(Duration::from_millis(500))
            .connect_http(&url)
            .unwrap();
        let outcomes = within(Duration::from_secs(20), move || {
            client.request("ping", json!({"first": true})).unwrap();
            // Meets the 404; the renewal stalls; this ping fails.
            assert!(client.request("ping", json!({})).is_err());
            // A new renewal succeeds at once, once one is tried.
            (0..3)
                .map(|_| client.request("ping", json!({})).map_err(|e| e.to_string()))
                .collect::<Vec<_>>()
        });
        assert!(
            outcomes.iter().any(Result::is_ok),
            "the client stays wedged behind the stalled renewal: {outcomes:?}"
        );
    }

    #[test]
    fn a_request_given_up_on_does_not_keep_its_connection() {
        let (hung_up_tx, hung_up) = crossbeam_channel::unbounded();
        let url = http_server(move |request, connection| {
            if plumbing(request, connection) {
                return;
            }
            // Answers as an event stream, then never sends the response: until the client
            // hangs up.
            let _ = hung_up_tx.send(trickle(connection, Duration::from_secs(60)));
        });
        let client = Client::builder()
            .request_timeout(Duration::from_millis(200))
            .connect_http(&url)
            .unwrap();
        for _ in 0..3 {
            let error = client.request("ping", json!({})).unwrap_err();
            assert!(matches!(error, ClientError::Timeout { .. }), "{error}");
        }
        // The client is still open: only the requests' connections are gone.
        for n in 0..3 {
            let hung_up = hung_up.recv_timeout(Duration::from_secs(10));
            assert_eq!(
                hung_up,
                Ok(true),
                "connection {n} of a request that timed out is still open"
            );
        }
        drop(client);
    }
}
