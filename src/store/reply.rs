//! The answer half of a round trip: a one-answer slot per calling thread and answer type,
//! reused for every call.
//!
//! Commands travel to the owner thread through its inbox (see `inbox`); answers come back
//! through a [`Reply`], which writes into the caller's [`ReplySlot`] and flips one flag.
//! Three things measured on this project's machines shaped it:
//!
//! * A fresh `bounded(1)` channel per call looked free but was not: allocating it on one
//!   thread and freeing it on another made almost a third of round trips take 40 µs instead
//!   of 1. The slot is allocated once per calling thread and type.
//! * A reused `bounded(1)` channel still moves several cache lines per answer (its head,
//!   tail and slot sit on separate lines, and cloning its sender touches a shared counter):
//!   a bare ping-pong took 0.84 µs, against 0.60 µs with a slot whose flag, answer and
//!   reference count sit together (on one line, for small answers).
//! * The answer needs no lock: the owner writes it before flipping the flag and the caller
//!   reads it after, so a mutex around it only added four atomic operations per call
//!   (dropping it: +4% cycles with 1 caller).
//!
//! A caller learns that the store is gone when its [`Reply`] is dropped unanswered: the
//! owner thread drops every reply it holds when it ends (also by panicking), and commands
//! still queued are dropped with its inbox.

use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, Thread};
use std::time::Duration;

use super::spin::SpinBudget;
use crate::StoreError;

type Answer<T> = Result<T, StoreError>;

/// No answer yet.
const WAITING: u8 = 0;
/// The answer is in the slot.
const ANSWERED: u8 = 1;
/// The reply was dropped unanswered: the store is gone.
const DROPPED: u8 = 2;

/// Where one caller thread receives answers of type `T`.
struct ReplySlot<T> {
    state: AtomicU8,
    /// Set while the caller is parked (or about to park), so the owner knows to unpark it.
    parked: AtomicBool,
    /// Written by the owner before it stores `ANSWERED`, read by the caller after it sees
    /// that (see `Sync` below).
    answer: UnsafeCell<Option<Answer<T>>>,
    /// The thread that owns this slot (slots are thread-local). `None` for a slot made
    /// while its thread is torn down, when `thread::current()` may no longer work: its
    /// caller polls instead of parking.
    caller: Option<Thread>,
}

// SAFETY: `answer` has one writer and one reader, never at once: the owner writes it
// through the slot's only `Reply` (one per call) before it stores `ANSWERED` with
// `SeqCst`; the caller reads it only after loading `ANSWERED` with `Acquire`, and writes
// it (to take the answer) only then, before its next call makes a new `Reply`. The
// answer moves between threads, so `T: Send`.
unsafe impl<T: Send> Sync for ReplySlot<T> {}

impl<T> ReplySlot<T> {
    fn settle(&self, state: u8) {
        // SeqCst pairs with the caller's store of `parked` and re-read of `state`: one of
        // the two sides always sees the other, so no wake-up is lost.
        self.state.store(state, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            if let Some(caller) = &self.caller {
                caller.unpark();
            }
        }
    }
}

/// The owner thread's handle on a caller's slot: answers it once with [`send`]. Dropping
/// it unanswered tells the caller the store has gone.
///
/// [`send`]: Reply::send
pub(crate) struct Reply<T> {
    slot: Option<Arc<ReplySlot<T>>>,
}

impl<T> Reply<T> {
    /// Delivers the answer and wakes the caller if it sleeps. Never blocks.
    pub(crate) fn send(mut self, answer: Answer<T>) {
        if let Some(slot) = self.slot.take() {
            // SAFETY: this `Reply` is the slot's only one, and its caller reads the
            // answer only after `settle` below (see `Sync for ReplySlot`).
            unsafe { *slot.answer.get() = Some(answer) };
            slot.settle(ANSWERED);
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.settle(DROPPED);
        }
    }
}

impl<T> fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reply")
            .field("answered", &self.slot.is_none())
            .finish()
    }
}

