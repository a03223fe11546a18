//! The server's dispatcher without the binary: every method and error path, tools run as
//! tasks, elicitation round trips, cancellation and expiry, through a `Connection` whose
//! responses and outgoing messages land on channels.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use mcp_task_store::protocol::RpcError;
use mcp_task_store::server::{demo, text_result, Connection, Server, TaskSupport, Tool};
use mcp_task_store::{ManualClock, Store, StoreEvent, StoreHandle, TaskStore};
use serde_json::{json, Value};

use crate::fixtures::{boom_tool, panic_tool, OnlyRequired};

const WAIT: Duration = Duration::from_secs(10);

struct Harness {
    server: Server,
    connection: Arc<Connection>,
    /// Server-to-client requests and notifications.
    outgoing: Receiver<Value>,
    responses: (Sender<Value>, Receiver<Value>),
    next_id: i64,
    _store: Option<Store>,
}

/// `[[[…]]]`, `depth` levels deep.
fn nested(depth: usize) -> Value {
    (1..depth).fold(json!([]), |inner, _| json!([inner]))
}

/// A task tool whose result nests deeper than a store keeps (a Rust tool may build one).
fn deep_tool() -> Tool {
    Tool::new(
        "deep",
        "Returns a result nested too deep",
        json!({"type": "object"}),
        TaskSupport::Required,
        |_, _| Ok(json!({"content": [], "structuredContent": {"tree": nested(200)}})),
    )
}

/// A task tool that asks the client with params nested deeper than a store keeps, and
/// fails with the error it got.
/// A tool that may run as a task and asks its client a question at once.
fn ask_maybe_tool() -> Tool {
    Tool::new(
        "ask_maybe",
        "Asks `?` through elicitation; may run as a task",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |_, ctx| {
            let answer =
                ctx.elicit(json!({"message": "?", "requestedSchema": {"type": "object"}}))?;
            Ok(text_result(answer.to_string()))
        },
    )
}

/// A tool that may run as a task and returns its argument `result` as it is (a tool that
/// passes on what another server answered, say).
fn passthrough_tool() -> Tool {
    Tool::new(
        "passthrough",
        "Returns `result` as it is; may run as a task",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |args, _| Ok(args["result"].clone()),
    )
}

fn deep_ask_tool() -> Tool {
    Tool::new(
        "deep_ask",
        "Asks with params nested too deep",
        json!({"type": "object"}),
        TaskSupport::Required,
        |_, ctx| {
            let asked = ctx.request_input(vec![(
                "elicitation/create".to_owned(),
                json!({"message": "?", "requestedSchema": nested(195)}),
            )]);
            Err(match asked {
                Ok(_) => RpcError::internal("answered"),
                Err(error) => error,
            })
        },
    )
}

/// How many runs of [`chatty_ask_tool`] have sent all their status messages.
static CHATTY_DONE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Asks `?` through elicitation while another of its threads reports `step 0` to
/// `step 199` as the status message (then counts in [`CHATTY_DONE`]).
fn chatty_ask_tool() -> Tool {
    Tool::new(
        "chatty_ask",
        "Asks while reporting progress from another thread",
        json!({"type": "object"}),
        TaskSupport::Required,
        |_, ctx| {
            let start = std::sync::Barrier::new(2);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    start.wait();
                    for step in 0..200 {
                        let _ = ctx.set_status_message(format!("step {step}"));
                    }
                    CHATTY_DONE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
                start.wait();
                let answer =
                    ctx.elicit(json!({"message": "?", "requestedSchema": {"type": "object"}}))?;
                Ok(text_result(answer.to_string()))
            })
        },
    )
}

/// How many of [`two_asks_tool`]'s questions got their answer (and the tool moved on), in
/// its runs called with `counted: true` (one test's).
static TWO_ASKS_ANSWERED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Asks two questions through elicitation at once, from two of its threads, and returns
/// both answers.
fn two_asks_tool() -> Tool {
    Tool::new(
        "two_asks",
        "Asks two questions at once from two threads",
        json!({"type": "object"}),
        TaskSupport::Required,
        |args, ctx| {
            let ask = || {
                let answer =
                    ctx.elicit(json!({"message": "?", "requestedSchema": {"type": "object"}}));
                if args["counted"] == true {
                    TWO_ASKS_ANSWERED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                answer
            };
            let (first, second) = std::thread::scope(|scope| {
                let first = scope.spawn(ask);
                let second = scope.spawn(ask);
                (first.join().unwrap(), second.join().unwrap())
            });
            Ok(text_result(format!("{} {}", first?, second?)))
        },
    )
}

/// How many times [`counted_tool`] ran.
static COUNTED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A tool with a side effect to see: each run counts in [`COUNTED_RUNS`].
fn counted_tool() -> Tool {
    Tool::new(
        "counted",
        "Counts its runs",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |_, _| {
            COUNTED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(text_result("counted".to_owned()))
        },
    )
}

/// A task tool that asks for no input at all, and returns how many answers it got.
fn ask_nothing_tool() -> Tool {
    Tool::new(
        "ask_nothing",
        "Asks for nothing",
        json!({"type": "object"}),
        TaskSupport::Required,
        |_, ctx| {
            let answers = ctx.request_input(Vec::new())?;
            Ok(text_result(format!("{} answers", answers.len())))
        },
    )
}

fn progress_tool() -> Tool {
    Tool::new(
        "progress",
        "Sets a status message",
        json!({"type": "object"}),
        TaskSupport::Required,
        |_, ctx| {
            ctx.set_status_message("half way")
                .map_err(RpcError::internal)?;
            let task = ctx.task_id().expect("runs as a task");
            Ok(text_result(task.to_string()))
        },
    )
}

impl Harness {
    fn with_store(store: Option<StoreHandle>, page_size: usize) -> Harness {
        let store = store.map(|handle| Arc::new(handle) as Arc<dyn TaskStore>);
        Harness::build(store, page_size, 4, None)
    }

    /// A server whose tools run on `workers` threads.
    fn with_workers(workers: usize) -> Harness {
        Harness::build(None, 100, workers, None)
    }

    /// A server on `store` (its own, with `page_size`, without one), its tools on
    /// `workers` threads, SEP-2663 calls promoted after `promote_after` (default without).
    fn build(
        store: Option<Arc<dyn TaskStore>>,
        page_size: usize,
        workers: usize,
        promote_after: Option<Duration>,
    ) -> Harness {
        let mut builder = Server::builder().workers(workers);
        if let Some(budget) = promote_after {
            builder = builder.promote_after(budget);
        }
        builder = match store {
            Some(store) => builder.store(store),
            None => builder.store_config(mcp_task_store::StoreConfig {
                page_size,
                ..Default::default()
            }),
        };
        for tool in demo::tools().into_iter().chain([
            boom_tool(),
            panic_tool(),
            progress_tool(),
            chatty_ask_tool(),
            deep_tool(),
            deep_ask_tool(),
            ask_maybe_tool(),
            passthrough_tool(),
            payload_bomb_tool(),
            counted_tool(),
            ask_nothing_tool(),
            two_asks_tool(),
        ]) {
            builder = builder.tool(tool);
        }
        let server = builder.build().unwrap();
        let (tx, outgoing) = crossbeam_channel::unbounded();
        let connection = server.connect(tx, None);
        Harness {
            server,
            connection,
            outgoing,
            responses: crossbeam_channel::unbounded(),
            next_id: 0,
            _store: None,
        }
    }

    fn new() -> Harness {
        Harness::with_store(None, 100)
    }

    /// Connects anew with an outgoing queue of `capacity` messages, as transports have.
    fn bounded_outgoing(&mut self, capacity: usize) {
        let (tx, outgoing) = crossbeam_channel::bounded(capacity);
        self.connection = self.server.connect(tx, None);
        self.outgoing = outgoing;
    }

    /// Sends raw text; returns the response (waiting for asynchronous answers).
    fn send_text(&self, text: &str) -> Value {
        let responses = self.responses.0.clone();
        self.connection
            .handle_text(text, Box::new(move |v| responses.send(v).unwrap()));
        self.responses.1.recv_timeout(WAIT).expect("a response")
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let text =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let response = self.send_text(&text.to_string());
        assert_eq!(response["id"], json!(self.next_id), "{response}");
        response
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    fn error_code(&mut self, method: &str, params: Value) -> i64 {
        let response = self.request(method, params);
        response["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("{method}: no error in {response}"))
    }

    fn initialize(&mut self, capabilities: Value) -> Value {
        self.result(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "0"}}),
        )
    }

    fn start(&mut self, tool: &str, arguments: Value) -> String {
        let created = self.create(tool, arguments);
        assert_eq!(created["status"], "working", "{created}");
        created["taskId"].as_str().unwrap().to_string()
    }

    /// Starts a task as [`start`](Self::start) does, whatever status it is created in.
    fn start_any(&mut self, tool: &str, arguments: Value) -> String {
        self.create(tool, arguments)["taskId"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The task a task-augmented `tools/call` created.
    fn create(&mut self, tool: &str, arguments: Value) -> Value {
        let created = self.result(
            "tools/call",
            json!({"name": tool, "arguments": arguments, "task": {"ttl": 60000}}),
        );
        created["task"].clone()
    }

    /// Feeds the store's events to the connection, as the stdio transport does.
    fn pump_events(&self) -> std::thread::JoinHandle<()> {
        let events = self.server.store().subscribe().unwrap();
        let connection = self.connection.clone();
        std::thread::spawn(move || {
            for event in events {
                connection.handle_store_event(&event);
            }
        })
    }

    fn next_outgoing(&self, method: &str) -> Value {
        loop {
            let message = self
                .outgoing
                .recv_timeout(WAIT)
                .expect("an outgoing message");
            if message["method"] == method {
                return message;
            }
        }
    }
}

#[test]
fn initialize_declares_tasks_and_negotiates_the_version() {
    let mut h = Harness::new();
    let result = h.initialize(json!({}));
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(
        result["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
    );
    assert!(result["capabilities"]["tools"].is_object());
    let older = h.result(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
    );
    assert_eq!(older["protocolVersion"], "2025-06-18");
    let unknown = h.result("initialize", json!({"protocolVersion": "1999-01-01"}));
    assert_eq!(unknown["protocolVersion"], "2025-11-25");
    // Capabilities are an object, or absent.
    for capabilities in [json!(5), json!("tasks"), json!([{"elicitation": {}}])] {
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": capabilities});
        assert_eq!(h.error_code("initialize", params), -32602, "{capabilities}");
    }
}

#[test]
fn ping_answers_an_empty_object() {
    assert_eq!(Harness::new().result("ping", json!({})), json!({}));
}

#[test]
fn tools_list_shows_each_tools_task_support() {
    let mut h = Harness::new();
    let tools = h.result("tools/list", json!({}));
    let support = |name: &str| {
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["execution"]["taskSupport"]
            .clone()
    };
    assert_eq!(support("sleep"), "optional");
    assert_eq!(support("sleep_required"), "required");
    assert_eq!(support("fail"), "optional");
    assert_eq!(support("echo"), "forbidden");
    assert_eq!(support("ask"), "required");
}

#[test]
fn a_plain_call_returns_the_tool_result() {
    let mut h = Harness::new();
    let result = h.result(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    assert_eq!(result, text_result("hi"));
    let slept = h.result(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 1}}),
    );
    assert_eq!(slept, text_result("slept 1 ms"));
}

#[test]
fn task_support_mismatches_are_method_not_found() {
    let mut h = Harness::new();
    assert_eq!(
        h.error_code(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}, "task": {}})
        ),
        -32601
    );
    assert_eq!(
        h.error_code(
            "tools/call",
            json!({"name": "sleep_required", "arguments": {"ms": 1}})
        ),
        -32601
    );
    assert_eq!(
        h.error_code(
            "tools/call",
            json!({"name": "ask", "arguments": {"question": "?"}})
        ),
        -32601
    );
}

#[test]
fn bad_tool_calls_are_invalid_params() {
    let mut h = Harness::new();
    assert_eq!(h.error_code("tools/call", json!({"name": "nope"})), -32602);
    assert_eq!(h.error_code("tools/call", json!({"arguments": {}})), -32602);
    assert_eq!(
        h.error_code("tools/call", json!({"name": "echo", "arguments": [1]})),
        -32602
    );
    assert_eq!(
        h.error_code(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": 5}})
        ),
        -32602
    );
    assert_eq!(
        h.error_code(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 1}, "task": {"ttl": -5}})
        ),
        -32602
    );
}

/// A client may ask for any TTL up to `u64::MAX` ms; the store grants at most 100 years
/// (`StoreConfig::MAX_DURATION`) even with no `max_ttl`, so the `ttl` it reports is the
/// one it keeps and a JavaScript client reads it exactly.
#[test]
fn a_huge_requested_ttl_is_granted_as_100_years_and_reported_exactly() {
    const CEILING_MS: u64 = 3_153_600_000_000;
    let mut h = Harness::new();
    h.initialize(json!({}));
    for ttl in [json!(u64::MAX), json!(1u64 << 53), json!(CEILING_MS + 1)] {
        let created = h.result(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 1}, "task": {"ttl": ttl}}),
        );
        assert_eq!(created["task"]["ttl"], json!(CEILING_MS), "{created}");
        let id = created["task"]["taskId"].clone();
        let task = h.result("tasks/get", json!({"taskId": id}));
        assert_eq!(task["ttl"], json!(CEILING_MS), "{task}");
    }
    // Past u64 (or not an integer) it is no TTL in milliseconds at all.
    for ttl in [json!(1e20), json!(18446744073709551616.0), json!(1.5)] {
        let params = json!({"name": "sleep", "arguments": {"ms": 1}, "task": {"ttl": ttl}});
        assert_eq!(h.error_code("tools/call", params), -32602, "{ttl}");
    }
}

