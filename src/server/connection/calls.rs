//! `tools/call`: finding the tool, deciding between a task and an inline run (the
//! client's request on 2025-11-25, the server's choice on 2026-07-28, promotion after a
//! budget), running it on the worker pool, and settling its task or answering inline.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::peer::CallPeer;
use super::{Connection, Reply};
use crate::model::{CreateTask, Origin, Outcome, StoreEvent, Task, TaskId, TaskStatus};
use crate::protocol::jsonrpc::{self, RequestId, RpcError};
use crate::protocol::{rpc_error, sep2663, v2025, RequestMeta, Revision};
use crate::server::context::{Binding, Cancelled, TaskContext};
use crate::server::tools::{Preflight, TaskSupport, Tool};
use crate::store::CancelToken;
use crate::StoreError;

#[derive(Deserialize)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
    /// Read only where it means something (a 2025-11-25 client that negotiated tasks):
    /// anywhere else it is an unknown field, ignored whatever its shape.
    #[serde(default)]
    task: Option<Value>,
    /// SEP-2663 multi-round-trip: answers to the input requests of an earlier round.
    #[serde(default, rename = "inputResponses")]
    input_responses: Option<Value>,
}

impl Connection {
    pub(super) fn tools_call(
        self: &Arc<Self>,
        params: Option<Value>,
        revision: Revision,
        meta: RequestMeta,
        id: RequestId,
        reply: Reply,
    ) {
        // Kept with a task as its text, written before `params` is taken apart (no copy
        // of the tree is made).
        let origin = OriginRequest {
            method: "tools/call",
            params: &params,
            revision: revision.as_str(),
        };
        let origin = match Origin::new(&origin) {
            Ok(origin) => origin,
            Err(e) => return reply.send(Err(RpcError::invalid_params(e.to_string()))),
        };
        let call: CallParams = match jsonrpc::params(params) {
            Ok(call) => call,
            Err(error) => return reply.send(Err(error)),
        };
        let Some(tool) = self.core.tools.get(&call.name).cloned() else {
            return reply.send(Err(RpcError::invalid_params(format!(
                "unknown tool '{}'",
                call.name
            ))));
        };
        let arguments = match call.arguments {
            None | Some(Value::Null) => json!({}),
            Some(object @ Value::Object(_)) => object,
            Some(_) => {
                return reply.send(Err(RpcError::invalid_params("arguments must be an object")))
            }
        };
        if revision == Revision::Sep2663 {
            // A call that can only be served as a task, from a client that did not declare
            // the extension, is refused before anything else (a preflight question would
            // be answered for nothing: the call is refused all the same).
            if tool.task_support() == TaskSupport::Required && !meta.declares_tasks {
                let what = format!("tool '{}'", call.name);
                return reply.send(Err(sep2663::missing_capability(&what)));
            }
            let responses = call.input_responses.as_ref();
            // A preflight runs on the transport's reader: its panic must not reach it.
            let preflight = std::panic::catch_unwind(AssertUnwindSafe(|| {
                tool.preflight(&arguments, responses)
            }));
            let preflight = match preflight {
                Ok(preflight) => preflight,
                Err(payload) => {
                    drop_payload(payload);
                    let why = format!("the preflight of tool '{}' panicked", call.name);
                    return reply.send(Err(RpcError::internal(why)));
                }
            };
            if let Preflight::NeedInput(requests) = preflight {
                let methods = requests
                    .values()
                    .filter_map(|request| request.get("method").and_then(Value::as_str));
                if let Some(error) = sep2663::undeclared_input(methods, |c| meta.declares(c)) {
                    return reply.send(Err(error));
                }
                return reply.send(Ok(json!({
                    "resultType": "input_required",
                    "inputRequests": requests,
                })));
            }
        }
        let run = Run {
            tool,
            arguments,
            origin,
            revision,
            responses: call.input_responses,
            request: id,
            declared: (revision == Revision::Sep2663).then(|| meta.capabilities.clone()),
        };
        match revision {
            // A client on a version without tasks declared none: `params.task` is ignored
            // and every tool runs as a plain call.
            Revision::V2025 if !self.tasks_negotiated.load(Ordering::Acquire) => {
                self.run_inline(run, Binding::inline(), reply)
            }
            Revision::V2025 => match (task_metadata(call.task), run.tool.task_support()) {
                (Err(error), _) => reply.send(Err(error)),
                (Ok(Some(_)), TaskSupport::Forbidden) => reply.send(Err(RpcError::new(
                    jsonrpc::METHOD_NOT_FOUND,
                    format!(
                        "Tool '{}' does not support task-augmented execution",
                        call.name
                    ),
                ))),
                (Ok(None), TaskSupport::Required) => reply.send(Err(RpcError::new(
                    jsonrpc::METHOD_NOT_FOUND,
                    format!(
                        "Tool '{}' must be called as a task (params.task)",
                        call.name
                    ),
                ))),
                (Ok(Some(task)), _) => self.start_task(run, task.ttl, reply),
                (Ok(None), _) => self.run_inline(run, Binding::inline(), reply),
            },
            // The server decides; a legacy `params.task` is ignored.
            // (A task-required call without the extension was refused above.)
            Revision::Sep2663 => match (run.tool.task_support(), meta.declares_tasks) {
                (TaskSupport::Required, _) => self.start_task(run, None, reply),
                (TaskSupport::Optional, true) => self.run_promotable(run, reply),
                _ => self.run_inline(run, Binding::inline(), reply),
            },
        }
    }

