//! Unit tests of the pure machine, driven with explicit `now`; no threads, no sleeps.
//! Test names follow the behaviours the official SDKs' store tests check (ANCHORS.md §2).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::{StoreMachine, WakeOutcome};
use crate::model::{
    CreateTask, LimitScope, Outcome, SessionId, StoreEvent, Task, TaskId, TaskStatus, Timestamp,
};
use crate::store::clock::{Millis, Now};
use crate::store::config::{ExpiryPolicy, StoreConfig};
use crate::StoreError;

type M = StoreMachine<u32>;

fn config() -> StoreConfig {
    StoreConfig::default()
}

fn machine(config: StoreConfig) -> M {
    StoreMachine::new(config, 0x5eed).expect("valid config")
}

fn id(n: u128) -> TaskId {
    TaskId::from_u128(n)
}

fn at(ms: u64) -> Now {
    Now::at(ms)
}

fn session(name: &str) -> SessionId {
    SessionId::from(name)
}

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

fn create(m: &mut M, now: u64, n: u128) -> TaskId {
    m.create(at(now), id(n), CreateTask::new()).expect("create");
    id(n)
}

fn create_in(m: &mut M, now: u64, n: u128, s: &str) -> TaskId {
    m.create(at(now), id(n), CreateTask::new().session(s))
        .expect("create");
    id(n)
}

fn wakes(m: &mut M) -> Vec<(u32, WakeOutcome)> {
    std::iter::from_fn(|| m.poll_wake().map(|w| (w.token, w.outcome))).collect()
}

fn result(value: Value) -> Outcome {
    Outcome::result(value)
}

fn requests(keys: &[&str]) -> BTreeMap<String, Value> {
    keys.iter()
        .map(|k| {
            (
                k.to_string(),
                json!({"method": "elicitation/create", "params": {"message": k}}),
            )
        })
        .collect()
}

fn responses(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn walk(m: &mut M, now: u64, s: Option<&SessionId>) -> Vec<Vec<TaskId>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = m.list(at(now), s, cursor.as_deref()).expect("list");
        pages.push(page.tasks.iter().map(|t| t.task_id).collect());
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return pages,
        }
    }
}

// ----- creation, ids, defaults ---------------------------------------------------------

#[test]
fn new_task_is_working_with_both_timestamps_set() {
    let mut m = machine(config());
    let task = m.create(at(5), id(1), CreateTask::new()).unwrap();
    assert_eq!(task.task_id, id(1));
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.created_at, at(5).wall);
    assert_eq!(task.last_updated_at, at(5).wall);
    assert_eq!(task.status_message, None);
    assert_eq!(m.get(at(5), id(1), None).unwrap(), task);
}

#[test]
fn duplicate_task_id_is_rejected() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let err = m.create(at(0), id(1), CreateTask::new()).unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err:?}");
    assert_eq!(m.len(), 1);
}

#[test]
fn configured_poll_interval_is_copied_onto_new_tasks() {
    let mut m = machine(StoreConfig {
        poll_interval: Duration::from_millis(2500),
        ..config()
    });
    let task = m.create(at(0), id(1), CreateTask::new()).unwrap();
    assert_eq!(task.poll_interval, Some(2500));
}

#[test]
fn config_rejects_default_ttl_above_max_ttl_naming_default_ttl() {
    let bad = StoreConfig {
        default_ttl: secs(120),
        max_ttl: secs(60),
        ..config()
    };
    match StoreMachine::<u32>::new(bad, 0).unwrap_err() {
        StoreError::InvalidConfig { field, .. } => assert_eq!(field, "default_ttl"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn config_rejects_zero_values_naming_the_field() {
    let cases: Vec<(StoreConfig, &str)> = vec![
        (
            StoreConfig {
                poll_interval: Duration::ZERO,
                ..config()
            },
            "poll_interval",
        ),
        (
            StoreConfig {
                default_ttl: Some(Duration::ZERO),
                ..config()
            },
            "default_ttl",
        ),
        (
            StoreConfig {
                max_ttl: Some(Duration::ZERO),
                ..config()
            },
            "max_ttl",
        ),
        (
            StoreConfig {
                page_size: 0,
                ..config()
            },
            "page_size",
        ),
        (
            StoreConfig {
                max_tasks: Some(0),
                ..config()
            },
            "max_tasks",
        ),
        (
            StoreConfig {
                max_tasks_per_session: Some(0),
                ..config()
            },
            "max_tasks_per_session",
        ),
        (
            StoreConfig {
                max_waiters_per_task: 0,
                ..config()
            },
            "max_waiters_per_task",
        ),
        (
            StoreConfig {
                event_buffer: 0,
                ..config()
            },
            "event_buffer",
        ),
        (
            StoreConfig {
                max_ttl: Some(Duration::from_secs(u64::MAX)),
                ..config()
            },
            "max_ttl",
        ),
    ];
    for (bad, expected) in cases {
        match bad.validate() {
            Err(StoreError::InvalidConfig { field, .. }) => assert_eq!(field, expected),
            other => panic!("{expected}: unexpected {other:?}"),
        }
    }
    assert_eq!(config().validate(), Ok(()));
}

#[test]
fn config_rejects_sizes_the_owner_thread_could_not_allocate_naming_the_field() {
    // (`usize::MAX >> 1` rather than 2^34: the suite builds on 32-bit targets too.)
    for events in [(1 << 16) + 1, usize::MAX >> 1, usize::MAX] {
        let bad = StoreConfig {
            event_buffer: events,
            ..config()
        };
        match bad.validate() {
            Err(StoreError::InvalidConfig { field, reason }) => {
                assert_eq!(field, "event_buffer");
                assert_eq!(reason, "must be between 1 and 65536");
            }
            other => panic!("event_buffer {events}: unexpected {other:?}"),
        }
    }
    let largest = StoreConfig {
        event_buffer: 1 << 16,
        ..config()
    };
    assert_eq!(largest.validate(), Ok(()));
}

#[test]
fn the_machine_runs_with_the_configuration_it_was_given() {
    let given = StoreConfig {
        page_size: 7,
        max_tasks: Some(9),
        expiry: ExpiryPolicy::Remove,
        ..config()
    };
    assert_eq!(machine(given.clone()).config(), &given);
}

#[test]
fn the_store_is_empty_until_a_task_is_created_and_again_once_it_is_reclaimed() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    assert!(m.is_empty());
    m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
    assert!(!m.is_empty());
    m.handle_timeout(at(100), usize::MAX);
    assert!(m.is_empty());
}

#[test]
fn dropping_the_machine_releases_the_tokens_of_parked_waiters() {
    // The owner parks callers' reply slots as tokens: when the machine goes, they must go
    // with it, so the callers still waiting learn the store is gone.
    use std::rc::Rc;
    let token = Rc::new(());
    let mut m: StoreMachine<Rc<()>> = StoreMachine::new(config(), 0x5eed).unwrap();
    m.create(at(0), id(1), CreateTask::new()).unwrap();
    m.wait_terminal(at(0), id(1), None, None, Rc::clone(&token));
    assert_eq!(Rc::strong_count(&token), 2, "parked");
    drop(m);
    assert_eq!(Rc::strong_count(&token), 1, "released with the machine");
}

// ----- TTL and expiry -------------------------------------------------------------------

#[test]
fn requested_ttl_is_echoed_back() {
    let mut m = machine(config());
    let task = m
        .create(at(0), id(1), CreateTask::new().ttl(60_000))
        .unwrap();
    assert_eq!(task.ttl, Some(60_000));
}

#[test]
fn ttl_is_capped_at_max_ttl() {
    let mut m = machine(StoreConfig {
        max_ttl: secs(60),
        ..config()
    });
    let task = m
        .create(at(0), id(1), CreateTask::new().ttl(3_600_000))
        .unwrap();
    assert_eq!(task.ttl, Some(60_000));
}

#[test]
fn default_ttl_applies_when_none_is_requested() {
    let mut m = machine(StoreConfig {
        default_ttl: secs(30),
        ..config()
    });
    assert_eq!(
        m.create(at(0), id(1), CreateTask::new()).unwrap().ttl,
        Some(30_000)
    );
}

#[test]
fn max_ttl_caps_tasks_that_requested_none() {
    let mut m = machine(StoreConfig {
        max_ttl: secs(60),
        ..config()
    });
    assert_eq!(
        m.create(at(0), id(1), CreateTask::new()).unwrap().ttl,
        Some(60_000)
    );
}

#[test]
fn zero_ttl_request_takes_the_default() {
    let mut m = machine(StoreConfig {
        default_ttl: secs(30),
        ..config()
    });
    assert_eq!(
        m.create(at(0), id(1), CreateTask::new().ttl(0))
            .unwrap()
            .ttl,
        Some(30_000)
    );
}

#[test]
fn null_ttl_means_unlimited_lifetime() {
    let mut m = machine(config());
    let task = m.create(at(0), id(1), CreateTask::new()).unwrap();
    assert_eq!(task.ttl, None);
    let far = 100 * 365 * 24 * 3_600_000;
    assert!(!m.handle_timeout(at(far), usize::MAX));
    assert_eq!(
        m.get(at(far), id(1), None).unwrap().status,
        TaskStatus::Working
    );
    assert_eq!(m.poll_timeout(), None, "an unlimited task arms no timer");
}

#[test]
fn task_expires_exactly_at_its_deadline_and_never_before() {
    let mut m = machine(config());
    m.create(at(100), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    m.store_result(
        at(200),
        id(1),
        None,
        TaskStatus::Completed,
        result(json!({})),
        None,
    )
    .unwrap();
    assert!(
        m.get(at(1_099), id(1), None).is_ok(),
        "one ms before the deadline"
    );
    assert_eq!(m.get(at(1_100), id(1), None), Err(StoreError::NotFound));
}

#[test]
fn ttl_counts_from_creation_not_from_completion() {
    let mut m = machine(config());
    m.create(at(0), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    m.store_result(
        at(900),
        id(1),
        None,
        TaskStatus::Completed,
        result(json!(1)),
        None,
    )
    .unwrap();
    assert_eq!(m.get(at(1_000), id(1), None), Err(StoreError::NotFound));
}

#[test]
fn expiry_removes_terminal_tasks_whatever_their_status() {
    let mut m = machine(config());
    for n in 1..=3 {
        m.create(at(0), id(n), CreateTask::new().ttl(50)).unwrap();
    }
    for (n, status) in [(1, TaskStatus::Completed), (2, TaskStatus::Failed)] {
        m.store_result(at(1), id(n), None, status, result(json!(n as u64)), None)
            .unwrap();
    }
    m.cancel(at(1), id(3), None, None).unwrap();
    assert!(!m.handle_timeout(at(50), usize::MAX));
    assert_eq!(m.len(), 0);
}

#[test]
fn expiry_policy_fail_marks_a_running_task_failed_then_removes_it_after_the_grace() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Fail {
            grace: Duration::from_millis(500),
        },
        ..config()
    });
    m.create(at(0), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    let token = m.cancel_token(at(0), id(1), None).unwrap();
    m.handle_timeout(at(1_000), usize::MAX);
    let failed = m.get(at(1_000), id(1), None).unwrap();
    assert_eq!(failed.status, TaskStatus::Failed);
    assert!(failed.status_message.unwrap().contains("expired"));
    assert!(token.is_cancelled(), "the worker is told to stop");
    assert_eq!(
        m.get_result(at(1_000), id(1), None),
        Err(StoreError::NoResult {
            status: TaskStatus::Failed,
            expired: true
        })
    );
    assert!(m.get(at(1_499), id(1), None).is_ok());
    assert_eq!(m.get(at(1_500), id(1), None), Err(StoreError::NotFound));
}

#[test]
fn expiry_policy_fail_applies_on_read_even_before_the_timer_runs() {
    let mut m = machine(config());
    m.create(at(0), id(1), CreateTask::new().ttl(10)).unwrap();
    assert_eq!(
        m.get(at(10), id(1), None).unwrap().status,
        TaskStatus::Failed
    );
}

#[test]
fn expiry_policy_remove_drops_a_running_task_at_its_deadline() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    m.create(at(0), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    let token = m.cancel_token(at(0), id(1), None).unwrap();
    assert!(m.get(at(999), id(1), None).is_ok());
    m.handle_timeout(at(1_000), usize::MAX);
    assert_eq!(m.len(), 0);
    assert!(token.is_cancelled());
}

#[test]
fn a_status_message_keeps_whatever_status_the_task_has() {
    let mut m = machine(config());
    create_in(&mut m, 0, 1, "s");
    let s = Some(session("s"));
    m.set_input_requests(at(1), id(1), s.as_ref(), requests(&["q"]))
        .unwrap();
    let task = m
        .set_status_message(at(2), id(1), s.as_ref(), Some("asked".into()))
        .unwrap();
    assert_eq!(task.status, TaskStatus::InputRequired);
    assert_eq!(task.status_message.as_deref(), Some("asked"));
    assert_eq!(
        m.get_detail(at(2), id(1), s.as_ref())
            .unwrap()
            .input_requests
            .len(),
        1
    );
    let cleared = m
        .set_status_message(at(3), id(1), s.as_ref(), None)
        .unwrap();
    assert_eq!(
        (cleared.status, cleared.status_message),
        (TaskStatus::InputRequired, None)
    );
    // Sessions are strict, and a finished task's message is final.
    assert_eq!(
        m.set_status_message(at(4), id(1), None, Some("x".into())),
        Err(StoreError::NotFound)
    );
    m.cancel(at(5), id(1), s.as_ref(), None).unwrap();
    assert!(matches!(
        m.set_status_message(at(6), id(1), s.as_ref(), Some("late".into())),
        Err(StoreError::InvalidTransition { .. })
    ));
}

#[test]
fn expiry_wakes_every_waiter() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
    m.set_input_requests(at(0), id(1), None, requests(&["q"]))
        .unwrap();
    m.wait_terminal(at(0), id(1), None, None, 1);
    m.wait_terminal(at(0), id(1), None, None, 2);
    m.wait_input(at(0), id(1), None, "q", None, 3);
    assert!(wakes(&mut m).is_empty());
    m.handle_timeout(at(100), usize::MAX);
    let mut woken = wakes(&mut m);
    woken.sort_by_key(|(token, _)| *token);
    assert_eq!(
        woken,
        vec![
            (1, WakeOutcome::Terminal(Err(StoreError::NotFound))),
            (2, WakeOutcome::Terminal(Err(StoreError::NotFound))),
            (3, WakeOutcome::Input(Err(StoreError::NotFound))),
        ]
    );
    assert_eq!(m.stats().waiters, 0, "nobody is left parked");
}

#[test]
fn expiry_under_fail_policy_wakes_terminal_waiters_with_the_failed_task() {
    let mut m = machine(config());
    m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
    m.wait_terminal(at(0), id(1), None, None, 1);
    m.handle_timeout(at(100), usize::MAX);
    match wakes(&mut m).as_slice() {
        [(1, WakeOutcome::Terminal(Ok(task)))] => assert_eq!(task.status, TaskStatus::Failed),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn handle_timeout_reclaims_untouched_tasks_in_bounded_batches() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    for n in 0..10 {
        m.create(at(0), id(n), CreateTask::new().ttl(100)).unwrap();
    }
    assert!(m.poll_timeout().is_some_and(|t| t <= Millis(100)));
    assert!(!m.handle_timeout(at(99), usize::MAX));
    assert_eq!(m.len(), 10);
    assert!(
        m.handle_timeout(at(100), 4),
        "more work is due after one batch"
    );
    assert_eq!(m.len(), 6);
    while m.handle_timeout(at(100), 4) {}
    assert_eq!(m.len(), 0);
    assert_eq!(m.poll_timeout(), None);
}

#[test]
fn repeated_handle_timeout_calls_are_harmless() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    for _ in 0..3 {
        assert!(!m.handle_timeout(at(10), usize::MAX));
    }
    assert_eq!(
        m.get(at(10), id(1), None).unwrap().status,
        TaskStatus::Working
    );
}

#[test]
fn tasks_with_different_ttls_fire_their_cancel_tokens_independently() {
    let mut m = machine(config());
    m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
    m.create(at(0), id(2), CreateTask::new().ttl(200)).unwrap();
    let short = m.cancel_token(at(0), id(1), None).unwrap();
    let long = m.cancel_token(at(0), id(2), None).unwrap();
    m.handle_timeout(at(100), usize::MAX);
    assert!(
        short.is_cancelled(),
        "the 100 ms task's worker is told to stop"
    );
    assert!(!long.is_cancelled(), "the 200 ms task still runs");
    m.handle_timeout(at(200), usize::MAX);
    assert!(short.is_cancelled());
    assert!(
        long.is_cancelled(),
        "the 200 ms task's worker is told at 200"
    );
}

#[test]
fn a_one_ms_default_ttl_is_accepted_echoed_and_expires_after_one_ms() {
    let mut m = machine(StoreConfig {
        default_ttl: Some(Duration::from_millis(1)),
        ..config()
    });
    let task = m.create(at(0), id(1), CreateTask::new()).unwrap();
    assert_eq!(task.ttl, Some(1));
    assert_eq!(
        m.get(at(0), id(1), None).unwrap().status,
        TaskStatus::Working
    );
    assert_eq!(
        m.get(at(1), id(1), None).unwrap().status,
        TaskStatus::Failed,
        "the default policy fails it at its deadline"
    );
}

#[test]
fn a_task_failed_by_expiry_is_gettable_and_listed_during_its_grace() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Fail {
            grace: Duration::from_millis(500),
        },
        ..config()
    });
    m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
    create(&mut m, 0, 2);
    m.handle_timeout(at(100), usize::MAX);
    assert_eq!(
        m.get(at(300), id(1), None).unwrap().status,
        TaskStatus::Failed
    );
    let page = m.list(at(300), None, None).unwrap();
    let listed: Vec<_> = page.tasks.iter().map(|t| (t.task_id, t.status)).collect();
    assert_eq!(
        listed,
        vec![(id(1), TaskStatus::Failed), (id(2), TaskStatus::Working)]
    );
}

