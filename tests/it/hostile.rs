//! Hostile input, property-tested. Whatever a client sends a `Connection` (arbitrary bytes,
//! plausible JSON-RPC with wrong types, unknown ids, hostile sizes, calls in the wrong
//! state), under either revision:
//!
//! * nothing panics and nothing hangs;
//! * every request (an object with `"jsonrpc": "2.0"`, a string or integer id, a string
//!   method and object params) gets exactly one response carrying its id, or none only when
//!   the client cancelled it with `notifications/cancelled`;
//! * notifications and responses get nothing; anything malformed gets one error;
//! * every error code is one the spec names for the situation;
//! * afterwards the connection still answers `ping` and serves a task from creation to its
//!   result, through the same store.
//!
//! Then narrower properties: `params.task` of any shape (a `TaskMetadata` object or -32602
//! where tasks were negotiated, ignored elsewhere), answers of any shape to a tool's
//! elicitation (2025-11-25) and to a task's input requests (SEP-2663 `tasks/update`), the
//! same random messages from two threads at once, and arbitrary bytes through the stdio
//! transport.
//!
//! Every wait on the server is bounded by a 10 s hang detector; nothing sleeps to
//! synchronise. Case counts keep the file to a few seconds in a debug build; raise them
//! (the `cases` of each block) to hunt longer.

use std::io::Cursor;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use mcp_task_store::server::{demo, Connection, Server, MAX_BATCH_LEN};
use mcp_task_store::StoreConfig;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

use crate::fixtures::{
    boom_tool, kind, names_a_member_twice, panic_tool, Captured, Kind, CAPS_KEY, SEP_VERSION,
    SUPPORTED, TASKS_EXT, VERSION_KEY,
};

/// Longest any answer may take before the test calls it a hang. Only failing runs wait this
/// long: every tool here finishes in well under a second.
const HANG: Duration = Duration::from_secs(10);

/// Real method names (both revisions, requests and notifications) and a few that exist in
/// MCP but not in this server.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
    "server/discover",
    "notifications/cancelled",
    "notifications/initialized",
    "notifications/tasks/status",
    "notifications/progress",
    "subscriptions/listen",
    "resources/list",
    "elicitation/create",
];

/// Methods a 2025-11-25 request may be served by (before any `initialize` too).
const METHODS_2025: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
];
/// Methods a 2026-07-28 request may be served by.
const METHODS_SEP: &[&str] = &[
    "server/discover",
    "ping",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
];

/// The `_meta` key naming the subscription a message belongs to.
const SUBSCRIPTION_KEY: &str = "io.modelcontextprotocol/subscriptionId";

/// The tools offered: the demo tools that finish quickly when given small numbers (not
/// `failing_job` and `protocol_error_job`, which take a fixed 0.3-1 s), and two that fail.
const TOOL_NAMES: &[&str] = &[
    "sleep",
    "sleep_required",
    "fail",
    "count",
    "echo",
    "ask",
    "greet",
    "slow_compute",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
    "boom",
    "panic",
];

/// Field names the generators favour, so random params hit real fields with wrong types.
const FIELDS: &[&str] = &[
    "taskId",
    "cursor",
    "ttl",
    "task",
    "name",
    "arguments",
    "_meta",
    "requestId",
    "inputResponses",
    "protocolVersion",
    "capabilities",
    "clientInfo",
    "reason",
    "result",
    "error",
    "code",
    "message",
    "extensions",
    "content",
    "action",
    VERSION_KEY,
    CAPS_KEY,
    TASKS_EXT,
];

/// Which revision a connection is driven in: 2025-11-25 after `initialize`, or SEP-2663,
/// stateless, with no `initialize` at all.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rev {
    V2025,
    Sep2663,
}

// ----- the server under test -------------------------------------------------------------

fn server() -> Server {
    // A task that waits for input nobody sends (a SEP-2663 `multi_input`) ends by itself,
    // so a `tasks/result` on it cannot wait for ever.
    server_with_ttl(Some(Duration::from_secs(2)))
}

fn server_with_ttl(default_ttl: Option<Duration>) -> Server {
    let mut builder = Server::builder()
        // Enough that tasks waiting for input (until their TTL) cannot hold them all.
        .workers(16)
        // Promote SEP-2663 calls soon, so the random calls take that path often.
        .promote_after(Duration::from_millis(5))
        .store_config(StoreConfig {
            default_ttl,
            page_size: 3,
            ..StoreConfig::default()
        });
    let tools = demo::tools()
        .into_iter()
        .filter(|tool| TOOL_NAMES.contains(&tool.name()))
        .chain([boom_tool(), panic_tool()]);
    for tool in tools {
        builder = builder.tool(tool);
    }
    builder.build().unwrap()
}

/// A connection driven in-process, with the store's events pumped into it as the stdio
/// transport does, and what the test learnt from its answers (task ids, a cursor) to make
/// later messages name real things.
struct Harness {
    server: Server,
    connection: Arc<Connection>,
    outgoing: Receiver<Value>,
    stop_events: Option<Sender<()>>,
    events: Option<JoinHandle<()>>,
    rev: Rev,
    /// What the server sent on its own (requests and notifications), read so far.
    from_server: Vec<Value>,
    /// The cancels the test sent, each with how many of the server's messages had been
    /// read when it had taken effect (a cancelled subscription sends nothing after that);
    /// `None` when cancels were sent from two threads at once, unnoted.
    cancels: Option<Vec<(usize, Value)>>,
    /// Ids of the server's requests the test has not answered yet.
    unanswered: Vec<Value>,
    tasks: Vec<String>,
    cursor: Option<String>,
    next_id: i64,
}

impl Harness {
    fn new(rev: Rev) -> Harness {
        Harness::with(server(), rev)
    }

    fn with(server: Server, rev: Rev) -> Harness {
        let (tx, outgoing) = crossbeam_channel::unbounded();
        let connection = server.connect(tx, None);
        let (stop_events, stop) = crossbeam_channel::bounded::<()>(0);
        let events = {
            let events = server.store().subscribe().unwrap();
            let connection = connection.clone();
            std::thread::spawn(move || loop {
                crossbeam_channel::select! {
                    recv(events) -> event => match event {
                        Ok(event) => connection.handle_store_event(&event),
                        Err(_) => return,
                    },
                    recv(stop) -> _ => return,
                }
            })
        };
        let mut h = Harness {
            server,
            connection,
            outgoing,
            stop_events: Some(stop_events),
            events: Some(events),
            rev,
            from_server: Vec::new(),
            cancels: Some(Vec::new()),
            unanswered: Vec::new(),
            tasks: Vec::new(),
            cursor: None,
            next_id: 1_000_000,
        };
        if rev == Rev::V2025 {
            h.initialize();
        }
        h
    }

