use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Origin, SessionId, TaskId, Timestamp};

/// The lifecycle state of a task, as both MCP revisions name it.
///
/// `working` and `input_required` are live; `completed`, `failed` and `cancelled` are
/// terminal and absorbing: once there, a task never changes status again.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The work is running.
    Working,
    /// The work waits for input from the requestor.
    InputRequired,
    /// The work finished and stored its outcome.
    Completed,
    /// The work failed, or the task expired before it finished.
    Failed,
    /// The requestor cancelled the task.
    Cancelled,
}

impl TaskStatus {
    /// True for `completed`, `failed` and `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// Whether the lifecycle allows moving from `self` to `to`: `working <-> input_required`,
    /// either to a terminal state, and a live state to itself (a message-only update).
    pub fn can_transition_to(self, to: TaskStatus) -> bool {
        match (self, to) {
            (from, _) if from.is_terminal() => false,
            // Every live state may move to any state, itself included.
            _ => true,
        }
    }

    /// The wire name (`"input_required"` and so on).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot of one task, shaped as MCP 2025-11-25 puts it on the wire.
///
/// `ttl` is always serialised (`null` means unlimited); `statusMessage` and `pollInterval`
/// are omitted when absent. Snapshots are owned copies: changing one never changes the store.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The task's unguessable id.
    pub task_id: TaskId,
    /// Current lifecycle state.
    pub status: TaskStatus,
    /// Human-readable detail about the status, e.g. why a task failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the task was created.
    pub created_at: Timestamp,
    /// When the task last changed.
    pub last_updated_at: Timestamp,
    /// Retention in milliseconds counted from creation; `None` (wire `null`) is unlimited.
    pub ttl: Option<u64>,
    /// Suggested polling interval in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<u64>,
}

/// What a caller asks for when creating a task.
#[derive(Clone, Debug, Default)]
pub struct CreateTask {
    /// Requested retention in milliseconds. `None` or `Some(0)` take the store's default;
    /// the store's maximum caps every task, including those that asked for none.
    pub ttl: Option<u64>,
    /// The session the task belongs to; `None` for a sessionless task.
    pub session: Option<SessionId>,
    /// The originating request (for example the JSON-RPC `tools/call` with its id), kept
    /// verbatim with the task and in the journal (an external worker recovering tasks
    /// finds there what to run).
    pub origin: Option<Origin>,
}

impl CreateTask {
    /// A request with the store's default TTL, no session and no origin.
    pub fn new() -> CreateTask {
        CreateTask::default()
    }

    /// Sets the requested TTL in milliseconds.
    pub fn ttl(mut self, ttl_ms: u64) -> CreateTask {
        self.ttl = Some(ttl_ms);
        self
    }

    /// Binds the task to a session.
    pub fn session(mut self, session: impl Into<SessionId>) -> CreateTask {
        self.session = Some(session.into());
        self
    }

    /// Keeps the originating request with the task.
    pub fn origin(mut self, origin: impl Into<Origin>) -> CreateTask {
        self.origin = Some(origin.into());
        self
    }
}

/// The stored outcome of a finished task: the result object of the original request, or
/// the JSON-RPC error object it produced. Shared, never copied, when read.
#[derive(Clone, PartialEq, Debug)]
pub enum Outcome {
    /// The original request's result (for `tools/call`, a `CallToolResult`).
    Result(Arc<Value>),
    /// The original request's JSON-RPC error object (`{code, message, data?}`).
    Error(Arc<Value>),
}

impl Outcome {
    /// Wraps a result object.
    pub fn result(value: Value) -> Outcome {
        Outcome::Result(Arc::new(value))
    }

    /// Wraps a JSON-RPC error object.
    pub fn error(value: Value) -> Outcome {
        Outcome::Error(Arc::new(value))
    }
}

/// Pending input requests of a task: key -> request (for example `{method, params}` of an
/// elicitation). Keys are unique over the task's whole life.
pub type InputRequests = BTreeMap<String, Value>;

/// Answers to input requests: key -> response.
pub type InputResponses = BTreeMap<String, Value>;

/// A task together with everything the store keeps beside its wire fields.
#[derive(Clone, PartialEq, Debug)]
pub struct TaskDetail {
    /// The wire snapshot.
    pub task: Task,
    /// The session the task is bound to.
    pub session: Option<SessionId>,
    /// The originating request, if the creator kept one.
    pub origin: Option<Origin>,
    /// Input requests still waiting for an answer.
    pub input_requests: InputRequests,
    /// The stored outcome, once the task has one.
    pub outcome: Option<Outcome>,
}

/// A terminal task with its stored outcome.
#[derive(Clone, PartialEq, Debug)]
pub struct TaskResult {
    /// The task, in state `completed` or `failed`.
    pub task: Task,
    /// Its outcome.
    pub outcome: Outcome,
}

/// What `cancel` did.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CancelOutcome {
    /// The task after the call.
    pub task: Task,
    /// False when the task was already terminal and nothing changed (cancel is idempotent;
    /// 2025-11-25 servers answer such a call with -32602, SEP-2663 servers with an ack).
    pub cancelled: bool,
}

/// One page of a task listing, in creation order.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct TaskPage {
    /// The tasks on this page.
    pub tasks: Vec<Task>,
    /// Opaque cursor for the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Which limit refused a create.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LimitScope {
    /// `max_tasks`, over all live tasks.
    Global,
    /// `max_tasks_per_session`, over one session's live tasks.
    Session,
    /// The number of callers blocked on one task at once.
    Waiters,
}

/// A change the store announces to its subscribers.
#[derive(Clone, PartialEq, Debug)]
#[non_exhaustive]
pub enum StoreEvent {
    /// A task was created.
    Created {
        /// The new task.
        task: Task,
        /// Its session.
        session: Option<SessionId>,
    },
    /// A task changed status or status message.
    Status {
        /// The task after the change.
        task: Task,
        /// Its session.
        session: Option<SessionId>,
    },
    /// A task was removed because its TTL ran out.
    Expired {
        /// The removed task's id.
        task_id: TaskId,
        /// Its session.
        session: Option<SessionId>,
    },
    /// The subscriber fell behind and this many events were dropped for it.
    Lagged {
        /// How many events were lost.
        missed: u64,
    },
}
