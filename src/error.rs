//! The one error type of the crate. Its mappings to JSON-RPC codes and C result codes each
//! live in one place, beside the layer that needs them.

use std::fmt;

use crate::model::{LimitScope, Task, TaskStatus};

/// Everything a store operation can report instead of success.
#[derive(Clone, PartialEq, Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// No task with this id is visible to the caller: it never existed, belongs to another
    /// session, or expired. The three cases are deliberately indistinguishable.
    NotFound,
    /// The lifecycle does not allow this status change (terminal states are absorbing).
    InvalidTransition {
        /// The task's current status.
        from: TaskStatus,
        /// The status that was asked for.
        to: TaskStatus,
    },
    /// The task is already terminal, so nothing changed; carries the task as it is.
    /// First writer wins: a late completion never overwrites a cancel.
    AlreadyTerminal(Box<Task>),
    /// The task has no stored outcome: it is still running, was cancelled, or failed by
    /// expiring.
    NoResult {
        /// The task's current status.
        status: TaskStatus,
        /// True if the task failed because its TTL ran out (it is in the grace period of
        /// [`ExpiryPolicy::Fail`](crate::ExpiryPolicy::Fail)).
        expired: bool,
    },
    /// The list cursor is malformed, was made for another session, or is empty.
    InvalidCursor,
    /// A create (or a wait) was refused because a limit is reached.
    LimitExceeded {
        /// Which limit.
        scope: LimitScope,
        /// Its configured value.
        limit: usize,
    },
    /// An input request key was used before on this task; keys are unique over its life.
    InputKeyReused {
        /// The offending key.
        key: String,
    },
    /// No input request with this key is pending or answered on the task.
    UnknownInputKey {
        /// The key that was asked for.
        key: String,
    },
    /// An argument is out of range or inconsistent; the text says which and why.
    InvalidArgument(String),
    /// A wait reached its deadline before anything happened.
    Timeout,
    /// A wait was ended early through its [`WaitStop`](crate::WaitStop) before anything
    /// happened.
    Stopped,
    /// A configuration is invalid (the store's, or a [`ServerBuilder`](crate::server::ServerBuilder)'s);
    /// names the field.
    InvalidConfig {
        /// The offending configuration field.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The journal could not be read or written; the text names the file (and, for damage,
    /// the byte offset). A store whose journal fails to write stops rather than acknowledge
    /// what it could not make durable.
    Journal(String),
    /// The store's owner thread is gone (shut down, or it panicked).
    Closed,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound => f.write_str("task not found"),
            StoreError::InvalidTransition { from, to } => {
                write!(f, "cannot move a task from '{from}' to '{to}'")
            }
            StoreError::AlreadyTerminal(task) => {
                write!(f, "task is already in terminal status '{}'", task.status)
            }
            StoreError::NoResult { status, expired } => {
                write!(f, "task has no stored result (status '{status}'")?;
                f.write_str(if *expired { ", expired)" } else { ")" })
            }
            StoreError::InvalidCursor => f.write_str("invalid cursor"),
            StoreError::LimitExceeded { scope, limit } => match scope {
                LimitScope::Global => write!(f, "maximum number of tasks ({limit}) reached"),
                LimitScope::Session => {
                    write!(f, "maximum number of tasks per session ({limit}) reached")
                }
                LimitScope::Waiters => {
                    write!(f, "maximum number of waiters on one task ({limit}) reached")
                }
            },
            StoreError::InputKeyReused { key } => {
                write!(f, "input request key '{key}' was already used on this task")
            }
            StoreError::UnknownInputKey { key } => {
                write!(f, "no input request with key '{key}' on this task")
            }
            StoreError::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            StoreError::Timeout => f.write_str("timed out waiting on the task"),
            StoreError::Stopped => f.write_str("the wait was stopped"),
            StoreError::InvalidConfig { field, reason } => {
                write!(f, "invalid configuration: {field} {reason}")
            }
            StoreError::Journal(why) => write!(f, "journal: {why}"),
            StoreError::Closed => f.write_str("the task store is closed"),
        }
    }
}

impl std::error::Error for StoreError {}
