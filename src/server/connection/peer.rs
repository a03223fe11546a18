//! Requests from the server to the client (elicitation, sampling, roots) on behalf of a
//! tool: sent on the connection, answered through `pending`, abandoned when the task
//! ends or the plain call asking is cancelled.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{RecvTimeoutError, TrySendError};
use serde_json::{json, Value};

use super::{Connection, Pending};
use crate::model::TaskId;
use crate::protocol::jsonrpc::{self, RequestId, RpcError, INTERNAL_ERROR};
use crate::protocol::v2025;
use crate::server::context::{undeclared, Binding, ClientPeer};

/// How often a tool waiting for the client's answer looks whether its task ended, in case
/// the store event saying so was lost.
const TASK_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl ClientPeer for Connection {
    fn request(
        &self,
        method: &str,
        params: Value,
        task: Option<TaskId>,
    ) -> Result<Value, RpcError> {
        self.request_for(method, params, task, None)
    }

    fn supports(&self, method: &str) -> bool {
        self.client_supports(method)
    }
}

/// The client as one tool call sees it: a request it sends for a plain call is abandoned
/// when the call is cancelled (see [`Connection::request_for`]).
pub(super) struct CallPeer {
    pub(super) connection: Arc<Connection>,
    pub(super) binding: Arc<Binding>,
}

impl ClientPeer for CallPeer {
    fn request(
        &self,
        method: &str,
        params: Value,
        task: Option<TaskId>,
    ) -> Result<Value, RpcError> {
        let call = Some(&*self.binding);
        self.connection.request_for(method, params, task, call)
    }

    fn supports(&self, method: &str) -> bool {
        self.connection.client_supports(method)
    }
}

impl Connection {
    /// Sends `method` to the client and waits for its answer: until `task` ends, if the
    /// request is for one, or else until `call` (the plain call asking) is cancelled, by
    /// its client or its connection closing. A request abandoned that way is withdrawn
    /// with `notifications/cancelled`, and its answer, if one comes, is dropped; the
    /// call's worker is free at once.
    fn request_for(
        &self,
        method: &str,
        params: Value,
        task: Option<TaskId>,
        call: Option<&Binding>,
    ) -> Result<Value, RpcError> {
        // Disconnected once the call is cancelled; never, for a call that cannot be.
        let cancelled = match (task, call) {
            (None, Some(call)) => call.cancelled_signal(),
            _ => crossbeam_channel::never(),
        };
        let cancelled_error =
            || RpcError::internal(format!("{method} was abandoned: the call was cancelled"));
        if !self.client_supports(method) {
            return Err(undeclared(method));
        }
        let id = RequestId::String(format!(
            "s-{}",
            self.next_request_id.fetch_add(1, Ordering::Relaxed)
        ));
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.pending
            .lock()
            .insert(id.clone(), Pending { task, reply });
        // `close` sets the flag before it empties `pending`: either it removed this entry
        // (dropping the sender ends the wait below) or the flag is seen here.
        if self.closed.load(Ordering::SeqCst) {
            self.pending.lock().remove(&id);
            return Err(RpcError::internal(format!(
                "{method} was not sent: the connection is closed"
            )));
        }
        // A call already cancelled sends nothing (a cancel from now on is seen below).
        if cancelled.try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected) {
            self.pending.lock().remove(&id);
            return Err(cancelled_error());
        }
        if let Err(error) = self
            .outgoing
            .try_send(jsonrpc::request(&id, method, params))
        {
            self.pending.lock().remove(&id);
            let why = match error {
                TrySendError::Full(_) => "the client is not reading its messages",
                TrySendError::Disconnected(_) => "the connection is closed",
            };
            return Err(RpcError::internal(why));
        }
        let abandoned = || {
            Err(RpcError::new(
                INTERNAL_ERROR,
                format!("{method} was abandoned: the task ended or the connection closed"),
            ))
        };
        // Tells the client the request is no longer wanted (its answer would be dropped);
        // not over a closed connection. Optional, like every notification: never blocks.
        // A request for a task is withdrawn tied to that task, as it was sent (2025-11-25:
        // every message related to a task carries the related-task `_meta`).
        let withdraw = |reason: &str| {
            if !self.closed.load(Ordering::SeqCst) {
                let mut params = json!({"requestId": id, "reason": reason});
                if let Some(task) = task {
                    params = v2025::with_related_task(params, task);
                }
                let withdrawn = jsonrpc::notification("notifications/cancelled", params);
                let _ = self.outgoing.try_send(withdrawn);
            }
        };
        let Some(task) = task else {
            return crossbeam_channel::select! {
                recv(answer) -> outcome => outcome.unwrap_or_else(|_| abandoned()),
                recv(cancelled) -> _ => {
                    // Still pending (neither answered nor ended by a close): withdrawn.
                    if self.pending.lock().remove(&id).is_some() {
                        withdraw("the tool call was cancelled");
                    }
                    Err(cancelled_error())
                }
            };
        };
        // The task's end normally reaches us as a store event, which drops our sender. A
        // task that ended while we registered sent it too early, and events can be lost (a
        // subscriber that falls behind): so the task is also looked at now and then, and
        // its worker is never held for good by a question nobody will answer.
        // When the task ends first, the request is withdrawn as for a cancelled call.
        loop {
            if self.task_ended(task) {
                self.pending.lock().remove(&id);
            }
            match answer.recv_timeout(TASK_CHECK_INTERVAL) {
                Ok(outcome) => return outcome,
                Err(RecvTimeoutError::Disconnected) => {
                    withdraw("the task ended");
                    return abandoned();
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}
