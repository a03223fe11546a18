//! Newline-delimited JSON-RPC over a reader and a writer: the caller's thread reads, one
//! thread writes, one thread turns store events into notifications. Nothing but protocol
//! goes to the writer.
//!
//! The writer's queue is bounded ([`QUEUE`] messages). A response waits for room, so a
//! client that stops reading its output stops the server reading its input
//! (backpressure) rather than making it keep every answer in memory; a notification or a
//! server-to-client request never waits: it is dropped, or fails, as over HTTP. A task
//! subscription's messages wait as answers do (see `listen`), on whichever thread sends
//! them (the reader, or the one that turns store events into them), until the subscription
//! ends: closing the connection ends them all, so a stalled one never holds up shutdown.

use std::io::{self, BufRead, BufWriter, Write};
use std::panic::AssertUnwindSafe;
use std::thread;

use crossbeam_channel::{select, Receiver, Sender, TrySendError};
use serde_json::Value;

use super::Server;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::lines::{read_line, Line};
use crate::store::spin::{spin_recv, SpinBudget, Spun};

/// Longest message accepted, in bytes; longer lines are refused with -32600 and skipped
/// without being held in memory.
pub(crate) const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Most messages queued for the writer (as over HTTP, per session).
pub(crate) const QUEUE: usize = 1024;

pub(crate) fn serve(
    server: &Server,
    input: impl BufRead,
    output: impl Write + Send + 'static,
) -> io::Result<()> {
    let (outgoing, to_write) = crossbeam_channel::bounded::<Value>(QUEUE);
    serve_queued(server, input, output, outgoing, to_write)
}

/// [`serve`] through the writer's queue `outgoing` / `to_write`.
fn serve_queued(
    server: &Server,
    mut input: impl BufRead,
    output: impl Write + Send + 'static,
    outgoing: Sender<Value>,
    to_write: Receiver<Value>,
) -> io::Result<()> {
    // Closed (dropped) when serving ends: an answer still waiting for room then gives up.
    let (_serving, ended) = crossbeam_channel::bounded::<()>(0);
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
            let ended = ended.clone();
            Box::new(move |message: Value| {
                // Null: a request its client cancelled, which gets no response.
                if !message.is_null() {
                    queue_answer(&outgoing, &ended, message);
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
                    // A panic while handling one message (in a tool's preflight, on
                    // arguments its client chose) must not end the transport, as over
                    // HTTP: its request's reply, dropped in the unwinding, answers -32603.
                    let handled = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        connection.handle_text(text, respond)
                    }));
                    if handled.is_err() {
                        log::error!("handling a message panicked; the connection goes on");
                    }
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

/// Queues an answer for the writer, as its text (a `Value` tree takes many times the
/// room of its text), waiting for room while the transport serves: the thread that
/// answers (the reader itself, for most requests) goes no further until the client reads.
/// Once serving ended nobody may ever read, so a full queue then drops the answer rather
/// than hold a worker for good.
fn queue_answer(outgoing: &Sender<Value>, ended: &Receiver<()>, message: Value) {
    if let Err(TrySendError::Full(line)) = outgoing.try_send(Value::String(message.to_string())) {
        select! {
            send(outgoing, line) -> _ => {}
            recv(ended) -> _ => {}
        }
    }
}

fn write_all(
    output: impl Write,
    messages: Receiver<Value>,
    mut flush: Receiver<crossbeam_channel::Sender<()>>,
) {
    let mut output = BufWriter::new(output);
    let mut spin = SpinBudget::default();
    let write = |output: &mut BufWriter<_>, message: &Value| -> io::Result<()> {
        match message {
            // An answer, queued as its text (a JSON-RPC message itself is an object).
            Value::String(line) => output.write_all(line.as_bytes())?,
            message => serde_json::to_writer(&mut *output, message)?,
        }
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

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Cursor, Read};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;

    /// The input, counting what the server took of it and whether it reached its end.
    struct Counting {
        input: Cursor<Vec<u8>>,
        read: Arc<AtomicUsize>,
        ended: Arc<AtomicBool>,
    }

    impl Read for Counting {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.input.read(buf)?;
            self.read.fetch_add(n, Ordering::SeqCst);
            if n == 0 && !buf.is_empty() {
                self.ended.store(true, Ordering::SeqCst);
            }
            Ok(n)
        }
    }

    /// An output nobody reads: its first write blocks until released, then fails.
    struct Stuck(Receiver<()>);

    impl Write for Stuck {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            let _ = self.0.recv();
            Err(io::Error::other("released"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A client that stops reading stops the server reading: once the writer is stuck
    /// and its queue full, the reader takes no more requests (it does not read on to the
    /// end of its input, queueing every answer in memory).
    #[test]
    fn a_client_that_does_not_read_stops_the_reader() {
        const CAPACITY: usize = 4;
        let line = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
        let input = line.repeat(20_000);
        let (read, ended) = (Arc::default(), Arc::default());
        let counting = Counting {
            input: Cursor::new(input),
            read: Arc::clone(&read),
            ended: Arc::clone(&ended),
        };
        let (release, stuck) = crossbeam_channel::bounded::<()>(0);
        let (outgoing, to_write) = crossbeam_channel::bounded::<Value>(CAPACITY);
        let watched = outgoing.clone();
        let (done_tx, done) = crossbeam_channel::bounded(1);
        thread::spawn(move || {
            let server = Server::builder().build().unwrap();
            let reader = BufReader::new(counting);
            let served = serve_queued(&server, reader, Stuck(stuck), outgoing, to_write);
            let _ = done_tx.send(served);
        });
        // Either the queue fills up (the reader must now wait for the writer) or the
        // reader gets to the end of its input without waiting.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !watched.is_full() && !ended.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "neither happened");
            thread::yield_now();
        }
        let taken = read.load(Ordering::SeqCst);
        let ended = ended.load(Ordering::SeqCst);
        drop(release);
        // The queue holds CAPACITY answers; the reader may have read one line more, with
        // the rest of its BufReader's buffer.
        let most = (CAPACITY + 1) * line.len() + 8 * 1024;
        assert!(
            !ended && taken <= most,
            "the reader took {taken} bytes (ended: {ended}) while nothing could be written"
        );
        assert!(done
            .recv_timeout(Duration::from_secs(10))
            .expect("serving ends once the writer fails")
            .is_ok());
    }
}