/// 100 years in ms: the built-in ceiling on every TTL.
const CEILING_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

#[test]
fn a_requested_ttl_beyond_100_years_is_cut_to_that_ceiling_without_max_ttl() {
    assert_eq!(
        Some(StoreConfig::MAX_DURATION),
        Duration::from_millis(CEILING_MS).into()
    );
    for requested in [CEILING_MS + 1, 1 << 53, u64::MAX - 1, u64::MAX] {
        let mut m = machine(config());
        let task = m
            .create(at(5), id(1), CreateTask::new().ttl(requested))
            .unwrap();
        assert_eq!(task.ttl, Some(CEILING_MS), "requested {requested}");
        // On the wire a JavaScript client reads it exactly (below 2^53).
        let wire = serde_json::to_value(&task).unwrap();
        assert_eq!(wire["ttl"].as_f64(), Some(CEILING_MS as f64));
        // It counts from creation, like any TTL: gone exactly at 5 + 100 years.
        let deadline = 5 + CEILING_MS;
        assert_eq!(m.poll_timeout(), Some(Millis(deadline)));
        assert!(!m.handle_timeout(at(deadline - 1), usize::MAX));
        assert_eq!(
            m.get(at(deadline - 1), id(1), None).unwrap().status,
            TaskStatus::Working
        );
        assert!(!m.handle_timeout(at(deadline), usize::MAX));
        assert_eq!(
            m.get(at(deadline), id(1), None).unwrap().status,
            TaskStatus::Failed
        );
    }
    // Up to the ceiling a request is kept as it is; a max_ttl still caps below it, and
    // no TTL still means unlimited.
    let mut m = machine(config());
    let task = m
        .create(at(0), id(1), CreateTask::new().ttl(CEILING_MS))
        .unwrap();
    assert_eq!(task.ttl, Some(CEILING_MS));
    assert_eq!(create_task_ttl(&mut m, 2, None), None);
    let mut m = machine(StoreConfig {
        max_ttl: secs(60),
        ..config()
    });
    assert_eq!(create_task_ttl(&mut m, 1, Some(u64::MAX)), Some(60_000));
}

fn create_task_ttl(m: &mut M, n: u128, ttl: Option<u64>) -> Option<u64> {
    let mut req = CreateTask::new();
    req.ttl = ttl;
    m.create(at(0), id(n), req).unwrap().ttl
}

#[test]
fn deadline_arithmetic_at_the_end_of_the_clocks_range_never_overflows() {
    let mut m = machine(config());
    m.create(at(5), id(1), CreateTask::new().ttl(u64::MAX))
        .unwrap();
    let far = u64::MAX / 2;
    let far = Now {
        mono: Millis(far),
        wall: Timestamp(far),
    };
    // Past the ceiling the task is failed, then (a grace later) gone; at the very end of
    // the clock's range expiry runs without overflowing either.
    assert!(!m.handle_timeout(far, usize::MAX));
    assert_eq!(m.get(far, id(1), None), Err(StoreError::NotFound));
    let end = Now {
        mono: Millis(u64::MAX),
        wall: Timestamp(u64::MAX),
    };
    let task = m
        .create(end, id(2), CreateTask::new().ttl(u64::MAX))
        .unwrap();
    assert_eq!(task.ttl, Some(CEILING_MS));
    // Its deadline saturates at the end of the range, where it is now.
    assert!(!m.handle_timeout(end, usize::MAX));
    assert_eq!(m.get(end, id(2), None), Err(StoreError::NotFound));
}

#[test]
fn a_recovered_ttl_beyond_100_years_is_cut_to_the_ceiling_and_still_counts_from_creation() {
    use crate::store::record::RecoveryPolicy;
    // A journal written before the ceiling existed may hold any u64.
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let mut record = m.records().pop().unwrap();
    record.ttl = Some(u64::MAX);
    let mut m: M = StoreMachine::restore(
        config(),
        0x5eed,
        2,
        [record],
        at(1_000),
        RecoveryPolicy::Keep,
    )
    .unwrap();
    assert_eq!(m.get(at(1_000), id(1), None).unwrap().ttl, Some(CEILING_MS));
    assert_eq!(m.take_changes().len(), 1, "the capped TTL is journaled");
    // Created at 0 on the wall clock; restored at 1 s: 100 years less 1 s left.
    assert_eq!(m.poll_timeout(), Some(Millis(CEILING_MS)));
}

