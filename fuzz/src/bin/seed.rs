//! Writes seed inputs for the fuzz targets into `corpus/<target>/` (run from `fuzz/`):
//! journals written by a real store (raw and framed, with and without a snapshot), MCP
//! conversations in both revisions, and well-formed HTTP requests and answers.

use std::fs;
use std::path::{Path, PathBuf};

use mcp_task_store::{CreateTask, Durability, JournalConfig, Outcome, Store, TaskStatus};
use serde_json::json;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("corpus").join(target);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

/// The payloads of a framed file.
fn payloads(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push(&bytes[at + 8..at + 8 + len]);
        at += 8 + len;
    }
    out
}

fn join(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(&[0xFF, 0xFE]);
        }
        out.extend_from_slice(part);
    }
    out
}

/// A journal with every kind of record, compacted `compactions` times.
fn journal(dir: &Path, busy: bool) {
    let _ = fs::remove_dir_all(dir);
    let mut config = JournalConfig::new(dir);
    config.durability = Durability::Flush;
    config.compact_ratio = 1;
    config.compact_min_bytes = if busy { 512 } else { u64::MAX };
    let store = Store::builder().journal(config).build().unwrap();
    let rounds = if busy { 12 } else { 3 };
    for i in 0..rounds {
        let mut create = CreateTask::new().ttl(600_000 + i);
        if i % 3 == 1 {
            create = create.session("s-1");
        }
        if i % 4 == 2 {
            create = create.origin(json!({"method": "tools/call", "params": {"name": "echo"}}));
        }
        let task = store.create(create).unwrap();
        let session = (i % 3 == 1).then(|| "s-1".into());
        let session = session.as_ref();
        match i % 5 {
            0 => {
                store
                    .store_result(
                        task.task_id,
                        session,
                        TaskStatus::Completed,
                        Outcome::result(json!({"content": [{"type": "text", "text": "ok"}]})),
                        Some("done".into()),
                    )
                    .unwrap();
            }
            1 => {
                let requests = [(
                    "k".to_string(),
                    json!({"method": "elicitation/create", "params": {"message": "?"}}),
                )]
                .into();
                store
                    .set_input_requests(task.task_id, session, requests)
                    .unwrap();
            }
            2 => {
                store
                    .cancel(task.task_id, session, Some("bye".into()))
                    .unwrap();
            }
            3 => {
                store
                    .store_result(
                        task.task_id,
                        session,
                        TaskStatus::Failed,
                        Outcome::error(json!({"code": -32000, "message": "no"})),
                        None,
                    )
                    .unwrap();
            }
            _ => {
                store
                    .update_status(
                        task.task_id,
                        session,
                        TaskStatus::Working,
                        Some("step".into()),
                    )
                    .unwrap();
            }
        }
    }
    drop(store);
}

fn journals() {
    let base = std::env::temp_dir().join(format!("mcpts-seed-{}", std::process::id()));
    for (name, busy) in [("plain", false), ("compacted", true)] {
        let dir = base.join(name);
        journal(&dir, busy);
        let mut snapshot: Option<(u64, PathBuf)> = None;
        let mut log: Option<(u64, PathBuf)> = None;
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if let Some(g) = file
                .strip_prefix("snapshot-")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
            {
                if snapshot.as_ref().is_none_or(|(s, _)| g > *s) {
                    snapshot = Some((g, path.clone()));
                }
            }
            if let Some(g) = file
                .strip_prefix("journal-")
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|h| u64::from_str_radix(h, 16).ok())
            {
                if log.as_ref().is_none_or(|(s, _)| g > *s) {
                    log = Some((g, path.clone()));
                }
            }
        }
        let log_bytes = fs::read(&log.unwrap().1).unwrap();
        let log_parts = payloads(&log_bytes);
        match snapshot {
            None => {
                write(
                    "journal",
                    &format!("{name}-raw"),
                    &[&[0u8][..], &log_bytes].concat(),
                );
                write(
                    "journal",
                    &format!("{name}-framed"),
                    &[&[4u8][..], &join(&log_parts)].concat(),
                );
            }
            Some((_, path)) => {
                let snap = fs::read(path).unwrap();
                let raw = [&[8u8][..], &snap, &[0xFF, 0xFE], &log_bytes].concat();
                write("journal", &format!("{name}-raw"), &raw);
                let mut parts = payloads(&snap);
                parts.push(b"");
                parts.extend(log_parts);
                write(
                    "journal",
                    &format!("{name}-framed"),
                    &[&[12u8][..], &join(&parts)].concat(),
                );
                write(
                    "journal",
                    &format!("{name}-framed-keep"),
                    &[&[14u8][..], &join(&parts)].concat(),
                );
            }
        }
    }
    let _ = fs::remove_dir_all(base);
}