    /// Hands `text` to the connection; the receiver gets its response, or disconnects if
    /// the responder is dropped uncalled.
    fn send(&self, text: &str) -> Receiver<Value> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.connection.handle_text(
            text,
            Box::new(move |response| {
                let _ = tx.send(response);
            }),
        );
        rx
    }

    /// A well-formed request of the test's own (ids far from the generated ones); its
    /// response.
    fn request(&mut self, method: &str, mut params: Value) -> Value {
        if self.rev == Rev::Sep2663 {
            params["_meta"] = sep_meta();
        }
        self.next_id += 1;
        let id = self.next_id;
        let text = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self
            .send(&text.to_string())
            .recv_timeout(HANG)
            .unwrap_or_else(|e| panic!("{method}: no response ({e:?})"));
        assert_eq!(response["id"], json!(id), "{response}");
        self.learn(&response);
        response
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// Initializes as a 2025-11-25 client that supports elicitation, so the tools that ask
    /// send requests the random messages can answer (rightly, wrongly or twice).
    fn initialize(&mut self) {
        let result = self.result(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                   "clientInfo": {"name": "hostile", "version": "0"}}),
        );
        assert_eq!(result["protocolVersion"], "2025-11-25");
    }

    /// Creates a task the usual way for the revision; its id.
    fn create_task(&mut self, ms: u64) -> String {
        let (name, params) = match self.rev {
            Rev::V2025 => (
                "sleep",
                json!({"name": "sleep", "arguments": {"ms": ms}, "task": {"ttl": 60_000}}),
            ),
            Rev::Sep2663 => (
                "sleep_required",
                json!({"name": "sleep_required", "arguments": {"ms": ms}}),
            ),
        };
        let created = self.result("tools/call", params);
        let id = match self.rev {
            Rev::V2025 => created["task"]["taskId"].as_str(),
            Rev::Sep2663 => {
                assert_eq!(created["resultType"], "task", "{name}: {created}");
                created["taskId"].as_str()
            }
        };
        id.unwrap_or_else(|| panic!("{name}: no task in {created}"))
            .to_string()
    }

    /// Polls a SEP-2663 task until its status is one of `until`.
    fn poll(&mut self, id: &str, until: &[&str]) -> Value {
        let deadline = Instant::now() + HANG;
        loop {
            let task = self.result("tasks/get", json!({"taskId": id}));
            if until.iter().any(|s| task["status"] == *s) {
                return task;
            }
            assert!(Instant::now() < deadline, "stuck: {task}");
            std::thread::yield_now();
        }
    }

    /// The next request the server sends the client (notifications are kept aside).
    fn next_server_request(&mut self) -> Value {
        loop {
            let message = self.outgoing.recv_timeout(HANG).expect("a server request");
            if message.get("id").is_some() {
                return message;
            }
            self.from_server.push(message);
        }
    }

    /// Remembers the task ids and cursor an answer shows, for later placeholders.
    fn learn(&mut self, response: &Value) {
        let result = &response["result"];
        let mut ids: Vec<&Value> = vec![&result["taskId"], &result["task"]["taskId"]];
        if let Some(tasks) = result["tasks"].as_array() {
            ids.extend(tasks.iter().map(|t| &t["taskId"]));
        }
        for id in ids.into_iter().filter_map(Value::as_str) {
            if !self.tasks.iter().any(|known| known == id) {
                self.tasks.push(id.to_string());
            }
        }
        if let Some(cursor) = result["nextCursor"].as_str() {
            self.cursor = Some(cursor.to_string());
        }
    }

    /// Replaces the placeholders `@@task0`..`@@task3` and `@@cursor` with things the
    /// server handed out (a made-up id when it handed out none yet), and an `"id": "@@out"`
    /// with the id of the server's latest request.
    fn resolve(&self, value: &mut Value) {
        match value {
            Value::String(text) => {
                if let Some(n) = text
                    .strip_prefix("@@task")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    *text = match self.tasks.len() {
                        0 => "00000000-0000-4000-8000-000000000000".into(),
                        len => self.tasks[n % len].clone(),
                    };
                } else if text == "@@cursor" {
                    *text = self.cursor.clone().unwrap_or_default();
                }
            }
            Value::Object(object) if object.get("id") == Some(&json!("@@out")) => {
                let id = self.unanswered.last().cloned().unwrap_or(json!("s-1"));
                object.insert("id".into(), id);
                object.values_mut().for_each(|v| self.resolve(v));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.resolve(v)),
            Value::Object(object) => object.values_mut().for_each(|v| self.resolve(v)),
            _ => {}
        }
    }

    /// The connection and the store still work: `ping` is answered, and a task goes from
    /// creation through `tasks/get` to its result. (On 2025-11-25 the connection is
    /// initialized again first: a random `initialize` may have settled on a version
    /// without tasks, which must then be refused.)
    fn still_works(&mut self) {
        let pong = self.result("ping", json!({}));
        let expected = match self.rev {
            Rev::V2025 => json!({}),
            Rev::Sep2663 => json!({"resultType": "complete"}),
        };
        assert_eq!(pong, expected);
        if self.rev == Rev::V2025 {
            self.initialize();
        }
        let id = self.create_task(1);
        let got = self.result("tasks/get", json!({"taskId": id}));
        assert_eq!(got["taskId"], json!(id), "{got}");
        let result = match self.rev {
            Rev::V2025 => self.result("tasks/result", json!({"taskId": id})),
            Rev::Sep2663 => {
                let deadline = Instant::now() + HANG;
                loop {
                    let task = self.result("tasks/get", json!({"taskId": id}));
                    if task["status"] == "completed" {
                        break task["result"].clone();
                    }
                    assert_eq!(task["status"], "working", "{task}");
                    assert!(Instant::now() < deadline, "stuck: {task}");
                    std::thread::yield_now();
                }
            }
        };
        assert_eq!(result["content"][0]["text"], "slept 1 ms", "{result}");
        let stored = self
            .server
            .store()
            .get(mcp_task_store::TaskId::parse(&id).unwrap(), None)
            .unwrap();
        assert_eq!(stored.status, mcp_task_store::TaskStatus::Completed);
    }

    /// Reads what the server sent on its own, leaving its requests for the random
    /// messages to answer (`@@out` placeholders name them).
    fn read_server(&mut self) {
        while let Ok(message) = self.outgoing.try_recv() {
            self.record(message);
        }
    }

    fn record(&mut self, message: Value) {
        if let (Some(id), true) = (message.get("id"), message["method"].is_string()) {
            self.unanswered.push(id.clone());
        }
        self.from_server.push(message);
    }

    /// Declines every request of the server's still unanswered (the random messages may
    /// have answered some already: a second answer must be ignored), as a client done
    /// with the conversation would.
    fn decline_all(&mut self) {
        for id in std::mem::take(&mut self.unanswered) {
            let decline = json!({"jsonrpc": "2.0", "id": id, "result": {"action": "decline"}});
            drop(self.send(&decline.to_string()));
        }
    }

    /// Waits for one answer, declining the server's own requests meanwhile (a tool may
    /// wait for one). Only a hang waits out the deadline.
    fn wait(&mut self, rx: &Receiver<Value>) -> Got {
        let deadline = Instant::now() + HANG;
        loop {
            self.read_server();
            self.decline_all();
            let message = crossbeam_channel::select! {
                recv(rx) -> answer => return match answer {
                    Ok(answer) => Got::Answer(answer),
                    Err(_) => Got::Nothing,
                },
                recv(self.outgoing) -> message => message,
                default(deadline.saturating_duration_since(Instant::now())) => return Got::Hung,
            };
            if let Ok(message) = message {
                self.record(message);
            }
        }
    }

    /// Every message the server sent on its own is a well-formed request or notification,
    /// or the result that ends a task subscription. A subscription's messages come after
    /// its acknowledgement (one per subscription) and before its result, and none after
    /// its client cancelled it; they report only the tasks acknowledged, and none after it
    /// reported that task's end.
    fn check_outgoing(&mut self) -> Result<(), TestCaseError> {
        self.read_server();
        self.decline_all();
        // Subscriptions acknowledged and not ended yet, by id, each with the tasks it
        // agreed to and those it reported ended. (Without noted cancels, one may also have
        // ended silently, and its id be used again.)
        let mut open: Vec<(&Value, Vec<&Value>, Vec<&Value>)> = Vec::new();
        let noted = self.cancels.as_deref();
        let mut cancels = noted.unwrap_or_default().iter().peekable();
        for (at, message) in self.from_server.iter().enumerate() {
            // A cancel that took effect before this message ended its subscription.
            while let Some((_, id)) = cancels.next_if(|(cancelled, _)| *cancelled <= at) {
                open.retain(|(open, ..)| *open != id);
            }
            prop_assert_eq!(&message["jsonrpc"], "2.0", "{}", message);
            let subscription = &message["params"]["_meta"][SUBSCRIPTION_KEY];
            let position = open.iter().position(|(open, ..)| *open == subscription);
            match message["method"].as_str() {
                Some("notifications/tasks/status") => {
                    prop_assert!(message["params"]["taskId"].is_string(), "{}", message);
                    prop_assert!(message["params"]["status"].is_string(), "{}", message);
                }
                Some("notifications/subscriptions/acknowledged") => {
                    prop_assert!(!subscription.is_null(), "{}", message);
                    let agreed = &message["params"]["notifications"];
                    prop_assert!(agreed.is_object(), "{}", message);
                    prop_assert!(
                        agreed.as_object().unwrap().keys().all(|k| k == "taskIds"),
                        "only task notifications are served: {}",
                        message
                    );
                    let tasks: Vec<&Value> = agreed["taskIds"]
                        .as_array()
                        .map(|ids| ids.iter().collect())
                        .unwrap_or_default();
                    match position {
                        // Its id is an open subscription's: refused, unless that one may
                        // have been cancelled unnoted.
                        Some(_) if noted.is_some() => {
                            return Err(TestCaseError::fail(format!(
                                "a second acknowledgement: {message}"
                            )))
                        }
                        Some(i) => open[i] = (subscription, tasks, Vec::new()),
                        None => open.push((subscription, tasks, Vec::new())),
                    }
                }
                Some("notifications/tasks") => {
                    let Some(i) = position else {
                        return Err(TestCaseError::fail(format!(
                            "not after an acknowledgement, or after the end: {message}"
                        )));
                    };
                    check_task(&message["params"], true)
                        .map_err(|why| TestCaseError::fail(format!("{why}: {message}")))?;
                    let (_, agreed, ended) = &mut open[i];
                    let task = &message["params"]["taskId"];
                    prop_assert!(agreed.contains(&task), "not agreed: {}", message);
                    prop_assert!(!ended.contains(&task), "after its end: {}", message);
                    if matches!(
                        message["params"]["status"].as_str(),
                        Some("completed" | "failed" | "cancelled")
                    ) {
                        ended.push(task);
                    }
                }
                Some(_) => {}
                None => {
                    // Only a subscription's end answers a request here.
                    let id = &message["id"];
                    let ending = json!({"resultType": "complete", "_meta": {SUBSCRIPTION_KEY: id}});
                    prop_assert_eq!(&message["result"], &ending, "{}", message);
                    let ended = open.iter().position(|(open, ..)| *open == id);
                    let Some(i) = ended else {
                        return Err(TestCaseError::fail(format!(
                            "an end before its start, after a cancel, or twice: {message}"
                        )));
                    };
                    open.remove(i);
                }
            }
        }
        Ok(())
    }

    /// Each accepted subscription (a listen that got no answer of its own) was acknowledged,
    /// once: as many acknowledgements under each id as listens accepted under it. With
    /// `racing_cancels` (messages sent from two threads at once), a cancel of its id may
    /// have ended a subscription while it opened, before its acknowledgement: then fewer.
    fn check_acknowledged(
        &self,
        answered: &[(Kind, Got)],
        racing_cancels: bool,
    ) -> Result<(), TestCaseError> {
        let accepted = answered.iter().filter_map(|(kind, got)| match (kind, got) {
            (Kind::Request { id, method, .. }, Got::Answer(Value::Null))
                if method == "subscriptions/listen" =>
            {
                Some(id)
            }
            _ => None,
        });
        let acknowledged = self
            .from_server
            .iter()
            .filter(|m| m["method"] == "notifications/subscriptions/acknowledged")
            .map(|m| &m["params"]["_meta"][SUBSCRIPTION_KEY]);
        let mut count: Vec<(&Value, i64)> = Vec::new();
        let signed = accepted
            .map(|id| (id, 1))
            .chain(acknowledged.map(|id| (id, -1)));
        for (id, n) in signed {
            match count.iter_mut().find(|(seen, _)| *seen == id) {
                Some((_, total)) => *total += n,
                None => count.push((id, n)),
            }
        }
        for (id, n) in count {
            let cancelled = || answered.iter().any(|(m, _)| cancelled_id(m) == Some(id));
            if racing_cancels && n > 0 && cancelled() {
                continue;
            }
            prop_assert_eq!(
                n,
                0,
                "subscription {}: accepted listens minus acknowledgements",
                id
            );
        }
        Ok(())
    }
}

