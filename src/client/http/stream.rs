//! The session's `GET` event stream (2025-11-25): the one reader thread that opens it,
//! reads it and opens it again whenever it ends, with its backoff and the wake-ups that
//! session renewal and shutdown send it. Separate from POST exchanges, which run one
//! thread per request (and resume a POST's stream on that thread, with `GET`s of their
//! own: see [`resume`](super::resume)); those share only [`StreamControl`]'s waits.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::connections::OpenConnections;
use super::sse::{read_events_resuming, Resume};
use super::wire::{exchange, Link};
use super::Inner;

/// How long the `GET` event stream may stay silent before it is taken for dead and opened
/// again: a NAT or proxy that drops an idle connection without a word leaves a half-open
/// socket that would otherwise be read forever, and the server's requests for the session
/// with it. A server that sends keep-alives (ours does every 15 s) never comes close.
pub(super) const STREAM_SILENCE: Duration = Duration::from_secs(300);

/// How long the client waits before it opens the `GET` stream again after a healthy stream
/// ended (see [`HEALTHY_STREAM`]), unless the server asked for another wait with `retry:`.
/// The wait doubles after each stream that was not healthy and each attempt that failed,
/// up to [`MAX_REOPEN_WAIT`], so a server or proxy that keeps ending the stream at once is
/// not hammered, while one that ends a long-lived stream (a proxy's idle limit) costs
/// little.
pub(super) const FIRST_REOPEN_WAIT: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to open the `GET` stream (a server's `retry:`
/// may ask for a longer one).
pub(super) const MAX_REOPEN_WAIT: Duration = Duration::from_secs(5);

/// A `GET` stream that stayed open this long, or brought a message, was healthy: its end
/// starts the reopen waits afresh.
const HEALTHY_STREAM: Duration = Duration::from_secs(10);

/// The shortest wait before the `GET` stream is opened again, whatever `retry:` asks: a
/// server that answers every opening with one message and ends the stream at once, with
/// `retry: 0`, would otherwise have the client reopen it in a tight loop (each such stream
/// counts as healthy).
pub(super) const MIN_REOPEN_WAIT: Duration = Duration::from_millis(10);

/// What the `GET` stream's reader shares with session renewal and shutdown, which both
/// wake it from its waits; requests waiting to resume a POST's stream wait on it too
/// (abandoning a request wakes them).
#[derive(Default)]
pub(super) struct StreamControl {
    state: Mutex<StreamState>,
    wake: Condvar,
}

#[derive(Default)]
struct StreamState {
    /// How many times a new session replaced a forgotten one: a stream opened before a
    /// renewal belongs to the forgotten session.
    renewals: u64,
    /// The connection of the stream being read, for a renewal to end it: the reader then
    /// opens the new session's stream, and a session never has two.
    socket: Option<TcpStream>,
    /// How many waits have begun, for tests to know a thread waits.
    #[cfg(test)]
    pauses: u64,
}

/// Why a wait of the `GET` stream's reader (or of a resumption) ended.
#[derive(Debug, PartialEq)]
pub(super) enum Wake {
    /// The client shut down: the reader ends.
    Closed,
    /// A new session replaced the one the reader knew.
    Renewed,
    /// The wait is over.
    TimedOut,
    /// Nobody waits for the request being resumed any more (see [`StreamControl::abandoned`]).
    Abandoned,
}

impl StreamControl {
    /// The number of renewals so far.
    pub(super) fn renewals(&self) -> u64 {
        self.state.lock().renewals
    }

    /// A new session replaced a forgotten one: the stream of the forgotten one ends, and
    /// the reader opens the new one's.
    pub(super) fn renewed(&self) {
        let mut state = self.state.lock();
        state.renewals += 1;
        if let Some(socket) = state.socket.take() {
            let _ = socket.shutdown(Shutdown::Both);
        }
        self.wake.notify_all();
    }

    /// Wakes the reader once `open` is closed (call after [`OpenConnections::close_all`]).
    pub(super) fn closed(&self) {
        // Notifying under the lock the reader checks `open` under: a reader that saw
        // `open` still open is already waiting, so the notification reaches it.
        let _state = self.state.lock();
        self.wake.notify_all();
    }

    /// Wakes whoever waits to resume a POST's event stream: a request was abandoned
    /// (call after the request was forgotten), and its resumption may be the one to end.
    pub(super) fn abandoned(&self) {
        let _state = self.state.lock();
        self.wake.notify_all();
    }

    /// Waits until `n` waits have begun (`false` if they have not by `until`): the
    /// `n`th waiter holds the lock until it waits, so it is waiting once this returns.
    #[cfg(test)]
    pub(super) fn paused(&self, n: u64, until: Instant) -> bool {
        let mut state = self.state.lock();
        while state.pauses < n {
            if self.wake.wait_until(&mut state, until).timed_out() {
                return state.pauses >= n;
            }
        }
        true
    }

    /// Waits until `open` is closed, a renewal comes after the `seen`th, or `wait` is
    /// over (`None`: no limit).
    fn pause(&self, open: &OpenConnections, seen: u64, wait: Option<Duration>) -> Wake {
        self.pause_while(open, seen, wait, || true)
    }

    /// [`pause`](Self::pause), which also ends once `wanted` says nobody waits any more
    /// ([`abandoned`](Self::abandoned) wakes it to ask).
    pub(super) fn pause_while(
        &self,
        open: &OpenConnections,
        seen: u64,
        wait: Option<Duration>,
        wanted: impl Fn() -> bool,
    ) -> Wake {
        // A `retry:` too long to add to the clock is waited for as having no limit.
        let deadline = wait.and_then(|wait| Instant::now().checked_add(wait));
        let mut state = self.state.lock();
        #[cfg(test)]
        {
            state.pauses += 1;
            self.wake.notify_all();
        }
        loop {
            if open.is_closed() {
                return Wake::Closed;
            }
            if state.renewals != seen {
                return Wake::Renewed;
            }
            if !wanted() {
                return Wake::Abandoned;
            }
            match deadline {
                Some(at) => {
                    if self.wake.wait_until(&mut state, at).timed_out() {
                        return Wake::TimedOut;
                    }
                }
                None => self.wake.wait(&mut state),
            }
        }
    }
}

impl Inner {
    /// How the `GET` stream connects: silent for long only if the connection is dead
    /// (see [`STREAM_SILENCE`]).
    fn stream_link(&self) -> Link<'_> {
        self.link_within(Some(self.stream_silence), None)
    }

    /// Reads the session's `GET` event stream, and opens it again each time it ends (the
    /// server, or a proxy with an idle limit, may end it at any time, and the server's
    /// messages for the session would otherwise be lost), for as long as the client is
    /// open. It stops for good when the server offers no stream. There is one reader per
    /// client: after a session renewal it goes on with the new session, so a session never
    /// has two streams, and a forgotten one is not asked for its stream again.
    pub(super) fn event_stream(self: &Arc<Self>) {
        let mut resume = Resume::default();
        // The renewal count `resume.last_id` belongs to: event ids are the old session's.
        let mut resume_for = 0;
        // Failed attempts and unhealthy streams since the last healthy one.
        let mut failures = 0u32;
        let mut warned = false;
        loop {
            let (session, renewals) = {
                // A renewal under way ends before the reader asks for the new session's
                // stream: the server hears `notifications/initialized` first.
                let _renewal_done = self.renewing.lock();
                (self.session.lock().clone(), self.stream.renewals())
            };
            if renewals != resume_for {
                resume.last_id.clear();
                resume_for = renewals;
            }
            let wait = match self.read_stream(session.as_deref(), renewals, &mut resume) {
                Attempt::Ended { healthy } => {
                    if self.open.is_closed() {
                        return;
                    }
                    warned = false;
                    failures = if healthy {
                        0
                    } else {
                        failures.saturating_add(1)
                    };
                    if self.stream.renewals() == renewals {
                        log::info!("mcp client: the server ended the event stream; reopening it");
                    }
                    Some(reopen_wait(resume.retry, failures))
                }
                Attempt::NoStream => return,
                Attempt::SessionGone => {
                    // The renewal path owns a forgotten session (a request meeting the
                    // same 404 starts a new one): wait for it, not to GET in vain.
                    log::info!(
                        "mcp client: the server no longer knows session {}; the event \
                         stream waits for a new session",
                        session.as_deref().unwrap_or_default()
                    );
                    None
                }
                Attempt::Renewed => continue,
                Attempt::Failed(error) => {
                    if self.open.is_closed() {
                        return;
                    }
                    failures = failures.saturating_add(1);
                    let wait = reopen_wait(resume.retry, failures);
                    if warned {
                        log::debug!(
                            "mcp client: cannot open the event stream: {error}; trying again \
                             in {wait:?}"
                        );
                    } else {
                        log::warn!(
                            "mcp client: cannot open the event stream: {error}; trying again \
                             until the client closes"
                        );
                        warned = true;
                    }
                    Some(wait)
                }
            };
            match self.stream.pause(&self.open, renewals, wait) {
                Wake::Closed => return,
                // The new session's stream is asked for at once.
                Wake::Renewed => failures = 0,
                Wake::TimedOut | Wake::Abandoned => {}
            }
        }
    }

    /// Opens the `GET` stream once, in `session` (current after `renewals` renewals), and
    /// reads it until it ends.
    fn read_stream(&self, session: Option<&str>, renewals: u64, resume: &mut Resume) -> Attempt {
        let mut headers = vec![
            ("Accept", "text/event-stream".to_owned()),
            ("MCP-Protocol-Version", self.version()),
        ];
        if let Some(session) = session {
            headers.push(("Mcp-Session-Id", session.to_owned()));
        }
        if !resume.last_id.is_empty() {
            headers.push(("Last-Event-ID", resume.last_id.clone()));
        }
        // Once the client shuts down, the connection is refused a place among the open ones
        // (or shut down with them), so a stream opened late never outlives the client.
        let response = match exchange(&self.endpoint, "GET", &headers, &[], self.stream_link()) {
            Ok(response) => response,
            Err(error) => return Attempt::Failed(error),
        };
        if response.status == 404 && session.is_some() {
            return Attempt::SessionGone;
        }
        if response.status == 409 {
            // A server allowing one stream per session may not have noticed yet that the
            // previous one is gone (a proxy cut it, say): it will, at its next write to it.
            // (Ours lets a new stream replace the old one.)
            return Attempt::Failed(io::Error::other(
                "HTTP 409: the server still holds the session's previous stream",
            ));
        }
        if matches!(response.status, 408 | 429 | 500..=599) {
            // Passing trouble (a proxy whose backend restarts, a busy server): the very
            // case reopening is for.
            return Attempt::Failed(io::Error::other(format!(
                "HTTP {}: the server cannot open the stream now",
                response.status
            )));
        }
        if !(200..300).contains(&response.status) || !response.is_event_stream() {
            log::info!(
                "mcp client: the server offers no event stream (HTTP {})",
                response.status
            );
            return Attempt::NoStream;
        }
        // Unlike a POST's event stream (`wait_for_events`), this one keeps its read timeout
        // from `stream_link`: it is never silent for long while alive.
        {
            let mut state = self.stream.state.lock();
            if state.renewals != renewals {
                // A renewal came while this stream opened: it is the forgotten session's.
                return Attempt::Renewed;
            }
            match response.socket.try_clone() {
                Ok(socket) => state.socket = Some(socket),
                Err(error) => return Attempt::Failed(error),
            }
        }
        let opened = Instant::now();
        let mut delivered = false;
        let mut body = response.body;
        let read = read_events_resuming(&mut body, resume, |data| {
            delivered = true;
            self.shared.incoming_text_from(data, session);
            true
        });
        self.stream.state.lock().socket = None;
        match read {
            _ if self.open.is_closed() => {}
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                log::info!(
                    "mcp client: the event stream was silent for {:?}; taking its connection \
                     for dead",
                    self.stream_silence
                );
            }
            Err(error) => log::debug!("mcp client: the event stream broke off: {error}"),
            Ok(()) => {}
        }
        Attempt::Ended {
            healthy: delivered || opened.elapsed() >= HEALTHY_STREAM,
        }
    }
}