thread_local! {
    static SLOTS: RefCell<HashMap<TypeId, Box<dyn Any>>> = RefCell::new(HashMap::new());
    /// How long this thread spins for an answer. Kept off the slot, whose cache line the
    /// owner thread writes with every answer.
    static SPIN: Cell<SpinBudget> = Cell::new(SpinBudget::default());
}

/// Times a caller that may not spin yields before it parks. Parking costs the owner a
/// wake-up call per answer; with 8 callers on 2 cores, 300 yields served 1.2x to 2x more
/// cycles than parking at once (measured on this project's machines).
const YIELDS: u32 = 300;

/// Callers of one store allowed to spin at once: one fewer than the cores (at least one),
/// since the owner spins too. More spinners than cores starve the owner thread itself
/// (measured: 8 spinning callers on 2 cores served a quarter of what 2 did); the rest
/// yield or park and the owner serves them in batches. (Without a journal the gate keeps
/// callers in flight to the same number.)
pub(crate) fn max_spinners() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .saturating_sub(1)
            .max(1)
    })
}

/// How long a caller expects to wait for its answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Expect {
    /// Microseconds: the owner answers as soon as it reads the command.
    Brief,
    /// Possibly long: the command waits for something to happen to a task.
    Long,
}

/// Runs one round trip: `send` hands a [`Reply`] to the store (false when the store is
/// gone), then the answer is awaited (see [`wait`]).
pub(crate) fn round_trip<T: Send + 'static>(
    spinners: &AtomicUsize,
    expect: Expect,
    send: impl FnOnce(Reply<T>) -> bool,
) -> Answer<T> {
    let slot = this_threads_slot::<T>();
    slot.state.store(WAITING, Ordering::Relaxed);
    let reply = Reply {
        slot: Some(Arc::clone(&slot)),
    };
    // A refused send drops the reply, which marks the slot `DROPPED`: `Closed` below.
    send(reply);
    wait(&slot, spinners, expect);
    let answer = match slot.state.load(Ordering::Acquire) {
        // SAFETY: answered, so the owner is done with the slot (see `Sync for ReplySlot`).
        ANSWERED => unsafe { (*slot.answer.get()).take() },
        _ => None,
    };
    answer.unwrap_or(Err(StoreError::Closed))
}

/// The calling thread's slot for answers of type `T`, made on first use.
fn this_threads_slot<T: Send + 'static>() -> Arc<ReplySlot<T>> {
    let fresh = |caller: Option<Thread>| {
        Arc::new(ReplySlot::<T> {
            state: AtomicU8::new(WAITING),
            parked: AtomicBool::new(false),
            answer: UnsafeCell::new(None),
            caller,
        })
    };
    SLOTS
        .try_with(|slots| {
            let mut slots = slots.borrow_mut();
            let slot = slots
                .entry(TypeId::of::<T>())
                .or_insert_with(|| Box::new(fresh(Some(thread::current()))));
            let slot: &Arc<ReplySlot<T>> = slot.downcast_ref().expect("slots are keyed by type");
            Arc::clone(slot)
        })
        // The thread's locals are being torn down: a call from a thread-exit hook (a
        // pthread key's destructor runs after std dropped the thread's own handle, and
        // `thread::current()` then panics), or from a C host's `atexit` handler. A slot
        // for this call alone, without a thread to unpark. Best effort: once std has
        // dropped the thread's handle, anything that asks for `thread::current()` panics
        // (here, the slot of a thread whose first call comes that late; in crossbeam's
        // channels, a thread id made on first use), and the call fails with a caught
        // panic. A Rust thread-local's destructor comes early enough; a pthread key's
        // may not.
        .unwrap_or_else(|_| fresh(None))
}

