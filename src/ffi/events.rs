//! Event subscriptions: a host is told of task changes instead of polling for them.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender, TryRecvError};
use parking_lot::Mutex;
use serde::Serialize;

use super::args::{arg_ref, Out};
use super::bytes::mcpts_bytes;
use super::error::{mcpts_result, Error};
use super::store::{mcpts_handle, timeout, Owner};
#[cfg(doc)]
use super::store::{mcpts_handle_free, MCPTS_WAIT_FOREVER};
use crate::{MissedAtStop, SessionId, StoreEvent, Task, TaskId};

/// A subscription to one store's events (opaque), from [`mcpts_handle_subscribe`]. Read
/// it with [`mcpts_events_next`]; release it with [`mcpts_events_free`]. It stays valid
/// after its store is freed: the events still queued can be read (and a `lagged` event
/// for those it missed), then every read gives `MCPTS_RESULT_CLOSED`. A host stops its
/// readers with [`mcpts_events_close`].
#[derive(Debug)]
pub struct mcpts_events {
    events: Receiver<StoreEvent>,
    /// The events missed since the last `lagged` when the store stopped; reported once,
    /// after the events still queued.
    missed_at_close: MissedAtStop,
    owner: Arc<Owner>,
    /// Nothing is ever sent on it: [`mcpts_events_close`] drops it, which wakes every
    /// reader waiting on `closed`.
    open: Mutex<Option<Sender<()>>>,
    /// Disconnected once the host closed the subscription.
    closed: Receiver<()>,
}

impl mcpts_events {
    /// Whether the host closed the subscription.
    fn is_closed(&self) -> bool {
        matches!(self.closed.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// The next event, waiting up to `wait` (`None`: for ever) unless the host closes the
    /// subscription meanwhile (`Ok(None)`).
    fn recv(&self, wait: Option<Duration>) -> Result<Option<StoreEvent>, RecvTimeoutError> {
        let mut select = Select::new();
        let event = select.recv(&self.events);
        select.recv(&self.closed);
        let ready = match wait {
            None => select.select(),
            Some(wait) => select
                .select_timeout(wait)
                .map_err(|_| RecvTimeoutError::Timeout)?,
        };
        if ready.index() == event {
            ready
                .recv(&self.events)
                .map(Some)
                .map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            let _ = ready.recv(&self.closed);
            Ok(None)
        }
    }
}

/// The JSON shape of an event: `{"type": "created" | "status" | "expired" | "lagged", ...}`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum EventJson<'a> {
    Created {
        task: &'a Task,
        session: Option<&'a SessionId>,
    },
    Status {
        task: &'a Task,
        session: Option<&'a SessionId>,
    },
    Expired {
        #[serde(rename = "taskId")]
        task_id: &'a TaskId,
        session: Option<&'a SessionId>,
    },
    Lagged {
        missed: u64,
    },
}

impl<'a> From<&'a StoreEvent> for EventJson<'a> {
    fn from(event: &'a StoreEvent) -> Self {
        // Exhaustive on purpose: a new kind of store event must get a JSON shape here.
        match event {
            StoreEvent::Created { task, session } => EventJson::Created {
                task,
                session: session.as_ref(),
            },
            StoreEvent::Status { task, session } => EventJson::Status {
                task,
                session: session.as_ref(),
            },
            StoreEvent::Expired { task_id, session } => EventJson::Expired {
                task_id,
                session: session.as_ref(),
            },
            StoreEvent::Lagged { missed } => EventJson::Lagged { missed: *missed },
        }
    }
}

/// `CLOSED` for a subscription whose store is gone and whose queue is empty.
fn drained() -> Error {
    Error::new(
        mcpts_result::Closed,
        "the task store is closed (every event it sent has been read)",
    )
}

/// `CLOSED` for a subscription the host closed.
fn closed_by_host() -> Error {
    Error::new(
        mcpts_result::Closed,
        "the subscription was closed (mcpts_events_close)",
    )
}

