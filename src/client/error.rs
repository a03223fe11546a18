//! The one error type of the blocking client.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use super::TaskInfo;
use crate::protocol::RpcError;

/// Everything a [`Client`](super::Client) call can fail with.
///
/// Transport problems ([`Io`](Self::Io), [`Closed`](Self::Closed), [`Http`](Self::Http),
/// [`Protocol`](Self::Protocol), [`Timeout`](Self::Timeout)) say the conversation itself
/// broke; [`Rpc`](Self::Rpc) is
/// the server's own answer; the task variants say how a followed task ended without a
/// usable result.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// Reading from or writing to the server failed (spawning it, a refused TCP
    /// connection, a broken pipe that was not yet seen as a close), or one HTTP exchange
    /// ended without its answer (an event stream the server closed early, with no event
    /// ids to resume it from, or whose resumption failed) while the client's connection
    /// goes on.
    Io(std::io::Error),
    /// The server closed the connection or died: its output ended, so every request still
    /// waiting for an answer fails with this, and so does every later request. Over HTTP,
    /// where each request has a connection of its own, it says that this request's
    /// connection broke (reset, or closed before the answer came): later requests open
    /// connections of their own, and may well succeed.
    Closed {
        /// What was observed (for example "the server closed its output").
        reason: String,
    },
    /// An HTTP status that carried no JSON-RPC answer (a 404 for a wrong path, a 5xx...).
    Http {
        /// The HTTP status code.
        status: u16,
        /// The response body, as text (possibly empty).
        body: String,
    },
    /// The server sent something the client cannot make sense of (malformed JSON-RPC, a
    /// result without the fields its method requires).
    Protocol(String),
    /// The server answered the request with a JSON-RPC error.
    Rpc(RpcError),
    /// The followed task ended `failed`. On 2025-11-25 a tool result with `isError: true`
    /// ends its task failed, and the result is in `result`; a JSON-RPC error (either
    /// revision) is in `error`.
    TaskFailed {
        /// The task as last seen.
        task: Box<TaskInfo>,
        /// The tool result the task stored, if it stored one (2025-11-25 `isError`).
        result: Option<Value>,
        /// The JSON-RPC error the task stored, if it stored one.
        error: Option<RpcError>,
    },
    /// The followed task ended `cancelled` (by this client or anyone else).
    TaskCancelled {
        /// The task as last seen.
        task: Box<TaskInfo>,
    },
    /// The followed task vanished: the server no longer knows its id (its TTL ran out and
    /// it was removed).
    TaskExpired {
        /// The id of the task that vanished.
        task_id: String,
    },
    /// The task stayed `input_required` for this many consecutive polls without bringing a
    /// new input request: the client sent a best-effort `tasks/cancel` and gave up.
    Stuck {
        /// The task that was stuck.
        task_id: String,
        /// The consecutive polls that brought nothing new.
        polls: u32,
        /// Whether the server accepted the `tasks/cancel` (false: it refused it, did not
        /// answer in time, or the connection is gone).
        cancelled: bool,
    },
    /// The call's overall deadline passed; a task it had started was sent a best-effort
    /// `tasks/cancel`.
    Deadline {
        /// The task that was being followed, if one had been created.
        task_id: Option<String>,
        /// The deadline that passed, counted from the start of the call.
        after: Duration,
        /// Whether the server accepted the `tasks/cancel` (always false without a task).
        cancelled: bool,
    },
    /// The client gave up following a task whose polls (or, on SEP-2663, the
    /// `tasks/update`s answering its input requests) kept failing while the connection
    /// stayed open: a timeout, a malformed answer, an HTTP error, a JSON-RPC error other
    /// than the server forgetting the task. Such failures are tried again, at the task's
    /// polling interval, a few times in a row before this. The task was sent a best-effort
    /// `tasks/cancel`.
    ///
    /// [`is_transport`](ClientError::is_transport) and
    /// [`rpc_error`](ClientError::rpc_error) look through it to the last failure.
    TaskAbandoned {
        /// The task given up on.
        task_id: String,
        /// Whether the server accepted the `tasks/cancel`.
        cancelled: bool,
        /// The last failure.
        error: Box<ClientError>,
    },
    /// A server input request could not be answered: no handler is registered for its
    /// method, or the handler failed (SEP-2663, where an answer cannot be an error). The
    /// task was sent a best-effort `tasks/cancel`.
    Input {
        /// The input request's key.
        key: String,
        /// Why it could not be answered.
        error: RpcError,
    },
    /// The server did not answer a request within the client's request timeout
    /// ([`ClientBuilder::request_timeout`](super::ClientBuilder::request_timeout)); the
    /// request was given up, and an answer that comes later is ignored.
    Timeout {
        /// The request's method.
        method: String,
        /// The timeout that passed.
        after: Duration,
    },
    /// The operation does not exist in the negotiated revision (for example `tasks/list`
    /// on SEP-2663, `tasks/update` on 2025-11-25), or the client is configured wrongly (an
    /// `https://` URL).
    Unsupported(String),
}

