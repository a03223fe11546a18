//! Following a task to its end, for both revisions: polling it, answering its input
//! requests, the stuck detector, the deadline, giving up (`tasks/cancel`) and settling
//! the outcome. Kept apart from mod.rs's requests and public methods, which it only
//! builds on: [`Client::call_tool`] and [`Client::follow_task`] hand their tasks to it.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::builder::{DEFAULT_MAX_POLL_INTERVAL, MIN_POLL_INTERVAL};
#[cfg(doc)]
use super::ClientBuilder;
use super::{
    Client, ClientError, InFlight, InputRequest, InputResponses, PolledTask, Progress, ProgressFn,
    TaskInfo,
};
use crate::model::TaskStatus;
use crate::protocol::jsonrpc::{self, INVALID_PARAMS};
use crate::protocol::v2025::RELATED_TASK;
use crate::protocol::Revision;

/// How long a best-effort `tasks/cancel` may take before the client gives up on its answer.
pub(super) const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// Failed polls of a followed task in a row (or failed SEP-2663 `tasks/update`s in a row),
/// the connection staying open, after which the client gives up on the task
/// ([`ClientError::TaskAbandoned`]). Each is tried again at the task's polling interval: a
/// poll that timed out, a proxy's 502 or a garbled answer may well pass. (A SEP-2663 look
/// that a task notification brought forward, and that failed, does not count.)
const MAX_FOLLOW_FAILURES: u32 = 3;

/// Most task subscriptions one client keeps open over HTTP, where each holds one of the
/// server's connections for as long as its task runs (`HttpOptions::max_connections`, 1024
/// on this crate's server, which lets subscriptions take half of them and refuses more):
/// tasks followed beyond it are only polled, so that following many tasks at once never
/// leaves the client's own polls without a connection.
pub const MAX_HTTP_TASK_SUBSCRIPTIONS: usize = 16;

/// Where a followed call stands: its start, deadline and progress callback.
pub(super) struct Follow<'o, 'a> {
    pub(super) started: Instant,
    pub(super) deadline: Option<Duration>,
    pub(super) progress: &'o mut Option<ProgressFn<'a>>,
    pub(super) polls: u32,
}

impl Follow<'_, '_> {
    /// When the deadline passes; `None` without one, or for one too far off to name
    /// (`Duration::MAX`, say), which is no deadline in practice.
    pub(super) fn deadline_at(&self) -> Option<Instant> {
        self.deadline.and_then(|d| self.started.checked_add(d))
    }

    pub(super) fn report(&mut self, task: &TaskInfo) {
        if let Some(progress) = self.progress.as_mut() {
            progress(&Progress {
                task: task.clone(),
                polls: self.polls,
                elapsed: self.started.elapsed(),
            });
        }
    }

    /// [`ClientError::Deadline`]; `cancelled` as the task's `tasks/cancel` went.
    pub(super) fn deadline_error(&self, task_id: Option<&str>, cancelled: bool) -> ClientError {
        ClientError::Deadline {
            task_id: task_id.map(str::to_owned),
            after: self.deadline.unwrap_or_default(),
            cancelled,
        }
    }

    /// When to poll next: `interval` from now, but not past the deadline.
    fn wake(&self, interval: Duration) -> Instant {
        let now = Instant::now();
        // An interval too long to add to the clock is capped (`max_poll_interval` may be
        // set that high).
        let wake = now
            .checked_add(interval)
            .unwrap_or(now + DEFAULT_MAX_POLL_INTERVAL);
        match self.deadline_at() {
            Some(deadline) => wake.min(deadline),
            None => wake,
        }
    }
}

impl Client {
    pub(super) fn follow(
        &self,
        task: TaskInfo,
        follow: &mut Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        follow.report(&task);
        match self.revision() {
            Revision::V2025 => {
                let id = task.task_id.clone();
                let outcome = self.follow_2025(task, follow);
                self.inner.shared.forget_task(&id);
                outcome
            }
            Revision::Sep2663 => self.follow_sep2663(task, follow),
        }
    }

    /// The interval to poll at next: the server's latest suggestion (a poll that names
    /// none keeps the one before), else the client's default.
    fn interval(&self, task: &TaskInfo, current: &mut Option<Duration>) -> Duration {
        if let Some(ms) = task.poll_interval_ms {
            *current = Some(Duration::from_millis(ms));
        }
        let config = &self.inner.config;
        current
            .unwrap_or(config.poll_interval)
            .max(MIN_POLL_INTERVAL)
            .min(config.max_poll_interval)
    }

