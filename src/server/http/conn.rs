//! Connections: the accept loop, one thread per connection that reads its requests in
//! order, and an outbox that writes their answers in that same order, whichever thread
//! produces them.
//!
//! A connection's thread reads a request, hands it to the handler and reads the next: the
//! handler passes the request on (a tool call, a waiting `tasks/result`) and returns, so
//! requests pipelined behind a long call still reach the server at once (a cancel for that
//! very call among them). Only an event stream keeps its connection's thread, for as long
//! as it lasts. Answers are numbered as their requests arrive and wait in the outbox until
//! the ones before them are written (RFC 9112 §9.3.2).
//!
//! Every wait is bounded: a request must arrive whole within `read_timeout` of its first
//! byte (else 408), an idle connection closes after `idle_timeout` unless answers are still
//! due on it, and a write that makes no progress for `write_timeout` ends the connection.
//! A refused request gets its answer and the connection closes: after a request it could
//! not read, the server cannot know where the next one starts.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::wire::{self, Framing, Head, Limits, ReadError, Version};
use crate::protocol::jsonrpc::{self, RpcError};

/// Bounds of the connection layer.
#[derive(Clone, Debug)]
pub(super) struct ConnOptions {
    pub(super) limits: Limits,
    pub(super) max_connections: usize,
    pub(super) read_timeout: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) write_timeout: Duration,
}

/// A request read whole off a connection, with the means to answer it.
pub(super) struct Request {
    pub(super) head: Head,
    pub(super) body: Vec<u8>,
    pub(super) responder: Responder,
}

/// What serves requests. It runs on the connection's thread: whatever takes time must be
/// handed elsewhere, with the [`Responder`].
pub(super) type Handler = dyn Fn(Request) + Send + Sync;

/// Unread bytes a closing connection reads and drops (at most, for at most [`LINGER`]), so
/// that its refusal is not lost to a reset: closing a socket with unread input resets it.
const LINGER_BYTES: u64 = 1 << 20;
const LINGER: Duration = Duration::from_secs(1);
/// How long a failing `accept` (out of file descriptors, say) pauses before it tries again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long stopping lets connections finish what they write (an event stream its last
/// chunk) before it cuts them off.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// The answers due on one connection, written in the order their requests came.
struct Outbox {
    out: Mutex<Out>,
    written: Condvar,
}

struct Out {
    /// `None` once the connection is closed or broken: answers are then dropped.
    stream: Option<TcpStream>,
    /// The transport is stopping: nobody waits for a turn any more.
    stopping: bool,
    /// How many answers the connection carries in all, once its last request was read:
    /// after the last one is written, the connection ends.
    last: Option<u64>,
    /// The number of the next answer to write.
    next: u64,
    /// Answers produced before their turn, with whether the connection closes after each.
    ready: BTreeMap<u64, (Vec<u8>, bool)>,
}

impl Out {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(stream) = &mut self.stream else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let written = stream.write_all(bytes);
        if written.is_err() {
            // A client that stopped reading (or left): nothing more can reach it.
            let _ = stream.shutdown(Shutdown::Both);
            self.stream = None;
        }
        written
    }

    /// Ends the connection once what was written is sent.
    fn finish(&mut self) {
        if let Some(stream) = self.stream.take() {
            let _ = stream.shutdown(Shutdown::Write);
        }
    }
}

impl Outbox {
    fn new(stream: TcpStream) -> Outbox {
        Outbox {
            out: Mutex::new(Out {
                stream: Some(stream),
                stopping: false,
                last: None,
                next: 0,
                ready: BTreeMap::new(),
            }),
            written: Condvar::new(),
        }
    }

    /// Hands over answer `seq`: it is written now if its turn has come, with every answer
    /// after it that is ready, else once the answers before it are.
    fn deliver(&self, seq: u64, bytes: Vec<u8>, close: bool) {
        let mut out = self.out.lock();
        out.ready.insert(seq, (bytes, close));
        loop {
            let next = out.next;
            let Some((bytes, close)) = out.ready.remove(&next) else {
                break;
            };
            out.next += 1;
            if out.write(&bytes).is_ok() && (close || out.last == Some(out.next)) {
                out.finish();
            }
        }
        drop(out);
        self.written.notify_all();
    }

    /// Writes `bytes` at once if answer `seq` is next and nothing of it was written (an
    /// interim `100 Continue`); else sends nothing.
    fn write_if_next(&self, seq: u64, bytes: &[u8]) {
        let mut out = self.out.lock();
        if out.next == seq {
            let _ = out.write(bytes);
        }
    }