#[test]
fn handle_timeout_times_out_waits_in_bounded_batches_too() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    for token in 0..3 {
        m.wait_terminal(at(0), id(1), None, Some(Millis(100)), token);
    }
    assert!(
        m.handle_timeout(at(100), 2),
        "one more wait is due after a batch of two"
    );
    assert_eq!(wakes(&mut m).len(), 2);
    assert!(!m.handle_timeout(at(100), 2));
    assert_eq!(wakes(&mut m).len(), 1);
    assert_eq!(m.stats().waiters, 0);
}

#[test]
fn no_change_lands_on_a_task_past_its_deadline_even_before_the_timer_runs() {
    for expiry in [ExpiryPolicy::Remove, ExpiryPolicy::default()] {
        let mut m = machine(StoreConfig { expiry, ..config() });
        for n in 1..=2 {
            m.create(at(0), id(n), CreateTask::new().ttl(100)).unwrap();
        }
        let stored = m.store_result(
            at(100),
            id(1),
            None,
            TaskStatus::Completed,
            result(json!(1)),
            None,
        );
        let asked = m.set_input_requests(at(100), id(2), None, requests(&["a"]));
        for (n, refused) in [(1, stored), (2, asked)] {
            match (expiry, refused) {
                (ExpiryPolicy::Remove, Err(StoreError::NotFound)) => {}
                (ExpiryPolicy::Fail { .. }, Err(StoreError::AlreadyTerminal(task)))
                    if task.status == TaskStatus::Failed => {}
                (_, other) => panic!("{expiry:?}, task {n}: {other:?}"),
            }
        }
    }
}

#[test]
fn tasks_lingering_after_expiry_stay_uncounted_as_their_graces_end_one_by_one() {
    let mut m = machine(StoreConfig {
        max_tasks_per_session: Some(2),
        expiry: ExpiryPolicy::Fail {
            grace: Duration::from_millis(500),
        },
        ..config()
    });
    m.create(at(0), id(1), CreateTask::new().ttl(100).session("s"))
        .unwrap();
    m.create(at(0), id(2), CreateTask::new().ttl(200).session("s"))
        .unwrap();
    m.handle_timeout(at(200), usize::MAX); // both failed, lingering
    m.handle_timeout(at(600), usize::MAX); // task 1's grace is over; task 2 lingers to 700
    assert_eq!(m.len(), 1);
    // Task 2 still does not count: two new tasks fit in the session, a third does not.
    create_in(&mut m, 600, 3, "s");
    create_in(&mut m, 600, 4, "s");
    assert!(matches!(
        m.create(at(600), id(5), CreateTask::new().session("s")),
        Err(StoreError::LimitExceeded {
            scope: LimitScope::Session,
            limit: 2
        })
    ));
}

// ----- get ------------------------------------------------------------------------------

#[test]
fn unknown_id_is_not_found() {
    let mut m = machine(config());
    assert_eq!(m.get(at(0), id(42), None), Err(StoreError::NotFound));
    assert_eq!(m.get_result(at(0), id(42), None), Err(StoreError::NotFound));
    assert_eq!(
        m.cancel(at(0), id(42), None, None),
        Err(StoreError::NotFound)
    );
}

#[test]
fn returned_tasks_are_copies_that_cannot_change_the_store() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let mut copy = m.get(at(0), id(1), None).unwrap();
    copy.status = TaskStatus::Completed;
    copy.status_message = Some("tampered".into());
    assert_eq!(
        m.get(at(0), id(1), None).unwrap().status,
        TaskStatus::Working
    );
}

// ----- lifecycle ------------------------------------------------------------------------

#[test]
fn live_transitions_are_allowed() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    for status in [
        TaskStatus::InputRequired,
        TaskStatus::Working,
        TaskStatus::Working,
    ] {
        assert_eq!(
            m.update_status(at(1), id(1), None, status, None)
                .unwrap()
                .status,
            status
        );
    }
    for (n, terminal) in [
        (2, TaskStatus::Completed),
        (3, TaskStatus::Failed),
        (4, TaskStatus::Cancelled),
    ] {
        create(&mut m, 0, n);
        m.update_status(at(1), id(n), None, TaskStatus::InputRequired, None)
            .unwrap();
        assert_eq!(
            m.update_status(at(2), id(n), None, terminal, None)
                .unwrap()
                .status,
            terminal
        );
    }
}

#[test]
fn leaving_a_terminal_status_is_rejected() {
    let terminal = [
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];
    let all = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];
    for from in terminal {
        for to in all {
            let mut m = machine(config());
            create(&mut m, 0, 1);
            m.update_status(at(1), id(1), None, from, None).unwrap();
            assert_eq!(
                m.update_status(at(2), id(1), None, to, Some("again".into())),
                Err(StoreError::InvalidTransition { from, to })
            );
            let task = m.get(at(3), id(1), None).unwrap();
            assert_eq!((task.status, task.last_updated_at), (from, at(1).wall));
        }
    }
}

#[test]
fn update_changes_status_message_and_advances_last_updated_at() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let task = m
        .update_status(
            at(10),
            id(1),
            None,
            TaskStatus::Working,
            Some("half way".into()),
        )
        .unwrap();
    assert_eq!(task.status_message.as_deref(), Some("half way"));
    assert_eq!(task.last_updated_at, at(10).wall);
    assert_eq!(task.created_at, at(0).wall);
}

#[test]
fn updating_a_missing_task_is_not_found() {
    let mut m = machine(config());
    assert_eq!(
        m.update_status(at(0), id(9), None, TaskStatus::Working, None),
        Err(StoreError::NotFound)
    );
}

#[test]
fn resuming_while_input_requests_are_pending_is_refused() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    let err = m
        .update_status(at(2), id(1), None, TaskStatus::Working, None)
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err:?}");
}

// ----- results --------------------------------------------------------------------------

#[test]
fn stored_result_sets_the_status_and_is_readable() {
    for status in [TaskStatus::Completed, TaskStatus::Failed] {
        let mut m = machine(config());
        create(&mut m, 0, 1);
        let task = m
            .store_result(at(5), id(1), None, status, result(json!({"v": 1})), None)
            .unwrap();
        assert_eq!(task.status, status);
        let stored = m.get_result(at(6), id(1), None).unwrap();
        assert_eq!(stored.task.status, status);
        assert_eq!(stored.outcome, result(json!({"v": 1})));
    }
}

#[test]
fn error_outcome_is_kept_verbatim() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let error = json!({"code": -32000, "message": "boom"});
    m.store_result(
        at(1),
        id(1),
        None,
        TaskStatus::Failed,
        Outcome::error(error.clone()),
        None,
    )
    .unwrap();
    assert_eq!(
        m.get_result(at(1), id(1), None).unwrap().outcome,
        Outcome::error(error)
    );
}

#[test]
fn storing_a_result_with_a_non_terminal_status_is_rejected() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    for status in [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Cancelled,
    ] {
        let err = m
            .store_result(at(1), id(1), None, status, result(json!(1)), None)
            .unwrap_err();
        assert!(matches!(err, StoreError::InvalidArgument(_)), "{err:?}");
    }
    assert_eq!(
        m.get(at(1), id(1), None).unwrap().status,
        TaskStatus::Working
    );
}

#[test]
fn storing_a_result_from_input_required_is_allowed() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    let task = m
        .store_result(
            at(2),
            id(1),
            None,
            TaskStatus::Completed,
            result(json!(1)),
            None,
        )
        .unwrap();
    assert_eq!(task.status, TaskStatus::Completed);
    assert!(m
        .get_detail(at(2), id(1), None)
        .unwrap()
        .input_requests
        .is_empty());
}

#[test]
fn first_result_wins() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.store_result(
        at(1),
        id(1),
        None,
        TaskStatus::Completed,
        result(json!("first")),
        None,
    )
    .unwrap();
    let err = m
        .store_result(
            at(2),
            id(1),
            None,
            TaskStatus::Failed,
            result(json!("second")),
            None,
        )
        .unwrap_err();
    match err {
        StoreError::AlreadyTerminal(task) => assert_eq!(task.status, TaskStatus::Completed),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        m.get_result(at(3), id(1), None).unwrap().outcome,
        result(json!("first"))
    );
}

#[test]
fn late_completion_never_overwrites_a_cancel() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.cancel(at(1), id(1), None, None).unwrap();
    for status in [TaskStatus::Completed, TaskStatus::Failed] {
        let err = m
            .store_result(at(2), id(1), None, status, result(json!("late")), None)
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyTerminal(_)));
    }
    assert_eq!(
        m.get(at(3), id(1), None).unwrap().status,
        TaskStatus::Cancelled
    );
    assert_eq!(
        m.get_result(at(3), id(1), None),
        Err(StoreError::NoResult {
            status: TaskStatus::Cancelled,
            expired: false
        })
    );
}

#[test]
fn get_result_of_a_running_task_reports_no_result() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    assert_eq!(
        m.get_result(at(1), id(1), None),
        Err(StoreError::NoResult {
            status: TaskStatus::Working,
            expired: false
        })
    );
}

#[test]
fn get_result_can_be_read_again_with_the_same_outcome() {
    // Not read-once (unlike rust-sdk#638): a retried tasks/result gets the same answer.
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.store_result(
        at(1),
        id(1),
        None,
        TaskStatus::Completed,
        result(json!({"v": 1})),
        None,
    )
    .unwrap();
    let first = m.get_result(at(2), id(1), None).unwrap();
    let second = m.get_result(at(3), id(1), None).unwrap();
    assert_eq!(first.outcome, result(json!({"v": 1})));
    assert_eq!(second, first);
}

#[test]
fn store_result_on_a_missing_task_is_not_found() {
    let mut m = machine(config());
    assert_eq!(
        m.store_result(
            at(0),
            id(1),
            None,
            TaskStatus::Completed,
            result(json!(1)),
            None
        ),
        Err(StoreError::NotFound)
    );
}

// ----- cancellation ---------------------------------------------------------------------

#[test]
fn cancel_moves_working_and_input_required_tasks_to_cancelled() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    create(&mut m, 0, 2);
    m.set_input_requests(at(1), id(2), None, requests(&["a"]))
        .unwrap();
    for n in [1, 2] {
        let outcome = m.cancel(at(2), id(n), None, Some("stop".into())).unwrap();
        assert!(outcome.cancelled);
        assert_eq!(outcome.task.status, TaskStatus::Cancelled);
        assert_eq!(outcome.task.status_message.as_deref(), Some("stop"));
        assert_eq!(
            m.get(at(3), id(n), None).unwrap().status,
            TaskStatus::Cancelled
        );
    }
}

#[test]
fn cancel_is_idempotent_and_leaves_terminal_tasks_alone() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let first = m.cancel(at(1), id(1), None, None).unwrap();
    let second = m.cancel(at(2), id(1), None, None).unwrap();
    assert!(!second.cancelled);
    assert_eq!(second.task, first.task, "a second cancel changes nothing");
    create(&mut m, 0, 2);
    m.store_result(
        at(1),
        id(2),
        None,
        TaskStatus::Completed,
        result(json!(1)),
        None,
    )
    .unwrap();
    let outcome = m.cancel(at(2), id(2), None, None).unwrap();
    assert!(!outcome.cancelled);
    assert_eq!(outcome.task.status, TaskStatus::Completed);
}