impl Drop for Harness {
    /// Cancels whatever the random messages left running, so no worker outlives the case.
    fn drop(&mut self) {
        let store = self.server.store();
        let mut cursor: Option<String> = None;
        while let Ok(page) = store.list(None, cursor.as_deref()) {
            for task in page.tasks.iter().filter(|t| !t.status.is_terminal()) {
                let _ = store.cancel(task.task_id, None, None);
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        self.connection.close();
        drop(self.stop_events.take());
        if let Some(events) = self.events.take() {
            let _ = events.join();
        }
    }
}

/// A client that declares the extension and every capability a tool may ask input of.
fn sep_meta() -> Value {
    json!({ VERSION_KEY: SEP_VERSION, CAPS_KEY: all_capabilities() })
}

fn all_capabilities() -> Value {
    json!({"extensions": { TASKS_EXT: {} }, "elicitation": {}, "sampling": {}, "roots": {}})
}

// ----- what each message should get ------------------------------------------------------

/// What came back for one message.
#[derive(Debug)]
enum Got {
    Answer(Value),
    /// The responder was dropped uncalled.
    Nothing,
    Hung,
}

/// The `requestId` a `notifications/cancelled` names, if it is one.
fn cancelled_id(kind: &Kind) -> Option<&Value> {
    match kind {
        Kind::Notification { method, params } if method == "notifications/cancelled" => {
            params.as_ref()?.get("requestId")
        }
        _ => None,
    }
}

fn check_request(
    id: &Value,
    method: &str,
    params: Option<&Value>,
    got: &Got,
    cancelled_later: bool,
) -> Result<(), TestCaseError> {
    let answer = match got {
        Got::Answer(answer) => answer,
        other => {
            return Err(TestCaseError::fail(format!(
                "request {id} {method}: {other:?}"
            )))
        }
    };
    if answer.is_null() {
        // No response only for a request its client cancelled, and only for the requests
        // that can still be running when the cancel arrives; or for a task subscription,
        // whose messages, and in the end its result, go out on their own (checked there).
        let sep = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(VERSION_KEY))
            == Some(&json!(SEP_VERSION));
        prop_assert!(
            (cancelled_later && matches!(method, "tools/call" | "tasks/result"))
                || (sep && method == "subscriptions/listen"),
            "request {} {} got no response",
            id,
            method
        );
        return Ok(());
    }
    prop_assert_eq!(&answer["jsonrpc"], "2.0", "{}", answer);
    prop_assert_eq!(&answer["id"], id, "{}", answer);
    let meta = params.and_then(|p| p.get("_meta"));
    let named = meta.and_then(|m| m.get(VERSION_KEY));
    let version = named.and_then(Value::as_str);
    // A version that is no string (null aside, which is absent) is none the server speaks.
    let unsupported = match named {
        None | Some(Value::Null) => false,
        Some(Value::String(v)) => !SUPPORTED.contains(&v.as_str()),
        Some(_) => true,
    };
    let speaks_sep = !unsupported && (method == "server/discover" || version == Some(SEP_VERSION));
    // A capability whose value is null or false is not declared.
    let is_declared = |value: &Value| !matches!(value, Value::Null | Value::Bool(false));
    let declares = meta
        .and_then(|m| m.get(CAPS_KEY))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(TASKS_EXT))
        .is_some_and(is_declared);
    let served = if speaks_sep {
        METHODS_SEP
    } else {
        METHODS_2025
    };
    match (answer.get("result"), answer.get("error")) {
        (Some(result), None) => {
            prop_assert!(
                !unsupported,
                "a version it does not speak was served: {}",
                answer
            );
            check_result(method, params, result, speaks_sep, declares)
                .map_err(|why| TestCaseError::fail(format!("{why}: {answer}")))?;
        }
        (None, Some(error)) => {
            let code = error["code"].as_i64();
            prop_assert!(error["message"].is_string(), "{}", answer);
            // -32000: the `boom` tool's own error, inline or through `tasks/result`.
            prop_assert!(
                matches!(
                    code,
                    Some(-32600 | -32601 | -32602 | -32603 | -32021 | -32022 | -32000)
                ),
                "unexpected code: {}",
                answer
            );
            prop_assert_eq!(
                code == Some(-32022),
                unsupported,
                "-32022 is for an unsupported protocol version: {}",
                answer
            );
            // SEP-2663: the task methods need the extension declared, on every request.
            let needs_extension = matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel");
            if speaks_sep && !declares && needs_extension {
                prop_assert_eq!(code, Some(-32021), "{}", answer);
            }
            if code == Some(-32021) && method == "tasks/result" {
                // The error a task failed with, as it is: its tool asked for input its call
                // did not declare the capability for. Never the tasks extension, which
                // the 2025-11-25 `tasks/result` does not need (2026-07-28 has none).
                let required = error["data"]["requiredCapabilities"].as_object();
                prop_assert!(
                    !speaks_sep
                        && required.is_some_and(|r| !r.is_empty() && !r.contains_key("extensions")),
                    "{}",
                    answer
                );
            } else if code == Some(-32021) {
                // The tasks extension the request did not declare, or a capability a
                // tool's input request needs (2026-07-28 forbids asking for undeclared
                // input): named in `requiredCapabilities`, and missing from the request.
                let required = error["data"]["requiredCapabilities"].as_object();
                prop_assert!(speaks_sep && required.is_some(), "{}", answer);
                let declared = meta.and_then(|m| m.get(CAPS_KEY));
                for name in required.into_iter().flat_map(|r| r.keys()) {
                    if name == "extensions" {
                        prop_assert!(!declares, "{}", answer);
                    } else {
                        prop_assert_eq!(method, "tools/call", "{}", answer);
                        let named = declared.and_then(|c| c.get(name));
                        prop_assert!(!named.is_some_and(is_declared), "{}", answer);
                    }
                }
            }
            if !unsupported && !served.contains(&method) {
                prop_assert_eq!(code, Some(-32601), "{}", answer);
            }
        }
        _ => return Err(TestCaseError::fail(format!("not a response: {answer}"))),
    }
    Ok(())
}

const STATUSES: &[&str] = &[
    "working",
    "input_required",
    "completed",
    "failed",
    "cancelled",
];

/// A task as its revision puts it on the wire: the 2025-11-25 `Task` (`ttl`, present even
/// when null), or SEP-2663's `DetailedTask` (`ttlMs`, and what its status requires).
fn check_task(task: &Value, sep: bool) -> Result<(), String> {
    let ok = task["taskId"].is_string()
        && task["status"]
            .as_str()
            .is_some_and(|s| STATUSES.contains(&s))
        && task["createdAt"].is_string()
        && task["lastUpdatedAt"].is_string();
    let ttl = if sep { "ttlMs" } else { "ttl" };
    let ttl_ok = task.get(ttl).is_some_and(|t| t.is_null() || t.is_u64());
    if !ok || !ttl_ok {
        return Err("not a task".into());
    }
    if sep {
        let detail_ok = match task["status"].as_str() {
            Some("completed") => task.get("result").is_some(),
            Some("failed") => task["error"]["code"].is_i64(),
            Some("input_required") => task["inputRequests"].is_object(),
            _ => true,
        };
        if !detail_ok {
            return Err("a detailed task without what its status requires".into());
        }
    }
    Ok(())
}

