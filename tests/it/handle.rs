//! The threaded store through its handle: real threads, invariants instead of timings, and
//! the manual clock plus the `sync` barrier instead of sleeps.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use mcp_task_store::store::STOP_POLL;
use mcp_task_store::{
    Clock, CreateTask, ExpiryPolicy, LimitScope, ManualClock, Outcome, SessionId, Store,
    StoreError, StoreEvent, StoreHandle, Task, TaskId, TaskStatus, TaskStore, WaitStop,
};
use serde_json::json;

use crate::fixtures::OnlyRequired;

fn manual_store(clock: &ManualClock) -> Store {
    Store::builder().clock(clock.clone()).build().unwrap()
}

/// Spins (without sleeping) until `n` callers are parked in the store.
fn until_parked(handle: &StoreHandle, n: usize) {
    let started = Instant::now();
    while handle.stats().unwrap().waiters < n {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "waiters never parked"
        );
        thread::yield_now();
    }
}

fn walk(handle: &StoreHandle, session: Option<&SessionId>) -> Vec<TaskId> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = handle.list(session, cursor.as_deref()).unwrap();
        ids.extend(page.tasks.iter().map(|t| t.task_id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return ids,
        }
    }
}

#[test]
fn eight_threads_of_mixed_operations_lose_no_update() {
    const THREADS: usize = 8;
    const OPS: usize = 10_000;
    let store = Store::builder().page_size(1000).build().unwrap();
    // Every thread adds and answers input keys on the same few tasks (a task may use at most
    // 10,000 keys over its life, so the 16,000 keys are spread over four).
    let shared: Vec<TaskId> = (0..4)
        .map(|_| store.create(CreateTask::new()).unwrap().task_id)
        .collect();
    let start = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let handle = store.handle();
            let start = start.clone();
            let shared = shared.clone();
            thread::spawn(move || {
                let session = SessionId::from(format!("s{t}"));
                let mut mine: BTreeMap<TaskId, TaskStatus> = BTreeMap::new();
                let mut current = None;
                start.wait();
                for op in 0..OPS {
                    match op % 5 {
                        0 => {
                            let task = handle
                                .create(CreateTask::new().session(session.clone()))
                                .unwrap();
                            mine.insert(task.task_id, TaskStatus::Working);
                            current = Some(task.task_id);
                        }
                        1 => {
                            let id = current.unwrap();
                            let message = format!("{t}:{op}");
                            let task = handle
                                .update_status(
                                    id,
                                    Some(&session),
                                    TaskStatus::Working,
                                    Some(message.clone()),
                                )
                                .unwrap();
                            assert_eq!(task.status_message, Some(message));
                        }
                        2 => {
                            let shared = shared[op / 5 % shared.len()];
                            let key = format!("t{t}-op{op}");
                            let mut requests = BTreeMap::new();
                            requests.insert(key, json!({"method": "elicitation/create"}));
                            handle.set_input_requests(shared, None, requests).unwrap();
                        }
                        3 => {
                            let shared = shared[op / 5 % shared.len()];
                            let key = format!("t{t}-op{}", op - 1);
                            let mut responses = BTreeMap::new();
                            responses.insert(key.clone(), json!(op));
                            handle.resolve_input(shared, None, responses).unwrap();
                            assert_eq!(
                                handle.wait_input(shared, None, &key, None).unwrap(),
                                json!(op)
                            );
                        }
                        _ => {
                            let id = current.unwrap();
                            let final_status = if op % 10 == 4 {
                                handle.cancel(id, Some(&session), None).unwrap();
                                TaskStatus::Cancelled
                            } else {
                                let outcome = Outcome::result(json!({"thread": t, "op": op}));
                                handle
                                    .store_result(
                                        id,
                                        Some(&session),
                                        TaskStatus::Completed,
                                        outcome,
                                        None,
                                    )
                                    .unwrap();
                                TaskStatus::Completed
                            };
                            mine.insert(id, final_status);
                        }
                    }
                }
                (session, mine)
            })
        })
        .collect();
    let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let mut all_ids = HashSet::new();
    for (session, mine) in &results {
        let listed = walk(&store, Some(session));
        assert_eq!(
            listed.len(),
            mine.len(),
            "every task of {session} is listed once"
        );
        for id in &listed {
            assert!(all_ids.insert(*id), "ids are unique across threads");
            let task = store.get(*id, Some(session)).unwrap();
            assert_eq!(task.status, mine[id], "final status of {id}");
        }
        let completed = mine
            .iter()
            .find(|(_, s)| **s == TaskStatus::Completed)
            .unwrap()
            .0;
        assert!(store.get_result(*completed, Some(session)).is_ok());
    }
    for id in shared {
        let shared_task = store.get_detail(id, None).unwrap();
        assert!(
            shared_task.input_requests.is_empty(),
            "every input key was answered"
        );
        assert_eq!(shared_task.task.status, TaskStatus::Working);
    }
    assert_eq!(store.stats().unwrap().waiters, 0);
}