/// Found by `hostile::messages_2025` (minimised: a task-augmented `tools/call` with
/// `"task": []`): serde reads a struct from an array too, so `[]` (or `[60000]`) was taken
/// for a `TaskMetadata` and started a task. `params.task` is an object; anything else is
/// a wrong type.
#[test]
fn a_task_param_that_is_not_an_object_is_invalid_params() {
    let mut h = Harness::new();
    h.initialize(json!({}));
    for task in [json!([]), json!([60000]), json!("x"), json!(true)] {
        let params = json!({"name": "sleep", "arguments": {"ms": 1}, "task": task});
        assert_eq!(h.error_code("tools/call", params), -32602, "{task}");
    }
    let tasks = h.server.store().list(None, None).unwrap().tasks;
    assert!(tasks.is_empty(), "no task started: {tasks:?}");
}

#[test]
fn a_task_runs_to_completion_and_its_result_carries_related_task_meta() {
    let mut h = Harness::new();
    let id = h.start("sleep", json!({"ms": 20}));
    let task = h.result("tasks/get", json!({"taskId": id}));
    assert_eq!(task["taskId"], id.as_str());
    assert_eq!(task["ttl"], 60000);
    let result = h.result("tasks/result", json!({"taskId": id}));
    assert_eq!(result["content"][0]["text"], "slept 20 ms");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "completed"
    );
}

/// A task keeps the `tools/call` it came from, and which revision it was served under
/// (what a store's `get_detail` and its journal show), for either revision.
#[test]
fn a_task_keeps_its_originating_call_and_the_revision_it_spoke() {
    let mut h = Harness::new();
    let store = h.server.store();
    let origin = |id: &str| {
        let id = mcp_task_store::TaskId::parse(id).expect("a task id");
        let detail = store.get_detail(id, None).expect("the task");
        detail.origin.expect("an origin").to_value()
    };
    let arguments = json!({"ms": 0});
    let id = h.start_any("sleep", arguments.clone());
    assert_eq!(
        origin(&id),
        json!({
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": arguments, "task": {"ttl": 60000}},
            "revision": "2025-11-25",
        })
    );
    let created = h.call_2026("progress", json!({}), true);
    let id = created["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let recorded = origin(&id);
    assert_eq!(recorded["revision"], "sep-2663", "{recorded}");
    assert_eq!(recorded["params"]["name"], "progress", "{recorded}");
}

#[test]
fn tasks_result_on_a_finished_task_is_answered_while_every_waiting_place_is_taken() {
    use mcp_task_store::{CreateTask, Outcome, TaskStatus};
    let store = Store::builder().build().unwrap();
    let handle = store.handle();
    let mut h = Harness::with_store(Some(store.handle()), 100);
    h._store = Some(store);
    // 256 tasks/result calls (the most one connection may have waiting) on tasks nobody
    // finishes, sent without waiting for their answers.
    let (waiting_tx, waiting) = crossbeam_channel::unbounded();
    let live: Vec<_> = (0..256)
        .map(|n| {
            let task = handle.create(CreateTask::new()).unwrap();
            let text = json!({"jsonrpc": "2.0", "id": format!("w{n}"), "method": "tasks/result",
                              "params": {"taskId": task.task_id.to_string()}});
            let waiting_tx = waiting_tx.clone();
            h.connection.handle_text(
                &text.to_string(),
                Box::new(move |v| waiting_tx.send(v).unwrap()),
            );
            task.task_id
        })
        .collect();
    // One more on a live task is refused...
    let extra = handle.create(CreateTask::new()).unwrap();
    let refused = h.request("tasks/result", json!({"taskId": extra.task_id.to_string()}));
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    // ...but one on a finished task needs no waiting place and gets its result.
    let done = handle.create(CreateTask::new()).unwrap();
    handle
        .store_result(
            done.task_id,
            None,
            TaskStatus::Completed,
            Outcome::result(text_result("done")),
            None,
        )
        .unwrap();
    let result = h.result("tasks/result", json!({"taskId": done.task_id.to_string()}));
    assert_eq!(result["content"][0]["text"], "done");
    // So are unknown ids.
    assert_eq!(
        h.error_code(
            "tasks/result",
            json!({"taskId": "00000000-0000-4000-8000-000000000000"})
        ),
        -32602
    );
    // Finishing the live tasks answers every waiting call.
    for id in live {
        handle.cancel(id, None, None).unwrap();
    }
    for _ in 0..256 {
        let answer = waiting.recv_timeout(WAIT).expect("a waiting call answered");
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    }
}

#[test]
fn zero_workers_queue_or_waiting_places_are_refused_at_build() {
    use mcp_task_store::StoreError;
    let builds = [
        ("workers", Server::builder().workers(0).build()),
        ("queue", Server::builder().queue(0).build()),
        (
            "max_waiting_results",
            Server::builder().max_waiting_results(0).build(),
        ),
    ];
    for (name, built) in builds {
        match built {
            Err(StoreError::InvalidConfig { field, .. }) => assert_eq!(field, name),
            other => panic!("{name}: {:?}", other.map(|_| ())),
        }
    }
}

/// Any queue length is a valid bound on the calls that wait for a worker (`usize::MAX`:
/// no bound): building the server neither panics nor sets memory aside for the calls
/// that may one day wait.
#[test]
fn a_server_builds_and_serves_with_any_queue_length() {
    for queue in [1 << 40, usize::MAX] {
        let server = Server::builder()
            .queue(queue)
            .tool(
                demo::tools()
                    .into_iter()
                    .find(|t| t.name() == "echo")
                    .unwrap(),
            )
            .build()
            .expect("any queue length but 0 is valid");
        let (tx, _outgoing) = crossbeam_channel::unbounded();
        let connection = server.connect(tx, None);
        let (answer_tx, answers) = crossbeam_channel::bounded(1);
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "echo", "arguments": {"text": "hi"}}});
        connection.handle_text(
            &call.to_string(),
            Box::new(move |answer| answer_tx.send(answer).unwrap()),
        );
        let answer = answers.recv_timeout(WAIT).expect("an answer");
        assert_eq!(answer["result"]["content"][0]["text"], "hi", "{answer}");
    }
}

/// A server on a store of its own where at most `max` `tasks/result` calls may wait, with
/// one channel that every request sent through [`send`](Self::send) is answered on.
struct WaitingPlaces {
    _store: Store,
    handle: StoreHandle,
    server: Server,
    answers_tx: Sender<Value>,
    answers: Receiver<Value>,
}

impl WaitingPlaces {
    fn new(max: usize) -> WaitingPlaces {
        // The store's clock stands still, so no wait ends by timing out: a call its client
        // cancels, or whose connection closes, has to be stopped.
        let store = Store::builder().clock(ManualClock::new()).build().unwrap();
        let server = Server::builder()
            .store(Arc::new(store.handle()))
            .max_waiting_results(max)
            .build()
            .unwrap();
        let (answers_tx, answers) = crossbeam_channel::unbounded();
        WaitingPlaces {
            handle: store.handle(),
            _store: store,
            server,
            answers_tx,
            answers,
        }
    }

    fn connect(&self) -> Arc<Connection> {
        self.server.connect(crossbeam_channel::unbounded().0, None)
    }

    /// A task nobody finishes (until the test cancels it).
    fn live_task(&self) -> String {
        let task = self.handle.create(mcp_task_store::CreateTask::new());
        task.unwrap().task_id.to_string()
    }

    fn send(&self, connection: &Arc<Connection>, message: Value) {
        let answers_tx = self.answers_tx.clone();
        connection.handle_text(
            &message.to_string(),
            Box::new(move |v| answers_tx.send(v).unwrap()),
        );
    }

    /// Sends `tasks/result` with request id `id` for `task`.
    fn wait_for(&self, connection: &Arc<Connection>, id: &str, task: &str) {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tasks/result",
                             "params": {"taskId": task}});
        self.send(connection, message);
    }

    fn cancel_task(&self, task: &str) {
        self.handle
            .cancel(task.parse().unwrap(), None, None)
            .unwrap();
    }

    fn answer(&self) -> Value {
        self.answers.recv_timeout(WAIT).expect("an answer")
    }
}

#[test]
fn waiting_tasks_result_calls_are_bounded_across_connections() {
    let w = WaitingPlaces::new(2);
    let connections: Vec<_> = (0..3).map(|_| w.connect()).collect();
    let live = w.live_task();
    // Two connections take the server's two places...
    w.wait_for(&connections[0], "1", &live);
    w.wait_for(&connections[1], "1", &live);
    // ...so a third connection, with all of its own places free, is refused.
    w.wait_for(&connections[2], "1", &live);
    let refused = w.answer();
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(w.answers.try_recv().is_err(), "the first two still wait");
    // Ending the task answers both and gives their places back.
    w.cancel_task(&live);
    w.answer();
    w.answer();
    let next = w.live_task();
    w.wait_for(&connections[2], "2", &next);
    assert!(
        w.answers.recv_timeout(Duration::from_millis(200)).is_err(),
        "a place is free again, so the call waits"
    );
    w.cancel_task(&next);
    w.answer();
}

#[test]
fn a_waiting_tasks_result_the_client_cancels_gives_its_place_back() {
    let w = WaitingPlaces::new(1);
    let connection = w.connect();
    let live = w.live_task();
    w.wait_for(&connection, "a", &live);
    w.send(
        &connection,
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": "a"}}),
    );
    // The cancelled call stops waiting (it used to wait for as long as the task ran), with
    // no response...
    let cancelled = w.answer();
    assert_eq!(cancelled, Value::Null, "{cancelled}");
    // ...and its place is free again: the next call waits rather than being refused.
    w.wait_for(&connection, "b", &live);
    w.cancel_task(&live);
    let answer = w.answer();
    assert_eq!(answer["id"], "b", "{answer}");
    assert_eq!(
        answer["error"]["code"], -32602,
        "the task's end, not a refusal: {answer}"
    );
}

#[test]
fn closing_ends_every_waiting_tasks_result_even_under_a_reused_request_id() {
    let w = WaitingPlaces::new(2);
    let live = w.live_task();
    let first = w.connect();
    // A client that wrongly reuses a request id still waits twice...
    w.wait_for(&first, "x", &live);
    w.wait_for(&first, "x", &live);
    // ...and closing its connection ends both calls.
    first.close();
    for _ in 0..2 {
        let ended = w.answer();
        assert_eq!(ended["id"], "x", "{ended}");
        assert!(ended["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection closed"));
    }
    // Both places are free again.
    let second = w.connect();
    w.wait_for(&second, "y", &live);
    w.wait_for(&second, "z", &live);
    w.cancel_task(&live);
    for _ in 0..2 {
        let answer = w.answer();
        assert_eq!(answer["error"]["code"], -32602, "not refused: {answer}");
    }
}

/// A call that ends gives back only its own place under a reused request id: the other
/// call under that id still waits, and a cancel naming the id still reaches it.
#[test]
fn a_waiting_tasks_result_stays_cancellable_after_another_under_its_id_ends() {
    let w = WaitingPlaces::new(2);
    let connection = w.connect();
    let (first, second) = (w.live_task(), w.live_task());
    // A client that wrongly reuses a request id waits on two tasks...
    w.wait_for(&connection, "x", &first);
    w.wait_for(&connection, "x", &second);
    // ...the first ends, and its call is answered...
    w.cancel_task(&first);
    let answer = w.answer();
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    // ...and a cancel for the id still ends the second, with no response.
    w.send(
        &connection,
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": "x"}}),
    );
    let cancelled = w.answer();
    assert_eq!(cancelled, Value::Null, "{cancelled}");
}

#[test]
fn an_is_error_result_fails_the_task_but_tasks_result_returns_it() {
    let mut h = Harness::new();
    let id = h.start("fail", json!({"ms": 1}));
    let result = h.result("tasks/result", json!({"taskId": id}));
    assert_eq!(result["isError"], true);
    let task = h.result("tasks/get", json!({"taskId": id}));
    assert_eq!(task["status"], "failed");
    assert_eq!(task["statusMessage"], "Tool error: failed after 1 ms");
}

#[test]
fn a_json_rpc_error_fails_the_task_and_tasks_result_returns_the_same_error() {
    let mut h = Harness::new();
    let id = h.start("boom", json!({}));
    let response = h.request("tasks/result", json!({"taskId": id}));
    assert_eq!(
        response["error"],
        json!({"code": -32000, "message": "boom", "data": {"why": "testing"}})
    );
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "failed"
    );
}

#[test]
fn a_panicking_tool_fails_its_task_and_the_server_keeps_serving() {
    let mut h = Harness::new();
    let id = h.start("panic", json!({}));
    assert_eq!(
        h.request("tasks/result", json!({"taskId": id}))["error"]["code"],
        -32603
    );
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "failed"
    );
    assert_eq!(h.error_code("tools/call", json!({"name": "panic"})), -32603);
    assert_eq!(h.result("ping", json!({})), json!({}));
}

#[test]
fn a_tool_can_report_progress_through_the_status_message() {
    let mut h = Harness::new();
    let _pump = h.pump_events();
    let id = h.start("progress", json!({}));
    let progress = h.next_outgoing("notifications/tasks/status");
    assert_eq!(progress["params"]["taskId"], id.as_str());
    assert_eq!(progress["params"]["status"], "working");
    assert_eq!(progress["params"]["statusMessage"], "half way");
    assert_eq!(
        h.result("tasks/result", json!({"taskId": id})),
        text_result(id.clone())
            .as_object()
            .map(|o| {
                let mut o = o.clone();
                o.insert(
                    "_meta".into(),
                    json!({"io.modelcontextprotocol/related-task": {"taskId": id}}),
                );
                Value::Object(o)
            })
            .unwrap()
    );
}

#[test]
fn tasks_list_pages_with_an_opaque_cursor() {
    let mut h = Harness::with_store(None, 2);
    let ids: Vec<String> = (0..5).map(|_| h.start("sleep", json!({"ms": 0}))).collect();
    let mut seen = Vec::new();
    let mut params = json!({});
    loop {
        let page = h.result("tasks/list", params);
        assert!(page["tasks"].as_array().unwrap().len() <= 2);
        seen.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["taskId"].as_str().unwrap().to_string()),
        );
        match page.get("nextCursor") {
            Some(cursor) => params = json!({"cursor": cursor}),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    assert_eq!(
        h.error_code("tasks/list", json!({"cursor": "not-a-cursor"})),
        -32602
    );
    assert_eq!(h.error_code("tasks/list", json!({"cursor": ""})), -32602);
    assert_eq!(h.error_code("tasks/list", json!({"cursor": 7})), -32602);
}