/// What a successful result must look like, by method and revision.
fn check_result(
    method: &str,
    params: Option<&Value>,
    result: &Value,
    sep: bool,
    declares: bool,
) -> Result<(), String> {
    if sep {
        let result_type = result["resultType"].as_str().ok_or("no resultType")?;
        // `task` only on a `tools/call` whose request declared the extension.
        if result_type == "task" {
            if method != "tools/call" || !declares {
                return Err("a task the request did not allow".into());
            }
            return check_task(result, true);
        }
        match method {
            "tasks/get" => check_task(result, true)?,
            "tasks/update" | "tasks/cancel" if result != &json!({"resultType": "complete"}) => {
                return Err("not an empty acknowledgement".into())
            }
            // Its result ends the subscription, among the messages sent on their own.
            "subscriptions/listen" => return Err("a subscription answered at once".into()),
            _ => {}
        }
        if method.starts_with("tasks/") && result_type != "complete" {
            return Err("a tasks/* result is complete".into());
        }
        return Ok(());
    }
    match method {
        "tools/call" => {
            if let Some(task) = result.get("task") {
                // Only when the request asked for a task.
                let asked = params.is_some_and(|p| p["task"].is_object());
                if !asked {
                    return Err("a task nobody asked for".into());
                }
                check_task(task, false)?;
            }
        }
        "tasks/get" => check_task(result, false)?,
        "tasks/result" => {
            // The underlying result, tied to its task.
            let related = &result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"];
            if params.map(|p| &p["taskId"]) != Some(related) {
                return Err("no related-task _meta naming the task".into());
            }
        }
        "tasks/cancel" => {
            check_task(result, false)?;
            if result["status"] != "cancelled" {
                return Err("cancel answered before the task was cancelled".into());
            }
        }
        "tasks/list" => {
            let tasks = result["tasks"].as_array().ok_or("no tasks")?;
            for task in tasks {
                check_task(task, false)?;
            }
            if result.get("nextCursor").is_some_and(|c| !c.is_string()) {
                return Err("a cursor that is not a string".into());
            }
        }
        _ => {}
    }
    Ok(())
}

fn check(kind: &Kind, got: &Got, cancelled_later: bool) -> Result<(), TestCaseError> {
    match kind {
        Kind::Request { id, method, params } => {
            check_request(id, method, params.as_ref(), got, cancelled_later)
        }
        Kind::Notification { .. } | Kind::Response => {
            prop_assert!(
                matches!(got, Got::Nothing),
                "{:?} was answered: {:?}",
                kind,
                got
            );
            Ok(())
        }
        Kind::Malformed { parse_error, id } => {
            let Got::Answer(answer) = got else {
                return Err(TestCaseError::fail(format!("{kind:?}: {got:?}")));
            };
            let code = answer["error"]["code"].as_i64();
            if *parse_error {
                prop_assert_eq!(code, Some(-32700), "{}", answer);
            } else {
                prop_assert!(matches!(code, Some(-32600 | -32602)), "{}", answer);
            }
            match id {
                Some(id) => {
                    prop_assert!(answer["id"] == *id || answer["id"].is_null(), "{}", answer)
                }
                None => prop_assert!(answer["id"].is_null(), "{}", answer),
            }
            prop_assert!(answer.get("result").is_none(), "{}", answer);
            Ok(())
        }
        Kind::Batch(Some(items)) if !cancelled_later => {
            if items.is_empty() || items.len() > MAX_BATCH_LEN {
                let Got::Answer(answer) = got else {
                    return Err(TestCaseError::fail(format!("a batch: {got:?}")));
                };
                prop_assert_eq!(answer["error"]["code"].as_i64(), Some(-32600), "{}", answer);
                prop_assert!(answer["id"].is_null(), "{}", answer);
                return Ok(());
            }
            // The answers due, in the order of the batch's messages; none for
            // notifications and responses.
            let due: Vec<&Kind> = items
                .iter()
                .filter(|item| matches!(item, Kind::Request { .. } | Kind::Malformed { .. }))
                .collect();
            match got {
                Got::Answer(Value::Null) if due.is_empty() => Ok(()),
                Got::Answer(Value::Array(answers)) if !due.is_empty() => {
                    prop_assert_eq!(answers.len(), due.len(), "{:?}: {:?}", items, answers);
                    for (item, answer) in due.into_iter().zip(answers) {
                        check(item, &Got::Answer(answer.clone()), false)?;
                    }
                    Ok(())
                }
                _ => Err(TestCaseError::fail(format!(
                    "a batch of {items:?}: {got:?}"
                ))),
            }
        }
        // A cancel may have withheld some of its answers, or the connection may not take
        // it as a batch.
        Kind::Batch(_) => match got {
            Got::Answer(Value::Array(answers)) => {
                prop_assert!(!answers.is_empty(), "an empty array answered");
                for answer in answers {
                    prop_assert_eq!(&answer["jsonrpc"], "2.0", "{}", answer);
                    prop_assert!(
                        answer.get("result").is_some() != answer.get("error").is_some(),
                        "{}",
                        answer
                    );
                }
                Ok(())
            }
            // Nothing due (notifications, responses, cancelled requests).
            Got::Answer(Value::Null) => Ok(()),
            Got::Answer(answer) => {
                prop_assert_eq!(answer["error"]["code"].as_i64(), Some(-32600), "{}", answer);
                prop_assert!(answer["id"].is_null(), "{}", answer);
                Ok(())
            }
            Got::Nothing | Got::Hung => Err(TestCaseError::fail(format!("a batch: {got:?}"))),
        },
    }
}

/// What a message should get on `connection` as it stands: a JSON array is a batch once
/// the connection settled on a version with batches (a generated `initialize` may name
/// 2024-11-05), each of its messages answered as if it came alone, but for those no batch
/// may hold: `initialize` (2025-03-26) and 2026-07-28 requests (a version without
/// batches), refused with -32600.
fn kind_on(connection: &Connection, text: &str) -> Kind {
    let items = match serde_json::from_str::<Value>(text) {
        // A member named twice anywhere makes the whole text unreadable.
        Ok(Value::Array(items)) if connection.accepts_batches() && !names_a_member_twice(text) => {
            items
        }
        _ => return kind(text),
    };
    let item_kind = |item: &Value| match kind(&item.to_string()) {
        Kind::Request { id, method, params } => {
            let version = params
                .as_ref()
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(VERSION_KEY));
            if method == "initialize"
                || method == "server/discover"
                || version == Some(&json!(SEP_VERSION))
            {
                Kind::Malformed {
                    parse_error: false,
                    id: Some(id),
                }
            } else {
                Kind::Request { id, method, params }
            }
        }
        other => other,
    };
    Kind::Batch(Some(items.iter().map(item_kind).collect()))
}

/// Feeds `messages` to a fresh connection in order, then checks every answer, the
/// server's own messages, and that the connection and the store still work.
fn run(rev: Rev, messages: &[Msg]) -> Result<(), TestCaseError> {
    let mut h = Harness::new(rev);
    // Two tasks of our own, so task-id placeholders name real tasks from the start.
    h.create_task(0);
    h.create_task(5);
    let mut sent: Vec<(Kind, Receiver<Value>, Option<Got>)> = Vec::new();
    for message in messages {
        let text = message.text(&h);
        let kind = kind_on(&h.connection, &text);
        let rx = h.send(&text);
        h.read_server();
        // A cancel has taken effect once the connection took it: noted where it did.
        let cancelled: Vec<&Value> = match &kind {
            Kind::Batch(Some(items)) => items.iter().filter_map(cancelled_id).collect(),
            kind => cancelled_id(kind).into_iter().collect(),
        };
        let at = h.from_server.len();
        if let Some(cancels) = &mut h.cancels {
            cancels.extend(cancelled.into_iter().map(|id| (at, id.clone())));
        }
        // Most answers come at once: learn from them, so later messages can name the
        // tasks they created.
        let got = match rx.try_recv() {
            Ok(answer) => {
                h.learn(&answer);
                Some(Got::Answer(answer))
            }
            Err(TryRecvError::Disconnected) => Some(Got::Nothing),
            Err(TryRecvError::Empty) => None,
        };
        sent.push((kind, rx, got));
    }
    let answered: Vec<(Kind, Got)> = sent
        .into_iter()
        .map(|(kind, rx, got)| (kind, got.unwrap_or_else(|| h.wait(&rx))))
        .collect();
    // Only a cancel sent after a request can withhold its answer.
    let cancelled = |i: usize, id: &Value| {
        answered[i + 1..]
            .iter()
            .any(|(later, _)| cancelled_id(later) == Some(id))
    };
    check_all(&mut h, &answered, cancelled, false)
}