#[test]
fn exactly_one_winner_among_racing_completions_and_cancels() {
    let store = Store::builder().build().unwrap();
    for round in 0..200 {
        let id = store.create(CreateTask::new()).unwrap().task_id;
        let start = Arc::new(Barrier::new(4));
        let racers: Vec<_> = (0..4)
            .map(|r| {
                let handle = store.handle();
                let start = start.clone();
                thread::spawn(move || {
                    start.wait();
                    if r % 2 == 0 {
                        let outcome = Outcome::result(json!({"winner": r}));
                        match handle.store_result(id, None, TaskStatus::Completed, outcome, None) {
                            Ok(_) => Some(r),
                            Err(StoreError::AlreadyTerminal(_)) => None,
                            Err(e) => panic!("round {round}: {e}"),
                        }
                    } else {
                        handle
                            .cancel(id, None, None)
                            .unwrap()
                            .cancelled
                            .then_some(r)
                    }
                })
            })
            .collect();
        let winners: Vec<usize> = racers
            .into_iter()
            .filter_map(|r| r.join().unwrap())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let task = store.get(id, None).unwrap();
        let winner = winners[0];
        if winner.is_multiple_of(2) {
            assert_eq!(task.status, TaskStatus::Completed);
            let stored = store.get_result(id, None).unwrap();
            assert_eq!(stored.outcome, Outcome::result(json!({"winner": winner})));
        } else {
            assert_eq!(task.status, TaskStatus::Cancelled);
        }
    }
}

/// A tool's progress messages racing a status change (a question asked from another of its
/// threads) never undo the change.
#[test]
fn a_status_message_never_undoes_a_concurrent_status_change() {
    let store = Store::builder().build().unwrap();
    for round in 0..200 {
        let id = store.create(CreateTask::new()).unwrap().task_id;
        let start = Arc::new(Barrier::new(2));
        let reporter = {
            let handle = store.handle();
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                for step in 0..20 {
                    let message = Some(format!("step {step}"));
                    TaskStore::set_status_message(&handle, id, None, message).unwrap();
                }
            })
        };
        start.wait();
        store
            .update_status(id, None, TaskStatus::InputRequired, None)
            .unwrap();
        reporter.join().unwrap();
        let task = store.get(id, None).unwrap();
        assert_eq!(task.status, TaskStatus::InputRequired, "round {round}");
    }
}

/// For one caller, a status message set in one step does what reading the status and
/// writing it back does, and so does the trait's default (a store that implements only what
/// the trait requires): the same task, one status event alike, the same refusals.
#[test]
fn a_status_message_is_an_update_keeping_the_status_whoever_sets_it() {
    let store = Store::builder().build().unwrap();
    let events = store.subscribe().unwrap();
    let plain = OnlyRequired::new(store.handle());
    let s = SessionId::new("s");
    type Set<'a> =
        &'a dyn Fn(TaskId, Option<&SessionId>, Option<String>) -> Result<Task, StoreError>;
    let one_step: Set = &|id, session, message| store.set_status_message(id, session, message);
    let default: Set = &|id, session, message| plain.set_status_message(id, session, message);
    let two_steps: Set = &|id, session, message| {
        let status = store.get(id, session)?.status;
        store.update_status(id, session, status, message)
    };
    let mut outcomes = Vec::new();
    for set in [one_step, default, two_steps] {
        let mut create = CreateTask::new();
        create.session = Some(s.clone());
        let id = store.create(create).unwrap().task_id;
        store
            .update_status(id, Some(&s), TaskStatus::InputRequired, None)
            .unwrap();
        while events.try_recv().is_ok() {}
        let task = set(id, Some(&s), Some("asked".into())).unwrap();
        let event = events
            .try_recv()
            .expect("a status event, sent before the call returned");
        assert_eq!(
            event,
            StoreEvent::Status {
                task: task.clone(),
                session: Some(s.clone())
            }
        );
        assert!(events.try_recv().is_err(), "one event");
        let cleared = set(id, Some(&s), None).unwrap();
        let foreign = set(id, None, Some("x".into()));
        store.cancel(id, Some(&s), None).unwrap();
        let late = set(id, Some(&s), Some("late".into()));
        let shape = |t: &Task| (t.status, t.status_message.clone());
        outcomes.push((
            shape(&task),
            shape(&cleared),
            foreign,
            late.map(|t| shape(&t)),
        ));
    }
    assert_eq!(
        outcomes[0],
        (
            (TaskStatus::InputRequired, Some("asked".to_owned())),
            (TaskStatus::InputRequired, None),
            Err(StoreError::NotFound),
            Err(StoreError::InvalidTransition {
                from: TaskStatus::Cancelled,
                to: TaskStatus::Cancelled
            }),
        )
    );
    assert_eq!(outcomes[1], outcomes[0], "the trait's default");
    assert_eq!(outcomes[2], outcomes[0], "get, then update_status");
}

