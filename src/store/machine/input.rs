//! Input requests (SEP-2663): a worker sets pending requests and waits for each answer
//! ([`wait_input`](StoreMachine::wait_input)), a client resolves them. Separate because
//! their rules are their own: keys are unique over a task's whole life, and each answer is
//! handed over once (to the caller waiting for it, or to the next one that asks).

use super::waits::forget_deadline;
use super::{StoreMachine, WaitKind, Wake, WakeOutcome};
use crate::model::{InputRequests, InputResponses, SessionId, Task, TaskId, TaskStatus};
use crate::store::clock::{Millis, Now};
use crate::store::record::Change;
use crate::StoreError;

/// Most input request keys one task may use over its life; bounds a hostile worker.
const MAX_INPUT_KEYS_PER_TASK: usize = 10_000;

impl<W> StoreMachine<W> {
    /// Adds input requests to a live task and moves it to `input_required`. Keys merge with
    /// those already pending; a key used before on this task is refused (nothing applied).
    /// A terminal task is never revived: `AlreadyTerminal`.
    pub fn set_input_requests(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        requests: InputRequests,
    ) -> Result<Task, StoreError> {
        if requests.is_empty() {
            return Err(StoreError::InvalidArgument(
                "at least one input request is needed".into(),
            ));
        }
        let now = self.observe(now);
        self.live(now, id, session)?;
        let entry = self.tasks.get_mut(&id).expect("visible task exists");
        let extra = entry.extra.get_or_insert_with(Default::default);
        if let Some(key) = requests.keys().find(|k| extra.used_keys.contains(*k)) {
            return Err(StoreError::InputKeyReused { key: key.clone() });
        }
        if extra.used_keys.len() + requests.len() > MAX_INPUT_KEYS_PER_TASK {
            return Err(StoreError::InvalidArgument(format!(
                "a task may use at most {MAX_INPUT_KEYS_PER_TASK} input request keys"
            )));
        }
        for (key, request) in requests {
            extra.used_keys.insert(key.clone());
            extra.pending.insert(key, request);
        }
        entry.status = TaskStatus::InputRequired;
        entry.stamp(now);
        Ok(self.changed(id))
    }

    /// Answers pending input requests. Keys that are not pending (never issued, or answered
    /// already) are ignored; each answered key wakes the worker waiting on it; when none is
    /// left pending the task goes back to `working`. A terminal task is never revived.
    pub fn resolve_input(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        responses: InputResponses,
    ) -> Result<Task, StoreError> {
        let now = self.observe(now);
        self.live(now, id, session)?;
        let entry = self.tasks.get_mut(&id).expect("visible task exists");
        let Some(extra) = entry.extra.as_mut() else {
            return Ok(self.snapshot(id, &self.tasks[&id]));
        };
        let mut resolved = false;
        for (key, response) in responses {
            if extra.pending.remove(&key).is_none() {
                continue;
            }
            resolved = true;
            let waiter = extra
                .waiters
                .iter()
                .position(|w| matches!(&w.kind, WaitKind::Input(k) if *k == key));
            match waiter {
                Some(pos) => {
                    let waiter = extra.waiters.swap_remove(pos);
                    self.parked -= 1;
                    forget_deadline(&mut self.wait_deadlines, &waiter);
                    self.wakes.push_back(Wake {
                        token: waiter.token,
                        outcome: WakeOutcome::Input(Ok(response)),
                    });
                }
                None => {
                    extra.answers.insert(key, response);
                }
            }
        }
        if !resolved {
            return Ok(self.snapshot(id, &self.tasks[&id]));
        }
        if extra.pending.is_empty() && entry.status == TaskStatus::InputRequired {
            entry.status = TaskStatus::Working;
        }
        entry.stamp(now);
        Ok(self.changed(id))
    }

    /// Parks `token` until the input request `key` is answered (answered with the response),
    /// the task ends (`AlreadyTerminal`), disappears (`NotFound`) or `deadline` passes. An
    /// answer that arrived before the wait is handed over at once, so no wake-up is lost.
    ///
    /// An answer is handed over once, so only one caller waits for a key at a time: a second
    /// wait while one is parked is refused at once (`InvalidArgument`) rather than parked
    /// for an answer that would go to the first.
    pub fn wait_input(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        key: &str,
        deadline: Option<Millis>,
        token: W,
    ) {
        let now = self.observe(now);
        self.settle(id, now);
        let ready = match self.visible(id, session) {
            Err(e) => Some(Err(e)),
            Ok(_) => {
                let entry = self.tasks.get_mut(&id).expect("visible task exists");
                let answer = entry.extra.as_mut().and_then(|x| x.answers.remove(key));
                if answer.is_some() {
                    self.touch(id, Change::Updated);
                }
                let entry = &self.tasks[&id];
                let pending = entry
                    .extra
                    .as_ref()
                    .is_some_and(|x| x.pending.contains_key(key));
                let awaited = entry.extra.as_ref().is_some_and(|x| {
                    x.waiters
                        .iter()
                        .any(|w| matches!(&w.kind, WaitKind::Input(k) if k == key))
                });
                match answer {
                    Some(value) => Some(Ok(value)),
                    None if entry.status.is_terminal() => Some(Err(StoreError::AlreadyTerminal(
                        Box::new(self.snapshot(id, &self.tasks[&id])),
                    ))),
                    None if !pending => Some(Err(StoreError::UnknownInputKey { key: key.into() })),
                    None if awaited => Some(Err(StoreError::InvalidArgument(format!(
                        "input request {key:?} already has a caller waiting for its answer, \
                         which is handed out once"
                    )))),
                    None if deadline.is_some_and(|d| d <= now.mono) => {
                        Some(Err(StoreError::Timeout))
                    }
                    None => None,
                }
            }
        };
        match ready {
            Some(result) => self.wakes.push_back(Wake {
                token,
                outcome: WakeOutcome::Input(result),
            }),
            None => self.park(id, WaitKind::Input(key.into()), deadline, token),
        }
    }
}