impl ClientError {
    /// True for the transport failures: [`Io`](Self::Io), [`Closed`](Self::Closed),
    /// [`Http`](Self::Http), [`Protocol`](Self::Protocol) and [`Timeout`](Self::Timeout).
    /// For [`TaskAbandoned`](Self::TaskAbandoned), whether the failure behind it was one.
    pub fn is_transport(&self) -> bool {
        match self {
            ClientError::TaskAbandoned { error, .. } => error.is_transport(),
            _ => matches!(
                self,
                ClientError::Io(_)
                    | ClientError::Closed { .. }
                    | ClientError::Http { .. }
                    | ClientError::Protocol(_)
                    | ClientError::Timeout { .. }
            ),
        }
    }

    /// The task this error is about, if it names one.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            ClientError::TaskFailed { task, .. } | ClientError::TaskCancelled { task } => {
                Some(&task.task_id)
            }
            ClientError::TaskExpired { task_id }
            | ClientError::Stuck { task_id, .. }
            | ClientError::TaskAbandoned { task_id, .. } => Some(task_id),
            ClientError::Deadline { task_id, .. } => task_id.as_deref(),
            _ => None,
        }
    }

    /// The JSON-RPC error behind this error, if there is one (the server's answer, or the
    /// error a failed task stored).
    pub fn rpc_error(&self) -> Option<&RpcError> {
        match self {
            ClientError::Rpc(error) | ClientError::Input { error, .. } => Some(error),
            ClientError::TaskFailed { error, .. } => error.as_ref(),
            ClientError::TaskAbandoned { error, .. } => error.rpc_error(),
            _ => None,
        }
    }

    pub(crate) fn closed(reason: impl Into<String>) -> ClientError {
        ClientError::Closed {
            reason: reason.into(),
        }
    }

    /// Maps an I/O error; a broken pipe or a reset means the server went away.
    #[cfg(feature = "http")]
    pub(crate) fn io(error: std::io::Error) -> ClientError {
        use std::io::ErrorKind::*;
        match error.kind() {
            BrokenPipe | ConnectionReset | ConnectionAborted | UnexpectedEof => {
                ClientError::closed(format!("the connection to the server broke: {error}"))
            }
            _ => ClientError::Io(error),
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(error) => write!(f, "I/O error talking to the server: {error}"),
            ClientError::Closed { reason } => {
                write!(f, "the server connection is closed: {reason}")
            }
            ClientError::Http { status, body } => {
                write!(f, "HTTP {status} without a JSON-RPC answer")?;
                if !body.is_empty() {
                    write!(f, ": {body}")?;
                }
                Ok(())
            }
            ClientError::Protocol(what) => write!(f, "protocol error: {what}"),
            ClientError::Rpc(error) => write!(f, "the server answered with an error: {error}"),
            ClientError::TaskFailed { task, error, .. } => {
                write!(f, "task {} failed", task.task_id)?;
                match (error, &task.status_message) {
                    (Some(error), _) => write!(f, ": {error}"),
                    (None, Some(message)) => write!(f, ": {message}"),
                    (None, None) => Ok(()),
                }
            }
            ClientError::TaskCancelled { task } => write!(f, "task {} was cancelled", task.task_id),
            ClientError::TaskExpired { task_id } => {
                write!(f, "task {task_id} expired: the server no longer knows it")
            }
            ClientError::Stuck {
                task_id,
                polls,
                cancelled,
            } => {
                write!(
                    f,
                    "task {task_id} is stuck: input_required for {polls} polls without a new \
                     input request; it"
                )?;
                cancel_outcome(f, *cancelled)
            }
            ClientError::Deadline {
                task_id,
                after,
                cancelled,
            } => {
                write!(f, "the call's deadline of {after:?} passed")?;
                match task_id {
                    Some(id) => {
                        write!(f, "; task {id}")?;
                        cancel_outcome(f, *cancelled)
                    }
                    None => Ok(()),
                }
            }
            ClientError::TaskAbandoned {
                task_id,
                cancelled,
                error,
            } => {
                write!(f, "gave up following task {task_id} ({error}); it")?;
                cancel_outcome(f, *cancelled)
            }
            ClientError::Input { key, error } => {
                write!(f, "input request '{key}' could not be answered: {error}")
            }
            ClientError::Timeout { method, after } => {
                write!(f, "the server did not answer {method} within {after:?}")
            }
            ClientError::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

/// How a followed task's best-effort `tasks/cancel` went, as the end of a sentence about
/// the task: only a cancel the server accepted may be called one.
fn cancel_outcome(f: &mut fmt::Formatter<'_>, cancelled: bool) -> fmt::Result {
    if cancelled {
        write!(f, " was cancelled")
    } else {
        // Not "was sent": the cancel may not have gone out at all (the connection closed,
        // a server that stopped reading).
        write!(
            f,
            " was not cancelled (its tasks/cancel was refused, went unanswered or could not \
             be sent)"
        )
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io(error) => Some(error),
            ClientError::Rpc(error) => Some(error),
            ClientError::TaskAbandoned { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

impl From<RpcError> for ClientError {
    fn from(error: RpcError) -> Self {
        ClientError::Rpc(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_that_was_not_accepted_is_not_said_to_have_been_sent() {
        let error = ClientError::Stuck {
            task_id: "t1".into(),
            polls: 3,
            cancelled: false,
        };
        let text = error.to_string();
        assert!(!text.contains("was sent"), "{text}");
        assert!(text.contains("was not cancelled"), "{text}");
    }
}
