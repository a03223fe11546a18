//! The machine as the owner thread shares it: the owner changes it under a write lock, one
//! command at a time, and callers read it under a read lock on their own threads, so a read
//! that changes nothing (`get`, `get_detail`, `get_result`) costs no round trip to the owner.
//!
//! Why the store's guarantees still hold:
//!
//! * Only the owner thread writes. Ordering, limits and wake-ups still rest on one thread,
//!   and every change still arrives as a command.
//! * The owner lets go of the lock before it answers, so a caller that holds an answer
//!   finds the change in place: a task is visible to `get` before `create` returns, in
//!   every thread that learns the id afterwards.
//! * A read answers here only when it changes nothing. A task past its deadline must be
//!   settled first (failed or removed), which only the owner may do, so such reads are sent
//!   to it as commands, exactly as before.
//! * A journaled store's callers never read here: its changes are in the machine before they
//!   are durable, and a read must not show what a crash could still undo.
//! * When the owner thread ends, also by panicking half way through a change, it drops the
//!   machine before anyone can take the lock again: parked waiters and later readers all
//!   hear `Closed`, as they did when the machine lived on the owner thread alone.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::actor::ReplyTo;
use super::clock::{Now, TimeSource};
use super::machine::StoreMachine;
use crate::StoreError;

/// Attempts at the read lock between two looks at the time.
const READ_SPINS: u32 = 64;
/// How long a reader spins for the lock before it sends its read to the owner thread as a
/// command. A command holds the lock for about a microsecond and an expiry batch for about
/// 20 (unless the owner loses its CPU meanwhile); falling back after 256 attempts (a few
/// microseconds) sent readers into the command path behind expiry batches, and those that
/// ended up parked waited up to 2.6 ms there (worst of 6 runs of the expiry probe;
/// 0.30-0.59 ms over 8 with this patience).
const READ_PATIENCE: Duration = Duration::from_micros(60);

/// The machine (`None` once its owner thread has ended) and the clock it runs on.
#[derive(Debug)]
pub(crate) struct Shared {
    machine: RwLock<Option<StoreMachine<ReplyTo>>>,
    time: TimeSource,
    /// Set by any caller that has heard `Closed` from the owner thread. A panicking owner
    /// drops the replies it holds while it unwinds, possibly before it drops the machine:
    /// this keeps a read that follows such an answer from finding the machine still there.
    heard_closed: AtomicBool,
}

impl Shared {
    pub(crate) fn new(machine: StoreMachine<ReplyTo>, time: TimeSource) -> Shared {
        Shared {
            machine: RwLock::new(Some(machine)),
            time,
            heard_closed: AtomicBool::new(false),
        }
    }

    /// The store's clock.
    pub(crate) fn time(&self) -> &TimeSource {
        &self.time
    }

    /// The machine for changing; only the owner thread calls this, and only until it calls
    /// [`close`](Self::close). Hold it briefly: readers wait while it is held.
    pub(crate) fn write(&self) -> Writing<'_> {
        Writing {
            machine: self.machine.write(),
        }
    }

    /// Runs `look` on the machine for the owner thread, under a read lock (which never
    /// holds up readers).
    pub(crate) fn look<R>(&self, look: impl FnOnce(&StoreMachine<ReplyTo>) -> R) -> Option<R> {
        self.machine.read().as_ref().map(look)
    }

    /// Answers a read on the caller's thread: `peek` gets the machine and the time, and
    /// returns `None` when the read has to go to the owner thread after all. Also `None`
    /// when the owner keeps the machine locked longer than [`READ_PATIENCE`]: a reader
    /// never sleeps on the lock (a reader parked behind a run of expiry batches, with the
    /// writer preferred, waited up to milliseconds).
    pub(crate) fn read<R>(
        &self,
        peek: impl FnOnce(&StoreMachine<ReplyTo>, Now) -> Option<Result<R, StoreError>>,
    ) -> Option<Result<R, StoreError>> {
        if self.heard_closed.load(Ordering::Acquire) {
            return Some(Err(StoreError::Closed));
        }
        let machine = self.try_read()?;
        match &*machine {
            Some(machine) => peek(machine, self.time.now()),
            None => Some(Err(StoreError::Closed)),
        }
    }

    /// The read lock, if the owner lets go of it within [`READ_PATIENCE`].
    fn try_read(&self) -> Option<RwLockReadGuard<'_, Option<StoreMachine<ReplyTo>>>> {
        let mut since: Option<Instant> = None;
        loop {
            for _ in 0..READ_SPINS {
                if let Some(guard) = self.machine.try_read() {
                    return Some(guard);
                }
                std::hint::spin_loop();
            }
            let started = *since.get_or_insert_with(Instant::now);
            if started.elapsed() > READ_PATIENCE {
                return None;
            }
        }
    }

    /// Records that a caller heard `Closed`: from then on reads answer `Closed` as well.
    pub(crate) fn heard_closed(&self) {
        self.heard_closed.store(true, Ordering::Release);
    }

    /// Called as the owner thread ends: drops the machine, and with it every parked
    /// waiter's reply (so each of them hears `Closed`); later reads answer `Closed` too.
    pub(crate) fn close(&self) {
        let machine = self.machine.write().take();
        // Dropped outside the lock: unparking every waiter takes a while.
        drop(machine);
    }
}

/// The owner's write access. If the owner panics while holding it, the machine may be half
/// way through a change: dropping this then drops the machine before the lock is released,
/// so no reader ever sees that state and every parked waiter hears `Closed`.
pub(crate) struct Writing<'a> {
    machine: RwLockWriteGuard<'a, Option<StoreMachine<ReplyTo>>>,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            *self.machine = None;
        }
        // The lock is released after this, when the guard drops.
    }
}

impl Deref for Writing<'_> {
    type Target = StoreMachine<ReplyTo>;

    fn deref(&self) -> &Self::Target {
        self.machine.as_ref().expect(CLOSED_WRITE)
    }
}

impl DerefMut for Writing<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.machine.as_mut().expect(CLOSED_WRITE)
    }
}

const CLOSED_WRITE: &str = "the owner thread writes only until it closes the machine";
