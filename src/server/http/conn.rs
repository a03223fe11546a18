//! Connections: the accept loop, and two threads per connection: a reader that reads its
//! requests in order and hands each to the handler, and a writer that writes their answers
//! in that same order (see `outbox`), whichever thread produces them.
//!
//! The handler passes each request on (a tool call, a waiting `tasks/result`) and returns,
//! so requests pipelined behind a long call still reach the server at once (a cancel for
//! that very call among them). Answers ready before their turn wait in the outbox, up to
//! [`MAX_WAITING`]: then the reader waits before it reads more. Only an event stream keeps
//! its connection's reader, for as long as it lasts.
//!
//! Every wait is bounded: a request must arrive whole within `read_timeout` of its first
//! byte (else 408; a body behind `Expect: 100-continue` has it from when the interim answer
//! goes out), an idle connection closes `idle_timeout` after its last answer unless more
//! are due, and an answer not written within `write_timeout` (plus a second per 64 KiB)
//! ends the connection. A refused request gets its answer and the connection closes:
//! after a request it could not read, the server cannot know where the next one starts.
//! A connection counts against `max_connections` until its socket is closed.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::auth::Identity;
use super::outbox::{
    deadline_after, error_body, write_all_by, write_answers, Answering, Outbox, Responder, JSON,
};
use super::wire::{self, Framing, Head, Limits, ReadError, Version};
use crate::protocol::jsonrpc::RpcError;

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
    /// Who sent it, as [`Hooks::admit`] said.
    pub(super) identity: Identity,
    pub(super) body: Vec<u8>,
    pub(super) responder: Responder,
}

/// What the connection layer asks of the layer above. Each runs on the connection's
/// reader: whatever takes time must be handed elsewhere.
pub(super) struct Hooks {
    /// Serves a request read whole; it answers through the request's [`Responder`].
    pub(super) handle: Box<dyn Fn(Request) + Send + Sync>,
    /// The header fields a request's answer carries whatever it is (CORS), its refusal
    /// too.
    pub(super) always: Box<AlwaysFields>,
    /// Who sent a request, told from its head once it is found well formed, before its
    /// body is read: a request turned away here gets its answer and the connection
    /// closes with the body never taken in, so nobody the server would refuse can make it
    /// hold a body (what of it still comes as it closes is dropped, see `outbox`).
    pub(super) admit: Box<Admit>,
}

/// A header field an answer carries.
pub(super) type Field = (&'static str, String);
/// See [`Hooks::always`].
pub(super) type AlwaysFields = dyn Fn(&Head) -> Vec<Field> + Send + Sync;
/// See [`Hooks::admit`].
pub(super) type Admit = dyn Fn(&Head) -> Result<Identity, TurnedAway> + Send + Sync;

/// A request refused from its head alone (see [`Hooks::admit`]).
pub(super) struct TurnedAway {
    pub(super) status: u16,
    pub(super) error: RpcError,
    /// Header fields its answer carries besides the ones every answer does (a
    /// `WWW-Authenticate` challenge).
    pub(super) fields: Vec<Field>,
}

/// Answers (and their bytes) that may wait for their turn on a connection before its
/// reader waits for them to be written.
/// Per connection: at `max_connections` (1024 by default) that is up to 4 GiB in all, plus
/// the answers being written, for clients that pipeline behind a long call and read slowly.
const MAX_WAITING: (usize, usize) = (64, 4 * 1024 * 1024);
/// How long a failing `accept` (out of file descriptors, say) pauses before it tries again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long stopping lets connections finish what they write (an event stream its last
/// chunk) before it cuts them off.
const STOP_GRACE: Duration = Duration::from_secs(1);
/// A writer only writes bytes: a small stack will do.
const WRITER_STACK: usize = 256 * 1024;

/// A socket whose reads give up at a deadline.
struct Timed {
    socket: Arc<TcpStream>,
    deadline: Instant,
    /// While reading a body behind `Expect: 100-continue`: the client may wait for the
    /// interim answer, which waits for the answers before it, so the deadline moves to a
    /// read timeout after that answer went out (see [`Outbox::continue_deadline`]).
    continued: Option<(Arc<Outbox>, u64, Duration)>,
}

impl Timed {
    /// Moves a deadline that passed while a body behind `Expect: 100-continue` was read,
    /// as its interim answer allows; false if it stays passed.
    fn extend(&mut self) -> bool {
        let Some((outbox, seq, read_timeout)) = &self.continued else {
            return false;
        };
        match outbox.continue_deadline(*seq, *read_timeout) {
            Some(later) if later > Instant::now() => {
                self.deadline = later;
                true
            }
            _ => false,
        }
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                if self.extend() {
                    continue;
                }
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.socket.set_read_timeout(Some(left))?;
            match (&mut &*self.socket).read(buf) {
                // The timeout ran out (Linux says WouldBlock): the loop sees whether the
                // deadline moves.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                // A signal handler ran on this thread: not the client's doing (Linux never
                // restarts a read that has a timeout, SA_RESTART or not).
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                read => return read,
            }
        }
    }
}

