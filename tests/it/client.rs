//! The blocking client against real servers: our `mcp-task-server` over stdio (both
//! revisions) and over HTTP (both revisions), the TypeScript SDK's reference server
//! (2025-11-25, stdio), and fake servers written here for what no honest server does
//! (stay `input_required` forever).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_task_store::client::{
    CallOptions, Client, ClientBuilder, ClientError, InputRequest, Revision, ToolCall,
};
use mcp_task_store::model::TaskStatus;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// Where the client under test connects.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Stdio(Revision),
    #[cfg(feature = "http")]
    Http(Revision),
    /// The TypeScript SDK reference server (2025-11-25 only).
    Reference,
}

fn server_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-task-server"));
    command
        .args(["--poll-interval", "100ms", "--log", "warn"])
        .stderr(Stdio::null());
    command
}

/// `node reference-server.mjs`, installing its npm packages first if they are missing. No
/// node, or a failed install, fails the test: nothing is skipped.
fn reference_command() -> Command {
    static INSTALL: Mutex<()> = Mutex::new(());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/ts");
    let _installing = INSTALL.lock();
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "the reference-server tests need Node 20+ on PATH: {node:?}"
    );
    if !dir.join("node_modules/@modelcontextprotocol/sdk").is_dir() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .expect("npm is required to install the reference server's packages");
        assert!(status.success(), "npm ci in {} failed", dir.display());
    }
    let mut command = Command::new("node");
    command
        .arg(dir.join("reference-server.mjs"))
        .args(["--poll-interval", "100"])
        .current_dir(&dir)
        .stderr(Stdio::null());
    command
}

/// A connected client, plus whatever must outlive it (an in-process HTTP server).
struct Session {
    client: Client,
    #[cfg(feature = "http")]
    _http: Option<mcp_task_store::server::HttpServer>,
}

