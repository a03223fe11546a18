//! Status changes and results: [`update_status`](StoreMachine::update_status),
//! [`set_status_message`](StoreMachine::set_status_message),
//! [`store_result`](StoreMachine::store_result), [`cancel`](StoreMachine::cancel) and the
//! cancellation token; and `finish`, the one way a task becomes terminal (it wakes the
//! task's waiters and, on a cancel or an expiry, fires its token), used by expiry and
//! recovery too.

use super::waits::forget_deadline;
use super::{snapshot_of, StoreMachine, WaitKind, Wake, WakeOutcome};
use crate::model::{CancelOutcome, Outcome, SessionId, Task, TaskId, TaskStatus};
use crate::store::clock::Now;
use crate::store::record::Change;
use crate::store::token::CancelToken;
use crate::StoreError;

impl<W> StoreMachine<W> {
    // ----- mutations ----------------------------------------------------------------

    /// Moves a live task to `status` with `message` as its status message (`None` clears
    /// it). A terminal `status` ends the task without an outcome. Moving to `working` while
    /// input requests are pending is refused: resolve them instead.
    pub fn update_status(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        let entry = self.visible(id, session)?;
        if !entry.status.can_transition_to(status) {
            return Err(StoreError::InvalidTransition {
                from: entry.status,
                to: status,
            });
        }
        if status == TaskStatus::Working && entry.pending_inputs() > 0 {
            return Err(StoreError::InvalidArgument(
                "the task has pending input requests; resolve them to resume it".into(),
            ));
        }
        if status.is_terminal() {
            return Ok(self.finish(now, id, status, message, None));
        }
        let entry = self.tasks.get_mut(&id).expect("visible task exists");
        entry.status = status;
        entry.status_message = message.map(String::into_boxed_str);
        entry.stamp(now);
        Ok(self.changed(id))
    }

    /// Sets a live task's status message (`None` clears it) and keeps its status, which is
    /// read and written back in one step: a status change made meanwhile by another caller
    /// (a question asked, a cancel) is never undone. Terminal tasks refuse with
    /// `InvalidTransition`.
    pub fn set_status_message(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        let observed = self.observe(now);
        self.settle(id, observed);
        let status = self.visible(id, session)?.status;
        self.update_status(now, id, session, status, message)
    }

    /// Ends a live task as `completed` or `failed` with its outcome (a JSON-RPC error only
    /// as `failed`: `InvalidArgument` otherwise). On a task that is already terminal
    /// nothing changes and `AlreadyTerminal` carries the task: first writer wins, so a late
    /// completion never overwrites a cancel.
    pub fn store_result(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        if !matches!(status, TaskStatus::Completed | TaskStatus::Failed) {
            return Err(StoreError::InvalidArgument(format!(
                "a result can only be stored with status 'completed' or 'failed', not '{status}'"
            )));
        }
        if status == TaskStatus::Completed && matches!(outcome, Outcome::Error(_)) {
            // A completed task answers with a result; its error would have nowhere to go.
            return Err(StoreError::InvalidArgument(
                "a JSON-RPC error can only be stored with status 'failed'".into(),
            ));
        }
        let now = self.observe(now);
        self.live(now, id, session)?;
        Ok(self.finish(now, id, status, message, Some(outcome)))
    }

    /// Cancels a live task before returning and fires its cancellation token (while
    /// journaling, once [`poll_stop`](Self::poll_stop) hands it out). A terminal
    /// task is left alone and reported with `cancelled: false` (idempotent).
    pub fn cancel(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<CancelOutcome, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        let entry = self.visible(id, session)?;
        if entry.status.is_terminal() {
            return Ok(CancelOutcome {
                task: self.snapshot(id, entry),
                cancelled: false,
            });
        }
        let task = self.finish(now, id, TaskStatus::Cancelled, message, None);
        Ok(CancelOutcome {
            task,
            cancelled: true,
        })
    }

    /// The token that tells the task's worker to stop (already fired if the task was
    /// cancelled or expired).
    pub fn cancel_token(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<CancelToken, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        self.visible(id, session)?;
        let entry = self.tasks.get_mut(&id).expect("visible task exists");
        let fired = entry.stop_signalled();
        let extra = entry.extra.get_or_insert_with(Default::default);
        let token = extra.cancel.get_or_insert_with(CancelToken::new).clone();
        if fired {
            self.signal_stop(&token);
        }
        Ok(token)
    }

    /// Moves a live task to a terminal status and wakes everyone waiting on it.
    pub(super) fn finish(
        &mut self,
        now: Now,
        id: TaskId,
        status: TaskStatus,
        message: Option<String>,
        outcome: Option<Outcome>,
    ) -> Task {
        self.touch(id, Change::Updated);
        let poll_interval_ms = self.poll_interval_ms;
        let entry = self.tasks.get_mut(&id).expect("finish on a live task");
        debug_assert!(!entry.status.is_terminal());
        entry.status = status;
        entry.status_message = message.map(String::into_boxed_str);
        entry.outcome = outcome;
        entry.stamp(now);
        let stop = entry.stop_signalled();
        let extra = entry.extra.take();
        let task = snapshot_of(poll_interval_ms, id, entry);
        if let Some(mut extra) = extra {
            extra.pending.clear();
            extra.answers.clear();
            if stop {
                if let Some(token) = &extra.cancel {
                    self.signal_stop(token);
                }
            }
            self.parked -= extra.waiters.len();
            for waiter in extra.waiters.drain(..) {
                forget_deadline(&mut self.wait_deadlines, &waiter);
                let outcome = match waiter.kind {
                    WaitKind::Terminal => WakeOutcome::Terminal(Ok(task.clone())),
                    WaitKind::Input(_) => {
                        WakeOutcome::Input(Err(StoreError::AlreadyTerminal(Box::new(task.clone()))))
                    }
                };
                self.wakes.push_back(Wake {
                    token: waiter.token,
                    outcome,
                });
            }
            // Keep the used keys and the token: keys stay unique for the task's whole life.
            self.tasks.get_mut(&id).expect("still there").extra = Some(extra);
        }
        self.emit_status(&task, id);
        task
    }
}
