//! Time: [`handle_timeout`](StoreMachine::handle_timeout) and
//! [`poll_timeout`](StoreMachine::poll_timeout) over the timer wheel and the timed waits,
//! and `settle`, which applies the expiry policy (fail, then remove after a grace period; or
//! remove at once) to a task whose deadline has passed.

use super::waits::forget_deadline;
use super::{StoreMachine, WaitKind, Wake, WakeOutcome};
use crate::model::{StoreEvent, TaskId, TaskStatus};
use crate::store::clock::{Millis, Now};
use crate::store::config::{duration_ms, ExpiryPolicy};
use crate::store::record::Change;
use crate::store::wheel::Polled;
use crate::StoreError;

/// How many expiries re-filing one chunk of a cascade counts as, in a timeout budget: a
/// chunk (`REFILE_CHUNK` items) takes about 4 us, as long as 7 expiries of ~0.6 us
/// (median of the 7,800 chunks of a million-task expiry, timed one by one).
const REFILE_COST: usize = 8;

impl<W> StoreMachine<W> {
    // ----- time and outputs ---------------------------------------------------------

    /// Reclaims expired tasks and times out waits, at most `budget` timers per call so a
    /// mass expiry never stalls other work. Returns true if more are already due.
    pub fn handle_timeout(&mut self, now: Now, budget: usize) -> bool {
        let now = self.observe(now);
        let mut spent = 0usize;
        while spent < budget {
            if let Some(entry) = self.wait_deadlines.first_entry() {
                if entry.key().0 <= now.mono {
                    let ((at, waiter), id) = entry.remove_entry();
                    // Called late, the task's own deadline may have come first: then the
                    // waiter gets what the task's expiry gives it, as it would have on time.
                    let expired_first = self
                        .tasks
                        .get(&id)
                        .and_then(|entry| entry.expires_at)
                        .is_some_and(|expires| expires <= at);
                    if expired_first {
                        self.settle(id, now);
                    }
                    self.time_out_waiter(id, waiter);
                    spent += 1;
                    continue;
                }
            }
            spent += match self.wheel.poll_bounded(now.mono.0) {
                Polled::Item(_, id) => {
                    self.settle(id, now);
                    1
                }
                // Re-filing a chunk of a big cascade costs about as much as this many
                // expiries.
                Polled::Busy => REFILE_COST,
                Polled::Idle => return false,
            };
        }
        self.poll_timeout().is_some_and(|at| at <= now.mono)
    }

    /// The next moment [`handle_timeout`](Self::handle_timeout) has work (never later than
    /// the earliest deadline; sometimes earlier, which costs one spurious wake-up).
    pub fn poll_timeout(&self) -> Option<Millis> {
        let task = self.wheel.next_expiration().map(Millis);
        let wait = self.wait_deadlines.keys().next().map(|&(at, _)| at);
        match (task, wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Applies the expiry policy to `id` if its deadline has passed, as often as needed
    /// (a task failed by expiry can be past its grace too).
    pub(super) fn settle(&mut self, id: TaskId, now: Now) {
        while let Some(entry) = self.tasks.get(&id) {
            if !entry.is_due(now) {
                return;
            }
            let at = entry.expires_at.expect("a due task has a deadline");
            let running = !entry.status.is_terminal();
            let ttl = entry.ttl.unwrap_or_default();
            // Only a task with someone waiting on it has waits to look at: a plain expiry
            // (the mass-expiry path) costs no second lookup.
            if entry.extra.as_ref().is_some_and(|x| !x.waiters.is_empty()) {
                self.time_out_waits_due_before(id, at);
            }
            match self.config.expiry {
                ExpiryPolicy::Fail { grace } if running => {
                    let message =
                        format!("task expired: its TTL of {ttl} ms ran out before it finished");
                    let entry = self.tasks.get_mut(&id).expect("checked above");
                    entry.expired = true;
                    *self.lingering.entry(entry.session.clone()).or_default() += 1;
                    self.lingering_total += 1;
                    self.finish(now, id, TaskStatus::Failed, Some(message), None);
                    let next = at.plus(duration_ms(grace));
                    self.tasks.get_mut(&id).expect("checked above").expires_at = Some(next);
                    self.wheel.insert(next.0, id);
                }
                _ => self.remove(id),
            }
        }
    }

    fn remove(&mut self, id: TaskId) {
        let Some((seq, entry)) = self.tasks.remove(&id) else {
            return;
        };
        self.touch(id, Change::Removed);
        if entry.expired {
            if let Some(count) = self.lingering.get_mut(&entry.session) {
                *count -= 1;
                self.lingering_total -= 1;
                if *count == 0 {
                    self.lingering.remove(&entry.session);
                }
            }
        }
        if let Some(index) = self.sessions.get_mut(&entry.session) {
            index.remove(seq);
            if index.is_empty() {
                self.sessions.remove(&entry.session);
            }
        }
        if let Some(extra) = entry.extra {
            if let Some(token) = &extra.cancel {
                self.signal_stop(token);
            }
            self.parked -= extra.waiters.len();
            for waiter in extra.waiters {
                forget_deadline(&mut self.wait_deadlines, &waiter);
                let outcome = match waiter.kind {
                    WaitKind::Terminal => WakeOutcome::Terminal(Err(StoreError::NotFound)),
                    WaitKind::Input(_) => WakeOutcome::Input(Err(StoreError::NotFound)),
                };
                self.wakes.push_back(Wake {
                    token: waiter.token,
                    outcome,
                });
            }
        }
        if self.events_enabled {
            self.events.push_back(StoreEvent::Expired {
                task_id: id,
                session: entry.session,
            });
        }
    }
}
