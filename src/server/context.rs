//! What a running tool can see and do: its task, cancellation, status messages, and input
//! requests to the client (elicitation, sampling, roots) that put the task in
//! `input_required` while they wait.
//!
//! On 2025-11-25 an input request is a real server-to-client request tagged with the related
//! task; on SEP-2663 it is an entry in the task's `inputRequests`, answered by `tasks/update`.
//! A SEP-2663 call may also start inline and be promoted to a task later (see
//! [`Binding`]); the context follows it.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::{json, Value};

use super::pool::{Lent, Places};
use crate::model::{InputRequests, SessionId, TaskId, TaskStatus};
use crate::protocol::jsonrpc::INTERNAL_ERROR;
use crate::protocol::{sep2663, v2025, Revision, RpcError};
use crate::store::CancelToken;
use crate::{StoreError, TaskStore};

/// Sends requests to the client on behalf of a tool and blocks for the answer.
pub trait ClientPeer: Send + Sync {
    /// Sends `method` with `params` and waits for the response. `task` ties the request to
    /// a task: the wait ends early, with an error, if that task ends. (The peer a tool's
    /// [`TaskContext`] holds also ends the wait of a plain call its client cancels, and
    /// withdraws the request with `notifications/cancelled`.)
    fn request(&self, method: &str, params: Value, task: Option<TaskId>)
        -> Result<Value, RpcError>;

    /// Whether the client declared it takes `method` (a request it did not declare is
    /// refused without being sent). Asked before a task is marked `input_required`, so a
    /// question that cannot be put never shows there. Every method, by default.
    fn supports(&self, method: &str) -> bool {
        let _ = method;
        true
    }
}

