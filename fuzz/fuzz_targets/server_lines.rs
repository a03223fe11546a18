//! The server's JSON-RPC handling on arbitrary lines, fed to a connection as the stdio
//! transport feeds it (`Connection::handle_text`), with the store's events pumped in as
//! stdio does. Nothing may panic or hang, and each message gets what JSON-RPC and MCP say:
//! - a request (an object with `"jsonrpc": "2.0"`, a string or integer id, a string
//!   method, object or absent params) exactly one response carrying its id, or none only
//!   when a `notifications/cancelled` in the input named its id;
//! - a notification or a response nothing;
//! - anything else one error: -32700 for what is not JSON, else -32600 or -32602;
//! - an array, once `initialize` settled on a version with batches: one array holding an
//!   answer for each request in it as above (none for one a `notifications/cancelled`
//!   named) and nothing else, or nothing when none is due; one error for `[]` or an
//!   oversized batch. Before that, or on another version, an array is malformed.
//!
//! The server's own requests (elicitation) left unanswered by the input are declined once
//! it is handled, as a client done with the conversation would; whatever still runs then is
//! cancelled through the store. Afterwards the connection still answers `ping`.
//!
//! Input: the lines (split on `\n`, invalid UTF-8 replaced). So that lines can name real
//! things, as a client would, `$TASK` in a line becomes the id of the task an earlier answer
//! named last, and `$SREQ` the id of the server's latest request (JSON).
#![no_main]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use libfuzzer_sys::fuzz_target;
use mcp_task_store::protocol::RpcError;
use mcp_task_store::server::{
    demo, error_result, text_result, Connection, Server, TaskSupport, Tool, MAX_BATCH_LEN,
};
use mcp_task_store::StoreConfig;
use serde_json::{json, Value};

/// Longest a message may wait for its answer once everything left running was cancelled.
const HANG: Duration = Duration::from_secs(10);

fn tools() -> Vec<Tool> {
    let echo = |name: &str, support| {
        Tool::new(
            name,
            "Returns its arguments",
            json!({"type": "object"}),
            support,
            |args, _| Ok(text_result(args.to_string())),
        )
    };
    let mut tools = vec![
        echo("echo", TaskSupport::Optional),
        echo("must", TaskSupport::Required),
        echo("never", TaskSupport::Forbidden),
        Tool::new(
            "fail",
            "Fails",
            json!({"type": "object"}),
            TaskSupport::Optional,
            |_, _| Ok(error_result("failed")),
        ),
        Tool::new(
            "boom",
            "Errs",
            json!({"type": "object"}),
            TaskSupport::Optional,
            |_, _| Err(RpcError::new(-32000, "boom").with_data(json!({"why": "fuzzing"}))),
        ),
    ];
    // The demo tools that finish at once, or wait only for their client's input.
    tools.extend(
        demo::tools()
            .into_iter()
            .filter(|t| matches!(t.name(), "ask" | "greet" | "confirm_delete" | "multi_input")),
    );
    tools
}

fn server() -> Server {
    let mut builder = Server::builder()
        .workers(4)
        .promote_after(Duration::from_millis(5))
        .store_config(StoreConfig {
            page_size: 3,
            ..StoreConfig::default()
        });
    for tool in tools() {
        builder = builder.tool(tool);
    }
    builder.build().unwrap()
}

/// What one message should get.
#[derive(Debug)]
enum Kind {
    Request {
        id: Value,
        /// A `subscriptions/listen`: accepted, it gets no answer of its own (its result,
        /// if any, comes among the server's messages, after its acknowledgement).
        listen: bool,
    },
    Nothing,
    Malformed {
        parse_error: bool,
        id: Option<Value>,
    },
    /// Too deep for this oracle's parser to say: at most one answer.
    Unknown,
    /// A batch its connection takes, with the ids of the requests in it.
    Batch {
        requests: Vec<Value>,
        len: usize,
    },
}

fn valid_id(id: &Value) -> bool {
    id.is_string() || id.as_i64().is_some()
}