/// Returns once the slot is no longer `WAITING`: first spinning (for this thread's
/// [`SpinBudget`]) if fewer than [`max_spinners`] callers of this store already spin; then,
/// for a brief answer, yielding the CPU a bounded number of times (with more callers than
/// cores, the owner and the callers whose answers are ready need it); then parking.
fn wait<T>(slot: &ReplySlot<T>, spinners: &AtomicUsize, expect: Expect) {
    let answered = |slot: &ReplySlot<T>| slot.state.load(Ordering::Acquire) != WAITING;
    if spinners.fetch_add(1, Ordering::AcqRel) < max_spinners() {
        let mut budget = SPIN.get();
        budget.spin(|| answered(slot));
        // A long wait usually spins out; it must not teach brief calls to park early.
        if expect == Expect::Brief {
            SPIN.set(budget);
        }
    }
    spinners.fetch_sub(1, Ordering::AcqRel);
    if expect == Expect::Brief {
        let mut yielded = 0;
        while yielded < YIELDS && !answered(slot) {
            thread::yield_now();
            yielded += 1;
        }
    }
    if answered(slot) {
        return;
    }
    if slot.caller.is_none() {
        // Nothing to be woken through (see `ReplySlot::caller`): poll, pausing a little
        // longer each time. Only calls from a thread being torn down come here.
        let mut pause = Duration::from_micros(50);
        while !answered(slot) {
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
        return;
    }
    slot.parked.store(true, Ordering::SeqCst);
    while slot.state.load(Ordering::SeqCst) == WAITING {
        // Spurious returns (and an unpark meant for an earlier call) just loop.
        thread::park();
    }
    slot.parked.store(false, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    /// An owner that answers each request with its number plus one, after spinning for
    /// `delay(n)` iterations (0 answers at once; large ones make callers park).
    fn owner(
        delay: fn(u64) -> u32,
    ) -> (
        crossbeam_channel::Sender<(u64, Reply<u64>)>,
        thread::JoinHandle<()>,
    ) {
        let (tx, rx) = unbounded::<(u64, Reply<u64>)>();
        let owner = thread::spawn(move || {
            for (n, reply) in rx {
                for _ in 0..delay(n) {
                    std::hint::spin_loop();
                }
                if n % 97 == 13 {
                    drop(reply); // the store went away for this one
                } else {
                    reply.send(Ok(n + 1));
                }
            }
        });
        (tx, owner)
    }

    #[test]
    fn every_answer_reaches_its_caller_and_a_dropped_reply_is_closed() {
        // Short and long delays, so callers both spin and park; 6 callers on any machine
        // means some may not spin and yield or park at once.
        // (Miri, which checks the slot's unsafe code, runs a few and shorter ones:
        // `cargo +nightly miri test --lib store::reply`.)
        const LONG: u32 = if cfg!(miri) { 2_000 } else { 200_000 };
        const CALLS: u64 = if cfg!(miri) { 20 } else { 400 };
        let (tx, owner) = owner(|n| if n % 5 == 0 { LONG } else { (n % 7) as u32 });
        let spinners = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..6u64)
            .map(|t| {
                let (tx, spinners) = (tx.clone(), Arc::clone(&spinners));
                thread::spawn(move || {
                    for i in 0..CALLS {
                        let n = t * 1_000_000 + i;
                        let expect = if i % 2 == 0 {
                            Expect::Brief
                        } else {
                            Expect::Long
                        };
                        let answer =
                            round_trip(&spinners, expect, |reply| tx.send((n, reply)).is_ok());
                        if n % 97 == 13 {
                            assert_eq!(answer, Err(StoreError::Closed), "request {n}");
                        } else {
                            assert_eq!(answer, Ok(n + 1), "request {n}");
                        }
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().expect("caller");
        }
        assert_eq!(spinners.load(Ordering::SeqCst), 0);
        drop(tx);
        owner.join().expect("owner");
    }

    #[test]
    fn a_refused_send_is_closed_at_once() {
        let spinners = AtomicUsize::new(0);
        let answer: Answer<u64> = round_trip(&spinners, Expect::Long, |_reply| false);
        assert_eq!(answer, Err(StoreError::Closed));
        // The slot is reusable afterwards.
        let (tx, owner) = owner(|_| 0);
        let answer = round_trip(&spinners, Expect::Brief, |reply| {
            tx.send((1, reply)).is_ok()
        });
        assert_eq!(answer, Ok(2));
        drop(tx);
        owner.join().expect("owner");
    }
}
