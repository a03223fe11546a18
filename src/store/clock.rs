//! Time sources. The owner thread reads the clock for every command, and callers read it
//! for the reads they serve themselves (see `shared`); the machine is handed [`Now`] values.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::model::Timestamp;

/// Milliseconds on the store's monotonic time base, which starts at 0 when the store starts.
/// TTL deadlines live on this base, so wall-clock jumps never expire a task early.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Millis(pub u64);

impl Millis {
    /// `self + ms`, saturating.
    pub fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }
}

/// One reading of time as the machine needs it: the monotonic tick for deadlines and the
/// wall clock for `createdAt` / `lastUpdatedAt`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Now {
    /// Monotonic milliseconds since the store started.
    pub mono: Millis,
    /// Wall-clock time.
    pub wall: Timestamp,
}

impl Now {
    /// A reading at `mono` milliseconds whose wall clock is `wall_base + mono`; handy in tests.
    pub fn at(mono: u64) -> Now {
        const BASE: u64 = 1_764_066_600_000; // 2025-11-25T10:30:00Z
        Now {
            mono: Millis(mono),
            wall: Timestamp(BASE + mono),
        }
    }
}

/// A source of time for the store. Read on the owner thread, and on callers' threads by
/// `get`, `get_detail` and `get_result` (to tell whether a task's deadline has passed);
/// it must not panic.
///
/// Either clock may step backwards (a wall clock set back, a clock of your own): the store's
/// time never does. A reading earlier than the latest the store has seen counts as that one
/// (monotonic and wall clock each on its own), so the store holds still until the clock
/// catches up: no deadline is missed or comes early, and no task's `lastUpdatedAt` precedes
/// its `createdAt`. A [real](Clock::is_real) clock need not agree with [`Instant::now`]:
/// the owner thread sleeps for as long as this clock says is left until a deadline.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Monotonic time.
    fn now(&self) -> Instant;
    /// Wall-clock time.
    fn now_utc(&self) -> SystemTime;
    /// False for clocks that only move when told to ([`ManualClock`]); the owner thread then
    /// never sleeps on a deadline and expiry happens when a command (or `sync`) arrives.
    fn is_real(&self) -> bool {
        true
    }
}

/// The operating system's clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn now_utc(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when [`advance`](ManualClock::advance) is called, for
/// deterministic tests: `clock.advance(ttl); handle.sync()?;` and the expiry has happened.
///
/// Clones share the same time. Reading it is a single atomic load: the owner thread and
/// every caller that serves its own reads look at it for each operation, and a mutex made
/// its cache line bounce between them (about 6% of the 1-caller benchmark cycle).
#[derive(Clone, Debug)]
pub struct ManualClock {
    inner: Arc<ManualTime>,
}

#[derive(Debug)]
struct ManualTime {
    /// The real times the clock was frozen at.
    start: Instant,
    start_utc: SystemTime,
    /// Nanoseconds advanced since then (saturating: a clock advanced past ~584 years
    /// stays there).
    advanced: AtomicU64,
}

impl ManualTime {
    fn advanced(&self) -> Duration {
        Duration::from_nanos(self.advanced.load(Ordering::Acquire))
    }
}

impl ManualClock {
    /// A clock frozen at the current real time.
    pub fn new() -> ManualClock {
        ManualClock {
            inner: Arc::new(ManualTime {
                start: Instant::now(),
                start_utc: SystemTime::now(),
                advanced: AtomicU64::new(0),
            }),
        }
    }

    /// Moves both the monotonic and the wall clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // Never fails: the closure always returns `Some`.
        let _ = self
            .inner
            .advanced
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |ns| {
                Some(ns.saturating_add(by))
            });
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.inner.start + self.inner.advanced()
    }

    fn now_utc(&self) -> SystemTime {
        self.inner.start_utc + self.inner.advanced()
    }

    fn is_real(&self) -> bool {
        false
    }
}

/// Converts between a clock's `Instant`s and the store's [`Millis`] base.
#[derive(Debug)]
pub(crate) struct TimeSource {
    clock: Arc<dyn Clock>,
    origin: Instant,
    /// The latest monotonic reading handed out, in ms: [`now`](Self::now) never goes below
    /// it, so a wait's deadline, computed from a reading on the owner thread, never falls
    /// behind the machine's time when the clock steps back.
    latest: AtomicU64,
}

impl TimeSource {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> TimeSource {
        let origin = clock.now();
        TimeSource {
            clock,
            origin,
            latest: AtomicU64::new(0),
        }
    }

    pub(crate) fn is_real(&self) -> bool {
        self.clock.is_real()
    }

    /// Reads the clock once; the monotonic part never goes below an earlier reading (the
    /// machine holds the wall clock still itself).
    pub(crate) fn now(&self) -> Now {
        let elapsed = self.clock.now().saturating_duration_since(self.origin);
        let mono = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        // A load first: readers on many threads write only when the millisecond moves on.
        let latest = self.latest.load(Ordering::Acquire);
        let mono = if mono > latest {
            self.latest.fetch_max(mono, Ordering::AcqRel).max(mono)
        } else {
            latest
        };
        Now {
            mono: Millis(mono),
            wall: Timestamp::from_system_time(self.clock.now_utc()),
        }
    }