    /// `tasks/get` for a followed task, within the request timeout and the call's
    /// deadline.
    fn poll_task(&self, task_id: &str, follow: &Follow<'_, '_>) -> Result<PolledTask, Failure> {
        match self.ask(
            "tasks/get",
            json!({ "taskId": task_id }),
            follow.deadline_at(),
        ) {
            Ok(Some(value)) => polled_about(task_id, &value).map_err(Failure::Passing),
            Ok(None) => Err(Failure::Deadline),
            Err(error) => Err(self.sort_failure(task_id, error)),
        }
    }

    /// Whether a failed request about a followed task ends following it: -32602 means the
    /// server forgot the task ([`ClientError::TaskExpired`]), and a closed connection
    /// answers nothing any more; anything else may pass.
    fn sort_failure(&self, task_id: &str, error: ClientError) -> Failure {
        match error {
            ClientError::Rpc(e) if e.code == INVALID_PARAMS => {
                Failure::Over(ClientError::TaskExpired {
                    task_id: task_id.to_owned(),
                })
            }
            error if self.inner.shared.closed_reason().is_some() => Failure::Over(error),
            error => Failure::Passing(error),
        }
    }

    /// How a followed call goes on after a failed poll (or update) of its task: `None`
    /// to try again at the next poll, while fewer than [`MAX_FOLLOW_FAILURES`] passing
    /// failures came in a row (counted in `failures`); else how the call ends.
    fn after_failure(
        &self,
        failure: Failure,
        failures: &mut u32,
        task_id: &str,
        follow: &Follow<'_, '_>,
    ) -> Option<Result<Value, ClientError>> {
        let error = match failure {
            Failure::Deadline => return Some(self.deadline_passed(task_id, follow)),
            Failure::Over(error) => return Some(Err(error)),
            Failure::Passing(error) => error,
        };
        *failures += 1;
        if *failures < MAX_FOLLOW_FAILURES {
            log::info!("mcp client: following task {task_id}: {error}; trying again");
            return None;
        }
        Some(
            self.abandon(task_id, |cancelled| ClientError::TaskAbandoned {
                task_id: task_id.to_owned(),
                cancelled,
                error: Box::new(error),
            }),
        )
    }

    /// The call's deadline passed: the task is abandoned.
    pub(super) fn deadline_passed(
        &self,
        task_id: &str,
        follow: &Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        self.abandon(task_id, |cancelled| {
            follow.deadline_error(Some(task_id), cancelled)
        })
    }

    /// Gives up on a task: a best-effort `tasks/cancel`, then `error(cancelled)`, where
    /// `cancelled` says whether the server accepted the cancel. A server that refuses it
    /// may do so because the task already ended: one more look then tells how, and the
    /// call ends as the task did (with a completed task's result, after all).
    fn abandon(
        &self,
        task_id: &str,
        error: impl FnOnce(bool) -> ClientError,
    ) -> Result<Value, ClientError> {
        let Ok(call) = self.start("tasks/cancel", json!({ "taskId": task_id })) else {
            return Err(error(false));
        };
        // One budget for the cancel and the look after it.
        let within = Instant::now() + CANCEL_WAIT;
        match self.wait(call, Some(within)) {
            // SEP-2663 acknowledges a cancel of a task that already ended: a task that did
            // end otherwise meanwhile ends the call as it ended.
            Ok(_) if self.revision() == Revision::Sep2663 => {
                match self.ended_meanwhile(task_id, within) {
                    Some(end) if !matches!(end, Err(ClientError::TaskCancelled { .. })) => end,
                    _ => Err(error(true)),
                }
            }
            Ok(_) => Err(error(true)),
            Err(Some(ClientError::Rpc(_))) => self
                .ended_meanwhile(task_id, within)
                .unwrap_or_else(|| Err(error(false))),
            Err(_) => Err(error(false)),
        }
    }

    /// How a task the server would not cancel ended, if a last look (by `within`) finds it
    /// ended; `None` if it did not, or the look failed.
    fn ended_meanwhile(
        &self,
        task_id: &str,
        within: Instant,
    ) -> Option<Result<Value, ClientError>> {
        let within = Some(within);
        let params = json!({ "taskId": task_id });
        let polled = self.ask("tasks/get", params.clone(), within).ok()??;
        let polled = polled_about(task_id, &polled).ok()?;
        match (self.revision(), polled.task.status) {
            (_, status) if !status.is_terminal() => None,
            (Revision::Sep2663, _) => settle_sep2663(polled),
            (Revision::V2025, TaskStatus::Cancelled) => {
                Some(settle_2025(polled.task, Ok(json!({}))))
            }
            (Revision::V2025, status) => match self.ask("tasks/result", params, within) {
                Ok(Some(value)) => Some(settle_2025(
                    polled.task,
                    Ok(result_of(task_id, value).ok()?),
                )),
                Err(error @ ClientError::Rpc(_)) if status == TaskStatus::Failed => {
                    Some(settle_2025(polled.task, Err(error)))
                }
                _ => None,
            },
        }
    }