#[test]
fn cancelling_one_task_does_not_touch_others() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    create(&mut m, 0, 2);
    m.cancel(at(1), id(1), None, None).unwrap();
    assert_eq!(
        m.get(at(1), id(2), None).unwrap().status,
        TaskStatus::Working
    );
}

#[test]
fn cancel_clears_pending_input_requests() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a", "b"]))
        .unwrap();
    m.cancel(at(2), id(1), None, None).unwrap();
    let detail = m.get_detail(at(3), id(1), None).unwrap();
    assert_eq!(detail.task.status, TaskStatus::Cancelled);
    assert!(
        detail.input_requests.is_empty(),
        "{:?}",
        detail.input_requests
    );
}

#[test]
fn cancel_fires_the_token_and_wakes_waiters() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let token = m.cancel_token(at(0), id(1), None).unwrap();
    m.wait_terminal(at(0), id(1), None, None, 7);
    assert!(!token.is_cancelled());
    m.cancel(at(1), id(1), None, None).unwrap();
    assert!(token.is_cancelled());
    match wakes(&mut m).as_slice() {
        [(7, WakeOutcome::Terminal(Ok(task)))] => assert_eq!(task.status, TaskStatus::Cancelled),
        other => panic!("unexpected {other:?}"),
    }
    let late_token = m.cancel_token(at(2), id(1), None).unwrap();
    assert!(
        late_token.is_cancelled(),
        "a token taken after the cancel has fired too"
    );
}

#[test]
fn completion_does_not_fire_the_cancel_token() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let token = m.cancel_token(at(0), id(1), None).unwrap();
    m.store_result(
        at(1),
        id(1),
        None,
        TaskStatus::Completed,
        result(json!(1)),
        None,
    )
    .unwrap();
    assert!(!token.is_cancelled());
}

// ----- listing and pagination -----------------------------------------------------------

#[test]
fn empty_store_lists_nothing_and_no_cursor() {
    let mut m = machine(config());
    let page = m.list(at(0), None, None).unwrap();
    assert!(page.tasks.is_empty());
    assert_eq!(page.next_cursor, None);
}

#[test]
fn fewer_tasks_than_a_page_come_back_at_once_without_cursor() {
    let mut m = machine(config());
    for n in 0..5 {
        create(&mut m, n as u64, n);
    }
    let page = m.list(at(10), None, None).unwrap();
    assert_eq!(page.tasks.len(), 5);
    assert_eq!(page.next_cursor, None);
}

#[test]
fn list_150_tasks_at_page_100_gives_100_then_50_and_no_cursor_after() {
    let mut m = machine(config());
    for n in 0..150 {
        create(&mut m, 0, n);
    }
    let pages = walk(&mut m, 0, None);
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![100, 50]
    );
    let all: Vec<TaskId> = pages.concat();
    assert_eq!(
        all,
        (0..150).map(id).collect::<Vec<_>>(),
        "creation order, no duplicates"
    );
}

#[test]
fn custom_page_size_pages_25_tasks_as_10_10_5() {
    let mut m = machine(StoreConfig {
        page_size: 10,
        ..config()
    });
    for n in 0..25 {
        create(&mut m, 0, n);
    }
    let sizes: Vec<usize> = walk(&mut m, 0, None).iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![10, 10, 5]);
}

#[test]
fn paging_is_complete_and_disjoint_with_identical_timestamps() {
    let mut m = machine(StoreConfig {
        page_size: 5,
        ..config()
    });
    // Ids in descending order: creation order, not id order, drives the listing.
    for n in (0..20).rev() {
        create(&mut m, 7, n);
    }
    let all: Vec<TaskId> = walk(&mut m, 7, None).concat();
    assert_eq!(all, (0..20).rev().map(id).collect::<Vec<_>>());
}

#[test]
fn tasks_created_during_a_walk_appear_in_later_pages_only() {
    let mut m = machine(StoreConfig {
        page_size: 2,
        ..config()
    });
    for n in 0..3 {
        create(&mut m, 0, n);
    }
    let first = m.list(at(0), None, None).unwrap();
    assert_eq!(
        first.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(),
        vec![id(0), id(1)]
    );
    create(&mut m, 0, 3);
    let second = m.list(at(0), None, first.next_cursor.as_deref()).unwrap();
    assert_eq!(
        second.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(),
        vec![id(2), id(3)]
    );
    assert_eq!(second.next_cursor, None);
}