/// A connection's entry: its socket (so stopping can shut it down) and outbox, its threads,
/// and how many of them still run. The socket goes when both are done, and the entry at
/// the next accept.
struct Live {
    socket: Option<Arc<TcpStream>>,
    outbox: Arc<Outbox>,
    threads: Vec<JoinHandle<()>>,
    running: u8,
}

struct Shared {
    options: ConnOptions,
    hooks: Hooks,
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
            if live.running == 0 {
                done.append(&mut live.threads);
            }
            live.running > 0
        });
        let left = connections.len();
        drop(connections);
        for thread in done {
            let _ = thread.join();
        }
        left
    }

    /// One of connection `id`'s threads is done; with the last, its socket is let go.
    fn thread_done(&self, id: u64) {
        let mut connections = self.connections.lock();
        if let Some(live) = connections.get_mut(&id) {
            live.running -= 1;
            if live.running == 0 {
                live.socket = None;
            }
        }
        drop(connections);
        self.ended.notify_all();
    }
}

/// A listening socket and its connections.
pub(super) struct Transport {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accepting: Option<JoinHandle<()>>,
}

impl Transport {
    /// Serves `listener`'s connections with `hooks`.
    pub(super) fn start(
        listener: TcpListener,
        options: ConnOptions,
        hooks: Hooks,
    ) -> io::Result<Transport> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            options,
            hooks,
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