    /// Counts consecutive `input_required` polls that brought nothing new: `None` while
    /// that may change, else how the call ends, the task abandoned as stuck.
    fn stuck_check(&self, stale: &mut u32, task_id: &str) -> Option<Result<Value, ClientError>> {
        *stale += 1;
        if *stale < self.inner.config.stuck_polls {
            return None;
        }
        let polls = *stale;
        Some(self.abandon(task_id, |cancelled| ClientError::Stuck {
            task_id: task_id.to_owned(),
            polls,
            cancelled,
        }))
    }

    /// 2025-11-25: hold `tasks/result` open (the server's input requests ride on it, or on
    /// stdio/the event stream beside it, and the dispatcher answers them) while polling
    /// `tasks/get` for status, the stuck detector and the deadline.
    fn follow_2025(
        &self,
        task: TaskInfo,
        follow: &mut Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        let mut held = None;
        let outcome = self.follow_2025_holding(task, follow, &mut held);
        // However the call ended, nobody waits for a `tasks/result` still held.
        if let Some(call) = held {
            self.forget(&call.id);
        }
        outcome
    }

    /// [`follow_2025`](Self::follow_2025), with the `tasks/result` it holds (if any) in
    /// `held`.
    fn follow_2025_holding(
        &self,
        mut task: TaskInfo,
        follow: &mut Follow<'_, '_>,
        held: &mut Option<InFlight>,
    ) -> Result<Value, ClientError> {
        let id = task.task_id.clone();
        let params = json!({ "taskId": id });
        *held = Some(self.start("tasks/result", params.clone())?);
        let mut seen = self.inner.shared.task_inputs(&id).seen;
        let mut stale = 0;
        let mut interval = None;
        let mut failures = 0;
        loop {
            let wake = follow.wake(self.interval(&task, &mut interval));
            if let Some(call) = held.as_ref() {
                match call.pending.recv_deadline(wake) {
                    Ok(answer) => {
                        *held = None;
                        let error = match answer.and_then(|value| result_of(&id, value)) {
                            Ok(value) => return self.finish_2025(task, value, follow),
                            Err(error) => error,
                        };
                        if self.inner.shared.closed_reason().is_some() {
                            return Err(error);
                        }
                        // It ended before a poll saw the task end: the task failed with
                        // this error, the server answered about another task, or the
                        // answer's stream or connection broke off (an
                        // HTTP server may end a resumable stream early; a proxy may cut
                        // it) while the task works on. The poll tells which; it waits
                        // for the interval, so a server that keeps ending `tasks/result`
                        // at once is not asked again at once.
                        log::info!("mcp client: tasks/result for task {id} ended early: {error}");
                        sleep_until(wake);
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                        return Err(self.gone())
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                }
            } else {
                sleep_until(wake);
            }
            if follow.deadline_at().is_some_and(|d| Instant::now() >= d) {
                return self.deadline_passed(&id, follow);
            }
            let polled = match self.poll_task(&id, follow) {
                Ok(polled) => polled,
                Err(failure) => match self.after_failure(failure, &mut failures, &id, follow) {
                    Some(end) => return end,
                    None => continue,
                },
            };
            failures = 0;
            task = polled.task;
            follow.polls += 1;
            follow.report(&task);
            if task.status == TaskStatus::Cancelled {
                // A cancelled task has no result to wait for (what `tasks/result` answers
                // for one is not defined, and a server may never answer it): the call ends
                // here, and the held one is forgotten.
                return settle_2025(task, Ok(Value::Null));
            }
            if task.status.is_terminal() {
                // The held tasks/result answers now: wait for it, but no longer than a
                // request may take (and not past the deadline). If it ended early, a new
                // one answers at once for an ended task.
                let was_held = held.is_some();
                let about = |outcome: Result<Option<Value>, ClientError>| {
                    outcome.and_then(|value| value.map(|v| result_of(&id, v)).transpose())
                };
                let mut outcome = about(match held.take() {
                    Some(call) => self.wait_within(call, "tasks/result", follow.deadline_at()),
                    None => self.ask("tasks/result", params.clone(), follow.deadline_at()),
                });
                // A held one whose stream broke off just then (not a JSON-RPC answer, the
                // connection still open) is asked once more: the task has ended, so a new
                // one answers at once.
                if was_held
                    && matches!(&outcome, Err(e) if !matches!(e, ClientError::Rpc(_)))
                    && self.inner.shared.closed_reason().is_none()
                {
                    outcome = about(self.ask("tasks/result", params, follow.deadline_at()));
                }
                let outcome = match outcome {
                    Ok(Some(value)) => Ok(value),
                    Ok(None) => return self.deadline_passed(&id, follow),
                    Err(error) => Err(error),
                };
                return settle_2025(task, outcome);
            }
            if held.is_none() {
                // The task works on: hold a new tasks/result (the server's requests for
                // the task may ride on it).
                match self.start("tasks/result", params.clone()) {
                    Ok(call) => *held = Some(call),
                    Err(error) if self.inner.shared.closed_reason().is_some() => return Err(error),
                    Err(error) => log::info!(
                        "mcp client: cannot send tasks/result for task {id} again: {error}; \
                         trying at the next poll"
                    ),
                }
            }
            let inputs = self.inner.shared.task_inputs(&id);
            if task.status == TaskStatus::InputRequired
                && inputs.in_flight == 0
                && inputs.seen == seen
            {
                if let Some(end) = self.stuck_check(&mut stale, &id) {
                    return end;
                }
            } else {
                stale = 0;
            }
            seen = inputs.seen;
        }
    }

    /// Turns the `tasks/result` answer into the call's outcome, by the task's final status.
    fn finish_2025(
        &self,
        task: TaskInfo,
        result: Value,
        follow: &mut Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        if task.status.is_terminal() {
            return settle_2025(task, Ok(result));
        }
        // tasks/result answered before a poll saw the end: one last poll for the status.
        // The result is in hand: a poll that fails (the task expired just now, say), or
        // that lags behind and still finds the task at work, must not lose it, and the
        // result tells the status itself (only a tool error, `isError`, ends a task
        // failed with a result).
        let task = match self.poll_task(&task.task_id, follow) {
            Ok(polled) => {
                follow.polls += 1;
                follow.report(&polled.task);
                polled.task
            }
            Err(_) => task,
        };
        let task = if task.status.is_terminal() {
            task
        } else {
            let failed = result.get("isError").and_then(Value::as_bool) == Some(true);
            TaskInfo {
                status: if failed {
                    TaskStatus::Failed
                } else {
                    TaskStatus::Completed
                },
                ..task
            }
        };
        settle_2025(task, Ok(result))
    }

    /// SEP-2663: poll `tasks/get`; answer new `inputRequests` keys with `tasks/update`.
    fn follow_sep2663(
        &self,
        mut task: TaskInfo,
        follow: &mut Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        let id = task.task_id.clone();
        let mut answered: HashSet<String> = HashSet::new();
        // Answers whose tasks/update failed: sent again while the task still asks for
        // them (a server ignores keys it no longer expects, so a repeat is harmless).
        let mut unsent = InputResponses::new();
        let mut stale = 0;
        let mut interval = None;
        let mut poll_failures = 0;
        let mut update_failures = 0;
        let mut watch = TaskWatch::new(self, &id);
        // When the next poll at the interval is due. A notification brings a look forward
        // (`early`) but leaves this schedule as it is: the stuck detector and the failed
        // polls in a row count polls at the interval only, so a server that keeps saying
        // the task changed cannot make a task count as stuck, or a passing failure as
        // lasting, in a fraction of the time it would take without.
        let mut due = None;
        loop {
            if follow.deadline_at().is_some_and(|d| Instant::now() >= d) {
                return self.deadline_passed(&id, follow);
            }
            let at = *due.get_or_insert_with(|| follow.wake(self.interval(&task, &mut interval)));
            let early = watch.sleep_until(at);
            if !early {
                due = None;
            }
            // A poll sent now could only be given up on.
            if follow.deadline_at().is_some_and(|d| Instant::now() >= d) {
                return self.deadline_passed(&id, follow);
            }
            let polled = match self.poll_task(&id, follow) {
                Ok(polled) => polled,
                // Like a stale poll, a look brought forward that fails does not count:
                // the polls at the interval tell whether the failures pass.
                Err(Failure::Passing(error)) if early => {
                    log::info!("mcp client: following task {id}: {error}; trying again");
                    continue;
                }
                Err(failure) => {
                    match self.after_failure(failure, &mut poll_failures, &id, follow) {
                        Some(end) => return end,
                        None => continue,
                    }
                }
            };
            poll_failures = 0;
            task = polled.task.clone();
            follow.polls += 1;
            follow.report(&task);
            if task.status != TaskStatus::InputRequired {
                if let Some(end) = settle_sep2663(polled) {
                    return end;
                }
                // Working: whatever was sent last has arrived.
                stale = 0;
                unsent.clear();
                update_failures = 0;
                continue;
            }
            // An answer the server no longer asks for has arrived.
            unsent.retain(|key, _| polled.input_requests.contains_key(key));
            let fresh: Vec<(&String, &Value)> = polled
                .input_requests
                .iter()
                .filter(|(key, _)| !answered.contains(*key))
                .collect();
            if fresh.is_empty() && unsent.is_empty() {
                if !early {
                    if let Some(end) = self.stuck_check(&mut stale, &id) {
                        return end;
                    }
                }
                continue;
            }
            stale = 0;
            for (key, request) in fresh {
                let answer = match self.answer_input(key, request, Some(&id)) {
                    Ok(answer) => answer,
                    Err(error) => return self.abandon(&id, |_| error),
                };
                answered.insert(key.clone());
                unsent.insert(key.clone(), answer);
            }
            let update = json!({ "taskId": id, "inputResponses": unsent });
            let failure = match self.ask("tasks/update", update, follow.deadline_at()) {
                Ok(Some(_)) => {
                    update_failures = 0;
                    unsent.clear();
                    continue;
                }
                Ok(None) => Failure::Deadline,
                // On tasks/update, -32602 may as well refuse the answers as the task: the
                // next poll tells (-32602 there is the task gone).
                Err(ClientError::Rpc(e)) if e.code == INVALID_PARAMS => {
                    Failure::Passing(ClientError::Rpc(e))
                }
                Err(error) => self.sort_failure(&id, error),
            };
            if let Some(end) = self.after_failure(failure, &mut update_failures, &id, follow) {
                return end;
            }
        }
    }

    /// Answers one SEP-2663 input request (`{method, params}`) through the handlers.
    pub(super) fn answer_input(
        &self,
        key: &str,
        request: &Value,
        task_id: Option<&str>,
    ) -> Result<Value, ClientError> {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let input = InputRequest {
            method: method.to_owned(),
            params: request.get("params").cloned().unwrap_or_else(|| json!({})),
            task_id: task_id.map(str::to_owned),
            key: key.to_owned(),
        };
        self.inner
            .handlers
            .answer(&input)
            .map_err(|error| ClientError::Input {
                key: key.to_owned(),
                error,
            })
    }
}

/// Why a poll (or update) of a followed task brought no answer.
enum Failure {
    /// The call's deadline passed first.
    Deadline,
    /// Following the task is over: the server forgot it, or the connection is closed.
    Over(ClientError),
    /// Perhaps passing (a timeout, a malformed answer, an HTTP error, another JSON-RPC
    /// error): worth trying again.
    Passing(ClientError),
}

/// A `tasks/get` answer about task `task_id`: one about another task (a broken server's,
/// or a proxy's mix-up) says nothing of it, and must not end its call with another task's
/// status or result.
fn polled_about(task_id: &str, value: &Value) -> Result<PolledTask, ClientError> {
    let polled = PolledTask::from_value(value)?;
    if polled.task.task_id != task_id {
        return Err(ClientError::Protocol(format!(
            "tasks/get for task {task_id} answered about task {}",
            polled.task.task_id
        )));
    }
    Ok(polled)
}

/// A `tasks/result` answer for task `task_id` (2025-11-25): one whose related-task `_meta`
/// names another task is that task's result (a broken server's, or a proxy's mix-up), not
/// this one's. (One without the `_meta` the server must add is taken as it is.)
pub(super) fn result_of(task_id: &str, value: Value) -> Result<Value, ClientError> {
    let about = value
        .pointer(&format!(
            "/_meta/{}/taskId",
            RELATED_TASK.replace('/', "~1")
        ))
        .cloned();
    match about {
        Some(about) if about.as_str() != Some(task_id) => Err(ClientError::Protocol(format!(
            "tasks/result for task {task_id} answered with the result of task {about}"
        ))),
        _ => Ok(value),
    }
}

/// Sleeps until `wake` (at once if it passed).
fn sleep_until(wake: Instant) {
    std::thread::sleep(wake.saturating_duration_since(Instant::now()));
}

/// A SEP-2663 task followed through the server's status notifications as well as polls
/// (see [`ClientBuilder::task_notifications`]): a `subscriptions/listen` for it, and a
/// wake-up for each `notifications/tasks` about it. A subscription that breaks off (its
/// HTTP event stream ends without its result: a proxy's idle limit, a server dropping a
/// slow reader) is opened again, and the task looked at; once more than
/// [`MAX_QUICK_BREAKS`] in a row broke off soon after they opened, the task is only
/// polled.
/// Dropped, it ends the subscription if the server has not (it does once the task ended).
struct TaskWatch<'c> {
    client: &'c Client,
    task_id: String,
    key: u64,
    woken: crossbeam_channel::Receiver<()>,
    /// The subscription's request: answered when it ends (or at once, with an error, by
    /// a server without task notifications). `None` once it ended for good.
    listen: Option<InFlight>,
    /// Whether it holds one of the [`MAX_HTTP_TASK_SUBSCRIPTIONS`] places.
    placed: bool,
    /// When the subscription was opened.
    opened: Instant,
    /// Subscriptions in a row that broke off within [`LASTING_SUBSCRIPTION`].
    quick_breaks: u32,
}

