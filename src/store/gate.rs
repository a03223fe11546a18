//! Admission control: at most `limit` callers in a round trip with the owner thread at once.
//!
//! Every answer needs its caller on a CPU. With more busy callers than cores, each answer
//! also needs a context switch, and the owner thread (one of many runnable threads, all
//! treated alike by the scheduler) loses its core: measured on 2 cores, 8 callers served a
//! third of what 1 did. The gate keeps the number of callers in flight at `limit` (one
//! less than the cores, leaving one to the owner); the others sleep until admitted.
//!
//! Handing the gate over on every call would bring the context switch back, so a caller
//! that calls again right after its previous call may keep its place for a turn of
//! [`TURN`] before it must let the next waiter in. A caller that leaves after a pause (or
//! for the first time) hands over at once. A place left free with waiters queued (the
//! caller stopped right after a quick call) is handed on by the owner thread when it runs
//! out of work; a caller leaving while the owner sleeps hands over at once. As a last
//! resort (the owner kept busy by a mass expiry or by calls that bypass the gate, or gone),
//! a waiting caller hands a free place to the longest waiter when it next looks
//! ([`LOOK_AGAIN`]). With waiters queued, newcomers queue behind them (and hand a free
//! place they find to the longest waiter): only a caller that has just left may take a
//! free place ahead of them.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Longest a caller that keeps calling holds its place while others wait.
const TURN: Duration = Duration::from_micros(500);
/// A caller whose calls end within this long of each other counts as calling in a loop,
/// and keeps its place (for the rest of its turn) instead of handing it over.
const LOOPING: Duration = Duration::from_micros(1000);
/// How often a waiting caller checks for a free place nobody handed on. Rarely needed, and
/// every look costs a context switch.
const LOOK_AGAIN: Duration = Duration::from_millis(10);

/// Admits at most `limit` callers at once. Without waiters, entering and leaving touch
/// two atomics; the lock is only taken while someone waits.
#[derive(Debug)]
pub(crate) struct Gate {
    limit: usize,
    look_again: Duration,
    /// Callers holding a place.
    inside: AtomicUsize,
    /// Callers queued (the queue's length, readable without the lock).
    waiting: AtomicUsize,
    /// The owner thread is (about to be) asleep: nobody leaving may keep a place free.
    owner_asleep: AtomicBool,

    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    queue: VecDeque<Arc<Waiter>>,
    /// When the last waiter was let in (or the queue formed): a looping caller's turn ends
    /// [`TURN`] after it.
    turn_began: Instant,
}

#[derive(Debug)]
struct Waiter {
    /// Set (under the state lock) by whoever admitted this waiter; `inside` already
    /// counts it.
    admitted: AtomicBool,
    thread: Thread,
}

thread_local! {
    /// When this thread last left a gate that others were waiting at: tells a loop from a
    /// one-off call.
    static LAST_LEFT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// True if this thread left a contended gate within [`LOOPING`].
fn left_just_now() -> bool {
    LAST_LEFT.get().is_some_and(|left| left.elapsed() < LOOPING)
}

/// A place in the gate, given back when dropped.
#[must_use]
#[derive(Debug)]
pub(crate) struct Pass<'a> {
    gate: &'a Gate,
}

impl Gate {
    /// A gate for `limit` callers at once (at least one).
    pub(crate) fn new(limit: usize) -> Gate {
        Gate::with_look_again(limit, LOOK_AGAIN)
    }

    fn with_look_again(limit: usize, look_again: Duration) -> Gate {
        Gate {
            limit: limit.max(1),
            look_again,
            inside: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            owner_asleep: AtomicBool::new(false),
            state: Mutex::new(GateState {
                queue: VecDeque::new(),
                turn_began: Instant::now(),
            }),
        }
    }

    /// One less than the machine's cores (at least one): the owner thread keeps a core.
    pub(crate) fn for_this_machine() -> Gate {
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        Gate::new(cores.saturating_sub(1))
    }