#[test]
fn a_task_past_the_store_limit_is_a_clear_internal_error() {
    let store = Store::builder().max_tasks(1).build().unwrap();
    let mut h = Harness::with_store(Some(store.handle()), 100);
    h._store = Some(store);
    let first = h.start("sleep", json!({"ms": 600_000}));
    let response = h.request(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 1}, "task": {"ttl": 60000}}),
    );
    assert_eq!(response["error"]["code"], -32603, "{response}");
    assert_eq!(
        response["error"]["message"], "Maximum number of tasks (1) reached",
        "{response}"
    );
    // The refusal changed nothing: the first task runs on, and the server keeps serving.
    assert_eq!(
        h.result("tasks/get", json!({"taskId": first}))["status"],
        "working"
    );
    h.result("tasks/cancel", json!({"taskId": first}));
}

#[test]
fn cancel_stops_the_worker_and_a_second_cancel_is_invalid_params() {
    let mut h = Harness::new();
    let id = h.start("sleep", json!({"ms": 600_000}));
    let cancelled = h.result("tasks/cancel", json!({"taskId": id}));
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(h.error_code("tasks/cancel", json!({"taskId": id})), -32602);
    let response = h.request("tasks/result", json!({"taskId": id}));
    assert_eq!(
        response["error"]["code"], -32602,
        "a cancelled task has no result: {response}"
    );
    // Its late result did not overwrite the cancel.
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "cancelled"
    );
}

#[test]
fn cancelled_workers_stop_and_free_their_threads() {
    let mut h = Harness::new(); // four workers
    let ids: Vec<String> = (0..4)
        .map(|_| h.start("sleep", json!({"ms": 600_000})))
        .collect();
    for id in &ids {
        h.result("tasks/cancel", json!({"taskId": id}));
    }
    // Only a worker freed by a cancel can run this call.
    let result = h.result(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "free"}}),
    );
    assert_eq!(result, text_result("free"));
}

#[test]
fn cancelling_a_completed_task_is_invalid_params() {
    let mut h = Harness::new();
    let id = h.start("sleep", json!({"ms": 0}));
    h.result("tasks/result", json!({"taskId": id}));
    let response = h.request("tasks/cancel", json!({"taskId": id}));
    assert_eq!(response["error"]["code"], -32602);
    assert!(response["error"]["message"]
        .as_str()
        .unwrap()
        .contains("completed"));
}

#[test]
fn unknown_and_malformed_task_ids_are_invalid_params_everywhere() {
    let mut h = Harness::new();
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        for id in [
            json!("5c1e0000-0000-4000-8000-000000000001"),
            json!("garbage"),
            json!(""),
        ] {
            assert_eq!(
                h.error_code(method, json!({"taskId": id})),
                -32602,
                "{method} {id}"
            );
        }
        assert_eq!(h.error_code(method, json!({"taskId": 42})), -32602);
        assert_eq!(h.error_code(method, json!({})), -32602);
    }
}

#[test]
fn unknown_methods_are_method_not_found() {
    let mut h = Harness::new();
    assert_eq!(
        h.error_code("tasks/update", json!({})),
        -32601,
        "not a 2025-11-25 method"
    );
    assert_eq!(h.error_code("no/such/method", json!({})), -32601);
}

#[test]
fn extra_params_fields_are_tolerated() {
    let mut h = Harness::new();
    let id = h.start("sleep", json!({"ms": 0}));
    let task = h.result(
        "tasks/get",
        json!({"taskId": id, "task": {"ttl": 5}, "_meta": {"x": 1}, "extra": true}),
    );
    assert_eq!(task["taskId"], id.as_str());
}

#[test]
fn status_changes_are_notified() {
    let h = &mut Harness::new();
    let _pump = h.pump_events();
    let id = h.start("sleep", json!({"ms": 0}));
    let notification = h.next_outgoing("notifications/tasks/status");
    assert_eq!(notification["params"]["taskId"], id.as_str());
    assert_eq!(notification["params"]["status"], "completed");
    assert!(notification["params"].get("ttl").is_some());
}

/// Status notifications take at most half of a connection's outgoing queue: a task that
/// reports many changes while the client reads nothing (an HTTP session between two `GET`
/// streams) never leaves a tool's request to the client without room.
#[test]
fn status_notifications_leave_room_for_requests_to_the_client() {
    let mut h = Harness::new();
    h.bounded_outgoing(8);
    h.initialize(json!({"elicitation": {}}));
    let store = h.server.store();
    let events = store.subscribe().unwrap();
    let chatty = h.start("sleep", json!({"ms": 60000}));
    let chatty = mcp_task_store::TaskId::parse(&chatty).unwrap();
    for n in 0..20 {
        let message = Some(format!("step {n}"));
        store
            .update_status(chatty, None, mcp_task_store::TaskStatus::Working, message)
            .unwrap();
    }
    for event in events.try_iter() {
        h.connection.handle_store_event(&event);
    }
    assert!(h.outgoing.len() <= 4, "{} queued", h.outgoing.len());
    let asking = h.start("ask", json!({"question": "?"}));
    let elicitation = h.next_outgoing("elicitation/create");
    assert_eq!(
        elicitation["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        asking.as_str()
    );
    store.cancel(chatty, None, None).unwrap();
}

/// A status dropped for lack of room is not taken as sent: the catch-up after lost store
/// events sends it if it still stands, a task's end included.
#[test]
fn a_status_dropped_for_lack_of_room_is_sent_by_the_next_catch_up() {
    let mut h = Harness::new();
    h.bounded_outgoing(4);
    h.initialize(json!({}));
    let store = h.server.store();
    let events = store.subscribe().unwrap();
    let ids: Vec<_> = (0..2)
        .map(|_| {
            let id = h.start("sleep", json!({"ms": 60000}));
            mcp_task_store::TaskId::parse(&id).unwrap()
        })
        .collect();
    use mcp_task_store::TaskStatus::{InputRequired, Working};
    // Two notifications fill the half of the queue they may take; the third is dropped.
    for (id, status) in [
        (ids[0], InputRequired),
        (ids[1], InputRequired),
        (ids[0], Working),
    ] {
        store.update_status(id, None, status, None).unwrap();
    }
    for event in events.try_iter() {
        h.connection.handle_store_event(&event);
    }
    let queued: Vec<Value> = h.outgoing.try_iter().collect();
    assert_eq!(queued.len(), 2, "{queued:#?}");
    h.connection
        .handle_store_event(&StoreEvent::Lagged { missed: 1 });
    let caught_up = h.next_outgoing("notifications/tasks/status");
    assert_eq!(caught_up["params"]["taskId"], ids[0].to_string());
    assert_eq!(caught_up["params"]["status"], "working");
    // A task's end dropped the same way is not forgotten either.
    store
        .update_status(ids[0], None, InputRequired, None)
        .unwrap();
    h.connection.handle_store_event(&events.recv().unwrap());
    store.update_status(ids[0], None, Working, None).unwrap();
    h.connection.handle_store_event(&events.recv().unwrap());
    store.cancel(ids[1], None, None).unwrap();
    h.connection.handle_store_event(&events.recv().unwrap());
    let queued: Vec<Value> = h.outgoing.try_iter().collect();
    assert_eq!(queued.len(), 2, "the end found no room: {queued:#?}");
    h.connection
        .handle_store_event(&StoreEvent::Lagged { missed: 1 });
    let ended = h.next_outgoing("notifications/tasks/status");
    assert_eq!(ended["params"]["taskId"], ids[1].to_string());
    assert_eq!(ended["params"]["status"], "cancelled");
    store.cancel(ids[0], None, None).unwrap();
}

#[test]
fn a_task_that_ends_before_the_server_follows_it_is_notified_all_the_same() {
    // The store cancels the task as soon as it exists, before the server starts to follow
    // it (as a `tasks/cancel` sent the moment the create result arrived can): the event
    // found it not followed yet, and the server must not take it for `working` for ever.
    let owned = Store::builder().build().unwrap();
    let store = Arc::new(OnlyRequired::cancel_on_token(owned.handle()));
    let h = &mut Harness::build(Some(store), 100, 4, None);
    h._store = Some(owned);
    let _pump = h.pump_events();
    let id = h.start("sleep", json!({"ms": 60000}));
    let notification = h.next_outgoing("notifications/tasks/status");
    assert_eq!(notification["params"]["taskId"], id.as_str());
    assert_eq!(notification["params"]["status"], "cancelled");
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "cancelled"
    );
}

/// A `Connection` is itself a public `ClientPeer`, for code outside a tool run: it knows
/// which requests its client declared at `initialize`, and it sends one and returns the
/// client's answer.
#[test]
fn a_connection_is_a_client_peer_that_asks_its_client() {
    use mcp_task_store::server::ClientPeer;
    let mut h = Harness::new();
    h.initialize(json!({"elicitation": {}}));
    let peer: &dyn ClientPeer = &*h.connection;
    assert!(peer.supports("elicitation/create"));
    assert!(!peer.supports("sampling/createMessage"));
    let connection = h.connection.clone();
    let asking = std::thread::spawn(move || {
        let peer: &dyn ClientPeer = &*connection;
        peer.request("elicitation/create", json!({"message": "?"}), None)
    });
    let elicitation = h.next_outgoing("elicitation/create");
    assert_eq!(elicitation["params"]["message"], "?", "{elicitation}");
    let answer =
        json!({"jsonrpc": "2.0", "id": elicitation["id"], "result": {"action": "decline"}});
    h.connection.handle_text(
        &answer.to_string(),
        Box::new(|_| panic!("a response gets no response")),
    );
    let answered = asking.join().unwrap();
    assert_eq!(answered.unwrap(), json!({"action": "decline"}));
}

#[test]
fn ask_elicits_through_the_client_and_completes_with_the_answer() {
    use mcp_task_store::{StoreEvent, TaskStatus};
    let mut h = Harness::new();
    let _pump = h.pump_events();
    let events = h.server.store().subscribe().unwrap();
    h.initialize(json!({"elicitation": {"form": {}}}));
    let id = h.start("ask", json!({"question": "Meaning of life?"}));
    let elicitation = h.next_outgoing("elicitation/create");
    assert_eq!(elicitation["params"]["message"], "Meaning of life?");
    assert_eq!(
        elicitation["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "input_required"
    );
    let answer = json!({"jsonrpc": "2.0", "id": elicitation["id"], "result": {"action": "accept", "content": {"answer": "42"}}});
    h.connection.handle_text(
        &answer.to_string(),
        Box::new(|_| panic!("a response gets no response")),
    );
    let result = h.result("tasks/result", json!({"taskId": id}));
    assert_eq!(result["content"][0]["text"], "answer: 42");
    // The task went back to working once its input arrived, then completed.
    let mut statuses = Vec::new();
    while statuses.last() != Some(&TaskStatus::Completed) {
        match events.recv_timeout(WAIT).expect("a store event") {
            StoreEvent::Status { task, .. } if task.task_id.to_string() == id => {
                statuses.push(task.status)
            }
            _ => {}
        }
    }
    let asked = statuses
        .iter()
        .position(|s| *s == TaskStatus::InputRequired)
        .expect("input was asked for");
    assert_eq!(
        statuses[asked + 1..],
        [TaskStatus::Working, TaskStatus::Completed],
        "{statuses:?}"
    );
}

/// A tool's progress messages from one of its threads never undo the `input_required`
/// that a question from another set: the client sees the question and the status agree.
/// (Each round's race is lost about half the time when a message is set by reading the
/// status and writing it back.)
#[test]
fn progress_messages_never_hide_a_question_behind_working() {
    let mut h = Harness::new();
    h.initialize(json!({"elicitation": {"form": {}}}));
    for round in 0..8 {
        let id = h.start("chatty_ask", json!({}));
        let elicitation = h.next_outgoing("elicitation/create");
        // Every progress message sent (the last may come before the question or after:
        // asking clears the message).
        let deadline = std::time::Instant::now() + WAIT;
        while CHATTY_DONE.load(std::sync::atomic::Ordering::SeqCst) <= round {
            assert!(std::time::Instant::now() < deadline, "round {round}");
            std::thread::yield_now();
        }
        let task = h.result("tasks/get", json!({"taskId": id}));
        assert_eq!(task["status"], "input_required", "round {round}: {task}");
        let answer =
            json!({"jsonrpc": "2.0", "id": elicitation["id"], "result": {"action": "decline"}});
        h.connection.handle_text(
            &answer.to_string(),
            Box::new(|_| panic!("a response gets no response")),
        );
        h.result("tasks/result", json!({"taskId": id}));
    }
}

/// A tool asking two questions at once (from two threads) on 2025-11-25 stays
/// `input_required` until both are answered: the first answer must not show the task
/// `working` while the other question still waits on the client.
#[test]
fn a_task_asking_twice_at_once_waits_on_input_until_both_are_answered() {
    let mut h = Harness::new();
    h.initialize(json!({"elicitation": {"form": {}}}));
    let id = h.start("two_asks", json!({"counted": true}));
    let first = h.next_outgoing("elicitation/create");
    let second = h.next_outgoing("elicitation/create");
    let answer = |h: &Harness, request: &Value, text: &str| {
        let answer = json!({"jsonrpc": "2.0", "id": request["id"],
                            "result": {"action": "accept", "content": {"answer": text}}});
        h.connection.handle_text(
            &answer.to_string(),
            Box::new(|_| panic!("a response gets no response")),
        );
    };
    answer(&h, &first, "one");
    let deadline = std::time::Instant::now() + WAIT;
    while TWO_ASKS_ANSWERED.load(std::sync::atomic::Ordering::SeqCst) < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the answer never arrived"
        );
        std::thread::yield_now();
    }
    let task = h.result("tasks/get", json!({"taskId": id}));
    assert_eq!(task["status"], "input_required", "{task}");
    answer(&h, &second, "two");
    let result = h.result("tasks/result", json!({"taskId": id}));
    assert!(result["content"][0]["text"].is_string(), "{result}");
}