/// A subscription that lasted this long before it broke off was a working one: it is
/// opened again however many did before it.
const LASTING_SUBSCRIPTION: Duration = Duration::from_secs(10);

/// Subscriptions in a row that may break off soon after they opened (within
/// [`LASTING_SUBSCRIPTION`]) and still be opened again: past them the client stops opening
/// them for the task (a server or proxy that cuts every one at once).
pub(super) const MAX_QUICK_BREAKS: u32 = 3;

impl<'c> TaskWatch<'c> {
    fn new(client: &'c Client, task_id: &str) -> TaskWatch<'c> {
        let shared = &client.inner.shared;
        let (key, woken) = shared.watch_task(task_id);
        let wanted = client.inner.config.task_notifications;
        // Over HTTP a subscription holds a connection (its exchange is one of its own).
        let costs_a_connection = client.inner.transport.abandon_ends_exchange();
        let placed =
            wanted && costs_a_connection && shared.claim_subscription(MAX_HTTP_TASK_SUBSCRIPTIONS);
        let mut watch = TaskWatch {
            client,
            task_id: task_id.to_owned(),
            key,
            woken,
            listen: None,
            placed,
            opened: Instant::now(),
            quick_breaks: 0,
        };
        if wanted && (placed || !costs_a_connection) {
            watch.listen = watch.subscribe();
        }
        watch
    }

    /// Opens a subscription to the task.
    fn subscribe(&mut self) -> Option<InFlight> {
        self.opened = Instant::now();
        let filter = json!({ "notifications": { "taskIds": [self.task_id] } });
        self.client.start("subscriptions/listen", filter).ok()
    }

    /// Sleeps until `wake`, or until the server says the task changed, or its
    /// subscription broke off and was opened again (but at least [`MIN_POLL_INTERVAL`]: a
    /// server sending notifications without end cannot make the client poll without
    /// pause). True if it woke before `wake`.
    fn sleep_until(&mut self, wake: Instant) -> bool {
        let floor = Instant::now() + MIN_POLL_INTERVAL;
        let never = crossbeam_channel::never();
        loop {
            let ended = self
                .listen
                .as_ref()
                .map_or(&never, |listen| &listen.pending);
            crossbeam_channel::select! {
                recv(self.woken) -> woken => {
                    if woken.is_err() {
                        sleep_until(wake);
                        return false;
                    }
                }
                recv(ended) -> end => {
                    self.listen = None;
                    // Its result (the server ended it) or a refusal is final.
                    let error = match end {
                        Ok(Err(error)) if !matches!(error, ClientError::Rpc(_)) => error,
                        _ => continue,
                    };
                    if self.opened.elapsed() >= LASTING_SUBSCRIPTION {
                        self.quick_breaks = 0;
                    } else {
                        self.quick_breaks += 1;
                    }
                    if self.quick_breaks > MAX_QUICK_BREAKS {
                        log::info!(
                            "mcp client: the subscriptions to task {} keep breaking off \
                             ({error}); it is only polled from now on",
                            self.task_id
                        );
                        continue;
                    }
                    log::info!(
                        "mcp client: the subscription to task {} broke off ({error}); \
                         subscribing again",
                        self.task_id
                    );
                    // What changed meanwhile went unheard: the task is looked at.
                    self.listen = self.subscribe();
                }
                default(wake.saturating_duration_since(Instant::now())) => return false,
            }
            let at = floor.min(wake);
            sleep_until(at);
            return at < wake;
        }
    }
}

impl Drop for TaskWatch<'_> {
    fn drop(&mut self) {
        let client = self.client;
        client.inner.shared.unwatch_task(&self.task_id, self.key);
        if self.placed {
            client.inner.shared.release_subscription();
        }
        let Some(listen) = self.listen.take() else {
            return;
        };
        if listen.pending.try_recv().is_ok() {
            // Ended (or refused) already.
            return;
        }
        client.forget(&listen.id);
        if !client.inner.transport.abandon_ends_exchange() {
            let cancel = json!({ "requestId": listen.id });
            let _ = (client.inner.transport)
                .send(jsonrpc::notification("notifications/cancelled", cancel));
        }
    }
}