/// Checks every message's answer (`cancelled(i, id)`: whether a cancel may have withheld
/// request `i`'s), then the server's own messages (`racing_cancels`: a cancel may have
/// overtaken what it cancels, see [`Harness::check_acknowledged`]), and that the
/// connection and the store still work.
fn check_all(
    h: &mut Harness,
    answered: &[(Kind, Got)],
    cancelled: impl Fn(usize, &Value) -> bool,
    racing_cancels: bool,
) -> Result<(), TestCaseError> {
    for (i, (kind, got)) in answered.iter().enumerate() {
        let cancelled = match kind {
            Kind::Request { id, .. } => cancelled(i, id),
            // A cancel after the batch, or in it, may withhold any of its answers.
            Kind::Batch(Some(items)) => items.iter().any(|item| match item {
                Kind::Request { id, .. } => {
                    cancelled(i, id) || items.iter().any(|other| cancelled_id(other) == Some(id))
                }
                _ => false,
            }),
            _ => false,
        };
        check(kind, got, cancelled)
            .map_err(|e| TestCaseError::fail(format!("message {i}: {e}")))?;
    }
    h.check_outgoing()?;
    h.check_acknowledged(answered, racing_cancels)?;
    h.still_works();
    h.check_outgoing()
}

/// [`run`] for two clients' worth of messages sent at once, from two threads, over the
/// same connection (as HTTP clients share the stateless one): placeholders name only the
/// tasks known before, and a cancel in either list may withhold a response.
fn run_concurrently(rev: Rev, a: &[Msg], b: &[Msg]) -> Result<(), TestCaseError> {
    let mut h = Harness::new(rev);
    h.cancels = None;
    h.create_task(0);
    h.create_task(5);
    let texts = |messages: &[Msg]| messages.iter().map(|m| m.text(&h)).collect::<Vec<_>>();
    let (a, b) = (texts(a), texts(b));
    // The other thread may settle the connection on a version with batches at any moment:
    // an array may be taken either way (`Kind::Batch` accepts both).
    let send_all = |texts: &[String]| {
        texts
            .iter()
            .map(|text| {
                let array = matches!(serde_json::from_str::<Value>(text), Ok(Value::Array(_)))
                    && !names_a_member_twice(text);
                let kind = if array { Kind::Batch(None) } else { kind(text) };
                (kind, h.send(text))
            })
            .collect::<Vec<_>>()
    };
    let sent: Vec<(Kind, Receiver<Value>)> = std::thread::scope(|scope| {
        let other = scope.spawn(|| send_all(&a));
        let mut sent = send_all(&b);
        sent.extend(other.join().unwrap());
        sent
    });
    let answered: Vec<(Kind, Got)> = sent
        .into_iter()
        .map(|(kind, rx)| {
            let got = h.wait(&rx);
            (kind, got)
        })
        .collect();
    // The two lists interleave: a cancel in either may have come first.
    let cancelled = |_: usize, id: &Value| {
        answered
            .iter()
            .any(|(other, _)| cancelled_id(other) == Some(id))
    };
    check_all(&mut h, &answered, cancelled, true)
}

// ----- generators ------------------------------------------------------------------------

/// One generated message: JSON (with placeholders), perhaps mangled as text, or raw text.
#[derive(Clone, Debug)]
enum Msg {
    Json(Value, Option<Mangle>),
    Raw(String),
}

/// A small edit of a serialised message, at a byte position.
#[derive(Clone, Debug)]
enum Mangle {
    Truncate(Index),
    Insert(Index, u8),
    Delete(Index),
}

impl Msg {
    fn text(&self, h: &Harness) -> String {
        match self {
            Msg::Raw(text) => text.clone(),
            Msg::Json(value, mangle) => {
                let mut value = value.clone();
                h.resolve(&mut value);
                let mut bytes = serde_json::to_vec(&value).unwrap();
                match mangle {
                    None => {}
                    Some(Mangle::Truncate(at)) => bytes.truncate(at.index(bytes.len())),
                    Some(Mangle::Insert(at, byte)) => {
                        bytes.insert(at.index(bytes.len() + 1), *byte)
                    }
                    Some(Mangle::Delete(at)) => {
                        bytes.remove(at.index(bytes.len()));
                    }
                }
                String::from_utf8_lossy(&bytes).into_owned()
            }
        }
    }
}

fn key() -> BoxedStrategy<String> {
    prop_oneof![
        4 => prop::sample::select(FIELDS).prop_map(str::to_owned),
        1 => "[a-zA-Z_/.-]{0,12}",
    ]
    .boxed()
}

/// Strings: short and odd, placeholders, and long ones (up to 256 KiB).
fn text() -> BoxedStrategy<String> {
    prop_oneof![
        6 => "\\PC{0,12}",
        1 => prop::sample::select(vec![
            "", "2.0", "tasks/get", "@@task0", "@@task1", "@@cursor", "2025-11-25",
            "2026-07-28", "\u{0}", "\u{feff}", "\\", "\"", "\u{1F980}", "\u{10FFFF}",
        ])
        .prop_map(str::to_owned),
        1 => (prop::sample::select(vec![256usize, 4096, 65_536]), any::<char>())
            .prop_map(|(len, c)| c.to_string().repeat(len)),
    ]
    .boxed()
}

/// Numbers, among them the edges of every integer type and of f64.
fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => (-3i64..40).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|f| json!(f)),
        1 => prop::sample::select(vec![
            json!(u64::MAX), json!(i64::MIN), json!(i64::MAX), json!(1e300), json!(-0.0),
            json!(0.5), json!(5e-324), json!(9_007_199_254_740_993u64),
            json!(18_446_744_073_709_551_616.0),
        ]),
    ]
    .boxed()
}

/// Arrays or objects nested `depth` deep (serde_json refuses more than 128 levels).
fn deep(depth: usize, objects: bool) -> Value {
    (0..depth).fold(Value::Null, |inner, _| {
        if objects {
            json!({ "a": inner })
        } else {
            json!([inner])
        }
    })
}

/// How deep arrays and objects nest in `value`.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Any JSON value, of any type and shape.
fn any_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        3 => number(),
        3 => text().prop_map(Value::String),
        1 => (prop_oneof![3 => 1usize..16, 1 => 110usize..=140], any::<bool>())
            .prop_map(|(depth, objects)| deep(depth, objects)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Mostly `good`, sometimes any JSON at all.
fn or_junk(good: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![3 => good, 1 => any_json()].boxed()
}

fn object(fields: Vec<(&'static str, Option<Value>)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect(),
    )
}

/// An id, or none (a notification): mostly small integers that collide on purpose,
/// sometimes every kind of invalid one.
fn id() -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        3 => Just(None),
        5 => (0i64..6).prop_map(|n| Some(json!(n))),
        2 => prop::sample::select(vec!["a", "", "1", "s-1", "s-2", "\u{1F980}"])
            .prop_map(|s| Some(json!(s))),
        2 => prop_oneof![
            Just(Value::Null),
            prop::sample::select(vec![
                json!(1.5), json!(1.0), json!(u64::MAX), json!(i64::MIN), json!(i64::MAX),
                json!(-1), json!({}), json!([1]), json!(true), json!(1e300),
            ]),
            text().prop_map(Value::String),
            any_json(),
        ]
        .prop_map(Some),
    ]
    .boxed()
}

fn method() -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        16 => prop::sample::select(METHODS).prop_map(|m| Some(json!(m))),
        1 => "tasks/[a-z]{0,6}".prop_map(|m| Some(json!(m))),
        1 => text().prop_map(|m| Some(json!(m))),
        1 => Just(None),
        1 => any_json().prop_map(Some),
    ]
    .boxed()
}

fn task_id() -> BoxedStrategy<Value> {
    or_junk(
        prop_oneof![
            4 => (0..4usize).prop_map(|n| json!(format!("@@task{n}"))),
            1 => Just(json!("00000000-0000-4000-8000-000000000000")),
            1 => "[0-9a-f-]{0,40}".prop_map(Value::String),
        ]
        .boxed(),
    )
}

fn cursor() -> BoxedStrategy<Value> {
    or_junk(
        prop_oneof![
            Just(json!("@@cursor")),
            "[0-9a-f]{32}".prop_map(Value::String),
            text().prop_map(Value::String),
        ]
        .boxed(),
    )
}

fn tool_name() -> BoxedStrategy<Value> {
    or_junk(
        prop_oneof![
            6 => prop::sample::select(TOOL_NAMES).prop_map(|n| json!(n)),
            1 => prop::sample::select(vec!["", "nope", "failing_job", "SLEEP"]).prop_map(|n| json!(n)),
        ]
        .boxed(),
    )
}

/// Tool arguments: the real fields, with values that are either small enough to finish at
/// once or of the wrong type or range. (A valid huge `ms` would make a call legitimately
/// run for ages: that is not bad input.)
fn arguments() -> BoxedStrategy<Value> {
    let bad = || {
        prop::sample::select(vec![
            json!(-1),
            json!(1.5),
            json!("5"),
            Value::Null,
            json!(true),
            json!([]),
            json!({}),
            json!(1e300),
            json!(18_446_744_073_709_551_616.0),
            json!(i64::MIN),
        ])
    };
    let ms = prop_oneof![4 => (0u64..20).prop_map(Value::from), 1 => bad()];
    let to = prop_oneof![4 => (0u64..4).prop_map(Value::from), 1 => bad()];
    let seconds = prop_oneof![
        4 => (0.0f64..0.02).prop_map(|s| json!(s)),
        1 => prop::sample::select(vec![json!(-1), json!(86_401), json!("1"), json!(1e308)]),
    ];
    let string = || prop_oneof![3 => text().prop_map(Value::String), 1 => any_json()];
    or_junk(
        (
            prop::option::weighted(0.6, ms),
            prop::option::weighted(0.3, to),
            prop::option::weighted(0.2, seconds),
            prop::option::weighted(0.2, string()),
            prop::option::weighted(0.3, string()),
            prop::option::weighted(0.2, string()),
            prop::option::weighted(0.2, string()),
        )
            .prop_map(|(ms, to, seconds, text, name, question, filename)| {
                object(vec![
                    ("ms", ms),
                    ("to", to),
                    ("seconds", seconds),
                    ("text", text),
                    ("name", name),
                    ("question", question),
                    ("filename", filename),
                ])
            })
            .boxed(),
    )
}

