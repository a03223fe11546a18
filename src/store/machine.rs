//! The pure task-store state machine: no threads, no clock reads, no id generation.
//!
//! Every entry point takes `now` (and `create` takes the new id), so tests drive it
//! deterministically. Outputs are queued and drained by the caller: [`poll_wake`] hands back
//! parked waiters with what they waited for, [`poll_event`] the status events for
//! subscribers, and [`poll_timeout`] the next moment the machine wants
//! [`handle_timeout`] to be called.
//!
//! Time never runs backwards for the machine: a `now` earlier than one it has already seen
//! (monotonic and wall clock each on its own) counts as that one, so a clock that steps back
//! cannot make a deadline be missed or a task's `lastUpdatedAt` precede its `createdAt`.
//!
//! Expiry is exact: an operation that touches a task whose deadline has passed settles that
//! task first, so nothing is ever visible past its TTL, while [`handle_timeout`] reclaims
//! the tasks nobody touches in bounded batches from the timer wheel. Spurious or repeated
//! `handle_timeout` calls are harmless.
//!
//! [`poll_wake`]: StoreMachine::poll_wake
//! [`poll_event`]: StoreMachine::poll_event
//! [`poll_timeout`]: StoreMachine::poll_timeout
//! [`handle_timeout`]: StoreMachine::handle_timeout

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hasher;

use serde_json::Value;

use super::clock::{Millis, Now};
use super::config::{duration_ms, ExpiryPolicy, StoreConfig};
use super::record::{Change, OutcomeRecord, RecoveryPolicy, TaskRecord};
use super::token::CancelToken;
use super::wheel::{Polled, Wheel};
use crate::model::{
    CancelOutcome, CreateTask, InputRequests, InputResponses, LimitScope, Origin, Outcome,
    SessionId, StoreEvent, Task, TaskDetail, TaskId, TaskPage, TaskResult, TaskStatus, Timestamp,
};
use crate::StoreError;
use seq_set::SeqSet;
use table::TaskTable;

/// How many expiries re-filing one chunk of a cascade counts as, in a timeout budget: a
/// chunk (`REFILE_CHUNK` items) takes about 4 us, as long as 7 expiries of ~0.6 us
/// (median of the 7,800 chunks of a million-task expiry, timed one by one).
const REFILE_COST: usize = 8;

/// Timers reclaimed between two looks at the limits when a create finds its limit full.
const LIMIT_RECLAIM_STEP: usize = 64;

/// Most input request keys one task may use over its life; bounds a hostile worker.
const MAX_INPUT_KEYS_PER_TASK: usize = 10_000;

/// Sequence numbers a restore accepts stay below this: far past any real store's count of
/// creates (2^63 of them), and far enough from `u64::MAX` that numbering new tasks never
/// overflows. A damaged journal holding larger ones is refused, not wrapped.
const SEQ_LIMIT: u64 = 1 << 63;

/// The second key of the cursor tag's hash (the first is the store's secret): sets these
/// tags apart from any other use of that secret.
const CURSOR_DOMAIN: u64 = u64::from_le_bytes(*b"mcpts-cr");

/// Counters describing a store's current load.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StoreStats {
    /// Live tasks (including expired ones not yet reclaimed).
    pub tasks: usize,
    /// Callers blocked in a wait.
    pub waiters: usize,
    /// Pending timers: task deadlines on the wheel, stale ones included (they are dropped
    /// when they fire), plus the deadlines of timed waits still parked.
    pub timers: usize,
}

/// A parked waiter handed back by [`StoreMachine::poll_wake`].
#[derive(Debug)]
pub struct Wake<W> {
    /// The token the waiter was parked with.
    pub token: W,
    /// What it waited for.
    pub outcome: WakeOutcome,
}

/// The answer to a wait.
#[derive(Clone, PartialEq, Debug)]
pub enum WakeOutcome {
    /// Answer to [`StoreMachine::wait_terminal`]: the terminal task, or why there is none.
    Terminal(Result<Task, StoreError>),
    /// Answer to [`StoreMachine::wait_input`]: the response, or why there is none.
    Input(Result<Value, StoreError>),
}

#[derive(Debug)]
enum WaitKind {
    Terminal,
    Input(String),
}

#[derive(Debug)]
struct Waiter<W> {
    id: u64,
    kind: WaitKind,
    token: W,
    /// When the wait times out: its key in [`StoreMachine::wait_deadlines`].
    deadline: Option<Millis>,
}

/// Rarely used per-task state, boxed so a plain task stays small.
#[derive(Debug)]
struct Extra<W> {
    pending: InputRequests,
    answers: HashMap<String, Value>,
    used_keys: HashSet<String>,
    waiters: Vec<Waiter<W>>,
    cancel: Option<CancelToken>,
}

impl<W> Default for Extra<W> {
    fn default() -> Self {
        Extra {
            pending: InputRequests::new(),
            answers: HashMap::new(),
            used_keys: HashSet::new(),
            waiters: Vec::new(),
            cancel: None,
        }
    }
}

#[derive(Debug)]
struct Entry<W> {
    id: TaskId,
    status: TaskStatus,
    /// Set when the task failed because its TTL ran out (its worker must stop).
    expired: bool,
    /// Boxed rather than `String`: eight bytes less per task, and messages are rarely
    /// changed in place.
    status_message: Option<Box<str>>,
    created_at: Timestamp,
    last_updated_at: Timestamp,
    ttl: Option<u64>,
    expires_at: Option<Millis>,
    session: Option<SessionId>,
    origin: Option<Origin>,
    outcome: Option<Outcome>,
    extra: Option<Box<Extra<W>>>,
}

impl<W> Entry<W> {
    /// Marks a change at `now`. Never moves `last_updated_at` back: a recovered task may
    /// carry times ahead of this process's clock (one stepped back across the restart).
    fn stamp(&mut self, now: Now) {
        self.last_updated_at = self.last_updated_at.max(now.wall);
    }

    fn is_due(&self, now: Now) -> bool {
        self.expires_at.is_some_and(|at| at <= now.mono)
    }

    fn pending_inputs(&self) -> usize {
        self.extra.as_ref().map_or(0, |x| x.pending.len())
    }

    fn stop_signalled(&self) -> bool {
        self.status == TaskStatus::Cancelled || self.expired
    }

    /// Session isolation: a caller sees only the tasks of its own session (a sessionless
    /// caller only sessionless tasks). Every lookup on a caller's behalf asks this.
    fn visible_to(&self, session: Option<&SessionId>) -> bool {
        self.session.as_ref() == session
    }
}