    /// Creates a task for the call in the store (so `tasks/get` finds it before the reply
    /// leaves), answers with it, then runs the tool on the worker pool.
    fn start_task(self: &Arc<Self>, run: Run, ttl: Option<u64>, reply: Reply) {
        let (task, token) = match self.create_task(&run, ttl) {
            Ok(created) => created,
            Err(error) => return reply.send(Err(error)),
        };
        reply.send(Ok(match run.revision {
            Revision::V2025 => v2025::create_result(&task),
            Revision::Sep2663 => sep2663::create_result(&task),
        }));
        let id = task.task_id;
        let revision = run.revision;
        if revision == Revision::V2025 {
            self.follow(id, task.status);
        }
        let connection = self.clone();
        let submitted = self.core.pool.submit(move || {
            let context = connection.context(Binding::task(id, token), &run);
            let outcome = run_tool(&run.tool, run.arguments, &context);
            connection.settle_task(id, revision, outcome, context.is_cancelled());
        });
        if submitted.is_err() {
            let busy = RpcError::internal("the server is busy; try again later");
            self.settle_task(id, revision, Err(busy), false);
        }
    }

    /// Starts sending status notifications for task `id`, created `created`. Before the
    /// run starts, so no change the tool makes is missed; a change made before this (a
    /// `tasks/cancel` sent as soon as the create result arrived, a TTL that ran out) found
    /// the task not followed yet, so the task is looked at once more: its status is
    /// notified, and a task that ended is not followed (it would stay in the map until
    /// the connection closes).
    fn follow(&self, id: TaskId, created: TaskStatus) {
        self.notified.lock().insert(id, created);
        match self.core.store.get(id, self.session.as_ref()) {
            Ok(task) => {
                let last = self.notified.lock().get(&id).copied();
                // `None`: its end was notified by the event meanwhile.
                if last.is_some_and(|last| last != task.status) {
                    self.handle_store_event(&StoreEvent::Status {
                        task,
                        session: self.session.clone(),
                    });
                }
            }
            Err(_) => {
                self.notified.lock().remove(&id);
            }
        }
    }

    /// Creates the call's task and takes its cancellation token. On a connection closed
    /// meanwhile the task is cancelled at once: whoever closed it (an HTTP `DELETE`, say)
    /// may have cancelled the session's tasks before this one existed, and nobody could
    /// reach it to cancel it later.
    fn create_task(&self, run: &Run, ttl: Option<u64>) -> Result<(Task, CancelToken), RpcError> {
        let store = &self.core.store;
        let mut create = CreateTask::new().origin(run.origin.clone());
        create.ttl = ttl;
        create.session = self.session.clone();
        let task = store.create(create).map_err(|e| rpc_error(&e))?;
        let token = store
            .cancel_token(task.task_id, self.session.as_ref())
            .map_err(|e| rpc_error(&e))?;
        if self.closed.load(Ordering::SeqCst) {
            let why = Some("the connection closed".to_owned());
            let _ = store.cancel(task.task_id, self.session.as_ref(), why);
        }
        Ok((task, token))
    }

