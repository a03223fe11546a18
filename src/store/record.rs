//! The persistent form of a task, as the journal stores it: everything the store keeps
//! except what only makes sense in a live process (parked waiters, cancellation tokens,
//! monotonic deadlines, which are recomputed from the wall clock on recovery).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{InputRequests, Origin, Outcome, SessionId, TaskId, TaskStatus, Timestamp};

/// One task's durable state.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task id.
    pub id: TaskId,
    /// Creation sequence (listing order and cursors).
    pub seq: u64,
    /// Lifecycle state.
    pub status: TaskStatus,
    /// True when the task failed because its TTL ran out (it lingers for the grace period).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
    /// Status message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Creation time, wall clock.
    pub created_at: Timestamp,
    /// Last change, wall clock.
    pub last_updated_at: Timestamp,
    /// TTL in ms from creation; `None` is unlimited.
    pub ttl: Option<u64>,
    /// Session the task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    /// The originating request; written with the task's first record only (later records
    /// leave it out and recovery keeps the first one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The stored outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<OutcomeRecord>,
    /// Input requests still pending.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending: InputRequests,
    /// Answers not yet collected by the worker.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub answers: BTreeMap<String, Value>,
    /// Every input key the task has used (keys are unique over its life).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used_keys: Vec<String>,
}

/// An outcome as stored on disk.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeRecord {
    /// A result object.
    Result(Arc<Value>),
    /// A JSON-RPC error object.
    Error(Arc<Value>),
}

impl From<&Outcome> for OutcomeRecord {
    fn from(outcome: &Outcome) -> Self {
        match outcome {
            Outcome::Result(v) => OutcomeRecord::Result(v.clone()),
            Outcome::Error(v) => OutcomeRecord::Error(v.clone()),
        }
    }
}

impl From<OutcomeRecord> for Outcome {
    fn from(record: OutcomeRecord) -> Self {
        match record {
            OutcomeRecord::Result(v) => Outcome::Result(v),
            OutcomeRecord::Error(v) => Outcome::Error(v),
        }
    }
}

/// What a journal must record about one task after a batch of commands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Change {
    /// The task is new: write its full record, origin included.
    Created,
    /// The task changed: write its record (without the origin).
    Updated,
    /// The task is gone.
    Removed,
}

impl Change {
    /// Folds a later change of the same task into this one; `None` when the two cancel out
    /// (created and removed within one batch: nothing to write).
    pub(crate) fn then(self, later: Change) -> Option<Change> {
        match (self, later) {
            (Change::Created, Change::Removed) => None,
            (Change::Created, _) => Some(Change::Created),
            (_, later) => Some(later),
        }
    }
}

/// What recovery does with tasks it finds still running.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum RecoveryPolicy {
    /// Fail them with a clear status message: their workers died with the old process.
    #[default]
    FailRunning,
    /// Keep them as they were, for an external worker to resume.
    Keep,
}