    /// Takes a free place, if there is one.
    fn take_place(&self) -> bool {
        let mut inside = self.inside.load(Ordering::SeqCst);
        while inside < self.limit {
            match self.inside.compare_exchange_weak(
                inside,
                inside + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => inside = now,
            }
        }
        false
    }

    /// Waits for a place.
    pub(crate) fn enter(&self) -> Pass<'_> {
        // (A `Pass` is only made once a place is held: dropping it gives one back.)
        // With waiters queued, only a caller that has just left may take a free place
        // ahead of them: that is how a looping caller keeps its place for its turn.
        let may_take = self.waiting.load(Ordering::SeqCst) == 0 || left_just_now();
        if may_take && self.take_place() {
            return Pass { gate: self };
        }
        let waiter = {
            let mut state = self.state.lock();
            if state.queue.is_empty() {
                state.turn_began = Instant::now();
            }
            let waiter = Arc::new(Waiter {
                admitted: AtomicBool::new(false),
                thread: thread::current(),
            });
            state.queue.push_back(Arc::clone(&waiter));
            self.waiting.fetch_add(1, Ordering::SeqCst);
            // A caller that left after our first look, but before it could see us queued,
            // freed a place without handing it on: it goes to the longest waiter (maybe us).
            self.admit_free(&mut state);
            waiter
        };
        loop {
            if waiter.admitted.load(Ordering::Acquire) {
                return Pass { gate: self };
            }
            thread::park_timeout(self.look_again);
            if !waiter.admitted.load(Ordering::Acquire) {
                // A place left free that nobody handed on (also the way in while the owner
                // is busy with a mass expiry and does not sleep) goes to the longest waiter.
                let mut state = self.state.lock();
                self.admit_free(&mut state);
            }
        }
    }

    /// Admits waiters, longest first, into the places that are free.
    fn admit_free(&self, state: &mut GateState) {
        while !state.queue.is_empty() && self.take_place() {
            state.admit_next(&self.waiting);
        }
    }

    /// The owner thread is going to sleep until the returned guard is dropped: waiters get
    /// the free places now, and callers leaving meanwhile hand theirs over at once.
    pub(crate) fn owner_sleeps(&self) -> Asleep<'_> {
        // SeqCst pairs with `leave`: either it sees the flag, or we see its place free.
        self.owner_asleep.store(true, Ordering::SeqCst);
        self.admit_waiting();
        Asleep { gate: self }
    }

    /// True while callers are queued.
    pub(crate) fn has_waiters(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// Lets waiters into free places.
    fn admit_waiting(&self) {
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.admit_free(&mut self.state.lock());
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) == 0 {
            // Nothing to decide, and no clock to read. A caller's loop is then judged from
            // its leaves while others wait (a stale time only makes one handover early).
            return;
        }
        let looping = left_just_now();
        let now = Instant::now();
        LAST_LEFT.set(Some(now));
        let mut state = self.state.lock();
        // `turn_began` may be later than `now` (set by another thread meanwhile).
        let keep_free = looping
            && now.saturating_duration_since(state.turn_began) < TURN
            && !self.owner_asleep.load(Ordering::SeqCst);
        if state.queue.is_empty() || keep_free {
            return;
        }
        if self.take_place() {
            state.admit_next(&self.waiting);
        }
    }
}

impl GateState {
    /// Admits the longest waiter into a place already taken for it.
    fn admit_next(&mut self, waiting: &AtomicUsize) {
        let waiter = self.queue.pop_front().expect("checked by the caller");
        waiting.fetch_sub(1, Ordering::SeqCst);
        self.turn_began = Instant::now();
        waiter.admitted.store(true, Ordering::Release);
        waiter.thread.unpark();
    }
}