fn conversations() {
    let sep_meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        // A client with handlers for the input the demo tools ask (else they get -32021).
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}, "sampling": {}}
    });
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}, "elicitation": {}},
        "clientInfo": {"name": "fuzz", "version": "0"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let v2025 = [
        init.clone(),
        initialized.clone(),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"a": 1}, "task": {"ttl": 60000}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ask", "arguments": {"question": "q"}, "task": {}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/list"}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": {"taskId": "$TASK"}}),
        json!({"jsonrpc": "2.0", "id": "r", "method": "tasks/result", "params": {"taskId": "$TASK"}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "boom", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6}}),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/cancel", "params": {"taskId": "x"}}),
        json!({"jsonrpc": "2.0", "id": "$SREQ", "result": {"action": "accept", "content": {"name": "n"}}}),
    ];
    let sep = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "multi_input", "arguments": {}, "_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "confirm_delete", "arguments": {"filename": "f"}, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}, "_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"taskId": "$TASK", "_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/update", "params": {"taskId": "$TASK", "inputResponses": {"k": {}}, "_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/cancel", "params": {"taskId": "$TASK", "_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "must", "arguments": {}, "_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "id": 8, "method": "subscriptions/listen", "params": {"_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "id": "l", "method": "subscriptions/listen", "params": {"notifications": {"taskIds": ["$TASK"]}, "_meta": sep_meta}}),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "l"}}),
    ];
    let lines = |messages: &[serde_json::Value]| {
        messages
            .iter()
            // `$SREQ` stands for a JSON value: unquoted.
            .map(|m| m.to_string().replace("\"$SREQ\"", "$SREQ"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    write("server_lines", "v2025", lines(&v2025).as_bytes());
    write("server_lines", "sep2663", lines(&sep).as_bytes());
    let batch = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}}}),
        json!([
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"a": 1}}},
            {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}},
            [],
            1
        ]),
        json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
        json!([]),
    ];
    write("server_lines", "batch", lines(&batch).as_bytes());
    write("server_lines", "junk", b"{\"jsonrpc\":\"2.0\",\"id\":1}\n[1,2]\nnot json\n{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}\n");
    for (i, m) in v2025.iter().chain(&sep).enumerate() {
        let two = format!("{}\n{}", init, m);
        write("server_lines", &format!("one-{i}"), two.as_bytes());
    }
}

fn http() {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    let post = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\nOrigin: http://localhost:3000\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let chunked = format!(
        "POST http://localhost/mcp?x=1 HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json; charset=utf-8\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n{:x};ext=1\r\n{body}\r\n0\r\nTrailer: x\r\n\r\nGET /mcp HTTP/1.0\r\nConnection: keep-alive\r\nMcp-Name: =?base64?ZWNobw==?=\r\n\r\nDELETE /mcp HTTP/1.1\r\nHost: localhost\r\nMcp-Session-Id: abc\r\nConnection: close\r\n\r\n",
        body.len()
    );
    for (i, request) in [post, chunked].iter().enumerate() {
        for options in [0u8, 1, 0x30] {
            write(
                "http_request",
                &format!("{i}-{options}"),
                &[&[options][..], request.as_bytes()].concat(),
            );
        }
    }
    let answer = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
    let replies = [
        format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}", answer.len()),
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\nid: 7\nretry: 10\nevent: message\ndata: {answer}\n\n\r\n0\r\n\r\n", answer.len() + 45),
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"x\"}}".to_string(),
        "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".to_string(),
    ];
    for (i, reply) in replies.iter().enumerate() {
        write("client_replies", &format!("{i}"), reply.as_bytes());
    }
}