/// Subscribes to the store's events and writes the new subscription to `*events_out`;
/// read it with [`mcpts_events_next`], free it with [`mcpts_events_free`].
///
/// The subscription sees every change made after this returns, to the tasks of every
/// session (each event names the task's session): a task created, a status or status
/// message changed (completion, failure, cancellation and input requests included), a task
/// removed at the end of its TTL. It is a buffer of the store's `event_buffer` (1024)
/// events: a reader that falls that far behind never slows the store down; it misses
/// events instead, and reads one `lagged` event saying how many. Subscriptions are
/// independent: each sees every event.
///
/// Errors: `NULL_PARAMETER`, `CLOSED` (the store is freed, or this is a forked child).
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; `events_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_subscribe(
    handle: *const mcpts_handle,
    events_out: *mut *mut mcpts_events,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY: per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let events_out = Out::new(events_out, "events_out")?;
        let (events, missed_at_close) = handle.live()?.subscribe_counting_stop()?;
        let (open, closed) = crossbeam_channel::bounded(0);
        let events = mcpts_events {
            events,
            missed_at_close,
            owner: Arc::clone(&handle.owner),
            open: Mutex::new(Some(open)),
            closed,
        };
        // SAFETY: per this function's contract.
        unsafe { events_out.write(Box::new(events)) };
        Ok(())
    })
}

/// Blocks until the subscription's next event and writes it to `*event_out` as JSON, or
/// returns `TIMEOUT` after `timeout_ms` milliseconds ([`MCPTS_WAIT_FOREVER`] for no
/// timeout; 0 takes an event already queued, without waiting). Events come in the order
/// the store made the changes. The JSON is one of:
///
/// - `{"type": "created", "task": {...}, "session": "..." | null}`: a new task;
/// - `{"type": "status", "task": {...}, "session": "..." | null}`: a task's status or
///   status message changed; `task` is the task after the change;
/// - `{"type": "expired", "taskId": "...", "session": "..." | null}`: a task was removed
///   at the end of its TTL;
/// - `{"type": "lagged", "missed": N}`: this subscription fell behind and `N` events were
///   dropped for it, just before the events that follow.
///
/// `task` is an MCP task object, as every other function writes it. A reader should
/// ignore a `type` it does not know: later versions may add some.
///
/// Once the store is gone (freed, or its owner thread died) the events already queued are
/// still handed out, then a `lagged` event if the subscription had missed some since the
/// last one; after that every call returns `CLOSED` at once. A thread
/// blocked here when the store is freed wakes with `CLOSED` (or the events queued first).
/// Once the host closes the subscription ([`mcpts_events_close`]), every call returns
/// `CLOSED` at once, events queued or not, and a thread blocked here wakes with it.
///
/// Errors: `NULL_PARAMETER`, `TIMEOUT`, `CLOSED` (the store is gone and every event has
/// been read; at once, whatever is queued, when the subscription was closed or in a child
/// forked from the store's process).
///
/// Thread safety: any thread, also several at once on the same `events`: each event goes
/// to exactly one of them, so only a single reader sees them all in order. Blocks only the
/// calling thread.
///
/// # Safety
///
/// `events` must be NULL or live; `event_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_events_next(
    events: *const mcpts_events,
    timeout_ms: u64,
    event_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY: per this function's contract.
        let events = unsafe { arg_ref(events, "events") }?;
        let event_out = Out::new(event_out, "event_out")?;
        // In a forked child no thread sends, and a parent thread may have held the
        // channel's lock at the fork: never touch it there.
        events.owner.check_process()?;
        let no_event = || Error::new(mcpts_result::Timeout, "no event within the timeout");
        // The store is gone and every event it sent is read: what it could not send, once.
        let after_the_last = || match events.missed_at_close.take() {
            0 => Err(drained()),
            missed => Ok(StoreEvent::Lagged { missed }),
        };
        if events.is_closed() {
            return Err(closed_by_host());
        }
        let event = match timeout(timeout_ms) {
            Some(wait) if wait.is_zero() => events.events.try_recv().or_else(|e| match e {
                TryRecvError::Empty => Err(no_event()),
                TryRecvError::Disconnected => after_the_last(),
            }),
            wait => match events.recv(wait) {
                Ok(Some(event)) => Ok(event),
                Ok(None) => Err(closed_by_host()),
                Err(RecvTimeoutError::Timeout) => Err(no_event()),
                Err(RecvTimeoutError::Disconnected) => after_the_last(),
            },
        }?;
        let bytes = mcpts_bytes::json(&EventJson::from(&event))?;
        // SAFETY: per this function's contract.
        unsafe { event_out.write(bytes) };
        Ok(())
    })
}