    /// Waits until the answers before `seq` are written; false if the connection closed.
    fn wait_turn(&self, seq: u64) -> bool {
        let mut out = self.out.lock();
        while out.stream.is_some() && !out.stopping && out.next < seq {
            self.written.wait(&mut out);
        }
        out.stream.is_some() && !out.stopping
    }

    /// Waits (until `deadline`) for answer `seq` to be written or dropped.
    fn wait_written(&self, seq: u64, deadline: Instant) {
        let mut out = self.out.lock();
        while out.stream.is_some() && !out.stopping && out.next <= seq {
            if self.written.wait_until(&mut out, deadline).timed_out() {
                return;
            }
        }
    }

    /// No request follows the first `count`: the connection ends once their answers are
    /// written (at once, if they are).
    fn no_more_requests(&self, count: u64) {
        let mut out = self.out.lock();
        out.last = Some(count);
        if out.next >= count {
            out.finish();
        }
    }

    /// Whether answers numbered below `issued` are still to be written.
    fn owes(&self, issued: u64) -> bool {
        let out = self.out.lock();
        out.stream.is_some() && out.next < issued
    }

    /// Stops reading the connection (its thread sees the end of its input) and waiting
    /// for turns on it; what is being written still goes out.
    fn stop_reading(&self) {
        let mut out = self.out.lock();
        out.stopping = true;
        if let Some(stream) = &out.stream {
            let _ = stream.shutdown(Shutdown::Read);
        }
        drop(out);
        self.written.notify_all();
    }

    /// Ends the connection now, whatever is still due on it.
    fn close(&self) {
        let mut out = self.out.lock();
        if let Some(stream) = out.stream.take() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        drop(out);
        self.written.notify_all();
    }
}

/// Answers one request. Dropped unanswered (a handler that lost it, or panicked), it
/// answers 500, so the answers after it on the connection are not held up for good.
pub(super) struct Responder {
    outbox: Arc<Outbox>,
    seq: u64,
    /// The connection ends after this answer (the client asked, or HTTP/1.0).
    close: bool,
    /// A `HEAD` request: the answer has no body.
    head_only: bool,
    /// An HTTP/1.0 client that asked to keep the connection: it is told it stays open.
    says_keep_alive: bool,
    answered: bool,
}

impl Responder {
    /// Sends a whole answer with a `Content-Length`.
    pub(super) fn send(mut self, status: u16, fields: &[(&str, &str)], body: &[u8]) {
        self.answered = true;
        let mut fields = fields.to_vec();
        if self.says_keep_alive {
            fields.push(("Connection", "keep-alive"));
        }
        let bytes = wire::response(status, &fields, body, self.head_only, self.close);
        self.outbox.deliver(self.seq, bytes, self.close);
    }

    /// Starts a chunked answer that stays open (an event stream), once the answers before
    /// it are written: until then the connection's thread waits. `None` if the connection
    /// closed meanwhile.
    pub(super) fn stream(mut self, fields: &[(&str, &str)]) -> Option<EventStream> {
        self.answered = true;
        let outbox = self.outbox.clone();
        let stream = EventStream {
            outbox,
            seq: self.seq,
            close: self.close,
        };
        if !stream.outbox.wait_turn(self.seq) {
            return None;
        }
        stream.write(&wire::stream_head(fields)).ok()?;
        Some(stream)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.answered {
            let error = RpcError::internal("the request was dropped unanswered");
            let body = serde_json::to_vec(&jsonrpc::error_response(None, &error));
            let bytes = wire::response(
                500,
                &[("Content-Type", "application/json")],
                &body.unwrap_or_default(),
                self.head_only,
                self.close,
            );
            self.outbox.deliver(self.seq, bytes, self.close);
        }
    }
}

/// An open chunked answer; dropping it sends the last chunk and lets the connection's
/// next answer go.
pub(super) struct EventStream {
    outbox: Arc<Outbox>,
    seq: u64,
    close: bool,
}

impl EventStream {
    fn write(&self, bytes: &[u8]) -> io::Result<()> {
        self.outbox.out.lock().write(bytes)
    }

    /// Sends `data` as one chunk, at once.
    pub(super) fn send(&self, data: &[u8]) -> io::Result<()> {
        self.write(&wire::chunk(data))
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let mut out = self.outbox.out.lock();
        if out.write(&wire::chunk(b"")).is_ok() && self.close {
            out.finish();
        }
        drop(out);
        // An empty answer in its place moves the queue on (it writes nothing).
        self.outbox.deliver(self.seq, Vec::new(), false);
    }
}

