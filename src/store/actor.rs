//! The owner thread: the only place that changes the machine (callers may read it, see
//! `shared`) and that serves commands. Right after serving it polls its inbox briefly (see
//! `spin`); otherwise it sleeps until the next command or the next wheel deadline, so an
//! idle store costs nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Sender, TryRecvError, TrySendError};
use serde_json::Value;

use super::clock::{Millis, Now};
use super::config::duration_ms;
use super::gate::Gate;
use super::inbox::Inbox;
use super::journal::{CompactError, Journal, Record, Turn, SNAPSHOT_HOLD};
use super::machine::{StoreMachine, StoreStats, Wake, WakeOutcome};
use super::record::Change;
pub(crate) use super::reply::Reply;
use super::shared::{Shared, Writing};
use super::spin::{spin_poll, SpinBudget, Spun};
use super::stop::WaitStop;
use super::token::CancelToken;
use crate::model::{
    CancelOutcome, CreateTask, InputRequests, InputResponses, Outcome, SessionId, StoreEvent, Task,
    TaskDetail, TaskId, TaskPage, TaskResult, TaskStatus,
};
use crate::StoreError;

/// How long one batch of expiries may hold the machine before the owner looks at its inbox
/// again. Readers spin for the lock for up to 60 us before they send their read here; a
/// fixed count of 64 expiries (about 40 us on average) held it for over 50 us in one
/// batch in twenty, and such readers then waited for the owner instead.
const EXPIRY_HOLD: Duration = Duration::from_micros(20);
/// Timers reclaimed between two looks at the time within a batch (a few microseconds).
const EXPIRY_STEP: usize = 8;
/// Most commands served per wake-up before timers get another turn.
const COMMAND_BATCH: usize = 256;
/// How soon an idle owner looks again whether a subscriber that fell behind has room to
/// hear so.
const LAG_RETRY: Duration = Duration::from_millis(10);

/// One message per public handle method; each carries the [`Reply`] its answer goes to.
#[derive(Debug)]
pub(crate) enum Command {
    Create {
        id: TaskId,
        req: CreateTask,
        reply: Reply<Task>,
    },
    Get {
        id: TaskId,
        session: Option<SessionId>,
        reply: Reply<Task>,
    },
    GetDetail {
        id: TaskId,
        session: Option<SessionId>,
        reply: Reply<TaskDetail>,
    },
    GetResult {
        id: TaskId,
        session: Option<SessionId>,
        reply: Reply<TaskResult>,
    },
    List {
        session: Option<SessionId>,
        cursor: Option<String>,
        reply: Reply<TaskPage>,
    },
    UpdateStatus {
        id: TaskId,
        session: Option<SessionId>,
        status: TaskStatus,
        message: Option<String>,
        reply: Reply<Task>,
    },
    SetStatusMessage {
        id: TaskId,
        session: Option<SessionId>,
        message: Option<String>,
        reply: Reply<Task>,
    },
    StoreResult {
        id: TaskId,
        session: Option<SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
        reply: Reply<Task>,
    },
    Cancel {
        id: TaskId,
        session: Option<SessionId>,
        message: Option<String>,
        reply: Reply<CancelOutcome>,
    },
    SetInputRequests {
        id: TaskId,
        session: Option<SessionId>,
        requests: InputRequests,
        reply: Reply<Task>,
    },
    ResolveInput {
        id: TaskId,
        session: Option<SessionId>,
        responses: InputResponses,
        reply: Reply<Task>,
    },
    CancelToken {
        id: TaskId,
        session: Option<SessionId>,
        reply: Reply<CancelToken>,
    },
    WaitTerminal {
        id: TaskId,
        session: Option<SessionId>,
        timeout: Option<Duration>,
        stop: Option<WaitStop>,
        reply: Reply<Task>,
    },
    /// Ends the waits on `id` parked with the [`WaitStop`] labelled `label`.
    StopWaits {
        id: TaskId,
        label: u64,
    },
    WaitInput {
        id: TaskId,
        session: Option<SessionId>,
        key: String,
        timeout: Option<Duration>,
        reply: Reply<Value>,
    },
    /// `events` is made on the caller's thread: allocating its buffer is the caller's
    /// cost, and the owner thread never holds the lock through it.
    Subscribe {
        events: Sender<StoreEvent>,
        /// Where the events missed since the last `Lagged` are counted when the store
        /// stops before it could send another; `None` when nobody asks.
        missed_at_close: Option<Arc<AtomicU64>>,
        reply: Reply<()>,
    },
    Stats {
        reply: Reply<StoreStats>,
    },
    Sync {
        reply: Reply<()>,
    },
    Shutdown,
    /// Does nothing: wakes the owner thread to look at the inbox's seats (see `inbox`).
    Wake,
}