impl std::ops::Deref for Session {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

#[cfg(feature = "http")]
fn http_server() -> mcp_task_store::server::HttpServer {
    use mcp_task_store::server::{demo, HttpOptions, HttpServer, Server};
    let config = mcp_task_store::StoreConfig {
        poll_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let mut builder = Server::builder().store_config(config);
    for tool in demo::tools() {
        builder = builder.tool(tool);
    }
    HttpServer::bind(
        builder.build().unwrap(),
        "127.0.0.1:0",
        HttpOptions::default(),
    )
    .unwrap()
}

fn connect(target: Target, builder: ClientBuilder) -> Session {
    let client = match target {
        Target::Stdio(revision) => builder.revision(revision).connect_stdio(server_command()),
        Target::Reference => builder
            .revision(Revision::V2025)
            .connect_stdio(reference_command()),
        #[cfg(feature = "http")]
        Target::Http(revision) => {
            let http = http_server();
            let url = format!("http://{}/mcp", http.local_addr());
            let client = builder.revision(revision).connect_http(&url).unwrap();
            return Session {
                client,
                _http: Some(http),
            };
        }
    };
    Session {
        client: client.unwrap_or_else(|e| panic!("{target:?}: cannot connect: {e}")),
        #[cfg(feature = "http")]
        _http: None,
    }
}

/// Every target, for the scenarios both revisions share.
fn targets() -> Vec<Target> {
    let mut all = vec![
        Target::Stdio(Revision::V2025),
        Target::Stdio(Revision::Sep2663),
    ];
    #[cfg(feature = "http")]
    all.extend([
        Target::Http(Revision::V2025),
        Target::Http(Revision::Sep2663),
    ]);
    all.push(Target::Reference);
    all
}

/// An elicitation handler that answers every form and remembers what it was asked.
fn answering() -> (ClientBuilder, Arc<Mutex<Vec<InputRequest>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let builder = Client::builder().on_elicitation(move |request| {
        log.lock().push(request.clone());
        Ok(json!({
            "action": "accept",
            "content": {"answer": "42", "name": "Ada", "confirm": true},
        }))
    });
    (builder, asked)
}

fn text(result: &Value) -> &str {
    result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no text in {result}"))
}

/// Runs `check` on every target in parallel threads (each with its own server).
fn on_every_target(check: fn(Target)) {
    let threads: Vec<_> = targets()
        .into_iter()
        .map(|target| (target, std::thread::spawn(move || check(target))))
        .collect();
    for (target, thread) in threads {
        if thread.join().is_err() {
            panic!("failed on {target:?}");
        }
    }
}

#[test]
fn client_polls_a_task_to_completion_and_reports_progress() {
    on_every_target(|target| {
        let client = connect(target, Client::builder());
        let mut reports = Vec::new();
        let result = client
            .call_tool_with(
                "sleep",
                json!({"ms": 400}),
                CallOptions::new().on_progress(|p| reports.push(p.clone())),
            )
            .unwrap();
        assert_eq!(text(&result), "slept 400 ms", "{target:?}");
        assert!(!reports.is_empty(), "{target:?}: a task was followed");
        assert!(
            reports.iter().any(|p| p.polls >= 1),
            "{target:?}: {reports:?}"
        );
        let last = &reports.last().unwrap().task;
        assert!(
            last.poll_interval_ms == Some(100),
            "{target:?}: the server's interval: {last:?}"
        );
    });
}

#[test]
fn client_answers_the_ask_elicitation_through_its_handler() {
    on_every_target(|target| {
        let (builder, asked) = answering();
        let client = connect(target, builder);
        let result = client
            .call_tool("ask", json!({"question": "What is the answer?"}))
            .unwrap();
        assert_eq!(text(&result), "answer: 42", "{target:?}");
        let asked = asked.lock();
        assert_eq!(
            asked.len(),
            1,
            "{target:?}: each request handled once: {asked:?}"
        );
        assert_eq!(asked[0].method, "elicitation/create");
        assert_eq!(asked[0].params["message"], "What is the answer?");
        assert!(asked[0].task_id.is_some(), "{target:?}: tied to its task");
    });
}

#[test]
fn client_cancel_ends_a_followed_task_as_cancelled() {
    on_every_target(|target| {
        let client = connect(target, Client::builder());
        let created = client
            .call_tool_raw(&ToolCall::new("sleep", json!({"ms": 60_000})).as_task(None))
            .unwrap();
        let mcp_task_store::client::CallOutcome::Task(task) = created else {
            panic!("{target:?}: no task: {created:?}");
        };
        let cancelled = client.cancel_task(&task.task_id).unwrap();
        match client.revision() {
            Revision::V2025 => assert_eq!(cancelled.unwrap().status, TaskStatus::Cancelled),
            Revision::Sep2663 => assert!(cancelled.is_none(), "SEP-2663 only acknowledges"),
        }
        let polled = client.get_task(&task.task_id).unwrap();
        assert_eq!(polled.task.status, TaskStatus::Cancelled, "{target:?}");
        let error = client.follow_task(task, CallOptions::new()).unwrap_err();
        assert!(
            matches!(error, ClientError::TaskCancelled { .. }),
            "{target:?}: {error}"
        );
    });
}

#[test]
fn client_reports_failed_tasks_as_each_revision_defines_them() {
    on_every_target(|target| {
        let client = connect(target, Client::builder());
        let outcome = client.call_tool("fail", json!({"ms": 150}));
        match client.revision() {
            // 2025-11-25: an isError tool result ends the task failed.
            Revision::V2025 => match outcome.unwrap_err() {
                ClientError::TaskFailed {
                    task,
                    result: Some(result),
                    error: None,
                } => {
                    assert_eq!(task.status, TaskStatus::Failed);
                    assert_eq!(result["isError"], true);
                    assert_eq!(text(&result), "failed after 150 ms", "{target:?}");
                }
                other => panic!("{target:?}: {other:?}"),
            },
            // SEP-2663: isError completes the task; only a JSON-RPC error fails it.
            Revision::Sep2663 => {
                let result = outcome.unwrap();
                assert_eq!(result["isError"], true, "{target:?}");
                match client
                    .call_tool("protocol_error_job", json!({}))
                    .unwrap_err()
                {
                    ClientError::TaskFailed {
                        task,
                        error: Some(error),
                        ..
                    } => {
                        assert_eq!(task.status, TaskStatus::Failed);
                        assert_eq!(error.code, -32000, "{target:?}");
                    }
                    other => panic!("{target:?}: {other:?}"),
                }
            }
        }
    });
}

fn sep2663_targets() -> Vec<Target> {
    targets()
        .into_iter()
        .filter(|t| {
            matches!(t, Target::Stdio(Revision::Sep2663))
                || cfg!(feature = "http") && format!("{t:?}") == "Http(Sep2663)"
        })
        .collect()
}

#[test]
fn client_answers_two_input_requests_at_once_on_sep2663() {
    for target in sep2663_targets() {
        let (builder, asked) = answering();
        let client = connect(target, builder);
        let result = client.call_tool("multi_input", json!({})).unwrap();
        assert!(text(&result).starts_with("answers: "), "{result}");
        let asked = asked.lock();
        assert_eq!(asked.len(), 2, "{target:?}: {asked:?}");
        assert_ne!(asked[0].key, asked[1].key);
        assert_eq!(asked[0].task_id, asked[1].task_id);
        assert!(asked[0].task_id.is_some());
    }
}

#[test]
fn client_completes_test_tool_with_task_through_multi_round_trip() {
    for target in sep2663_targets() {
        let (builder, asked) = answering();
        let client = connect(target, builder);
        let mut polls = 0;
        let result = client
            .call_tool_with(
                "test_tool_with_task",
                json!({}),
                CallOptions::new().on_progress(|p| polls = p.polls),
            )
            .unwrap();
        assert_eq!(text(&result), "Hello, Ada! (from task)", "{target:?}");
        assert!(polls >= 1, "{target:?}: the repeated call became a task");
        let asked = asked.lock();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0].key, "user_name");
        assert_eq!(asked[0].task_id, None, "asked before any task existed");
    }
}