/// `params.task` (2025-11-25 task augmentation, ignored by SEP-2663).
fn task_field() -> BoxedStrategy<Value> {
    or_junk(
        prop_oneof![
            4 => prop::sample::select(vec![
                json!(0), json!(1), json!(5), json!(50), json!(60_000), json!(u64::MAX),
                json!(-1), json!(1.5), json!("100"), Value::Null, json!(1e20), json!(i64::MIN),
            ])
            .prop_map(|ttl| json!({ "ttl": ttl })),
            1 => Just(json!({})),
            1 => Just(Value::Null),
        ]
        .boxed(),
    )
}

/// `_meta`: mostly the per-request declarations SEP-2663 reads, with right and wrong
/// versions and capabilities; under 2025-11-25 less often a 2026-07-28 version.
fn meta(rev: Rev) -> BoxedStrategy<Value> {
    let sep_weight = if rev == Rev::Sep2663 { 6 } else { 1 };
    let version = prop_oneof![
        sep_weight => Just(Some(json!(SEP_VERSION))),
        1 => Just(Some(json!("2025-11-25"))),
        1 => prop::sample::select(vec!["2024-11-05", "1999-01-01", "", "2026-07-28 "])
            .prop_map(|v| Some(json!(v))),
        1 => any_json().prop_map(Some),
        2 => Just(None),
    ];
    let capabilities = prop_oneof![
        3 => Just(Some(all_capabilities())),
        2 => Just(Some(json!({ "extensions": { TASKS_EXT: {} } }))),
        1 => Just(Some(json!({}))),
        1 => any_json().prop_map(|e| Some(json!({ "extensions": e }))),
        1 => any_json().prop_map(Some),
        1 => Just(None),
    ];
    or_junk(
        (version, capabilities)
            .prop_map(|(v, c)| object(vec![(VERSION_KEY, v), (CAPS_KEY, c)]))
            .boxed(),
    )
}

/// `inputResponses` for `tasks/update` (and SEP-2663 `tools/call` rounds), keyed like the
/// server's input requests.
fn input_responses() -> BoxedStrategy<Value> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "elicitation-create-1",
            "elicitation-create-2",
            "elicitation-create-3",
            "user_name",
        ])
        .prop_map(str::to_owned),
        text(),
    ];
    let answer = prop_oneof![
        Just(json!({"action": "accept", "content": {"name": "x", "confirm": true}})),
        Just(json!({"action": "decline"})),
        any_json(),
    ];
    or_junk(
        prop::collection::vec((key, answer), 0..3)
            .prop_map(|fields| Value::Object(fields.into_iter().collect()))
            .boxed(),
    )
}

fn request_id_field() -> BoxedStrategy<Value> {
    id().prop_map(|id| id.unwrap_or(Value::Null)).boxed()
}

fn protocol_version() -> BoxedStrategy<Value> {
    or_junk(
        prop::sample::select(vec![
            "2025-11-25",
            "2025-06-18",
            "2024-11-05",
            "2026-07-28",
            "",
            "latest",
        ])
        .prop_map(|v| json!(v))
        .boxed(),
    )
}

/// A params object with a random subset of the real fields, each plausible or junk.
fn params_object(rev: Rev) -> BoxedStrategy<Value> {
    let meta_weight = if rev == Rev::Sep2663 { 0.85 } else { 0.25 };
    (
        (
            prop::option::weighted(0.4, task_id()),
            prop::option::weighted(0.2, cursor()),
            prop::option::weighted(0.4, tool_name()),
            prop::option::weighted(0.4, arguments()),
            prop::option::weighted(0.3, task_field()),
            prop::option::weighted(meta_weight, meta(rev)),
        ),
        (
            prop::option::weighted(0.15, input_responses()),
            prop::option::weighted(0.15, request_id_field()),
            prop::option::weighted(0.15, protocol_version()),
            prop::option::weighted(0.1, any_json()),
            prop::collection::vec((key(), any_json()), 0..2),
        ),
    )
        .prop_map(
            |(
                (task_id, cursor, name, arguments, task, meta),
                (responses, request_id, version, capabilities, extra),
            )| {
                let mut params = object(vec![
                    ("taskId", task_id),
                    ("cursor", cursor),
                    ("name", name),
                    ("arguments", arguments),
                    ("task", task),
                    ("_meta", meta),
                    ("inputResponses", responses),
                    ("requestId", request_id),
                    ("protocolVersion", version),
                    ("capabilities", capabilities),
                ]);
                for (key, value) in extra {
                    params[key] = value;
                }
                params
            },
        )
        .boxed()
}

fn params(rev: Rev) -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Value::Null)),
        1 => any_json().prop_map(Some),
        6 => params_object(rev).prop_map(Some),
    ]
    .boxed()
}

/// A message put together from independently random parts.
fn general(rev: Rev) -> BoxedStrategy<Value> {
    let jsonrpc = prop_oneof![
        12 => Just(Some(json!("2.0"))),
        1 => prop::sample::select(vec![json!("1.0"), json!(2.0), Value::Null, json!("2.0 ")])
            .prop_map(Some),
        1 => Just(None),
    ];
    (
        jsonrpc,
        id(),
        method(),
        params(rev),
        prop::collection::vec((key(), any_json()), 0..2),
    )
        .prop_map(|(jsonrpc, id, method, params, extra)| {
            let mut message = object(vec![
                ("jsonrpc", jsonrpc),
                ("id", id),
                ("method", method),
                ("params", params),
            ]);
            // Stray top-level fields (`result`, `error`...) make some of these responses.
            for (key, value) in extra {
                if !["jsonrpc", "id", "method", "params"].contains(&key.as_str()) {
                    message[key] = value;
                }
            }
            message
        })
        .boxed()
}

/// Arguments a tool accepts, with numbers small enough that it finishes at once.
fn valid_arguments(tool: &str) -> BoxedStrategy<Value> {
    let text = || text().prop_map(Value::String);
    match tool {
        "sleep" | "sleep_required" | "fail" => (0u64..20).prop_map(|ms| json!({"ms": ms})).boxed(),
        "count" => (0u64..4, 0u64..8)
            .prop_map(|(to, ms)| json!({"to": to, "ms": ms}))
            .boxed(),
        "slow_compute" => (0.0f64..0.02).prop_map(|s| json!({"seconds": s})).boxed(),
        "echo" => text().prop_map(|t| json!({"text": t})).boxed(),
        "greet" => text().prop_map(|t| json!({"name": t})).boxed(),
        "ask" => text().prop_map(|t| json!({"question": t})).boxed(),
        "confirm_delete" => text().prop_map(|t| json!({"filename": t})).boxed(),
        _ => Just(json!({})).boxed(),
    }
}

/// A well-formed `tools/call` of a real tool, with right or wrong arguments; under
/// 2025-11-25 mostly task-augmented.
fn call(rev: Rev) -> BoxedStrategy<Value> {
    let meta_weight = if rev == Rev::Sep2663 { 0.9 } else { 0.2 };
    let task = match rev {
        Rev::V2025 => prop_oneof![
            3 => Just(Some(json!({"ttl": 60_000}))),
            1 => task_field().prop_map(Some),
            1 => Just(None),
        ]
        .boxed(),
        Rev::Sep2663 => prop::option::weighted(0.2, task_field()).boxed(),
    };
    prop::sample::select(TOOL_NAMES)
        .prop_flat_map(move |name| {
            (
                0i64..6,
                Just(name),
                prop_oneof![2 => valid_arguments(name), 1 => arguments()],
                task.clone(),
                prop::option::weighted(meta_weight, meta(rev)),
            )
        })
        .prop_map(|(id, name, arguments, task, meta)| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": object(vec![
                ("name", Some(json!(name))),
                ("arguments", Some(arguments)),
                ("task", task),
                ("_meta", meta),
            ])})
        })
        .boxed()
}

/// A well-formed `tasks/*` request naming a real task (mostly).
fn tasks_request(rev: Rev) -> BoxedStrategy<Value> {
    let meta_weight = if rev == Rev::Sep2663 { 0.9 } else { 0.2 };
    (
        0i64..6,
        prop::sample::select(vec![
            "tasks/get",
            "tasks/result",
            "tasks/list",
            "tasks/cancel",
            "tasks/update",
        ]),
        task_id(),
        prop::option::weighted(0.2, cursor()),
        prop::option::weighted(0.3, input_responses()),
        prop::option::weighted(meta_weight, meta(rev)),
    )
        .prop_map(|(id, method, task_id, cursor, responses, meta)| {
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": object(vec![
                ("taskId", Some(task_id)),
                ("cursor", cursor),
                ("inputResponses", responses),
                ("_meta", meta),
            ])})
        })
        .boxed()
}