/// A parked waiter's reply; a wait for a terminal task also carries the label of the
/// [`WaitStop`] that may end it early.
#[derive(Debug)]
pub(crate) enum ReplyTo {
    Task(Reply<Task>, Option<u64>),
    Value(Reply<Value>),
}

#[derive(Debug)]
struct Subscriber {
    events: Sender<StoreEvent>,
    missed: u64,
    missed_at_close: Option<Arc<AtomicU64>>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        // The store stops (or forgets a subscriber gone away): no `Lagged` will tell of
        // the events missed since the last one. Counted before `events` drops, so a
        // reader that finds the channel disconnected finds the count too.
        if let (Some(slot), missed @ 1..) = (&self.missed_at_close, self.missed) {
            slot.store(missed, Ordering::SeqCst);
        }
    }
}

pub(crate) struct StoreActor {
    /// The machine (written only here) and the clock.
    shared: Arc<Shared>,
    out: Outbox,
    /// The handles' admission gate, if any: opened for waiters before the thread sleeps.
    gate: Option<Arc<Gate>>,
    /// How long to poll the inbox after serving, before sleeping.
    spin: SpinBudget,
}

/// Everything the owner thread sends out: answers (held back for the journal's sync when
/// there is one), wake-ups of parked waiters, events for subscribers.
struct Outbox {
    subscribers: Vec<Subscriber>,
    /// With a journal, replies wait here until their batch is durable (group commit).
    journal: Option<Journal>,
    held: Vec<Held>,
    /// With a journal, `sync` replies: answered once the batch is durable and any
    /// compaction under way has finished, so that a barrier leaves a settled directory.
    settled: Vec<Held>,
    /// Wake-ups taken from the machine under the lock, answered after releasing it
    /// (kept to reuse its allocation).
    wakes: Vec<Wake<ReplyTo>>,
}

/// A reply held back until its batch is durable.
type Held = Box<dyn FnOnce() + Send>;

/// How far a call to `compaction_turn` takes compaction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pace {
    /// Between batches: begin one if due, and give the walk one turn.
    Turn,
    /// For a barrier, and at start before serving: finish the compaction under way, if
    /// any; then begin one if due (a log of an older format always is at start) and
    /// finish that too. Never more than that: a log that is always due would keep the
    /// barrier waiting for ever.
    Finish,
}

/// Rough size of one task's record, to judge when the log has outgrown the live data.
const RECORD_BYTES_ESTIMATE: u64 = 256;

impl StoreActor {
    pub(crate) fn new(
        shared: Arc<Shared>,
        journal: Option<Journal>,
        gate: Option<Arc<Gate>>,
    ) -> StoreActor {
        StoreActor {
            shared,
            out: Outbox {
                subscribers: Vec::new(),
                journal,
                held: Vec::new(),
                settled: Vec::new(),
                wakes: Vec::new(),
            },
            gate,
            spin: SpinBudget::default(),
        }
    }

    /// Writes what recovery changed (tasks failed or expired while the process was down)
    /// before the store serves anyone.
    pub(crate) fn settle_recovery(&mut self) -> Result<(), StoreError> {
        let now = self.shared.time().now();
        let mut m = self.shared.write();
        while m.handle_timeout(now, usize::MAX) {}
        if self.out.journal.as_ref().is_some_and(Journal::is_empty) {
            let (key, seq) = (m.cursor_key(), m.next_seq());
            let journal = self.out.journal.as_mut().expect("checked");
            journal
                .write_header(key, seq)
                .map_err(|e| StoreError::Journal(format!("cannot write: {e}")))?;
        }
        drop(m);
        // A log of an older format is rewritten before recovery's own changes (tasks it
        // failed) are written: they then go to the new log, never as a batch into an old
        // log whose rewrite fails (a version 1 build would call that log unreadable instead
        // of naming the format it cannot read). The snapshot holds them already.
        if self
            .out
            .journal
            .as_ref()
            .is_some_and(Journal::appends_to_older_format)
        {
            self.compaction_turn(Pace::Finish)
                .map_err(|e| StoreError::Journal(format!("cannot write: {e}")))?;
        }
        // A compaction due at start is finished before anyone is served, as it was when
        // compaction ran in one piece.
        self.commit()
            .and_then(|()| self.compaction_turn(Pace::Finish))
            .map_err(|e| StoreError::Journal(format!("cannot write: {e}")))
    }