#[test]
fn client_manual_control_on_both_revisions() {
    // 2025-11-25: a raw task, the listing, and the blocking result.
    let client = connect(Target::Stdio(Revision::V2025), Client::builder());
    let created = client
        .call_tool_raw(&ToolCall::new("sleep", json!({"ms": 200})).as_task(Some(60_000)))
        .unwrap();
    let mcp_task_store::client::CallOutcome::Task(task) = created else {
        panic!("no task: {created:?}");
    };
    assert_eq!(task.ttl_ms, Some(60_000));
    let listed = client.list_tasks(None).unwrap();
    assert!(listed.tasks.iter().any(|t| t.task_id == task.task_id));
    let result = client.get_task_result(&task.task_id).unwrap();
    assert_eq!(text(&result), "slept 200 ms");
    assert!(matches!(
        client.update_task(&task.task_id, Default::default()),
        Err(ClientError::Unsupported(_))
    ));
    let plain = client
        .call_tool_raw(&ToolCall::new("echo", json!({"text": "hi"})))
        .unwrap();
    assert_eq!(
        plain,
        mcp_task_store::client::CallOutcome::Complete(
            json!({"content": [{"type": "text", "text": "hi"}]})
        )
    );

    // SEP-2663: answer an input request by hand with tasks/update (a client that does so
    // declares the capability: a server may only ask for declared input).
    let client = connect(
        Target::Stdio(Revision::Sep2663),
        Client::builder().declare("elicitation", json!({})),
    );
    let created = client
        .call_tool_raw(&ToolCall::new(
            "confirm_delete",
            json!({"filename": "a.txt"}),
        ))
        .unwrap();
    let mcp_task_store::client::CallOutcome::Task(task) = created else {
        panic!("no task: {created:?}");
    };
    let pending = poll_until(&client, &task.task_id, |t| {
        t.task.status == TaskStatus::InputRequired
    });
    let (key, request) = pending.input_requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    let answer = json!({"action": "accept", "content": {"confirm": true}});
    client
        .update_task(&task.task_id, [(key.clone(), answer)].into())
        .unwrap();
    let done = poll_until(&client, &task.task_id, |t| t.task.status.is_terminal());
    assert_eq!(text(done.result.as_ref().unwrap()), "deleted a.txt");
    assert!(matches!(
        client.list_tasks(None),
        Err(ClientError::Unsupported(_))
    ));
}

fn poll_until(
    client: &Client,
    task_id: &str,
    done: impl Fn(&mcp_task_store::client::PolledTask) -> bool,
) -> mcp_task_store::client::PolledTask {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let polled = client.get_task(task_id).unwrap();
        if done(&polled) {
            return polled;
        }
        assert!(Instant::now() < deadline, "never reached: {polled:?}");
        std::thread::yield_now();
    }
}

#[test]
fn client_deadline_cancels_the_task() {
    for revision in [Revision::V2025, Revision::Sep2663] {
        let client = connect(Target::Stdio(revision), Client::builder());
        let started = Instant::now();
        let mut task_id = None;
        let error = client
            .call_tool_with(
                "sleep",
                json!({"ms": 60_000}),
                CallOptions::new()
                    // The task must be created within it (else the error names no task):
                    // a round trip to the server process, on SEP-2663 after 50 ms inline,
                    // which a busy machine can stretch well past 500 ms.
                    .deadline(Duration::from_secs(2))
                    .on_progress(|p| task_id = Some(p.task.task_id.clone())),
            )
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        let ClientError::Deadline {
            task_id: Some(id), ..
        } = &error
        else {
            panic!("{revision:?}: {error:?}");
        };
        assert_eq!(Some(id), task_id.as_ref());
        let polled = client.get_task(id).unwrap();
        assert_eq!(polled.task.status, TaskStatus::Cancelled, "{revision:?}");
    }
}