#[test]
fn tasks_expiring_during_a_walk_leave_an_empty_last_page_without_error() {
    let mut m = machine(StoreConfig {
        page_size: 2,
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    create(&mut m, 0, 0);
    create(&mut m, 0, 1);
    for n in 2..4 {
        m.create(at(0), id(n), CreateTask::new().ttl(100)).unwrap();
    }
    let first = m.list(at(0), None, None).unwrap();
    assert!(first.next_cursor.is_some());
    let second = m.list(at(100), None, first.next_cursor.as_deref()).unwrap();
    assert!(second.tasks.is_empty());
    assert_eq!(second.next_cursor, None);
}

#[test]
fn cursor_keeps_working_after_its_own_task_expired() {
    let mut m = machine(StoreConfig {
        page_size: 1,
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    m.create(at(0), id(0), CreateTask::new().ttl(100)).unwrap();
    create(&mut m, 0, 1);
    let first = m.list(at(0), None, None).unwrap();
    assert_eq!(first.tasks[0].task_id, id(0));
    m.handle_timeout(at(100), usize::MAX);
    let second = m.list(at(100), None, first.next_cursor.as_deref()).unwrap();
    assert_eq!(second.tasks[0].task_id, id(1));
}

#[test]
fn list_never_shows_an_expired_task() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    m.create(at(0), id(0), CreateTask::new().ttl(100)).unwrap();
    create(&mut m, 0, 1);
    let page = m.list(at(100), None, None).unwrap();
    assert_eq!(
        page.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(),
        vec![id(1)]
    );
}

#[test]
fn garbage_cursors_are_rejected() {
    let mut m = machine(StoreConfig {
        page_size: 1,
        ..config()
    });
    create(&mut m, 0, 0);
    create(&mut m, 0, 1);
    let good = m.list(at(0), None, None).unwrap().next_cursor.unwrap();
    let mut tampered = good.clone().into_bytes();
    tampered[31] = if tampered[31] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).unwrap();
    let shifted = format!("{:016x}{}", 0u64, &good[16..]);
    // The same position and tag spelled otherwise: a cursor has one spelling.
    let padded = format!("{}0{}", &good[..16], &good[16..]);
    let signed = format!("+{}", &good[1..]);
    assert!(good.starts_with('0'), "{good}");
    for cursor in [
        "",
        "garbage",
        "zz",
        &"f".repeat(32),
        &"g".repeat(32),
        "é",
        &tampered,
        &shifted,
        &padded,
        &signed,
    ] {
        assert_eq!(
            m.list(at(0), None, Some(cursor)),
            Err(StoreError::InvalidCursor),
            "{cursor:?}"
        );
    }
    assert!(m.list(at(0), None, Some(&good)).is_ok());
}

#[test]
fn a_cursor_from_another_session_is_rejected() {
    let mut m = machine(StoreConfig {
        page_size: 1,
        ..config()
    });
    create_in(&mut m, 0, 0, "a");
    create_in(&mut m, 0, 1, "a");
    create_in(&mut m, 0, 2, "b");
    create_in(&mut m, 0, 3, "b");
    let cursor_a = m
        .list(at(0), Some(&session("a")), None)
        .unwrap()
        .next_cursor
        .unwrap();
    assert_eq!(
        m.list(at(0), Some(&session("b")), Some(&cursor_a)),
        Err(StoreError::InvalidCursor)
    );
    assert_eq!(
        m.list(at(0), None, Some(&cursor_a)),
        Err(StoreError::InvalidCursor)
    );
    assert!(m.list(at(0), Some(&session("a")), Some(&cursor_a)).is_ok());
}

// ----- a clock that steps back -------------------------------------------------------------

/// `now` with the wall clock `back_ms` behind where `Now::at` puts it.
fn wall_back(mono: u64, back_ms: u64) -> Now {
    Now {
        mono: Millis(mono),
        wall: Timestamp(at(mono).wall.0 - back_ms),
    }
}

#[test]
fn a_clock_stepping_back_loses_no_deadline_and_expires_nothing_early() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    let a = m
        .create(at(10_000), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    assert!(!m.handle_timeout(at(10_000), usize::MAX));
    // The clock steps back 10 s: the machine's time holds at 10 s until it catches up.
    let b = m
        .create(at(0), id(2), CreateTask::new().ttl(1_000))
        .unwrap();
    assert_eq!(b.created_at, a.created_at);
    assert!(!m.handle_timeout(at(0), usize::MAX));
    assert_eq!(m.poll_timeout(), Some(Millis(11_000)));
    assert!(!m.handle_timeout(at(10_999), usize::MAX));
    assert_eq!(m.len(), 2, "neither is past its TTL");
    // Both deadlines fire, the second's too: it was not taken for one already past.
    assert!(!m.handle_timeout(at(11_000), usize::MAX));
    assert_eq!((m.len(), m.poll_timeout()), (0, None));
}

#[test]
fn a_wall_clock_stepping_back_never_moves_a_tasks_times_back() {
    let mut m = machine(config());
    let created = m
        .create(at(0), id(1), CreateTask::new())
        .unwrap()
        .created_at;
    // An NTP step a minute back while the monotonic clock runs on: every change is
    // stamped no earlier than what the task already shows.
    type Step = fn(&mut M, Now) -> Task;
    let steps: [Step; 4] = [
        |m, now| {
            m.update_status(now, id(1), None, TaskStatus::Working, Some("x".into()))
                .unwrap()
        },
        |m, now| {
            m.set_input_requests(now, id(1), None, requests(&["k"]))
                .unwrap()
        },
        |m, now| {
            m.resolve_input(now, id(1), None, responses(&[("k", json!(1))]))
                .unwrap()
        },
        |m, now| {
            m.store_result(
                now,
                id(1),
                None,
                TaskStatus::Completed,
                result(json!(1)),
                None,
            )
            .unwrap()
        },
    ];
    for (n, step) in steps.iter().enumerate() {
        let task = step(&mut m, wall_back(n as u64 + 1, 60_000));
        assert_eq!(task.created_at, created);
        assert!(task.last_updated_at >= created, "step {n}: {task:?}");
    }
    // A task created after the step is not dated before the first either.
    let later = m
        .create(wall_back(9, 60_000), id(2), CreateTask::new())
        .unwrap();
    assert!(later.created_at >= created, "{later:?}");
}

#[test]
fn a_read_with_an_earlier_now_never_shows_a_task_past_its_ttl() {
    let mut m = machine(config());
    m.create(at(0), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    // The machine sees 1 s (task 1 is due, not settled yet); a reader's clock lags.
    create(&mut m, 1_000, 2);
    assert_eq!(m.peek(at(500), id(1), None), None, "only get may answer");
    assert!(m.peek_detail(at(500), id(1), None).is_none());
    assert!(m.peek_result(at(500), id(1), None).is_none());
    assert_eq!(
        m.get(at(500), id(1), None).unwrap().status,
        TaskStatus::Failed,
        "settled by the machine's time"
    );
}

#[test]
fn a_recovered_task_dated_ahead_of_the_clock_keeps_its_times_in_order() {
    use crate::store::record::RecoveryPolicy;
    // The clock was set back an hour across a restart.
    let mut m = machine(config());
    create(&mut m, 3_600_000, 1);
    let record = m.records().pop().unwrap();
    let mut m: M =
        StoreMachine::restore(config(), 0x5eed, 2, [record], at(0), RecoveryPolicy::Keep).unwrap();
    let task = m
        .update_status(at(1), id(1), None, TaskStatus::Working, Some("x".into()))
        .unwrap();
    assert_eq!(task.created_at, at(3_600_000).wall);
    assert!(task.last_updated_at >= task.created_at, "{task:?}");
}

/// A clock set back an hour across a restart: the recovered tasks are dated an hour ahead
/// of it. Their time left counts from no earlier than their own last change, so none
/// outlives its TTL (or its grace) by the step.
#[test]
fn a_recovered_task_dated_ahead_of_the_clock_lives_no_longer_than_its_ttl() {
    use crate::store::record::RecoveryPolicy;
    const HOUR: u64 = 3_600_000;
    let cfg = StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    };
    let mut m = machine(cfg.clone());
    m.create(at(HOUR), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    // Task 2 was last changed 4 s into its 10 s TTL: 6 s are left, at most.
    m.create(at(HOUR), id(2), CreateTask::new().ttl(10_000))
        .unwrap();
    m.update_status(at(HOUR + 4_000), id(2), None, TaskStatus::Working, None)
        .unwrap();
    let records = m.records();
    let mut m: M =
        StoreMachine::restore(cfg, 0x5eed, 3, records, at(0), RecoveryPolicy::Keep).unwrap();
    assert_eq!(m.poll_timeout(), Some(Millis(1_000)));
    assert!(!m.handle_timeout(at(1_000), usize::MAX));
    assert_eq!(
        m.len(),
        1,
        "task 1 is gone a TTL after the restart, not an hour later"
    );
    assert!(!m.handle_timeout(at(6_000), usize::MAX));
    assert_eq!(
        (m.len(), m.poll_timeout()),
        (0, None),
        "task 2 had 6 s left"
    );
}

#[test]
fn a_recovered_task_failed_by_expiry_ahead_of_the_clock_keeps_no_more_than_its_grace() {
    use crate::store::record::RecoveryPolicy;
    const HOUR: u64 = 3_600_000;
    let cfg = StoreConfig {
        expiry: ExpiryPolicy::Fail {
            grace: Duration::from_secs(30),
        },
        ..config()
    };
    let mut m = machine(cfg.clone());
    m.create(at(HOUR), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    assert!(!m.handle_timeout(at(HOUR + 1_000), usize::MAX));
    let record = m.records().pop().unwrap();
    assert!(record.expired);
    let mut m: M =
        StoreMachine::restore(cfg, 0x5eed, 2, [record], at(0), RecoveryPolicy::Keep).unwrap();
    assert!(!m.handle_timeout(at(30_000), usize::MAX));
    assert_eq!(
        m.len(),
        0,
        "its grace ran out 30 s after the restart at the latest"
    );
}

// ----- sessions ---------------------------------------------------------------------------

#[test]
fn another_session_sees_a_task_as_not_found_everywhere() {
    let mut m = machine(config());
    create_in(&mut m, 0, 1, "a");
    let b = session("b");
    let b = Some(&b);
    assert_eq!(m.get(at(1), id(1), b), Err(StoreError::NotFound));
    assert_eq!(m.get_detail(at(1), id(1), b), Err(StoreError::NotFound));
    assert_eq!(m.get_result(at(1), id(1), b), Err(StoreError::NotFound));
    assert_eq!(
        m.update_status(at(1), id(1), b, TaskStatus::Failed, None),
        Err(StoreError::NotFound)
    );
    assert_eq!(
        m.store_result(
            at(1),
            id(1),
            b,
            TaskStatus::Completed,
            result(json!(1)),
            None
        ),
        Err(StoreError::NotFound)
    );
    assert_eq!(m.cancel(at(1), id(1), b, None), Err(StoreError::NotFound));
    assert_eq!(
        m.set_input_requests(at(1), id(1), b, requests(&["k"])),
        Err(StoreError::NotFound)
    );
    assert_eq!(
        m.resolve_input(at(1), id(1), b, responses(&[("k", json!(1))])),
        Err(StoreError::NotFound)
    );
    assert!(matches!(
        m.cancel_token(at(1), id(1), b),
        Err(StoreError::NotFound)
    ));
    m.wait_terminal(at(1), id(1), b, None, 1);
    m.wait_input(at(1), id(1), b, "k", None, 2);
    assert_eq!(
        wakes(&mut m),
        vec![
            (1, WakeOutcome::Terminal(Err(StoreError::NotFound))),
            (2, WakeOutcome::Input(Err(StoreError::NotFound))),
        ]
    );
    assert_eq!(
        m.get(at(1), id(1), Some(&session("a"))).unwrap().status,
        TaskStatus::Working
    );
}

#[test]
fn sessions_fail_closed_in_both_directions() {
    let mut m = machine(config());
    create_in(&mut m, 0, 1, "a");
    create(&mut m, 0, 2);
    assert_eq!(
        m.get(at(1), id(1), None),
        Err(StoreError::NotFound),
        "sessionless caller"
    );
    assert_eq!(
        m.get(at(1), id(2), Some(&session("a"))),
        Err(StoreError::NotFound),
        "sessioned caller"
    );
}

#[test]
fn list_shows_only_the_callers_own_tasks() {
    let mut m = machine(StoreConfig {
        page_size: 2,
        ..config()
    });
    for n in 0..5 {
        create_in(&mut m, 0, n, if n % 2 == 0 { "a" } else { "b" });
    }
    create(&mut m, 0, 9);
    assert_eq!(
        walk(&mut m, 0, Some(&session("a"))).concat(),
        vec![id(0), id(2), id(4)]
    );
    assert_eq!(
        walk(&mut m, 0, Some(&session("b"))).concat(),
        vec![id(1), id(3)]
    );
    assert_eq!(walk(&mut m, 0, None).concat(), vec![id(9)]);
    assert_eq!(
        walk(&mut m, 0, Some(&session("c"))).concat(),
        Vec::<TaskId>::new()
    );
}

// ----- limits -----------------------------------------------------------------------------

#[test]
fn global_limit_refuses_task_n_plus_one() {
    let mut m = machine(StoreConfig {
        max_tasks: Some(3),
        ..config()
    });
    for n in 0..3 {
        create(&mut m, 0, n);
    }
    let err = m.create(at(0), id(3), CreateTask::new()).unwrap_err();
    assert_eq!(
        err,
        StoreError::LimitExceeded {
            scope: LimitScope::Global,
            limit: 3
        }
    );
    assert_eq!(err.to_string(), "maximum number of tasks (3) reached");
    assert_eq!(m.len(), 3);
}

#[test]
fn per_session_limit_refuses_and_other_sessions_are_unaffected() {
    let mut m = machine(StoreConfig {
        max_tasks_per_session: Some(2),
        ..config()
    });
    create_in(&mut m, 0, 0, "a");
    create_in(&mut m, 0, 1, "a");
    let err = m
        .create(at(0), id(2), CreateTask::new().session("a"))
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::LimitExceeded {
            scope: LimitScope::Session,
            limit: 2
        }
    );
    create_in(&mut m, 0, 3, "b");
    create_in(&mut m, 0, 4, "b");
}

#[test]
fn per_session_limit_does_not_apply_to_sessionless_tasks() {
    let mut m = machine(StoreConfig {
        max_tasks_per_session: Some(1),
        ..config()
    });
    for n in 0..5 {
        create(&mut m, 0, n);
    }
    assert_eq!(m.len(), 5);
}

#[test]
fn global_and_per_session_limits_combine() {
    let mut m = machine(StoreConfig {
        max_tasks: Some(3),
        max_tasks_per_session: Some(2),
        ..config()
    });
    create_in(&mut m, 0, 0, "a");
    create_in(&mut m, 0, 1, "a");
    assert!(matches!(
        m.create(at(0), id(2), CreateTask::new().session("a")),
        Err(StoreError::LimitExceeded {
            scope: LimitScope::Session,
            ..
        })
    ));
    create_in(&mut m, 0, 3, "b");
    assert!(matches!(
        m.create(at(0), id(4), CreateTask::new().session("c")),
        Err(StoreError::LimitExceeded {
            scope: LimitScope::Global,
            ..
        })
    ));
}

#[test]
fn expired_tasks_do_not_count_toward_limits() {
    for policy in [ExpiryPolicy::Remove, ExpiryPolicy::default()] {
        let mut m = machine(StoreConfig {
            max_tasks: Some(2),
            max_tasks_per_session: Some(1),
            expiry: policy,
            ..config()
        });
        m.create(at(0), id(0), CreateTask::new().ttl(100).session("a"))
            .unwrap();
        m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
        assert!(m
            .create(at(99), id(2), CreateTask::new().session("a"))
            .is_err());
        // At the deadline both slots free up, without anyone touching the old tasks first.
        m.create(at(100), id(2), CreateTask::new().session("a"))
            .unwrap();
        m.create(at(100), id(3), CreateTask::new()).unwrap();
        assert!(
            m.create(at(100), id(4), CreateTask::new()).is_err(),
            "{policy:?}"
        );
    }
}

#[test]
fn a_full_store_reclaims_only_what_a_create_needs() {
    for policy in [ExpiryPolicy::Remove, ExpiryPolicy::default()] {
        let mut m = machine(StoreConfig {
            max_tasks: Some(10_000),
            expiry: policy,
            ..config()
        });
        for n in 0..10_000 {
            m.create(at(0), id(n), CreateTask::new().ttl(100)).unwrap();
        }
        assert!(m.create(at(99), id(10_000), CreateTask::new()).is_err());
        m.create(at(100), id(10_000), CreateTask::new()).unwrap();
        // The backlog is left to the owner's bounded batches...
        assert!(m.len() > 9_000, "{policy:?}: {} left", m.len());
        assert_eq!(m.poll_timeout(), Some(Millis(100)), "{policy:?}");
        // ...and none of it shows as live meanwhile.
        let seen = m.get(at(100), id(1), None).map(|task| task.status);
        match policy {
            ExpiryPolicy::Remove => assert_eq!(seen, Err(StoreError::NotFound)),
            _ => assert_eq!(seen, Ok(TaskStatus::Failed)),
        }
        while m.handle_timeout(at(100), 64) {}
        let left = match policy {
            ExpiryPolicy::Remove => 1,
            _ => 10_001, // failed by expiry, lingering for the grace period
        };
        assert_eq!(m.len(), left, "{policy:?}");
    }
}

// ----- input requests ---------------------------------------------------------------------

#[test]
fn setting_input_requests_moves_to_input_required_and_merges_keys() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let task = m
        .set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    assert_eq!(task.status, TaskStatus::InputRequired);
    m.set_input_requests(at(2), id(1), None, requests(&["b"]))
        .unwrap();
    let detail = m.get_detail(at(2), id(1), None).unwrap();
    assert_eq!(
        detail.input_requests.keys().collect::<Vec<_>>(),
        vec!["a", "b"]
    );
}

#[test]
fn resolving_removes_matched_keys_and_resumes_when_none_are_left() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a", "b"]))
        .unwrap();
    let task = m
        .resolve_input(at(2), id(1), None, responses(&[("a", json!(1))]))
        .unwrap();
    assert_eq!(task.status, TaskStatus::InputRequired);
    let detail = m.get_detail(at(2), id(1), None).unwrap();
    assert_eq!(detail.input_requests.keys().collect::<Vec<_>>(), vec!["b"]);
    let task = m
        .resolve_input(at(3), id(1), None, responses(&[("b", json!(2))]))
        .unwrap();
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.last_updated_at, at(3).wall);
}