    /// Stores a finished run's outcome in its task, as its revision says.
    fn settle_task(
        &self,
        id: TaskId,
        revision: Revision,
        outcome: Result<Value, RpcError>,
        cancelled: bool,
    ) {
        if cancelled {
            log::info!("task {id} observed cancellation");
        }
        let (status, outcome, message) = match revision {
            Revision::V2025 => v2025::settle(outcome),
            Revision::Sep2663 => sep2663::settle(outcome),
        };
        let message = message.map(shortened);
        let session = self.session.as_ref();
        let store = &self.core.store;
        match store.store_result(id, session, status, outcome, message) {
            Ok(_) | Err(StoreError::AlreadyTerminal(_)) | Err(StoreError::NotFound) => {}
            // The store refused the outcome itself (nested past `MAX_PAYLOAD_DEPTH`, say):
            // the task still ends, failed with why, rather than stay `working` until its
            // TTL (or for ever, without one).
            Err(StoreError::InvalidArgument(why)) => {
                log::warn!("task {id}: its result could not be stored: {why}");
                let error = RpcError::internal(format!("the tool's result was refused: {why}"));
                let message = Some(error.message.clone());
                let outcome = Outcome::error(error.to_value());
                match store.store_result(id, session, TaskStatus::Failed, outcome, message) {
                    // (The depth is checked before the task is looked at: it may have
                    // ended meanwhile.)
                    Ok(_) | Err(StoreError::AlreadyTerminal(_)) | Err(StoreError::NotFound) => {}
                    Err(error) => log::warn!("task {id}: could not fail it either: {error}"),
                }
            }
            Err(error) => log::warn!("task {id}: could not store its result: {error}"),
        }
    }

    /// Runs a plain call on the worker pool and answers with its result. If the pool
    /// refuses the job, dropping it drops the reply, which answers "busy".
    fn run_inline(self: &Arc<Self>, run: Run, binding: Arc<Binding>, reply: Reply) {
        // Registered before the job is queued, so a cancel that overtakes it still counts.
        // A SEP-2663 call can be cancelled too, unless the connection is shared.
        let cancellable = run.revision == Revision::V2025 || !self.shared;
        let registered = cancellable.then(|| {
            let request = run.request.clone();
            self.inline_runs
                .lock()
                .insert(request.clone(), binding.clone());
            (request, binding.clone())
        });
        // `close` sets its flag before it cancels the registered runs: a run registered
        // after that sees the flag here.
        if registered.is_some() && self.closed.load(Ordering::SeqCst) {
            binding.cancel_inline();
        }
        let connection = self.clone();
        let submitted = self.core.pool.submit(move || {
            let context = connection.context(binding.clone(), &run);
            let outcome = run_tool(&run.tool, run.arguments, &context);
            if cancellable {
                connection.forget_inline_run(&run.request, &binding);
            }
            reply.send_unless(binding.is_withheld(), inline_outcome(run.revision, outcome));
        });
        if let (Err(_), Some((request, binding))) = (submitted, registered) {
            // The refused job is dropped, and its reply answered "busy".
            self.forget_inline_run(&request, &binding);
        }
    }

    /// Removes a finished plain call from [`inline_runs`](Self::inline_runs), unless a newer
    /// call reused its request id meanwhile.
    fn forget_inline_run(&self, request: &RequestId, binding: &Arc<Binding>) {
        let mut runs = self.inline_runs.lock();
        if runs.get(request).is_some_and(|b| Arc::ptr_eq(b, binding)) {
            runs.remove(request);
        }
    }

    /// SEP-2663 promotion: the call runs inline for up to the server's promotion budget. If
    /// it finishes in time the client gets a plain result and the store is never written;
    /// otherwise a task is created (before the reply leaves) and the same run carries on
    /// as that task.
    fn run_promotable(self: &Arc<Self>, run: Run, reply: Reply) {
        let binding = Binding::promotable();
        let (done_tx, done_rx) = crossbeam_channel::bounded::<Result<Value, RpcError>>(1);
        let connection = self.clone();
        let run_binding = binding.clone();
        let job = run.clone();
        let submitted = self.core.pool.submit(move || {
            let context = connection.context(run_binding.clone(), &job);
            let outcome = run_tool(&job.tool, job.arguments.clone(), &context);
            match run_binding.finish() {
                Some(id) => {
                    connection.settle_task(id, job.revision, outcome, context.is_cancelled())
                }
                None => {
                    let _ = done_tx.send(inline_outcome(job.revision, outcome));
                }
            }
        });
        if submitted.is_err() {
            return; // dropping `reply` answers busy
        }
        let connection = self.clone();
        let budget = self.core.promote_after;
        let waiting = binding.clone();
        let waiter = std::thread::Builder::new()
            .name("mcp-promote".into())
            .spawn(move || {
                let hurried = binding.hurried();
                crossbeam_channel::select! {
                    recv(done_rx) -> outcome => {
                        if let Ok(outcome) = outcome {
                            return reply.send(outcome);
                        }
                    }
                    // The run asked for input: only a task can wait for it.
                    recv(hurried) -> _ => {}
                    default(budget) => {}
                }
                let promoted = binding.promote(|| {
                    let (task, token) = connection.create_task(&run, None)?;
                    Ok::<_, RpcError>((task.task_id, token, task))
                });
                let finished_inline = || {
                    done_rx
                        .recv()
                        .unwrap_or_else(|_| Err(RpcError::internal("the tool vanished")))
                };
                match promoted {
                    Some(Ok(task)) => reply.send(Ok(sep2663::create_result(&task))),
                    // It finished just in time, or no task could be made (a limit, say):
                    // either way the answer is the inline result.
                    None | Some(Err(_)) => reply.send(finished_inline()),
                }
            });
        if let Err(error) = waiter {
            // Its reply went with it (the client hears the server is busy); a run that
            // asks for input must not wait for a promotion nobody will make.
            log::error!("cannot spawn a promotion waiter: {error}");
            waiting.never_task();
        }
    }