    /// Serves commands until `Shutdown` or until every sender is gone.
    pub(crate) fn run(mut self, mut inbox: Inbox) {
        // However this ends, panics included, waiters and readers hear `Closed` from then on.
        let _closing = CloseOnDrop(Arc::clone(&self.shared));
        let mut more_due = false;
        let mut busy = false;
        loop {
            // A snapshot being walked is work to come back to, as expiries are.
            let walking = self
                .out
                .journal
                .as_ref()
                .is_some_and(|j| j.walk().is_some());
            let Some(first) = self.next_command(&mut inbox, more_due || walking, busy) else {
                return;
            };
            busy = first.is_some();
            // Commands first, then one batch of expiries. A read that found the lock held
            // by an expiry batch comes here as a command; served after the next batch, it
            // waited for two (1-2% of reads during a mass expiry, up to 1.6 ms).
            let mut now = self.shared.time().now();
            let mut next = first;
            let mut served = 0;
            let mut stop = false;
            while let Some(command) = next.take() {
                // Each command reads the clock: a `sync` earlier in the batch may have seen
                // a later time, and what follows it must not see an earlier one. The first
                // shares the batch's reading (one clock read per command, not two, when
                // callers come one at a time).
                if served > 0 {
                    now = self.shared.time().now();
                }
                if !self.apply(now, command) {
                    stop = true;
                    break;
                }
                served += 1;
                if served < COMMAND_BATCH {
                    next = inbox.try_recv().ok();
                }
            }
            if !stop {
                // The latest reading: time never runs backwards for the machine.
                let mut m = self.shared.write();
                more_due = m.handle_timeout(now, EXPIRY_STEP);
                if more_due {
                    // Only a run of expiries reads the time: most batches have none.
                    let held = Instant::now();
                    while more_due && held.elapsed() < EXPIRY_HOLD {
                        more_due = m.handle_timeout(now, EXPIRY_STEP);
                    }
                }
                self.out.release_unless_journaled(m);
            }
            if let Err(e) = self.commit() {
                // Nothing of this batch may be acknowledged: stop, and every caller waiting
                // on it gets `Closed` instead of a reply the disk does not back.
                log::error!(
                    "the task store's journal failed ({e}): the store stops, and callers hear \
                     Closed; once the disk is fixed, start it again (recovery drops the batch \
                     that failed)"
                );
                return;
            }
            if stop {
                return;
            }
        }
    }

    /// Ends a batch: with a journal, writes the batch's changes and syncs once, then
    /// releases the held replies; then hands out wake-ups and events.
    fn commit(&mut self) -> std::io::Result<()> {
        if let Some(journal) = &mut self.out.journal {
            let mut m = self.shared.write();
            append_changes(&mut m, journal)?;
            // Reads need no sync: anything they saw from this batch is a change below, and
            // anything older is durable already.
            if journal.has_batch() {
                journal.commit()?;
            }
            // The changes that stop these tasks are durable now; their workers hear before
            // the callers do (a cancel that returned has fired its task's token).
            while let Some(token) = m.poll_stop() {
                token.cancel();
            }
            drop(m);
            // The batch is durable: its callers hear now, whatever compaction meets.
            for held in self.out.held.drain(..) {
                held();
            }
            self.out.release(self.shared.write());
            let pace = if self.out.settled.is_empty() {
                Pace::Turn
            } else {
                Pace::Finish
            };
            self.compaction_turn(pace)?;
            for settled in self.out.settled.drain(..) {
                settled();
            }
        }
        // Without a journal everything went out as it happened: the lock stays free.
        Ok(())
    }
}