/// A `subscriptions/listen` naming tasks (mostly real ones), or with a broken filter.
fn listen(rev: Rev) -> BoxedStrategy<Value> {
    let meta_weight = if rev == Rev::Sep2663 { 0.9 } else { 0.2 };
    let filter = prop_oneof![
        4 => prop::collection::vec(task_id(), 0..4).prop_map(|ids| json!({"taskIds": ids})),
        1 => Just(json!({"toolsListChanged": true})),
        1 => any_json(),
    ];
    (
        0i64..6,
        prop::option::weighted(0.9, filter),
        prop::option::weighted(meta_weight, meta(rev)),
    )
        .prop_map(|(id, notifications, meta)| {
            json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                   "params": object(vec![("notifications", notifications), ("_meta", meta)])})
        })
        .boxed()
}

/// `notifications/cancelled` for one of the ids the other generators use.
fn cancel() -> BoxedStrategy<Value> {
    (
        prop_oneof![
            4 => (0i64..6).prop_map(Value::from),
            1 => request_id_field(),
        ],
        prop::option::of(text()),
        // By position, as an array: a valid JSON-RPC notification, but not MCP's params,
        // so it must cancel nothing.
        prop::bool::weighted(0.2),
    )
        .prop_map(|(request_id, reason, positional)| {
            let params = if positional {
                json!([request_id, reason])
            } else {
                object(vec![
                    ("requestId", Some(request_id)),
                    ("reason", reason.map(Value::String)),
                ])
            };
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
        })
        .boxed()
}

/// A response to one of the server's own requests (mostly the latest; `s-1`, `s-2`... are
/// the ids it gives them): a real answer, a wrong one, an error, junk.
fn client_response() -> BoxedStrategy<Value> {
    let body = prop_oneof![
        2 => Just(json!({"action": "accept", "content": {"answer": "x", "confirm": true, "name": "n"}})),
        1 => Just(json!({"action": "decline"})),
        1 => Just(json!({"code": -32000, "message": "no"})),
        // A tool may hand on the error a client answered it with, code and all: leave the
        // valid error objects to `elicitation_answers_of_any_shape_2025`, so every code
        // that reaches a response here is the server's own (or -32000).
        2 => any_json().prop_filter("not an error object", |v| {
            !(v["code"].is_i64() && v["message"].is_string())
        }),
    ];
    let id = prop_oneof![3 => Just("@@out"), 1 => prop::sample::select(vec!["s-1", "s-2", "s-3"])];
    (id, any::<bool>(), body)
        .prop_map(|(id, ok, body)| {
            let outcome = if ok { "result" } else { "error" };
            json!({"jsonrpc": "2.0", "id": id, outcome: body})
        })
        .boxed()
}

fn mangle() -> BoxedStrategy<Option<Mangle>> {
    prop_oneof![
        12 => Just(None),
        1 => any::<Index>().prop_map(|at| Some(Mangle::Truncate(at))),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Some(Mangle::Insert(at, b))),
        1 => any::<Index>().prop_map(|at| Some(Mangle::Delete(at))),
    ]
    .boxed()
}

fn message(rev: Rev) -> BoxedStrategy<Msg> {
    prop_oneof![
        6 => (general(rev), mangle()).prop_map(|(v, m)| Msg::Json(v, m)),
        3 => (call(rev), mangle()).prop_map(|(v, m)| Msg::Json(v, m)),
        3 => (tasks_request(rev), mangle()).prop_map(|(v, m)| Msg::Json(v, m)),
        1 => (listen(rev), mangle()).prop_map(|(v, m)| Msg::Json(v, m)),
        1 => cancel().prop_map(|v| Msg::Json(v, None)),
        1 => client_response().prop_map(|v| Msg::Json(v, None)),
        1 => raw_line().prop_map(Msg::Raw),
    ]
    .boxed()
}

/// Arbitrary text: lossy bytes, any characters, JSON-ish fragments, deep nesting.
fn raw_line() -> BoxedStrategy<String> {
    prop_oneof![
        3 => any::<Vec<u8>>().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        3 => "\\PC{0,64}",
        3 => r#"[{}\[\]":,0-9a-z .\-]{0,48}"#,
        1 => r#"\{"jsonrpc":"2\.0","id":[0-9]{1,3},"method":"[a-z/]{0,12}"[,}\]]{0,2}"#,
        1 => (1usize..200_000).prop_map(|n| "[".repeat(n)),
        1 => (1usize..2_000).prop_map(|n| format!("{}{}", "{\"a\":".repeat(n), "}".repeat(n))),
    ]
    .boxed()
}

// ----- properties ------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// (a) Arbitrary text, on an initialized 2025-11-25 connection.
    #[test]
    fn raw_lines_2025(lines in prop::collection::vec(raw_line(), 1..16)) {
        let messages: Vec<Msg> = lines.into_iter().map(Msg::Raw).collect();
        run(Rev::V2025, &messages)?;
    }

    /// (a) Arbitrary text, on a SEP-2663 connection (never initialized).
    #[test]
    fn raw_lines_sep2663(lines in prop::collection::vec(raw_line(), 1..16)) {
        let messages: Vec<Msg> = lines.into_iter().map(Msg::Raw).collect();
        run(Rev::Sep2663, &messages)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// (b) Plausible JSON-RPC with random methods, ids and params, 2025-11-25.
    #[test]
    fn messages_2025(messages in prop::collection::vec(message(Rev::V2025), 1..32)) {
        run(Rev::V2025, &messages)?;
    }

    /// (b) The same, speaking SEP-2663 (2026-07-28 `_meta` on most requests).
    #[test]
    fn messages_sep2663(messages in prop::collection::vec(message(Rev::Sep2663), 1..32)) {
        run(Rev::Sep2663, &messages)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// `params.task` of any type and shape means something only to a 2025-11-25 client
    /// that negotiated tasks. Under SEP-2663, and on a version without tasks, it is an
    /// unknown field: ignored, neither an error nor a task.
    #[test]
    fn legacy_task_param_is_ignored(task in any_json()) {
        prop_assume!(depth(&task) < 100, "too deep for serde_json to parse");
        let mut h = Harness::new(Rev::Sep2663);
        let greet = h.request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "x"}, "task": task}),
        );
        prop_assert_eq!(&greet["result"]["content"][0]["text"], "Hello, x!", "{}", greet);
        let mut h = Harness::new(Rev::V2025);
        h.result("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}}));
        let slept = h.request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 0}, "task": task}),
        );
        prop_assert_eq!(&slept["result"]["content"][0]["text"], "slept 0 ms", "{}", slept);
    }

    /// To a 2025-11-25 client that negotiated tasks, `params.task` is a `TaskMetadata`
    /// object (with an optional integer `ttl`): that starts a task, null or nothing runs
    /// the call plainly, and anything else is -32602 and starts nothing.
    #[test]
    fn task_param_is_task_metadata_or_invalid_2025(task in any_json()) {
        prop_assume!(depth(&task) < 100, "too deep for serde_json to parse");
        let mut h = Harness::new(Rev::V2025);
        let response = h.request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 0}, "task": task}),
        );
        let valid_ttl = task.get("ttl").is_none_or(|t| t.is_null() || t.is_u64());
        match &task {
            Value::Null => prop_assert_eq!(
                &response["result"]["content"][0]["text"], "slept 0 ms", "{}", response
            ),
            Value::Object(_) if valid_ttl => {
                prop_assert!(response["result"]["task"]["taskId"].is_string(), "{}", response)
            }
            _ => {
                prop_assert_eq!(&response["error"]["code"], -32602, "{}", response);
                let tasks = h.server.store().list(None, None).unwrap().tasks;
                prop_assert!(tasks.is_empty(), "a task for {}", task);
            }
        }
    }
}

/// An answer a client might give an input request: right, declined, or anything at all.
fn input_answer() -> BoxedStrategy<Value> {
    prop_oneof![
        2 => text().prop_map(|t| json!({"action": "accept", "content": {"answer": t, "confirm": true}})),
        1 => prop::sample::select(vec!["decline", "cancel", "accept"])
            .prop_map(|a| json!({"action": a})),
        1 => (any::<i64>(), text()).prop_map(|(code, message)| json!({"code": code, "message": message})),
        3 => any_json(),
    ]
    .prop_filter("parsable", |v| depth(v) < 100)
    .boxed()
}