/// Found by `hostile::elicitation_answers_of_any_shape_2025` (minimised: the client
/// answers the elicitation with `"error": [0, ""]`): serde read the error struct from the
/// array, so the task failed with a made-up error `{code: 0, message: ""}` that
/// `tasks/result` then handed on. A JSON-RPC error is an object; anything else is
/// malformed, an internal error.
#[test]
fn an_error_answer_that_is_not_an_object_is_a_malformed_error() {
    assert_eq!(RpcError::from_value(&json!([0, ""])).code, -32603);
    assert_eq!(
        RpcError::from_value(&json!([-32000, "x", null])).code,
        -32603
    );
    let mut h = Harness::new();
    h.initialize(json!({"elicitation": {}}));
    let id = h.start("ask", json!({"question": "?"}));
    let elicitation = h.next_outgoing("elicitation/create");
    let answer = json!({"jsonrpc": "2.0", "id": elicitation["id"], "error": [0, ""]});
    h.connection.handle_text(
        &answer.to_string(),
        Box::new(|_| panic!("a response gets no response")),
    );
    let response = h.request("tasks/result", json!({"taskId": id}));
    assert_eq!(response["error"]["code"], -32603, "{response}");
}

#[test]
fn ask_without_client_elicitation_support_fails_the_task() {
    let mut h = Harness::new();
    h.initialize(json!({}));
    let id = h.start("ask", json!({"question": "?"}));
    let response = h.request("tasks/result", json!({"taskId": id}));
    assert_eq!(response["error"]["code"], -32603);
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "failed"
    );
}

/// A question the client cannot be asked is refused before the task's status moves: the
/// task goes from `working` to `failed`, never through `input_required` for a question
/// that was never sent.
#[test]
fn a_question_the_client_cannot_take_never_shows_the_task_waiting() {
    let mut h = Harness::new();
    let events = h.server.store().subscribe().unwrap();
    h.initialize(json!({}));
    let id = h.start("ask", json!({"question": "?"}));
    let response = h.request("tasks/result", json!({"taskId": id}));
    assert_eq!(response["error"]["code"], -32603);
    let statuses: Vec<String> = events
        .try_iter()
        .filter_map(|event| match event {
            StoreEvent::Status { task, .. } => Some(task.status.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, ["failed"], "{statuses:?}");
}

#[test]
fn cancelling_a_task_abandons_its_pending_elicitation() {
    let mut h = Harness::new();
    let _pump = h.pump_events();
    h.initialize(json!({"elicitation": {}}));
    let id = h.start("ask", json!({"question": "?"}));
    h.next_outgoing("elicitation/create");
    assert_eq!(
        h.result("tasks/cancel", json!({"taskId": id}))["status"],
        "cancelled"
    );
    // The tool's wait ends (its pending request is dropped) and the cancel stands.
    let store = h.server.store();
    let task_id = mcp_task_store::TaskId::parse(&id).unwrap();
    assert_eq!(
        store.wait_terminal(task_id, None, None).unwrap().status,
        mcp_task_store::TaskStatus::Cancelled
    );
}

/// A task's end drops only its own requests to the client: another task's question,
/// asked before, is still answered and its tool gets the answer.
#[test]
fn a_task_that_ends_leaves_other_tasks_questions_waiting() {
    let mut h = Harness::new();
    let events = h.server.store().subscribe().unwrap();
    h.initialize(json!({"elicitation": {}}));
    let ended = h.start("ask", json!({"question": "first?"}));
    h.next_outgoing("elicitation/create");
    let waiting = h.start("ask", json!({"question": "second?"}));
    let question = h.next_outgoing("elicitation/create");
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        waiting.as_str()
    );
    h.result("tasks/cancel", json!({"taskId": ended}));
    // Every event so far handled before the answer comes (deterministic: no pump).
    for event in events.try_iter() {
        h.connection.handle_store_event(&event);
    }
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
                        "result": {"action": "accept", "content": {"answer": "yes"}}});
    h.connection.handle_text(
        &answer.to_string(),
        Box::new(|_| panic!("a response gets no response")),
    );
    let result = h.result("tasks/result", json!({"taskId": waiting}));
    assert_eq!(result["content"][0]["text"], "answer: yes", "{result}");
}

#[test]
fn a_tool_waiting_for_the_client_is_freed_when_its_task_ends_even_if_the_event_is_lost() {
    // No store events reach this connection at all (nothing pumps them): the task's end
    // must still free the only worker, which the waiting tool holds.
    let mut h = Harness::with_workers(1);
    h.initialize(json!({"elicitation": {}}));
    let id = h.start("ask", json!({"question": "?"}));
    h.next_outgoing("elicitation/create");
    h.result("tasks/cancel", json!({"taskId": id}));
    let echoed = h.result(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    assert_eq!(echoed["content"][0]["text"], "hi", "{echoed}");
}

/// Checks that [`counted_tool`] never ran, once the runs queued so far are done: one
/// worker runs jobs in order, so once a plain call queued behind them has run, so has
/// whatever they were going to do.
fn assert_no_counted_run_after_the_queue(h: &mut Harness) {
    let echoed = h.result(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "after"}}),
    );
    assert_eq!(echoed["content"][0]["text"], "after", "{echoed}");
    assert_eq!(COUNTED_RUNS.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// A task cancelled while its run waits for a worker never runs its tool: a tool with
/// side effects must not act for a task its client already gave up.
#[test]
fn a_task_cancelled_before_a_worker_takes_it_never_runs_its_tool() {
    let mut h = Harness::with_workers(1);
    h.initialize(json!({}));
    // The one worker is busy until this task is cancelled.
    let busy = h.start("sleep_required", json!({"ms": 600_000}));
    let queued = h.start("counted", json!({}));
    h.result("tasks/cancel", json!({"taskId": queued}));
    h.result("tasks/cancel", json!({"taskId": busy}));
    assert_no_counted_run_after_the_queue(&mut h);
    let task = h.result("tasks/get", json!({"taskId": queued}));
    assert_eq!(task["status"], "cancelled", "{task}");
}

/// So with a plain call its client cancelled (`notifications/cancelled`) while it waited.
#[test]
fn a_plain_call_cancelled_before_a_worker_takes_it_never_runs_its_tool() {
    let mut h = Harness::with_workers(1);
    h.initialize(json!({}));
    let busy = h.start("sleep_required", json!({"ms": 600_000}));
    let (answers_tx, answers) = crossbeam_channel::unbounded();
    h.connection.handle_text(
        &json!({"jsonrpc": "2.0", "id": "queued", "method": "tools/call",
               "params": {"name": "counted", "arguments": {}}})
        .to_string(),
        Box::new(move |v| answers_tx.send(v).unwrap()),
    );
    h.connection.handle_text(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": "queued"}})
        .to_string(),
        Box::new(|_| {}),
    );
    h.result("tasks/cancel", json!({"taskId": busy}));
    assert_no_counted_run_after_the_queue(&mut h);
    // Receivers SHOULD NOT answer a cancelled request: the transport hears Null.
    assert_eq!(answers.recv_timeout(WAIT), Ok(Value::Null));
}

#[test]
fn tools_waiting_on_the_client_do_not_hold_the_workers() {
    // One worker, and three tasks whose tools wait for an answer that does not come: each
    // lends its place while it waits, so the next call still runs.
    let mut h = Harness::with_workers(1);
    h.initialize(json!({"elicitation": {}}));
    let asking: Vec<String> = (0..3)
        .map(|_| {
            let id = h.start("ask", json!({"question": "?"}));
            h.next_outgoing("elicitation/create");
            id
        })
        .collect();
    let id = h.start("sleep", json!({"ms": 0}));
    let result = h.result("tasks/result", json!({"taskId": id}));
    assert_eq!(result["content"][0]["text"], "slept 0 ms", "{result}");
    let echoed = h.result(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    assert_eq!(echoed["content"][0]["text"], "hi", "{echoed}");
    for id in asking {
        h.result("tasks/cancel", json!({"taskId": id}));
    }
}

/// A tool that asks its client from threads of its own (while its worker waits for them)
/// lends its worker's place all the same: with one worker, the next call still runs.
#[test]
fn a_tool_asking_from_its_own_threads_does_not_hold_its_worker() {
    let mut h = Harness::with_workers(1);
    h.initialize(json!({"elicitation": {}}));
    let id = h.start("two_asks", json!({}));
    h.next_outgoing("elicitation/create");
    h.next_outgoing("elicitation/create");
    let echoed = h.result(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    assert_eq!(echoed["content"][0]["text"], "hi", "{echoed}");
    h.result("tasks/cancel", json!({"taskId": id}));
}

/// A question nobody needs answered any more is withdrawn, as a cancelled plain call's is:
/// the client can take its prompt down.
#[test]
fn a_request_to_the_client_is_withdrawn_when_its_task_ends() {
    let mut h = Harness::with_workers(1);
    h.initialize(json!({"elicitation": {}}));
    let id = h.start("ask", json!({"question": "?"}));
    let asked = h.next_outgoing("elicitation/create");
    h.result("tasks/cancel", json!({"taskId": id}));
    let withdrawn = h.next_outgoing("notifications/cancelled");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"], "{withdrawn}");
    // Tied to the task, as the request it withdraws was (2025-11-25: every message related
    // to a task carries the related-task `_meta`).
    assert_eq!(
        withdrawn["params"]["_meta"]["io.modelcontextprotocol/related-task"],
        json!({"taskId": id}),
        "{withdrawn}"
    );
    // A late answer to it is dropped.
    h.connection.handle_text(
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}}).to_string(),
        Box::new(|_| panic!("a response")),
    );
}

#[test]
fn lost_store_events_are_made_up_for_when_the_loss_is_reported() {
    let mut h = Harness::new();
    h.initialize(json!({"elicitation": {}}));
    let id = h.start("ask", json!({"question": "?"}));
    h.next_outgoing("elicitation/create");
    h.result("tasks/cancel", json!({"taskId": id}));
    // The cancel's event was lost; the subscriber then hears that it missed some.
    h.connection
        .handle_store_event(&mcp_task_store::StoreEvent::Lagged { missed: 1 });
    let notified = h.next_outgoing("notifications/tasks/status");
    assert_eq!(notified["params"]["taskId"], id.as_str(), "{notified}");
    assert_eq!(notified["params"]["status"], "cancelled", "{notified}");
}

#[test]
fn a_running_tasks_lost_status_change_is_made_up_for_once() {
    let mut h = Harness::new();
    h.initialize(json!({"elicitation": {}}));
    let id = h.start("ask", json!({"question": "?"}));
    h.next_outgoing("elicitation/create");
    // The move to input_required was lost with other events (nothing pumps them here).
    let lagged = mcp_task_store::StoreEvent::Lagged { missed: 1 };
    h.connection.handle_store_event(&lagged);
    let notified = h.next_outgoing("notifications/tasks/status");
    assert_eq!(notified["params"]["taskId"], id.as_str(), "{notified}");
    assert_eq!(notified["params"]["status"], "input_required", "{notified}");
    // Nothing changed since: a second loss notifies nothing.
    h.connection.handle_store_event(&lagged);
    let extra: Vec<Value> = h.outgoing.try_iter().collect();
    assert!(extra.is_empty(), "{extra:?}");
}

#[test]
fn a_task_that_outlives_its_ttl_fails_and_its_tool_stops() {
    let clock = ManualClock::new();
    let store = Store::builder().clock(clock.clone()).build().unwrap();
    let mut h = Harness::with_store(Some(store.handle()), 100);
    h._store = Some(store);
    // Occupy all four workers with sleeps far longer than their TTL.
    let ids: Vec<String> = (0..4)
        .map(|_| {
            let created = h.result(
                "tools/call",
                json!({"name": "sleep", "arguments": {"ms": 600_000}, "task": {"ttl": 1000}}),
            );
            created["task"]["taskId"].as_str().unwrap().to_string()
        })
        .collect();
    clock.advance(Duration::from_millis(1000));
    for id in &ids {
        let task = h.result("tasks/get", json!({"taskId": id}));
        assert_eq!(task["status"], "failed");
        assert!(task["statusMessage"].as_str().unwrap().contains("expired"));
    }
    // Its result is refused as the spec refuses an expired task's: -32602.
    let response = h.request("tasks/result", json!({"taskId": ids[0]}));
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(response["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Task has expired"));
    // The sleeping tools were told to stop: a worker is free for a new call.
    let echoed = h.result(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "free"}}),
    );
    assert_eq!(echoed, text_result("free"));
    // Past the grace period the tasks are gone: -32602 everywhere, like unknown ids.
    clock.advance(Duration::from_secs(30));
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        assert_eq!(
            h.error_code(method, json!({"taskId": ids[1]})),
            -32602,
            "{method}"
        );
    }
}

// ----- SEP-2663 (protocol 2026-07-28) --------------------------------------------------

/// A SEP-2663 request's `_meta`; `declare`: the client declares the tasks extension (and
/// the capabilities the tools ask input of, as a client with handlers for them does).
fn meta(declare: bool) -> Value {
    let capabilities = if declare {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}},
               "elicitation": {}, "sampling": {}, "roots": {}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

impl Harness {
    fn call_2026(&mut self, tool: &str, arguments: Value, declare: bool) -> Value {
        self.request(
            "tools/call",
            json!({"name": tool, "arguments": arguments, "_meta": meta(declare)}),
        )
    }

    fn task_2026(&mut self, method: &str, mut params: Value) -> Value {
        params["_meta"] = meta(true);
        self.request(method, params)
    }

    fn poll_2026(&mut self, id: &str, until: &[&str]) -> Value {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let task = self.task_2026("tasks/get", json!({"taskId": id}))["result"].clone();
            if until.iter().any(|s| task["status"] == *s) {
                return task;
            }
            assert!(std::time::Instant::now() < deadline, "stuck at {task}");
            std::thread::yield_now();
        }
    }
}