#[test]
fn unknown_and_already_answered_keys_are_ignored() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a", "b"]))
        .unwrap();
    m.resolve_input(at(2), id(1), None, responses(&[("a", json!(1))]))
        .unwrap();
    let before = m.get(at(2), id(1), None).unwrap();
    let after = m
        .resolve_input(
            at(3),
            id(1),
            None,
            responses(&[("a", json!(9)), ("never", json!(0))]),
        )
        .unwrap();
    assert_eq!(after, before, "nothing changed, not even lastUpdatedAt");
    m.wait_input(at(3), id(1), None, "a", None, 1);
    assert_eq!(
        wakes(&mut m),
        vec![(1, WakeOutcome::Input(Ok(json!(1))))],
        "first answer kept"
    );
}

#[test]
fn input_request_keys_cannot_be_reused_over_the_task_life() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    m.resolve_input(at(2), id(1), None, responses(&[("a", json!(1))]))
        .unwrap();
    assert_eq!(
        m.set_input_requests(at(3), id(1), None, requests(&["b", "a"])),
        Err(StoreError::InputKeyReused { key: "a".into() })
    );
    let detail = m.get_detail(at(3), id(1), None).unwrap();
    assert!(
        detail.input_requests.is_empty(),
        "nothing of a refused set is applied"
    );
    assert_eq!(detail.task.status, TaskStatus::Working);
}

#[test]
fn a_task_may_use_ten_thousand_input_keys_and_a_call_past_that_is_refused_whole() {
    let keys = |range: std::ops::Range<usize>| -> BTreeMap<String, Value> {
        range.map(|k| (format!("k{k}"), json!({}))).collect()
    };
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, keys(0..9_999))
        .unwrap();
    // Two keys would make 10,001: neither is applied.
    let err = m
        .set_input_requests(at(2), id(1), None, keys(9_999..10_001))
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err:?}");
    let detail = m.get_detail(at(2), id(1), None).unwrap();
    assert_eq!(detail.input_requests.len(), 9_999);
    assert!(!detail.input_requests.contains_key("k9999"));
    assert_eq!(detail.task.last_updated_at, at(1).wall);
    // The 10,000th key is accepted, the 10,001st refused.
    m.set_input_requests(at(3), id(1), None, keys(9_999..10_000))
        .unwrap();
    let err = m
        .set_input_requests(at(4), id(1), None, keys(10_000..10_001))
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err:?}");
    let detail = m.get_detail(at(4), id(1), None).unwrap();
    assert_eq!(detail.input_requests.len(), 10_000);
    assert!(!detail.input_requests.contains_key("k10000"));
}

#[test]
fn resolving_an_unknown_input_key_emits_no_event() {
    let mut m = machine(config());
    create(&mut m, 0, 1); // no input request ever
    create(&mut m, 0, 2);
    m.set_input_requests(at(1), id(2), None, requests(&["a"]))
        .unwrap();
    m.set_events_enabled(true);
    for n in [1, 2] {
        m.resolve_input(at(2), id(n), None, responses(&[("nope", json!(0))]))
            .unwrap();
    }
    assert_eq!(m.poll_event(), None);
}

#[test]
fn terminal_tasks_are_never_revived_by_input_requests() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    m.cancel(at(2), id(1), None, None).unwrap();
    m.set_events_enabled(true);
    assert!(matches!(
        m.resolve_input(at(3), id(1), None, responses(&[("a", json!(1))])),
        Err(StoreError::AlreadyTerminal(_))
    ));
    assert!(matches!(
        m.set_input_requests(at(3), id(1), None, requests(&["b"])),
        Err(StoreError::AlreadyTerminal(_))
    ));
    assert_eq!(
        m.get(at(3), id(1), None).unwrap().status,
        TaskStatus::Cancelled
    );
    assert_eq!(m.poll_event(), None, "no event for a refused change");
}

#[test]
fn an_input_waiter_is_woken_by_the_response() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a", "b"]))
        .unwrap();
    m.wait_input(at(1), id(1), None, "a", None, 1);
    m.wait_input(at(1), id(1), None, "b", None, 2);
    assert!(wakes(&mut m).is_empty());
    m.resolve_input(at(2), id(1), None, responses(&[("b", json!("yes"))]))
        .unwrap();
    assert_eq!(
        wakes(&mut m),
        vec![(2, WakeOutcome::Input(Ok(json!("yes"))))]
    );
}

#[test]
fn an_answer_that_arrives_before_the_wait_is_not_lost() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    m.resolve_input(at(2), id(1), None, responses(&[("a", json!(42))]))
        .unwrap();
    m.wait_input(at(3), id(1), None, "a", None, 1);
    assert_eq!(wakes(&mut m), vec![(1, WakeOutcome::Input(Ok(json!(42))))]);
    m.wait_input(at(3), id(1), None, "a", None, 2);
    assert_eq!(
        wakes(&mut m),
        vec![(
            2,
            WakeOutcome::Input(Err(StoreError::UnknownInputKey { key: "a".into() }))
        )],
        "an answer is handed over once"
    );
}

#[test]
fn a_second_wait_on_a_key_already_awaited_is_refused_and_the_first_gets_the_answer() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    m.wait_input(at(1), id(1), None, "a", None, 1);
    m.wait_input(at(1), id(1), None, "a", Some(Millis(60_000)), 2);
    match wakes(&mut m).as_slice() {
        [(2, WakeOutcome::Input(Err(StoreError::InvalidArgument(why))))] => {
            assert!(why.contains("already has a caller waiting"), "{why}")
        }
        other => panic!("unexpected {other:?}"),
    }
    m.resolve_input(at(2), id(1), None, responses(&[("a", json!(42))]))
        .unwrap();
    assert_eq!(wakes(&mut m), vec![(1, WakeOutcome::Input(Ok(json!(42))))]);
    assert_eq!(
        m.stats().waiters,
        0,
        "nobody is left parked on an answered key"
    );
}