/// The error a tool gets for a request to a client that did not declare `method`.
pub(crate) fn undeclared(method: &str) -> RpcError {
    RpcError::new(
        INTERNAL_ERROR,
        format!("the client did not declare support for {method}"),
    )
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

/// Where a run stands with respect to its task.
#[derive(Clone, Debug)]
enum BindingState {
    /// Running inline; may still become a task (if the binding is promotable).
    Inline,
    /// Running as this task.
    Task(TaskId, CancelToken),
    /// Finished inline, or its promotion failed: will never become a task.
    NeverTask,
}

/// The link between a run and its task, which a promoted call acquires while it runs.
#[derive(Debug)]
pub(crate) struct Binding {
    state: Mutex<BindingState>,
    changed: Condvar,
    promotable: bool,
    /// The client cancelled the call (`notifications/cancelled`) while it ran inline.
    /// Written under `state`'s lock, so a waiter on `changed` cannot miss it.
    cancelled_inline: AtomicBool,
    /// The cancel came from the client itself, so the call gets no response (rather than
    /// from its connection closing, where nobody reads one).
    withheld: AtomicBool,
    /// Dropped when the call is cancelled inline, which disconnects [`rung`](Self::rung):
    /// how a wait on a channel (a request to the client) hears of the cancel.
    bell: Mutex<Option<crossbeam_channel::Sender<()>>>,
    rung: crossbeam_channel::Receiver<()>,
    /// Dropped when the run needs to be a task now (it asks for input, which only a task
    /// can wait for): disconnects [`hurried`](Self::hurried), which ends the promotion
    /// waiter's wait before its budget runs out.
    hurry: Mutex<Option<crossbeam_channel::Sender<()>>>,
    hurried: crossbeam_channel::Receiver<()>,
}

impl Binding {
    fn new(state: BindingState, promotable: bool) -> Arc<Binding> {
        let (bell, rung) = crossbeam_channel::bounded(0);
        let (hurry, hurried) = crossbeam_channel::bounded(0);
        Arc::new(Binding {
            state: Mutex::new(state),
            changed: Condvar::new(),
            promotable,
            cancelled_inline: AtomicBool::new(false),
            withheld: AtomicBool::new(false),
            bell: Mutex::new(Some(bell)),
            rung,
            hurry: Mutex::new(Some(hurry)),
            hurried,
        })
    }

    /// A run that is a task from the start.
    pub(crate) fn task(id: TaskId, token: CancelToken) -> Arc<Binding> {
        Binding::new(BindingState::Task(id, token), false)
    }

    /// A plain call that never becomes a task.
    pub(crate) fn inline() -> Arc<Binding> {
        Binding::new(BindingState::Inline, false)
    }

    /// A call that runs inline and may be promoted to a task.
    pub(crate) fn promotable() -> Arc<Binding> {
        Binding::new(BindingState::Inline, true)
    }

    /// The client cancelled the call. Only a run still inline is affected: a task is
    /// cancelled with `tasks/cancel`, never by the request's cancellation. True if it was.
    pub(crate) fn cancel_inline(&self) -> bool {
        self.cancel_inline_withholding(false)
    }

    fn cancel_inline_withholding(&self, withhold: bool) -> bool {
        let state = self.state.lock();
        if !matches!(*state, BindingState::Inline) {
            return false;
        }
        // Before the run can see its cancel (and finish, and read this): a run that stops
        // because its client cancelled it must find its response withheld.
        if withhold {
            self.withheld.store(true, Ordering::Release);
        }
        self.cancelled_inline.store(true, Ordering::Release);
        self.changed.notify_all();
        self.bell.lock().take();
        true
    }

    /// A channel that disconnects once the call is cancelled while it runs inline (by its
    /// client, or its connection closing): to wait on alongside another channel.
    pub(crate) fn cancelled_signal(&self) -> crossbeam_channel::Receiver<()> {
        self.rung.clone()
    }

    /// [`cancel_inline`](Self::cancel_inline) on the client's `notifications/cancelled`:
    /// the call's response is withheld too. True if the run was still inline.
    pub(crate) fn cancel_by_client(&self) -> bool {
        self.cancel_inline_withholding(true)
    }

    /// A channel that disconnects once the run asks to be promoted at once (see
    /// [`hurry`](Self::hurry)): the promotion waiter waits on it alongside its budget.
    pub(crate) fn hurried(&self) -> crossbeam_channel::Receiver<()> {
        self.hurried.clone()
    }

    /// Asks for the run to be promoted now rather than when its budget runs out.
    fn hurry(&self) {
        self.hurry.lock().take();
    }

    /// The run will never be promoted (nothing is left to promote it): a run waiting to
    /// become a task learns so, instead of waiting for ever.
    pub(crate) fn never_task(&self) {
        let mut state = self.state.lock();
        if matches!(*state, BindingState::Inline) {
            *state = BindingState::NeverTask;
            self.changed.notify_all();
        }
    }

    /// True once the client cancelled this run's request: it gets no response.
    pub(crate) fn is_withheld(&self) -> bool {
        self.withheld.load(Ordering::Acquire)
    }

    fn is_cancelled_inline(&self) -> bool {
        self.cancelled_inline.load(Ordering::Acquire)
    }

    /// Sleeps until `deadline` unless the call is cancelled first (then true).
    fn sleep_inline(&self, deadline: Instant) -> bool {
        let mut state = self.state.lock();
        while !self.is_cancelled_inline() {
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                return self.is_cancelled_inline();
            }
        }
        true
    }

    fn current(&self) -> Option<(TaskId, CancelToken)> {
        match &*self.state.lock() {
            BindingState::Task(id, token) => Some((*id, token.clone())),
            _ => None,
        }
    }

    /// Promotes an inline run: `make_task` creates the task, under the binding's lock so the
    /// run cannot finish inline meanwhile, and returns its id, its cancellation token and
    /// whatever the caller wants back. `None` if the run already finished inline.
    pub(crate) fn promote<T, E>(
        &self,
        make_task: impl FnOnce() -> Result<(TaskId, CancelToken, T), E>,
    ) -> Option<Result<T, E>> {
        let mut state = self.state.lock();
        // A call its client cancelled is finishing inline: it must not become a task.
        if !matches!(*state, BindingState::Inline) || self.is_cancelled_inline() {
            return None;
        }
        let made = match make_task() {
            Ok((id, token, made)) => {
                *state = BindingState::Task(id, token);
                Ok(made)
            }
            Err(error) => {
                // A run waiting to become a task must learn that it never will.
                *state = BindingState::NeverTask;
                Err(error)
            }
        };
        self.changed.notify_all();
        Some(made)
    }

    /// Called by the run when it is done: `Some(task)` if it was promoted meanwhile (the
    /// outcome belongs in the store), `None` if it finished inline (the outcome goes back
    /// to the caller directly; the binding can no longer be promoted).
    pub(crate) fn finish(&self) -> Option<TaskId> {
        let mut state = self.state.lock();
        match &*state {
            BindingState::Task(id, _) => Some(*id),
            _ => {
                *state = BindingState::NeverTask;
                None
            }
        }
    }

    /// Waits until the run is bound to a task or `deadline` passes.
    fn wait_bound(&self, deadline: Option<Instant>) -> Option<(TaskId, CancelToken)> {
        let mut state = self.state.lock();
        loop {
            match &*state {
                BindingState::Task(id, token) => return Some((*id, token.clone())),
                BindingState::NeverTask => return None,
                BindingState::Inline if self.is_cancelled_inline() => return None,
                BindingState::Inline => {}
            }
            match deadline {
                Some(at) => {
                    if self.changed.wait_until(&mut state, at).timed_out() {
                        return None;
                    }
                }
                None => self.changed.wait(&mut state),
            }
        }
    }
}

