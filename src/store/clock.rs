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
}

impl TimeSource {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> TimeSource {
        let origin = clock.now();
        TimeSource { clock, origin }
    }

    pub(crate) fn is_real(&self) -> bool {
        self.clock.is_real()
    }

    /// Reads the clock once.
    pub(crate) fn now(&self) -> Now {
        let elapsed = self.clock.now().saturating_duration_since(self.origin);
        Now {
            mono: Millis(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)),
            wall: Timestamp::from_system_time(self.clock.now_utc()),
        }
    }

    /// The instant at which the monotonic base reaches `at`; far-off deadlines saturate to
    /// a year from the origin's point of view, which only means a harmless early wake-up.
    pub(crate) fn instant_of(&self, at: Millis) -> Instant {
        const YEAR_MS: u64 = 365 * 24 * 3600 * 1000;
        let ms = at.0.min(self.now().mono.0.saturating_add(YEAR_MS));
        self.origin + Duration::from_millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