/// The owner thread's sleep, ended when dropped.
#[must_use]
#[derive(Debug)]
pub(crate) struct Asleep<'a> {
    gate: &'a Gate,
}

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        self.gate.owner_asleep.store(false, Ordering::SeqCst);
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.gate.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn never_more_than_the_limit_inside_and_everyone_gets_in() {
        for limit in [1, 2, 3] {
            let gate = Gate::new(limit);
            let inside = AtomicUsize::new(0);
            let most = AtomicUsize::new(0);
            let entries = AtomicUsize::new(0);
            thread::scope(|scope| {
                for t in 0..6 {
                    let (gate, inside, most, entries) = (&gate, &inside, &most, &entries);
                    scope.spawn(move || {
                        for i in 0..300 {
                            let _pass = gate.enter();
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            for _ in 0..(t * 37 + i) % 500 {
                                std::hint::spin_loop();
                            }
                            inside.fetch_sub(1, Ordering::SeqCst);
                            entries.fetch_add(1, Ordering::SeqCst);
                        }
                    });
                }
            });
            assert!(most.load(Ordering::SeqCst) <= limit, "limit {limit}");
            assert_eq!(entries.load(Ordering::SeqCst), 6 * 300);
            assert_eq!(gate.inside.load(Ordering::SeqCst), 0);
            assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
            assert!(gate.state.lock().queue.is_empty());
        }
    }

    /// A gate whose waiters never look again by themselves within a test: a waiter only
    /// gets in if someone lets it in (or the test hangs, which is the failure).
    fn patient_gate() -> Gate {
        Gate::with_look_again(1, Duration::from_secs(3600))
    }

    /// Waits (without sleeping) until `n` callers are queued.
    fn until_queued(gate: &Gate, n: usize) {
        while gate.waiting.load(Ordering::SeqCst) < n {
            std::hint::spin_loop();
        }
    }

    /// Leaves as a caller calling in a loop, early in its turn (it keeps its place free).
    fn leave_looping(gate: &Gate, pass: Pass<'_>) {
        LAST_LEFT.set(Some(Instant::now()));
        gate.state.lock().turn_began = Instant::now();
        drop(pass);
    }

    #[test]
    fn a_one_off_caller_hands_its_place_over_at_once() {
        let gate = patient_gate();
        let pass = gate.enter();
        thread::scope(|scope| {
            let waiting = scope.spawn(|| drop(gate.enter()));
            until_queued(&gate, 1);
            drop(pass); // not looping: admits the waiter now
            assert!(gate.state.lock().queue.is_empty(), "admitted");
            waiting.join().expect("waiter");
        });
        assert_eq!(gate.inside.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_owner_hands_on_a_place_left_free() {
        let gate = patient_gate();
        let pass = gate.enter();
        thread::scope(|scope| {
            let waiting = scope.spawn(|| drop(gate.enter()));
            until_queued(&gate, 1);
            leave_looping(&gate, pass);
            assert_eq!(gate.state.lock().queue.len(), 1, "still waiting");
            // The owner, about to sleep, lets the waiter in.
            let asleep = gate.owner_sleeps();
            assert!(gate.state.lock().queue.is_empty(), "admitted");
            waiting.join().expect("waiter");
            drop(asleep);
        });
    }

    #[test]
    fn newcomers_queue_behind_waiters_even_when_a_place_is_free() {
        let gate = patient_gate();
        let order = Mutex::new(Vec::new());
        let pass = gate.enter();
        thread::scope(|scope| {
            let first = scope.spawn(|| {
                let _pass = gate.enter();
                order.lock().push("first");
            });
            until_queued(&gate, 1);
            leave_looping(&gate, pass);
            // A newcomer may not take the free place ahead of the waiter: arriving, it
            // hands it to the waiter and queues (the waiter would otherwise sleep for an
            // hour, and the test with it).
            let second = scope.spawn(|| {
                let _pass = gate.enter();
                order.lock().push("second");
            });
            first.join().expect("first");
            second.join().expect("second");
        });
        assert_eq!(*order.lock(), ["first", "second"]);
    }

    #[test]
    fn a_looping_caller_hands_over_at_once_while_the_owner_sleeps() {
        let gate = patient_gate();
        let asleep = gate.owner_sleeps();
        let pass = gate.enter();
        thread::scope(|scope| {
            let waiting = scope.spawn(|| drop(gate.enter()));
            until_queued(&gate, 1);
            leave_looping(&gate, pass);
            assert!(gate.state.lock().queue.is_empty(), "admitted");
            waiting.join().expect("waiter");
        });
        drop(asleep);
    }
}
