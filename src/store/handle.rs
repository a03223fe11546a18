//! The public face of the store: [`Store`] owns the owner thread, [`StoreHandle`] is the
//! cheap, cloneable, blocking way to talk to it.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::Value;

use super::actor::{Command, Reply, ReplyTo, StoreActor};
use super::clock::{Clock, Now, SystemClock, TimeSource};
use super::config::{ExpiryPolicy, StoreConfig};
use super::gate::Gate;
use super::inbox::{self, Poster};
use super::journal::{Journal, JournalConfig};
use super::machine::{StoreMachine, StoreStats};
use super::reply::{self, Expect};
use super::shared::Shared;
use super::stop::WaitStop;
use super::token::CancelToken;
use crate::model::{
    depth, CancelOutcome, CreateTask, InputRequests, InputResponses, Outcome, SessionId,
    StoreEvent, Task, TaskDetail, TaskId, TaskPage, TaskResult, TaskStatus,
};
use crate::StoreError;

/// Configures and starts a [`Store`].
///
/// ```
/// use std::time::Duration;
/// use mcp_task_store::Store;
///
/// let store = Store::builder()
///     .default_ttl(Duration::from_secs(600))
///     .max_ttl(Duration::from_secs(3600))
///     .max_tasks(10_000)
///     .build()?;
/// # Ok::<(), mcp_task_store::StoreError>(())
/// ```
#[derive(Clone)]
pub struct StoreBuilder {
    config: StoreConfig,
    clock: Arc<dyn Clock>,
    journal: Option<JournalConfig>,
}

impl fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("config", &self.config)
            .field("clock", &self.clock)
            .field("journal", &self.journal)
            .finish()
    }
}

impl Default for StoreBuilder {
    fn default() -> Self {
        StoreBuilder {
            config: StoreConfig::default(),
            clock: Arc::new(SystemClock),
            journal: None,
        }
    }
}

impl StoreBuilder {
    /// Starts from a whole configuration.
    pub fn config(mut self, config: StoreConfig) -> Self {
        self.config = config;
        self
    }