/// The outcome of a 2025-11-25 call whose task ended `task.status`, given its
/// `tasks/result` answer: a `failed` task's result (`isError`) or JSON-RPC error becomes
/// [`ClientError::TaskFailed`]; a `cancelled` task is [`ClientError::TaskCancelled`]
/// whatever the answer (no `tasks/result` needs waiting for then).
fn settle_2025(task: TaskInfo, outcome: Result<Value, ClientError>) -> Result<Value, ClientError> {
    match (task.status, outcome) {
        (TaskStatus::Cancelled, _) => Err(ClientError::TaskCancelled {
            task: Box::new(task),
        }),
        (TaskStatus::Failed, Ok(result)) => Err(ClientError::TaskFailed {
            task: Box::new(task),
            result: Some(result),
            error: None,
        }),
        (TaskStatus::Failed, Err(ClientError::Rpc(error))) => Err(ClientError::TaskFailed {
            task: Box::new(task),
            result: None,
            error: Some(error),
        }),
        (_, outcome) => outcome,
    }
}

/// The outcome of a SEP-2663 call whose task ended, from the poll that saw the end;
/// `None` while the task has not ended.
fn settle_sep2663(polled: PolledTask) -> Option<Result<Value, ClientError>> {
    let task = Box::new(polled.task);
    Some(match task.status {
        TaskStatus::Completed => polled.result.ok_or_else(|| {
            ClientError::Protocol(format!("task {} completed without a result", task.task_id))
        }),
        TaskStatus::Failed => Err(ClientError::TaskFailed {
            task,
            result: polled.result,
            error: polled.error,
        }),
        TaskStatus::Cancelled => Err(ClientError::TaskCancelled { task }),
        TaskStatus::Working | TaskStatus::InputRequired => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;

    use super::*;

    /// What the scripted server below does with `subscriptions/listen`.
    #[derive(Clone, Copy, Debug)]
    enum Listen {
        /// Never answers it.
        Silent,
        /// Refuses it, as a server without task notifications does.
        Refused,
        /// Ends it (its result) right before the poll that finds the task ended.
        EndsWithTheTask,
    }

    /// A SEP-2663 server over a socket pair whose task t1 works until `ends` polls (never
    /// with `None`; a cancel ends it too), and treats the subscription as `listen` says.
    /// Returns the client end, and the server's thread, which returns every message it
    /// read once the client is gone.
    fn server(
        listen: Listen,
        ends: Option<usize>,
    ) -> (UnixStream, std::thread::JoinHandle<Vec<Value>>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let thread = std::thread::spawn(move || {
            let mut out = theirs.try_clone().unwrap();
            let (mut seen, mut polls, mut listening, mut cancelled) = (Vec::new(), 0, None, false);
            for line in BufReader::new(theirs).lines() {
                let Ok(line) = line else { break };
                let message: Value = serde_json::from_str(&line).unwrap();
                seen.push(message.clone());
                let (Some(method), Some(id)) = (message["method"].as_str(), message.get("id"))
                else {
                    continue;
                };
                let answer = |outcome: Value| {
                    let mut answer = json!({"jsonrpc": "2.0", "id": id});
                    answer
                        .as_object_mut()
                        .unwrap()
                        .extend(outcome.as_object().unwrap().clone());
                    answer
                };
                let task =
                    |status: &str| json!({"taskId": "t1", "status": status, "pollIntervalMs": 10});
                let reply = match method {
                    "server/discover" => {
                        answer(json!({"result": {"supportedVersions": ["2026-07-28"]}}))
                    }
                    "tools/list" => answer(json!({"result": {"tools": [{"name": "work",
                        "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}]}})),
                    "tools/call" => {
                        let mut created = task("working");
                        created["resultType"] = json!("task");
                        answer(json!({ "result": created }))
                    }
                    "subscriptions/listen" => match listen {
                        Listen::Refused => {
                            answer(json!({"error": {"code": -32601, "message": "no"}}))
                        }
                        Listen::Silent | Listen::EndsWithTheTask => {
                            listening = Some(id.clone());
                            continue;
                        }
                    },
                    "tasks/cancel" => {
                        cancelled = true;
                        answer(json!({"result": {"resultType": "complete"}}))
                    }
                    "tasks/get" => {
                        polls += 1;
                        let ended = cancelled || ends.is_some_and(|ends| polls >= ends);
                        if ended && matches!(listen, Listen::EndsWithTheTask) {
                            if let Some(id) = listening.take() {
                                let end = json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete"}});
                                writeln!(out, "{end}").unwrap();
                            }
                        }
                        let mut polled = match (cancelled, ended) {
                            (true, _) => task("cancelled"),
                            (_, true) => task("completed"),
                            _ => task("working"),
                        };
                        if ended && !cancelled {
                            polled["result"] = json!({"content": []});
                        }
                        answer(json!({ "result": polled }))
                    }
                    _ => answer(json!({"result": {}})),
                };
                if writeln!(out, "{reply}").is_err() {
                    break;
                }
            }
            seen
        });
        (ours, thread)
    }

    /// The `notifications/cancelled` the client sent, by the request id they name.
    fn cancelled(seen: &[Value]) -> Vec<Value> {
        seen.iter()
            .filter(|m| m["method"] == "notifications/cancelled")
            .map(|m| m["params"]["requestId"].clone())
            .collect()
    }

    fn listen_id(seen: &[Value]) -> Value {
        seen.iter()
            .find(|m| m["method"] == "subscriptions/listen")
            .map(|m| m["id"].clone())
            .expect("the client subscribed")
    }

    #[test]
    fn without_task_notifications_a_followed_task_is_only_polled() {
        let (stream, thread) = server(Listen::Silent, Some(2));
        let control = stream.try_clone().unwrap();
        let client = Client::builder()
            .revision(Revision::Sep2663)
            .task_notifications(false)
            .connect_streams(stream.try_clone().unwrap(), stream)
            .unwrap();
        assert_eq!(
            client.call_tool("work", json!({})).unwrap(),
            json!({"content": []})
        );
        drop(client);
        control.shutdown(std::net::Shutdown::Both).unwrap();
        let seen = thread.join().unwrap();
        let methods: Vec<&str> = seen.iter().filter_map(|m| m["method"].as_str()).collect();
        assert!(!methods.contains(&"subscriptions/listen"), "{methods:?}");
        assert!(methods.contains(&"tasks/get"), "{methods:?}");
    }

    #[test]
    fn a_followed_task_leaves_no_subscription_behind_however_the_call_ends() {
        for (listen, ends, deadline) in [
            (Listen::Silent, Some(2), None),
            (Listen::Refused, Some(2), None),
            (Listen::EndsWithTheTask, Some(2), None),
            (Listen::Silent, None, Some(Duration::from_millis(200))),
            (
                Listen::EndsWithTheTask,
                None,
                Some(Duration::from_millis(200)),
            ),
        ] {
            let case = format!("{listen:?}, task ends after {ends:?} polls");
            let (stream, thread) = server(listen, ends);
            let mut builder = Client::builder().revision(Revision::Sep2663);
            if let Some(deadline) = deadline {
                builder = builder.deadline(deadline);
            }
            let control = stream.try_clone().unwrap();
            let client = builder
                .connect_streams(stream.try_clone().unwrap(), stream)
                .unwrap();
            // A hang guard: the call ends within milliseconds.
            let (done, called) = crossbeam_channel::bounded(1);
            std::thread::spawn(move || {
                let outcome = client.call_tool("work", json!({}));
                let _ = done.send((client, outcome));
            });
            let (client, outcome) = called
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("{case}: the call hangs"));
            match deadline {
                None => assert_eq!(outcome.unwrap(), json!({"content": []}), "{case}"),
                Some(_) => assert!(
                    matches!(
                        outcome,
                        Err(ClientError::Deadline {
                            cancelled: true,
                            ..
                        })
                    ),
                    "{case}: {outcome:?}"
                ),
            }
            // No request waits any more, and no task is watched.
            assert_eq!(client.inner.shared.waiting(), (0, 0), "{case}");
            // Answered after whatever the client sent before it (one queue, in order).
            client.request("ping", json!({})).unwrap();
            // The server's reading ends when the socket does.
            drop(client);
            control.shutdown(std::net::Shutdown::Both).unwrap();
            let seen = thread.join().unwrap();
            // A subscription the server did not end is ended by the client (stdio:
            // `notifications/cancelled`), and only then. (A poll the deadline cut short
            // is cancelled too.)
            let listen_id = listen_id(&seen);
            let expected = match listen {
                Listen::Silent => vec![listen_id.clone()],
                Listen::Refused | Listen::EndsWithTheTask => Vec::new(),
            };
            let mut ended = cancelled(&seen);
            ended.retain(|id| *id == listen_id);
            assert_eq!(ended, expected, "{case}");
        }
    }
}