/// Closes a subscription for its readers: from now on every [`mcpts_events_next`] on it
/// returns `CLOSED` at once, and every thread blocked in one wakes with `CLOSED`. This is
/// how a host stops a reader thread that waits with [`MCPTS_WAIT_FOREVER`] without
/// freeing the store; once the readers have returned, free the subscription with
/// [`mcpts_events_free`] (the store goes on queueing events for it until then, up to its
/// buffer). Closing again, or a NULL, does nothing; so does a call in a child forked from
/// the store's process.
///
/// Thread safety: any thread, also while other threads read or close the same `events`.
///
/// # Safety
///
/// `events` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn mcpts_events_close(events: *const mcpts_events) {
    ffi_boundary!(default = (); {
        // SAFETY: NULL or live, per the contract.
        let Some(events) = (unsafe { events.as_ref() }) else {
            return;
        };
        if events.owner.forked() {
            // The lock may have been held by a parent thread at the fork.
            return;
        }
        drop(events.open.lock().take());
    })
}

/// Ends a subscription and frees it, with any events still queued. NULL is a no-op. The
/// store keeps running and forgets the subscription at its next event; freeing after the
/// store is fine (and required). In a forked child it returns at once and releases
/// nothing, like [`mcpts_handle_free`].
///
/// Thread safety: any thread, but no other thread may be using this `events` pointer (not
/// even blocked in [`mcpts_events_next`]: [`mcpts_events_close`] wakes such readers).
///
/// # Safety
///
/// `events` must be NULL or a live subscription from this library, freed at most once.
#[no_mangle]
pub unsafe extern "C" fn mcpts_events_free(events: *mut mcpts_events) {
    ffi_boundary!(default = (); {
        // SAFETY: NULL or live, per the contract.
        let Some(live) = (unsafe { events.as_ref() }) else {
            return;
        };
        if live.owner.forked() {
            // As in `mcpts_handle_free`: dropping the receiver takes the channel's lock,
            // which some parent thread may have held at the fork.
            return;
        }
        // SAFETY: from `Box::into_raw` in this library, freed once (the contract).
        drop(unsafe { Box::from_raw(events) });
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TaskStatus, Timestamp};

    #[test]
    fn every_event_has_its_json_shape() {
        let id = TaskId::parse("6f1c1b0e-2b1a-4c3d-8e4f-5a6b7c8d9e0f").unwrap();
        let at = Timestamp::from_system_time(std::time::UNIX_EPOCH);
        let task = Task {
            task_id: id,
            status: TaskStatus::Working,
            status_message: None,
            created_at: at,
            last_updated_at: at,
            ttl: Some(1000),
            poll_interval: None,
        };
        let json = |event: StoreEvent| serde_json::to_value(EventJson::from(&event)).unwrap();
        let wire = serde_json::to_value(&task).unwrap();
        assert_eq!(
            json(StoreEvent::Created {
                task: task.clone(),
                session: Some("s".into())
            }),
            serde_json::json!({"type": "created", "task": wire, "session": "s"})
        );
        assert_eq!(
            json(StoreEvent::Status {
                task,
                session: None
            }),
            serde_json::json!({"type": "status", "task": wire, "session": null})
        );
        assert_eq!(
            json(StoreEvent::Expired {
                task_id: id,
                session: None
            }),
            serde_json::json!({
                "type": "expired",
                "taskId": "6f1c1b0e-2b1a-4c3d-8e4f-5a6b7c8d9e0f",
                "session": null
            })
        );
        assert_eq!(
            json(StoreEvent::Lagged { missed: 3 }),
            serde_json::json!({"type": "lagged", "missed": 3})
        );
    }
}