/// Appends the records of the machine's changes since the last call to the journal's
/// batch, and the sequence numbers it gave out when no task record covers them.
fn append_changes<W>(m: &mut StoreMachine<W>, journal: &mut Journal) -> std::io::Result<()> {
    for (id, change) in m.take_changes() {
        let record = match change {
            Change::Removed => Record::Remove { id },
            Change::Created | Change::Updated => match m.record(id, change == Change::Created) {
                Some(task) => Record::Put(task),
                None => Record::Remove { id },
            },
        };
        journal.append(&record)?;
    }
    journal.keep_seq(m.next_seq(), m.cursor_key())
}

impl StoreActor {
    /// Moves compaction along (see `journal::compaction`) as `pace` says: begins one when
    /// the log has outgrown the live data, writes (the next part of) the snapshot, and
    /// collects one that finished. A compaction that fails without harm is only logged;
    /// `Err` when the journal is left in a state nothing more may be acknowledged on.
    fn compaction_turn(&mut self, pace: Pace) -> std::io::Result<()> {
        let Some(journal) = &mut self.out.journal else {
            return Ok(());
        };
        if pace == Pace::Finish {
            // The one under way, then (below) one more if due.
            Self::walk_and_collect(&self.shared, journal, Pace::Finish);
        }
        if !journal.compacting() {
            let due = self.shared.look(|m| {
                journal
                    .should_compact(m.len() as u64 * RECORD_BYTES_ESTIMATE)
                    .then(|| (m.cursor_key(), m.next_seq()))
            });
            if let Some(Some((key, seq))) = due {
                let before = journal.log_bytes();
                match journal.begin_compaction(key, seq) {
                    Ok(()) => log::info!("compacting the journal: {before} bytes of log"),
                    Err(CompactError::Abandoned(e)) => {
                        log::warn!(
                            "could not compact the journal ({e}); its log goes on and \
                             compaction is tried again when the log has doubled"
                        );
                        return Ok(());
                    }
                    Err(CompactError::Broken(e)) => return Err(e),
                }
            }
        }
        Self::walk_and_collect(&self.shared, journal, pace);
        Ok(())
    }

    /// Gives the snapshot being walked one turn (all it needs with `Pace::Finish`), then
    /// collects a finished compaction (waiting for it with `Pace::Finish`).
    fn walk_and_collect(shared: &Shared, journal: &mut Journal, pace: Pace) {
        let finish = pace == Pace::Finish;
        if let Some(walk) = journal.walk() {
            let hold = (!finish).then_some(SNAPSHOT_HOLD);
            // Under the read lock: callers' reads go on meanwhile.
            let turn = shared.look(|m| journal.walk_turn(m.records_after(walk.after), hold));
            if let Some(Turn::Failed(e)) = turn {
                log::warn!(
                    "could not write the journal's snapshot ({e}); the logs go on and \
                     compaction is tried again when the log has doubled"
                );
            }
        }
        match journal.collect_compaction(finish) {
            Some(Ok(())) => log::info!("compacted the journal"),
            Some(Err(e)) => log::warn!(
                "could not finish the journal's snapshot ({e}); the logs go on and compaction \
                 is tried again when the log has doubled"
            ),
            None => {}
        }
    }