/// Asking for no input gets no answers at once, on either revision (on SEP-2663 the store
/// refuses an empty set of input requests, which the tool used to get as an error).
#[test]
fn asking_for_no_input_gets_no_answers_on_both_revisions() {
    let mut h = Harness::new();
    let created = h.call_2026("ask_nothing", json!({}), true)["result"].clone();
    let id = created["taskId"].as_str().expect("a task").to_owned();
    let done = h.poll_2026(&id, &["completed", "failed"]);
    assert_eq!(done["result"]["content"][0]["text"], "0 answers", "{done}");

    let mut h = Harness::new();
    h.initialize(json!({}));
    let id = h.start("ask_nothing", json!({}));
    let result = h.result("tasks/result", json!({"taskId": id}));
    assert_eq!(result["content"][0]["text"], "0 answers", "{result}");
}

#[test]
fn discover_advertises_the_tasks_extension_and_not_the_legacy_capability() {
    let mut h = Harness::new();
    let result = h.result("server/discover", json!({"_meta": meta(false)}));
    assert_eq!(result["resultType"], "complete");
    assert_eq!(
        result["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    assert!(result["capabilities"].get("tasks").is_none());
    assert!(result["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!("2026-07-28")));
    assert!(result["ttlMs"].is_u64() && result["cacheScope"].is_string());
    // The versions it supports are the same wherever it lists them: here, and in the
    // -32022 a version it does not speak gets (each is "the versions this server
    // supports", and it serves every one of them).
    let refused = h.request(
        "server/discover",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "1900-01-01"}}),
    );
    assert_eq!(
        result["supportedVersions"], refused["error"]["data"]["supported"],
        "{refused}"
    );
    let tools = h.result("tools/list", json!({"_meta": meta(false)}));
    assert!(
        tools["tools"][0].get("execution").is_none(),
        "no taskSupport in 2026-07-28"
    );
}

#[test]
fn a_quick_call_is_answered_inline_and_never_touches_the_store() {
    let mut h = Harness::new();
    let reply = h.call_2026("sleep", json!({"ms": 0}), true);
    assert_eq!(reply["result"]["resultType"], "complete");
    assert_eq!(reply["result"]["content"][0]["text"], "slept 0 ms");
    assert_eq!(
        h.server.store().list(None, None).unwrap().tasks.len(),
        0,
        "no task was created"
    );
}

#[test]
fn a_slow_call_is_promoted_to_a_task_that_carries_on() {
    let mut h = Harness::new();
    let reply = h.call_2026("sleep", json!({"ms": 400}), true);
    let created = &reply["result"];
    assert_eq!(created["resultType"], "task", "{reply}");
    assert!(created.get("task").is_none(), "flat, not nested");
    assert!(created["ttlMs"].is_null() || created["ttlMs"].is_u64());
    let id = created["taskId"].as_str().unwrap().to_string();
    let done = h.poll_2026(&id, &["completed"]);
    assert_eq!(done["result"]["content"][0]["text"], "slept 400 ms");
    assert_eq!(done["result"]["resultType"], "complete");
    assert!(done["result"]["_meta"]
        .get("io.modelcontextprotocol/related-task")
        .is_none());
}

/// A call that asks for input cannot wait for it inline: it becomes a task at once, not
/// when the promotion budget (here a minute) runs out.
#[test]
fn a_call_that_asks_for_input_becomes_a_task_at_once() {
    let mut h = Harness::build(None, 100, 4, Some(Duration::from_secs(60)));
    let reply = h.call_2026("ask_maybe", json!({}), true);
    assert_eq!(reply["result"]["resultType"], "task", "{reply}");
    let id = reply["result"]["taskId"].as_str().unwrap().to_string();
    let waiting = h.poll_2026(&id, &["input_required"]);
    let keys: Vec<&String> = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys.len(), 1, "{waiting}");
    h.task_2026("tasks/cancel", json!({"taskId": id}));
}

/// A call that cannot become a task (here the store is full) runs on inline: its tool's
/// `sleep` still sleeps the whole time, rather than end when the promotion failed.
#[test]
fn a_call_that_cannot_be_promoted_still_sleeps_its_whole_time() {
    let store = Store::builder().max_tasks(1).build().unwrap();
    let mut h = Harness::with_store(Some(store.handle()), 100);
    h._store = Some(store);
    let first = h.start("sleep", json!({"ms": 600_000}));
    let started = std::time::Instant::now();
    let reply = h.call_2026("sleep", json!({"ms": 1000}), true);
    assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    assert_eq!(reply["result"]["content"][0]["text"], "slept 1000 ms");
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "answered after {:?}",
        started.elapsed()
    );
    h.result("tasks/cancel", json!({"taskId": first}));
}

#[test]
fn without_the_extension_task_tools_run_inline_or_need_the_capability() {
    let mut h = Harness::new();
    let inline = h.call_2026("sleep", json!({"ms": 100}), false);
    assert_eq!(
        inline["result"]["content"][0]["text"], "slept 100 ms",
        "never a task"
    );
    let required = h.call_2026("sleep_required", json!({"ms": 1}), false);
    assert_eq!(required["error"]["code"], -32021);
    assert_eq!(
        required["error"]["data"]["requiredCapabilities"]["extensions"]
            ["io.modelcontextprotocol/tasks"],
        json!({})
    );
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let reply = h.request(method, json!({"taskId": "x", "_meta": meta(false)}));
        assert_eq!(reply["error"]["code"], -32021, "{method}");
    }
}

#[test]
fn removed_methods_are_method_not_found_and_a_legacy_task_param_is_ignored() {
    let mut h = Harness::new();
    for method in ["tasks/result", "tasks/list"] {
        assert_eq!(
            h.task_2026(method, json!({"taskId": "x"}))["error"]["code"],
            -32601
        );
    }
    let greet = h.request(
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "x"}, "task": {"ttl": 1}, "_meta": meta(true)}),
    );
    assert_eq!(greet["result"]["content"][0]["text"], "Hello, x!");
}

/// Found by `hostile::legacy_task_param_is_ignored` (minimised: `"task": false`): a legacy
/// `params.task` that is not a valid 2025-11-25 `TaskMetadata` failed the call with -32602,
/// where a request that cannot mean it (SEP-2663, or a version without tasks) must have it
/// ignored.
#[test]
fn a_legacy_task_param_of_any_shape_is_ignored_where_it_means_nothing() {
    let mut h = Harness::new();
    let shapes = [
        json!(false),
        json!("x"),
        json!([1]),
        json!({"ttl": -5}),
        json!({"ttl": "1"}),
    ];
    for task in &shapes {
        let greet = h.request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "x"}, "task": task, "_meta": meta(true)}),
        );
        assert_eq!(
            greet["result"]["content"][0]["text"], "Hello, x!",
            "{greet}"
        );
    }
    h.result(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
    );
    for task in &shapes {
        let slept = h.result(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 1}, "task": task}),
        );
        assert_eq!(slept, text_result("slept 1 ms"), "{task}");
    }
}

#[test]
fn sep2663_tools_waiting_for_input_do_not_hold_the_workers() {
    let mut h = Harness::with_workers(1);
    for _ in 0..2 {
        let created = h.call_2026("multi_input", json!({}), true);
        let id = created["result"]["taskId"].as_str().unwrap().to_string();
        h.poll_2026(&id, &["input_required"]);
    }
    let created = h.call_2026("sleep_required", json!({"ms": 0}), true);
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    h.poll_2026(&id, &["completed"]);
}

#[test]
fn input_requests_are_answered_through_tasks_update_even_in_parts() {
    let mut h = Harness::new();
    let created = h.call_2026("multi_input", json!({}), true);
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    let waiting = h.poll_2026(&id, &["input_required"]);
    let keys: Vec<String> = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys.len(), 2, "{waiting}");
    assert_eq!(
        waiting["inputRequests"][&keys[0]]["method"],
        "elicitation/create"
    );
    let ack = h.task_2026(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {&keys[0]: {"action": "accept", "content": {"name": "A"}},
                                                  "never-issued": {"ignored": true}}}),
    );
    assert_eq!(ack["result"], json!({"resultType": "complete"}));
    let partial = h.poll_2026(&id, &["input_required"]);
    let left: Vec<&String> = partial["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(left, vec![&keys[1]], "only the unanswered key is listed");
    h.task_2026(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {&keys[1]: {"action": "accept", "content": {"confirm": true}}}}),
    );
    let done = h.poll_2026(&id, &["completed"]);
    assert!(done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("\"A\""));
}

#[test]
fn the_multi_round_trip_flow_asks_before_any_task_exists() {
    let mut h = Harness::new();
    let first = h.call_2026("test_tool_with_task", json!({}), true);
    assert_eq!(first["result"]["resultType"], "input_required");
    assert!(first["result"].get("taskId").is_none());
    assert_eq!(
        first["result"]["inputRequests"]["user_name"]["method"],
        "elicitation/create"
    );
    let second = h.request(
        "tools/call",
        json!({"name": "test_tool_with_task", "arguments": {}, "_meta": meta(true),
               "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}}}),
    );
    assert_eq!(second["result"]["resultType"], "task");
    let id = second["result"]["taskId"].as_str().unwrap().to_string();
    let done = h.poll_2026(&id, &["completed"]);
    assert!(done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Alice"));
}

#[test]
fn a_tool_error_completes_and_a_json_rpc_error_fails_with_the_error_inline() {
    let mut h = Harness::new();
    let tool_error = h.call_2026("failing_job", json!({}), true);
    let id = tool_error["result"]["taskId"].as_str().unwrap().to_string();
    let done = h.poll_2026(&id, &["completed", "failed"]);
    assert_eq!(
        (done["status"].as_str(), done["result"]["isError"].as_bool()),
        (Some("completed"), Some(true))
    );
    let rpc_error = h.call_2026("protocol_error_job", json!({}), true);
    let id = rpc_error["result"]["taskId"].as_str().unwrap().to_string();
    let failed = h.poll_2026(&id, &["completed", "failed"]);
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], -32000);
    assert!(failed.get("result").is_none());
}

#[test]
fn cancel_is_acknowledged_and_idempotent() {
    let mut h = Harness::new();
    let created = h.call_2026("slow_compute", json!({"seconds": 60}), true);
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    for _ in 0..2 {
        let ack = h.task_2026("tasks/cancel", json!({"taskId": id}));
        assert_eq!(ack["result"], json!({"resultType": "complete"}));
    }
    assert_eq!(h.poll_2026(&id, &["cancelled"])["status"], "cancelled");
    let unknown = h.task_2026(
        "tasks/cancel",
        json!({"taskId": "5c1e0000-0000-4000-8000-000000000001"}),
    );
    assert_eq!(unknown["error"]["code"], -32602);
}

#[test]
fn updating_an_unknown_task_is_invalid_params() {
    let mut h = Harness::new();
    let unknown = h.task_2026(
        "tasks/update",
        json!({"taskId": "5c1e0000-0000-4000-8000-000000000001",
               "inputResponses": {"k": {"action": "accept"}}}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[test]
fn roots_list_is_an_input_request_too() {
    let roots = Tool::new(
        "roots",
        "Reports the client's roots",
        json!({"type": "object"}),
        TaskSupport::Required,
        |_, ctx| {
            Ok(text_result(
                ctx.list_roots()?["roots"][0]["uri"].to_string(),
            ))
        },
    );
    let server = Server::builder().tool(roots).build().unwrap();
    let (tx, _outgoing) = crossbeam_channel::unbounded();
    let connection = server.connect(tx, None);
    let mut h = Harness {
        server,
        connection,
        outgoing: _outgoing,
        responses: crossbeam_channel::unbounded(),
        next_id: 0,
        _store: None,
    };
    let created = h.call_2026("roots", json!({}), true);
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    let waiting = h.poll_2026(&id, &["input_required"]);
    let (key, request) = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(request["method"], "roots/list");
    let answer = json!({"roots": [{"uri": "file:///work", "name": "work"}]});
    h.task_2026(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {key.clone(): answer}}),
    );
    let done = h.poll_2026(&id, &["completed"]);
    assert_eq!(done["result"]["content"][0]["text"], "\"file:///work\"");
}

#[test]
fn status_notifications_are_sent_only_for_2025_tasks() {
    let mut h = Harness::new();
    let _pump = h.pump_events();
    let sep = h.call_2026("sleep_required", json!({"ms": 0}), true);
    let sep_id = sep["result"]["taskId"].as_str().unwrap().to_string();
    h.poll_2026(&sep_id, &["completed"]);
    let legacy = h.start("sleep", json!({"ms": 0}));
    let notification = h.next_outgoing("notifications/tasks/status");
    assert_eq!(
        notification["params"]["taskId"],
        legacy.as_str(),
        "the first one is for the 2025 task"
    );
}

#[test]
fn a_tool_that_asks_the_client_after_the_connection_closed_gets_an_error_at_once() {
    let (go_tx, go) = crossbeam_channel::bounded::<()>(1);
    let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
    let late_asker = Tool::new(
        "late_ask",
        "Asks the client once told to",
        json!({"type": "object"}),
        TaskSupport::Forbidden,
        move |_, ctx| {
            started_tx.send(()).unwrap();
            go.recv().unwrap();
            ctx.elicit(json!({"message": "still there?", "requestedSchema": {"type": "object"}}))
        },
    );
    let server = Server::builder()
        .workers(1)
        .tool(late_asker)
        .build()
        .unwrap();
    // An outgoing channel whose reader (the transport's writer) outlives the connection,
    // as on stdio: sending still succeeds after the close.
    let (outgoing_tx, _outgoing) = crossbeam_channel::unbounded();
    let connection = server.connect(outgoing_tx, None);
    let (answers_tx, answers) = crossbeam_channel::unbounded();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}}}});
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "late_ask", "arguments": {}}});
    for message in [init, call] {
        let answers_tx = answers_tx.clone();
        connection.handle_text(
            &message.to_string(),
            Box::new(move |v| answers_tx.send(v).unwrap()),
        );
    }
    assert_eq!(answers.recv_timeout(WAIT).unwrap()["id"], 1);
    // Running (a run the close finds still queued never starts: not this test's case).
    started.recv_timeout(WAIT).unwrap();
    connection.close();
    go_tx.send(()).unwrap();
    let answer = answers
        .recv_timeout(WAIT)
        .expect("the call is answered, not left waiting for a client that is gone");
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("connection is closed"));
}