#[test]
fn client_sees_a_server_that_dies_mid_task_as_a_transport_error() {
    for revision in [Revision::V2025, Revision::Sep2663] {
        let mut child: Child = server_command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let client = Client::builder()
            .revision(revision)
            .connect_streams(stdout, stdin)
            .unwrap();
        let started = Instant::now();
        let mut killed = false;
        let error = client
            .call_tool_with(
                "sleep",
                json!({"ms": 60_000}),
                CallOptions::new().on_progress(|_| {
                    if !killed {
                        child.kill().unwrap();
                        killed = true;
                    }
                }),
            )
            .unwrap_err();
        assert!(killed, "{revision:?}: the task was followed");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{revision:?}: no hang"
        );
        assert!(
            matches!(error, ClientError::Closed { .. }),
            "{revision:?}: {error:?}"
        );
        assert!(error.is_transport());
        // Later requests fail at once, the same way.
        assert!(matches!(
            client.get_task("anything"),
            Err(ClientError::Closed { .. })
        ));
        let _ = child.wait();
    }
}

/// A fake server on a socket pair: a task that stays `input_required` forever, always
/// showing the same input request (SEP-2663) or never sending one (2025-11-25). Returns
/// the methods it received, in order.
fn stuck_server(stream: UnixStream, revision: Revision) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut writer = stream.try_clone().unwrap();
        let mut seen = Vec::new();
        let task = json!({
            "taskId": "stuck-1", "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
        });
        let mut input_required = task.clone();
        input_required["status"] = json!("input_required");
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let message: Value = serde_json::from_str(&line).unwrap();
            let Some(method) = message["method"].as_str() else {
                continue; // a response
            };
            seen.push(method.to_owned());
            let Some(id) = message.get("id") else {
                continue; // a notification
            };
            let result = match (revision, method) {
                (_, "initialize") => json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}},
                    "serverInfo": {"name": "stuck", "version": "0"},
                }),
                (_, "server/discover") => json!({
                    "supportedVersions": ["2026-07-28"],
                    "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                }),
                (_, "tools/list") => json!({"tools": [{
                    "name": "hang", "inputSchema": {"type": "object"},
                    "execution": {"taskSupport": "required"},
                }]}),
                (Revision::V2025, "tools/call") => {
                    let mut created = task.clone();
                    created["ttl"] = Value::Null;
                    created["pollInterval"] = json!(5);
                    json!({ "task": created })
                }
                (Revision::Sep2663, "tools/call") => {
                    let mut created = task.clone();
                    created["resultType"] = json!("task");
                    created["ttlMs"] = Value::Null;
                    created["pollIntervalMs"] = json!(5);
                    created
                }
                (_, "tasks/result") => continue, // never answered
                (Revision::V2025, "tasks/get") => input_required.clone(),
                (Revision::Sep2663, "tasks/get") => {
                    let mut polled = input_required.clone();
                    polled["resultType"] = json!("complete");
                    polled["inputRequests"] = json!({"same-key": {
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "again?", "requestedSchema": {"type": "object"}},
                    }});
                    polled
                }
                (_, "tasks/update") => json!({"resultType": "complete"}),
                (Revision::V2025, "tasks/cancel") => {
                    let mut cancelled = task.clone();
                    cancelled["status"] = json!("cancelled");
                    cancelled
                }
                (Revision::Sep2663, "tasks/cancel") => json!({"resultType": "complete"}),
                _ => json!({}),
            };
            let response = json!({"jsonrpc": "2.0", "id": id, "result": result});
            if writeln!(writer, "{response}").is_err() {
                break;
            }
        }
        seen
    })
}