/// The task store as a pure state machine; `W` is whatever the caller parks waiters with
/// (the actor uses reply channels, tests use numbers).
#[derive(Debug)]
pub struct StoreMachine<W> {
    config: StoreConfig,
    poll_interval_ms: u64,
    tasks: TaskTable<W>,
    /// Creation-order index per session (`None` = sessionless): the sequence numbers of
    /// its tasks. Paging walks it.
    sessions: HashMap<Option<SessionId>, SeqSet>,
    /// Tasks failed by expiry that linger for the grace period, per session; they no longer
    /// count toward the limits.
    lingering: HashMap<Option<SessionId>, usize>,
    /// The sum of `lingering`: the global limit reads it on every create, and summing the
    /// map then cost a create O(sessions) after a mass expiry.
    lingering_total: usize,
    next_seq: u64,
    next_waiter: u64,
    /// Waiters parked across all tasks.
    parked: usize,
    /// Task deadlines (TTL, then grace). A stale one (the task re-armed or gone) is
    /// ignored when it fires, which makes cancelling one free: there is at most one live
    /// deadline per task, so stale ones are bounded by the tasks created within a TTL.
    wheel: Wheel<TaskId>,
    /// Deadlines of timed waits, by (deadline, waiter id). Not on the wheel: a wait is
    /// usually answered long before its timeout, and a lazily cancelled wheel item would
    /// stay until then, so memory would grow with wait rate x timeout. Removing from here
    /// is exact, and there are only as many entries as parked callers.
    wait_deadlines: BTreeMap<(Millis, u64), TaskId>,
    wakes: VecDeque<Wake<W>>,
    events: VecDeque<StoreEvent>,
    events_enabled: bool,
    cursor_key: u64,
    /// Tasks changed since the journal last took the changes (only while journaling).
    changes: HashMap<TaskId, Change>,
    journaling: bool,
    /// The latest time seen (each clock on its own): the machine's time, which an earlier
    /// `now` never moves back.
    latest: Now,
}

impl<W> StoreMachine<W> {
    /// A machine with a validated configuration. `cursor_key` is a secret that binds list
    /// cursors to the session they were issued for; pass a random value in production.
    pub fn new(config: StoreConfig, cursor_key: u64) -> Result<StoreMachine<W>, StoreError> {
        config.validate()?;
        Ok(StoreMachine {
            poll_interval_ms: duration_ms(config.poll_interval),
            config,
            tasks: TaskTable::new(cursor_key),
            sessions: HashMap::new(),
            lingering: HashMap::new(),
            lingering_total: 0,
            next_seq: 1,
            next_waiter: 1,
            parked: 0,
            wheel: Wheel::new(),
            wait_deadlines: BTreeMap::new(),
            wakes: VecDeque::new(),
            events: VecDeque::new(),
            events_enabled: false,
            cursor_key,
            changes: HashMap::new(),
            journaling: false,
            latest: Now::default(),
        })
    }