/// How one opening of the `GET` stream went.
enum Attempt {
    /// The stream was read until it ended; `healthy` as [`HEALTHY_STREAM`] says.
    Ended { healthy: bool },
    /// The server offers no stream (405, another 4xx, or a 2xx that is not an event
    /// stream): the reader stops for good.
    NoStream,
    /// 404: the server no longer knows the session.
    SessionGone,
    /// A renewal came while the stream opened, which was then dropped.
    Renewed,
    /// The stream could not be opened (no connection, no answer, a 409 while the server
    /// still holds the previous one, a 408, 429 or 5xx): tried again after a wait.
    Failed(io::Error),
}

/// The wait before opening the `GET` stream again after `failures` failed attempts or
/// unhealthy streams in a row: the server's `retry` time (or [`FIRST_REOPEN_WAIT`]),
/// doubled for each failure, up to [`MAX_REOPEN_WAIT`] (or `retry` if longer), and never
/// under [`MIN_REOPEN_WAIT`]. Once something failed the base is at least
/// [`FIRST_REOPEN_WAIT`]: a `retry` of 0 (or a few ms) would otherwise hammer a server that
/// keeps failing.
pub(super) fn reopen_wait(retry: Option<Duration>, failures: u32) -> Duration {
    let first = retry.unwrap_or(FIRST_REOPEN_WAIT);
    let first = if failures > 0 {
        first.max(FIRST_REOPEN_WAIT)
    } else {
        first.max(MIN_REOPEN_WAIT)
    };
    let most = first.max(MAX_REOPEN_WAIT);
    first
        .checked_mul(1 << failures.min(16))
        .map_or(most, |wait| wait.min(most))
}