    fn context(self: &Arc<Self>, binding: Arc<Binding>, run: &Run) -> TaskContext {
        let peer = Arc::new(CallPeer {
            connection: self.clone(),
            binding: binding.clone(),
        });
        TaskContext::new(
            binding,
            run.revision,
            self.session.clone(),
            self.core.store.clone(),
            peer,
        )
        .with_call_responses(run.responses.clone())
        .with_declared(run.declared.clone())
        .with_places(self.core.pool.places())
    }
}

/// The `params.task` of a 2025-11-25 `tools/call` that negotiated tasks: absent or null for
/// none, -32602 if it is not a valid `TaskMetadata`.
fn task_metadata(task: Option<Value>) -> Result<Option<v2025::TaskMetadata>, RpcError> {
    match task {
        None | Some(Value::Null) => Ok(None),
        // Only an object: serde would also read the struct from an array (`[]`, `[60000]`),
        // and start a task for a wrong type.
        Some(task @ Value::Object(_)) => serde_json::from_value(task)
            .map(Some)
            .map_err(|e| RpcError::invalid_params(format!("task: {e}"))),
        Some(_) => Err(RpcError::invalid_params("task must be an object")),
    }
}

/// What a task keeps of the `tools/call` it came from.
#[derive(Serialize)]
struct OriginRequest<'a> {
    method: &'static str,
    params: &'a Option<Value>,
    revision: &'a str,
}

/// A tool call on its way to running.
#[derive(Clone)]
struct Run {
    tool: Tool,
    arguments: Value,
    origin: Origin,
    revision: Revision,
    /// The call's own `inputResponses` (multi-round-trip answers).
    responses: Option<Value>,
    /// The `tools/call` request's id.
    request: RequestId,
    /// The client capabilities a SEP-2663 call declared (`None` on 2025-11-25).
    declared: Option<Vec<String>>,
}

/// A tool's outcome as a plain call answers it. On 2026-07-28 a tool result is `complete`
/// whatever `resultType` the tool put in it, as when its task stores it (see
/// [`sep2663::settle`]): `task` is for a `CreateTaskResult` only, and `input_required` for
/// the server's own multi-round-trip questions.
fn inline_outcome(revision: Revision, outcome: Result<Value, RpcError>) -> Result<Value, RpcError> {
    match revision {
        Revision::V2025 => outcome,
        Revision::Sep2663 => outcome.map(|result| sep2663::with_result_type(result, "complete")),
    }
}

/// The longest status message, in bytes, a task gets from its tool's outcome.
const MAX_SETTLED_MESSAGE: usize = 1024;

/// `message` cut to [`MAX_SETTLED_MESSAGE`] bytes (on a character boundary, with `…`): a
/// status message goes out with every `tasks/get`, `tasks/list` entry and status
/// notification, where the outcome it comes from is read once, whole.
fn shortened(mut message: String) -> String {
    if message.len() <= MAX_SETTLED_MESSAGE {
        return message;
    }
    let mut end = MAX_SETTLED_MESSAGE - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push('…');
    message
}