    /// TTL for tasks that request none (default: unlimited, unless `max_ttl` is set).
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.config.default_ttl = Some(ttl);
        self
    }

    /// Cap on every task's TTL, including tasks that requested none (default: none, but a
    /// requested TTL never exceeds [`StoreConfig::MAX_DURATION`], 100 years).
    pub fn max_ttl(mut self, ttl: Duration) -> Self {
        self.config.max_ttl = Some(ttl);
        self
    }

    /// Suggested polling interval reported on every task (default 1 s).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// Tasks per `list` page (default 100).
    pub fn page_size(mut self, page_size: usize) -> Self {
        self.config.page_size = page_size;
        self
    }

    /// Most tasks the store holds (see [`StoreConfig::max_tasks`]).
    pub fn max_tasks(mut self, max: usize) -> Self {
        self.config.max_tasks = Some(max);
        self
    }

    /// Most tasks a session holds (see [`StoreConfig::max_tasks_per_session`]).
    pub fn max_tasks_per_session(mut self, max: usize) -> Self {
        self.config.max_tasks_per_session = Some(max);
        self
    }

    /// What happens to running tasks whose TTL runs out (default: fail, 30 s grace).
    pub fn expiry(mut self, policy: ExpiryPolicy) -> Self {
        self.config.expiry = policy;
        self
    }

    /// Most callers blocked on one task at once (default 1024).
    pub fn max_waiters_per_task(mut self, max: usize) -> Self {
        self.config.max_waiters_per_task = max;
        self
    }

    /// Events buffered per subscriber before it lags (default 1024).
    pub fn event_buffer(mut self, events: usize) -> Self {
        self.config.event_buffer = events;
        self
    }

    /// The time source (default: the system clock; tests use [`ManualClock`](crate::ManualClock)).
    /// One that steps back holds the store's time still until it catches up (see [`Clock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Keeps a write-ahead journal in `journal.dir`: every change is durable before it is
    /// acknowledged, and the store is rebuilt from the journal when it starts.
    pub fn journal(mut self, journal: JournalConfig) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Validates the configuration, recovers the journal if there is one, and starts the
    /// owner thread. A damaged journal is an error naming the file and offset.
    pub fn build(self) -> Result<Store, StoreError> {
        let cursor_key = TaskId::random().as_u128() as u64;
        let time = TimeSource::new(self.clock);
        let event_buffer = self.config.event_buffer;
        let (machine, journal) = match &self.journal {
            None => (StoreMachine::new(self.config, cursor_key)?, None),
            Some(journal_config) => {
                self.config.validate()?;
                let (journal, recovered) = Journal::open(journal_config)?;
                let machine = StoreMachine::restore(
                    self.config,
                    recovered.cursor_key.unwrap_or(cursor_key),
                    recovered.next_seq,
                    recovered.tasks,
                    time.now(),
                    journal_config.recovery,
                )
                .map_err(|e| match e {
                    // What the journal holds is out of range: a damaged journal.
                    StoreError::InvalidArgument(why) => {
                        StoreError::Journal(format!("{}: {why}", journal_config.dir.display()))
                    }
                    e => e,
                })?;
                (machine, Some(journal))
            }
        };
        // A journaled store admits every caller: one sync then covers many of them.
        let gate = journal
            .is_none()
            .then(|| Arc::new(Gate::for_this_machine()));
        let shared = Arc::new(Shared::new(machine, time));
        // Reads on the callers' threads only without a journal: with one, the machine runs
        // ahead of the disk until each batch's sync.
        let reads = journal.is_none().then(|| Arc::clone(&shared));
        let mut actor = StoreActor::new(shared, journal, gate.clone());
        actor.settle_recovery()?;
        // As many seats as callers the gate lets in at once (at most 8; beyond that, calls
        // that find no free seat use the channel).
        let (inbox_tx, inbox_rx) = inbox::inbox(reply::max_spinners());
        let thread = std::thread::Builder::new()
            .name("mcp-task-store".into())
            .spawn(move || actor.run(inbox_rx))
            .map_err(|e| StoreError::InvalidArgument(format!("cannot spawn owner thread: {e}")))?;
        Ok(Store {
            handle: StoreHandle {
                inbox: inbox_tx,
                reads,
                gate,
                spinners: Arc::new(AtomicUsize::new(0)),
                event_buffer,
            },
            thread: Some(thread),
        })
    }
}

/// The task store: owns the owner thread and shuts it down (and joins it) when dropped.
/// Callers blocked on the store at that moment get [`StoreError::Closed`].
///
/// Derefs to [`StoreHandle`]; clone a handle with [`handle`](Store::handle) to share it.
pub struct Store {
    // Field order matters: the handle's sender must be gone before the join in `drop`,
    // which `Drop` below arranges by sending `Shutdown` first.
    handle: StoreHandle,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// A builder with the default configuration and the system clock.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::default()
    }

    /// Starts a store with `config` and the system clock.
    pub fn start(config: StoreConfig) -> Result<Store, StoreError> {
        Store::builder().config(config).build()
    }

    /// A new handle to this store.
    pub fn handle(&self) -> StoreHandle {
        self.handle.clone()
    }

    /// Stops the owner thread and waits for it. `Err(Closed)` if it had panicked.
    pub fn shutdown(mut self) -> Result<(), StoreError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), StoreError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let _ = self.handle.inbox.send(Command::Shutdown);
        thread.join().map_err(|_| StoreError::Closed)
    }
}

impl Deref for Store {
    type Target = StoreHandle;

    fn deref(&self) -> &StoreHandle {
        &self.handle
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.stop().is_err() {
            log::error!("the task store's owner thread panicked");
        }
    }
}