    /// The real instant (on [`Instant::now`]'s clock, which the owner's sleep uses) by
    /// which the store's clock reaches `at`: the time left is measured on the store's
    /// clock, so one that lags or leads real time, or has stepped back, wakes the owner
    /// neither in a busy loop before the deadline nor long after it. Far-off deadlines
    /// are cut to a year ahead, which only means a harmless early wake-up.
    pub(crate) fn instant_of(&self, at: Millis) -> Instant {
        const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
        let clock_now = self.clock.now();
        let real_now = Instant::now();
        if at.0 <= self.latest.load(Ordering::Acquire) {
            // The store's time is there already, even if the clock stepped back since.
            return real_now;
        }
        let due = Duration::from_millis(at.0);
        // `due` after the origin, less how far the clock is past the origin (it may be
        // before it, having stepped back).
        let left = match clock_now.checked_duration_since(self.origin) {
            Some(past) => due.saturating_sub(past),
            None => due.saturating_add(self.origin.duration_since(clock_now)),
        };
        real_now + left.min(YEAR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock set to any offset from the moment it was made, backwards included.
    #[derive(Debug)]
    struct StepClock {
        base: Instant,
        base_utc: SystemTime,
        offset_ms: AtomicU64,
    }

    impl StepClock {
        fn new() -> StepClock {
            StepClock::at(Instant::now())
        }

        /// A clock whose instants start at `base`, wherever real time is.
        fn at(base: Instant) -> StepClock {
            StepClock {
                base,
                base_utc: SystemTime::now(),
                offset_ms: AtomicU64::new(0),
            }
        }

        fn set(&self, ms: u64) {
            self.offset_ms.store(ms, Ordering::SeqCst);
        }

        fn offset(&self) -> Duration {
            Duration::from_millis(self.offset_ms.load(Ordering::SeqCst))
        }
    }

    impl Clock for StepClock {
        fn now(&self) -> Instant {
            self.base + self.offset()
        }

        fn now_utc(&self) -> SystemTime {
            self.base_utc + self.offset()
        }
    }

    #[test]
    fn the_stores_monotonic_time_holds_still_while_the_clock_is_set_back() {
        let clock = Arc::new(StepClock::new());
        let time = TimeSource::new(clock.clone());
        clock.set(10_000);
        assert_eq!(time.now().mono, Millis(10_000));
        clock.set(3_000);
        assert_eq!(time.now().mono, Millis(10_000));
        clock.set(12_000);
        assert_eq!(time.now().mono, Millis(12_000));
    }

    #[test]
    fn the_owner_sleeps_as_long_as_the_clock_says_is_left_until_a_deadline() {
        const MIN: u64 = 60_000;
        let clock = Arc::new(StepClock::new());
        let time = TimeSource::new(clock.clone());
        // The clock jumps an hour ahead of real time (the store sees it), then back to
        // ten minutes ahead: a deadline at 61 minutes is 51 minutes away on it.
        clock.set(60 * MIN);
        assert_eq!(time.now().mono, Millis(60 * MIN));
        clock.set(10 * MIN);
        let before = Instant::now();
        let wake = time.instant_of(Millis(61 * MIN));
        let after = Instant::now();
        let left = Duration::from_millis(51 * MIN);
        assert!(
            wake >= before + left && wake <= after + left,
            "wakes {:?} from now, not {left:?}",
            wake.saturating_duration_since(before)
        );
        // A deadline the store's time has reached is due now, whatever the clock says.
        let wake = time.instant_of(Millis(60 * MIN));
        assert!(wake <= Instant::now());
    }

    #[test]
    fn a_clock_lagging_real_time_still_has_its_deadlines_slept_for() {
        // Its instants 5 s behind real ones: the deadline 1 s ahead on it lies in the
        // real past, and sleeping until then would be a busy loop until it came.
        let base = Instant::now()
            .checked_sub(Duration::from_secs(5))
            .expect("an Instant 5 s back (the machine has been up for longer)");
        let time = TimeSource::new(Arc::new(StepClock::at(base)));
        let before = Instant::now();
        let wake = time.instant_of(Millis(1_000));
        assert!(
            wake >= before + Duration::from_secs(1),
            "{wake:?} {before:?}"
        );
    }

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let clock = ManualClock::new();
        let (t0, w0) = (clock.now(), clock.now_utc());
        assert_eq!((clock.now(), clock.now_utc()), (t0, w0));
        let twin = clock.clone();
        twin.advance(Duration::from_millis(1500));
        twin.advance(Duration::from_nanos(7));
        let moved = Duration::from_millis(1500) + Duration::from_nanos(7);
        assert_eq!(clock.now(), t0 + moved);
        assert_eq!(clock.now_utc(), w0 + moved);
    }

    #[test]
    fn a_manual_clock_advanced_past_its_range_stays_at_the_end() {
        let clock = ManualClock::new();
        let time = TimeSource::new(Arc::new(clock.clone()));
        let t0 = clock.now();
        clock.advance(Duration::from_secs(u64::MAX));
        clock.advance(Duration::from_secs(1));
        let end = Duration::from_nanos(u64::MAX);
        assert_eq!(clock.now(), t0 + end);
        // The store sees it there too, without panicking on the way.
        assert_eq!(time.now().mono, Millis(u64::MAX / 1_000_000));
    }
}
