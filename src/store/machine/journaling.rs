//! What a journal needs from the machine: change tracking (`touch`,
//! [`take_changes`](StoreMachine::take_changes)), the durable records of live tasks, and
//! [`restore`](StoreMachine::restore), which rebuilds a machine from those records after a
//! restart (deadlines recomputed, TTLs capped, tasks still running failed if asked).

use super::{Entry, Extra, StoreMachine};
use crate::model::{Outcome, TaskId, TaskStatus};
use crate::store::clock::Now;
use crate::store::config::{duration_ms, ExpiryPolicy, StoreConfig};
use crate::store::record::{Change, OutcomeRecord, RecoveryPolicy, TaskRecord};
use crate::StoreError;

/// Sequence numbers a restore accepts stay below this: far past any real store's count of
/// creates (2^63 of them), and far enough from `u64::MAX` that numbering new tasks never
/// overflows. A damaged journal holding larger ones is refused, not wrapped.
const SEQ_LIMIT: u64 = 1 << 63;

impl<W> StoreMachine<W> {
    // ----- journal --------------------------------------------------------------------

    /// Starts (or stops) tracking which tasks change, for a journal to write after each
    /// batch of commands.
    pub fn set_journaling(&mut self, on: bool) {
        self.journaling = on;
        self.changes.clear();
    }

    /// The tasks changed since the last call, each with what to write about it.
    pub fn take_changes(&mut self) -> Vec<(TaskId, Change)> {
        let mut changes: Vec<(TaskId, Change)> = self.changes.drain().collect();
        changes.sort_unstable_by_key(|(id, _)| *id);
        changes
    }

    /// The next creation sequence number (journals persist it so listings stay ordered).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The secret that binds cursors to sessions (journals persist it so cursors survive a
    /// restart).
    pub fn cursor_key(&self) -> u64 {
        self.cursor_key
    }

