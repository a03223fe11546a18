//! Parked waiters: [`wait_terminal`](StoreMachine::wait_terminal), parking a waiter, and
//! ending waits early (stopped by their caller, or timed out) with the bookkeeping of timed
//! waits' deadlines. `wait_input` lives with the input requests; `finish`, expiry and
//! resolved inputs answer waiters through the helpers here.

use std::collections::BTreeMap;

use super::{StoreMachine, WaitKind, Waiter, Wake, WakeOutcome};
use crate::model::{LimitScope, SessionId, TaskId};
use crate::store::clock::{Millis, Now};
use crate::StoreError;

impl<W> StoreMachine<W> {
    // ----- waiting ------------------------------------------------------------------

    /// Parks `token` until the task is terminal (answered with the task), it disappears
    /// (`NotFound`) or `deadline` passes (`Timeout`). The answer comes out of
    /// [`poll_wake`](Self::poll_wake), immediately if it is already known.
    pub fn wait_terminal(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        deadline: Option<Millis>,
        token: W,
    ) {
        let now = self.observe(now);
        self.settle(id, now);
        let ready = match self.visible(id, session) {
            Err(e) => Some(Err(e)),
            Ok(entry) if entry.status.is_terminal() => Some(Ok(self.snapshot(id, entry))),
            Ok(_) if deadline.is_some_and(|d| d <= now.mono) => Some(Err(StoreError::Timeout)),
            Ok(_) => None,
        };
        match ready {
            Some(result) => self.wakes.push_back(Wake {
                token,
                outcome: WakeOutcome::Terminal(result),
            }),
            None => self.park(id, WaitKind::Terminal, deadline, token),
        }
    }

    pub(super) fn park(&mut self, id: TaskId, kind: WaitKind, deadline: Option<Millis>, token: W) {
        let limit = self.config.max_waiters_per_task;
        let entry = self.tasks.get_mut(&id).expect("parking on a live task");
        let extra = entry.extra.get_or_insert_with(Default::default);
        if extra.waiters.len() >= limit {
            let error = StoreError::LimitExceeded {
                scope: LimitScope::Waiters,
                limit,
            };
            let outcome = match kind {
                WaitKind::Terminal => WakeOutcome::Terminal(Err(error)),
                WaitKind::Input(_) => WakeOutcome::Input(Err(error)),
            };
            self.wakes.push_back(Wake { token, outcome });
            return;
        }
        let waiter_id = self.next_waiter;
        self.next_waiter += 1;
        self.parked += 1;
        extra.waiters.push(Waiter {
            id: waiter_id,
            kind,
            token,
            deadline,
        });
        if let Some(at) = deadline {
            self.wait_deadlines.insert((at, waiter_id), id);
        }
    }

    /// Times out the waits on `id` whose deadline came before `at` (the task's expiry, being
    /// settled late): they get `Timeout`, as they would have on time, not the expiry.
    pub(super) fn time_out_waits_due_before(&mut self, id: TaskId, at: Millis) {
        let due_before = |w: &Waiter<W>| w.deadline.is_some_and(|d| d < at);
        self.end_waits(id, due_before, StoreError::Timeout);
    }

    /// Ends the waits parked on `id` whose token `stopped` picks, answering them `Stopped`:
    /// their caller gave up on them (see [`WaitStop`](crate::WaitStop)). Waits already
    /// answered, or on a task that is gone, are left alone.
    pub fn stop_waits(&mut self, id: TaskId, stopped: impl Fn(&W) -> bool) {
        self.end_waits(id, |w| stopped(&w.token), StoreError::Stopped);
    }

    /// Answers the waits on `id` that `pick` picks with `why`, and forgets them.
    fn end_waits(&mut self, id: TaskId, pick: impl Fn(&Waiter<W>) -> bool, why: StoreError) {
        let Some(extra) = self.tasks.get_mut(&id).and_then(|e| e.extra.as_mut()) else {
            return;
        };
        if !extra.waiters.iter().any(&pick) {
            return;
        }
        // One pass, however many waiters (up to `max_waiters_per_task`) end.
        let (ending, kept) = std::mem::take(&mut extra.waiters)
            .into_iter()
            .partition(pick);
        extra.waiters = kept;
        for waiter in ending {
            forget_deadline(&mut self.wait_deadlines, &waiter);
            self.parked -= 1;
            self.wakes.push_back(ended(waiter, why.clone()));
        }
    }

    /// Answers a timed wait whose deadline passed (its entry in `wait_deadlines` is already
    /// gone, or goes now).
    pub(super) fn time_out_waiter(&mut self, id: TaskId, waiter_id: u64) {
        let Some(extra) = self.tasks.get_mut(&id).and_then(|e| e.extra.as_mut()) else {
            return;
        };
        let Some(pos) = extra.waiters.iter().position(|w| w.id == waiter_id) else {
            return;
        };
        let waiter = extra.waiters.swap_remove(pos);
        self.parked -= 1;
        self.wakes.push_back(ended(waiter, StoreError::Timeout));
    }
}

/// The answer to a wait that ends without what it waited for (`why` says why not).
fn ended<W>(waiter: Waiter<W>, why: StoreError) -> Wake<W> {
    let outcome = match waiter.kind {
        WaitKind::Terminal => WakeOutcome::Terminal(Err(why)),
        WaitKind::Input(_) => WakeOutcome::Input(Err(why)),
    };
    Wake {
        token: waiter.token,
        outcome,
    }
}

/// Drops the deadline of a wait that is answered (or ends) before it times out, so nothing
/// is left behind to fire later.
pub(super) fn forget_deadline<W>(
    deadlines: &mut BTreeMap<(Millis, u64), TaskId>,
    waiter: &Waiter<W>,
) {
    if let Some(at) = waiter.deadline {
        deadlines.remove(&(at, waiter.id));
    }
}