#[test]
fn a_client_on_a_version_without_tasks_is_served_without_them() {
    let mut h = Harness::new();
    let init = h.result(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
    );
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    assert!(init["capabilities"]["tools"].is_object());
    let tools = h.result("tools/list", json!({}));
    for tool in tools["tools"].as_array().unwrap() {
        assert!(tool.get("execution").is_none(), "{tool}");
    }
    // A tool that requires a task for 2025-11-25 clients runs as a plain call, and a
    // `params.task` this client cannot mean is ignored.
    let slept = h.result(
        "tools/call",
        json!({"name": "sleep_required", "arguments": {"ms": 1}}),
    );
    assert_eq!(slept, text_result("slept 1 ms"));
    let plain = h.result(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 1}, "task": {"ttl": 1000}}),
    );
    assert_eq!(plain, text_result("slept 1 ms"));
    for method in ["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"] {
        assert_eq!(
            h.error_code(
                method,
                json!({"taskId": "00000000-0000-4000-8000-000000000000"})
            ),
            -32601,
            "{method}"
        );
    }
    // Initializing again on 2025-11-25 brings tasks back.
    let init = h.initialize(json!({}));
    assert!(init["capabilities"]["tasks"].is_object());
}

#[test]
fn notifications_cancelled_stops_a_plain_call_but_never_a_task() {
    let mut h = Harness::new();
    h.initialize(json!({}));
    let (answers_tx, answers) = crossbeam_channel::unbounded();
    let send = |h: &Harness, message: Value| {
        let answers_tx = answers_tx.clone();
        h.connection.handle_text(
            &message.to_string(),
            Box::new(move |v| answers_tx.send(v).unwrap()),
        );
    };
    let cancel = |id: Value| {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": id, "reason": "changed my mind"}})
    };
    // A plain call of ten minutes, cancelled: it stops and its worker is free again.
    send(
        &h,
        json!({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
               "params": {"name": "sleep", "arguments": {"ms": 600_000}}}),
    );
    send(&h, cancel(json!("long")));
    let answer = answers
        .recv_timeout(WAIT)
        .expect("the cancelled call stops");
    // Receivers SHOULD NOT answer a cancelled request: the transport hears Null.
    assert_eq!(answer, Value::Null, "no response to a cancelled request");
    // A task is not cancelled by cancelling the request that created it.
    let id = h.start("sleep", json!({"ms": 600_000}));
    send(&h, cancel(json!(h.next_id))); // the tools/call that created it
    send(&h, cancel(json!("no such request")));
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "working"
    );
    h.result("tasks/cancel", json!({"taskId": id}));
    // Params by position are no MCP cancel: the call runs on and is answered.
    send(
        &h,
        json!({"jsonrpc": "2.0", "id": "kept", "method": "tools/call",
               "params": {"name": "sleep", "arguments": {"ms": 50}}}),
    );
    send(
        &h,
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": ["kept"]}),
    );
    let answer = answers.recv_timeout(WAIT).expect("an answer");
    assert_eq!(answer["id"], "kept", "{answer}");
}

#[test]
fn notifications_cancelled_stops_a_plain_sep2663_call_too() {
    let mut h = Harness::with_workers(1);
    let (answers_tx, answers) = crossbeam_channel::unbounded();
    // Without the extension declared, even a task-supporting tool runs as a plain call.
    let call = json!({"jsonrpc": "2.0", "id": "long", "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 600_000}, "_meta": meta(false)}});
    h.connection.handle_text(
        &call.to_string(),
        Box::new(move |v| answers_tx.send(v).unwrap()),
    );
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "long"}});
    h.connection
        .handle_text(&cancel.to_string(), Box::new(|_| panic!("a notification")));
    let answer = answers
        .recv_timeout(WAIT)
        .expect("the cancelled call stops");
    assert_eq!(answer, Value::Null, "no response to a cancelled request");
    // The worker is free again.
    let echoed = h.call_2026("echo", json!({"text": "free"}), false);
    assert_eq!(echoed["result"]["content"][0]["text"], "free", "{echoed}");
}

#[test]
fn closing_the_connection_stops_its_plain_calls() {
    let h = Harness::new();
    let (answers_tx, answers) = crossbeam_channel::unbounded();
    h.connection.handle_text(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 600_000}}})
        .to_string(),
        Box::new(move |v| answers_tx.send(v).unwrap()),
    );
    h.connection.close();
    let answer = answers.recv_timeout(WAIT).expect("the call stops");
    assert!(answer.get("error").is_some(), "{answer}");
}

#[test]
fn a_request_naming_a_protocol_version_the_server_does_not_speak_is_refused() {
    let mut h = Harness::new();
    for version in ["abc", "2099-01-01", "2026-01-01"] {
        let params = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": version}});
        let response = h.request("tools/list", params);
        // 2026-07-28 (versioning): UnsupportedProtocolVersionError, -32022, whose data lists
        // the versions the server supports and echoes the one requested.
        let error = &response["error"];
        assert_eq!(error["code"], -32022, "{version}: {response}");
        assert_eq!(error["data"]["requested"], version, "{response}");
        let supported = error["data"]["supported"].as_array().expect("supported");
        for speaks in [
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2025-03-26",
            "2024-11-05",
        ] {
            assert!(supported.contains(&json!(speaks)), "{speaks}: {response}");
        }
    }
    // The same for a request that names no method the server knows, and server/discover.
    for method in ["server/discover", "no/such/method"] {
        let params = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "1900-01-01"}});
        let response = h.request(method, params);
        assert_eq!(response["error"]["code"], -32022, "{method}: {response}");
    }
    // The versions it speaks are served, each in its revision.
    let sep2663 = h.result(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    );
    assert_eq!(sep2663["resultType"], "complete");
    let v2025 = h.result(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25"}}),
    );
    assert!(v2025.get("resultType").is_none());
}

#[test]
fn a_protocol_version_that_is_no_string_is_refused_not_taken_for_absent() {
    // `_meta["io.modelcontextprotocol/protocolVersion"]` is a string: anything else names
    // no version the server speaks, and gets -32022 with the value it read (as JSON) as
    // `requested`, rather than being served as if it were absent (2025-11-25).
    let mut h = Harness::new();
    for (version, requested) in [
        (json!(5), "5"),
        (json!(true), "true"),
        (json!({}), "{}"),
        (json!(["2026-07-28"]), "[\"2026-07-28\"]"),
    ] {
        let params = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": version}});
        let response = h.request("tools/list", params);
        let error = &response["error"];
        assert_eq!(error["code"], -32022, "{version}: {response}");
        assert_eq!(error["data"]["requested"], requested, "{response}");
    }
    // A null one is taken for absent, as a null `params` is.
    let served = h.result(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": null}}),
    );
    assert!(served["tools"].is_array(), "{served}");
}

#[test]
fn work_a_closed_connection_starts_is_cancelled_at_once() {
    // A call can reach the connection after its transport closed it (an HTTP DELETE that
    // overtakes a request under way): nobody could cancel what it starts later.
    let mut h = Harness::new();
    h.initialize(json!({}));
    h.connection.close();
    let id = h.start_any("sleep", json!({"ms": 600_000}));
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "cancelled"
    );
    let (answers_tx, answers) = crossbeam_channel::unbounded();
    h.connection.handle_text(
        &json!({"jsonrpc": "2.0", "id": "plain", "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"ms": 600_000}}})
        .to_string(),
        Box::new(move |v| answers_tx.send(v).unwrap()),
    );
    let answer = answers
        .recv_timeout(WAIT)
        .expect("the plain call stops at once");
    assert!(answer.get("error").is_some(), "{answer}");
}

/// MCP cancellation: a receiver SHOULD stop processing a cancelled request and free its
/// resources. A plain call blocked on a request to the client (here an old-version client
/// calling `ask` inline) stops waiting when its client cancels the call: the request is
/// withdrawn, and the only worker is free for the next call.
#[test]
fn a_cancelled_plain_call_waiting_on_the_client_frees_its_worker() {
    let mut h = Harness::with_workers(1);
    h.result(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}}),
    );
    let (answers_tx, answers) = crossbeam_channel::unbounded();
    h.connection.handle_text(
        &json!({"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
                "params": {"name": "ask", "arguments": {"question": "q"}}})
        .to_string(),
        Box::new(move |v| answers_tx.send(v).unwrap()),
    );
    let asked = h.next_outgoing("elicitation/create");
    h.connection.handle_text(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "ask"}})
        .to_string(),
        Box::new(|_| panic!("a notification")),
    );
    let withdrawn = h.next_outgoing("notifications/cancelled");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"], "{withdrawn}");
    assert_eq!(
        answers
            .recv_timeout(WAIT)
            .expect("the cancelled call stops waiting"),
        Value::Null,
        "a cancelled call gets no response"
    );
    // The worker is free: the next call runs, and a late answer to the withdrawn request
    // is dropped.
    let echoed = h.result(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "next"}}),
    );
    assert_eq!(echoed["content"][0]["text"], "next");
    h.connection.handle_text(
        &json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}}).to_string(),
        Box::new(|_| panic!("a response")),
    );
}

/// A failed task's status message, taken from its tool's error, stays short however long
/// the error is: it goes out with every `tasks/get`, every `tasks/list` entry and every
/// status notification, where the error itself is read once, whole, from `tasks/result`.
#[test]
fn the_status_message_of_a_long_tool_error_stays_short() {
    let mut h = Harness::new();
    h.initialize(json!({}));
    let text = "é".repeat(500_000);
    let result = json!({"content": [{"type": "text", "text": text}], "isError": true});
    let id = h.start("passthrough", json!({ "result": result }));
    let full = h.result("tasks/result", json!({"taskId": id}));
    assert_eq!(
        full["content"][0]["text"],
        text.as_str(),
        "the error itself is whole"
    );
    let task = h.result("tasks/get", json!({"taskId": id}));
    assert_eq!(task["status"], "failed");
    let said = task["statusMessage"].as_str().expect("a status message");
    assert!(said.starts_with("Tool error: éé"), "{said}");
    assert!(said.len() <= 1024, "{} bytes", said.len());
}

/// A result the store refuses (nested past `MAX_PAYLOAD_DEPTH`) still ends its task:
/// failed, saying why, rather than `working` until its TTL.
#[test]
fn a_task_whose_result_the_store_refuses_still_ends_failed() {
    let mut h = Harness::new();
    let id = h.start("deep", json!({}));
    let error = h.request("tasks/result", json!({"taskId": id}));
    let message = error["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("refused"), "{error}");
    let task = h.result("tasks/get", json!({"taskId": id}));
    assert_eq!(task["status"], "failed", "{task}");
    let said = task["statusMessage"].as_str().unwrap_or("");
    assert!(said.contains("refused"), "{task}");
}

/// An input request the store refuses is the tool's error, not a cancellation.
#[test]
fn an_input_request_the_store_refuses_is_not_reported_as_a_cancellation() {
    let mut h = Harness::new();
    let created = h.call_2026("deep_ask", json!({}), true);
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    let done = h.poll_2026(&id, &["failed", "completed", "cancelled"]);
    assert_eq!(done["status"], "failed", "{done}");
    let error = done["error"]["message"].as_str().unwrap_or("");
    assert!(error.contains("nests deeper"), "{done}");
}

/// A batch as the text of one message.
fn batch(messages: &[Value]) -> String {
    Value::Array(messages.to_vec()).to_string()
}

#[test]
fn a_2025_03_26_client_may_send_batches() {
    let mut h = Harness::new();
    let init = h.result(
        "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {}}),
    );
    assert_eq!(init["protocolVersion"], "2025-03-26");
    let answers = h.send_text(&batch(&[
        json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
               "params": {"name": "sleep", "arguments": {"ms": 50}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        json!(7),
        json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {}}),
        json!([{"jsonrpc": "2.0", "id": 3, "method": "ping"}]),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get",
               "params": {"taskId": "00000000-0000-4000-8000-000000000000"}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "ping",
               "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
    ]));
    // One array, in the batch's order, once the slow call is done: nothing for the
    // notification, an error for each element that is no message, for an `initialize`
    // (never part of a batch), a nested batch and a 2026-07-28 request.
    let answers = answers.as_array().expect("an array of answers");
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(
        ids,
        [
            &json!("slow"),
            &json!(1),
            &Value::Null,
            &json!(2),
            &Value::Null,
            &json!(4),
            &json!(5)
        ],
        "{answers:?}"
    );
    assert_eq!(answers[0]["result"], text_result("slept 50 ms"));
    assert_eq!(answers[1]["result"], json!({}));
    let code = |i: usize| answers[i]["error"]["code"].as_i64();
    assert_eq!(code(2), Some(-32600));
    assert_eq!(code(3), Some(-32600));
    assert!(answers[3]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("initialize"));
    assert_eq!(code(4), Some(-32600));
    assert_eq!(code(5), Some(-32601), "no tasks before 2025-11-25");
    assert_eq!(code(6), Some(-32600));

    // Only notifications: nothing to answer (the transport hears Null).
    let none = h.send_text(&batch(&[
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]));
    assert_eq!(none, Value::Null);
    // JSON-RPC answers an empty batch, and one too long, with a single error.
    let empty = h.send_text("[]");
    assert_eq!(empty["error"]["code"], -32600, "{empty}");
    assert!(empty["id"].is_null());
    let pings: Vec<Value> = (0..=mcp_task_store::server::MAX_BATCH_LEN)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "ping"}))
        .collect();
    let long = h.send_text(&batch(&pings));
    assert_eq!(long["error"]["code"], -32600, "{long}");
    assert_eq!(
        h.send_text(&batch(&pings[1..])).as_array().unwrap().len(),
        pings.len() - 1
    );
}