    /// Stops accepting, ends every connection and joins their threads.
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
        // Every reader sees its input end; writers (and event streams sending their last
        // chunk) get a moment to finish, then whatever is left is cut off. Shutting a
        // socket down also ends a write blocked on a client that does not read.
        let mut connections = self.shared.connections.lock();
        for live in connections.values() {
            live.outbox.stop();
            if let Some(socket) = &live.socket {
                let _ = socket.shutdown(Shutdown::Read);
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        while connections.values().any(|live| live.running > 0) {
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
        for connection in &live {
            connection.outbox.cut();
            if let Some(socket) = &connection.socket {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
        for thread in live.into_iter().flat_map(|live| live.threads) {
            let _ = thread.join();
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
        let socket = match accepted {
            Ok((socket, _)) => Arc::new(socket),
            Err(error) => {
                log::warn!("HTTP accept failed: {error}");
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        if shared.prune() >= shared.options.max_connections {
            // Answered here, briefly: the accept loop must not wait on anyone.
            let busy = refusal(&Refused {
                status: 503,
                error: RpcError::invalid_request("too many connections"),
                head_only: false,
                always: Vec::new(),
            });
            let _ = write_all_by(&socket, &busy, Instant::now() + Duration::from_secs(1));
            let _ = socket.shutdown(Shutdown::Write);
            continue;
        }
        let id = next_id;
        next_id += 1;
        let outbox = Arc::new(Outbox::new());
        shared.connections.lock().insert(
            id,
            Live {
                socket: Some(socket.clone()),
                outbox: outbox.clone(),
                threads: Vec::new(),
                running: 2,
            },
        );
        let writer = {
            let (shared, outbox, socket) = (shared.clone(), outbox.clone(), socket.clone());
            std::thread::Builder::new()
                .name("mcp-http-write".into())
                .stack_size(WRITER_STACK)
                .spawn(move || {
                    let _done = Done {
                        shared: &shared,
                        id,
                    };
                    let options = &shared.options;
                    let limits = &options.limits;
                    let request_bytes = limits.head_bytes.saturating_add(limits.body_bytes);
                    write_answers(&outbox, &socket, options.write_timeout, request_bytes);
                })
        };
        let reader = match writer {
            Ok(writer) => {
                if let Some(live) = shared.connections.lock().get_mut(&id) {
                    live.threads.push(writer);
                }
                let (shared, outbox, socket) = (shared.clone(), outbox.clone(), socket);
                std::thread::Builder::new()
                    .name("mcp-http-conn".into())
                    .spawn(move || {
                        let _done = Done {
                            shared: &shared,
                            id,
                        };
                        // Should reading panic (outside the handler, which has its own
                        // guard), the connection is cut rather than left open for good.
                        let _cut = CutOnPanic {
                            outbox: &outbox,
                            socket: Arc::downgrade(&socket),
                        };
                        let answers = serve(socket, &outbox, &shared);
                        outbox.no_more_requests(answers);
                    })
            }
            Err(error) => {
                shared.thread_done(id);
                Err(error)
            }
        };
        match reader {
            Ok(reader) => {
                if let Some(live) = shared.connections.lock().get_mut(&id) {
                    live.threads.push(reader);
                }
            }
            Err(error) => {
                log::error!("cannot spawn an HTTP connection's threads: {error}");
                // Nothing was read: the writer (if any) ends the connection at once.
                outbox.no_more_requests(0);
                shared.thread_done(id);
            }
        }
    }
}

/// Tells the registry a connection's thread is done, however it ends (a panic included,
/// lest the connection count against the limit for good).
struct Done<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.shared.thread_done(self.id);
    }
}

/// Cuts a connection off if its reader unwinds. It holds the socket weakly: it must not
/// keep the socket (and its file descriptor) alive.
struct CutOnPanic<'a> {
    outbox: &'a Outbox,
    socket: Weak<TcpStream>,
}

impl Drop for CutOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.outbox.cut();
            if let Some(socket) = self.socket.upgrade() {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
    }
}

/// A refusal that closes the connection: `status` with a JSON-RPC error.
fn refusal(refused: &Refused) -> Vec<u8> {
    let body = error_body(&refused.error);
    let mut fields = vec![JSON];
    fields.extend((refused.always.iter()).map(|(name, value)| (*name, value.as_str())));
    wire::response(refused.status, &fields, &body, refused.head_only, true)
}

/// A request the connection ends on, without serving it.
struct Refused {
    status: u16,
    error: RpcError,
    /// Its head was read, and it was `HEAD`: the answer has no body (RFC 9110 §9.3.2).
    head_only: bool,
    /// The fields its answer carries: every answer's (CORS), when its head was read, and
    /// its own.
    always: Vec<Field>,
}

/// Reads the connection's requests and hands them to the handler, one after the other,
/// until the connection ends; returns how many answers it carries.
fn serve(socket: Arc<TcpStream>, outbox: &Arc<Outbox>, shared: &Shared) -> u64 {
    let options = &shared.options;
    let weak = Arc::downgrade(&socket);
    let mut reader = BufReader::with_capacity(
        16 * 1024,
        Timed {
            socket,
            deadline: Instant::now(),
            continued: None,
        },
    );
    let mut issued = 0u64;
    loop {
        if shared.stopping.load(Ordering::Acquire) || !outbox.wait_for_room(MAX_WAITING) {
            return issued;
        }
        // Between requests: the connection may idle, but not for ever. The idle time counts
        // from when nothing was due any more (its last answer written).
        let mut deadline = deadline_after(options.idle_timeout);
        loop {
            reader.get_mut().deadline = deadline;
            match reader.fill_buf().map_err(ReadError::from) {
                Ok([]) | Err(ReadError::Closed | ReadError::Refused(..)) => return issued,
                Ok(_) => break,
                Err(ReadError::TimedOut) if outbox.owes(issued) => {
                    deadline = deadline_after(options.idle_timeout);
                }
                Err(ReadError::TimedOut) => {
                    match outbox.quiet_since().checked_add(options.idle_timeout) {
                        Some(end) if end > Instant::now() => deadline = end,
                        _ => return issued,
                    }
                }
            }
        }
        reader.get_mut().deadline = deadline_after(options.read_timeout);
        let seq = issued;
        let (head, identity, body) = match read_request(&mut reader, shared, outbox, seq) {
            Ok(request) => request,
            Err(None) => return issued,
            Err(Some(refused)) => {
                outbox.deliver(seq, refusal(&refused), true);
                return issued + 1;
            }
        };
        issued += 1;
        let how = Answering {
            close: !head.keeps_alive(),
            head_only: head.method == "HEAD",
            http10: head.version == Version::Http10,
            stream_wait: options.read_timeout,
            write_timeout: options.write_timeout,
        };
        let close = how.close;
        let request = Request {
            head,
            identity,
            body,
            responder: Responder::new(outbox.clone(), weak.clone(), seq, how),
        };
        // A panic while handling one request must not end the transport's other work; the
        // request's responder, dropped in the unwinding, answers 500.
        let handle = &shared.hooks.handle;
        if std::panic::catch_unwind(AssertUnwindSafe(|| handle(request))).is_err() {
            log::error!("an HTTP request handler panicked; the connection goes on");
        }
        if close || outbox.closing() {
            return issued;
        }
    }
}

/// Reads one request whole: its head, and its body once the head is found acceptable and
/// its sender admitted ([`Hooks::admit`]). `Err(None)`: the connection ended first, and
/// there is nobody to answer (what is due on it is still written).
fn read_request(
    reader: &mut BufReader<Timed>,
    shared: &Shared,
    outbox: &Arc<Outbox>,
    seq: u64,
) -> Result<(Head, Identity, Vec<u8>), Option<Refused>> {
    let options = &shared.options;
    let limits = &options.limits;
    let refused = |error: ReadError, head: Option<&Head>| {
        let (status, why) = match error {
            ReadError::Closed => return None,
            ReadError::TimedOut => (408, "the request did not arrive in time".into()),
            ReadError::Refused(status, why) => (status, why),
        };
        Some(Refused {
            status,
            error: RpcError::invalid_request(why),
            head_only: head.is_some_and(|head| head.method == "HEAD"),
            always: head.map(&shared.hooks.always).unwrap_or_default(),
        })
    };
    let head = wire::read_head(reader, limits).map_err(|e| refused(e, None))?;
    let (continues, framing) = (|| {
        head.check_host()?;
        let continues = head.expects_continue()?;
        Ok((continues, head.framing(limits.body_bytes)?))
    })()
    .map_err(|e| refused(e, Some(&head)))?;
    let identity = (shared.hooks.admit)(&head).map_err(|turned| {
        let mut always = (shared.hooks.always)(&head);
        always.extend(turned.fields);
        Some(Refused {
            status: turned.status,
            error: turned.error,
            head_only: head.method == "HEAD",
            always,
        })
    })?;
    // No interim answer to an HTTP/1.0 client, whose expectation is ignored (RFC 9110
    // §10.1.1, §15.2).
    let continued = continues && framing != Framing::Length(0);
    if continued && head.version == Version::Http11 {
        outbox.continue_before(seq);
        // The body is read at once, whatever has come of it; but a client that waits for
        // the interim answer gets its read timeout from when that goes out.
        reader.get_mut().continued = Some((outbox.clone(), seq, options.read_timeout));
    }
    let body = wire::read_body(reader, framing, limits);
    reader.get_mut().continued = None;
    let body = body.map_err(|e| refused(e, Some(&head)))?;
    Ok((head, identity, body))
}