#[test]
fn input_waiters_are_woken_by_cancel() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    m.wait_input(at(1), id(1), None, "a", None, 1);
    m.cancel(at(2), id(1), None, None).unwrap();
    match wakes(&mut m).as_slice() {
        [(1, WakeOutcome::Input(Err(StoreError::AlreadyTerminal(task))))] => {
            assert_eq!(task.status, TaskStatus::Cancelled)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn input_waiters_are_woken_by_expiry() {
    let mut m = machine(config());
    m.create(at(0), id(1), CreateTask::new().ttl(50)).unwrap();
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    m.wait_input(at(1), id(1), None, "a", None, 1);
    m.handle_timeout(at(50), usize::MAX);
    match wakes(&mut m).as_slice() {
        [(1, WakeOutcome::Input(Err(StoreError::AlreadyTerminal(task))))] => {
            assert_eq!(task.status, TaskStatus::Failed)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn waiting_on_a_key_never_issued_is_an_error() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.wait_input(at(1), id(1), None, "nope", None, 1);
    assert_eq!(
        wakes(&mut m),
        vec![(
            1,
            WakeOutcome::Input(Err(StoreError::UnknownInputKey { key: "nope".into() }))
        )]
    );
}

// ----- waiting ----------------------------------------------------------------------------

#[test]
fn waiting_on_a_terminal_task_answers_at_once() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.store_result(
        at(1),
        id(1),
        None,
        TaskStatus::Completed,
        result(json!(1)),
        None,
    )
    .unwrap();
    m.wait_terminal(at(2), id(1), None, None, 1);
    match wakes(&mut m).as_slice() {
        [(1, WakeOutcome::Terminal(Ok(task)))] => assert_eq!(task.status, TaskStatus::Completed),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn waiting_on_an_unknown_task_is_not_found() {
    let mut m = machine(config());
    m.wait_terminal(at(0), id(42), None, None, 1);
    m.wait_input(at(0), id(42), None, "a", None, 2);
    assert_eq!(
        wakes(&mut m),
        vec![
            (1, WakeOutcome::Terminal(Err(StoreError::NotFound))),
            (2, WakeOutcome::Input(Err(StoreError::NotFound))),
        ]
    );
    assert_eq!(m.stats().waiters, 0, "nobody is parked on a missing task");
}

#[test]
fn every_waiter_on_a_task_is_woken() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    for token in 0..5 {
        m.wait_terminal(at(0), id(1), None, None, token);
    }
    m.store_result(
        at(1),
        id(1),
        None,
        TaskStatus::Completed,
        result(json!(1)),
        None,
    )
    .unwrap();
    let mut woken: Vec<u32> = wakes(&mut m).into_iter().map(|(t, _)| t).collect();
    woken.sort();
    assert_eq!(woken, vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_wait_times_out_exactly_at_its_deadline() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.wait_terminal(at(0), id(1), None, Some(Millis(500)), 1);
    m.handle_timeout(at(499), usize::MAX);
    assert!(wakes(&mut m).is_empty());
    m.handle_timeout(at(500), usize::MAX);
    assert_eq!(
        wakes(&mut m),
        vec![(1, WakeOutcome::Terminal(Err(StoreError::Timeout)))]
    );
    m.cancel(at(600), id(1), None, None).unwrap();
    assert!(
        wakes(&mut m).is_empty(),
        "a timed-out waiter is not woken twice"
    );
}

#[test]
fn the_earliest_wait_deadline_is_the_next_timeout() {
    let mut m = machine(StoreConfig {
        default_ttl: None,
        ..config()
    });
    create(&mut m, 0, 1);
    assert_eq!(m.poll_timeout(), None);
    m.wait_terminal(at(0), id(1), None, Some(Millis(700)), 1);
    m.wait_terminal(at(0), id(1), None, Some(Millis(500)), 2);
    assert_eq!(m.poll_timeout(), Some(Millis(500)));
    m.handle_timeout(at(500), usize::MAX);
    assert_eq!(m.poll_timeout(), Some(Millis(700)));
}

#[test]
fn a_late_timeout_call_gives_a_waiter_its_tasks_expiry_if_that_came_first() {
    for expiry in [ExpiryPolicy::default(), ExpiryPolicy::Remove] {
        let mut m = machine(StoreConfig { expiry, ..config() });
        m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
        m.wait_terminal(at(0), id(1), None, Some(Millis(150)), 1);
        // The owner runs late: both deadlines passed, the task's first.
        m.handle_timeout(at(200), usize::MAX);
        let woken = wakes(&mut m);
        match (&woken[..], expiry) {
            ([(1, WakeOutcome::Terminal(Ok(task)))], ExpiryPolicy::Fail { .. }) => {
                assert_eq!(task.status, TaskStatus::Failed)
            }
            ([(1, WakeOutcome::Terminal(Err(StoreError::NotFound)))], ExpiryPolicy::Remove) => {}
            _ => panic!("{expiry:?}: {woken:?}"),
        }
    }
}

#[test]
fn a_wait_whose_deadline_came_before_its_tasks_expiry_times_out_even_if_settled_late() {
    let mut m = machine(config());
    m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
    m.set_input_requests(at(0), id(1), None, requests(&["a"]))
        .unwrap();
    m.wait_terminal(at(0), id(1), None, Some(Millis(50)), 1);
    m.wait_input(at(0), id(1), None, "a", Some(Millis(60)), 2);
    m.wait_terminal(at(0), id(1), None, Some(Millis(150)), 3);
    // A read settles the expired task before the owner's timers run.
    assert_eq!(
        m.get(at(200), id(1), None).unwrap().status,
        TaskStatus::Failed
    );
    let mut woken = wakes(&mut m);
    woken.sort_by_key(|(token, _)| *token);
    assert!(
        matches!(
            &woken[..],
            [
                (1, WakeOutcome::Terminal(Err(StoreError::Timeout))),
                (2, WakeOutcome::Input(Err(StoreError::Timeout))),
                (3, WakeOutcome::Terminal(Ok(task))),
            ] if task.status == TaskStatus::Failed
        ),
        "{woken:?}"
    );
    assert_eq!(m.stats().waiters, 0);
}

#[test]
fn a_wait_due_with_its_tasks_expiry_gets_the_expiry_however_late_it_is_settled() {
    // On a tie the task's expiry comes first, whether the owner's timers or a read settle
    // the task.
    for settled_by_read in [false, true] {
        let mut m = machine(config());
        m.create(at(0), id(1), CreateTask::new().ttl(100)).unwrap();
        m.wait_terminal(at(0), id(1), None, Some(Millis(100)), 1);
        if settled_by_read {
            m.get(at(150), id(1), None).unwrap();
        } else {
            m.handle_timeout(at(150), usize::MAX);
        }
        let woken = wakes(&mut m);
        assert!(
            matches!(
                &woken[..],
                [(1, WakeOutcome::Terminal(Ok(task)))] if task.status == TaskStatus::Failed
            ),
            "settled by read: {settled_by_read}: {woken:?}"
        );
    }
}

#[test]
fn a_wait_whose_deadline_has_already_passed_times_out_at_once() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(0), id(1), None, requests(&["a"]))
        .unwrap();
    m.wait_terminal(at(100), id(1), None, Some(Millis(100)), 1);
    m.wait_input(at(100), id(1), None, "a", Some(Millis(50)), 2);
    assert_eq!(
        wakes(&mut m),
        vec![
            (1, WakeOutcome::Terminal(Err(StoreError::Timeout))),
            (2, WakeOutcome::Input(Err(StoreError::Timeout))),
        ]
    );
    assert_eq!(m.stats().waiters, 0, "nothing is parked");
}

#[test]
fn waiting_for_input_on_a_terminal_task_answers_already_terminal() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(0), id(1), None, requests(&["a"]))
        .unwrap();
    m.cancel(at(1), id(1), None, None).unwrap();
    m.wait_input(at(2), id(1), None, "a", None, 1);
    match wakes(&mut m).as_slice() {
        [(1, WakeOutcome::Input(Err(StoreError::AlreadyTerminal(task))))] => {
            assert_eq!(task.status, TaskStatus::Cancelled)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn answered_waits_leave_no_timer_behind() {
    // Waits answered long before their timeout used to keep a timer until it; at a high
    // wait rate memory grew with rate x timeout.
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    create(&mut m, 0, 1);
    create(&mut m, 0, 2);
    m.create(at(0), id(3), CreateTask::new().ttl(100)).unwrap();
    assert_eq!(m.stats().timers, 1, "task 3's deadline");
    let hour = Some(Millis(3_600_000));
    m.set_input_requests(at(1), id(1), None, requests(&["a", "b"]))
        .unwrap();
    m.wait_input(at(1), id(1), None, "a", hour, 1);
    m.wait_input(at(1), id(1), None, "b", hour, 2);
    m.wait_terminal(at(1), id(2), None, hour, 3);
    m.wait_terminal(at(1), id(3), None, hour, 4);
    assert_eq!(m.stats().timers, 5);
    m.resolve_input(at(2), id(1), None, responses(&[("a", json!(1))]))
        .unwrap();
    m.cancel(at(2), id(1), None, None).unwrap(); // ends the wait on "b"
    m.cancel(at(2), id(2), None, None).unwrap();
    m.handle_timeout(at(100), usize::MAX); // removes task 3
    assert_eq!(wakes(&mut m).len(), 4);
    assert_eq!(m.stats().timers, 0, "every answered wait dropped its timer");
    assert_eq!(m.poll_timeout(), None);
}

#[test]
fn too_many_waiters_on_one_task_are_refused() {
    let mut m = machine(StoreConfig {
        max_waiters_per_task: 2,
        ..config()
    });
    create(&mut m, 0, 1);
    for token in 0..3 {
        m.wait_terminal(at(0), id(1), None, None, token);
    }
    assert_eq!(
        wakes(&mut m),
        vec![(
            2,
            WakeOutcome::Terminal(Err(StoreError::LimitExceeded {
                scope: LimitScope::Waiters,
                limit: 2
            }))
        )]
    );
}

// ----- events -----------------------------------------------------------------------------

#[test]
fn no_events_are_built_until_enabled() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    assert_eq!(m.poll_event(), None);
}

#[test]
fn disabling_events_drops_the_ones_not_yet_polled() {
    let mut m = machine(config());
    m.set_events_enabled(true);
    create(&mut m, 0, 1);
    m.set_events_enabled(false);
    assert_eq!(m.poll_event(), None, "nobody is left to take them");
    m.set_events_enabled(true);
    create(&mut m, 0, 2);
    match m.poll_event() {
        Some(StoreEvent::Created { task, .. }) => assert_eq!(task.task_id, id(2)),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(m.poll_event(), None);
}

#[test]
fn events_report_creation_changes_and_expiry() {
    let mut m = machine(StoreConfig {
        expiry: ExpiryPolicy::Remove,
        ..config()
    });
    m.set_events_enabled(true);
    m.create(at(0), id(1), CreateTask::new().ttl(10).session("s"))
        .unwrap();
    m.update_status(
        at(1),
        id(1),
        Some(&session("s")),
        TaskStatus::InputRequired,
        None,
    )
    .unwrap();
    m.handle_timeout(at(10), usize::MAX);
    let events: Vec<StoreEvent> = std::iter::from_fn(|| m.poll_event()).collect();
    let statuses: Vec<_> = events
        .iter()
        .map(|e| match e {
            StoreEvent::Created { task, session } => {
                assert_eq!(session.as_ref().map(SessionId::as_str), Some("s"));
                format!("created {}", task.status)
            }
            StoreEvent::Status { task, session } => {
                assert_eq!(session.as_ref().map(SessionId::as_str), Some("s"));
                format!("status {}", task.status)
            }
            StoreEvent::Expired { task_id, .. } => {
                assert_eq!(*task_id, id(1));
                "expired".to_string()
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        statuses,
        vec!["created working", "status input_required", "expired"]
    );
}

#[test]
fn stats_count_parked_waiters_until_they_are_answered() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(0), id(1), None, requests(&["a"]))
        .unwrap();
    m.wait_terminal(at(0), id(1), None, Some(Millis(100)), 1);
    m.wait_terminal(at(0), id(1), None, None, 2);
    m.wait_input(at(0), id(1), None, "a", None, 3);
    assert_eq!(m.stats().waiters, 3);
    m.handle_timeout(at(100), usize::MAX);
    assert_eq!(m.stats().waiters, 2, "the timed-out waiter is gone");
    m.resolve_input(at(101), id(1), None, responses(&[("a", json!(1))]))
        .unwrap();
    assert_eq!(m.stats().waiters, 1);
    m.cancel(at(102), id(1), None, None).unwrap();
    assert_eq!(m.stats().waiters, 0);
    assert_eq!(wakes(&mut m).len(), 3);
}

// ----- reads that change nothing (served on callers' threads) ---------------------------

/// Every read at `now`, peeked and then done for real: a peek answers exactly when the task
/// is not past its deadline, and then answers what the real read does.
fn assert_peeks_agree(m: &mut M, now: u64, task: TaskId, s: Option<&SessionId>, due: bool) {
    let peeked = (
        m.peek(at(now), task, s),
        m.peek_detail(at(now), task, s),
        m.peek_result(at(now), task, s),
    );
    if due {
        assert_eq!(peeked.0, None, "a due task must be settled by the owner");
        assert!(peeked.1.is_none() && peeked.2.is_none());
        return;
    }
    assert_eq!(peeked.0, Some(m.get(at(now), task, s)));
    assert_eq!(peeked.1, Some(m.get_detail(at(now), task, s)));
    assert_eq!(peeked.2, Some(m.get_result(at(now), task, s)));
}

#[test]
fn peeks_answer_as_the_reads_do_while_nothing_is_due() {
    let mut m = machine(config());
    let a = create_in(&mut m, 0, 1, "alice");
    let alice = session("alice");
    // working: no result yet, foreign or missing session, unknown id
    assert_peeks_agree(&mut m, 5, a, Some(&alice), false);
    assert_peeks_agree(&mut m, 5, a, Some(&session("bob")), false);
    assert_peeks_agree(&mut m, 5, a, None, false);
    assert_peeks_agree(&mut m, 5, id(99), Some(&alice), false);
    // input required, then finished with a result
    m.set_input_requests(at(6), a, Some(&alice), requests(&["k"]))
        .unwrap();
    assert_peeks_agree(&mut m, 7, a, Some(&alice), false);
    m.store_result(
        at(8),
        a,
        Some(&alice),
        TaskStatus::Completed,
        result(json!({"ok": true})),
        None,
    )
    .unwrap();
    assert_peeks_agree(&mut m, 9, a, Some(&alice), false);
}

#[test]
fn peeks_leave_due_tasks_to_the_owner_under_both_expiry_policies() {
    for expiry in [
        ExpiryPolicy::Remove,
        ExpiryPolicy::Fail {
            grace: Duration::from_secs(30),
        },
    ] {
        let mut config = config();
        config.expiry = expiry;
        let mut m = machine(config);
        let task = m
            .create(at(0), id(1), CreateTask::new().ttl(1_000))
            .unwrap()
            .task_id;
        assert_peeks_agree(&mut m, 999, task, None, false);
        // Due: no peek may answer for it (not "working", not "not found")...
        assert_peeks_agree(&mut m, 1_000, task, None, true);
        assert_eq!(m.peek(at(1_000), task, Some(&session("x"))), None);
        // ...and once the owner has settled it, peeks answer again.
        let settled = m.get(at(1_000), task, None);
        match expiry {
            ExpiryPolicy::Remove => assert_eq!(settled, Err(StoreError::NotFound)),
            ExpiryPolicy::Fail { .. } => {
                assert_eq!(settled.unwrap().status, TaskStatus::Failed);
                assert_peeks_agree(&mut m, 1_001, task, None, false);
            }
        }
    }
}

#[test]
fn stopping_waits_answers_only_the_picked_ones_and_forgets_them() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.set_input_requests(at(0), id(1), None, requests(&["a"]))
        .unwrap();
    m.wait_terminal(at(0), id(1), None, Some(Millis(500)), 1);
    m.wait_terminal(at(0), id(1), None, None, 2);
    m.wait_input(at(0), id(1), None, "a", Some(Millis(500)), 3);
    m.wait_terminal(at(0), id(1), None, Some(Millis(500)), 4);
    let timers = m.stats().timers;

    m.stop_waits(id(1), |token| *token == 1 || *token == 3);
    let mut woken = wakes(&mut m);
    woken.sort_by_key(|(token, _)| *token);
    assert_eq!(
        woken,
        vec![
            (1, WakeOutcome::Terminal(Err(StoreError::Stopped))),
            (3, WakeOutcome::Input(Err(StoreError::Stopped))),
        ]
    );
    assert_eq!(m.stats().waiters, 2);
    assert_eq!(
        m.stats().timers,
        timers - 2,
        "a stopped wait's deadline goes too"
    );

    // The ones left are answered as usual, and the stopped ones never again.
    m.handle_timeout(at(500), usize::MAX);
    assert_eq!(
        wakes(&mut m),
        vec![(4, WakeOutcome::Terminal(Err(StoreError::Timeout)))]
    );
    m.cancel(at(600), id(1), None, None).unwrap();
    let woken = wakes(&mut m);
    assert!(
        matches!(&woken[..], [(2, WakeOutcome::Terminal(Ok(_)))]),
        "{woken:?}"
    );
    assert_eq!(m.stats().waiters, 0);
}

#[test]
fn stopping_waits_on_an_unknown_task_or_with_none_parked_changes_nothing() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    m.stop_waits(id(1), |_| true);
    m.stop_waits(id(42), |_| true);
    assert!(wakes(&mut m).is_empty());
    assert_eq!(m.stats().waiters, 0);
}

#[test]
fn a_json_rpc_error_is_stored_only_with_status_failed() {
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let error = Outcome::error(json!({"code": -32000, "message": "boom"}));
    assert!(matches!(
        m.store_result(
            at(1),
            id(1),
            None,
            TaskStatus::Completed,
            error.clone(),
            None
        ),
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(
        m.get(at(1), id(1), None).unwrap().status,
        TaskStatus::Working
    );
    let failed = m.store_result(at(1), id(1), None, TaskStatus::Failed, error, None);
    assert_eq!(failed.unwrap().status, TaskStatus::Failed);
}

#[test]
fn a_restored_record_marked_expired_but_running_is_not_counted_twice() {
    use crate::store::record::RecoveryPolicy;
    let cfg = StoreConfig {
        max_tasks: Some(5),
        expiry: ExpiryPolicy::Fail {
            grace: Duration::from_millis(100),
        },
        ..config()
    };
    // A damaged record: expired, yet still working.
    let mut m = machine(cfg.clone());
    create(&mut m, 0, 1);
    let mut record = m.records().pop().unwrap();
    record.expired = true;
    record.ttl = Some(1_000);
    let mut m: M =
        StoreMachine::restore(cfg, 0x5eed, 2, [record], at(0), RecoveryPolicy::Keep).unwrap();
    // It expires (counted once as lingering) and is reclaimed after its grace.
    while m.handle_timeout(at(5_000), usize::MAX) {}
    assert!(m.get(at(5_000), id(1), None).is_err());
    // The count went back to zero: a create fits under max_tasks.
    m.create(at(5_000), id(2), CreateTask::new()).unwrap();
}

#[test]
fn a_restore_that_leaves_no_sequence_number_for_the_next_task_is_refused() {
    use crate::store::record::RecoveryPolicy;
    let mut m = machine(config());
    create(&mut m, 0, 1);
    let mut record = m.records().pop().unwrap();
    record.seq = (1 << 63) - 1;
    let restored: Result<M, _> =
        StoreMachine::restore(config(), 0x5eed, 0, [record], at(0), RecoveryPolicy::Keep);
    assert!(
        matches!(restored, Err(StoreError::InvalidArgument(_))),
        "{:?}",
        restored.err()
    );
}

/// Cursor tags are a fixed function of the store's secret, the position and the session,
/// so cursors a client holds stay valid across a restart, whatever toolchain built the
/// store. Pinned here: a change to it is a change to every cursor in the field.
#[test]
fn cursor_tags_are_a_fixed_function() {
    let config = StoreConfig {
        page_size: 1,
        ..config()
    };
    let mut m = machine(config);
    let session = SessionId::from("s");
    for n in 0..2 {
        let req = CreateTask::new().session(session.clone());
        m.create(at(0), id(n), req).unwrap();
        m.create(at(0), id(10 + n), CreateTask::new()).unwrap();
    }
    let cursor = |m: &mut M, session: Option<&SessionId>| {
        m.list(at(0), session, None).unwrap().next_cursor.unwrap()
    };
    let pinned = (cursor(&mut m, Some(&session)), cursor(&mut m, None));
    let expected = (
        "00000000000000018f002eb9071055b3".to_string(),
        "0000000000000002e8a3daa9ecaf427a".to_string(),
    );
    assert_eq!(pinned, expected);
}

// ----- journaling and recovery ------------------------------------------------------------

#[test]
fn while_journaling_a_cancels_token_fires_only_once_poll_stop_hands_it_out() {
    let mut m = machine(config());
    m.set_journaling(true);
    create(&mut m, 0, 1);
    let token = m.cancel_token(at(0), id(1), None).unwrap();
    m.cancel(at(1), id(1), None, None).unwrap();
    assert!(
        !token.is_cancelled(),
        "the worker keeps running until the cancel is durable"
    );
    let stop = m.poll_stop().expect("the token to fire once synced");
    assert!(m.poll_stop().is_none());
    stop.cancel();
    assert!(token.is_cancelled(), "it is the task's own token");
}

#[test]
fn a_cursor_stays_valid_in_a_machine_restored_with_the_persisted_cursor_key() {
    use crate::store::record::RecoveryPolicy;
    let cfg = StoreConfig {
        page_size: 1,
        ..config()
    };
    let mut m: M = StoreMachine::new(cfg.clone(), 0xc0ffee).unwrap();
    create(&mut m, 0, 1);
    create(&mut m, 0, 2);
    let cursor = m.list(at(0), None, None).unwrap().next_cursor.unwrap();
    let (key, next_seq, records) = (m.cursor_key(), m.next_seq(), m.records());
    let mut m: M =
        StoreMachine::restore(cfg, key, next_seq, records, at(1), RecoveryPolicy::Keep).unwrap();
    let page = m.list(at(1), None, Some(&cursor)).unwrap();
    let listed: Vec<TaskId> = page.tasks.iter().map(|t| t.task_id).collect();
    assert_eq!(listed, vec![id(2)]);
}

#[test]
fn recovery_with_fail_running_fails_only_the_tasks_still_running() {
    use crate::store::record::RecoveryPolicy;
    let mut m = machine(config());
    create(&mut m, 0, 1);
    create(&mut m, 0, 2);
    create(&mut m, 0, 3);
    m.set_input_requests(at(1), id(2), None, requests(&["a"]))
        .unwrap();
    m.store_result(
        at(1),
        id(3),
        None,
        TaskStatus::Completed,
        result(json!("done")),
        None,
    )
    .unwrap();
    let records = m.records();
    let mut m: M = StoreMachine::restore(
        config(),
        0x5eed,
        4,
        records,
        at(10),
        RecoveryPolicy::FailRunning,
    )
    .unwrap();
    for n in [1, 2] {
        let task = m.get(at(10), id(n), None).unwrap();
        assert_eq!(task.status, TaskStatus::Failed, "task {n}");
        let message = task.status_message.unwrap_or_default();
        assert!(message.contains("restarted"), "task {n}: {message}");
    }
    let done = m.get_result(at(10), id(3), None).unwrap();
    assert_eq!(done.task.status, TaskStatus::Completed);
    assert_eq!(done.outcome, result(json!("done")));
    let changed: Vec<TaskId> = m.take_changes().into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        changed,
        vec![id(1), id(2)],
        "the journal learns of the failures"
    );
}

#[test]
fn input_requests_survive_a_restart_and_used_keys_stay_used() {
    use crate::store::record::RecoveryPolicy;
    let mut m = machine(config());
    // Task 1 is done with its only key: answered and collected, nothing left but the key.
    create(&mut m, 0, 1);
    m.set_input_requests(at(1), id(1), None, requests(&["a"]))
        .unwrap();
    m.resolve_input(at(2), id(1), None, responses(&[("a", json!(1))]))
        .unwrap();
    m.wait_input(at(3), id(1), None, "a", None, 1);
    assert_eq!(wakes(&mut m), vec![(1, WakeOutcome::Input(Ok(json!(1))))]);
    // Task 2 has one key pending and one answer its worker has not collected yet.
    create(&mut m, 0, 2);
    m.set_input_requests(at(1), id(2), None, requests(&["b", "c"]))
        .unwrap();
    m.resolve_input(at(2), id(2), None, responses(&[("c", json!(3))]))
        .unwrap();
    let records = m.records();
    let mut m: M =
        StoreMachine::restore(config(), 0x5eed, 3, records, at(10), RecoveryPolicy::Keep).unwrap();

    assert_eq!(
        m.set_input_requests(at(10), id(1), None, requests(&["a"])),
        Err(StoreError::InputKeyReused { key: "a".into() })
    );
    let detail = m.get_detail(at(10), id(2), None).unwrap();
    assert_eq!(detail.task.status, TaskStatus::InputRequired);
    assert_eq!(detail.input_requests.keys().collect::<Vec<_>>(), ["b"]);
    m.wait_input(at(10), id(2), None, "c", None, 2);
    assert_eq!(wakes(&mut m), vec![(2, WakeOutcome::Input(Ok(json!(3))))]);
    assert_eq!(
        m.set_input_requests(at(10), id(2), None, requests(&["c"])),
        Err(StoreError::InputKeyReused { key: "c".into() })
    );
}

#[test]
fn a_recovered_failed_task_lingers_for_a_grace_only_if_it_failed_by_expiry() {
    use crate::store::record::RecoveryPolicy;
    let cfg = StoreConfig {
        expiry: ExpiryPolicy::Fail {
            grace: Duration::from_secs(10),
        },
        ..config()
    };
    let mut m = machine(cfg.clone());
    // Task 1 fails by expiry at 1 s: it lingers until 11 s.
    m.create(at(0), id(1), CreateTask::new().ttl(1_000))
        .unwrap();
    // Task 2 fails on its own at 0.1 s: it goes at the end of its TTL, 2 s.
    m.create(at(0), id(2), CreateTask::new().ttl(2_000))
        .unwrap();
    m.store_result(
        at(100),
        id(2),
        None,
        TaskStatus::Failed,
        result(json!("no")),
        None,
    )
    .unwrap();
    m.handle_timeout(at(1_000), usize::MAX);
    let records = m.records();
    let mut m: M =
        StoreMachine::restore(cfg, 0x5eed, 3, records, at(1_500), RecoveryPolicy::Keep).unwrap();
    assert_eq!(
        m.get(at(1_500), id(1), None).unwrap().status,
        TaskStatus::Failed
    );
    m.handle_timeout(at(2_000), usize::MAX);
    assert_eq!(m.get(at(2_000), id(2), None), Err(StoreError::NotFound));
    m.handle_timeout(at(10_999), usize::MAX);
    assert!(m.get(at(10_999), id(1), None).is_ok());
    m.handle_timeout(at(11_000), usize::MAX);
    assert!(m.is_empty());
}
