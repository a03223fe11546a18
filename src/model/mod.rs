//! Wire and domain types shared by every layer: task ids, sessions, statuses, the task
//! record as MCP 2025-11-25 puts it on the wire, outcomes and pages.
//!
//! Nothing here knows about threads, clocks or JSON-RPC framing; these are plain values.

pub(crate) mod depth;
pub(crate) mod forks;
mod ids;
mod origin;
mod task;
mod timestamp;

pub use depth::MAX_PAYLOAD_DEPTH;
pub use ids::{SessionId, TaskId};
pub use origin::Origin;
pub use task::{
    CancelOutcome, CreateTask, InputRequests, InputResponses, LimitScope, Outcome, StoreEvent,
    Task, TaskDetail, TaskPage, TaskResult, TaskStatus,
};
pub use timestamp::Timestamp;
