//! Newline-delimited JSON-RPC over a reader and a writer: the caller's thread reads, one
//! thread writes, one thread turns store events into notifications. Nothing but protocol
//! goes to the writer.

use std::io::{self, BufRead, BufWriter, Write};
use std::thread;

use crossbeam_channel::{select, Receiver};
use serde_json::Value;

use super::Server;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::lines::{read_line, Line};
use crate::store::spin::{spin_recv, SpinBudget, Spun};

/// Longest message accepted, in bytes; longer lines are refused with -32600 and skipped
/// without being held in memory.
pub(crate) const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

pub(crate) fn serve(
    server: &Server,
    mut input: impl BufRead,
    output: impl Write + Send + 'static,
) -> io::Result<()> {
    let (outgoing, to_write) = crossbeam_channel::unbounded::<Value>();
    let (flush_tx, flush_rx) = crossbeam_channel::bounded::<crossbeam_channel::Sender<()>>(1);
    thread::Builder::new()
        .name("mcp-stdio-writer".into())
        .spawn(move || write_all(output, to_write, flush_rx))?;
    let connection = server.connect(outgoing.clone(), None);
    let events = server
        .store()
        .subscribe()
        .map_err(|e| io::Error::other(e.to_string()))?;
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let notifier = {
        let connection = connection.clone();
        thread::Builder::new()
            .name("mcp-stdio-events".into())
            .spawn(move || loop {
                select! {
                    recv(events) -> event => match event {
                        Ok(event) => connection.handle_store_event(&event),
                        Err(_) => return,
                    },
                    recv(stop_rx) -> _ => return,
                }
            })?
    };
    let mut buf = Vec::new();
    let result = loop {
        let line = match read_line(&mut input, &mut buf, MAX_MESSAGE_BYTES) {
            Ok(line) => line,
            Err(e) => break Err(e),
        };
        let respond = {
            let outgoing = outgoing.clone();
            Box::new(move |message: Value| {
                // Null: a request its client cancelled, which gets no response.
                if !message.is_null() {
                    let _ = outgoing.send(message);
                }
            })
        };
        match line {
            Line::End => break Ok(()),
            Line::TooLong => respond(jsonrpc::error_response(
                None,
                &RpcError::invalid_request(format!(
                    "message larger than {MAX_MESSAGE_BYTES} bytes"
                )),
            )),
            Line::Complete => {
                let text = match std::str::from_utf8(&buf) {
                    Ok(text) => text.trim(),
                    Err(e) => {
                        respond(jsonrpc::error_response(None, &RpcError::parse_error(e)));
                        continue;
                    }
                };
                if !text.is_empty() {
                    connection.handle_text(text, respond);
                }
            }
        }
    };
    connection.close();
    drop(stop_tx);
    let _ = notifier.join();
    // Tools still running keep the writer alive until they finish; don't wait for them, but
    // make sure every answer already queued is written before returning.
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    if flush_tx.send(done_tx).is_ok() {
        let _ = done_rx.recv_timeout(std::time::Duration::from_secs(5));
    }
    result
}

fn write_all(
    output: impl Write,
    messages: Receiver<Value>,
    mut flush: Receiver<crossbeam_channel::Sender<()>>,
) {
    let mut output = BufWriter::new(output);
    let mut spin = SpinBudget::default();
    let write = |output: &mut BufWriter<_>, message: &Value| -> io::Result<()> {
        serde_json::to_writer(&mut *output, message)?;
        output.write_all(b"\n")
    };
    loop {
        // Messages come in bursts (answers to requests in flight): poll briefly before
        // parking, since waking a parked thread costs far more than writing a line.
        if let Spun::Ready(message) = spin_recv(&messages, &mut spin) {
            if write(&mut output, &message).is_err() {
                return;
            }
            if messages.is_empty() && output.flush().is_err() {
                return;
            }
            continue;
        }
        select! {
            recv(messages) -> message => {
                let Ok(message) = message else { break };
                if write(&mut output, &message).is_err() {
                    return;
                }
                // Flush when nothing else is queued, so bursts share one write.
                if messages.is_empty() && output.flush().is_err() {
                    return;
                }
            }
            recv(flush) -> done => {
                let Ok(done) = done else {
                    // Nobody will ask again; stop listening rather than spin.
                    flush = crossbeam_channel::never();
                    continue;
                };
                for message in messages.try_iter() {
                    if write(&mut output, &message).is_err() {
                        break;
                    }
                }
                let _ = output.flush();
                let _ = done.send(());
            }
        }
    }
    let _ = output.flush();
}