    /// The configuration the machine runs with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Number of live tasks (including ones whose deadline passed but that nothing has
    /// touched or reclaimed yet).
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when the store holds no task.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Counters for monitoring and tests.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            tasks: self.tasks.len(),
            waiters: self.parked,
            timers: self.wheel.len() + self.wait_deadlines.len(),
        }
    }

    /// Turns status events on or off (off by default, so a store nobody subscribes to
    /// builds no event values).
    pub fn set_events_enabled(&mut self, enabled: bool) {
        self.events_enabled = enabled;
        if !enabled {
            self.events.clear();
        }
    }

    // ----- creation and reads -------------------------------------------------------

    /// Creates a task in `working` with the given id. Fails on a limit, or if the id is
    /// taken (the caller then retries with a fresh id).
    pub fn create(&mut self, now: Now, id: TaskId, req: CreateTask) -> Result<Task, StoreError> {
        let now = self.observe(now);
        if self.tasks.contains_key(&id) {
            return Err(StoreError::InvalidArgument("duplicate task id".into()));
        }
        self.check_limits(now, req.session.as_ref())?;
        let ttl = self.config.resolve_ttl(req.ttl);
        let seq = self.next_seq;
        self.next_seq += 1;
        let expires_at = ttl.map(|ms| now.mono.plus(ms));
        if let Some(at) = expires_at {
            self.wheel.insert(at.0, id);
        }
        self.sessions
            .entry(req.session.clone())
            .or_default()
            .insert(seq);
        let entry = Entry {
            id,
            status: TaskStatus::Working,
            expired: false,
            status_message: None,
            created_at: now.wall,
            last_updated_at: now.wall,
            ttl,
            expires_at,
            session: req.session,
            origin: req.origin,
            outcome: None,
            extra: None,
        };
        let task = self.snapshot(id, &entry);
        if self.events_enabled {
            self.events.push_back(StoreEvent::Created {
                task: task.clone(),
                session: entry.session.clone(),
            });
        }
        self.tasks.insert(seq, entry);
        self.touch(id, Change::Created);
        Ok(task)
    }

    /// The task, if the caller's session may see it.
    pub fn get(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<Task, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        let entry = self.visible(id, session)?;
        Ok(self.snapshot(id, entry))
    }

    /// The task with its session, origin, pending input requests and outcome.
    pub fn get_detail(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<TaskDetail, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        let entry = self.visible(id, session)?;
        Ok(self.detail(id, entry))
    }

    /// The stored outcome of a `completed` or `failed` task.
    pub fn get_result(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<TaskResult, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        let entry = self.visible(id, session)?;
        self.result_of(id, entry)
    }

    // ----- reads that change nothing ------------------------------------------------

    /// What [`get`](Self::get) would answer at `now`, without changing anything; `None`
    /// when the task's deadline has passed, because then only `get` may answer (it settles
    /// the task first). Callers on other threads read through this while the owner holds
    /// the machine for writing only.
    pub fn peek(
        &self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Option<Result<Task, StoreError>> {
        self.peek_with(now, id, session, |m, entry| Ok(m.snapshot(id, entry)))
    }

    /// [`get_detail`](Self::get_detail) without side effects, as [`peek`](Self::peek).
    pub fn peek_detail(
        &self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Option<Result<TaskDetail, StoreError>> {
        self.peek_with(now, id, session, |m, entry| Ok(m.detail(id, entry)))
    }

    /// [`get_result`](Self::get_result) without side effects, as [`peek`](Self::peek).
    pub fn peek_result(
        &self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Option<Result<TaskResult, StoreError>> {
        self.peek_with(now, id, session, |m, entry| m.result_of(id, entry))
    }

    fn peek_with<R>(
        &self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        render: impl FnOnce(&Self, &Entry<W>) -> Result<R, StoreError>,
    ) -> Option<Result<R, StoreError>> {
        let now = self.seen(now);
        // One lookup: this runs on the callers' threads for every local read.
        match self.tasks.get(&id) {
            Some(entry) if entry.is_due(now) => None,
            Some(entry) if entry.visible_to(session) => Some(render(self, entry)),
            _ => Some(Err(StoreError::NotFound)),
        }
    }

    /// One page of the caller's tasks in creation order, after `cursor` (an opaque value
    /// from a previous page). Costs O(log n + page size).
    pub fn list(
        &mut self,
        now: Now,
        session: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let now = self.observe(now);
        let after = match cursor {
            Some(text) => self.decode_cursor(text, session)?,
            None => 0,
        };
        let key = session.cloned();
        let page_size = self.config.page_size;
        let from = after.saturating_add(1);
        // The page's window is its tasks plus the one after (which tells whether there are
        // more). Expired tasks in it are settled first (under `Fail` they stay, failed;
        // otherwise they go and the window moves on), until the window holds none: a
        // listing reclaims no more than it has to read.
        loop {
            let Some(index) = self.sessions.get(&key) else {
                return Ok(TaskPage::default());
            };
            let mut tasks = Vec::with_capacity(page_size.min(index.len()));
            let mut due = Vec::new();
            let mut last_seq = None;
            let mut more = false;
            for (i, seq) in index.range_from(from).take(page_size + 1).enumerate() {
                let entry = self.tasks.by_seq(seq).expect("indexed tasks exist");
                if entry.is_due(now) {
                    due.push(entry.id);
                } else if i < page_size {
                    tasks.push(self.snapshot(entry.id, entry));
                    last_seq = Some(seq);
                } else {
                    more = true;
                }
            }
            if !due.is_empty() {
                // Settled tasks are either gone or no longer due, so this loop ends.
                for id in due {
                    self.settle(id, now);
                }
                continue;
            }
            let next_cursor = match (more, last_seq) {
                (true, Some(seq)) => Some(self.encode_cursor(seq, session)),
                _ => None,
            };
            return Ok(TaskPage { tasks, next_cursor });
        }
    }

    // ----- mutations ----------------------------------------------------------------

    /// Moves a live task to `status` with `message` as its status message (`None` clears
    /// it). A terminal `status` ends the task without an outcome. Moving to `working` while
    /// input requests are pending is refused: resolve them instead.
    pub fn update_status(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        let entry = self.visible(id, session)?;
        if !entry.status.can_transition_to(status) {
            return Err(StoreError::InvalidTransition {
                from: entry.status,
                to: status,
            });
        }
        if status == TaskStatus::Working && entry.pending_inputs() > 0 {
            return Err(StoreError::InvalidArgument(
                "the task has pending input requests; resolve them to resume it".into(),
            ));
        }
        if status.is_terminal() {
            return Ok(self.finish(now, id, status, message, None));
        }
        let entry = self.tasks.get_mut(&id).expect("visible task exists");
        entry.status = status;
        entry.status_message = message.map(String::into_boxed_str);
        entry.stamp(now);
        Ok(self.changed(id))
    }

    /// Ends a live task as `completed` or `failed` with its outcome (a JSON-RPC error only
    /// as `failed`: `InvalidArgument` otherwise). On a task that is already terminal
    /// nothing changes and `AlreadyTerminal` carries the task: first writer wins, so a late
    /// completion never overwrites a cancel.
    pub fn store_result(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        if !matches!(status, TaskStatus::Completed | TaskStatus::Failed) {
            return Err(StoreError::InvalidArgument(format!(
                "a result can only be stored with status 'completed' or 'failed', not '{status}'"
            )));
        }
        if status == TaskStatus::Completed && matches!(outcome, Outcome::Error(_)) {
            // A completed task answers with a result; its error would have nowhere to go.
            return Err(StoreError::InvalidArgument(
                "a JSON-RPC error can only be stored with status 'failed'".into(),
            ));
        }
        let now = self.observe(now);
        self.live(now, id, session)?;
        Ok(self.finish(now, id, status, message, Some(outcome)))
    }

    /// Cancels a live task before returning and fires its cancellation token. A terminal
    /// task is left alone and reported with `cancelled: false` (idempotent).
    pub fn cancel(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<CancelOutcome, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        let entry = self.visible(id, session)?;
        if entry.status.is_terminal() {
            return Ok(CancelOutcome {
                task: self.snapshot(id, entry),
                cancelled: false,
            });
        }
        let task = self.finish(now, id, TaskStatus::Cancelled, message, None);
        Ok(CancelOutcome {
            task,
            cancelled: true,
        })
    }

    /// Adds input requests to a live task and moves it to `input_required`. Keys merge with
    /// those already pending; a key used before on this task is refused (nothing applied).
    /// A terminal task is never revived: `AlreadyTerminal`.
    pub fn set_input_requests(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        requests: InputRequests,
    ) -> Result<Task, StoreError> {
        if requests.is_empty() {
            return Err(StoreError::InvalidArgument(
                "at least one input request is needed".into(),
            ));
        }
        let now = self.observe(now);
        self.live(now, id, session)?;
        let entry = self.tasks.get_mut(&id).expect("visible task exists");
        let extra = entry.extra.get_or_insert_with(Default::default);
        if let Some(key) = requests.keys().find(|k| extra.used_keys.contains(*k)) {
            return Err(StoreError::InputKeyReused { key: key.clone() });
        }
        if extra.used_keys.len() + requests.len() > MAX_INPUT_KEYS_PER_TASK {
            return Err(StoreError::InvalidArgument(format!(
                "a task may use at most {MAX_INPUT_KEYS_PER_TASK} input request keys"
            )));
        }
        for (key, request) in requests {
            extra.used_keys.insert(key.clone());
            extra.pending.insert(key, request);
        }
        entry.status = TaskStatus::InputRequired;
        entry.stamp(now);
        Ok(self.changed(id))
    }

    /// Answers pending input requests. Keys that are not pending (never issued, or answered
    /// already) are ignored; each answered key wakes the worker waiting on it; when none is
    /// left pending the task goes back to `working`. A terminal task is never revived.
    pub fn resolve_input(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        responses: InputResponses,
    ) -> Result<Task, StoreError> {
        let now = self.observe(now);
        self.live(now, id, session)?;
        let entry = self.tasks.get_mut(&id).expect("visible task exists");
        let Some(extra) = entry.extra.as_mut() else {
            return Ok(self.snapshot(id, &self.tasks[&id]));
        };
        let mut resolved = false;
        for (key, response) in responses {
            if extra.pending.remove(&key).is_none() {
                continue;
            }
            resolved = true;
            let waiter = extra
                .waiters
                .iter()
                .position(|w| matches!(&w.kind, WaitKind::Input(k) if *k == key));
            match waiter {
                Some(pos) => {
                    let waiter = extra.waiters.swap_remove(pos);
                    self.parked -= 1;
                    forget_deadline(&mut self.wait_deadlines, &waiter);
                    self.wakes.push_back(Wake {
                        token: waiter.token,
                        outcome: WakeOutcome::Input(Ok(response)),
                    });
                }
                None => {
                    extra.answers.insert(key, response);
                }
            }
        }
        if !resolved {
            return Ok(self.snapshot(id, &self.tasks[&id]));
        }
        if extra.pending.is_empty() && entry.status == TaskStatus::InputRequired {
            entry.status = TaskStatus::Working;
        }
        entry.stamp(now);
        Ok(self.changed(id))
    }

    /// The token that tells the task's worker to stop (already fired if the task was
    /// cancelled or expired).
    pub fn cancel_token(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<CancelToken, StoreError> {
        let now = self.observe(now);
        self.settle(id, now);
        self.visible(id, session)?;
        let entry = self.tasks.get_mut(&id).expect("visible task exists");
        let fired = entry.stop_signalled();
        let extra = entry.extra.get_or_insert_with(Default::default);
        let token = extra.cancel.get_or_insert_with(CancelToken::new).clone();
        if fired {
            token.cancel();
        }
        Ok(token)
    }

    // ----- waiting ------------------------------------------------------------------

    /// Parks `token` until the task is terminal (answered with the task), it disappears
    /// (`NotFound`) or `deadline` passes (`Timeout`). The answer comes out of
    /// [`poll_wake`](Self::poll_wake), immediately if it is already known.
    pub fn wait_terminal(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        deadline: Option<Millis>,
        token: W,
    ) {
        let now = self.observe(now);
        self.settle(id, now);
        let ready = match self.visible(id, session) {
            Err(e) => Some(Err(e)),
            Ok(entry) if entry.status.is_terminal() => Some(Ok(self.snapshot(id, entry))),
            Ok(_) if deadline.is_some_and(|d| d <= now.mono) => Some(Err(StoreError::Timeout)),
            Ok(_) => None,
        };
        match ready {
            Some(result) => self.wakes.push_back(Wake {
                token,
                outcome: WakeOutcome::Terminal(result),
            }),
            None => self.park(id, WaitKind::Terminal, deadline, token),
        }
    }

    /// Parks `token` until the input request `key` is answered (answered with the response),
    /// the task ends (`AlreadyTerminal`), disappears (`NotFound`) or `deadline` passes. An
    /// answer that arrived before the wait is handed over at once, so no wake-up is lost.
    ///
    /// An answer is handed over once, so only one caller waits for a key at a time: a second
    /// wait while one is parked is refused at once (`InvalidArgument`) rather than parked
    /// for an answer that would go to the first.
    pub fn wait_input(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
        key: &str,
        deadline: Option<Millis>,
        token: W,
    ) {
        let now = self.observe(now);
        self.settle(id, now);
        let ready = match self.visible(id, session) {
            Err(e) => Some(Err(e)),
            Ok(_) => {
                let entry = self.tasks.get_mut(&id).expect("visible task exists");
                let answer = entry.extra.as_mut().and_then(|x| x.answers.remove(key));
                if answer.is_some() {
                    self.touch(id, Change::Updated);
                }
                let entry = &self.tasks[&id];
                let pending = entry
                    .extra
                    .as_ref()
                    .is_some_and(|x| x.pending.contains_key(key));
                let awaited = entry.extra.as_ref().is_some_and(|x| {
                    x.waiters
                        .iter()
                        .any(|w| matches!(&w.kind, WaitKind::Input(k) if k == key))
                });
                match answer {
                    Some(value) => Some(Ok(value)),
                    None if entry.status.is_terminal() => Some(Err(StoreError::AlreadyTerminal(
                        Box::new(self.snapshot(id, &self.tasks[&id])),
                    ))),
                    None if !pending => Some(Err(StoreError::UnknownInputKey { key: key.into() })),
                    None if awaited => Some(Err(StoreError::InvalidArgument(format!(
                        "input request {key:?} already has a caller waiting for its answer, \
                         which is handed out once"
                    )))),
                    None if deadline.is_some_and(|d| d <= now.mono) => {
                        Some(Err(StoreError::Timeout))
                    }
                    None => None,
                }
            }
        };
        match ready {
            Some(result) => self.wakes.push_back(Wake {
                token,
                outcome: WakeOutcome::Input(result),
            }),
            None => self.park(id, WaitKind::Input(key.into()), deadline, token),
        }
    }

    // ----- time and outputs ---------------------------------------------------------

    /// Reclaims expired tasks and times out waits, at most `budget` timers per call so a
    /// mass expiry never stalls other work. Returns true if more are already due.
    pub fn handle_timeout(&mut self, now: Now, budget: usize) -> bool {
        let now = self.observe(now);
        let mut spent = 0usize;
        while spent < budget {
            if let Some(entry) = self.wait_deadlines.first_entry() {
                if entry.key().0 <= now.mono {
                    let ((at, waiter), id) = entry.remove_entry();
                    // Called late, the task's own deadline may have come first: then the
                    // waiter gets what the task's expiry gives it, as it would have on time.
                    let expired_first = self
                        .tasks
                        .get(&id)
                        .and_then(|entry| entry.expires_at)
                        .is_some_and(|expires| expires <= at);
                    if expired_first {
                        self.settle(id, now);
                    }
                    self.time_out_waiter(id, waiter);
                    spent += 1;
                    continue;
                }
            }
            spent += match self.wheel.poll_bounded(now.mono.0) {
                Polled::Item(_, id) => {
                    self.settle(id, now);
                    1
                }
                // Re-filing a chunk of a big cascade costs about as much as this many
                // expiries.
                Polled::Busy => REFILE_COST,
                Polled::Idle => return false,
            };
        }
        self.poll_timeout().is_some_and(|at| at <= now.mono)
    }

    /// The next moment [`handle_timeout`](Self::handle_timeout) has work (never later than
    /// the earliest deadline; sometimes earlier, which costs one spurious wake-up).
    pub fn poll_timeout(&self) -> Option<Millis> {
        let task = self.wheel.next_expiration().map(Millis);
        let wait = self.wait_deadlines.keys().next().map(|&(at, _)| at);
        match (task, wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next parked waiter that has its answer.
    pub fn poll_wake(&mut self) -> Option<Wake<W>> {
        self.wakes.pop_front()
    }

    /// The next status event (only produced while events are enabled).
    pub fn poll_event(&mut self) -> Option<StoreEvent> {
        self.events.pop_front()
    }

    // ----- journal --------------------------------------------------------------------

    /// Starts (or stops) tracking which tasks change, for a journal to write after each
    /// batch of commands.
    pub fn set_journaling(&mut self, on: bool) {
        self.journaling = on;
        self.changes.clear();
    }

    /// The tasks changed since the last call, each with what to write about it.
    pub fn take_changes(&mut self) -> Vec<(TaskId, Change)> {
        let mut changes: Vec<(TaskId, Change)> = self.changes.drain().collect();
        changes.sort_unstable_by_key(|(id, _)| *id);
        changes
    }

    /// The next creation sequence number (journals persist it so listings stay ordered).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The secret that binds cursors to sessions (journals persist it so cursors survive a
    /// restart).
    pub fn cursor_key(&self) -> u64 {
        self.cursor_key
    }

    /// The durable record of a live task; `with_origin` includes the originating request.
    pub fn record(&self, id: TaskId, with_origin: bool) -> Option<TaskRecord> {
        let entry = self.tasks.get(&id)?;
        let extra = entry.extra.as_deref();
        Some(TaskRecord {
            id,
            seq: self.tasks.seq_of(&id)?,
            status: entry.status,
            expired: entry.expired,
            message: entry.status_message.as_deref().map(str::to_owned),
            created_at: entry.created_at,
            last_updated_at: entry.last_updated_at,
            ttl: entry.ttl,
            session: entry.session.clone(),
            origin: if with_origin {
                entry.origin.clone()
            } else {
                None
            },
            outcome: entry.outcome.as_ref().map(OutcomeRecord::from),
            pending: extra.map(|x| x.pending.clone()).unwrap_or_default(),
            answers: extra
                .map(|x| {
                    x.answers
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            used_keys: extra
                .map(|x| {
                    let mut keys: Vec<String> = x.used_keys.iter().cloned().collect();
                    keys.sort();
                    keys
                })
                .unwrap_or_default(),
        })
    }

    /// The full records of the live tasks created after sequence number `after` (all with
    /// `None`), in creation order: a snapshot taken a few at a time.
    pub fn records_after(&self, after: Option<u64>) -> impl Iterator<Item = TaskRecord> + '_ {
        self.tasks
            .iter_after(after)
            .filter_map(|(_, entry)| self.record(entry.id, true))
    }

    /// Every live task's full record, in creation order (a snapshot).
    pub fn records(&self) -> Vec<TaskRecord> {
        self.tasks
            .iter()
            .filter_map(|entry| self.record(entry.id, true))
            .collect()
    }

    /// Rebuilds a machine from recovered records. TTL deadlines are recomputed from each
    /// task's wall-clock creation time, so a task whose TTL passed while the process was
    /// down expires on the first `handle_timeout(now)`; a task failed by expiry keeps the
    /// rest of its grace. A task dated ahead of `now` (a clock set back across the restart)
    /// has no more left than it had at its last change; `max_ttl` caps every recovered task (also one created under a
    /// looser configuration or with no TTL; it still counts from creation), and without one
    /// [`StoreConfig::MAX_DURATION`] caps those with a TTL. Tasks still running follow
    /// `policy`. Journaling starts enabled, and the recovery's own changes (failed and
    /// capped tasks) are pending in [`take_changes`](Self::take_changes).
    pub fn restore(
        config: StoreConfig,
        cursor_key: u64,
        next_seq: u64,
        records: impl IntoIterator<Item = TaskRecord>,
        now: Now,
        policy: RecoveryPolicy,
    ) -> Result<StoreMachine<W>, StoreError> {
        let mut machine = StoreMachine::new(config, cursor_key)?;
        machine.journaling = true;
        let now = machine.observe(now);
        let out_of_range = |what: &str, seq: u64| {
            StoreError::InvalidArgument(format!(
                "{what} {seq} is out of range (sequence numbers stay below {SEQ_LIMIT})"
            ))
        };
        if next_seq >= SEQ_LIMIT {
            return Err(out_of_range("the next sequence number", next_seq));
        }
        let mut capped = 0usize;
        for record in records {
            if record.seq >= SEQ_LIMIT {
                return Err(out_of_range(
                    "a recovered task's sequence number",
                    record.seq,
                ));
            }
            machine.next_seq = machine.next_seq.max(record.seq + 1);
            capped += usize::from(machine.insert_record(record, now));
        }
        if capped > 0 {
            // Lowering max_ttl can expire many old tasks at start; say why they went.
            log::warn!("recovery capped the TTL of {capped} tasks at max_ttl (or 100 years)");
        }
        machine.next_seq = machine.next_seq.max(next_seq);
        // A record numbered 2^63 - 1 leaves no number for the next task.
        if machine.next_seq >= SEQ_LIMIT {
            return Err(out_of_range("the next sequence number", machine.next_seq));
        }
        if policy == RecoveryPolicy::FailRunning {
            // Tasks whose TTL ran out while the process was down expire first, under the
            // expiry policy (a failed task keeps its grace); only the rest failed for the
            // restart.
            while machine.handle_timeout(now, usize::MAX) {}
            let running: Vec<TaskId> = machine
                .tasks
                .iter()
                .filter(|e| !e.status.is_terminal())
                .map(|e| e.id)
                .collect();
            for id in running {
                let message = "the server restarted before the task finished".to_string();
                machine.finish(now, id, TaskStatus::Failed, Some(message), None);
            }
        }
        Ok(machine)
    }

    /// Inserts one recovered task; true if `max_ttl` capped its TTL.
    fn insert_record(&mut self, mut record: TaskRecord, now: Now) -> bool {
        // A journal never holds two live tasks with one id or one sequence number; if a
        // damaged one does, the first wins rather than two tasks sharing a key.
        if self.tasks.contains_key(&record.id) || self.tasks.by_seq(record.seq).is_some() {
            log::warn!(
                "recovery skipped a second record for task {} (seq {})",
                record.id,
                record.seq
            );
            return false;
        }
        let ttl = self.config.cap_ttl(record.ttl);
        let capped = ttl != record.ttl;
        record.ttl = ttl;
        // Wall-clock deadline -> time left -> a deadline on this process's monotonic base.
        // Time has passed the record's own times, whatever this clock says: the time left
        // counts from no earlier than them, and is never more than the span the deadline
        // ends (the TTL, or the grace). A clock set back across the restart would otherwise
        // add its step to every TTL (also past `max_ttl`).
        let expires_at = record.ttl.map(|ttl| {
            let (deadline, span) = self.restored_deadline(&record, ttl);
            let since = now
                .wall
                .max(record.created_at)
                .max(record.last_updated_at)
                .as_millis();
            now.mono.plus(deadline.saturating_sub(since).min(span))
        });
        if let Some(at) = expires_at {
            self.wheel.insert(at.0, record.id);
        }
        let has_extra = !record.pending.is_empty()
            || !record.answers.is_empty()
            || !record.used_keys.is_empty();
        let extra = has_extra.then(|| {
            Box::new(Extra {
                pending: record.pending,
                answers: record.answers.into_iter().collect(),
                used_keys: record.used_keys.into_iter().collect(),
                waiters: Vec::new(),
                cancel: None,
            })
        });
        // Only a task failed by expiry lingers; a record that says `expired` of a task
        // still running (a damaged one) is not believed, or its expiry would count twice.
        let expired = record.expired && record.status == TaskStatus::Failed;
        if expired {
            *self.lingering.entry(record.session.clone()).or_default() += 1;
            self.lingering_total += 1;
        }
        self.sessions
            .entry(record.session.clone())
            .or_default()
            .insert(record.seq);
        self.tasks.insert(
            record.seq,
            Entry {
                id: record.id,
                status: record.status,
                expired,
                status_message: record.message.map(String::into_boxed_str),
                created_at: record.created_at,
                last_updated_at: record.last_updated_at,
                ttl: record.ttl,
                expires_at,
                session: record.session,
                origin: record.origin,
                outcome: record.outcome.map(Outcome::from),
                extra,
            },
        );
        if capped {
            // Clients see the capped TTL from now on; the journal keeps it, not the old one.
            self.touch(record.id, Change::Updated);
        }
        capped
    }

    /// A recovered task's next deadline on the wall clock, in ms: its TTL from creation, or,
    /// for a task the `Fail` policy already failed, the end of the grace that began when it
    /// expired. The expiry bumped `last_updated_at` and a failed task changes no more, so
    /// that is when the running store started the grace; it can be well after the TTL (a
    /// task whose TTL ran out while the process was down expires at the next start). With
    /// it, the span that deadline ends (the TTL, or the grace): no more than that is left.
    fn restored_deadline(&self, record: &TaskRecord, ttl: u64) -> (u64, u64) {
        let ttl_ends = record.created_at.as_millis().saturating_add(ttl);
        match self.config.expiry {
            ExpiryPolicy::Fail { grace }
                if record.expired && record.status == TaskStatus::Failed =>
            {
                let grace = duration_ms(grace);
                let ends = ttl_ends
                    .max(record.last_updated_at.as_millis())
                    .saturating_add(grace);
                (ends, grace)
            }
            _ => (ttl_ends, ttl),
        }
    }

    fn touch(&mut self, id: TaskId, change: Change) {
        if !self.journaling {
            return;
        }
        match self.changes.get(&id).copied() {
            None => {
                self.changes.insert(id, change);
            }
            Some(earlier) => match earlier.then(change) {
                Some(merged) => {
                    self.changes.insert(id, merged);
                }
                None => {
                    self.changes.remove(&id);
                }
            },
        }
    }

    // ----- internals ----------------------------------------------------------------

    /// The machine's time at a reading of `now`: `now`, or the latest time seen where
    /// `now` is earlier (monotonic and wall clock each on its own). Remembers it.
    fn observe(&mut self, now: Now) -> Now {
        self.latest = self.seen(now);
        self.latest
    }

    /// [`observe`](Self::observe) for readers, which remember nothing.
    fn seen(&self, now: Now) -> Now {
        Now {
            mono: now.mono.max(self.latest.mono),
            wall: now.wall.max(self.latest.wall),
        }
    }

    /// Settles `id`, then checks the caller may see it and that it is still live; a
    /// terminal task is refused with `AlreadyTerminal` (it is never revived).
    fn live(
        &mut self,
        now: Now,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<(), StoreError> {
        // One lookup, unless the task is due (rarely): then it is settled and looked up again.
        match self.tasks.get(&id) {
            Some(entry) if entry.is_due(now) => {}
            Some(entry) => return self.still_live(id, entry, session),
            None => return Err(StoreError::NotFound),
        }
        self.settle(id, now);
        match self.tasks.get(&id) {
            Some(entry) => self.still_live(id, entry, session),
            None => Err(StoreError::NotFound),
        }
    }

    /// `live`'s verdict on an entry that is not due (visible, and not terminal).
    fn still_live(
        &self,
        id: TaskId,
        entry: &Entry<W>,
        session: Option<&SessionId>,
    ) -> Result<(), StoreError> {
        if !entry.visible_to(session) {
            return Err(StoreError::NotFound);
        }
        if entry.status.is_terminal() {
            return Err(StoreError::AlreadyTerminal(Box::new(
                self.snapshot(id, entry),
            )));
        }
        Ok(())
    }

    fn visible(&self, id: TaskId, session: Option<&SessionId>) -> Result<&Entry<W>, StoreError> {
        match self.tasks.get(&id) {
            Some(entry) if entry.visible_to(session) => Ok(entry),
            _ => Err(StoreError::NotFound),
        }
    }

    fn snapshot(&self, id: TaskId, entry: &Entry<W>) -> Task {
        snapshot_of(self.poll_interval_ms, id, entry)
    }

    fn detail(&self, id: TaskId, entry: &Entry<W>) -> TaskDetail {
        TaskDetail {
            task: self.snapshot(id, entry),
            session: entry.session.clone(),
            origin: entry.origin.clone(),
            input_requests: entry
                .extra
                .as_ref()
                .map(|x| x.pending.clone())
                .unwrap_or_default(),
            outcome: entry.outcome.clone(),
        }
    }

    fn result_of(&self, id: TaskId, entry: &Entry<W>) -> Result<TaskResult, StoreError> {
        match &entry.outcome {
            Some(outcome) => Ok(TaskResult {
                task: self.snapshot(id, entry),
                outcome: outcome.clone(),
            }),
            None => Err(StoreError::NoResult {
                status: entry.status,
                expired: entry.expired,
            }),
        }
    }

    /// Snapshot after a change, announcing it to subscribers.
    fn changed(&mut self, id: TaskId) -> Task {
        self.touch(id, Change::Updated);
        let task = self.snapshot(id, &self.tasks[&id]);
        self.emit_status(&task, id);
        task
    }

    fn emit_status(&mut self, task: &Task, id: TaskId) {
        if self.events_enabled {
            let session = self.tasks.get(&id).and_then(|e| e.session.clone());
            self.events.push_back(StoreEvent::Status {
                task: task.clone(),
                session,
            });
        }
    }

    fn check_limits(&mut self, now: Now, session: Option<&SessionId>) -> Result<(), StoreError> {
        let key = session.cloned();
        let session_count = |m: &Self| {
            let all = m.sessions.get(&key).map_or(0, |index| index.len());
            all - m.lingering.get(&key).copied().unwrap_or(0)
        };
        debug_assert_eq!(self.lingering_total, self.lingering.values().sum::<usize>());
        let global_count = |m: &Self| m.tasks.len() - m.lingering_total;
        let global_full = |m: &Self| m.config.max_tasks.is_some_and(|max| global_count(m) >= max);
        let session_full = |m: &Self| {
            session.is_some()
                && m.config
                    .max_tasks_per_session
                    .is_some_and(|max| session_count(m) >= max)
        };
        // Expired tasks never count: reclaim what is due until there is room or nothing due
        // is left. A few at a time, so a store at its limit in the middle of a mass expiry
        // reclaims what this task needs, not the whole backlog while every reader waits
        // (the rest goes in the owner's short batches).
        while (global_full(self) || session_full(self))
            && self.handle_timeout(now, LIMIT_RECLAIM_STEP)
        {}
        if let Some(limit) = self.config.max_tasks.filter(|_| global_full(self)) {
            return Err(StoreError::LimitExceeded {
                scope: LimitScope::Global,
                limit,
            });
        }
        if let Some(limit) = self
            .config
            .max_tasks_per_session
            .filter(|_| session_full(self))
        {
            return Err(StoreError::LimitExceeded {
                scope: LimitScope::Session,
                limit,
            });
        }
        Ok(())
    }

    /// Applies the expiry policy to `id` if its deadline has passed, as often as needed
    /// (a task failed by expiry can be past its grace too).
    fn settle(&mut self, id: TaskId, now: Now) {
        while let Some(entry) = self.tasks.get(&id) {
            if !entry.is_due(now) {
                return;
            }
            let at = entry.expires_at.expect("a due task has a deadline");
            let running = !entry.status.is_terminal();
            let ttl = entry.ttl.unwrap_or_default();
            // Only a task with someone waiting on it has waits to look at: a plain expiry
            // (the mass-expiry path) costs no second lookup.
            if entry.extra.as_ref().is_some_and(|x| !x.waiters.is_empty()) {
                self.time_out_waits_due_before(id, at);
            }
            match self.config.expiry {
                ExpiryPolicy::Fail { grace } if running => {
                    let message =
                        format!("task expired: its TTL of {ttl} ms ran out before it finished");
                    let entry = self.tasks.get_mut(&id).expect("checked above");
                    entry.expired = true;
                    *self.lingering.entry(entry.session.clone()).or_default() += 1;
                    self.lingering_total += 1;
                    self.finish(now, id, TaskStatus::Failed, Some(message), None);
                    let next = at.plus(duration_ms(grace));
                    self.tasks.get_mut(&id).expect("checked above").expires_at = Some(next);
                    self.wheel.insert(next.0, id);
                }
                _ => self.remove(id),
            }
        }
    }

    /// Moves a live task to a terminal status and wakes everyone waiting on it.
    fn finish(
        &mut self,
        now: Now,
        id: TaskId,
        status: TaskStatus,
        message: Option<String>,
        outcome: Option<Outcome>,
    ) -> Task {
        self.touch(id, Change::Updated);
        let poll_interval_ms = self.poll_interval_ms;
        let entry = self.tasks.get_mut(&id).expect("finish on a live task");
        debug_assert!(!entry.status.is_terminal());
        entry.status = status;
        entry.status_message = message.map(String::into_boxed_str);
        entry.outcome = outcome;
        entry.stamp(now);
        let stop = entry.stop_signalled();
        let extra = entry.extra.take();
        let task = snapshot_of(poll_interval_ms, id, entry);
        if let Some(mut extra) = extra {
            extra.pending.clear();
            extra.answers.clear();
            if stop {
                if let Some(token) = &extra.cancel {
                    token.cancel();
                }
            }
            self.parked -= extra.waiters.len();
            for waiter in extra.waiters.drain(..) {
                forget_deadline(&mut self.wait_deadlines, &waiter);
                let outcome = match waiter.kind {
                    WaitKind::Terminal => WakeOutcome::Terminal(Ok(task.clone())),
                    WaitKind::Input(_) => {
                        WakeOutcome::Input(Err(StoreError::AlreadyTerminal(Box::new(task.clone()))))
                    }
                };
                self.wakes.push_back(Wake {
                    token: waiter.token,
                    outcome,
                });
            }
            // Keep the used keys and the token: keys stay unique for the task's whole life.
            self.tasks.get_mut(&id).expect("still there").extra = Some(extra);
        }
        self.emit_status(&task, id);
        task
    }

    fn remove(&mut self, id: TaskId) {
        let Some((seq, entry)) = self.tasks.remove(&id) else {
            return;
        };
        self.touch(id, Change::Removed);
        if entry.expired {
            if let Some(count) = self.lingering.get_mut(&entry.session) {
                *count -= 1;
                self.lingering_total -= 1;
                if *count == 0 {
                    self.lingering.remove(&entry.session);
                }
            }
        }
        if let Some(index) = self.sessions.get_mut(&entry.session) {
            index.remove(seq);
            if index.is_empty() {
                self.sessions.remove(&entry.session);
            }
        }
        if let Some(extra) = entry.extra {
            if let Some(token) = &extra.cancel {
                token.cancel();
            }
            self.parked -= extra.waiters.len();
            for waiter in extra.waiters {
                forget_deadline(&mut self.wait_deadlines, &waiter);
                let outcome = match waiter.kind {
                    WaitKind::Terminal => WakeOutcome::Terminal(Err(StoreError::NotFound)),
                    WaitKind::Input(_) => WakeOutcome::Input(Err(StoreError::NotFound)),
                };
                self.wakes.push_back(Wake {
                    token: waiter.token,
                    outcome,
                });
            }
        }
        if self.events_enabled {
            self.events.push_back(StoreEvent::Expired {
                task_id: id,
                session: entry.session,
            });
        }
    }

    fn park(&mut self, id: TaskId, kind: WaitKind, deadline: Option<Millis>, token: W) {
        let limit = self.config.max_waiters_per_task;
        let entry = self.tasks.get_mut(&id).expect("parking on a live task");
        let extra = entry.extra.get_or_insert_with(Default::default);
        if extra.waiters.len() >= limit {
            let error = StoreError::LimitExceeded {
                scope: LimitScope::Waiters,
                limit,
            };
            let outcome = match kind {
                WaitKind::Terminal => WakeOutcome::Terminal(Err(error)),
                WaitKind::Input(_) => WakeOutcome::Input(Err(error)),
            };
            self.wakes.push_back(Wake { token, outcome });
            return;
        }
        let waiter_id = self.next_waiter;
        self.next_waiter += 1;
        self.parked += 1;
        extra.waiters.push(Waiter {
            id: waiter_id,
            kind,
            token,
            deadline,
        });
        if let Some(at) = deadline {
            self.wait_deadlines.insert((at, waiter_id), id);
        }
    }

    /// Times out the waits on `id` whose deadline came before `at` (the task's expiry, being
    /// settled late): they get `Timeout`, as they would have on time, not the expiry.
    fn time_out_waits_due_before(&mut self, id: TaskId, at: Millis) {
        let due_before = |w: &Waiter<W>| w.deadline.is_some_and(|d| d < at);
        self.end_waits(id, due_before, StoreError::Timeout);
    }

    /// Ends the waits parked on `id` whose token `stopped` picks, answering them `Stopped`:
    /// their caller gave up on them (see [`WaitStop`](crate::WaitStop)). Waits already
    /// answered, or on a task that is gone, are left alone.
    pub fn stop_waits(&mut self, id: TaskId, stopped: impl Fn(&W) -> bool) {
        self.end_waits(id, |w| stopped(&w.token), StoreError::Stopped);
    }

    /// Answers the waits on `id` that `pick` picks with `why`, and forgets them.
    fn end_waits(&mut self, id: TaskId, pick: impl Fn(&Waiter<W>) -> bool, why: StoreError) {
        let Some(extra) = self.tasks.get_mut(&id).and_then(|e| e.extra.as_mut()) else {
            return;
        };
        if !extra.waiters.iter().any(&pick) {
            return;
        }
        // One pass, however many waiters (up to `max_waiters_per_task`) end.
        let (ending, kept) = std::mem::take(&mut extra.waiters)
            .into_iter()
            .partition(pick);
        extra.waiters = kept;
        for waiter in ending {
            forget_deadline(&mut self.wait_deadlines, &waiter);
            self.parked -= 1;
            self.wakes.push_back(ended(waiter, why.clone()));
        }
    }

    /// Answers a timed wait whose deadline passed (its entry in `wait_deadlines` is already
    /// gone, or goes now).
    fn time_out_waiter(&mut self, id: TaskId, waiter_id: u64) {
        let Some(extra) = self.tasks.get_mut(&id).and_then(|e| e.extra.as_mut()) else {
            return;
        };
        let Some(pos) = extra.waiters.iter().position(|w| w.id == waiter_id) else {
            return;
        };
        let waiter = extra.waiters.swap_remove(pos);
        self.parked -= 1;
        self.wakes.push_back(ended(waiter, StoreError::Timeout));
    }

    /// A tag that binds a cursor position to the session it was issued for, keyed with a
    /// store secret so cursors cannot be forged for another session.
    ///
    /// The algorithm and the bytes it reads are fixed (SipHash-2-4 keyed by the store's
    /// secret, over the sequence number and the session, little-endian and length-prefixed),
    /// so a cursor a client holds across a restart stays valid whatever toolchain built the
    /// store (`DefaultHasher` and the `Hash` impls promise no such thing).
    fn cursor_tag(&self, seq: u64, session: Option<&SessionId>) -> u64 {
        // Deprecated for hashing tables, not for this: it is the one keyed hash in std
        // whose algorithm is documented and stays put.
        #[allow(deprecated)]
        let mut hasher = std::hash::SipHasher::new_with_keys(self.cursor_key, CURSOR_DOMAIN);
        hasher.write(&seq.to_le_bytes());
        match session {
            None => hasher.write(&[0]),
            Some(session) => {
                let session = session.as_str().as_bytes();
                hasher.write(&[1]);
                hasher.write(&(session.len() as u64).to_le_bytes());
                hasher.write(session);
            }
        }
        hasher.finish()
    }

    fn encode_cursor(&self, seq: u64, session: Option<&SessionId>) -> String {
        format!("{seq:016x}{:016x}", self.cursor_tag(seq, session))
    }

    fn decode_cursor(&self, text: &str, session: Option<&SessionId>) -> Result<u64, StoreError> {
        let parse = |hex: Option<&str>| hex.and_then(|h| u64::from_str_radix(h, 16).ok());
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::InvalidCursor);
        }
        let (seq, tag) = match (parse(text.get(..16)), parse(text.get(16..))) {
            (Some(seq), Some(tag)) => (seq, tag),
            _ => return Err(StoreError::InvalidCursor),
        };
        if tag != self.cursor_tag(seq, session) {
            return Err(StoreError::InvalidCursor);
        }
        Ok(seq)
    }
}

mod seq_set;
mod table;

/// What callers see of a task (a free function, so that it can read an entry that is
/// borrowed mutably from the machine).
fn snapshot_of<W>(poll_interval_ms: u64, id: TaskId, entry: &Entry<W>) -> Task {
    Task {
        task_id: id,
        status: entry.status,
        status_message: entry.status_message.as_deref().map(str::to_owned),
        created_at: entry.created_at,
        last_updated_at: entry.last_updated_at,
        ttl: entry.ttl,
        poll_interval: Some(poll_interval_ms),
    }
}

/// The answer to a wait that ends without what it waited for (`why` says why not).
fn ended<W>(waiter: Waiter<W>, why: StoreError) -> Wake<W> {
    let outcome = match waiter.kind {
        WaitKind::Terminal => WakeOutcome::Terminal(Err(why)),
        WaitKind::Input(_) => WakeOutcome::Input(Err(why)),
    };
    Wake {
        token: waiter.token,
        outcome,
    }
}

/// Drops the deadline of a wait that is answered (or ends) before it times out, so nothing
/// is left behind to fire later.
fn forget_deadline<W>(deadlines: &mut BTreeMap<(Millis, u64), TaskId>, waiter: &Waiter<W>) {
    if let Some(at) = waiter.deadline {
        deadlines.remove(&(at, waiter.id));
    }
}

#[cfg(test)]
mod tests;