    /// `None` when the store must stop; `Some(None)` when a deadline (or pending expiry
    /// work) woke the thread without a command.
    fn next_command(
        &mut self,
        inbox: &mut Inbox,
        more_due: bool,
        busy: bool,
    ) -> Option<Option<Command>> {
        if more_due {
            // A long run of expiries keeps this thread on its CPU; a caller it has just
            // woken may be queued on the same CPU and would otherwise wait for the
            // scheduler's next tick (4 ms here) to run.
            std::thread::yield_now();
            return match inbox.try_recv() {
                Ok(command) => Some(Some(command)),
                Err(TryRecvError::Empty) => Some(None),
                Err(TryRecvError::Disconnected) => None,
            };
        }
        // Spin only right after serving commands, when the next one is likely close behind;
        // a wake-up for a timer goes straight back to sleep, so an idle store costs nothing.
        if busy {
            // A wait that misses while callers queue at the gate is most likely a hand-over
            // (the next caller is waking up), not a sign that callers come slowly: it must
            // not shrink the budget. With 8 callers on 2 cores, shrinking here left the owner
            // asleep at most hand-overs (cycle 163k -> 180k/s, context switches about
            // halved); one caller never queues, and end to end over stdio nothing changed.
            let queued = self.gate.as_deref().is_some_and(Gate::has_waiters);
            let before = self.spin;
            match spin_poll(|| inbox.try_recv(), &mut self.spin) {
                Spun::Ready(command) => return Some(Some(command)),
                Spun::Disconnected => return None,
                Spun::Nothing => {
                    if queued {
                        self.spin = before;
                    }
                }
            }
        }
        // About to sleep: a caller that left its place free without handing it on must not
        // keep a waiter out while the store idles.
        let _asleep = self.gate.as_deref().map(Gate::owner_sleeps);
        let time = self.shared.time();
        let deadline = self
            .shared
            .look(StoreMachine::poll_timeout)
            .flatten()
            .filter(|_| time.is_real());
        let mut wake_at = deadline.map(|at| time.instant_of(at));
        if self.out.subscribers.iter().any(|s| s.missed > 0) {
            // A subscriber that fell behind hears so once it has room (`release`), but
            // nothing may come to wake this thread after it drains: an idle store would
            // leave it never knowing that events were lost, its listeners waiting for
            // states that never come. So it looks again shortly, only while one lags.
            let retry = Instant::now() + LAG_RETRY;
            wake_at = Some(wake_at.map_or(retry, |at| at.min(retry)));
        }
        match inbox.recv(wake_at) {
            Ok(command) => Some(Some(command)),
            Err(RecvTimeoutError::Timeout) => Some(None),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Applies one command; false on `Shutdown`. The machine is locked for the command
    /// alone and released before its caller or any waiter hears of it (events go to
    /// subscribers' channels under the lock: that never blocks).
    fn apply(&mut self, now: Now, command: Command) -> bool {
        if let Command::Wake = command {
            // It only ended the owner's sleep: nothing to lock for.
            return true;
        }
        let mut m = self.shared.write();
        let out = &mut self.out;
        match command {
            Command::Create { id, req, reply } => {
                let mut result = m.create(now, id, req.clone());
                // A random id colliding is astronomically unlikely; retry rather than fail.
                while matches!(&result, Err(StoreError::InvalidArgument(w)) if w == "duplicate task id")
                {
                    result = m.create(now, TaskId::random(), req.clone());
                }
                out.answer(m, reply, result);
            }
            Command::Get { id, session, reply } => {
                let result = m.get(now, id, session.as_ref());
                out.answer(m, reply, result);
            }
            Command::GetDetail { id, session, reply } => {
                let result = m.get_detail(now, id, session.as_ref());
                out.answer(m, reply, result);
            }
            Command::GetResult { id, session, reply } => {
                let result = m.get_result(now, id, session.as_ref());
                out.answer(m, reply, result);
            }
            Command::List {
                session,
                cursor,
                reply,
            } => {
                let result = m.list(now, session.as_ref(), cursor.as_deref());
                out.answer(m, reply, result);
            }
            Command::UpdateStatus {
                id,
                session,
                status,
                message,
                reply,
            } => {
                let result = m.update_status(now, id, session.as_ref(), status, message);
                out.answer(m, reply, result);
            }
            Command::SetStatusMessage {
                id,
                session,
                message,
                reply,
            } => {
                let result = m.set_status_message(now, id, session.as_ref(), message);
                out.answer(m, reply, result);
            }
            Command::StoreResult {
                id,
                session,
                status,
                outcome,
                message,
                reply,
            } => {
                let result = m.store_result(now, id, session.as_ref(), status, outcome, message);
                out.answer(m, reply, result);
            }
            Command::Cancel {
                id,
                session,
                message,
                reply,
            } => {
                let result = m.cancel(now, id, session.as_ref(), message);
                out.answer(m, reply, result);
            }
            Command::SetInputRequests {
                id,
                session,
                requests,
                reply,
            } => {
                let result = m.set_input_requests(now, id, session.as_ref(), requests);
                out.answer(m, reply, result);
            }
            Command::ResolveInput {
                id,
                session,
                responses,
                reply,
            } => {
                let result = m.resolve_input(now, id, session.as_ref(), responses);
                out.answer(m, reply, result);
            }
            Command::CancelToken { id, session, reply } => {
                let result = m.cancel_token(now, id, session.as_ref());
                out.answer(m, reply, result);
            }
            Command::WaitTerminal {
                id,
                session,
                timeout,
                stop,
                reply,
            } => {
                // A stop that fired before this command arrived sent its word earlier, to
                // no parked wait (see `stop`): it is seen here instead.
                if stop.as_ref().is_some_and(WaitStop::is_stopped) {
                    out.answer(m, reply, Err(StoreError::Stopped));
                } else {
                    let deadline = deadline_after(now, timeout);
                    let token = ReplyTo::Task(reply, stop.as_ref().map(WaitStop::label));
                    m.wait_terminal(now, id, session.as_ref(), deadline, token);
                    out.release_unless_journaled(m);
                }
            }
            Command::StopWaits { id, label } => {
                m.stop_waits(
                    id,
                    |token| matches!(token, ReplyTo::Task(_, Some(stop)) if *stop == label),
                );
                out.release_unless_journaled(m);
            }
            Command::WaitInput {
                id,
                session,
                key,
                timeout,
                reply,
            } => {
                let deadline = deadline_after(now, timeout);
                m.wait_input(
                    now,
                    id,
                    session.as_ref(),
                    &key,
                    deadline,
                    ReplyTo::Value(reply),
                );
                out.release_unless_journaled(m);
            }
            Command::Subscribe {
                events,
                missed_at_close,
                reply,
            } => {
                m.set_events_enabled(true);
                out.subscribers.push(Subscriber {
                    events,
                    missed: 0,
                    missed_at_close,
                });
                out.answer(m, reply, Ok(()));
            }
            Command::Stats { reply } => {
                let stats = m.stats();
                out.answer(m, reply, Ok(stats));
            }
            Command::Sync { reply } => {
                // A barrier: everything due by the clock's current reading (every command
                // reads it afresh) happens first.
                while m.handle_timeout(now, usize::MAX) {}
                if out.journal.is_some() {
                    drop(m);
                    out.settled.push(Box::new(move || send(reply, Ok(()))));
                } else {
                    out.answer(m, reply, Ok(()));
                }
            }
            Command::Shutdown => return false,
            Command::Wake => {} // handled above, without the lock
        }
        true
    }
}

impl Outbox {
    /// Answers a command: at once without a journal, after the batch's sync with one.
    /// Takes the machine's lock so as to release it before the caller hears anything.
    fn answer<T: Send + 'static>(
        &mut self,
        m: Writing<'_>,
        reply: Reply<T>,
        result: Result<T, StoreError>,
    ) {
        if self.journal.is_some() {
            drop(m);
            self.held.push(Box::new(move || send(reply, result)));
        } else {
            // Wake-ups and events first: when a call returns, what it caused has been
            // handed to waiters and subscribers.
            self.release(m);
            send(reply, result);
        }
    }

    /// Without a journal, sends out what the machine produced (see `release`); with one,
    /// that waits for the batch's sync.
    fn release_unless_journaled(&mut self, m: Writing<'_>) {
        if self.journal.is_none() {
            self.release(m);
        }
    }

    /// Hands events to subscribers (never blocking), releases the machine, then answers
    /// the waiters it woke (unparking threads is best done without the lock).
    fn release(&mut self, mut m: Writing<'_>) {
        while let Some(wake) = m.poll_wake() {
            self.wakes.push(wake);
        }
        // A subscriber that fell behind hears so at the first batch after it has room, not
        // only with the next event (reads answered on callers' threads are no batch).
        self.subscribers.retain_mut(report_missed);
        while let Some(event) = m.poll_event() {
            self.subscribers
                .retain_mut(|subscriber| deliver(subscriber, &event));
            if self.subscribers.is_empty() {
                m.set_events_enabled(false);
            }
        }
        drop(m);
        for Wake { token, outcome } in self.wakes.drain(..) {
            match (token, outcome) {
                (ReplyTo::Task(reply, _), WakeOutcome::Terminal(result)) => send(reply, result),
                (ReplyTo::Value(reply), WakeOutcome::Input(result)) => send(reply, result),
                // The machine answers each waiter with the kind it parked; anything else
                // is a bug, and dropping the reply surfaces it to the caller as `Closed`.
                (token, outcome) => {
                    debug_assert!(false, "mismatched wake {token:?} / {outcome:?}");
                }
            }
        }
    }
}

/// Closes the shared machine when the owner thread ends, however it ends.
struct CloseOnDrop(Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Tells a subscriber that fell behind how many events it missed, if it has room for that
/// now (it stays behind otherwise); false once it has gone away.
fn report_missed(subscriber: &mut Subscriber) -> bool {
    if subscriber.missed == 0 {
        return true;
    }
    let lagged = StoreEvent::Lagged {
        missed: subscriber.missed,
    };
    match subscriber.events.try_send(lagged) {
        Ok(()) => {
            subscriber.missed = 0;
            true
        }
        Err(TrySendError::Full(_)) => true,
        Err(TrySendError::Disconnected(_)) => false,
    }
}

/// Sends an event to one subscriber without blocking; false once it has gone away.
fn deliver(subscriber: &mut Subscriber, event: &StoreEvent) -> bool {
    if !report_missed(subscriber) {
        return false;
    }
    if subscriber.missed > 0 {
        // Still no room: this event is missed too, after the ones already counted.
        subscriber.missed += 1;
        return true;
    }
    match subscriber.events.try_send(event.clone()) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) => {
            subscriber.missed += 1;
            true
        }
        Err(TrySendError::Disconnected(_)) => false,
    }
}