/// A real conversation between the client and an in-process server, recorded as the
/// `client_session` target's turns: for each request of the client's, what the server
/// sent until that request's response, the id replaced by `$ID`.
fn client_session(sep: bool) {
    use mcp_task_store::client::{CallOptions, Client, InputRequest, Revision};
    use mcp_task_store::server::{text_result, Server, TaskSupport, Tool};
    use std::io::{Read, Write};
    use std::time::Duration;

    let echo = Tool::new(
        "echo",
        "Asks, then echoes",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |args, ctx| {
            let answer = ctx.elicit(json!({"mode": "form", "message": "name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}))?;
            Ok(text_result(format!("{args} {answer}")))
        },
    );
    let server = Server::builder().tool(echo).build().unwrap();
    let (out_tx, outgoing) = crossbeam_channel::unbounded::<serde_json::Value>();
    let connection = server.connect(out_tx, None);
    let (to_server, requests) = crossbeam_channel::unbounded::<Vec<u8>>();
    let (replies, from_server) = crossbeam_channel::unbounded::<Vec<u8>>();
    let recorder = std::thread::spawn(move || {
        let mut turns = Vec::new();
        for line in requests {
            let text = String::from_utf8_lossy(&line).into_owned();
            let message: serde_json::Value = serde_json::from_str(&text).unwrap();
            let (tx, rx) = crossbeam_channel::bounded(1);
            connection.handle_text(&text, Box::new(move |v| drop(tx.send(v))));
            let (Some(_), true) = (message.get("id"), message.get("method").is_some()) else {
                continue;
            };
            let mut turn = Vec::new();
            let response = loop {
                crossbeam_channel::select! {
                    recv(rx) -> r => break r.ok(),
                    recv(outgoing) -> m => turn.push(m.unwrap().to_string()),
                    default(Duration::from_secs(3)) => break None,
                }
            };
            while let Ok(m) = outgoing.try_recv() {
                turn.push(m.to_string());
            }
            let mut recorded = turn.clone();
            if let Some(response) = response.filter(|r| !r.is_null()) {
                turn.push(response.to_string());
                let mut response = response;
                response["id"] = json!("$ID");
                recorded.push(response.to_string().replace("\"$ID\"", "$ID"));
            }
            turns.push(recorded.join("\n"));
            let mut reply = turn.join("\n");
            reply.push('\n');
            if replies.send(reply.into_bytes()).is_err() {
                break;
            }
        }
        turns
    });
    struct W(crossbeam_channel::Sender<Vec<u8>>, Vec<u8>);
    impl Write for W {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            for &b in buf {
                if b == b'\n' {
                    let _ = self.0.send(std::mem::take(&mut self.1));
                } else {
                    self.1.push(b);
                }
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    struct R(crossbeam_channel::Receiver<Vec<u8>>, Vec<u8>, usize);
    impl Read for R {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            while self.2 == self.1.len() {
                match self.0.recv() {
                    Ok(chunk) => (self.1, self.2) = (chunk, 0),
                    Err(_) => return Ok(0),
                }
            }
            let n = buf.len().min(self.1.len() - self.2);
            buf[..n].copy_from_slice(&self.1[self.2..self.2 + n]);
            self.2 += n;
            Ok(n)
        }
    }
    let client = Client::builder()
        .revision(if sep {
            Revision::Sep2663
        } else {
            Revision::V2025
        })
        .poll_interval(Duration::from_millis(10))
        .max_poll_interval(Duration::from_millis(10))
        .on_elicitation(|_: &InputRequest| {
            Ok(json!({"action": "accept", "content": {"name": "x"}}))
        })
        .connect_streams(R(from_server, Vec::new(), 0), W(to_server, Vec::new()))
        .unwrap();
    let _ = client.call_tool_with(
        "echo",
        json!({"text": "hi"}),
        CallOptions::new().deadline(Duration::from_secs(5)),
    );
    let _ = client.list_tasks(None);
    let _ = client.cancel_task("t1");
    drop(client);
    let turns = recorder.join().unwrap();
    let input = [&[u8::from(sep)][..], turns.join("\n#\n").as_bytes()].concat();
    write(
        "client_session",
        if sep { "sep2663" } else { "v2025" },
        &input,
    );
}

fn main() {
    journals();
    conversations();
    http();
    client_session(false);
    client_session(true);
}