#[test]
fn a_request_cancelled_within_its_batch_is_left_out_of_the_answers() {
    let mut h = Harness::new();
    h.result(
        "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {}}),
    );
    let answers = h.send_text(&batch(&[
        json!({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
               "params": {"name": "sleep", "arguments": {"ms": 600_000}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": "long"}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    ]));
    assert_eq!(answers, json!([{"jsonrpc": "2.0", "id": 1, "result": {}}]));
}

#[test]
fn batches_are_refused_on_versions_without_them() {
    for version in ["2025-11-25", "2025-06-18"] {
        let mut h = Harness::new();
        h.result(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}}),
        );
        let answer = h.send_text(&batch(&[
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        ]));
        assert_eq!(answer["error"]["code"], -32600, "{version}: {answer}");
        assert!(answer["id"].is_null(), "{answer}");
        assert!(!h.connection.accepts_batches());
    }
    // Nor before `initialize`, and initializing again on a later version ends them.
    let mut h = Harness::new();
    let ping = batch(&[json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})]);
    assert_eq!(h.send_text(&ping)["error"]["code"], -32600);
    h.result("initialize", json!({"protocolVersion": "2024-11-05"}));
    assert!(h.send_text(&ping).is_array());
    h.result("initialize", json!({"protocolVersion": "2025-06-18"}));
    assert_eq!(h.send_text(&ping)["error"]["code"], -32600);
}

#[test]
fn sep2663_input_the_call_did_not_declare_is_never_asked_for() {
    // 2026-07-28: a server MUST NOT send an input request whose client capability the
    // request did not declare; a client could not answer it, and the call or its task
    // would wait for nothing.
    let mut h = Harness::new();
    let tasks_only = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    // Multi round trip: the question is refused before it is asked, and no task is made.
    let refused = h.request(
        "tools/call",
        json!({"name": "test_tool_with_task", "arguments": {}, "_meta": tasks_only}),
    );
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
    // A task that asks: it fails with the same error instead of waiting, input_required,
    // for an answer that cannot come.
    let created = h.request(
        "tools/call",
        json!({"name": "multi_input", "arguments": {}, "_meta": tasks_only}),
    );
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    let failed = h.poll_2026(&id, &["failed", "input_required", "completed"]);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], -32021, "{failed}");
    assert!(failed.get("inputRequests").is_none(), "{failed}");
    // Declared, the same calls ask.
    let asked = h.call_2026("test_tool_with_task", json!({}), true);
    assert_eq!(asked["result"]["resultType"], "input_required");
}

#[test]
fn a_task_required_tool_refuses_a_client_without_the_extension_before_asking_anything() {
    // SEP-2663: a request the server can only serve as a task, from a client that did not
    // declare the extension, gets -32021 naming the extension. Not a multi-round-trip
    // question first (answered for nothing: the retry is refused all the same), nor the
    // -32021 of that question's capability (a client that adds it is still refused).
    let mut h = Harness::new();
    let elicitation_only = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    });
    let nothing_declared = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    for meta in [elicitation_only, nothing_declared] {
        let refused = h.request(
            "tools/call",
            json!({"name": "test_tool_with_task", "arguments": {}, "_meta": meta}),
        );
        assert_eq!(refused["error"]["code"], -32021, "{refused}");
        assert_eq!(
            refused["error"]["data"]["requiredCapabilities"],
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
            "{refused}"
        );
    }
}

/// A capability whose value is `null` or `false` is not declared: neither the tasks
/// extension on 2026-07-28 nor elicitation on 2025-11-25 is taken from such a value, and
/// the client is not asked for what it said it lacks.
#[test]
fn a_capability_declared_null_or_false_is_not_declared() {
    let mut h = Harness::new();
    for value in [json!(null), json!(false)] {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":
                {"extensions": {"io.modelcontextprotocol/tasks": value}},
        });
        let refused = h.request(
            "tools/call",
            json!({"name": "sleep_required", "arguments": {"ms": 1}, "_meta": meta}),
        );
        assert_eq!(refused["error"]["code"], -32021, "{value}: {refused}");
    }
    for value in [json!(null), json!(false)] {
        let mut h = Harness::new();
        h.initialize(json!({ "elicitation": value }));
        let id = h.start("ask", json!({"question": "?"}));
        let response = h.request("tasks/result", json!({"taskId": id}));
        assert_eq!(response["error"]["code"], -32603, "{value}: {response}");
        let message = response["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("did not declare"), "{value}: {response}");
    }
}

#[test]
fn a_tool_result_answered_inline_is_complete_whatever_resulttype_it_carries() {
    // 2026-07-28: `resultType: "task"` is for a CreateTaskResult only, and a client that
    // did not declare the input capabilities must not be handed `input_required`. A tool's
    // own result is `complete`, inline as when its task stores it.
    let mut h = Harness::new();
    for declare in [false, true] {
        for claimed in ["task", "input_required", "complete"] {
            let result = json!({"content": [], "resultType": claimed});
            let reply = h.call_2026("passthrough", json!({ "result": result }), declare);
            assert_eq!(
                reply["result"]["resultType"], "complete",
                "declare {declare}: {reply}"
            );
        }
    }
}

/// A tool result must be a `CallToolResult` object: one that is not (a tool passing on
/// whatever another server answered, say) is the tool's failure, an internal error, on
/// every path. Handed on, it broke the protocol: no `resultType` on 2026-07-28, no
/// related-task `_meta` on `tasks/result`, a `result` that is no object in `tasks/get`.
#[test]
fn a_tool_result_that_is_not_an_object_is_an_internal_error_everywhere() {
    for result in [
        json!(null),
        json!(42),
        json!("text"),
        json!([{"type": "text"}]),
    ] {
        let mut h = Harness::new();
        let reply = h.call_2026("passthrough", json!({ "result": result }), false);
        assert_eq!(reply["error"]["code"], -32603, "inline 2026-07-28: {reply}");
        let created = h.call_2026("passthrough", json!({"result": result}), true);
        match created["result"]["resultType"].as_str() {
            Some("task") => {
                let id = created["result"]["taskId"].as_str().unwrap().to_owned();
                let done = h.poll_2026(&id, &["completed", "failed"]);
                assert_eq!(done["status"], "failed", "{done}");
                assert_eq!(done["error"]["code"], -32603, "{done}");
            }
            _ => assert_eq!(created["error"]["code"], -32603, "{created}"),
        }

        h.initialize(json!({}));
        let reply = h.request(
            "tools/call",
            json!({"name": "passthrough", "arguments": {"result": result}}),
        );
        assert_eq!(reply["error"]["code"], -32603, "inline 2025-11-25: {reply}");
        let id = h.start("passthrough", json!({ "result": result }));
        let reply = h.request("tasks/result", json!({"taskId": id}));
        assert_eq!(reply["error"]["code"], -32603, "task 2025-11-25: {reply}");
    }
}

// ------------------------------------------------------------ subscriptions/listen (SEP-2663)

impl Harness {
    /// Opens a task subscription under request id `id`; its messages come on `outgoing`.
    fn listen(&self, id: &str, notifications: Value) {
        let text = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                          "params": {"_meta": meta(true), "notifications": notifications}});
        let answer = self.send_text(&text.to_string());
        assert!(answer.is_null(), "answered at once: {answer}");
    }

    /// The error a `subscriptions/listen` with `params` gets.
    fn listen_error(&mut self, params: Value) -> Value {
        let response = self.request("subscriptions/listen", params);
        assert!(response.get("result").is_none(), "{response}");
        response["error"].clone()
    }

    /// Reports the store's current state of task `id` to the connection, as the store's
    /// event would (deterministic: whatever it sends is on `outgoing` once this returns).
    fn feed(&self, id: &str) {
        let task = self
            .server
            .store()
            .get(id.parse().unwrap(), None)
            .expect("the task");
        self.connection
            .handle_store_event(&mcp_task_store::StoreEvent::Status {
                task,
                session: None,
            });
    }

    /// Everything already sent to the client.
    fn sent(&self) -> Vec<Value> {
        self.outgoing.try_iter().collect()
    }

    fn task_2026_id(&mut self, tool: &str, arguments: Value) -> String {
        let created = self.call_2026(tool, arguments, true);
        assert_eq!(created["result"]["resultType"], "task", "{created}");
        created["result"]["taskId"].as_str().unwrap().to_string()
    }
}

fn subscription_of(message: &Value) -> &Value {
    &message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
}

#[test]
fn a_subscription_is_acknowledged_then_reports_each_task_until_all_ended() {
    let mut h = Harness::new();
    let asking = h.task_2026_id("multi_input", json!({}));
    let waiting = h.poll_2026(&asking, &["input_required"]);
    let sleeping = h.task_2026_id("sleep_required", json!({"ms": 600_000}));
    h.sent();
    h.listen(
        "L1",
        json!({"taskIds": [asking, sleeping, "5c1e0000-0000-4000-8000-000000000000",
                           asking, "not-a-task-id"],
               "toolsListChanged": true}),
    );
    let opened = h.sent();
    assert_eq!(opened.len(), 3, "{opened:#?}");
    // First the acknowledgement: only the known tasks, once each; no list changes (the
    // server has none to report).
    assert_eq!(
        opened[0]["method"],
        "notifications/subscriptions/acknowledged"
    );
    assert_eq!(
        opened[0]["params"]["notifications"],
        json!({"taskIds": [asking, sleeping]})
    );
    assert_eq!(subscription_of(&opened[0]), "L1");
    // Then each task's state as tasks/get has it, input requests included.
    for (message, id) in opened[1..].iter().zip([&asking, &sleeping]) {
        assert_eq!(message["method"], "notifications/tasks");
        assert_eq!(message["params"]["taskId"], id.as_str());
        assert_eq!(subscription_of(message), "L1");
        assert!(message["params"].get("resultType").is_none(), "{message}");
    }
    assert_eq!(opened[1]["params"]["status"], "input_required");
    assert_eq!(
        opened[1]["params"]["inputRequests"], waiting["inputRequests"],
        "{:#}",
        opened[1]
    );
    // An event for a change already reported sends nothing.
    h.feed(&asking);
    assert!(h.sent().is_empty());

    // The one task ends: its final state, result inline.
    let keys: Vec<String> = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let answers: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| {
            (
                k.clone(),
                json!({"action": "accept", "content": {"name": "A", "confirm": true}}),
            )
        })
        .collect();
    h.task_2026(
        "tasks/update",
        json!({"taskId": asking, "inputResponses": answers}),
    );
    h.poll_2026(&asking, &["completed"]);
    h.feed(&asking);
    let ended = h.sent();
    assert_eq!(ended.len(), 1, "{ended:#?}");
    assert_eq!(ended[0]["params"]["status"], "completed");
    assert!(
        ended[0]["params"]["result"]["content"].is_array(),
        "{:#}",
        ended[0]
    );
    // An ended task is no longer followed.
    h.feed(&asking);
    assert!(h.sent().is_empty());

    // The other ends too: its state, then the subscription's result.
    h.task_2026("tasks/cancel", json!({"taskId": sleeping}));
    h.feed(&sleeping);
    let last = h.sent();
    assert_eq!(last.len(), 2, "{last:#?}");
    assert_eq!(last[0]["params"]["status"], "cancelled");
    assert_eq!(
        last[1],
        json!({"jsonrpc": "2.0", "id": "L1", "result": {"resultType": "complete",
               "_meta": {"io.modelcontextprotocol/subscriptionId": "L1"}}})
    );
}

#[test]
fn a_subscription_with_nothing_to_follow_is_acknowledged_and_ends() {
    let h = Harness::new();
    h.listen("none", json!({}));
    let sent = h.sent();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[0]["params"]["notifications"], json!({}));
    assert_eq!(sent[1]["id"], "none");
    assert_eq!(sent[1]["result"]["resultType"], "complete");

    h.listen(
        "unknown",
        json!({"taskIds": ["5c1e0000-0000-4000-8000-000000000000"]}),
    );
    let sent = h.sent();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[0]["params"]["notifications"], json!({"taskIds": []}));
    assert_eq!(sent[1]["id"], "unknown");
}

#[test]
fn a_task_that_already_ended_is_reported_once_and_the_subscription_ends() {
    let mut h = Harness::new();
    let id = h.task_2026_id("failing_job", json!({}));
    h.poll_2026(&id, &["completed", "failed"]);
    h.listen("7", json!({"taskIds": [id]}));
    let sent = h.sent();
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert_eq!(sent[1]["params"]["taskId"], id.as_str());
    assert_eq!(sent[2]["id"], "7");
}

#[test]
fn subscribing_needs_the_extension_and_well_formed_notifications() {
    let mut h = Harness::new();
    let error = h.listen_error(json!({"_meta": meta(false), "notifications": {"taskIds": []}}));
    assert_eq!(error["code"], -32021, "{error}");
    assert!(
        error["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"]
            .is_object()
    );
    // Core notifications alone need no extension (none is served: acknowledged empty).
    let text = json!({"jsonrpc": "2.0", "id": "core", "method": "subscriptions/listen",
                      "params": {"_meta": meta(false), "notifications": {"toolsListChanged": true}}});
    assert!(h.send_text(&text.to_string()).is_null());
    let sent = h.sent();
    assert_eq!(sent[0]["params"]["notifications"], json!({}), "{sent:#?}");
    let too_many: Vec<String> = (0..=mcp_task_store::server::MAX_LISTEN_TASKS)
        .map(|i| format!("5c1e0000-0000-4000-8000-{i:012}"))
        .collect();
    for bad in [
        json!({"_meta": meta(true)}),
        json!({"_meta": meta(true), "notifications": null}),
        json!({"_meta": meta(true), "notifications": ["taskIds"]}),
        json!({"_meta": meta(true), "notifications": {"taskIds": "5c1e"}}),
        json!({"_meta": meta(true), "notifications": {"taskIds": [1, 2]}}),
        json!({"_meta": meta(true), "notifications": {"taskIds": too_many}}),
    ] {
        let error = h.listen_error(bad.clone());
        assert_eq!(error["code"], -32602, "{bad} -> {error}");
    }
    assert!(h.sent().is_empty(), "refusals send nothing else");
    // A 2025-11-25 request has no such method.
    let error = h.listen_error(json!({"notifications": {"taskIds": []}}));
    assert_eq!(error["code"], -32601, "{error}");
}

