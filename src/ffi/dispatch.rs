//! The store as `mcpts_handle_dispatch` hands it to the protocol adapters: a [`TaskStore`]
//! over a [`StoreHandle`] that bounds every wait by the host's timeout and remembers
//! whether the store answered `Closed`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::Value;

use crate::{
    CancelOutcome, CancelToken, CreateTask, InputRequests, InputResponses, Outcome, SessionId,
    StoreError, StoreEvent, StoreHandle, Task, TaskDetail, TaskId, TaskPage, TaskResult,
    TaskStatus, TaskStore, WaitStop,
};

/// Forwards every call to the handle, with two changes:
///
/// - A wait never lasts longer than the host's timeout. The adapters' `tasks/result` waits
///   with none, and answers a wait that runs out as it answers any store error (-32603
///   "Timed out waiting on the task"), so the protocol layer needs no timeout of its own.
/// - The adapters turn a `Closed` store into a JSON-RPC error response like any other; this
///   notes it, so that C gets `MCPTS_RESULT_CLOSED` instead of an `OK` whose body only says
///   so in prose.
pub(crate) struct DispatchStore<'a> {
    handle: &'a StoreHandle,
    /// The host's bound on any one wait; `None` for none.
    wait: Option<Duration>,
    closed: AtomicBool,
}

impl<'a> DispatchStore<'a> {
    pub(crate) fn new(handle: &'a StoreHandle, wait: Option<Duration>) -> DispatchStore<'a> {
        DispatchStore {
            handle,
            wait,
            closed: AtomicBool::new(false),
        }
    }

    /// The shorter of the adapter's timeout and the host's.
    fn bound(&self, timeout: Option<Duration>) -> Option<Duration> {
        match (timeout, self.wait) {
            (Some(asked), Some(host)) => Some(asked.min(host)),
            (asked, host) => asked.or(host),
        }
    }

    /// Whether any call answered `Closed`.
    pub(crate) fn saw_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    fn note<T>(&self, answer: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Closed) = answer {
            self.closed.store(true, Ordering::Relaxed);
        }
        answer
    }
}

impl TaskStore for DispatchStore<'_> {
    fn create(&self, req: CreateTask) -> Result<Task, StoreError> {
        self.note(self.handle.create(req))
    }
    fn get(&self, id: TaskId, session: Option<&SessionId>) -> Result<Task, StoreError> {
        self.note(self.handle.get(id, session))
    }
    fn get_detail(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<TaskDetail, StoreError> {
        self.note(self.handle.get_detail(id, session))
    }
    fn update_status(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        self.note(self.handle.update_status(id, session, status, message))
    }
    fn set_status_message(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        self.note(self.handle.set_status_message(id, session, message))
    }
    fn store_result(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        self.note(
            self.handle
                .store_result(id, session, status, outcome, message),
        )
    }
    fn get_result(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<TaskResult, StoreError> {
        self.note(self.handle.get_result(id, session))
    }
    fn wait_terminal(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
    ) -> Result<Task, StoreError> {
        self.note(self.handle.wait_terminal(id, session, self.bound(timeout)))
    }
    fn wait_terminal_or_stop(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
        stop: &WaitStop,
    ) -> Result<Task, StoreError> {
        self.note(
            self.handle
                .wait_terminal_or_stop(id, session, self.bound(timeout), stop),
        )
    }
    fn list(
        &self,
        session: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        self.note(self.handle.list(session, cursor))
    }
    fn cancel(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<CancelOutcome, StoreError> {
        self.note(self.handle.cancel(id, session, message))
    }
    fn set_input_requests(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        requests: InputRequests,
    ) -> Result<Task, StoreError> {
        self.note(self.handle.set_input_requests(id, session, requests))
    }
    fn resolve_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        responses: InputResponses,
    ) -> Result<Task, StoreError> {
        self.note(self.handle.resolve_input(id, session, responses))
    }
    fn wait_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        key: &str,
        timeout: Option<Duration>,
    ) -> Result<Value, StoreError> {
        self.note(
            self.handle
                .wait_input(id, session, key, self.bound(timeout)),
        )
    }
    fn cancel_token(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<CancelToken, StoreError> {
        self.note(self.handle.cancel_token(id, session))
    }
    fn subscribe(&self) -> Result<Receiver<StoreEvent>, StoreError> {
        self.note(self.handle.subscribe())
    }
}