#[test]
fn client_stuck_detector_cancels_a_task_that_never_leaves_input_required() {
    for revision in [Revision::V2025, Revision::Sep2663] {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = stuck_server(theirs, revision);
        let (builder, asked) = answering();
        let control = ours.try_clone().unwrap();
        let client = builder
            .revision(revision)
            .stuck_polls(5)
            .connect_streams(ours.try_clone().unwrap(), ours)
            .unwrap();
        let error = client.call_tool("hang", json!({})).unwrap_err();
        match &error {
            ClientError::Stuck {
                task_id,
                polls,
                cancelled,
            } => {
                assert_eq!((task_id.as_str(), *polls), ("stuck-1", 5), "{revision:?}");
                assert!(*cancelled, "{revision:?}: the server accepted the cancel");
            }
            other => panic!("{revision:?}: {other:?}"),
        }
        // The fake server's loop ends when our end of the socket closes.
        drop(client);
        control.shutdown(std::net::Shutdown::Both).unwrap();
        let seen = server.join().unwrap();
        // SEP-2663 acknowledges any cancel, so the client looks once more whether the task
        // ended otherwise meanwhile.
        let last: &[&str] = match revision {
            Revision::V2025 => &["tasks/cancel"],
            Revision::Sep2663 => &["tasks/cancel", "tasks/get"],
        };
        let tail: Vec<&str> = seen[seen.len().saturating_sub(last.len())..]
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(tail, last, "{revision:?}: {seen:?}");
        let gets = seen.iter().filter(|m| *m == "tasks/get").count();
        match revision {
            // The one key was answered once (the first poll brought it), then 5 stale polls
            // and the look after the cancel.
            Revision::Sep2663 => {
                assert_eq!(asked.lock().len(), 1, "answered once, not per poll");
                assert_eq!(seen.iter().filter(|m| *m == "tasks/update").count(), 1);
                assert_eq!(gets, 7, "{seen:?}");
            }
            Revision::V2025 => {
                assert!(asked.lock().is_empty());
                assert_eq!(gets, 5, "{seen:?}");
                assert!(seen.contains(&"tasks/result".to_string()));
            }
        }
    }
}

#[test]
fn client_follows_status_messages_of_a_counting_task() {
    let client = connect(Target::Stdio(Revision::V2025), Client::builder());
    let mut messages = Vec::new();
    let result = client
        .call_tool_with(
            "count",
            json!({"to": 3, "ms": 200}),
            CallOptions::new().on_progress(|p| messages.extend(p.task.status_message.clone())),
        )
        .unwrap();
    assert_eq!(text(&result), "counted to 3");
    assert!(
        messages.iter().any(|m| m.ends_with(" of 3")),
        "{messages:?}"
    );
}