#[test]
fn a_cancelled_subscription_sends_nothing_more_and_its_id_is_free_again() {
    let mut h = Harness::new();
    let id = h.task_2026_id("sleep_required", json!({"ms": 600_000}));
    h.listen("L", json!({"taskIds": [id]}));
    assert_eq!(h.sent().len(), 2);
    // The id is an open subscription's: a second one under it is refused.
    let text = json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
                      "params": {"_meta": meta(true), "notifications": {"taskIds": [id]}}});
    let refused = h.send_text(&text.to_string());
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": "L"}});
    h.connection.handle_text(
        &cancel.to_string(),
        Box::new(|answer| panic!("a notification answered: {answer}")),
    );
    h.task_2026("tasks/cancel", json!({"taskId": id}));
    h.feed(&id);
    assert!(h.sent().is_empty(), "nothing after the cancel");
    h.listen("L", json!({"taskIds": [id]}));
    assert_eq!(h.sent().len(), 3, "the id may be used again");
}

#[test]
fn lost_events_are_made_up_for_on_a_subscription_too() {
    let mut h = Harness::new();
    let id = h.task_2026_id("sleep_required", json!({"ms": 600_000}));
    h.listen("L", json!({"taskIds": [id]}));
    h.sent();
    h.task_2026("tasks/cancel", json!({"taskId": id}));
    // The cancel's event was lost; the subscriber hears that it missed some.
    h.connection
        .handle_store_event(&mcp_task_store::StoreEvent::Lagged { missed: 1 });
    let sent = h.sent();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[0]["params"]["status"], "cancelled");
    assert_eq!(sent[1]["id"], "L");
}

/// After lost events each followed task is looked up once, however many subscriptions
/// follow it: a lookup per subscription would let one client (up to `MAX_LISTENS` of them,
/// each on the same `MAX_LISTEN_TASKS` tasks) turn every lag into a million lookups on
/// the thread that routes everyone's events.
#[test]
fn lost_events_cost_one_lookup_per_followed_task() {
    let owned = Store::builder().build().unwrap();
    let store = Arc::new(OnlyRequired::new(owned.handle()));
    let lookups = store.detail_lookups();
    let h = &mut Harness::build(Some(store), 100, 4, None);
    h._store = Some(owned);
    let ids: Vec<String> = (0..3)
        .map(|_| h.task_2026_id("sleep_required", json!({"ms": 600_000})))
        .collect();
    for n in 0..8 {
        h.listen(&format!("L{n}"), json!({ "taskIds": ids }));
    }
    h.sent();
    h.task_2026("tasks/cancel", json!({"taskId": ids[0]}));
    let before = lookups.load(std::sync::atomic::Ordering::SeqCst);
    h.connection
        .handle_store_event(&mcp_task_store::StoreEvent::Lagged { missed: 1 });
    let after = lookups.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(after - before, ids.len(), "lookups for one lag");
    // Every subscription still hears of the change.
    let sent = h.sent();
    let cancelled = sent
        .iter()
        .filter(|m| m["params"]["status"] == "cancelled" && m["params"]["taskId"] == ids[0])
        .count();
    assert_eq!(cancelled, 8, "{sent:#?}");
}

/// A followed task that expires and is removed is dropped from the subscription, which
/// ends once it follows nothing else (the task's failure was never reported: its event
/// is not fed here, as when it was lost before the removal).
#[test]
fn a_subscription_ends_when_its_task_expires_and_is_gone() {
    let clock = ManualClock::new();
    let owned = Store::builder()
        .clock(clock.clone())
        .default_ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut h = Harness::with_store(Some(owned.handle()), 100);
    h._store = Some(owned);
    let id = h.task_2026_id("sleep_required", json!({"ms": 600_000}));
    h.listen("L", json!({"taskIds": [id]}));
    assert_eq!(h.sent().len(), 2);
    clock.advance(Duration::from_secs(1));
    clock.advance(Duration::from_secs(31));
    let response = h.task_2026("tasks/get", json!({"taskId": id}));
    assert_eq!(response["error"]["code"], -32602, "gone: {response}");
    h.connection.handle_store_event(&StoreEvent::Expired {
        task_id: id.parse().unwrap(),
        session: None,
    });
    let sent = h.sent();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0]["id"], "L");
    assert_eq!(sent[0]["result"]["resultType"], "complete", "{sent:#?}");
}

#[test]
fn closing_the_connection_ends_its_subscriptions_without_a_word() {
    let mut h = Harness::new();
    let id = h.task_2026_id("sleep_required", json!({"ms": 600_000}));
    h.listen("L", json!({"taskIds": [id]}));
    h.sent();
    h.connection.close();
    h.task_2026("tasks/cancel", json!({"taskId": id}));
    h.feed(&id);
    assert!(h.sent().is_empty());
}

#[test]
fn a_subscription_follows_real_store_events() {
    let mut h = Harness::new();
    let _events = h.pump_events();
    let id = h.task_2026_id("sleep_required", json!({"ms": 600_000}));
    h.listen("L", json!({"taskIds": [id]}));
    assert_eq!(
        h.next_outgoing("notifications/tasks")["params"]["status"],
        "working"
    );
    h.task_2026("tasks/cancel", json!({"taskId": id}));
    let ended = h.next_outgoing("notifications/tasks");
    assert_eq!(ended["params"]["status"], "cancelled", "{ended}");
    let result = h.outgoing.recv_timeout(WAIT).expect("the result");
    assert_eq!(result["id"], "L", "{result}");
}

#[test]
fn a_subscription_whose_id_is_too_long_to_repeat_in_each_message_is_refused() {
    let mut h = Harness::new();
    let id = h.task_2026_id("sleep_required", json!({"ms": 600_000}));
    // Every message of a subscription repeats its id: one request of a few megabytes
    // would otherwise queue a copy per task (over HTTP, before the client reads any).
    let long = "x".repeat(64 * 1024);
    let text = json!({"jsonrpc": "2.0", "id": long, "method": "subscriptions/listen",
                      "params": {"_meta": meta(true), "notifications": {"taskIds": [id]}}});
    let refused = h.send_text(&text.to_string());
    assert_eq!(
        refused["error"]["code"],
        -32600,
        "{:.200}",
        refused.to_string()
    );
    assert_eq!(refused["id"], long.as_str());
    assert!(h.sent().is_empty(), "nothing else is sent");
    // An id of a usual length is taken.
    h.listen(&"x".repeat(200), json!({"taskIds": [id]}));
    assert_eq!(h.sent().len(), 2);
}

/// A listen that reaches a connection already closed (an embedder's transport may hand over
/// a message it read as it ended, from another thread) is refused, as a `tasks/result` is:
/// nothing would ever end that subscription, whose messages would wait for room in a queue
/// nobody reads any more, holding whichever thread reports the store's events.
#[test]
fn a_listen_after_its_connection_closed_is_refused() {
    let mut h = Harness::new();
    let task = h.task_2026_id("sleep_required", json!({"ms": 600_000}));
    h.sent();
    h.connection.close();
    let text = json!({"jsonrpc": "2.0", "id": "late", "method": "subscriptions/listen",
                      "params": {"_meta": meta(true), "notifications": {"taskIds": [task]}}});
    let answer = h.send_text(&text.to_string());
    assert_eq!(answer["id"], "late", "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert!(h.sent().is_empty(), "nothing of a subscription is sent");
    // Nothing follows the task either.
    h.task_2026("tasks/cancel", json!({"taskId": task}));
    h.feed(&task);
    assert!(h.sent().is_empty());
}

/// A panic payload whose own drop panics: dropping it (after the tool's panic was caught)
/// panics anew.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("the payload's drop panics too");
    }
}

/// Sleeps `ms` (past a promotion budget, say), then panics with a [`PanicsOnDrop`].
fn payload_bomb_tool() -> Tool {
    Tool::new(
        "payload_bomb",
        "Panics with a payload that panics when dropped",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |args, ctx| {
            let ms = args["ms"].as_u64().unwrap_or(0);
            ctx.sleep(Duration::from_millis(ms))?;
            std::panic::panic_any(PanicsOnDrop)
        },
    )
}

/// A tool whose panic payload panics when dropped still ends its task (failed), on either
/// revision and through a promotion, and the worker carries on: the run's outcome must not
/// be lost with a second panic, leaving the task `working` until its TTL.
#[test]
fn a_tool_whose_panic_payload_panics_on_drop_still_fails_its_task() {
    let mut h = Harness::build(None, 100, 1, Some(Duration::from_millis(20)));
    h.initialize(json!({}));
    let id = h.start("payload_bomb", json!({}));
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let task = h.result("tasks/get", json!({"taskId": id}));
        if task["status"] == "failed" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "stuck at {task}");
        std::thread::yield_now();
    }
    // Inline: an error answer.
    let inline = h.request(
        "tools/call",
        json!({"name": "payload_bomb", "arguments": {}}),
    );
    assert_eq!(inline["error"]["code"], -32603, "{inline}");
    // Promoted (it sleeps well past the budget): the task ends failed.
    let created = h.call_2026("payload_bomb", json!({"ms": 1000}), true);
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(
        h.poll_2026(&id, &["failed", "completed"])["status"],
        "failed"
    );
    // The one worker still serves.
    let echoed = h.request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    assert!(echoed.get("result").is_some(), "{echoed}");
}

/// A task tool that waits for `gate` and then sleeps `ms` (through its context), reporting
/// on `done` how its sleep ended.
/// A server on `store` with only [`gated_sleep_tool`], initialized on 2025-11-25; with the
/// gate's opener and the channel each sleep's outcome arrives on.
fn gated_sleep_harness(
    store: Store,
) -> (
    Harness,
    Sender<()>,
    Receiver<Result<(), mcp_task_store::server::Cancelled>>,
) {
    let (open, gate) = crossbeam_channel::unbounded();
    let (done_tx, done) = crossbeam_channel::unbounded();
    let server = Server::builder()
        .store(Arc::new(store.handle()))
        .tool(gated_sleep_tool(gate, done_tx))
        .build()
        .unwrap();
    let (tx, outgoing) = crossbeam_channel::unbounded();
    let mut h = Harness {
        connection: server.connect(tx, None),
        server,
        outgoing,
        responses: crossbeam_channel::unbounded(),
        next_id: 0,
        _store: Some(store),
    };
    h.initialize(json!({}));
    (h, open, done)
}

fn gated_sleep_tool(
    gate: Receiver<()>,
    done: Sender<Result<(), mcp_task_store::server::Cancelled>>,
) -> Tool {
    Tool::new(
        "gated_sleep",
        "Waits for the test, then sleeps",
        json!({"type": "object"}),
        TaskSupport::Optional,
        move |args, ctx| {
            gate.recv().unwrap();
            // `u64::MAX` ms stands for `Duration::MAX` (past what any clock can add).
            let slept = ctx.sleep(match args["ms"].as_u64().unwrap() {
                u64::MAX => Duration::MAX,
                ms => Duration::from_millis(ms),
            });
            done.send(slept).unwrap();
            slept?;
            Ok(text_result("slept"))
        },
    )
}

/// `sleep(Duration::MAX)` (or any duration past what the clock can add) sleeps until the
/// task is cancelled, instead of panicking on the overflowing deadline.
#[test]
fn a_tool_may_sleep_until_cancelled() {
    let store = Store::builder().build().unwrap();
    let handle = store.handle();
    let (mut h, open, done) = gated_sleep_harness(store);
    let id = h.start("gated_sleep", json!({"ms": u64::MAX}));
    open.send(()).unwrap();
    // The sleep waits on the store for its task to end.
    let deadline = std::time::Instant::now() + WAIT;
    while handle.stats().unwrap().waiters < 1 {
        assert!(std::time::Instant::now() < deadline, "the tool never slept");
        std::thread::yield_now();
    }
    h.result("tasks/cancel", json!({"taskId": id}));
    let slept = done
        .recv_timeout(WAIT)
        .expect("the sleep ends with the task");
    assert!(slept.is_err(), "cancelled: {slept:?}");
}

/// The store lets only so many callers block on one task (`max_waiters_per_task`), and a
/// client's blocked `tasks/result` calls take those places. A tool that sleeps while they
/// are all taken must still sleep its time and finish, not be told its task was cancelled
/// (and fail it with "the task was cancelled") when nobody cancelled it; and a cancel must
/// still wake it.
#[test]
fn a_tool_sleeps_its_time_while_clients_take_every_waiting_place_on_its_task() {
    let store = Store::builder().max_waiters_per_task(2).build().unwrap();
    let handle = store.handle();
    let (mut h, open, done) = gated_sleep_harness(store);
    let (results_tx, results) = crossbeam_channel::unbounded::<Value>();
    let wait_for_both = |h: &mut Harness, id: &str| {
        for n in 0..2 {
            let text = json!({"jsonrpc": "2.0", "id": format!("r{n}"), "method": "tasks/result",
                              "params": {"taskId": id}});
            let answers = results_tx.clone();
            h.connection.handle_text(
                &text.to_string(),
                Box::new(move |v| answers.send(v).unwrap()),
            );
        }
        let deadline = std::time::Instant::now() + WAIT;
        while handle.stats().unwrap().waiters < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the calls never blocked"
            );
            std::thread::yield_now();
        }
    };

    // It sleeps its time and completes; the blocked calls get its result.
    let id = h.start("gated_sleep", json!({"ms": 100}));
    wait_for_both(&mut h, &id);
    open.send(()).unwrap();
    assert_eq!(done.recv_timeout(WAIT).unwrap(), Ok(()));
    for _ in 0..2 {
        let answer = results.recv_timeout(WAIT).unwrap();
        assert_eq!(answer["result"]["content"][0]["text"], "slept", "{answer}");
    }
    assert_eq!(
        h.result("tasks/get", json!({"taskId": id}))["status"],
        "completed"
    );

    // Cancelled while it sleeps that way, it wakes.
    let id = h.start("gated_sleep", json!({"ms": 600_000}));
    wait_for_both(&mut h, &id);
    open.send(()).unwrap();
    assert!(
        done.recv_timeout(Duration::from_millis(300)).is_err(),
        "the sleep ended at once"
    );
    h.result("tasks/cancel", json!({"taskId": id}));
    assert_eq!(
        done.recv_timeout(WAIT).unwrap(),
        Err(mcp_task_store::server::Cancelled)
    );
}