fn deadline_after(now: Now, timeout: Option<Duration>) -> Option<Millis> {
    timeout.map(|t| now.mono.plus(duration_ms(t)))
}

/// Replies never block: each goes to its caller's own slot.
fn send<T>(reply: Reply<T>, result: Result<T, StoreError>) {
    reply.send(result);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::journal::JournalConfig;
    use crate::store::{ExpiryPolicy, StoreConfig};

    /// A batch as the owner ends it, on a machine driven by hand.
    fn commit_batch(m: &mut StoreMachine<()>, journal: &mut Journal) {
        append_changes(m, journal).unwrap();
        if journal.has_batch() {
            journal.commit().unwrap();
        }
    }

    /// A task created and removed within one batch leaves no record, but its sequence
    /// number stays given out across a restart: a cursor issued in that batch may name it,
    /// and a later task taking it again could be skipped by a client paging on from there.
    #[test]
    fn a_task_created_and_removed_in_one_batch_keeps_its_number_given_out() {
        let dir = tempfile::tempdir().unwrap();
        let config = JournalConfig::new(dir.path());
        let (mut journal, recovered) = Journal::open(&config).unwrap();
        let store_config = StoreConfig {
            expiry: ExpiryPolicy::Remove,
            ..StoreConfig::default()
        };
        let mut m: StoreMachine<()> = StoreMachine::new(store_config, 7).unwrap();
        m.set_journaling(true);
        journal.write_header(7, m.next_seq()).unwrap();
        assert_eq!(recovered.next_seq, 0, "a fresh directory");

        // One batch: a task that stays, then one that is created and expires at once.
        let now = Now::at(1_000);
        m.create(now, TaskId::random(), CreateTask::new()).unwrap();
        let fleeting = m
            .create(now, TaskId::random(), CreateTask::new().ttl(1))
            .unwrap();
        m.handle_timeout(Now::at(1_001), usize::MAX);
        assert!(m.get(Now::at(1_001), fleeting.task_id, None).is_err());
        let given_out = m.next_seq();
        commit_batch(&mut m, &mut journal);
        drop(journal);

        let (mut journal, recovered) = Journal::open(&config).unwrap();
        assert_eq!(recovered.tasks.len(), 1);
        assert_eq!(
            recovered.next_seq, given_out,
            "the fleeting task's number is taken"
        );

        // A batch whose task records cover every number given out adds no header.
        let log = dir.path().join(format!("journal-{:016x}.log", 0));
        let headers = || {
            let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
            text.matches(r#""kind":"header""#).count()
        };
        assert_eq!(headers(), 2, "the first and the one for the fleeting task");
        let mut m: StoreMachine<()> = StoreMachine::restore(
            StoreConfig::default(),
            7,
            recovered.next_seq,
            recovered.tasks,
            now,
            crate::store::RecoveryPolicy::Keep,
        )
        .unwrap();
        m.create(now, TaskId::random(), CreateTask::new()).unwrap();
        commit_batch(&mut m, &mut journal);
        drop(journal);
        assert_eq!(headers(), 2);
        let (_, recovered) = Journal::open(&config).unwrap();
        assert_eq!(recovered.tasks.len(), 2);
    }
}