    /// The durable record of a live task; `with_origin` includes the originating request.
    pub fn record(&self, id: TaskId, with_origin: bool) -> Option<TaskRecord> {
        let entry = self.tasks.get(&id)?;
        let extra = entry.extra.as_deref();
        Some(TaskRecord {
            id,
            seq: self.tasks.seq_of(&id)?,
            status: entry.status,
            expired: entry.expired,
            message: entry.status_message.as_deref().map(str::to_owned),
            created_at: entry.created_at,
            last_updated_at: entry.last_updated_at,
            ttl: entry.ttl,
            session: entry.session.clone(),
            origin: if with_origin {
                entry.origin.clone()
            } else {
                None
            },
            outcome: entry.outcome.as_ref().map(OutcomeRecord::from),
            pending: extra.map(|x| x.pending.clone()).unwrap_or_default(),
            answers: extra
                .map(|x| {
                    x.answers
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            used_keys: extra
                .map(|x| {
                    let mut keys: Vec<String> = x.used_keys.iter().cloned().collect();
                    keys.sort();
                    keys
                })
                .unwrap_or_default(),
        })
    }

    /// The full records of the live tasks created after sequence number `after` (all with
    /// `None`), in creation order: a snapshot taken a few at a time.
    pub fn records_after(&self, after: Option<u64>) -> impl Iterator<Item = TaskRecord> + '_ {
        self.tasks
            .iter_after(after)
            .filter_map(|(_, entry)| self.record(entry.id, true))
    }

    /// Every live task's full record, in creation order (a snapshot).
    pub fn records(&self) -> Vec<TaskRecord> {
        self.tasks
            .iter()
            .filter_map(|entry| self.record(entry.id, true))
            .collect()
    }

    /// Rebuilds a machine from recovered records. TTL deadlines are recomputed from each
    /// task's wall-clock creation time, so a task whose TTL passed while the process was
    /// down expires on the first `handle_timeout(now)`; a task failed by expiry keeps the
    /// rest of its grace. A task dated ahead of `now` (a clock set back across the restart)
    /// has no more left than it had at its last change; `max_ttl` caps every recovered task (also one created under a
    /// looser configuration or with no TTL; it still counts from creation), and without one
    /// [`StoreConfig::MAX_DURATION`] caps those with a TTL. Tasks still running follow
    /// `policy`. Journaling starts enabled, and the recovery's own changes (failed and
    /// capped tasks) are pending in [`take_changes`](Self::take_changes).
    pub fn restore(
        config: StoreConfig,
        cursor_key: u64,
        next_seq: u64,
        records: impl IntoIterator<Item = TaskRecord>,
        now: Now,
        policy: RecoveryPolicy,
    ) -> Result<StoreMachine<W>, StoreError> {
        let mut machine = StoreMachine::new(config, cursor_key)?;
        machine.journaling = true;
        let now = machine.observe(now);
        let out_of_range = |what: &str, seq: u64| {
            StoreError::InvalidArgument(format!(
                "{what} {seq} is out of range (sequence numbers stay below {SEQ_LIMIT})"
            ))
        };
        if next_seq >= SEQ_LIMIT {
            return Err(out_of_range("the next sequence number", next_seq));
        }
        let mut capped = 0usize;
        for record in records {
            if record.seq >= SEQ_LIMIT {
                return Err(out_of_range(
                    "a recovered task's sequence number",
                    record.seq,
                ));
            }
            machine.next_seq = machine.next_seq.max(record.seq + 1);
            capped += usize::from(machine.insert_record(record, now));
        }
        if capped > 0 {
            // Lowering max_ttl can expire many old tasks at start; say why they went.
            log::warn!("recovery capped the TTL of {capped} tasks at max_ttl (or 100 years)");
        }
        machine.next_seq = machine.next_seq.max(next_seq);
        // A record numbered 2^63 - 1 leaves no number for the next task.
        if machine.next_seq >= SEQ_LIMIT {
            return Err(out_of_range("the next sequence number", machine.next_seq));
        }
        if policy == RecoveryPolicy::FailRunning {
            // Tasks whose TTL ran out while the process was down expire first, under the
            // expiry policy (a failed task keeps its grace); only the rest failed for the
            // restart.
            while machine.handle_timeout(now, usize::MAX) {}
            let running: Vec<TaskId> = machine
                .tasks
                .iter()
                .filter(|e| !e.status.is_terminal())
                .map(|e| e.id)
                .collect();
            for id in running {
                let message = "the server restarted before the task finished".to_string();
                machine.finish(now, id, TaskStatus::Failed, Some(message), None);
            }
        }
        Ok(machine)
    }

    /// Inserts one recovered task; true if `max_ttl` capped its TTL.
    fn insert_record(&mut self, mut record: TaskRecord, now: Now) -> bool {
        // A journal never holds two live tasks with one id or one sequence number; if a
        // damaged one does, the first wins rather than two tasks sharing a key.
        if self.tasks.contains_key(&record.id) || self.tasks.by_seq(record.seq).is_some() {
            log::warn!(
                "recovery skipped a second record for task {} (seq {})",
                record.id,
                record.seq
            );
            return false;
        }
        let ttl = self.config.cap_ttl(record.ttl);
        let capped = ttl != record.ttl;
        record.ttl = ttl;
        // Wall-clock deadline -> time left -> a deadline on this process's monotonic base.
        // Time has passed the record's own times, whatever this clock says: the time left
        // counts from no earlier than them, and is never more than the span the deadline
        // ends (the TTL, or the grace). A clock set back across the restart would otherwise
        // add its step to every TTL (also past `max_ttl`).
        let expires_at = record.ttl.map(|ttl| {
            let (deadline, span) = self.restored_deadline(&record, ttl);
            let since = now
                .wall
                .max(record.created_at)
                .max(record.last_updated_at)
                .as_millis();
            now.mono.plus(deadline.saturating_sub(since).min(span))
        });
        if let Some(at) = expires_at {
            self.wheel.insert(at.0, record.id);
        }
        let has_extra = !record.pending.is_empty()
            || !record.answers.is_empty()
            || !record.used_keys.is_empty();
        let extra = has_extra.then(|| {
            Box::new(Extra {
                pending: record.pending,
                answers: record.answers.into_iter().collect(),
                used_keys: record.used_keys.into_iter().collect(),
                waiters: Vec::new(),
                cancel: None,
            })
        });
        // Only a task failed by expiry lingers; a record that says `expired` of a task
        // still running (a damaged one) is not believed, or its expiry would count twice.
        let expired = record.expired && record.status == TaskStatus::Failed;
        if expired {
            *self.lingering.entry(record.session.clone()).or_default() += 1;
            self.lingering_total += 1;
        }
        self.sessions
            .entry(record.session.clone())
            .or_default()
            .insert(record.seq);
        self.tasks.insert(
            record.seq,
            Entry {
                id: record.id,
                status: record.status,
                expired,
                status_message: record.message.map(String::into_boxed_str),
                created_at: record.created_at,
                last_updated_at: record.last_updated_at,
                ttl: record.ttl,
                expires_at,
                session: record.session,
                origin: record.origin,
                outcome: record.outcome.map(Outcome::from),
                extra,
            },
        );
        if capped {
            // Clients see the capped TTL from now on; the journal keeps it, not the old one.
            self.touch(record.id, Change::Updated);
        }
        capped
    }

    /// A recovered task's next deadline on the wall clock, in ms: its TTL from creation, or,
    /// for a task the `Fail` policy already failed, the end of the grace that began when it
    /// expired. The expiry bumped `last_updated_at` and a failed task changes no more, so
    /// that is when the running store started the grace; it can be well after the TTL (a
    /// task whose TTL ran out while the process was down expires at the next start). With
    /// it, the span that deadline ends (the TTL, or the grace): no more than that is left.
    fn restored_deadline(&self, record: &TaskRecord, ttl: u64) -> (u64, u64) {
        let ttl_ends = record.created_at.as_millis().saturating_add(ttl);
        match self.config.expiry {
            ExpiryPolicy::Fail { grace }
                if record.expired && record.status == TaskStatus::Failed =>
            {
                let grace = duration_ms(grace);
                let ends = ttl_ends
                    .max(record.last_updated_at.as_millis())
                    .saturating_add(grace);
                (ends, grace)
            }
            _ => (ttl_ends, ttl),
        }
    }

    pub(super) fn touch(&mut self, id: TaskId, change: Change) {
        if !self.journaling {
            return;
        }
        match self.changes.get(&id).copied() {
            None => {
                self.changes.insert(id, change);
            }
            Some(earlier) => match earlier.then(change) {
                Some(merged) => {
                    self.changes.insert(id, merged);
                }
                None => {
                    self.changes.remove(&id);
                }
            },
        }
    }
}
