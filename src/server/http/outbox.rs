//! A connection's answers: queued by whichever thread produces them (the connection's own,
//! a tool worker, a waiting `tasks/result`) and written in request order (RFC 9112 §9.3.2)
//! by the connection's writer thread. Producers never write: a client that stops reading
//! stalls only its own writer, never a tool worker or anyone else's answers.
//!
//! An event stream is the exception: its own thread writes it, once every answer before it
//! is written and while the writer has nothing else to write on that connection.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::wire;
use crate::protocol::jsonrpc::{self, RpcError};

/// Unread bytes a finished connection reads and drops (at most, for at most [`LINGER`]),
/// so that its last answer is not lost to a reset: closing a socket with unread input
/// resets it, and the client may lose what it had not read yet. At least this, and at
/// least a whole request (see [`write_answers`]): a request refused from its head (by the
/// authentication hook, say) leaves its body unread, and a client that sends a request
/// whole before it reads (most do) would otherwise meet a reset instead of its refusal.
const LINGER_BYTES: u64 = 1 << 20;
const LINGER: Duration = Duration::from_secs(1);

/// The slowest a client may read an answer, past the write timeout: an answer of `n` bytes
/// has `write_timeout + n / MIN_READ_RATE` to go out.
const MIN_READ_RATE: usize = 64 * 1024;

/// When an answer of `len` bytes must be written by: `write_timeout` plus a second per
/// [`MIN_READ_RATE`] bytes, so a client that reads steadily gets a large answer whole, and
/// one that reads a byte now and then cannot hold the writer for ever.
fn write_deadline(write_timeout: Duration, len: usize) -> Instant {
    deadline_after(write_timeout.saturating_add(Duration::from_secs((len / MIN_READ_RATE) as u64)))
}

/// The `Content-Type` field of a JSON answer.
pub(super) const JSON: (&str, &str) = ("Content-Type", "application/json");

/// A JSON-RPC error response with a null id: the body of an answer the transport gives
/// on its own (a refusal, a request dropped unanswered).
pub(super) fn error_body(error: &RpcError) -> Vec<u8> {
    serde_json::to_vec(&jsonrpc::error_response(None, error)).unwrap_or_default()
}