/// Runs `tool` on a worker, its panic turned into an error, and so is a result that is no
/// `CallToolResult` object (which no revision can hand on: it would carry no `resultType`
/// on 2026-07-28, no related-task `_meta` from `tasks/result`).
fn run_tool(tool: &Tool, arguments: Value, context: &TaskContext) -> Result<Value, RpcError> {
    // Cancelled while it waited for a worker (a `tasks/cancel`, a `DELETE`, its TTL, a
    // client's `notifications/cancelled`): nobody wants its work any more, and a tool with
    // side effects must not act for it.
    if context.is_cancelled() {
        return Err(Cancelled.into());
    }
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| tool.call(arguments, context)))
        .unwrap_or_else(|payload| {
            drop_payload(payload);
            Err(RpcError::internal(format!(
                "tool '{}' panicked",
                tool.name()
            )))
        });
    match outcome {
        Ok(result) if !result.is_object() => Err(RpcError::internal(format!(
            "tool '{}' returned a result that is not an object",
            tool.name()
        ))),
        outcome => outcome,
    }
}

/// Drops a tool's panic payload. Its own drop may panic too (`panic_any` takes any value):
/// that panic would unwind the run past its settling, leaving its task `working` until its
/// TTL (and a promotion waiter to make a task of a run that is gone), so it is caught, and
/// its payload leaked rather than dropped in turn.
fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crossbeam_channel::Sender;
    use serde_json::{json, Value};

    use super::*;
    use crate::server::{demo, Server};

    const WAIT: Duration = Duration::from_secs(10);

    /// A tool that says it started on `started`, waits for `gate`, and returns whether its
    /// call was cancelled meanwhile.
    #[cfg(feature = "http")]
    fn gated_tool(started: Sender<()>, gate: crossbeam_channel::Receiver<()>) -> Tool {
        Tool::new(
            "gated",
            "Waits for the test, then says whether it was cancelled",
            json!({"type": "object"}),
            TaskSupport::Optional,
            move |_, ctx| {
                started.send(()).unwrap();
                gate.recv_timeout(WAIT).unwrap();
                let cancelled = ctx.is_cancelled();
                Ok(crate::server::text_result(format!(
                    "cancelled: {cancelled}"
                )))
            },
        )
    }

    fn send(connection: &Arc<Connection>, message: Value, answers: &Sender<Value>) {
        let answers = answers.clone();
        connection.handle_text(
            &message.to_string(),
            Box::new(move |answer| answers.send(answer).unwrap()),
        );
    }

    /// A plain call that has been answered leaves nothing behind in `inline_runs`: a
    /// long-lived connection (stdio) must not keep one entry per call it ever served.
    #[test]
    fn an_answered_plain_call_is_forgotten() {
        let server = Server::builder().tool(demo::echo_tool()).build().unwrap();
        let connection = server.connect(crossbeam_channel::unbounded().0, None);
        let (answers_tx, answers) = crossbeam_channel::unbounded();
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "echo", "arguments": {"text": "hi"}}});
        send(&connection, call, &answers_tx);
        let answer = answers.recv_timeout(WAIT).unwrap();
        assert_eq!(answer["result"]["content"][0]["text"], "hi", "{answer}");
        // The run forgets itself before it answers.
        assert!(connection.inline_runs.lock().is_empty());
    }

    /// On a shared (stateless HTTP) connection many clients' request ids may collide, so a
    /// `notifications/cancelled` never reaches a SEP-2663 plain call there: the call runs
    /// on and is answered.
    #[cfg(feature = "http")]
    #[test]
    fn a_cancel_on_a_shared_connection_does_not_reach_a_plain_call() {
        let (started_tx, started) = crossbeam_channel::unbounded();
        let (gate_tx, gate) = crossbeam_channel::unbounded();
        let server = Server::builder()
            .tool(gated_tool(started_tx, gate))
            .build()
            .unwrap();
        let shared = server.connect_stateless(crossbeam_channel::unbounded().0, None, 4);
        // Without the tasks extension: the call runs inline, never promoted.
        let meta = json!({"io.modelcontextprotocol/protocolVersion": sep2663::PROTOCOL_VERSION,
                          "io.modelcontextprotocol/clientCapabilities": {}});
        let (answers_tx, answers) = crossbeam_channel::unbounded();
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": "gated", "_meta": meta}});
        send(&shared, call, &answers_tx);
        started.recv_timeout(WAIT).unwrap();
        // Another client's cancel that happens to name the same id.
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": 7, "_meta": meta}});
        send(&shared, cancel, &answers_tx);
        gate_tx.send(()).unwrap();
        let answer = answers.recv_timeout(WAIT).unwrap();
        assert_eq!(answer["id"], 7, "answered, not withheld: {answer}");
        assert_eq!(
            answer["result"]["content"][0]["text"], "cancelled: false",
            "{answer}"
        );
    }
}
