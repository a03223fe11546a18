//! What a running tool can see and do: its task, cancellation, status messages, and
//! requests to the client (elicitation, sampling) that put the task in `input_required`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::model::{SessionId, TaskId, TaskStatus};
use crate::protocol::jsonrpc::INTERNAL_ERROR;
use crate::protocol::{v2025, RpcError};
use crate::store::CancelToken;
use crate::{StoreError, TaskStore};

/// Sends requests to the client on behalf of a tool and blocks for the answer.
pub trait ClientPeer: Send + Sync {
    /// Sends `method` with `params` and waits for the response. `task` ties the request to
    /// a task: the wait ends early, with an error, if that task ends.
    fn request(&self, method: &str, params: Value, task: Option<TaskId>)
        -> Result<Value, RpcError>;
}

/// The run of a tool was cancelled (the task was cancelled, expired or vanished).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Cancelled;

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the task was cancelled")
    }
}

impl std::error::Error for Cancelled {}

impl From<Cancelled> for RpcError {
    fn from(_: Cancelled) -> Self {
        RpcError::new(INTERNAL_ERROR, "the task was cancelled")
    }
}

/// The context a tool runs in. For a plain (non-task) call there is no task: status
/// messages are ignored and the run is never cancelled.
pub struct TaskContext {
    task: Option<TaskId>,
    session: Option<SessionId>,
    store: Arc<dyn TaskStore>,
    token: CancelToken,
    peer: Arc<dyn ClientPeer>,
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("task", &self.task)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl TaskContext {
    pub(crate) fn new(
        task: Option<TaskId>,
        session: Option<SessionId>,
        store: Arc<dyn TaskStore>,
        token: CancelToken,
        peer: Arc<dyn ClientPeer>,
    ) -> TaskContext {
        TaskContext {
            task,
            session,
            store,
            token,
            peer,
        }
    }

    /// The task this run belongs to, if it is a task.
    pub fn task_id(&self) -> Option<TaskId> {
        self.task
    }

    /// True once the task was cancelled or expired: the tool should stop soon.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Sets the task's status message (progress for the humans polling it).
    pub fn set_status_message(&self, message: impl Into<String>) -> Result<(), StoreError> {
        let Some(id) = self.task else { return Ok(()) };
        let task = self.store.get(id, self.session.as_ref())?;
        self.store
            .update_status(id, self.session.as_ref(), task.status, Some(message.into()))
            .map(|_| ())
    }

    /// Sleeps for `duration`, waking at once (with `Cancelled`) if the task ends meanwhile.
    /// It waits on the store rather than polling the token.
    pub fn sleep(&self, duration: Duration) -> Result<(), Cancelled> {
        let Some(id) = self.task else {
            std::thread::sleep(duration);
            return Ok(());
        };
        match self
            .store
            .wait_terminal(id, self.session.as_ref(), Some(duration))
        {
            Err(StoreError::Timeout) => Ok(()),
            _ => Err(Cancelled),
        }
    }

    /// Asks the client for input through `elicitation/create` and blocks for its answer.
    /// While it waits, the task is `input_required`.
    pub fn elicit(&self, params: Value) -> Result<Value, RpcError> {
        self.ask("elicitation/create", params)
    }

    /// Asks the client's model through `sampling/createMessage` and blocks for its answer.
    pub fn sample(&self, params: Value) -> Result<Value, RpcError> {
        self.ask("sampling/createMessage", params)
    }

    fn ask(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let Some(id) = self.task else {
            return self.peer.request(method, params, None);
        };
        let session = self.session.as_ref();
        self.store
            .update_status(id, session, TaskStatus::InputRequired, None)
            .map_err(|_| RpcError::from(Cancelled))?;
        let answer = self
            .peer
            .request(method, v2025::with_related_task(params, id), Some(id));
        // Back to work, unless the task ended meanwhile (then this fails harmlessly).
        let _ = self
            .store
            .update_status(id, session, TaskStatus::Working, None);
        answer
    }
}
