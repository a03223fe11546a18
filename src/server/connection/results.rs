//! `tasks/result` (2025-11-25): blocks until the task ends, on a thread of its own so
//! the connection's reader never waits, within a bounded number of places per connection
//! and per server; the client's cancel or the connection closing ends the wait early.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;

use super::{Connection, Reply};
use crate::protocol::jsonrpc::{RequestId, RpcError};
use crate::protocol::v2025;
use crate::store::WaitStop;
use crate::StoreError;

/// A waiting `tasks/result` still waits...
const WAITING: u8 = 0;
/// ...its client cancelled it: it stops, unanswered...
pub(super) const CANCELLED_BY_CLIENT: u8 = 1;
/// ...or its connection closed: it stops.
pub(super) const CONNECTION_CLOSED: u8 = 2;

/// Most `tasks/result` calls one connection may have blocked at once.
const MAX_BLOCKED_RESULTS: usize = 256;

impl Connection {
    /// `tasks/result` blocks until the task ends, so it waits on its own thread and never
    /// holds up the connection's reader. Most calls come after the task ended (clients poll
    /// `tasks/get` first) and are answered here, without starting a thread.
    pub(super) fn tasks_result(
        self: &Arc<Self>,
        request: RequestId,
        params: Option<Value>,
        reply: Reply,
    ) {
        let store = self.core.store.as_ref();
        let session = self.session.as_ref();
        let Some(task) = v2025::blocking_result_task(store, session, params.as_ref()) else {
            let outcome = v2025::handle(store, session, "tasks/result", params);
            return reply.send(outcome.expect("tasks/result is a tasks method"));
        };
        let Some(place) = WaitingPlace::take(self, request) else {
            return reply.send(Err(RpcError::internal(
                "too many tasks/result calls waiting",
            )));
        };
        let spawned = std::thread::Builder::new()
            .name("mcp-tasks-result".into())
            .spawn(move || {
                let connection = place.connection.clone();
                let store = connection.core.store.as_ref();
                let session = connection.session.as_ref();
                // Stopped when its client cancels it or its connection closes, which gives
                // its place and thread back.
                let stop = &place.abandon.stop;
                if let Err(StoreError::Stopped) =
                    store.wait_terminal_or_stop(task, session, None, stop)
                {
                    let why = place.abandon.why();
                    drop(place);
                    if why == CANCELLED_BY_CLIENT {
                        return reply.withhold();
                    }
                    return reply.send(Err(RpcError::internal(
                        "tasks/result ended: the connection closed",
                    )));
                }
                let outcome = v2025::handle(store, session, "tasks/result", params)
                    .expect("tasks/result is a tasks method");
                drop(place);
                reply.send(outcome);
            });
        if let Err(error) = spawned {
            // The closure, its place and its reply (which answers) are dropped.
            log::error!("cannot spawn a tasks/result waiter: {error}");
        }
    }
}

/// A place among the `tasks/result` calls that may wait at once, on its connection and on
/// the server, held by the call with request id `request`; given back when dropped.
struct WaitingPlace {
    connection: Arc<Connection>,
    request: RequestId,
    abandon: Arc<Abandon>,
}

/// How a waiting `tasks/result` is ended early, and why it was.
pub(super) struct Abandon {
    /// [`WAITING`], then [`CANCELLED_BY_CLIENT`] or [`CONNECTION_CLOSED`].
    why: AtomicU8,
    stop: WaitStop,
}

impl Abandon {
    /// Ends the wait, for the first reason given (a cancel also overrides a close: the
    /// client asked for no answer).
    pub(super) fn raise(&self, why: u8) {
        if why == CANCELLED_BY_CLIENT {
            self.why.store(why, Ordering::Release);
        } else {
            let _ = self
                .why
                .compare_exchange(WAITING, why, Ordering::AcqRel, Ordering::Acquire);
        }
        self.stop.stop();
    }

    /// [`WAITING`], or why the wait was ended.
    fn why(&self) -> u8 {
        self.why.load(Ordering::Acquire)
    }
}

impl WaitingPlace {
    fn take(connection: &Arc<Connection>, request: RequestId) -> Option<WaitingPlace> {
        let core = &connection.core;
        if !claim(&connection.blocked_results, MAX_BLOCKED_RESULTS) {
            return None;
        }
        if !claim(&core.waiting_results, core.max_waiting_results) {
            connection.blocked_results.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        // `close` sets its flag before it raises the registered ones: a call registered
        // after that sees the flag here.
        let abandon = Arc::new(Abandon {
            why: AtomicU8::new(WAITING),
            stop: WaitStop::new(),
        });
        connection
            .waiting_results
            .lock()
            .entry(request.clone())
            .or_default()
            .push(abandon.clone());
        if connection.closed.load(Ordering::SeqCst) {
            abandon.raise(CONNECTION_CLOSED);
        }
        Some(WaitingPlace {
            connection: connection.clone(),
            request,
            abandon,
        })
    }
}

impl Drop for WaitingPlace {
    fn drop(&mut self) {
        let connection = &self.connection;
        {
            let mut waiting = connection.waiting_results.lock();
            if let Some(calls) = waiting.get_mut(&self.request) {
                calls.retain(|abandon| !Arc::ptr_eq(abandon, &self.abandon));
                if calls.is_empty() {
                    waiting.remove(&self.request);
                }
            }
        }
        connection.blocked_results.fetch_sub(1, Ordering::AcqRel);
        connection
            .core
            .waiting_results
            .fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes one of `limit` places counted by `counter`, if one is free.
fn claim(counter: &AtomicUsize, limit: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn abandon() -> Abandon {
        Abandon {
            why: AtomicU8::new(WAITING),
            stop: WaitStop::new(),
        }
    }

    /// The client's cancel wins over the connection closing, in either order: a call its
    /// client cancelled gets no answer, even if its connection closed too.
    #[test]
    fn a_cancel_overrides_a_close_whichever_comes_first() {
        let closed_first = abandon();
        closed_first.raise(CONNECTION_CLOSED);
        closed_first.raise(CANCELLED_BY_CLIENT);
        assert_eq!(closed_first.why(), CANCELLED_BY_CLIENT);

        let cancelled_first = abandon();
        cancelled_first.raise(CANCELLED_BY_CLIENT);
        cancelled_first.raise(CONNECTION_CLOSED);
        assert_eq!(cancelled_first.why(), CANCELLED_BY_CLIENT);

        let closed = abandon();
        closed.raise(CONNECTION_CLOSED);
        assert_eq!(closed.why(), CONNECTION_CLOSED);
    }
}