/// What the `ask` tool's task ends with after the client answered its elicitation with
/// `outcome` (a `result` body, or an `error` body): the answer it got back, or the error.
fn expected_ask(outcome: &Result<Value, Value>) -> Result<Value, (i64, Option<String>)> {
    match outcome {
        Ok(answer) => {
            let action = answer["action"].as_str().unwrap_or("cancel");
            let text = answer.pointer("/content/answer").and_then(Value::as_str);
            Ok(match (action, text) {
                ("accept", Some(text)) => {
                    json!([{"type": "text", "text": format!("answer: {text}")}])
                }
                _ => json!([{"type": "text", "text": format!("no answer ({action})")}]),
            })
        }
        // A JSON-RPC error object comes back as it is; anything else is an internal error.
        Err(error) => match (error["code"].as_i64(), error["message"].as_str()) {
            (Some(code), Some(message)) => Err((code, Some(message.to_string()))),
            _ => Err((-32603, None)),
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// 2025-11-25: a tool's elicitation answered with results or errors of any shape,
    /// for its id or a stranger's, once or several times. Strangers' answers and every
    /// answer after the first are ignored; the task ends with what the first one said, and
    /// `tasks/result` returns it.
    #[test]
    fn elicitation_answers_of_any_shape_2025(
        answers in prop::collection::vec(
            (any::<bool>(), any::<bool>(), input_answer()),
            0..4,
        ),
    ) {
        let mut h = Harness::with(server_with_ttl(None), Rev::V2025);
        let created = h.result(
            "tools/call",
            json!({"name": "ask", "arguments": {"question": "?"}, "task": {"ttl": 60_000}}),
        );
        let id = created["task"]["taskId"].as_str().unwrap().to_string();
        let request = h.next_server_request();
        prop_assert_eq!(&request["method"], "elicitation/create");
        prop_assert_eq!(
            &request["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            &json!(id)
        );
        let mut first: Option<Result<Value, Value>> = None;
        for (ours, is_result, body) in answers {
            let to = if ours { request["id"].clone() } else { json!("s-999") };
            let outcome = if is_result { "result" } else { "error" };
            let message = json!({"jsonrpc": "2.0", "id": to, outcome: body});
            let rx = h.send(&message.to_string());
            prop_assert!(
                matches!(rx.recv_timeout(HANG), Err(crossbeam_channel::RecvTimeoutError::Disconnected)),
                "a response was answered"
            );
            if ours && first.is_none() {
                first = Some(if is_result { Ok(body) } else { Err(body) });
            }
        }
        // A client that never answered declines now.
        let first = first.unwrap_or_else(|| {
            let decline = json!({"action": "decline"});
            let message = json!({"jsonrpc": "2.0", "id": request["id"], "result": decline});
            drop(h.send(&message.to_string()));
            Ok(decline)
        });
        let result = h.request("tasks/result", json!({"taskId": id}));
        match expected_ask(&first) {
            Ok(content) => prop_assert_eq!(&result["result"]["content"], &content, "{}", result),
            Err((code, message)) => {
                prop_assert_eq!(&result["error"]["code"], &json!(code), "{}", result);
                if let Some(message) = message {
                    prop_assert_eq!(&result["error"]["message"], &json!(message), "{}", result);
                }
            }
        }
        h.still_works();
    }

    /// SEP-2663 `tasks/update`: answers of any shape, to the keys asked, to keys never
    /// issued or already answered, are acknowledged; unknown and repeated keys are ignored;
    /// the task lists exactly the keys still unanswered, and completes once none is.
    #[test]
    fn input_responses_of_any_shape_sep2663(
        rounds in prop::collection::vec(
            prop::collection::vec((0usize..4, input_answer()), 0..3),
            0..4,
        ),
    ) {
        let mut h = Harness::with(server_with_ttl(None), Rev::Sep2663);
        let created = h.result("tools/call", json!({"name": "multi_input", "arguments": {}}));
        let id = created["taskId"].as_str().unwrap().to_string();
        let task = h.poll(&id, &["input_required"]);
        let keys: Vec<String> = task["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        prop_assert_eq!(keys.len(), 2);
        let mut pending = keys.clone();
        for round in rounds {
            let mut responses = serde_json::Map::new();
            for (key, answer) in round {
                let key = match key {
                    0 | 1 => keys[key].clone(),
                    2 => "never-issued".to_string(),
                    _ => format!("{}-0", keys[0]),
                };
                responses.insert(key, answer);
            }
            let ack = h.result("tasks/update", json!({"taskId": id, "inputResponses": responses}));
            prop_assert_eq!(ack, json!({"resultType": "complete"}));
            pending.retain(|key| !responses.contains_key(key));
            if pending.is_empty() {
                break;
            }
            let task = h.result("tasks/get", json!({"taskId": id}));
            prop_assert_eq!(&task["status"], "input_required", "{}", task);
            let listed: Vec<&String> = task["inputRequests"].as_object().unwrap().keys().collect();
            prop_assert_eq!(listed, pending.iter().collect::<Vec<_>>(), "{}", task);
        }
        if !pending.is_empty() {
            let rest: serde_json::Map<String, Value> = pending
                .iter()
                .map(|key| (key.clone(), json!({"action": "decline"})))
                .collect();
            h.result("tasks/update", json!({"taskId": id, "inputResponses": rest}));
        }
        let done = h.poll(&id, &["completed", "failed", "cancelled"]);
        prop_assert_eq!(&done["status"], "completed", "{}", done);
        prop_assert!(
            done["result"]["content"][0]["text"].as_str().is_some_and(|t| t.starts_with("answers: ")),
            "{}",
            done
        );
        h.still_works();
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// (b) from two threads at once, 2025-11-25.
    #[test]
    fn concurrent_messages_2025(
        a in prop::collection::vec(message(Rev::V2025), 1..16),
        b in prop::collection::vec(message(Rev::V2025), 1..16),
    ) {
        run_concurrently(Rev::V2025, &a, &b)?;
    }

    /// (b) from two threads at once, SEP-2663.
    #[test]
    fn concurrent_messages_sep2663(
        a in prop::collection::vec(message(Rev::Sep2663), 1..16),
        b in prop::collection::vec(message(Rev::Sep2663), 1..16),
    ) {
        run_concurrently(Rev::Sep2663, &a, &b)?;
    }
}

// ----- the stdio transport ---------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// (a) Arbitrary bytes (invalid UTF-8, stray newlines and carriage returns) through
    /// `serve_lines`: it never fails or stops early, writes only JSON-RPC lines, and still
    /// answers the ping after them.
    #[test]
    fn stdio_bytes(chunks in prop::collection::vec(
        prop_oneof![
            3 => any::<Vec<u8>>(),
            1 => raw_line().prop_map(String::into_bytes),
            1 => Just(b"\r\n\n\r".to_vec()),
            1 => Just(vec![0xff, 0xfe, b'{', 0xc3]),
        ],
        0..12,
    )) {
        let mut input: Vec<u8> = chunks.concat();
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":\"last\",\"method\":\"ping\"}\n");
        let out = Captured::default();
        server().serve_lines(Cursor::new(input), out.clone()).unwrap();
        let deadline = Instant::now() + HANG;
        loop {
            let messages = out.messages();
            for message in &messages {
                prop_assert_eq!(&message["jsonrpc"], "2.0", "{}", message);
            }
            if messages.iter().any(|m| m["id"] == "last" && m["result"] == json!({})) {
                break;
            }
            prop_assert!(Instant::now() < deadline, "no answer to the last ping: {:?}", messages);
            std::thread::yield_now();
        }
    }
}

#[test]
fn an_array_after_initialize_on_a_version_with_batches_is_judged_as_a_batch() {
    // The generators can settle a connection on 2024-11-05 (which has batches) and then
    // send an array: the oracle must expect a batch's answer, not one error.
    let initialize = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize",
                            "params": {"protocolVersion": "2024-11-05"}});
    let messages = [
        Msg::Json(initialize, None),
        Msg::Raw("[1,2]".into()),
        Msg::Raw(r#"[{"jsonrpc":"2.0","id":7,"method":"ping"}]"#.into()),
        Msg::Raw(r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#.into()),
        Msg::Raw("[]".into()),
        // Each message answered as if it came alone, in order; `initialize` and
        // 2026-07-28 requests refused; nothing for the notification.
        Msg::Raw(
            r#"[{"jsonrpc":"2.0","id":"a","method":"tools/list"},[],
                {"jsonrpc":"2.0","method":"notifications/initialized"},
                {"jsonrpc":"2.0","id":"b","method":"initialize","params":{}},
                {"jsonrpc":"2.0","id":"c","method":"ping","params":{"_meta":
                    {"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}]"#
                .into(),
        ),
    ];
    run(Rev::V2025, &messages).unwrap();
}

#[test]
fn tasks_result_may_return_the_missing_capability_its_task_failed_with() {
    // A promotable call whose tool asks for input the call did not declare fails with
    // -32021 (inline, within the promotion budget, or as its task's error), and a later
    // 2025-11-25 `tasks/result` on that task returns the same error as it is.
    let sep_call = json!({"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {
        "name": "confirm_delete", "arguments": {"filename": ""},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities":
                      {"extensions": {"io.modelcontextprotocol/tasks": {}}}}}});
    let result = json!({"jsonrpc": "2.0", "id": 0, "method": "tasks/result",
                        "params": {"taskId": "@@task2"}});
    run(
        Rev::Sep2663,
        &[Msg::Json(sep_call, None), Msg::Json(result, None)],
    )
    .unwrap();
}