/// A socket whose reads give up at a deadline.
struct Timed {
    stream: TcpStream,
    deadline: Instant,
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// A connection's entry: its outbox (so stopping can close it), its thread, and whether
/// that thread is done (its entry goes, and the thread is joined, at the next accept).
struct Live {
    /// Let go once the thread is done, so the socket closes with the last answer.
    outbox: Option<Arc<Outbox>>,
    thread: Option<JoinHandle<()>>,
    done: bool,
}

struct Shared {
    options: ConnOptions,
    handler: Arc<Handler>,
    stopping: AtomicBool,
    connections: Mutex<HashMap<u64, Live>>,
    /// Signalled when a connection's thread is done.
    ended: Condvar,
}

impl Shared {
    /// Forgets the connections whose threads are done, joining them; returns how many are
    /// left.
    fn prune(&self) -> usize {
        let mut done = Vec::new();
        let mut connections = self.connections.lock();
        connections.retain(|_, live| {
            if live.done {
                done.extend(live.thread.take());
            }
            !live.done
        });
        let left = connections.len();
        drop(connections);
        for thread in done {
            let _ = thread.join();
        }
        left
    }
}

/// A listening socket and its connections.
pub(super) struct Transport {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accepting: Option<JoinHandle<()>>,
}

impl Transport {
    /// Serves `listener`'s connections with `handler`.
    pub(super) fn start(
        listener: TcpListener,
        options: ConnOptions,
        handler: Arc<Handler>,
    ) -> io::Result<Transport> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            options,
            handler,
            stopping: AtomicBool::new(false),
            connections: Mutex::new(HashMap::new()),
            ended: Condvar::new(),
        });
        let accepting = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("mcp-http-accept".into())
                .spawn(move || accept(&listener, &shared))?
        };
        Ok(Transport {
            addr,
            shared,
            accepting: Some(accepting),
        })
    }

    pub(super) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection and joins their threads.
    pub(super) fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        if let Some(accepting) = self.accepting.take() {
            // `accept` blocks until a connection comes: this one wakes it to see the flag.
            // Should it fail, the accept thread is left to end with the process.
            let mut wake = self.addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(match wake {
                    SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok() {
                let _ = accepting.join();
            }
        }
        // Every connection's thread sees its input end; those in the middle of an answer
        // (an event stream sending its last chunk) get a moment to finish it, then
        // whatever is left is cut off.
        let mut connections = self.shared.connections.lock();
        for outbox in connections.values().filter_map(|live| live.outbox.as_ref()) {
            outbox.stop_reading();
        }
        let deadline = Instant::now() + STOP_GRACE;
        while connections.values().any(|live| !live.done) {
            if self
                .shared
                .ended
                .wait_until(&mut connections, deadline)
                .timed_out()
            {
                break;
            }
        }
        let live: Vec<Live> = connections.drain().map(|(_, live)| live).collect();
        drop(connections);
        for outbox in live.iter().filter_map(|live| live.outbox.as_ref()) {
            outbox.close();
        }
        for connection in live {
            if let Some(thread) = connection.thread {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0u64;
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                log::warn!("HTTP accept failed: {error}");
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(shared.options.write_timeout));
        let busy = shared.prune() >= shared.options.max_connections;
        let outbox = match stream.try_clone() {
            Ok(clone) => Arc::new(Outbox::new(clone)),
            Err(error) => {
                log::warn!("HTTP connection dropped: {error}");
                continue;
            }
        };
        if busy {
            // Answered here, without lingering: the accept loop must not wait on anyone.
            outbox.deliver(0, refusal(503, "too many connections", false), true);
            continue;
        }
        let id = next_id;
        next_id += 1;
        shared.connections.lock().insert(
            id,
            Live {
                outbox: Some(outbox.clone()),
                thread: None,
                done: false,
            },
        );
        let spawned = {
            let (shared, outbox) = (shared.clone(), outbox.clone());
            std::thread::Builder::new()
                .name("mcp-http-conn".into())
                .spawn(move || {
                    let answers = serve(stream, &outbox, &shared);
                    outbox.no_more_requests(answers);
                    if let Some(live) = shared.connections.lock().get_mut(&id) {
                        live.done = true;
                        live.outbox = None;
                    }
                    shared.ended.notify_all();
                })
        };
        match spawned {
            Ok(thread) => {
                if let Some(live) = shared.connections.lock().get_mut(&id) {
                    live.thread = Some(thread);
                }
            }
            Err(error) => {
                log::error!("cannot spawn an HTTP connection thread: {error}");
                shared.connections.lock().remove(&id);
                outbox.close();
            }
        }
    }
}

/// Answers `status` as answer `seq` and ends the connection, reading (and dropping) what
/// the client still sends for a moment so the answer is not lost to a reset.
/// `head_only`: the request was read as `HEAD`, so the answer has no body.
fn refuse(stream: &TcpStream, outbox: &Outbox, seq: u64, refused: Refused) {
    let Refused {
        status,
        why,
        head_only,
    } = refused;
    outbox.deliver(seq, refusal(status, &why, head_only), true);
    let deadline = Instant::now() + LINGER;
    outbox.wait_written(seq, deadline);
    let mut rest = Timed {
        stream: match stream.try_clone() {
            Ok(stream) => stream,
            Err(_) => return,
        },
        deadline,
    };
    let _ = io::copy(&mut (&mut rest).take(LINGER_BYTES), &mut io::sink());
}

/// A request the connection ends on, without serving it.
struct Refused {
    status: u16,
    why: String,
    /// Its head was read, and it was `HEAD`: the answer has no body (RFC 9110 §9.3.2).
    head_only: bool,
}

/// A refusal that closes the connection: `status` with a JSON-RPC error saying `why`.
fn refusal(status: u16, why: &str, head_only: bool) -> Vec<u8> {
    let error = RpcError::invalid_request(why);
    let body = serde_json::to_vec(&jsonrpc::error_response(None, &error)).unwrap_or_default();
    let json = [("Content-Type", "application/json")];
    wire::response(status, &json, &body, head_only, true)
}

/// Reads `stream`'s requests and hands them to the handler, one after the other, until
/// the connection ends; returns how many answers it carries.
fn serve(stream: TcpStream, outbox: &Arc<Outbox>, shared: &Shared) -> u64 {
    let options = &shared.options;
    let Ok(socket) = stream.try_clone() else {
        return 0;
    };
    let mut reader = BufReader::with_capacity(
        16 * 1024,
        Timed {
            stream,
            deadline: Instant::now(),
        },
    );
    let mut issued = 0u64;
    while !shared.stopping.load(Ordering::Acquire) {
        // Between requests: the connection may idle, but not for ever.
        reader.get_mut().deadline = Instant::now() + options.idle_timeout;
        match reader.fill_buf().map_err(ReadError::from) {
            Ok([]) | Err(ReadError::Closed | ReadError::Refused(..)) => return issued,
            Ok(_) => {}
            Err(ReadError::TimedOut) if outbox.owes(issued) => continue,
            Err(ReadError::TimedOut) => return issued,
        }
        reader.get_mut().deadline = Instant::now() + options.read_timeout;
        let seq = issued;
        let (head, body) = match read_request(&mut reader, &options.limits, outbox, seq) {
            Ok(request) => request,
            Err(None) => return issued,
            Err(Some(refused)) => {
                refuse(&socket, outbox, seq, refused);
                return issued + 1;
            }
        };
        issued += 1;
        let close = !head.keeps_alive();
        let responder = Responder {
            outbox: outbox.clone(),
            seq,
            close,
            head_only: head.method == "HEAD",
            says_keep_alive: !close && head.version == Version::Http10,
            answered: false,
        };
        let request = Request {
            head,
            body,
            responder,
        };
        // A panic while handling one request must not end the transport's other work; the
        // request's responder, dropped in the unwinding, answers 500.
        let handler = &shared.handler;
        if std::panic::catch_unwind(AssertUnwindSafe(|| handler(request))).is_err() {
            log::error!("an HTTP request handler panicked; the connection goes on");
        }
        if close {
            break;
        }
    }
    issued
}

/// Reads one request whole: its head, and its body once the head is found acceptable.
/// `Err(None)`: the connection ended first, and there is nobody to answer (what is due
/// on it is still written).
fn read_request(
    reader: &mut impl BufRead,
    limits: &Limits,
    outbox: &Outbox,
    seq: u64,
) -> Result<(Head, Vec<u8>), Option<Refused>> {
    let refused = |error: ReadError, head_only: bool| match error {
        ReadError::Closed => None,
        ReadError::TimedOut => Some(Refused {
            status: 408,
            why: "the request did not arrive in time".into(),
            head_only,
        }),
        ReadError::Refused(status, why) => Some(Refused {
            status,
            why,
            head_only,
        }),
    };
    let head = wire::read_head(reader, limits).map_err(|e| refused(e, false))?;
    let head_only = head.method == "HEAD";
    let body = (|| {
        let continues = head.expects_continue()?;
        let framing = head.framing(limits.body_bytes)?;
        if continues && framing != Framing::Length(0) {
            // Only when it is this request's turn: an interim answer may not overtake the
            // answers before it. Else the client sends its body after a pause of its own.
            outbox.write_if_next(seq, b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        wire::read_body(reader, framing, limits)
    })()
    .map_err(|e| refused(e, head_only))?;
    Ok((head, body))
}