/// A cheap, cloneable, blocking handle to a [`Store`]. Every method sends one command to the
/// owner thread and waits for its answer, except the reads (`get`, `get_detail`,
/// `get_result`) of a store without a journal, which read the owner's state on the calling
/// thread when that changes nothing; all return [`StoreError::Closed`] once the store is
/// gone. Handles may be used from any number of threads; without a journal, at most one
/// fewer calls than the machine has cores (and at least one) are in flight at once (the
/// rest wait their turn, so the owner thread keeps a core), except the waits, which never
/// queue, and the reads answered on the calling thread, which never reach the owner.
#[derive(Clone, Debug)]
pub struct StoreHandle {
    inbox: Poster,
    /// The owner's state, for reads on the calling thread (none with a journal).
    reads: Option<Arc<Shared>>,
    /// Limits the callers in flight (none with a journal).
    gate: Option<Arc<Gate>>,
    /// Callers of this store spinning for an answer right now (shared by all handles).
    spinners: Arc<AtomicUsize>,
    /// Each subscriber's buffer (`StoreConfig::event_buffer`).
    event_buffer: usize,
}

/// The events a subscription from [`StoreHandle::subscribe_counting_stop`] missed since its
/// last [`StoreEvent::Lagged`] when the store stopped: set before the channel disconnects,
/// so a reader that found it disconnected reads the final count.
#[derive(Clone, Debug)]
pub struct MissedAtStop(Arc<AtomicU64>);

impl MissedAtStop {
    /// How many events were missed and never reported (0 while the store runs, and when
    /// none were).
    pub fn missed(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// The count, once: later calls (other readers of the same subscription) get 0.
    #[cfg(feature = "ffi")]
    pub(crate) fn take(&self) -> u64 {
        self.0.swap(0, Ordering::SeqCst)
    }
}

impl StoreHandle {
    /// One command whose answer comes as soon as the owner thread reads it.
    fn call<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<T, StoreError> {
        let _pass = self.gate.as_deref().map(Gate::enter);
        // Without a gate there is a journal, and answers wait for its sync (milliseconds).
        let expect = if self.gate.is_some() {
            Expect::Brief
        } else {
            Expect::Long
        };
        let answer =
            reply::round_trip(&self.spinners, expect, |reply| self.inbox.post(make(reply)));
        self.note(answer)
    }

    /// One command that waits for something to happen to a task (not gated: it may take
    /// long, and holds no place while it waits).
    fn call_and_wait<T: Send + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<T, StoreError> {
        let answer = reply::round_trip(&self.spinners, Expect::Long, |reply| {
            self.inbox.send(make(reply))
        });
        self.note(answer)
    }

    /// Passes an answer on; a `Closed` one also closes reads on every thread (see `shared`).
    fn note<T>(&self, answer: Result<T, StoreError>) -> Result<T, StoreError> {
        if let (Err(StoreError::Closed), Some(shared)) = (&answer, &self.reads) {
            shared.heard_closed();
        }
        answer
    }

    /// Creates a task (status `working`, fresh random id). It is visible to `get` before
    /// this returns. An origin nested deeper than [`MAX_PAYLOAD_DEPTH`](crate::MAX_PAYLOAD_DEPTH)
    /// is refused (`InvalidArgument`), as is any deeper value below.
    pub fn create(&self, req: CreateTask) -> Result<Task, StoreError> {
        if let Some(origin) = &req.origin {
            depth::check_text("the origin", origin.as_json())?;
        }
        let id = TaskId::random();
        self.call(|reply| Command::Create { id, req, reply })
    }

    /// A read served on the calling thread, if this store allows it and it changes nothing
    /// (see `shared`); `None` sends it to the owner thread.
    fn read<T>(
        &self,
        peek: impl FnOnce(&StoreMachine<ReplyTo>, Now) -> Option<Result<T, StoreError>>,
    ) -> Option<Result<T, StoreError>> {
        self.reads.as_deref()?.read(peek)
    }

    /// The task, or `NotFound` for unknown, foreign-session or expired ids.
    pub fn get(&self, id: TaskId, session: Option<&SessionId>) -> Result<Task, StoreError> {
        if let Some(answer) = self.read(|m, now| m.peek(now, id, session)) {
            return answer;
        }
        let session = session.cloned();
        self.call(|reply| Command::Get { id, session, reply })
    }

