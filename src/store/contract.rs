//! The task-store contract as a trait, the pluggable interface the official SDKs expose
//! (`IMcpTaskStore` in C#, `TaskStore` in TypeScript). The protocol and server layers depend
//! on this trait only, so another backend can be plugged in.

use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::Value;

use super::handle::StoreHandle;
use super::stop::WaitStop;
use super::token::CancelToken;
use crate::model::{
    CancelOutcome, CreateTask, InputRequests, InputResponses, Outcome, SessionId, StoreEvent, Task,
    TaskDetail, TaskId, TaskPage, TaskResult, TaskStatus,
};
use crate::StoreError;

/// How often [`TaskStore::wait_terminal_or_stop`]'s default looks at its stop.
pub const STOP_POLL: Duration = Duration::from_secs(1);

/// Blocking task-store operations with the semantics of DESIGN.md §3. Implementations must
/// be strongly consistent (a created task is visible to `get` before `create` returns),
/// keep sessions strict (a foreign task is indistinguishable from an unknown one), and treat
/// terminal states as absorbing.
pub trait TaskStore: Send + Sync {
    /// Creates a task in `working` with a fresh unguessable id.
    fn create(&self, req: CreateTask) -> Result<Task, StoreError>;
    /// The task, or `NotFound` for unknown, foreign-session or expired ids.
    fn get(&self, id: TaskId, session: Option<&SessionId>) -> Result<Task, StoreError>;
    /// The task with its session, origin, pending input requests and outcome.
    fn get_detail(&self, id: TaskId, session: Option<&SessionId>)
        -> Result<TaskDetail, StoreError>;
    /// Moves a live task to another status; terminal tasks refuse with `InvalidTransition`.
    fn update_status(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<Task, StoreError>;
    /// Sets a live task's status message (`None` clears it) and keeps its status; terminal
    /// tasks refuse with `InvalidTransition`. The default reads the status and writes it
    /// back, so a status change made in between by another caller is undone: a store that
    /// can do both in one step should (the crate's own store does).
    fn set_status_message(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        let status = self.get(id, session)?.status;
        self.update_status(id, session, status, message)
    }
    /// Ends a live task as `completed` or `failed` with its outcome (a JSON-RPC error only
    /// as `failed`); on a terminal task nothing changes and `AlreadyTerminal` carries it.
    fn store_result(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<Task, StoreError>;
    /// The stored outcome; `NoResult` for a task without one.
    fn get_result(&self, id: TaskId, session: Option<&SessionId>)
        -> Result<TaskResult, StoreError>;
    /// Blocks until the task is terminal, it disappears, or `timeout` passes.
    fn wait_terminal(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
    ) -> Result<Task, StoreError>;
    /// [`wait_terminal`](Self::wait_terminal) that another thread can end early with
    /// [`WaitStop::stop`], which makes it return `Stopped`; a stop that already fired makes
    /// it return `Stopped` without waiting. The server waits for a `tasks/result` this way.
    ///
    /// The default waits in slices of [`STOP_POLL`] (on the store's clock) and looks at the
    /// stop between them, so a stop takes up to one slice to act; [`StoreHandle`] ends its
    /// wait at once.
    fn wait_terminal_or_stop(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
        stop: &WaitStop,
    ) -> Result<Task, StoreError> {
        let mut left = timeout;
        loop {
            if stop.is_stopped() {
                return Err(StoreError::Stopped);
            }
            let slice = left.map_or(STOP_POLL, |left| left.min(STOP_POLL));
            match self.wait_terminal(id, session, Some(slice)) {
                Err(StoreError::Timeout) => {
                    if let Some(left) = &mut left {
                        *left -= slice;
                        if left.is_zero() {
                            return Err(StoreError::Timeout);
                        }
                    }
                }
                other => return other,
            }
        }
    }
    /// One page of the caller's tasks in creation order, after an opaque cursor.
    fn list(
        &self,
        session: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<TaskPage, StoreError>;
    /// Cancels a live task before returning; a terminal task is reported unchanged.
    fn cancel(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<CancelOutcome, StoreError>;
    /// Adds input requests (keys unique over the task's life) and moves it to
    /// `input_required`.
    fn set_input_requests(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        requests: InputRequests,
    ) -> Result<Task, StoreError>;
    /// Answers pending input requests; keys not outstanding are ignored.
    fn resolve_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        responses: InputResponses,
    ) -> Result<Task, StoreError>;
    /// Blocks until the input request `key` is answered; the answer is handed out once, and
    /// one caller at a time may wait for it.
    fn wait_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        key: &str,
        timeout: Option<Duration>,
    ) -> Result<Value, StoreError>;
    /// The token that tells the task's worker to stop.
    fn cancel_token(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<CancelToken, StoreError>;
    /// A channel of status events that never slows the store down.
    fn subscribe(&self) -> Result<Receiver<StoreEvent>, StoreError>;
}

impl TaskStore for StoreHandle {
    fn create(&self, req: CreateTask) -> Result<Task, StoreError> {
        StoreHandle::create(self, req)
    }
    fn get(&self, id: TaskId, session: Option<&SessionId>) -> Result<Task, StoreError> {
        StoreHandle::get(self, id, session)
    }
    fn get_detail(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<TaskDetail, StoreError> {
        StoreHandle::get_detail(self, id, session)
    }
    fn update_status(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        StoreHandle::update_status(self, id, session, status, message)
    }
    fn set_status_message(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        StoreHandle::set_status_message(self, id, session, message)
    }
    fn store_result(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        StoreHandle::store_result(self, id, session, status, outcome, message)
    }
    fn get_result(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<TaskResult, StoreError> {
        StoreHandle::get_result(self, id, session)
    }
    fn wait_terminal(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
    ) -> Result<Task, StoreError> {
        StoreHandle::wait_terminal(self, id, session, timeout)
    }
    fn wait_terminal_or_stop(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
        stop: &WaitStop,
    ) -> Result<Task, StoreError> {
        StoreHandle::wait_terminal_or_stop(self, id, session, timeout, stop)
    }
    fn list(
        &self,
        session: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        StoreHandle::list(self, session, cursor)
    }
    fn cancel(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<CancelOutcome, StoreError> {
        StoreHandle::cancel(self, id, session, message)
    }
    fn set_input_requests(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        requests: InputRequests,
    ) -> Result<Task, StoreError> {
        StoreHandle::set_input_requests(self, id, session, requests)
    }
    fn resolve_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        responses: InputResponses,
    ) -> Result<Task, StoreError> {
        StoreHandle::resolve_input(self, id, session, responses)
    }
    fn wait_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        key: &str,
        timeout: Option<Duration>,
    ) -> Result<Value, StoreError> {
        StoreHandle::wait_input(self, id, session, key, timeout)
    }
    fn cancel_token(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<CancelToken, StoreError> {
        StoreHandle::cancel_token(self, id, session)
    }
    fn subscribe(&self) -> Result<Receiver<StoreEvent>, StoreError> {
        StoreHandle::subscribe(self)
    }
}