/// Whether some object in the JSON `text` has two members of one name (names compared
/// as decoded). Such a text is refused whole as unreadable (-32700): other readers take
/// the first of the two where a `Value` keeps the last.
fn names_a_member_twice(text: &str) -> bool {
    /// Reads any JSON value, failing on the first object with a name seen twice.
    struct Names;
    impl<'de> serde::Deserialize<'de> for Names {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Names, D::Error> {
            d.deserialize_any(Names)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Names {
        type Value = Names;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_str<E>(self, _: &str) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_unit<E>(self) -> Result<Names, E> {
            Ok(Names)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
            while seq.next_element::<Names>()?.is_some() {}
            Ok(Names)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Names, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(name) = map.next_key::<String>()? {
                if !seen.insert(name) {
                    return Err(serde::de::Error::custom("a name twice"));
                }
                map.next_value::<Names>()?;
            }
            Ok(Names)
        }
    }
    serde_json::from_str::<Names>(text).is_err() && serde_json::from_str::<Value>(text).is_ok()
}

/// What a line should get; `batches`: whether the connection takes batches.
fn kind(text: &str, batches: bool) -> Kind {
    if names_a_member_twice(text) {
        return Kind::Malformed {
            parse_error: true,
            id: None,
        };
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) if batches => Kind::Batch {
            requests: items
                .iter()
                .filter_map(|item| match message_kind(&item.to_string()) {
                    Kind::Request { id, .. } => Some(id),
                    _ => None,
                })
                .collect(),
            len: items.len(),
        },
        _ => message_kind(text),
    }
}

fn message_kind(text: &str) -> Kind {
    let value = match serde_json::from_str::<Value>(text) {
        Ok(value) => value,
        Err(e) if e.to_string().contains("recursion limit") => return Kind::Unknown,
        Err(_) => {
            return Kind::Malformed {
                parse_error: true,
                id: None,
            }
        }
    };
    let Value::Object(object) = value else {
        return Kind::Malformed {
            parse_error: false,
            id: None,
        };
    };
    if !object.contains_key("method")
        && (object.contains_key("result") || object.contains_key("error"))
    {
        return Kind::Nothing;
    }
    let id = object.get("id").cloned();
    let usable_id = id.clone().filter(valid_id);
    let malformed = Kind::Malformed {
        parse_error: false,
        id: usable_id.clone(),
    };
    if id.is_some() && usable_id.is_none() || object.get("jsonrpc") != Some(&json!("2.0")) {
        return malformed;
    }
    let params = object.get("params").filter(|p| !p.is_null());
    if let (Some(Value::String(_)), None) = (object.get("method"), &id) {
        if params.is_some_and(|p| !p.is_object() && !p.is_array()) {
            return malformed;
        }
        return Kind::Nothing;
    }
    match (object.get("method"), usable_id) {
        (Some(Value::String(_)), Some(_)) if params.is_some_and(|p| !p.is_object()) => malformed,
        (Some(Value::String(method)), Some(id)) => Kind::Request {
            id,
            listen: method == "subscriptions/listen",
        },
        _ => malformed,
    }
}

/// The request id a `notifications/cancelled` names.
fn cancelled_id(text: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(text).ok()?;
    if value.get("method")? != "notifications/cancelled" || value.get("id").is_some() {
        return None;
    }
    value.get("params")?.get("requestId").cloned()
}

#[derive(Debug)]
enum Got {
    Answer(Value),
    Nothing,
    Waiting,
}

struct Harness {
    server: Server,
    connection: Arc<Connection>,
    outgoing: Receiver<Value>,
    stop_events: Option<crossbeam_channel::Sender<()>>,
    events: Option<std::thread::JoinHandle<()>>,
}

impl Harness {
    fn new() -> Harness {
        let server = server();
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
        Harness {
            server,
            connection,
            outgoing,
            stop_events: Some(stop_events),
            events: Some(events),
        }
    }

    fn send(&self, text: &str) -> Receiver<Value> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.connection.handle_text(
            text,
            Box::new(move |response| {
                tx.try_send(response).expect("a responder called twice");
            }),
        );
        rx
    }

    /// The server's requests and notifications so far, checked; the ids of its requests.
    fn server_messages(&self) -> Vec<Value> {
        let mut ids = Vec::new();
        while let Ok(message) = self.outgoing.try_recv() {
            assert_eq!(message["jsonrpc"], "2.0", "{message}");
            if message.get("method").is_none() {
                // Only the result that ends a task subscription answers a request here.
                let id = &message["id"];
                let ending = json!({"resultType": "complete",
                                    "_meta": {"io.modelcontextprotocol/subscriptionId": id}});
                assert_eq!(message["result"], ending, "{message}");
                continue;
            }
            assert!(message["method"].is_string(), "{message}");
            if let Some(id) = message.get("id") {
                ids.push(id.clone());
            }
        }
        ids
    }

    /// Declines the server's requests so far (a second answer to one the input answered
    /// must be ignored).
    fn decline(&self, mut ids: Vec<Value>) {
        ids.extend(self.server_messages());
        for id in ids {
            let decline = json!({"jsonrpc": "2.0", "id": id, "result": {"action": "decline"}});
            drop(self.send(&decline.to_string()));
        }
    }

    fn cancel_all(&self) {
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
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel_all();
        self.connection.close();
        drop(self.stop_events.take());
        if let Some(events) = self.events.take() {
            let _ = events.join();
        }
    }
}