#[test]
fn client_refuses_an_oversized_server_message_with_a_clear_error() {
    use std::io::Read;
    // A "server" whose first line never ends: 65 MB without a newline.
    let endless = std::io::repeat(b'x').take(65 * 1024 * 1024);
    let started = Instant::now();
    let error = Client::builder()
        .connect_streams(endless, std::io::sink())
        .expect_err("the handshake cannot succeed");
    assert!(error.is_transport(), "{error:?}");
    assert!(error.to_string().contains("larger than"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(30), "no hang");
}

#[cfg(feature = "http")]
#[test]
fn a_tool_whose_name_needs_encoding_in_a_header_is_called_over_http() {
    use mcp_task_store::server::{text_result, HttpOptions, HttpServer, Server, TaskSupport, Tool};
    let name = "météo du jour";
    let tool = Tool::new(
        name,
        "Answers with a fixed forecast",
        json!({"type": "object"}),
        TaskSupport::Forbidden,
        |_, _| Ok(text_result("sunny")),
    );
    let server = Server::builder().tool(tool).build().unwrap();
    let http = HttpServer::bind(server, "127.0.0.1:0", HttpOptions::default()).unwrap();
    let url = format!("http://{}/mcp", http.local_addr());
    for revision in [Revision::V2025, Revision::Sep2663] {
        // SEP-2663 sends the name in `Mcp-Name`, as `=?base64?...?=` since it is not ASCII;
        // the server decodes it before comparing it with the body.
        let client = Client::builder()
            .revision(revision)
            .connect_http(&url)
            .unwrap();
        let result = client.call_tool(name, json!({})).unwrap();
        assert_eq!(text(&result), "sunny", "{revision:?}");
    }
}

/// A tool that lists its client's roots gets them from the client's `on_roots` handler,
/// as a request on 2025-11-25 and as a task's input request on SEP-2663.
#[cfg(feature = "http")]
#[test]
fn a_tools_roots_request_is_answered_by_the_roots_handler() {
    use mcp_task_store::server::{text_result, HttpOptions, HttpServer, Server, TaskSupport, Tool};
    let tool = Tool::new(
        "first_root",
        "Names the client's first root",
        json!({"type": "object"}),
        TaskSupport::Required,
        |_, ctx| {
            let roots = ctx.list_roots()?;
            Ok(text_result(
                roots["roots"][0]["uri"].as_str().unwrap_or("none"),
            ))
        },
    );
    let server = Server::builder().tool(tool).build().unwrap();
    let http = HttpServer::bind(server, "127.0.0.1:0", HttpOptions::default()).unwrap();
    let url = format!("http://{}/mcp", http.local_addr());
    for revision in [Revision::V2025, Revision::Sep2663] {
        let client = Client::builder()
            .revision(revision)
            .poll_interval(Duration::from_millis(20))
            .on_roots(|_| Ok(json!({"roots": [{"uri": "file:///home/ada/project"}]})))
            .connect_http(&url)
            .unwrap();
        let result = client.call_tool("first_root", json!({})).unwrap();
        assert_eq!(text(&result), "file:///home/ada/project", "{revision:?}");
    }
}

#[test]
fn declared_extensions_go_along_with_the_tasks_extension_on_sep2663() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    // Answers the handshake and one ping, and returns what it read.
    let server = std::thread::spawn(move || {
        let mut writer = theirs.try_clone().unwrap();
        let mut lines = BufReader::new(theirs).lines();
        let mut seen = Vec::new();
        for _ in 0..2 {
            let request: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            let result = match request["method"].as_str() {
                Some("server/discover") => json!({
                    "supportedVersions": ["2026-07-28"],
                    "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                }),
                _ => json!({}),
            };
            let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
            writeln!(writer, "{answer}").unwrap();
            seen.push(request);
        }
        seen
    });
    let client = Client::builder()
        .revision(Revision::Sep2663)
        .declare("extensions", json!({"example.com/other": {"level": 2}}))
        .connect_streams(ours.try_clone().unwrap(), ours)
        .unwrap();
    client.request("ping", json!({})).unwrap();
    let seen = server.join().unwrap();
    for request in &seen {
        let declared = &request["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"];
        assert_eq!(
            declared["extensions"],
            json!({"example.com/other": {"level": 2}, "io.modelcontextprotocol/tasks": {}}),
            "{request}"
        );
    }
}

/// A SEP-2663 client on a server that suggests polling once an hour.
fn connect_slow_polling(target: Target, builder: ClientBuilder) -> Session {
    let builder = builder
        .revision(Revision::Sep2663)
        .poll_interval(Duration::from_secs(3600))
        .max_poll_interval(Duration::from_secs(3600));
    match target {
        Target::Stdio(_) => {
            let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-task-server"));
            command
                .args(["--poll-interval", "1h", "--log", "warn"])
                .stderr(Stdio::null());
            Session {
                client: builder.connect_stdio(command).unwrap(),
                #[cfg(feature = "http")]
                _http: None,
            }
        }
        #[cfg(feature = "http")]
        Target::Http(_) => {
            use mcp_task_store::server::{demo, HttpOptions, HttpServer, Server};
            let config = mcp_task_store::StoreConfig {
                poll_interval: Duration::from_secs(3600),
                ..Default::default()
            };
            let mut server = Server::builder().store_config(config);
            for tool in demo::tools() {
                server = server.tool(tool);
            }
            let http = HttpServer::bind(
                server.build().unwrap(),
                "127.0.0.1:0",
                HttpOptions::default(),
            )
            .unwrap();
            let url = format!("http://{}/mcp", http.local_addr());
            Session {
                client: builder.connect_http(&url).unwrap(),
                _http: Some(http),
            }
        }
        Target::Reference => unreachable!("2025-11-25 only"),
    }
}

#[test]
fn a_sep2663_client_looks_at_its_task_as_soon_as_the_server_says_it_changed() {
    for target in sep2663_targets() {
        // Polling alone would look again in an hour: the calls would hang.
        let client = connect_slow_polling(target, Client::builder());
        let (done, results) = crossbeam_channel::bounded(2);
        std::thread::spawn(move || {
            // The first task's subscription ended with it: the second is followed alike.
            for ms in [100, 0] {
                let outcome = client.call_tool("sleep_required", json!({ "ms": ms }));
                done.send(outcome.map(|r| text(&r).to_owned())).unwrap();
            }
        });
        for ms in [100, 0] {
            let outcome = results
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("{target:?}: the call waits for its next poll"));
            assert_eq!(outcome.unwrap(), format!("slept {ms} ms"), "{target:?}");
        }
    }
}