/// The context a tool runs in. For a plain (non-task) call there is no task: status
/// messages are ignored and the run is never cancelled.
pub struct TaskContext {
    binding: Arc<Binding>,
    revision: Revision,
    session: Option<SessionId>,
    store: Arc<dyn TaskStore>,
    peer: Arc<dyn ClientPeer>,
    next_key: AtomicU64,
    call_responses: Option<Value>,
    /// The client capabilities the SEP-2663 call declared (what it may be asked for);
    /// `None` on 2025-11-25, where the connection's `initialize` declared them.
    declared: Option<Vec<String>>,
    /// The worker pool's places, lent while the tool waits on its client.
    places: Option<Places>,
    /// How many of the tool's threads wait on its client, and the place lent while any
    /// does: a tool may ask from threads of its own while its worker waits for them.
    lent: Mutex<(usize, Option<Lent>)>,
    /// How many 2025-11-25 input rounds the tool has waiting (its threads may ask at once):
    /// the task goes back to `working` only when the last one is answered. Held while the
    /// status is written, so a round that starts as another ends cannot be undone by it.
    asking: Mutex<usize>,
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("task", &self.task_id())
            .field("revision", &self.revision)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl TaskContext {
    pub(crate) fn new(
        binding: Arc<Binding>,
        revision: Revision,
        session: Option<SessionId>,
        store: Arc<dyn TaskStore>,
        peer: Arc<dyn ClientPeer>,
    ) -> TaskContext {
        TaskContext {
            binding,
            revision,
            session,
            store,
            peer,
            next_key: AtomicU64::new(1),
            call_responses: None,
            declared: None,
            places: None,
            lent: Mutex::new((0, None)),
            asking: Mutex::new(0),
        }
    }

    /// Lends the tool's worker-pool place through `places` whenever it waits on its
    /// client (see `pool`). Made on the pool thread that runs the tool (elsewhere there is
    /// no place to lend, and none is).
    pub(crate) fn with_places(mut self, places: Places) -> TaskContext {
        self.places = places.if_in_pool();
        self
    }

    /// Runs `wait`, a wait on the client, with the tool's pool place lent meanwhile: from
    /// the first of its threads that waits until the last is done, whichever thread that
    /// is (the pool thread itself may be waiting for them).
    fn waiting_on_client<R>(&self, wait: impl FnOnce() -> R) -> R {
        let Some(places) = &self.places else {
            return wait();
        };
        {
            let mut lent = self.lent.lock();
            lent.0 += 1;
            if lent.1.is_none() {
                lent.1 = Some(places.lend_place());
            }
        }
        // Taken back however the wait ends, panics included.
        struct Back<'a>(&'a Mutex<(usize, Option<Lent>)>);
        impl Drop for Back<'_> {
            fn drop(&mut self) {
                let mut lent = self.0.lock();
                lent.0 -= 1;
                if lent.0 == 0 {
                    lent.1 = None;
                }
            }
        }
        let _back = Back(&self.lent);
        wait()
    }

    /// Attaches the `inputResponses` the call carried (SEP-2663 multi-round-trip).
    pub(crate) fn with_call_responses(mut self, responses: Option<Value>) -> TaskContext {
        self.call_responses = responses;
        self
    }

    /// Attaches the client capabilities a SEP-2663 call declared: input needing another
    /// is refused (see [`request_input`](Self::request_input)).
    pub(crate) fn with_declared(mut self, declared: Option<Vec<String>>) -> TaskContext {
        self.declared = declared;
        self
    }

    /// The answer the call itself carried for input request `key` (the SEP-2663
    /// multi-round-trip flow, see [`Tool::with_preflight`](super::Tool::with_preflight)).
    pub fn call_input(&self, key: &str) -> Option<&Value> {
        self.call_responses.as_ref().and_then(|r| r.get(key))
    }

    /// The task this run belongs to, if it is (or has become) a task.
    pub fn task_id(&self) -> Option<TaskId> {
        self.binding.current().map(|(id, _)| id)
    }

    /// The protocol revision of the call.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// True once the task was cancelled or expired, or, for a plain call, once the client
    /// cancelled the request (`notifications/cancelled`): the tool should stop soon.
    pub fn is_cancelled(&self) -> bool {
        match self.binding.current() {
            Some((_, token)) => token.is_cancelled(),
            None => self.binding.is_cancelled_inline(),
        }
    }

    /// Sets the task's status message (progress for the humans polling it).
    pub fn set_status_message(&self, message: impl Into<String>) -> Result<(), StoreError> {
        let Some(id) = self.task_id() else {
            return Ok(());
        };
        self.store
            .set_status_message(id, self.session.as_ref(), Some(message.into()))
            .map(|_| ())
    }

    /// Sleeps for `duration`, waking at once (with `Cancelled`) if the task ends meanwhile,
    /// or, for a plain call, if the client cancels the request. It waits on the store (or
    /// the call's binding) rather than polling a flag. A duration too long to add to the
    /// clock (`Duration::MAX`: until cancelled) sleeps a century.
    pub fn sleep(&self, duration: Duration) -> Result<(), Cancelled> {
        const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
        let now = Instant::now();
        let deadline = (now.checked_add(duration)).unwrap_or_else(|| now + CENTURY);
        let bound = match self.binding.current() {
            Some(bound) => Some(bound),
            None if self.binding.promotable => self.binding.wait_bound(Some(deadline)),
            None if self.binding.sleep_inline(deadline) => return Err(Cancelled),
            None => return Ok(()),
        };
        let Some((id, token)) = bound else {
            // Still inline at the deadline, or never to be a task (its promotion failed, a
            // store limit say): the rest of the time, if any, is slept inline.
            if self.binding.is_cancelled_inline() || self.binding.sleep_inline(deadline) {
                return Err(Cancelled);
            }
            return Ok(());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match self
            .store
            .wait_terminal(id, self.session.as_ref(), Some(left))
        {
            Err(StoreError::Timeout) => Ok(()),
            // No place to wait on the store: its callers blocked on this task (clients'
            // `tasks/result` calls) took every one (`max_waiters_per_task`). The task did not
            // end, so the tool is not told it was cancelled: it sleeps on, looking at its
            // cancellation token now and then.
            Err(StoreError::LimitExceeded { .. }) => sleep_watching(&token, deadline),
            _ => Err(Cancelled),
        }
    }

    /// Asks the client for input through `elicitation/create` and blocks for its answer.
    pub fn elicit(&self, params: Value) -> Result<Value, RpcError> {
        self.request_one("elicitation/create", params)
    }

    /// Asks the client's model through `sampling/createMessage` and blocks for its answer.
    pub fn sample(&self, params: Value) -> Result<Value, RpcError> {
        self.request_one("sampling/createMessage", params)
    }

    /// Asks the client for its roots (`roots/list`) and blocks for its answer.
    pub fn list_roots(&self) -> Result<Value, RpcError> {
        self.request_one("roots/list", json!({}))
    }

    fn request_one(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let mut answers = self.request_input(vec![(method.to_owned(), params)])?;
        Ok(answers.pop().unwrap_or(Value::Null))
    }

    /// Asks for several inputs (`(method, params)` each) and blocks until all are answered;
    /// the answers come back in the same order. The task is `input_required` meanwhile. On
    /// SEP-2663 they appear together in the task's `inputRequests`; on 2025-11-25 they go
    /// to the client as requests one after another, each once the one before is answered
    /// (the first error ends the round, and the rest are not sent). A plain
    /// call stops waiting, with an error, once its client cancels it or its connection
    /// closes, and a task's once the task ends (on 2025-11-25 the request is then
    /// withdrawn with `notifications/cancelled`).
    ///
    /// Input the client cannot give is refused at once: a request whose method needs a
    /// client capability (`elicitation`, `sampling`, `roots`) that the client did not
    /// declare (at `initialize`, or on SEP-2663 in the call's own `_meta`, -32021) fails
    /// with that error, and nothing is asked.
    pub fn request_input(&self, requests: Vec<(String, Value)>) -> Result<Vec<Value>, RpcError> {
        // Nothing asked, nothing to wait for (nor a status to show it), on either revision.
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(declared) = &self.declared {
            let methods = requests.iter().map(|(method, _)| method.as_str());
            if let Some(error) =
                sep2663::undeclared_input(methods, |c| declared.iter().any(|d| d == c))
            {
                return Err(error);
            }
        }
        let bound = match self.binding.current() {
            Some(bound) => Some(bound),
            // A promotable call cannot wait for input inline: it becomes a task now (its
            // client would otherwise wait out the promotion budget for the question).
            None if self.binding.promotable => {
                self.binding.hurry();
                self.binding.wait_bound(None)
            }
            None => None,
        };
        let Some((id, _)) = bound else {
            return match self.revision {
                Revision::V2025 => self.waiting_on_client(|| {
                    requests
                        .into_iter()
                        .map(|(method, params)| self.peer.request(&method, params, None))
                        .collect()
                }),
                Revision::Sep2663 => Err(RpcError::new(
                    INTERNAL_ERROR,
                    "this call runs without a task, so it cannot ask for input",
                )),
            };
        };
        match self.revision {
            Revision::V2025 => self.ask_2025(id, requests),
            Revision::Sep2663 => self.ask_sep2663(id, requests),
        }
    }

    fn ask_2025(&self, id: TaskId, requests: Vec<(String, Value)>) -> Result<Vec<Value>, RpcError> {
        let session = self.session.as_ref();
        // Refused before the status moves: a client that cannot be asked never sees the
        // task wait on it.
        if let Some((method, _)) = requests
            .iter()
            .find(|(method, _)| !self.peer.supports(method))
        {
            return Err(undeclared(method));
        }
        {
            let mut asking = self.asking.lock();
            self.store
                .update_status(id, session, TaskStatus::InputRequired, None)
                .map_err(ended_or_internal)?;
            *asking += 1;
        }
        let answers: Result<Vec<Value>, RpcError> = self.waiting_on_client(|| {
            requests
                .into_iter()
                .map(|(method, params)| {
                    self.peer
                        .request(&method, v2025::with_related_task(params, id), Some(id))
                })
                .collect()
        });
        // Back to work once no other round waits, unless the task ended meanwhile (then
        // this fails harmlessly).
        let mut asking = self.asking.lock();
        *asking -= 1;
        if *asking == 0 {
            let _ = self
                .store
                .update_status(id, session, TaskStatus::Working, None);
        }
        answers
    }

    fn ask_sep2663(
        &self,
        id: TaskId,
        requests: Vec<(String, Value)>,
    ) -> Result<Vec<Value>, RpcError> {
        let session = self.session.as_ref();
        let mut keys = Vec::with_capacity(requests.len());
        let mut pending = InputRequests::new();
        for (method, params) in requests {
            let n = self.next_key.fetch_add(1, Ordering::Relaxed);
            let key = format!("{}-{n}", method.replace('/', "-"));
            pending.insert(key.clone(), json!({ "method": method, "params": params }));
            keys.push(key);
        }
        self.store
            .set_input_requests(id, session, pending)
            .map_err(ended_or_internal)?;
        self.waiting_on_client(|| {
            keys.iter()
                .map(|key| {
                    self.store
                        .wait_input(id, session, key, None)
                        .map_err(|e| match e {
                            StoreError::AlreadyTerminal(_) | StoreError::NotFound => {
                                Cancelled.into()
                            }
                            other => RpcError::internal(other),
                        })
                })
                .collect()
        })
    }
}

/// How often a sleep that found no place to wait on the store looks at its token.
const TOKEN_CHECK_INTERVAL: Duration = Duration::from_millis(20);

/// Sleeps until `deadline`, or until `token` fires (then `Cancelled`), looking at it every
/// [`TOKEN_CHECK_INTERVAL`].
fn sleep_watching(token: &CancelToken, deadline: Instant) -> Result<(), Cancelled> {
    loop {
        if token.is_cancelled() {
            return Err(Cancelled);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(TOKEN_CHECK_INTERVAL));
    }
}

/// A store error met while asking the client for input: the task ended (it was cancelled,
/// or expired) or anything else, such as a request nested past
/// [`MAX_PAYLOAD_DEPTH`](crate::MAX_PAYLOAD_DEPTH), which is not a cancellation.
fn ended_or_internal(error: StoreError) -> RpcError {
    match error {
        StoreError::AlreadyTerminal(_)
        | StoreError::NotFound
        | StoreError::InvalidTransition { .. } => Cancelled.into(),
        other => RpcError::internal(other),
    }
}
