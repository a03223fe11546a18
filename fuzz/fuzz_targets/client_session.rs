//! The blocking client over stdio-style streams (`ClientBuilder::connect_streams`) against
//! a scripted server whose every answer is fuzzed: the handshake, a tool call followed to
//! its end (polls, input requests, the result), a listing and a cancel. Nothing may
//! panic or hang: whatever the server says, each call ends, with a result or an error,
//! within its deadline.
//!
//! Input: one byte of options (bit 0: SEP-2663, else 2025-11-25), then turns separated by
//! lines holding only `#`. Each request the client sends takes the next turn as the
//! server's reply (any lines), with `$ID` replaced by that request's id; when the turns
//! run out the server's output ends.
#![no_main]

use std::io::{self, Read, Write};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use libfuzzer_sys::fuzz_target;
use mcp_task_store::client::{CallOptions, Client, InputRequest, Revision};
use serde_json::{json, Value};

/// The client's output: each line goes to the scripted server.
struct ToServer {
    line: Vec<u8>,
    lines: Sender<Vec<u8>>,
}

impl Write for ToServer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for &b in buf {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.lines
                    .send(line)
                    .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
            } else {
                self.line.push(b);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The client's input: what the scripted server sends, until it hangs up.
struct FromServer {
    pending: Vec<u8>,
    at: usize,
    chunks: Receiver<Vec<u8>>,
}

impl Read for FromServer {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.pending.len() {
            match self.chunks.recv() {
                Ok(chunk) => {
                    self.pending = chunk;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn serve(turns: Vec<String>, requests: Receiver<Vec<u8>>, replies: Sender<Vec<u8>>) {
    let mut turns = turns.into_iter();
    for line in requests {
        let Ok(message) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let (Some(id), true) = (message.get("id"), message.get("method").is_some()) else {
            continue;
        };
        let Some(turn) = turns.next() else {
            return;
        };
        let mut reply = turn.replace("$ID", &id.to_string());
        reply.push('\n');
        if replies.send(reply.into_bytes()).is_err() {
            return;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&options, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let turns: Vec<String> = text.split("\n#\n").map(str::to_owned).collect();
    if turns.len() > 32 {
        return;
    }
    let revision = if options & 1 == 1 {
        Revision::Sep2663
    } else {
        Revision::V2025
    };
    let (to_server, requests) = crossbeam_channel::unbounded();
    let (replies, from_server) = crossbeam_channel::unbounded();
    let server = std::thread::spawn(move || serve(turns, requests, replies));
    let client = Client::builder()
        .revision(revision)
        .request_timeout(Duration::from_millis(50))
        .deadline(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(10))
        .max_poll_interval(Duration::from_millis(10))
        .stuck_polls(3)
        .on_elicitation(|_: &InputRequest| {
            Ok(json!({"action": "accept", "content": {"name": "x"}}))
        })
        .on_sampling(|_: &InputRequest| {
            Ok(json!({"role": "assistant", "content": {"type": "text", "text": "x"}}))
        })
        .connect_streams(
            FromServer {
                pending: Vec::new(),
                at: 0,
                chunks: from_server,
            },
            ToServer {
                line: Vec::new(),
                lines: to_server,
            },
        );
    if let Ok(client) = client {
        let _ = client.call_tool_with(
            "echo",
            json!({"text": "hi"}),
            CallOptions::new().deadline(Duration::from_millis(300)),
        );
        let _ = client.list_tasks(None);
        let _ = client.cancel_task("t1");
        drop(client);
    }
    server.join().unwrap();
});