fn poll(rx: &Receiver<Value>) -> Got {
    match rx.try_recv() {
        Ok(answer) => Got::Answer(answer),
        Err(TryRecvError::Disconnected) => Got::Nothing,
        Err(TryRecvError::Empty) => Got::Waiting,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 * 1024 {
        return;
    }
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.split('\n').collect();
    if lines.len() > 64 {
        return;
    }
    let h = Harness::new();
    let mut sent: Vec<(Kind, Receiver<Value>, Got)> = Vec::new();
    let mut server_requests: Vec<Value> = Vec::new();
    let mut task: Option<String> = None;
    let mut cancelled: Vec<Value> = Vec::new();
    for line in &lines {
        let mut line = line.to_string();
        if let Some(task) = &task {
            line = line.replace("$TASK", task);
        }
        if let Some(id) = server_requests.last() {
            line = line.replace("$SREQ", &id.to_string());
        }
        let batches = h.connection.accepts_batches();
        let rx = h.send(&line);
        server_requests.extend(h.server_messages());
        let got = poll(&rx);
        if let Got::Answer(answer) = &got {
            let named = answer
                .pointer("/result/task/taskId")
                .or_else(|| answer.pointer("/result/taskId"));
            if let Some(id) = named.and_then(Value::as_str) {
                task = Some(id.to_owned());
            }
        }
        cancelled.extend(cancelled_id(&line));
        sent.push((kind(&line, batches), rx, got));
    }
    h.decline(server_requests);
    // A short while for what runs to finish; then whatever still runs is cancelled.
    let mut deadline = Instant::now() + Duration::from_millis(50);
    let mut cancelled_all = false;
    loop {
        h.decline(Vec::new());
        let mut waiting = false;
        for (_, rx, got) in &mut sent {
            if matches!(got, Got::Waiting) {
                *got = poll(rx);
                waiting |= matches!(got, Got::Waiting);
            }
        }
        if !waiting {
            break;
        }
        if Instant::now() >= deadline {
            assert!(!cancelled_all, "no answer within {HANG:?}: {sent:?}");
            h.cancel_all();
            cancelled_all = true;
            deadline = Instant::now() + HANG;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for (kind, _, got) in &sent {
        match (kind, got) {
            (Kind::Request { id, listen }, Got::Answer(answer)) if answer.is_null() => {
                assert!(
                    *listen || cancelled.contains(id),
                    "request {id} got no response"
                );
            }
            (Kind::Request { id, .. }, Got::Answer(answer)) => {
                assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
                assert_eq!(&answer["id"], id, "{answer}");
                assert!(
                    answer.get("result").is_some() != answer.get("error").is_some(),
                    "{answer}"
                );
            }
            (Kind::Request { id, .. }, Got::Nothing) => {
                panic!("request {id} was dropped unanswered")
            }
            (Kind::Nothing, Got::Answer(answer)) => panic!("{kind:?} was answered: {answer}"),
            (Kind::Malformed { parse_error, id }, Got::Answer(answer)) => {
                let code = answer["error"]["code"].as_i64();
                if *parse_error {
                    assert_eq!(code, Some(-32700), "{answer}");
                } else {
                    assert!(matches!(code, Some(-32600 | -32602)), "{answer}");
                }
                match id {
                    Some(id) => assert!(answer["id"] == *id || answer["id"].is_null(), "{answer}"),
                    None => assert!(answer["id"].is_null(), "{answer}"),
                }
            }
            (Kind::Malformed { .. }, Got::Nothing) => panic!("{kind:?} got no error"),
            (Kind::Batch { len, .. }, Got::Answer(answer)) if *len == 0 || *len > MAX_BATCH_LEN => {
                assert_eq!(answer["error"]["code"], -32600, "{answer}");
            }
            (Kind::Batch { requests, len }, Got::Answer(answer)) => {
                let answers = match answer {
                    Value::Null => &vec![],
                    answer => answer.as_array().expect("a batch's answer is an array"),
                };
                assert!(!answers.is_empty() || answer.is_null(), "{answer}");
                // At most one answer per element (notifications and responses get none).
                assert!(answers.len() <= *len, "{answer}");
                for answer in answers {
                    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
                    assert!(
                        answer.get("result").is_some() != answer.get("error").is_some(),
                        "{answer}"
                    );
                }
                for id in requests.iter().filter(|id| !cancelled.contains(id)) {
                    assert!(
                        answers.iter().any(|answer| answer["id"] == *id),
                        "request {id} of a batch got no response: {answer}"
                    );
                }
            }
            (Kind::Batch { .. }, Got::Nothing) => panic!("a batch got no answer at all"),
            (Kind::Nothing | Kind::Unknown, _) => {}
            (_, Got::Waiting) => unreachable!(),
        }
    }
    // The connection still works.
    let rx = h.send(r#"{"jsonrpc":"2.0","id":"fuzz-ping","method":"ping"}"#);
    let answer = rx.recv_timeout(HANG).expect("ping after the input");
    assert_eq!(answer["id"], "fuzz-ping", "{answer}");
});
