//! Store configuration, validated when the store is built.

use std::time::Duration;

use crate::StoreError;

/// What happens to a task whose TTL runs out while it is still `working` or `input_required`.
/// (A terminal task is always removed at its deadline.)
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExpiryPolicy {
    /// The task becomes `failed` with a status message saying it expired, its worker is told
    /// to stop (its cancellation token fires), waiters wake, and it is removed after `grace`
    /// so late pollers still learn what happened. The default, with a 30 s grace.
    Fail {
        /// How long the failed task stays readable after its deadline.
        grace: Duration,
    },
    /// The task is removed at its deadline like any other (the literal reading of the spec).
    Remove,
}

impl Default for ExpiryPolicy {
    fn default() -> Self {
        ExpiryPolicy::Fail {
            grace: Duration::from_secs(30),
        }
    }
}

/// Settings of a task store. Build one with `StoreConfig::default()` and field updates, or
/// through [`StoreBuilder`](crate::StoreBuilder); both are checked by [`validate`](Self::validate).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StoreConfig {
    /// TTL for tasks that request none; `None` means unlimited (still capped by `max_ttl`).
    pub default_ttl: Option<Duration>,
    /// Cap on every task's TTL, including tasks that requested none; `None` means no cap
    /// beyond [`MAX_DURATION`](Self::MAX_DURATION), which a requested TTL never exceeds.
    pub max_ttl: Option<Duration>,
    /// Suggested polling interval copied onto every task (default 1 s).
    pub poll_interval: Duration,
    /// Tasks per `list` page (default 100).
    pub page_size: usize,
    /// Most tasks the store holds, finished ones included until their TTL removes them
    /// (tasks failed by expiry stop counting); `None` means no limit.
    pub max_tasks: Option<usize>,
    /// The same per session; sessionless tasks are not counted. `None` means no limit.
    pub max_tasks_per_session: Option<usize>,
    /// What to do with running tasks whose TTL runs out.
    pub expiry: ExpiryPolicy,
    /// Most callers blocked on one task at once (default 1024); protects the owner thread
    /// from a flood of waits.
    pub max_waiters_per_task: usize,
    /// Events buffered per subscriber before it is considered lagging (default 1024, at
    /// most 65,536: every slot is allocated when the subscriber joins).
    pub event_buffer: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            default_ttl: None,
            max_ttl: None,
            poll_interval: Duration::from_secs(1),
            page_size: 100,
            max_tasks: None,
            max_tasks_per_session: None,
            expiry: ExpiryPolicy::default(),
            max_waiters_per_task: 1024,
            event_buffer: 1024,
        }
    }
}

/// See [`StoreConfig::MAX_DURATION`].
const MAX_DURATION: Duration = StoreConfig::MAX_DURATION;
/// [`MAX_DURATION`] in milliseconds.
const MAX_DURATION_MS: u64 = MAX_DURATION.as_secs() * 1000;
/// Largest page the store will build in one command.
const MAX_PAGE_SIZE: usize = 100_000;
/// Largest buffer per subscriber. A bounded channel allocates all its slots up front (a
/// few hundred bytes each), so an unchecked size could fail that allocation (a panic or an
/// abort); a subscriber this far behind is lagging whatever the buffer.
const MAX_EVENT_BUFFER: usize = 1 << 16;

impl StoreConfig {
    /// The longest duration the store accepts or grants: 100 years (3,153,600,000,000 ms).
    /// Configured TTLs, grace and poll interval above it are refused; a TTL a client
    /// requests above it (up to `u64::MAX` ms on the wire) is cut to it, also when no
    /// `max_ttl` is set, and the task reports the TTL it got. Far beyond any sane use, it
    /// keeps deadline arithmetic far from overflow and every `ttl` / `ttlMs` the store
    /// sends exact in a JavaScript number (below 2^53).
    pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    /// Checks every field; the error names the first offending one.
    pub fn validate(&self) -> Result<(), StoreError> {
        fn bad(field: &'static str, reason: impl Into<String>) -> Result<(), StoreError> {
            Err(StoreError::InvalidConfig {
                field,
                reason: reason.into(),
            })
        }
        for (field, value) in [("default_ttl", self.default_ttl), ("max_ttl", self.max_ttl)] {
            match value {
                Some(d) if d.as_millis() == 0 => return bad(field, "must be at least 1 ms"),
                Some(d) if d > MAX_DURATION => return bad(field, "must be at most 100 years"),
                _ => {}
            }
        }
        if let (Some(default), Some(max)) = (self.default_ttl, self.max_ttl) {
            if default > max {
                return bad(
                    "default_ttl",
                    format!("({default:?}) must not exceed max_ttl ({max:?})"),
                );
            }
        }
        if self.poll_interval.as_millis() == 0 {
            return bad("poll_interval", "must be at least 1 ms");
        }
        if self.poll_interval > MAX_DURATION {
            return bad("poll_interval", "must be at most 100 years");
        }
        if self.page_size == 0 || self.page_size > MAX_PAGE_SIZE {
            return bad(
                "page_size",
                format!("must be between 1 and {MAX_PAGE_SIZE}"),
            );
        }
        if self.max_tasks == Some(0) {
            return bad("max_tasks", "must be at least 1 (use None for no limit)");
        }
        if self.max_tasks_per_session == Some(0) {
            return bad(
                "max_tasks_per_session",
                "must be at least 1 (use None for no limit)",
            );
        }
        if let ExpiryPolicy::Fail { grace } = self.expiry {
            if grace > MAX_DURATION {
                return bad("expiry", "grace must be at most 100 years");
            }
        }
        if self.max_waiters_per_task == 0 {
            return bad("max_waiters_per_task", "must be at least 1");
        }
        if self.event_buffer == 0 || self.event_buffer > MAX_EVENT_BUFFER {
            return bad(
                "event_buffer",
                format!("must be between 1 and {MAX_EVENT_BUFFER}"),
            );
        }
        Ok(())
    }

    /// The TTL a task gets, in ms: the request (0 counts as none), else the default, capped
    /// by `max_ttl`, or by [`MAX_DURATION`](Self::MAX_DURATION) without one. `None` is
    /// unlimited (no TTL requested, no default, no `max_ttl`).
    pub fn resolve_ttl(&self, requested_ms: Option<u64>) -> Option<u64> {
        let default = self.default_ttl.map(duration_ms);
        let wanted = requested_ms.filter(|&ms| ms > 0).or(default);
        self.cap_ttl(wanted)
    }

    /// `ttl` capped by `max_ttl` (which also gives a task without one its TTL), or by
    /// [`MAX_DURATION`](Self::MAX_DURATION) without one.
    pub(crate) fn cap_ttl(&self, ttl: Option<u64>) -> Option<u64> {
        match (ttl, self.max_ttl.map(duration_ms)) {
            (Some(ttl), Some(max)) => Some(ttl.min(max)),
            (None, max) => max,
            (Some(ttl), None) => Some(ttl.min(MAX_DURATION_MS)),
        }
    }
}

pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
