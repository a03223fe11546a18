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

use serde_json::Value;

use super::clock::{Millis, Now};
use super::config::{duration_ms, StoreConfig};
use super::record::Change;
use super::token::CancelToken;
use super::wheel::Wheel;
use crate::model::{
    CreateTask, InputRequests, LimitScope, Origin, Outcome, SessionId, StoreEvent, Task,
    TaskDetail, TaskId, TaskResult, TaskStatus, Timestamp,
};
use crate::StoreError;
use seq_set::SeqSet;
use table::TaskTable;

/// Timers reclaimed between two looks at the limits when a create finds its limit full.
const LIMIT_RECLAIM_STEP: usize = 64;

/// Counters describing a store's current load.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StoreStats {
    /// Tasks held: working and finished ones (until their TTL removes them), and expired
    /// ones not yet reclaimed.
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
    /// While journaling, cancel tokens to fire once the batch that stops their tasks is
    /// durable (see [`poll_stop`](Self::poll_stop)).
    stops: Vec<CancelToken>,
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
            stops: Vec::new(),
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

    // ----- outputs ------------------------------------------------------------------

    /// The next parked waiter that has its answer.
    pub fn poll_wake(&mut self) -> Option<Wake<W>> {
        self.wakes.pop_front()
    }

    /// The next cancel token to fire: while journaling, a token is fired only once the
    /// change that stops its task is durable (a worker told to stop by a cancel that a
    /// crash then undoes would leave the task running for good); without a journal, the
    /// machine fires tokens itself and this is always `None`.
    pub fn poll_stop(&mut self) -> Option<CancelToken> {
        self.stops.pop()
    }

    /// Fires `token` now, or, while journaling, once [`poll_stop`](Self::poll_stop) hands
    /// it out.
    fn signal_stop(&mut self, token: &CancelToken) {
        if self.journaling {
            self.stops.push(token.clone());
        } else {
            token.cancel();
        }
    }

    /// The next status event (only produced while events are enabled).
    pub fn poll_event(&mut self) -> Option<StoreEvent> {
        self.events.pop_front()
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
}

// The rest of the machine's methods, in further `impl StoreMachine` blocks, one concern to
// a file: status changes and results, input requests, waits, expiry and time, listing and
// cursors, and what the journal needs (records, restore). `table` and `seq_set` hold the
// tasks and the per-session index.
mod expiry;
mod input;
mod journaling;
mod listing;
mod seq_set;
mod status;
mod table;
mod waits;

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

#[cfg(test)]
mod tests;