#[test]
fn ten_parallel_creates_give_ten_distinct_ids() {
    let store = Store::builder().build().unwrap();
    let ids: HashSet<TaskId> = (0..10)
        .map(|_| {
            let handle = store.handle();
            thread::spawn(move || handle.create(CreateTask::new()).unwrap().task_id)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert_eq!(ids.len(), 10);
}

#[test]
fn limits_are_exact_under_concurrency() {
    let store = Store::builder()
        .max_tasks(100)
        .max_tasks_per_session(30)
        .build()
        .unwrap();
    let start = Arc::new(Barrier::new(8));
    let creators: Vec<_> = (0..8)
        .map(|t| {
            let handle = store.handle();
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                let mut created = 0;
                for _ in 0..50 {
                    match handle.create(CreateTask::new().session(format!("s{}", t % 4))) {
                        Ok(_) => created += 1,
                        Err(StoreError::LimitExceeded { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                (t % 4, created)
            })
        })
        .collect();
    let mut per_session = [0; 4];
    for creator in creators {
        let (session, created) = creator.join().unwrap();
        per_session[session] += created;
    }
    assert_eq!(per_session.iter().sum::<usize>(), 100, "{per_session:?}");
    assert!(per_session.iter().all(|&n| n <= 30), "{per_session:?}");
    assert_eq!(store.stats().unwrap().tasks, 100);
}

#[test]
fn fifty_concurrent_input_sets_keep_every_key_and_disjoint_resolves_resume() {
    let store = Store::builder().build().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let spawn_all = |n: usize, resolve: bool| {
        let threads: Vec<_> = (0..n)
            .map(|k| {
                let handle = store.handle();
                thread::spawn(move || {
                    let mut map = BTreeMap::new();
                    map.insert(format!("k{k}"), json!(k));
                    if resolve {
                        handle.resolve_input(id, None, map).unwrap();
                    } else {
                        handle.set_input_requests(id, None, map).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
    };
    spawn_all(50, false);
    assert_eq!(store.get_detail(id, None).unwrap().input_requests.len(), 50);
    spawn_all(50, true);
    let detail = store.get_detail(id, None).unwrap();
    assert!(detail.input_requests.is_empty());
    assert_eq!(detail.task.status, TaskStatus::Working);
}

#[test]
fn callers_blocked_when_the_store_is_dropped_get_closed() {
    let store = Store::builder().build().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    // One key per input waiter: an answer is handed out once, so a key has one waiter.
    let mut requests = BTreeMap::new();
    requests.insert("q1".to_string(), json!({}));
    requests.insert("q3".to_string(), json!({}));
    store.set_input_requests(id, None, requests).unwrap();
    let blocked: Vec<_> = (0..4)
        .map(|n| {
            let handle = store.handle();
            thread::spawn(move || {
                if n % 2 == 0 {
                    handle.wait_terminal(id, None, None).map(|_| ())
                } else {
                    handle
                        .wait_input(id, None, &format!("q{n}"), None)
                        .map(|_| ())
                }
            })
        })
        .collect();
    until_parked(&store, 4);
    let late = store.handle();
    drop(store);
    for caller in blocked {
        assert_eq!(caller.join().unwrap(), Err(StoreError::Closed));
    }
    assert_eq!(
        late.get(id, None),
        Err(StoreError::Closed),
        "a handle outliving its store"
    );
    assert_eq!(late.create(CreateTask::new()), Err(StoreError::Closed));
}

/// True on the store's owner thread (test clocks act there only: callers read the clock too).
fn on_owner_thread() -> bool {
    thread::current().name() == Some("mcp-task-store")
}

/// A clock that panics on the owner thread once armed: a stand-in for any bug inside it.
/// (Callers read the clock too, for reads served on their own threads; it must not spring
/// there, or the panic would be the caller's own.)
#[derive(Debug, Clone, Default)]
struct TrapClock(Arc<AtomicBool>);

impl Clock for TrapClock {
    fn now(&self) -> Instant {
        assert!(
            !(on_owner_thread() && self.0.load(Ordering::SeqCst)),
            "trap clock sprung"
        );
        Instant::now()
    }
    fn now_utc(&self) -> SystemTime {
        SystemTime::now()
    }
}

#[test]
fn a_panic_inside_the_owner_thread_reaches_callers_as_closed() {
    let trap = TrapClock::default();
    let store = Store::builder().clock(trap.clone()).build().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let waiter = {
        let handle = store.handle();
        thread::spawn(move || handle.wait_terminal(id, None, None))
    };
    until_parked(&store, 1);
    trap.0.store(true, Ordering::SeqCst);
    // `sync` always reads the clock, so the trap springs now.
    assert_eq!(store.sync(), Err(StoreError::Closed));
    assert_eq!(store.get(id, None), Err(StoreError::Closed));
    assert_eq!(waiter.join().unwrap(), Err(StoreError::Closed));
    assert_eq!(
        store.shutdown(),
        Err(StoreError::Closed),
        "shutdown reports the panic"
    );
}

#[test]
fn callers_racing_an_owner_panic_all_get_closed() {
    // Commands sent while the owner thread unwinds must not be stranded in the inbox: each
    // caller hears `Closed` (a stranded command would block its caller forever).
    for _ in 0..100 {
        let trap = TrapClock::default();
        let store = Store::builder().clock(trap.clone()).build().unwrap();
        let id = store.create(CreateTask::new()).unwrap().task_id;
        let callers: Vec<_> = (0..3)
            .map(|_| {
                let handle = store.handle();
                // `stats` is always a command to the owner thread; `get` is read on this
                // thread while the machine is up, and must hear `Closed` once it is not.
                thread::spawn(move || loop {
                    if let Err(e) = handle.get(id, None).and_then(|_| handle.stats()) {
                        return e;
                    }
                })
            })
            .collect();
        trap.0.store(true, Ordering::SeqCst);
        for caller in callers {
            assert_eq!(caller.join().unwrap(), StoreError::Closed);
        }
        assert_eq!(store.shutdown(), Err(StoreError::Closed));
    }
}

#[test]
fn ttl_expiry_through_the_handle_with_the_manual_clock() {
    let clock = ManualClock::new();
    let store = Store::builder()
        .clock(clock.clone())
        .expiry(ExpiryPolicy::Remove)
        .build()
        .unwrap();
    let id = store.create(CreateTask::new().ttl(1_000)).unwrap().task_id;
    clock.advance(Duration::from_millis(999));
    store.sync().unwrap();
    assert!(store.get(id, None).is_ok());
    assert_eq!(store.stats().unwrap().tasks, 1);
    clock.advance(Duration::from_millis(1));
    store.sync().unwrap();
    assert_eq!(
        store.stats().unwrap().tasks,
        0,
        "reclaimed by the barrier, untouched"
    );
    assert_eq!(store.get(id, None), Err(StoreError::NotFound));
}

/// A clock moved by hand to any offset from when it was made, backwards included; like
/// `ManualClock`, it moves only when told to, so `sync` makes its effects deterministic.
#[derive(Debug, Clone)]
struct StepClock {
    base: Instant,
    base_utc: SystemTime,
    offset_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl StepClock {
    fn new() -> StepClock {
        StepClock {
            base: Instant::now(),
            base_utc: SystemTime::now(),
            offset_ms: Arc::default(),
        }
    }

    fn set(&self, ms: u64) {
        self.offset_ms.store(ms, Ordering::SeqCst);
    }

    fn offset(&self) -> Duration {
        Duration::from_millis(self.offset_ms.load(Ordering::SeqCst))
    }
}

impl Clock for StepClock {
    fn now(&self) -> Instant {
        self.base + self.offset()
    }
    fn now_utc(&self) -> SystemTime {
        self.base_utc + self.offset()
    }
    fn is_real(&self) -> bool {
        false
    }
}

/// A clock set back holds the store's time still until it catches up: a task created
/// meanwhile is dated no earlier than those before it, its deadline is not lost, and a
/// wait's timeout counts from the store's time, so it ends neither at once nor late.
#[test]
fn a_clock_set_back_holds_the_store_still_until_it_catches_up() {
    let clock = StepClock::new();
    let store = Store::builder()
        .clock(clock.clone())
        .expiry(ExpiryPolicy::Remove)
        .build()
        .unwrap();
    clock.set(10_000);
    let a = store.create(CreateTask::new().ttl(1_000)).unwrap();
    clock.set(0);
    let b = store.create(CreateTask::new().ttl(1_000)).unwrap();
    assert!(b.created_at >= a.created_at, "{b:?} before {a:?}");
    let waiter = {
        let handle = store.handle();
        let id = b.task_id;
        thread::spawn(move || handle.wait_terminal(id, None, Some(Duration::from_millis(500))))
    };
    until_parked(&store, 1);
    clock.set(10_499);
    store.sync().unwrap();
    assert_eq!(store.stats().unwrap().waiters, 1, "not before its timeout");
    clock.set(10_500);
    store.sync().unwrap();
    assert_eq!(waiter.join().unwrap(), Err(StoreError::Timeout));
    clock.set(10_999);
    store.sync().unwrap();
    assert_eq!(store.stats().unwrap().tasks, 2, "neither is past its TTL");
    clock.set(11_000);
    store.sync().unwrap();
    assert_eq!(store.stats().unwrap().tasks, 0, "both reclaimed, untouched");
}

#[test]
fn expiry_wakes_blocked_waiters_through_the_handle() {
    let clock = ManualClock::new();
    let store = manual_store(&clock);
    let id = store.create(CreateTask::new().ttl(5_000)).unwrap().task_id;
    let waiter = {
        let handle = store.handle();
        thread::spawn(move || handle.wait_terminal(id, None, None))
    };
    until_parked(&store, 1);
    clock.advance(Duration::from_secs(5));
    store.sync().unwrap();
    let task = waiter.join().unwrap().unwrap();
    assert_eq!(
        task.status,
        TaskStatus::Failed,
        "default policy fails a running task"
    );
}

#[test]
fn wait_timeouts_follow_the_store_clock() {
    let clock = ManualClock::new();
    let store = manual_store(&clock);
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let waiter = {
        let handle = store.handle();
        thread::spawn(move || handle.wait_terminal(id, None, Some(Duration::from_secs(30))))
    };
    until_parked(&store, 1);
    clock.advance(Duration::from_secs(29));
    store.sync().unwrap();
    assert_eq!(store.stats().unwrap().waiters, 1, "not before the deadline");
    clock.advance(Duration::from_secs(1));
    store.sync().unwrap();
    assert_eq!(waiter.join().unwrap(), Err(StoreError::Timeout));
}

#[test]
fn a_stopped_wait_returns_at_once_and_the_store_forgets_it() {
    let store = Store::builder().build().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let stop = WaitStop::new();
    let stopped = {
        let (handle, stop) = (store.handle(), stop.clone());
        thread::spawn(move || handle.wait_terminal_or_stop(id, None, None, &stop))
    };
    let other = {
        let handle = store.handle();
        thread::spawn(move || handle.wait_terminal_or_stop(id, None, None, &WaitStop::new()))
    };
    until_parked(&store, 2);
    stop.stop();
    assert_eq!(stopped.join().unwrap(), Err(StoreError::Stopped));
    assert_eq!(store.stats().unwrap().waiters, 1, "the other wait stays");
    store.cancel(id, None, None).unwrap();
    assert_eq!(other.join().unwrap().unwrap().status, TaskStatus::Cancelled);
    assert_eq!(store.stats().unwrap().waiters, 0);
}

#[test]
fn a_wait_given_a_stop_that_already_fired_does_not_wait() {
    let store = Store::builder().build().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let stop = WaitStop::new();
    stop.stop();
    assert!(stop.is_stopped());
    assert_eq!(
        store.wait_terminal_or_stop(id, None, None, &stop),
        Err(StoreError::Stopped)
    );
    assert_eq!(store.stats().unwrap().waiters, 0);
}

#[test]
fn stops_racing_the_start_of_their_waits_always_end_them() {
    let store = Store::builder().build().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    for _ in 0..300 {
        let stop = WaitStop::new();
        let start = Arc::new(Barrier::new(2));
        let waiter = {
            let (handle, stop, start) = (store.handle(), stop.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                // Long enough that a lost stop shows as `Timeout`, not as a hung test.
                handle.wait_terminal_or_stop(id, None, Some(Duration::from_secs(20)), &stop)
            })
        };
        start.wait();
        stop.stop();
        assert_eq!(waiter.join().unwrap(), Err(StoreError::Stopped));
    }
    assert_eq!(store.stats().unwrap().waiters, 0);
}

#[test]
fn a_completion_wakes_a_blocked_waiter_with_the_task() {
    let store = Store::builder().build().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let waiter = {
        let handle = store.handle();
        thread::spawn(move || handle.wait_terminal(id, None, None))
    };
    until_parked(&store, 1);
    store
        .store_result(
            id,
            None,
            TaskStatus::Completed,
            Outcome::result(json!(1)),
            None,
        )
        .unwrap();
    assert_eq!(
        waiter.join().unwrap().unwrap().status,
        TaskStatus::Completed
    );
}

#[test]
fn a_slow_subscriber_never_blocks_the_store() {
    let store = Store::builder().event_buffer(4).build().unwrap();
    let events = store.subscribe().unwrap();
    for _ in 0..20 {
        store.create(CreateTask::new()).unwrap();
    }
    let received: Vec<StoreEvent> = events.try_iter().collect();
    assert_eq!(received.len(), 4, "the buffer filled, the rest was dropped");
    store.create(CreateTask::new()).unwrap();
    let after: Vec<StoreEvent> = events.try_iter().collect();
    assert_eq!(after.first(), Some(&StoreEvent::Lagged { missed: 16 }));
    assert!(matches!(after.get(1), Some(StoreEvent::Created { .. })));
}

#[test]
fn a_subscriber_that_fell_behind_hears_so_without_waiting_for_another_event() {
    let store = Store::builder().event_buffer(4).build().unwrap();
    let events = store.subscribe().unwrap();
    for _ in 0..6 {
        store.create(CreateTask::new()).unwrap();
    }
    assert_eq!(events.try_iter().count(), 4);
    // No event follows, but the next command the owner serves reports the loss.
    store.sync().unwrap();
    let after: Vec<StoreEvent> = events.try_iter().collect();
    assert_eq!(after, vec![StoreEvent::Lagged { missed: 2 }]);
}

#[test]
fn a_subscriber_that_fell_behind_hears_so_once_it_drains_even_if_the_store_stays_idle() {
    let store = Store::builder().event_buffer(4).build().unwrap();
    let events = store.subscribe().unwrap();
    for _ in 0..6 {
        store.create(CreateTask::new()).unwrap();
    }
    store.sync().unwrap();
    assert_eq!(events.try_iter().count(), 4);
    // Nothing else reaches the store: a subscriber (the HTTP transport's event router,
    // say) that missed a task's last change must still learn it missed something.
    let lagged = events.recv_timeout(Duration::from_secs(10));
    assert_eq!(lagged, Ok(StoreEvent::Lagged { missed: 2 }));
}

#[test]
fn an_event_buffer_too_large_to_allocate_is_refused_at_build_not_on_subscribe() {
    // It used to pass validation, then panic the owner thread (or abort the process) in
    // the first subscribe, after which every call answered `Closed`.
    match Store::builder().event_buffer(usize::MAX).build() {
        Err(StoreError::InvalidConfig { field, .. }) => assert_eq!(field, "event_buffer"),
        other => panic!("expected InvalidConfig, got {:?}", other.map(|_| ())),
    }
    let store = Store::builder().event_buffer(1 << 16).build().unwrap();
    let events = store.subscribe().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    assert!(matches!(
        events.recv_timeout(Duration::from_secs(5)).unwrap(),
        StoreEvent::Created { task, .. } if task.task_id == id
    ));
    assert!(store.get(id, None).is_ok());
}

#[test]
fn dropped_subscribers_are_forgotten() {
    let store = Store::builder().build().unwrap();
    drop(store.subscribe().unwrap());
    let kept = store.subscribe().unwrap();
    store.create(CreateTask::new()).unwrap();
    assert_eq!(kept.try_iter().count(), 1);
}

#[test]
fn the_handle_serves_the_store_trait() {
    let store = Store::builder().max_tasks_per_session(1).build().unwrap();
    let dynamic: Box<dyn TaskStore> = Box::new(store.handle());
    let task = dynamic.create(CreateTask::new().session("x")).unwrap();
    assert_eq!(dynamic.get(task.task_id, Some(&"x".into())).unwrap(), task);
    assert_eq!(
        dynamic.create(CreateTask::new().session("x")),
        Err(StoreError::LimitExceeded {
            scope: LimitScope::Session,
            limit: 1
        })
    );
}

/// The task limits count the tasks a store holds, finished ones included until their TTL
/// removes them (as the binary's `--help` says), not only live ones: an HTTP identity that
/// finished its share waits for the TTLs.
#[test]
fn finished_tasks_count_toward_the_limits_until_their_ttl() {
    let clock = ManualClock::new();
    let store = Store::builder()
        .clock(clock.clone())
        .default_ttl(Duration::from_secs(60))
        .max_tasks_per_session(1)
        .build()
        .unwrap();
    let s = SessionId::new("auth:alice");
    let task = store
        .create(CreateTask::new().session("auth:alice"))
        .unwrap();
    store.cancel(task.task_id, Some(&s), None).unwrap();
    assert_eq!(
        store.create(CreateTask::new().session("auth:alice")),
        Err(StoreError::LimitExceeded {
            scope: LimitScope::Session,
            limit: 1
        })
    );
    clock.advance(Duration::from_secs(60));
    store.sync().unwrap();
    store
        .create(CreateTask::new().session("auth:alice"))
        .unwrap();
}

/// Reads are served on the calling thread when they change nothing; a change that has
/// returned to anyone must still be visible to every read that starts after it, on any
/// thread, and a task past its TTL must never be read as live.
#[test]
fn reads_on_other_threads_see_every_change_that_has_returned() {
    let store = Store::builder().build().unwrap();
    let (tx, rx) = crossbeam_channel::bounded::<(TaskId, TaskStatus)>(0);
    let writer = {
        let handle = store.handle();
        thread::spawn(move || {
            for _ in 0..5_000 {
                let id = handle.create(CreateTask::new()).unwrap().task_id;
                tx.send((id, TaskStatus::Working)).unwrap();
                let done = Outcome::result(json!({"content": []}));
                handle
                    .store_result(id, None, TaskStatus::Completed, done, None)
                    .unwrap();
                tx.send((id, TaskStatus::Completed)).unwrap();
            }
        })
    };
    for (id, seen) in rx {
        let task = store
            .get(id, None)
            .expect("a created task is visible everywhere");
        match seen {
            // The writer may have completed it since: never anything else.
            TaskStatus::Working => assert!(matches!(
                task.status,
                TaskStatus::Working | TaskStatus::Completed
            )),
            _ => {
                assert_eq!(task.status, TaskStatus::Completed);
                let stored = store.get_result(id, None).expect("its result too");
                assert_eq!(stored.task.status, TaskStatus::Completed);
                let detail = store.get_detail(id, None).unwrap();
                assert!(detail.outcome.is_some());
            }
        }
    }
    writer.join().unwrap();
}

#[test]
fn reads_never_show_a_task_past_its_ttl() {
    let clock = ManualClock::new();
    let store = manual_store(&clock);
    let id = store.create(CreateTask::new().ttl(1_000)).unwrap().task_id;
    let reader = store.handle();
    clock.advance(Duration::from_millis(999));
    assert_eq!(reader.get(id, None).unwrap().status, TaskStatus::Working);
    // The owner thread has not run since: nothing reclaimed the task yet, and a read from
    // another thread must still settle it (here: fail it, the default policy).
    clock.advance(Duration::from_millis(1));
    let read = thread::spawn(move || reader.get(id, None)).join().unwrap();
    assert_eq!(read.unwrap().status, TaskStatus::Failed);
    assert_eq!(
        store.get_result(id, None),
        Err(StoreError::NoResult {
            status: TaskStatus::Failed,
            expired: true
        })
    );
}

/// A clock that, once armed, holds the owner thread inside its next clock read until let go.
#[derive(Debug, Clone, Default)]
struct StallClock {
    armed: Arc<AtomicBool>,
    held: Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>,
}

impl StallClock {
    fn release(&self) {
        self.armed.store(false, Ordering::SeqCst);
        let (lock, freed) = &*self.held;
        *lock.lock() = true;
        freed.notify_all();
    }
}

impl Clock for StallClock {
    fn now(&self) -> Instant {
        if on_owner_thread() && self.armed.load(Ordering::SeqCst) {
            let (lock, freed) = &*self.held;
            let mut released = lock.lock();
            while !*released {
                freed.wait(&mut released);
            }
        }
        Instant::now()
    }
    fn now_utc(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Reads that change nothing are answered on the caller's thread: they go on working while
/// the owner thread is busy (here: held inside a clock read), while commands wait for it.
#[test]
fn reads_are_answered_while_the_owner_thread_is_busy() {
    let clock = StallClock::default();
    let store = Store::builder().clock(clock.clone()).build().unwrap();
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let done = Outcome::result(json!({"content": []}));
    store
        .store_result(id, None, TaskStatus::Completed, done, None)
        .unwrap();
    clock.armed.store(true, Ordering::SeqCst);
    let blocked = {
        let handle = store.handle();
        thread::spawn(move || handle.stats())
    };
    let (tx, rx) = crossbeam_channel::bounded(1);
    let reader = {
        let handle = store.handle();
        thread::spawn(move || {
            let answers = (
                handle.get(id, None),
                handle.get_detail(id, None).map(|d| d.outcome.is_some()),
                handle.get_result(id, None).map(|r| r.task.status),
            );
            tx.send(answers).unwrap();
        })
    };
    // A timeout here is the failure (reads queued behind the stuck owner), not a wait.
    let answers = rx.recv_timeout(Duration::from_secs(30));
    clock.release();
    let answers = answers.expect("reads answered without the owner thread");
    assert_eq!(answers.0.unwrap().status, TaskStatus::Completed);
    assert_eq!(answers.1, Ok(true));
    assert_eq!(answers.2, Ok(TaskStatus::Completed));
    reader.join().unwrap();
    assert_eq!(blocked.join().unwrap().unwrap().tasks, 1);
}

#[test]
fn shutdown_returns_ok_with_tasks_and_timers_pending() {
    let store = Store::builder().build().unwrap();
    for ttl in [60_000, 3_600_000] {
        store.create(CreateTask::new().ttl(ttl)).unwrap();
    }
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let waiter = {
        let handle = store.handle();
        thread::spawn(move || handle.wait_terminal(id, None, Some(Duration::from_secs(3600))))
    };
    until_parked(&store, 1);
    let stats = store.stats().unwrap();
    assert_eq!((stats.tasks, stats.waiters, stats.timers), (3, 1, 3));
    let late = store.handle();
    assert_eq!(store.shutdown(), Ok(()));
    assert_eq!(waiter.join().unwrap(), Err(StoreError::Closed));
    assert_eq!(late.get(id, None), Err(StoreError::Closed));
}

/// Reads served during a mass expiry, while the owner thread reclaims in batches, never show
/// a task past its TTL as live: each read is either settled by the owner or sees it settled.
#[test]
fn reads_during_a_mass_expiry_never_show_a_task_past_its_ttl() {
    const TASKS: usize = 20_000;
    const READERS: usize = 3;
    const READS: usize = 2_000;
    for policy in [ExpiryPolicy::default(), ExpiryPolicy::Remove] {
        let clock = ManualClock::new();
        let store = Store::builder()
            .clock(clock.clone())
            .expiry(policy)
            .build()
            .unwrap();
        let ids: Arc<Vec<TaskId>> = Arc::new(
            (0..TASKS)
                .map(|_| store.create(CreateTask::new().ttl(1_000)).unwrap().task_id)
                .collect(),
        );
        clock.advance(Duration::from_millis(1_000));
        // Nothing has run on the owner thread since: every task is due and none reclaimed.
        let start = Arc::new(Barrier::new(READERS));
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let handle = store.handle();
                let ids = ids.clone();
                let start = start.clone();
                thread::spawn(move || {
                    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (r as u64 + 1);
                    start.wait();
                    for _ in 0..READS {
                        // xorshift64: a cheap spread over the ids, deterministic per reader.
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let id = ids[(seed % TASKS as u64) as usize];
                        match (policy, handle.get(id, None)) {
                            (ExpiryPolicy::Remove, Err(StoreError::NotFound)) => {}
                            (ExpiryPolicy::Fail { .. }, Ok(task))
                                if task.status == TaskStatus::Failed => {}
                            (_, other) => panic!("{policy:?}: {id} read as {other:?}"),
                        }
                    }
                })
            })
            .collect();
        for reader in readers {
            reader.join().unwrap();
        }
        store.sync().unwrap();
        let left = match policy {
            ExpiryPolicy::Remove => 0,
            ExpiryPolicy::Fail { .. } => TASKS, // failed, lingering for the grace period
        };
        assert_eq!(store.stats().unwrap().tasks, left, "{policy:?}");
    }
}

#[test]
fn every_listing_walk_during_concurrent_updates_has_each_task_exactly_once() {
    const TASKS: usize = 20;
    const UPDATERS: usize = 2;
    const WALKS: usize = 300;
    let store = Store::builder().page_size(3).build().unwrap();
    let created: HashSet<TaskId> = (0..TASKS)
        .map(|_| store.create(CreateTask::new()).unwrap().task_id)
        .collect();
    let ids: Arc<Vec<TaskId>> = Arc::new(created.iter().copied().collect());
    let stop = Arc::new(AtomicBool::new(false));
    // The walks start once every updater has made its first update, so they overlap.
    let (started_tx, started) = crossbeam_channel::unbounded();
    let updaters: Vec<_> = (0..UPDATERS)
        .map(|u| {
            let handle = store.handle();
            let ids = ids.clone();
            let stop = stop.clone();
            let started = started_tx.clone();
            thread::spawn(move || {
                let mut updates = 0usize;
                while updates == 0 || !stop.load(Ordering::Relaxed) {
                    let id = ids[(updates * UPDATERS + u) % ids.len()];
                    let message = format!("updater {u}, update {updates}");
                    let task = handle
                        .update_status(id, None, TaskStatus::Working, Some(message))
                        .unwrap();
                    assert_eq!(task.status, TaskStatus::Working);
                    updates += 1;
                    if updates == 1 {
                        started.send(()).unwrap();
                    }
                }
                updates
            })
        })
        .collect();
    for _ in 0..UPDATERS {
        // An updater that failed before its first update fails the test, not hangs it.
        started
            .recv_timeout(Duration::from_secs(10))
            .expect("every updater made its first update");
    }
    for n in 0..WALKS {
        let walked = walk(&store, None);
        let unique: HashSet<TaskId> = walked.iter().copied().collect();
        assert_eq!(walked.len(), TASKS, "walk {n}: {walked:?}");
        assert_eq!(unique, created, "walk {n}");
    }
    stop.store(true, Ordering::Relaxed);
    for updater in updaters {
        updater.join().unwrap();
    }
}

#[test]
fn the_default_stoppable_wait_sees_its_stop_between_slices_and_keeps_its_timeout() {
    let clock = ManualClock::new();
    let store = manual_store(&clock);
    let plain = Arc::new(OnlyRequired::new(store.handle()));
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let wait = |timeout: Option<Duration>, stop: &WaitStop| {
        let (plain, stop) = (plain.clone(), stop.clone());
        thread::spawn(move || plain.wait_terminal_or_stop(id, None, timeout, &stop))
    };
    // Slices of STOP_POLL on the store's clock: the stop is seen when one ends.
    let stop = WaitStop::new();
    let stopped = wait(None, &stop);
    until_parked(&store, 1);
    stop.stop();
    clock.advance(STOP_POLL);
    store.sync().unwrap();
    assert_eq!(stopped.join().unwrap(), Err(StoreError::Stopped));

    // The slices add up to the timeout, not to a slice more.
    let timeout = STOP_POLL * 2 + STOP_POLL / 2;
    let timed = wait(Some(timeout), &WaitStop::new());
    for step in [
        STOP_POLL,
        STOP_POLL,
        STOP_POLL / 2 - Duration::from_millis(1),
    ] {
        until_parked(&store, 1);
        clock.advance(step);
        store.sync().unwrap();
    }
    until_parked(&store, 1);
    clock.advance(Duration::from_millis(1));
    store.sync().unwrap();
    assert_eq!(timed.join().unwrap(), Err(StoreError::Timeout));

    // And a task that ends ends the wait.
    let ended = wait(Some(timeout), &WaitStop::new());
    until_parked(&store, 1);
    store.cancel(id, None, None).unwrap();
    assert_eq!(ended.join().unwrap().unwrap().status, TaskStatus::Cancelled);
}