/// `now + after`, or a year from now when that is past what `Instant` holds.
pub(super) fn deadline_after(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Writes all of `bytes` by `deadline` (a per-call timeout would let a client that reads a
/// byte now and then hold the writer for ever).
pub(super) fn write_all_by(
    socket: &TcpStream,
    mut bytes: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        socket.set_write_timeout(Some(left))?;
        match (&mut &*socket).write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Ends a connection whose last answer was written: the client sees the end after it,
/// and what it still sends (up to `linger_bytes`) is read and dropped for a moment (see
/// [`LINGER`]).
fn finish(socket: &TcpStream, linger_bytes: u64) {
    let _ = socket.shutdown(Shutdown::Write);
    let deadline = Instant::now() + LINGER;
    let mut rest = [0u8; 16 * 1024];
    let mut dropped = 0u64;
    while dropped < linger_bytes {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || socket.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match (&mut &*socket).read(&mut rest) {
            Ok(0) => break,
            Ok(n) => dropped += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

struct Answer {
    bytes: Vec<u8>,
    /// The connection ends after it.
    close: bool,
}

struct State {
    /// The number of the next answer to write.
    next: u64,
    /// Answers produced before their turn, and their bytes in all.
    ready: BTreeMap<u64, Answer>,
    ready_bytes: usize,
    /// Answers to precede with an interim `100 Continue`, written when it is their turn.
    interim: BTreeSet<u64>,
    /// The latest `100 Continue` taken to be written: for which answer, and when.
    interim_sent: Option<(u64, Instant)>,
    /// The writer is writing outside the lock.
    writing: bool,
    /// Answer `next` is an event stream, written by its own thread.
    streaming: bool,
    /// How many answers the connection carries, once its last request was read.
    last: Option<u64>,
    /// An answer that ends the connection was produced: no request after it is read.
    closing: bool,
    /// Nothing more goes out: the last answer was written, or the connection broke or was
    /// cut off.
    ended: bool,
    /// The transport is stopping: nobody waits for room or a turn any more.
    stopping: bool,
    /// When the last answer was written (or the connection opened).
    quiet_since: Instant,
}

/// The answers due on one connection. It holds no socket, so answers still being worked
/// on (which hold it) do not hold the connection's file descriptor.
pub(super) struct Outbox {
    state: Mutex<State>,
    changed: Condvar,
}

impl Outbox {
    pub(super) fn new() -> Outbox {
        Outbox {
            state: Mutex::new(State {
                next: 0,
                ready: BTreeMap::new(),
                ready_bytes: 0,
                interim: BTreeSet::new(),
                interim_sent: None,
                writing: false,
                streaming: false,
                last: None,
                closing: false,
                ended: false,
                stopping: false,
                quiet_since: Instant::now(),
            }),
            changed: Condvar::new(),
        }
    }

    /// Queues answer `seq` for the writer.
    pub(super) fn deliver(&self, seq: u64, bytes: Vec<u8>, close: bool) {
        let mut state = self.state.lock();
        if state.ended {
            return;
        }
        state.closing |= close;
        state.ready_bytes += bytes.len();
        state.ready.insert(seq, Answer { bytes, close });
        drop(state);
        self.changed.notify_all();
    }

    /// Queues an interim `100 Continue` ahead of answer `seq`.
    pub(super) fn continue_before(&self, seq: u64) {
        self.state.lock().interim.insert(seq);
        self.changed.notify_all();
    }

    /// How long a body behind the `100 Continue` of answer `seq` may still take: `after`
    /// from when that went out, or from now while it waits for the answers before it.
    /// `None` once the connection ended or the transport is stopping.
    pub(super) fn continue_deadline(&self, seq: u64, after: Duration) -> Option<Instant> {
        let state = self.state.lock();
        if state.ended || state.stopping {
            return None;
        }
        if state.interim.contains(&seq) {
            return Some(deadline_after(after));
        }
        match state.interim_sent {
            Some((sent, at)) if sent == seq => at.checked_add(after),
            _ => None,
        }
    }

    /// Waits until fewer than `max.0` answers, and fewer than `max.1` bytes of them, wait
    /// for their turn (so a client cannot pile answers up behind a long call); false if
    /// the connection ended or the transport is stopping meanwhile. Answers still being
    /// worked on do not count: the server bounds them itself, and a request behind them
    /// (a cancel, an answer to an elicitation) may be what they wait for.
    pub(super) fn wait_for_room(&self, max: (usize, usize)) -> bool {
        let mut state = self.state.lock();
        while !state.ended
            && !state.stopping
            && (state.ready.len() >= max.0 || state.ready_bytes >= max.1)
        {
            self.changed.wait(&mut state);
        }
        !state.ended && !state.stopping
    }

    /// Whether some of the first `issued` answers are still to be written.
    pub(super) fn owes(&self, issued: u64) -> bool {
        let state = self.state.lock();
        !state.ended && state.next < issued
    }

    /// When the connection last had nothing due: its last answer's write.
    pub(super) fn quiet_since(&self) -> Instant {
        self.state.lock().quiet_since
    }

    /// Whether the connection ends before any further request could be answered.
    pub(super) fn closing(&self) -> bool {
        let state = self.state.lock();
        state.closing || state.ended
    }

    /// No request follows the first `count`: the connection ends once their answers are
    /// written.
    pub(super) fn no_more_requests(&self, count: u64) {
        self.state.lock().last = Some(count);
        self.changed.notify_all();
    }

    /// The transport is stopping: waits for room or a turn end (the writer goes on).
    pub(super) fn stop(&self) {
        self.state.lock().stopping = true;
        self.changed.notify_all();
    }

    /// Nothing more goes out (the socket was shut down, or is about to be).
    pub(super) fn cut(&self) {
        self.state.lock().ended = true;
        self.changed.notify_all();
    }

    /// Waits until answer `seq` may be written by its own thread (an event stream): every
    /// answer before it written, the writer idle. False when that did not happen by
    /// `deadline`, or the connection ended or the transport is stopping.
    fn begin_stream(&self, seq: u64, deadline: Instant) -> bool {
        let mut state = self.state.lock();
        loop {
            if state.ended || state.stopping {
                return false;
            }
            // Its own `100 Continue`, if one is due, goes first (the writer is about to).
            if state.next == seq && !state.writing && !state.interim.contains(&seq) {
                break;
            }
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                return false;
            }
        }
        state.streaming = true;
        true
    }

    /// The stream in answer `seq` is over: the writer takes the connection back.
    fn end_stream(&self, seq: u64, close: bool) {
        let mut state = self.state.lock();
        state.streaming = false;
        drop(state);
        self.deliver(seq, Vec::new(), close);
    }

    /// What the writer writes next, waiting until there is something: the bytes, whether
    /// the connection ends after them, and whether they complete an answer. `None` when
    /// the connection is over (it was cut, or `finish` is due).
    fn next_to_write(&self) -> Option<(Vec<u8>, bool, bool)> {
        let mut state = self.state.lock();
        loop {
            if state.ended {
                return None;
            }
            if !state.streaming {
                let next = state.next;
                if state.interim.remove(&next) {
                    state.interim_sent = Some((next, Instant::now()));
                    state.writing = true;
                    return Some((b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(), false, false));
                }
                if let Some(answer) = state.ready.remove(&next) {
                    state.ready_bytes -= answer.bytes.len();
                    state.writing = true;
                    return Some((answer.bytes, answer.close, true));
                }
                if state.last == Some(next) {
                    state.ended = true;
                    drop(state);
                    self.changed.notify_all();
                    return Some((Vec::new(), true, false));
                }
            }
            self.changed.wait(&mut state);
        }
    }

    /// The writer wrote (or failed to write) what `next_to_write` gave it; true if the
    /// connection ends now.
    fn written(&self, ok: bool, close: bool, completes: bool) -> bool {
        let mut state = self.state.lock();
        state.writing = false;
        if completes {
            state.next += 1;
            state.quiet_since = Instant::now();
        }
        let ends = !ok || close || state.last == Some(state.next);
        state.ended |= ends;
        drop(state);
        self.changed.notify_all();
        ends
    }
}

/// The connection's writer: writes its answers in order until the connection is over.
/// Requests are at most `request_bytes` long (head and body): so much of what the client
/// still sends is dropped as it ends, if it comes in time (see [`LINGER_BYTES`]).
pub(super) fn write_answers(
    outbox: &Outbox,
    socket: &TcpStream,
    write_timeout: Duration,
    request_bytes: usize,
) {
    let linger_bytes = u64::try_from(request_bytes).map_or(u64::MAX, |n| n.max(LINGER_BYTES));
    while let Some((bytes, close, completes)) = outbox.next_to_write() {
        let ok = write_all_by(socket, &bytes, write_deadline(write_timeout, bytes.len())).is_ok();
        if outbox.written(ok, close, completes) {
            if ok {
                finish(socket, linger_bytes);
            } else {
                // A client that stopped reading (or left): nothing more can reach it.
                let _ = socket.shutdown(Shutdown::Both);
            }
            return;
        }
    }
}

/// How a request's answer goes out.
pub(super) struct Answering {
    /// The connection ends after this answer (the client asked, or HTTP/1.0).
    pub(super) close: bool,
    /// A `HEAD` request: the answer has no body.
    pub(super) head_only: bool,
    /// An HTTP/1.0 client: told when its connection stays open, and never sent chunks.
    pub(super) http10: bool,
    /// How long an event stream waits for the answers before it, and each of its writes.
    pub(super) stream_wait: Duration,
    pub(super) write_timeout: Duration,
}

/// Answers one request. Dropped unanswered (a handler that lost it, or panicked), it
/// answers 500, so the answers after it on the connection are not held up for good.
pub(super) struct Responder {
    outbox: Arc<Outbox>,
    /// For an event stream only; weak, so an answer being worked on elsewhere does not hold
    /// the connection's file descriptor.
    socket: Weak<TcpStream>,
    seq: u64,
    how: Answering,
    answered: bool,
    /// Header fields every answer to this request carries, whatever it is (CORS).
    always: Vec<(&'static str, String)>,
}

impl Responder {
    pub(super) fn new(
        outbox: Arc<Outbox>,
        socket: Weak<TcpStream>,
        seq: u64,
        how: Answering,
    ) -> Responder {
        Responder {
            outbox,
            socket,
            seq,
            how,
            answered: false,
            always: Vec::new(),
        }
    }

    /// Adds a header field to whatever answer this request gets (an error, a stream, the
    /// 500 of a request dropped unanswered).
    pub(super) fn always_send(&mut self, name: &'static str, value: String) {
        self.always.push((name, value));
    }

    /// `fields` and the fields every answer carries.
    fn with_always<'a>(&'a self, fields: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut all = fields.to_vec();
        all.extend(
            self.always
                .iter()
                .map(|(name, value)| (*name, value.as_str())),
        );
        all
    }

    fn send_now(&mut self, status: u16, fields: &[(&str, &str)], body: &[u8], close: bool) {
        self.answered = true;
        let mut fields = self.with_always(fields);
        if self.how.http10 && !close {
            fields.push(("Connection", "keep-alive"));
        }
        let bytes = wire::response(status, &fields, body, self.how.head_only, close);
        self.outbox.deliver(self.seq, bytes, close);
    }

    /// Sends a whole answer with a `Content-Length`.
    pub(super) fn send(mut self, status: u16, fields: &[(&str, &str)], body: &[u8]) {
        let close = self.how.close;
        self.send_now(status, fields, body, close);
    }

    /// Starts an answer that stays open (an event stream) once the answers before it are
    /// written; the connection's thread waits for that, but not longer than `stream_wait`
    /// (a client does not wait for a stream behind a long call on the same connection):
    /// then it gets 503 and the connection closes. `None` when the stream did not start.
    pub(super) fn stream(mut self, fields: &[(&str, &str)]) -> Option<EventStream> {
        let socket = self.socket.upgrade();
        let started = socket.is_some()
            && self
                .outbox
                .begin_stream(self.seq, deadline_after(self.how.stream_wait));
        let (Some(socket), true) = (socket, started) else {
            let error = RpcError::internal(
                "an event stream cannot wait behind answers still due on its connection: \
                 open it on a connection of its own",
            );
            self.send_now(503, &[JSON], &error_body(&error), true);
            return None;
        };
        self.answered = true;
        // HTTP/1.0 knows no chunks: its stream is delimited by the connection's end.
        let chunked = !self.how.http10;
        let mut fields = self.with_always(fields);
        if !chunked || self.how.close {
            fields.push(("Connection", "close"));
        }
        let stream = EventStream {
            outbox: self.outbox.clone(),
            socket,
            seq: self.seq,
            chunked,
            close: self.how.close || !chunked,
            write_timeout: self.how.write_timeout,
            wrote: Cell::new(Instant::now()),
        };
        stream
            .write(&wire::stream_head(&fields, chunked))
            .ok()
            .map(|()| stream)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.answered {
            let error = RpcError::internal("the request was dropped unanswered");
            let close = self.how.close;
            self.send_now(500, &[JSON], &error_body(&error), close);
        }
    }
}

/// An open event stream, written by the thread that holds it; dropping it ends it and
/// gives the connection back to its writer.
pub(super) struct EventStream {
    outbox: Arc<Outbox>,
    socket: Arc<TcpStream>,
    seq: u64,
    chunked: bool,
    close: bool,
    write_timeout: Duration,
    /// When it last wrote (see [`idle_tick`](Self::idle_tick)).
    wrote: Cell<Instant>,
}

/// How often an idle event stream looks whether its client is still there (see
/// [`EventStream::idle_tick`]).
pub(super) const CLIENT_CHECK: Duration = Duration::from_secs(1);

impl EventStream {
    fn write(&self, bytes: &[u8]) -> io::Result<()> {
        let deadline = write_deadline(self.write_timeout, bytes.len());
        let written = write_all_by(&self.socket, bytes, deadline);
        if written.is_err() {
            let _ = self.socket.shutdown(Shutdown::Both);
            self.outbox.cut();
        }
        self.wrote.set(Instant::now());
        written
    }

    /// What a stream does when nothing came for it for [`CLIENT_CHECK`]: `Err` if its
    /// client is gone (it closed the connection, or reset it), else a comment if it wrote
    /// nothing for `keep_alive` (proxies do not time it out, and a client that vanished
    /// without a word is found when the write fails). Without the first look a closed
    /// stream would hold its connection, its threads and its place among the streams
    /// until a write failed, up to two keep-alives later.
    pub(super) fn idle_tick(&self, keep_alive: Duration) -> io::Result<()> {
        if self.client_left() {
            let _ = self.socket.shutdown(Shutdown::Both);
            self.outbox.cut();
            return Err(io::ErrorKind::ConnectionAborted.into());
        }
        if self.wrote.get().elapsed() >= keep_alive {
            self.send(b": keep-alive\n\n")?;
        }
        Ok(())
    }

    /// Whether the client closed its side of the connection (or reset it), looked at
    /// without taking a byte: a request it pipelined stays unread. Nobody else reads the
    /// socket while its stream lasts (the reader is the one running it), and every read
    /// sets its own timeout.
    fn client_left(&self) -> bool {
        if (self.socket.set_read_timeout(Some(Duration::from_millis(1)))).is_err() {
            return true;
        }
        match self.socket.peek(&mut [0u8; 1]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
            ),
        }
    }

    /// Sends `data` at once (as one chunk, unless HTTP/1.0).
    pub(super) fn send(&self, data: &[u8]) -> io::Result<()> {
        if self.chunked {
            self.write(&wire::chunk(data))
        } else {
            self.write(data)
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        if self.chunked {
            let _ = self.write(&wire::chunk(b""));
        }
        self.outbox.end_stream(self.seq, self.close);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_runs_out_with_answers_waiting_their_turn_and_comes_back_as_they_go() {
        let outbox = Outbox::new();
        let room = |max: (usize, usize)| {
            let state = outbox.state.lock();
            state.ready.len() < max.0 && state.ready_bytes < max.1
        };
        // Answer 0 is being worked on; answers 1 and 2 (3 bytes) wait behind it.
        assert!(outbox.owes(3));
        assert!(room((1, 1)), "answers being worked on take no room");
        outbox.deliver(1, b"b".to_vec(), false);
        outbox.deliver(2, b"cc".to_vec(), false);
        assert!(room((3, 4)));
        assert!(!room((2, 4)), "two answers wait");
        assert!(!room((3, 3)), "three bytes wait");
        outbox.deliver(0, b"a".to_vec(), false);
        for _ in 0..3 {
            let (bytes, close, completes) = outbox.next_to_write().unwrap();
            assert!(!bytes.is_empty());
            assert!(!outbox.written(true, close, completes));
        }
        assert!(room((1, 1)));
        assert!(outbox.wait_for_room((1, 1)));
        assert!(!outbox.owes(3));
    }

    #[test]
    fn answers_go_out_in_request_order_with_their_interim_first() {
        let outbox = Outbox::new();
        outbox.deliver(1, b"second".to_vec(), false);
        outbox.continue_before(0);
        outbox.deliver(0, b"first".to_vec(), false);
        outbox.no_more_requests(2);
        let mut out = Vec::new();
        while let Some((bytes, close, completes)) = outbox.next_to_write() {
            out.push(String::from_utf8(bytes).unwrap());
            if outbox.written(true, close, completes) {
                break;
            }
        }
        assert_eq!(out, ["HTTP/1.1 100 Continue\r\n\r\n", "first", "second"]);
        assert!(outbox.closing());
    }

    #[test]
    fn a_stream_waits_for_the_answers_before_it_but_not_for_ever() {
        let outbox = Outbox::new();
        let soon = Instant::now() + Duration::from_millis(1);
        assert!(!outbox.begin_stream(1, soon), "answer 0 is still due");
        outbox.deliver(0, b"a".to_vec(), false);
        let writing = outbox.next_to_write().unwrap();
        assert!(!outbox.begin_stream(1, soon), "answer 0 is being written");
        outbox.written(true, writing.1, writing.2);
        assert!(outbox.begin_stream(1, soon));
    }
}