    /// The task with its session, origin, pending input requests and outcome.
    pub fn get_detail(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<TaskDetail, StoreError> {
        if let Some(answer) = self.read(|m, now| m.peek_detail(now, id, session)) {
            return answer;
        }
        let session = session.cloned();
        self.call(|reply| Command::GetDetail { id, session, reply })
    }

    /// Moves a live task to another status (see [`StoreMachine::update_status`]).
    pub fn update_status(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        let session = session.cloned();
        self.call(|reply| Command::UpdateStatus {
            id,
            session,
            status,
            message,
            reply,
        })
    }

    /// Sets a live task's status message and keeps its status, in one step (see
    /// [`StoreMachine::set_status_message`]).
    pub fn set_status_message(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        let session = session.cloned();
        self.call(|reply| Command::SetStatusMessage {
            id,
            session,
            message,
            reply,
        })
    }

    /// Ends a live task as `completed` or `failed` with its outcome (a JSON-RPC error only
    /// as `failed`, else `InvalidArgument`, as for an outcome nested deeper than
    /// [`MAX_PAYLOAD_DEPTH`](crate::MAX_PAYLOAD_DEPTH)); first writer wins.
    pub fn store_result(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<Task, StoreError> {
        let (Outcome::Result(value) | Outcome::Error(value)) = &outcome;
        depth::check_value("the outcome", value)?;
        let session = session.cloned();
        self.call(|reply| Command::StoreResult {
            id,
            session,
            status,
            outcome,
            message,
            reply,
        })
    }

    /// The stored outcome of a finished task.
    pub fn get_result(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<TaskResult, StoreError> {
        if let Some(answer) = self.read(|m, now| m.peek_result(now, id, session)) {
            return answer;
        }
        let session = session.cloned();
        self.call(|reply| Command::GetResult { id, session, reply })
    }

    /// Blocks until the task is terminal and returns it; `Timeout` after `timeout` (measured
    /// on the store's clock), `NotFound` if it disappears.
    pub fn wait_terminal(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
    ) -> Result<Task, StoreError> {
        let session = session.cloned();
        self.call_and_wait(|reply| Command::WaitTerminal {
            id,
            session,
            timeout,
            stop: None,
            reply,
        })
    }

    /// [`wait_terminal`](Self::wait_terminal) that another thread can end early through
    /// `stop`: [`WaitStop::stop`] makes it return [`StoreError::Stopped`] at once, and the
    /// store forgets the wait. A stop that already fired makes it return `Stopped` without
    /// waiting (and without looking at the task).
    pub fn wait_terminal_or_stop(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        timeout: Option<Duration>,
        stop: &WaitStop,
    ) -> Result<Task, StoreError> {
        let Some(_running) = stop.begin(id, &self.inbox) else {
            return Err(StoreError::Stopped);
        };
        let session = session.cloned();
        self.call_and_wait(|reply| Command::WaitTerminal {
            id,
            session,
            timeout,
            stop: Some(stop.clone()),
            reply,
        })
    }

    /// One page of the caller's tasks in creation order.
    pub fn list(
        &self,
        session: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let session = session.cloned();
        let cursor = cursor.map(str::to_owned);
        self.call(|reply| Command::List {
            session,
            cursor,
            reply,
        })
    }

    /// Cancels a live task; a terminal one is reported unchanged.
    pub fn cancel(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<CancelOutcome, StoreError> {
        let session = session.cloned();
        self.call(|reply| Command::Cancel {
            id,
            session,
            message,
            reply,
        })
    }

    /// Adds input requests and moves the task to `input_required`.
    pub fn set_input_requests(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        requests: InputRequests,
    ) -> Result<Task, StoreError> {
        for request in requests.values() {
            depth::check_value("an input request", request)?;
        }
        let session = session.cloned();
        self.call(|reply| Command::SetInputRequests {
            id,
            session,
            requests,
            reply,
        })
    }

    /// Answers pending input requests; unknown keys are ignored.
    pub fn resolve_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        responses: InputResponses,
    ) -> Result<Task, StoreError> {
        for response in responses.values() {
            depth::check_value("an input response", response)?;
        }
        let session = session.cloned();
        self.call(|reply| Command::ResolveInput {
            id,
            session,
            responses,
            reply,
        })
    }

    /// Blocks until the input request `key` is answered and returns the answer. The answer
    /// is handed out once: a second caller waiting for the same key while one already does
    /// gets [`StoreError::InvalidArgument`] at once.
    pub fn wait_input(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
        key: &str,
        timeout: Option<Duration>,
    ) -> Result<Value, StoreError> {
        let session = session.cloned();
        let key = key.to_owned();
        self.call_and_wait(|reply| Command::WaitInput {
            id,
            session,
            key,
            timeout,
            reply,
        })
    }

    /// The token that tells the task's worker to stop.
    pub fn cancel_token(
        &self,
        id: TaskId,
        session: Option<&SessionId>,
    ) -> Result<CancelToken, StoreError> {
        let session = session.cloned();
        self.call(|reply| Command::CancelToken { id, session, reply })
    }

    /// A channel of status events. A subscriber that falls behind loses events (it then
    /// receives [`StoreEvent::Lagged`] once it has room, before any later event, within
    /// about 10 ms even if the store has nothing else to do); it never slows the store
    /// down. Events missed just before the store stops are not reported (there is no room
    /// for the notice): [`subscribe_counting_stop`](Self::subscribe_counting_stop) counts
    /// them.
    pub fn subscribe(&self) -> Result<Receiver<StoreEvent>, StoreError> {
        self.subscribe_with(None)
    }

    /// [`subscribe`](Self::subscribe), for a subscriber that must know whether it saw
    /// every event up to the store's stop: a subscriber whose queue is full when the store
    /// stops hears of the events it missed since the last [`StoreEvent::Lagged`] from no
    /// event (there is no room for one). Their count is in the [`MissedAtStop`] once the
    /// channel is disconnected: 0 when none were missed.
    ///
    /// ```
    /// # use mcp_task_store::{CreateTask, Store};
    /// let store = Store::builder().event_buffer(1).build()?;
    /// let (events, missed) = store.handle().subscribe_counting_stop()?;
    /// for _ in 0..3 {
    ///     store.handle().create(CreateTask::new())?;
    /// }
    /// store.shutdown()?;
    /// assert_eq!(events.iter().count(), 1, "room for one event only");
    /// assert_eq!(missed.missed(), 2);
    /// # Ok::<(), mcp_task_store::StoreError>(())
    /// ```
    pub fn subscribe_counting_stop(
        &self,
    ) -> Result<(Receiver<StoreEvent>, MissedAtStop), StoreError> {
        let missed_at_stop = Arc::new(AtomicU64::new(0));
        let receiver = self.subscribe_with(Some(Arc::clone(&missed_at_stop)))?;
        Ok((receiver, MissedAtStop(missed_at_stop)))
    }

    fn subscribe_with(
        &self,
        missed_at_close: Option<Arc<AtomicU64>>,
    ) -> Result<Receiver<StoreEvent>, StoreError> {
        let (events, receiver) = crossbeam_channel::bounded(self.event_buffer);
        self.call(|reply| Command::Subscribe {
            events,
            missed_at_close,
            reply,
        })?;
        Ok(receiver)
    }

    /// Counters: live tasks, parked waiters, timers.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        self.call(|reply| Command::Stats { reply })
    }

    /// A barrier: returns once every command sent before it is applied and everything due
    /// by the clock's current time (expiries, wait deadlines) has happened. With a
    /// [`ManualClock`](crate::ManualClock) this makes threaded tests deterministic. With a
    /// journal, a compaction under way is finished first (and one more begun and finished
    /// if due), its snapshot written in one piece: a barrier for tests and shutdown
    /// scripts, not something to call on a busy store's hot path.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.call(|reply| Command::Sync { reply })
    }
}
