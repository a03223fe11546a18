//! Ending a blocked wait early, from another thread.
//!
//! A stop sends the owner thread a command naming the task and the stop, and the owner
//! answers the matching waits with `Stopped` and forgets them, so a stopped wait frees its
//! thread and its place among the task's waiters at once. A stop can race the wait it
//! ends (the wait's command may not have reached the owner yet), so it also sets a flag,
//! under the same lock that a starting wait reads it under; the owner looks at the flag
//! again when it parks the wait. Whichever reaches the owner first, the wait ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::actor::Command;
use super::inbox::Poster;
use crate::model::TaskId;

/// Ends a [`StoreHandle::wait_terminal_or_stop`](crate::StoreHandle::wait_terminal_or_stop)
/// early, from any thread: the wait returns [`StoreError::Stopped`](crate::StoreError::Stopped)
/// at once instead of at its deadline, and the store forgets it (it stops counting against
/// `max_waiters_per_task`). This is how a server ends a blocked `tasks/result` whose client
/// cancelled the request or went away.
///
/// Clones share one stop, and one stop may end several waits. Stopping is final: a wait
/// given a stop that has already fired returns `Stopped` without waiting.
#[derive(Clone, Debug)]
pub struct WaitStop(Arc<StopState>);

#[derive(Debug)]
struct StopState {
    /// Names this stop to the owner thread (unique in the process).
    label: u64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stopped: bool,
    /// The waits running with this stop: a number to tell them apart (two stores may hold
    /// tasks with one id), their task, and the way to their store.
    waits: Vec<(u64, TaskId, Poster)>,
    next: u64,
}

impl Default for WaitStop {
    fn default() -> Self {
        WaitStop::new()
    }
}

impl WaitStop {
    /// A stop that has not fired.
    pub fn new() -> WaitStop {
        static NEXT_LABEL: AtomicU64 = AtomicU64::new(1);
        WaitStop(Arc::new(StopState {
            label: NEXT_LABEL.fetch_add(1, Ordering::Relaxed),
            inner: Mutex::new(Inner::default()),
        }))
    }

    /// Ends every wait running with this stop, and every later one at its start;
    /// idempotent.
    pub fn stop(&self) {
        let waits = {
            let mut inner = self.0.inner.lock();
            inner.stopped = true;
            std::mem::take(&mut inner.waits)
        };
        for (_, id, store) in waits {
            // False only if the store is gone, which ends the wait anyway.
            store.send(Command::StopWaits {
                id,
                label: self.0.label,
            });
        }
    }

    /// True once [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.0.inner.lock().stopped
    }

    pub(crate) fn label(&self) -> u64 {
        self.0.label
    }

    /// Records a wait on `id` about to start through `store`, unless the stop already fired.
    /// The wait is forgotten when the returned guard drops.
    pub(crate) fn begin(&self, id: TaskId, store: &Poster) -> Option<Running<'_>> {
        let mut inner = self.0.inner.lock();
        if inner.stopped {
            return None;
        }
        let number = inner.next;
        inner.next += 1;
        inner.waits.push((number, id, store.clone()));
        Some(Running { stop: self, number })
    }
}

/// A wait in progress with a [`WaitStop`]; forgets it when dropped.
pub(crate) struct Running<'a> {
    stop: &'a WaitStop,
    number: u64,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut inner = self.stop.0.inner.lock();
        if let Some(at) = inner.waits.iter().position(|w| w.0 == self.number) {
            inner.waits.swap_remove(at);
        }
    }
}
