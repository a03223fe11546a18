//! The journal: state survives a restart exactly; TTLs follow the wall clock across the
//! downtime; running tasks follow the recovery policy; torn tails are dropped and damage is
//! reported by file and offset; compaction keeps everything; and a child process killed with
//! SIGKILL at random moments never loses an acknowledged operation.

#[path = "../../examples/journal_crash/harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_task_store::{
    CreateTask, ExpiryPolicy, JournalConfig, ManualClock, Outcome, RecoveryPolicy, Store,
    StoreError, TaskId, TaskStatus,
};
use serde_json::json;

fn journal(dir: &Path, recovery: RecoveryPolicy) -> JournalConfig {
    let mut config = JournalConfig::new(dir);
    config.recovery = recovery;
    config
}

fn open(dir: &Path) -> Store {
    Store::builder()
        .journal(journal(dir, RecoveryPolicy::Keep))
        .build()
        .unwrap()
}

fn log_file(dir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    logs.pop().unwrap()
}

/// A status message set in one step is journaled as any update is: after a restart the
/// task has it, and the status it kept.
#[test]
fn a_status_message_set_in_one_step_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = open(dir.path());
        let id = store.create(CreateTask::new()).unwrap().task_id;
        store
            .update_status(id, None, TaskStatus::InputRequired, None)
            .unwrap();
        store
            .set_status_message(id, None, Some("asked".into()))
            .unwrap();
        id
    };
    let task = open(dir.path()).get(id, None).unwrap();
    assert_eq!(
        (task.status, task.status_message.as_deref()),
        (TaskStatus::InputRequired, Some("asked"))
    );
}

#[test]
fn a_journal_path_that_is_not_a_directory_is_refused_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tasks");
    fs::write(&file, b"not a journal").unwrap();
    for (path, expected) in [
        (
            file.clone(),
            format!("{} is not a directory", file.display()),
        ),
        (PathBuf::new(), "no directory given".to_string()),
    ] {
        match Store::builder().journal(JournalConfig::new(&path)).build() {
            Err(StoreError::Journal(why)) => assert_eq!(why, expected),
            other => panic!("{path:?}: {other:?}"),
        }
    }
    assert_eq!(fs::read(&file).unwrap(), b"not a journal");
}

#[test]
fn every_kind_of_change_survives_a_restart_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (done, cancelled, asking, plain);
    let before = {
        let store = open(dir.path());
        done = store
            .create(
                CreateTask::new()
                    .session("s")
                    .ttl(600_000)
                    .origin(json!({"m": "tools/call"})),
            )
            .unwrap()
            .task_id;
        store
            .store_result(
                done,
                Some(&"s".into()),
                TaskStatus::Completed,
                Outcome::result(json!({"ok": 1})),
                Some("fine".into()),
            )
            .unwrap();
        cancelled = store.create(CreateTask::new()).unwrap().task_id;
        store.cancel(cancelled, None, Some("stop".into())).unwrap();
        asking = store.create(CreateTask::new()).unwrap().task_id;
        let requests: BTreeMap<String, serde_json::Value> = [
            ("a".to_string(), json!({"method": "elicitation/create"})),
            ("b".to_string(), json!({})),
        ]
        .into();
        store.set_input_requests(asking, None, requests).unwrap();
        store
            .resolve_input(asking, None, [("a".to_string(), json!("answer"))].into())
            .unwrap();
        plain = store.create(CreateTask::new()).unwrap().task_id;
        [
            (done, Some("s")),
            (cancelled, None),
            (asking, None),
            (plain, None),
        ]
        .map(|(id, s)| store.get_detail(id, s.map(Into::into).as_ref()).unwrap())
    };
    let store = open(dir.path());
    for detail in &before {
        let after = store
            .get_detail(detail.task.task_id, detail.session.as_ref())
            .unwrap();
        assert_eq!(&after, detail);
    }
    // The answer that was not collected yet is still there, and keys stay used.
    assert_eq!(
        store
            .wait_input(asking, None, "a", Some(Duration::ZERO))
            .unwrap(),
        json!("answer")
    );
    let reuse: BTreeMap<String, serde_json::Value> = [("a".to_string(), json!({}))].into();
    assert_eq!(
        store.set_input_requests(asking, None, reuse),
        Err(StoreError::InputKeyReused { key: "a".into() })
    );
}

#[test]
fn a_task_is_readable_right_after_create_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = open(dir.path());
        let id = store.create(CreateTask::new()).unwrap().task_id;
        assert!(store.get(id, None).is_ok());
        id
    };
    assert!(open(dir.path()).get(id, None).is_ok());
}

#[test]
fn listing_order_and_cursors_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cursor = {
        let store = Store::builder()
            .page_size(2)
            .journal(journal(dir.path(), RecoveryPolicy::Keep))
            .build()
            .unwrap();
        for _ in 0..3 {
            store.create(CreateTask::new()).unwrap();
        }
        store.list(None, None).unwrap().next_cursor.unwrap()
    };
    let store = Store::builder()
        .page_size(2)
        .journal(journal(dir.path(), RecoveryPolicy::Keep))
        .build()
        .unwrap();
    let newer = store.create(CreateTask::new()).unwrap().task_id;
    let page = store.list(None, Some(&cursor)).unwrap();
    assert_eq!(page.tasks.len(), 2, "the third old task, then the new one");
    assert_eq!(page.tasks[1].task_id, newer);
}

#[test]
fn running_tasks_fail_at_start_by_default_or_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    let kept = Store::builder()
        .journal(journal(dir.path(), RecoveryPolicy::Keep))
        .build()
        .unwrap();
    assert_eq!(kept.get(id, None).unwrap().status, TaskStatus::Working);
    drop(kept);
    let failing = Store::builder()
        .journal(JournalConfig::new(dir.path()))
        .build()
        .unwrap();
    let task = failing.get(id, None).unwrap();
    assert_eq!(task.status, TaskStatus::Failed);
    assert!(task.status_message.unwrap().contains("restarted"));
    drop(failing);
    // The failure itself was journaled.
    assert_eq!(
        open(dir.path()).get(id, None).unwrap().status,
        TaskStatus::Failed
    );
}

#[test]
fn a_ttl_that_passed_while_the_process_was_down_expires_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let builder = || {
        Store::builder()
            .clock(clock.clone())
            .expiry(ExpiryPolicy::Remove)
            .journal(journal(dir.path(), RecoveryPolicy::Keep))
    };
    let (short, long) = {
        let store = builder().build().unwrap();
        (
            store.create(CreateTask::new().ttl(1_000)).unwrap().task_id,
            store.create(CreateTask::new().ttl(60_000)).unwrap().task_id,
        )
    };
    clock.advance(Duration::from_millis(5_000)); // the downtime, on the wall clock
    let store = builder().build().unwrap();
    assert_eq!(store.get(short, None), Err(StoreError::NotFound));
    assert!(store.get(long, None).is_ok());
    clock.advance(Duration::from_millis(54_999));
    store.sync().unwrap();
    assert!(
        store.get(long, None).is_ok(),
        "the rest of its TTL is honoured, not restarted"
    );
    clock.advance(Duration::from_millis(1));
    store.sync().unwrap();
    assert_eq!(store.get(long, None), Err(StoreError::NotFound));
}

#[test]
fn a_running_task_whose_ttl_ran_out_while_down_expires_with_its_grace_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let builder = |recovery| {
        Store::builder()
            .clock(clock.clone())
            .journal(journal(dir.path(), recovery))
    };
    let id = builder(RecoveryPolicy::Keep)
        .build()
        .unwrap()
        .create(CreateTask::new().ttl(1_000))
        .unwrap()
        .task_id;
    clock.advance(Duration::from_secs(5)); // down past its TTL, within the 30 s grace
                                           // The default policies: running tasks fail at start, expired ones fail with a grace.
    let store = builder(RecoveryPolicy::FailRunning).build().unwrap();
    let task = store.get(id, None).unwrap();
    assert_eq!(task.status, TaskStatus::Failed);
    assert!(
        task.status_message
            .as_deref()
            .unwrap_or("")
            .contains("expired"),
        "{task:?}"
    );
}

#[test]
fn a_task_failed_by_expiry_keeps_its_whole_grace_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let grace = Duration::from_secs(30);
    let builder = || {
        Store::builder()
            .clock(clock.clone())
            .expiry(ExpiryPolicy::Fail { grace })
            .journal(journal(dir.path(), RecoveryPolicy::Keep))
    };
    let id = {
        let store = builder().build().unwrap();
        store.create(CreateTask::new().ttl(1_000)).unwrap().task_id
    };
    let expired = |store: &Store| {
        let task = store.get(id, None).unwrap();
        assert_eq!(task.status, TaskStatus::Failed);
        assert!(task.status_message.unwrap().contains("expired"));
    };
    clock.advance(Duration::from_secs(60)); // down well past its TTL
    expired(&builder().build().unwrap()); // expired at this start: its grace begins now
    clock.advance(Duration::from_millis(10));
    let store = builder().build().unwrap();
    expired(&store); // the grace counts from the expiry, not from createdAt + ttl
    clock.advance(grace - Duration::from_millis(11));
    store.sync().unwrap();
    expired(&store);
    clock.advance(Duration::from_millis(1));
    store.sync().unwrap();
    assert_eq!(store.get(id, None), Err(StoreError::NotFound));
    drop(store);
    assert_eq!(
        builder().build().unwrap().get(id, None),
        Err(StoreError::NotFound)
    );
}

#[test]
fn max_ttl_caps_recovered_tasks_from_their_creation() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let builder = || {
        Store::builder()
            .clock(clock.clone())
            .journal(journal(dir.path(), RecoveryPolicy::Keep))
    };
    let id = {
        let store = builder().build().unwrap();
        store.create(CreateTask::new()).unwrap().task_id // no TTL asked, none configured
    };
    clock.advance(Duration::from_millis(500));
    let capped = || builder().max_ttl(Duration::from_secs(1));
    let store = capped().build().unwrap();
    let task = store.get(id, None).unwrap();
    assert_eq!((task.status, task.ttl), (TaskStatus::Working, Some(1_000)));
    clock.advance(Duration::from_millis(499));
    store.sync().unwrap();
    assert_eq!(store.get(id, None).unwrap().status, TaskStatus::Working);
    clock.advance(Duration::from_millis(1)); // 1 s after creation
    store.sync().unwrap();
    let task = store.get(id, None).unwrap();
    assert_eq!(task.status, TaskStatus::Failed);
    assert!(task.status_message.unwrap().contains("expired"));
    drop(store);
    // The capped TTL was journaled: it holds without the cap too.
    assert_eq!(
        builder().build().unwrap().get(id, None).unwrap().ttl,
        Some(1_000)
    );
}

#[test]
fn a_task_that_asked_for_a_u64_max_ttl_survives_a_restart_with_the_ttl_it_got() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let store = open(dir.path());
        let task = store.create(CreateTask::new().ttl(u64::MAX)).unwrap();
        // Cut to the built-in ceiling of 100 years.
        assert_eq!(task.ttl, Some(3_153_600_000_000));
        task
    };
    let store = open(dir.path());
    store.sync().unwrap();
    let after = store.get(before.task_id, None).unwrap();
    assert_eq!(after, before, "same task, same ttl, still working");
    assert_eq!(store.stats().unwrap().tasks, 1);
}

#[test]
fn a_torn_tail_is_dropped_and_the_journal_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    let log = log_file(dir.path());
    let good_len = fs::metadata(&log).unwrap().len();
    let mut bytes = fs::read(&log).unwrap();
    bytes.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3, 4, b'{']); // a frame cut short
    fs::write(&log, &bytes).unwrap();
    {
        let store = open(dir.path());
        assert!(store.get(id, None).is_ok());
        assert_eq!(
            fs::metadata(&log).unwrap().len(),
            good_len,
            "the torn bytes are cut off"
        );
        store.create(CreateTask::new()).unwrap();
    }
    assert_eq!(open(dir.path()).list(None, None).unwrap().tasks.len(), 2);
}

#[test]
fn a_zero_filled_tail_is_dropped_and_every_acknowledged_change_kept() {
    // A crash after the file's size reached the disk but before its data did leaves zeros
    // at the end of the log, where an unacknowledged batch was being written.
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    let log = log_file(dir.path());
    let good_len = fs::metadata(&log).unwrap().len();
    let mut bytes = fs::read(&log).unwrap();
    bytes.extend_from_slice(&[0; 4096]);
    fs::write(&log, &bytes).unwrap();
    let store = open(dir.path());
    assert!(store.get(id, None).is_ok());
    assert_eq!(fs::metadata(&log).unwrap().len(), good_len);
}

/// A journal of three creates, as its log's path, bytes and the offset of its second frame
/// (the first batch; the header comes first).
fn three_creates(dir: &Path) -> (PathBuf, Vec<u8>, usize) {
    {
        let store = open(dir);
        for _ in 0..3 {
            store.create(CreateTask::new()).unwrap();
        }
    }
    let log = log_file(dir);
    let bytes = fs::read(&log).unwrap();
    let first_len = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    (log, bytes, 8 + first_len)
}

/// Opens `dir` expecting damage reported at byte offset `at`; returns the message.
fn damage_at(dir: &Path, at: usize) -> String {
    match Store::builder().journal(JournalConfig::new(dir)).build() {
        Err(StoreError::Journal(message)) => {
            assert!(message.contains(&format!("offset {at}")), "{message}");
            message
        }
        other => panic!("expected a journal error, got {other:?}"),
    }
}

#[test]
fn a_damaged_log_is_salvaged_on_request_keeping_what_precedes_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<TaskId> = {
        let store = open(dir.path());
        (0..3)
            .map(|_| store.create(CreateTask::new()).unwrap().task_id)
            .collect()
    };
    let log = log_file(dir.path());
    let mut bytes = fs::read(&log).unwrap();
    let bounds = frame_bounds(&bytes);
    // The second create's batch never reached the disk, the third's did: a hole, as a power
    // loss can leave under `Flush` durability.
    let (hole, after) = (bounds[2], bounds[3]);
    bytes[hole..after].fill(0);
    fs::write(&log, &bytes).unwrap();
    let message = damage_at(dir.path(), hole);
    assert!(
        message.contains("salvage"),
        "the error names the way out: {message}"
    );

    let mut config = journal(dir.path(), RecoveryPolicy::Keep);
    config.salvage = true;
    let store = Store::builder().journal(config).build().unwrap();
    let kept = ids_in(&store);
    assert_eq!(kept, ids[..1]);
    // What was dropped is kept for a human, byte for byte; the log goes on from the cut.
    let aside = dir.path().join(format!(
        "{}.damaged-{hole}",
        log.file_name().unwrap().to_string_lossy()
    ));
    assert_eq!(fs::read(&aside).unwrap(), bytes[hole..]);
    let later: Vec<TaskId> = (0..2)
        .map(|_| store.create(CreateTask::new()).unwrap().task_id)
        .collect();
    drop(store);
    assert_eq!(listed(dir.path()), [ids[0], later[0], later[1]]);

    // Another hole at the same place, salvaged again: the first set-aside file is kept,
    // the second gets a name of its own.
    let mut again = fs::read(&log).unwrap();
    let bounds = frame_bounds(&again);
    assert_eq!(bounds[2], hole);
    again[hole..bounds[3]].fill(0);
    fs::write(&log, &again).unwrap();
    let mut config = journal(dir.path(), RecoveryPolicy::Keep);
    config.salvage = true;
    let store = Store::builder().journal(config).build().unwrap();
    assert_eq!(store.list(None, None).unwrap().tasks.len(), 1);
    assert_eq!(
        fs::read(&aside).unwrap(),
        bytes[hole..],
        "the first is kept"
    );
    let second = PathBuf::from(format!("{}.1", aside.display()));
    assert_eq!(fs::read(second).unwrap(), again[hole..]);
}

/// `journal-G.log` in `dir`.
fn log_at(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("journal-{generation:016x}.log"))
}

#[test]
fn a_log_chain_with_a_gap_is_refused_and_kept() {
    // A compaction starts the next log before its snapshot is named, so several logs
    // can follow the newest snapshot; one missing in between lost acknowledged changes.
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let first = log_at(dir.path(), 0);
    let third = log_at(dir.path(), 2);
    fs::copy(&first, &third).unwrap();
    let message = refused(dir.path());
    assert!(message.contains(&third.display().to_string()), "{message}");
    let second = log_at(dir.path(), 1).display().to_string();
    assert!(
        message.contains(&second),
        "names the missing log: {message}"
    );
    assert!(first.exists() && third.exists(), "nothing is deleted");
}

/// A journal in `dir` whose chain is journal-0 (two creates, then the first 5 bytes of a
/// third batch: a broken end) and journal-1 (that third batch whole). Under `Fsync` a log
/// is synced before the next one begins, so such an end is no crash's doing: damage.
struct TornChain {
    /// The two tasks journal-0 holds whole.
    ids: Vec<TaskId>,
    /// The task journal-1 creates.
    later: TaskId,
    first: PathBuf,
    second: PathBuf,
    /// Where journal-0's whole batches end.
    end: usize,
    /// journal-0 as it was before it was split: `whole[end..]` is journal-1.
    whole: Vec<u8>,
}

fn torn_chain(dir: &Path) -> TornChain {
    let ids: Vec<TaskId> = {
        let store = open(dir);
        (0..2)
            .map(|_| store.create(CreateTask::new()).unwrap().task_id)
            .collect()
    };
    let (first, second) = (log_at(dir, 0), log_at(dir, 1));
    let mut bytes = fs::read(&first).unwrap();
    let end = bytes.len();
    let later = {
        let store = open(dir);
        store.create(CreateTask::new()).unwrap().task_id
    };
    let whole = fs::read(&first).unwrap();
    fs::write(&second, &whole[end..]).unwrap();
    bytes.extend_from_slice(&whole[end..end + 5]);
    fs::write(&first, &bytes).unwrap();
    TornChain {
        ids,
        later,
        first,
        second,
        end,
        whole,
    }
}

#[test]
fn a_broken_end_of_a_log_with_a_newer_log_after_it_is_damage_and_salvage_stops_there() {
    let dir = tempfile::tempdir().unwrap();
    let TornChain {
        ids,
        later,
        first,
        second,
        end,
        whole,
    } = torn_chain(dir.path());
    let message = damage_at(dir.path(), end);
    assert!(message.contains(&first.display().to_string()), "{message}");
    assert!(message.contains("salvage"), "{message}");
    // Salvaged: the first log is cut there, and the second, whose changes came after
    // the loss, is set aside whole.
    let mut config = journal(dir.path(), RecoveryPolicy::Keep);
    config.salvage = true;
    let store = Store::builder().journal(config).build().unwrap();
    let kept = ids_in(&store);
    assert_eq!(kept, ids);
    assert!(!second.exists());
    let aside = format!("{}.damaged-0", second.display());
    assert_eq!(fs::read(aside).unwrap(), whole[end..]);
    assert!(
        store.get(later, None).is_err(),
        "the set-aside log's task is lost"
    );
    let more = store.create(CreateTask::new()).unwrap().task_id;
    drop(store);
    assert_eq!(listed(dir.path()), [ids[0], ids[1], more]);
}

#[test]
fn a_salvage_that_cannot_set_a_newer_log_aside_leaves_the_damage_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let TornChain {
        ids,
        later,
        second,
        end,
        whole,
        ..
    } = torn_chain(dir.path());
    // The second log cannot be set aside (every name for it is taken; a full disk, or a
    // crash half way through the salvage, does the same): the salvage fails.
    let aside = format!("{}.damaged-0", second.display());
    fs::write(&aside, b"").unwrap();
    for n in 1..=1000 {
        fs::write(format!("{aside}.{n}"), b"").unwrap();
    }
    let mut config = journal(dir.path(), RecoveryPolicy::Keep);
    config.salvage = true;
    assert!(Store::builder().journal(config).build().is_err());
    // The first log must still read as damaged: cut already, with the second log still
    // there, the next start would replay the second log over the hole, silently.
    assert!(second.exists());
    match Store::builder()
        .journal(journal(dir.path(), RecoveryPolicy::Keep))
        .build()
    {
        Err(StoreError::Journal(message)) => assert!(message.contains("salvage"), "{message}"),
        Ok(store) => panic!(
            "opened without salvage, {:?} holding the task after the hole: {:?}",
            store
                .list(None, None)
                .unwrap()
                .tasks
                .iter()
                .map(|t| t.task_id)
                .collect::<Vec<_>>(),
            store.get(later, None).map(|t| t.task_id)
        ),
        Err(e) => panic!("{e:?}"),
    }
    // With room to set it aside, the salvage goes through.
    fs::remove_file(&aside).unwrap();
    let mut config = journal(dir.path(), RecoveryPolicy::Keep);
    config.salvage = true;
    let store = Store::builder().journal(config).build().unwrap();
    let kept = ids_in(&store);
    assert_eq!(kept, ids);
    assert!(!second.exists());
    assert_eq!(fs::read(&aside).unwrap(), whole[end..]);
}
#[test]
fn without_fsync_a_cut_end_of_a_log_with_a_newer_one_after_it_is_dropped_and_the_rest_replayed() {
    // `Flush` and `None` do not sync a log when compaction moves on to the next one, so a
    // power loss can cut its end as it can the newest log's: the store starts, as it did
    // on one log, without what was cut.
    let dir = tempfile::tempdir().unwrap();
    let flush = || {
        let mut config = journal(dir.path(), RecoveryPolicy::Keep);
        config.durability = mcp_task_store::Durability::Flush;
        config
    };
    let first_id = {
        let store = Store::builder().journal(flush()).build().unwrap();
        store.create(CreateTask::new()).unwrap().task_id
    };
    let (first, second) = (log_at(dir.path(), 0), log_at(dir.path(), 1));
    let end = fs::metadata(&first).unwrap().len() as usize;
    let (lost, later) = {
        let store = Store::builder().journal(flush()).build().unwrap();
        let lost = store.create(CreateTask::new()).unwrap().task_id;
        let cut = fs::metadata(&first).unwrap().len() as usize;
        let later = store.create(CreateTask::new()).unwrap().task_id;
        (lost, (cut, later))
    };
    let (cut, later) = later;
    // journal-0 keeps its first batch and half of the next; journal-1 has a header and
    // the last batch.
    let whole = fs::read(&first).unwrap();
    let header = &whole[..frame_bounds(&whole)[1]];
    fs::write(&second, [header, &whole[cut..]].concat()).unwrap();
    fs::write(&first, &whole[..end + (cut - end) / 2]).unwrap();
    let store = Store::builder().journal(flush()).build().unwrap();
    let kept = ids_in(&store);
    assert_eq!(kept, [first_id, later]);
    assert!(store.get(lost, None).is_err());
    drop(store);
    assert_eq!(
        fs::metadata(&first).unwrap().len(),
        end as u64,
        "the cut batch is dropped from the file"
    );
}

#[test]
fn zeros_in_the_middle_with_records_after_them_are_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut bytes, second) = three_creates(dir.path());
    let second_len = u32::from_le_bytes(bytes[second..second + 4].try_into().unwrap()) as usize;
    bytes[second..second + 8 + second_len].fill(0); // a whole acknowledged batch
    fs::write(&log, &bytes).unwrap();
    damage_at(dir.path(), second);
}

#[test]
fn a_damaged_record_in_the_middle_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut bytes, second) = three_creates(dir.path());
    bytes[second + 10] ^= 0xff; // inside the second record's payload
    fs::write(&log, &bytes).unwrap();
    let message = damage_at(dir.path(), second);
    assert!(message.contains(&log.display().to_string()), "{message}");
}

#[test]
fn a_tail_crafted_to_make_the_search_for_a_valid_record_quadratic_is_damage() {
    // Every 16th byte starts a would-be record (a `{...}` payload with a wrong checksum)
    // claiming the rest of the file: searching it all would checksum ~len^2/32 bytes.
    const LEN: usize = 16 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    let log = log_file(dir.path());
    let mut bytes = fs::read(&log).unwrap();
    let good_len = bytes.len();
    let mut tail = vec![b' '; LEN];
    for at in (0..=LEN - 16).step_by(16) {
        let claim = (LEN - at - 16) / 16 * 16 + 8;
        tail[at..at + 4].copy_from_slice(&(claim as u32).to_le_bytes());
        tail[at + 4..at + 8].copy_from_slice(&0x0bad_c0de_u32.to_le_bytes());
        tail[at + 8] = b'{';
        tail[at + 15] = b'}';
    }
    bytes.extend_from_slice(&tail);
    fs::write(&log, &bytes).unwrap();
    let message = damage_at(dir.path(), good_len);
    assert!(message.contains("gave up"), "{message}");
    // Refused, not cut: the bytes are there for a human, and the task with them.
    assert_eq!(fs::read(&log).unwrap(), bytes);
    fs::write(&log, &bytes[..good_len]).unwrap();
    assert!(open(dir.path()).get(id, None).is_ok());
}

#[test]
fn a_second_store_on_a_directory_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path());
    let id = first.create(CreateTask::new()).unwrap().task_id;
    match Store::builder()
        .journal(JournalConfig::new(dir.path()))
        .build()
    {
        Err(StoreError::Journal(message)) => {
            assert!(message.contains("in use by another store"), "{message}");
            assert!(
                message.contains(&dir.path().display().to_string()),
                "{message}"
            );
        }
        other => panic!("expected a journal error, got {other:?}"),
    }
    // The refused store touched nothing: the first one goes on, and what it acknowledged
    // is there after a restart.
    let other = first.create(CreateTask::new()).unwrap().task_id;
    drop(first);
    let store = open(dir.path());
    assert!(store.get(id, None).is_ok());
    assert!(store.get(other, None).is_ok());
}

/// A child forked while a store is open (a C or Python host's worker that does not
/// `exec`) does not keep the directory's lock: once the parent's store is gone, a new one
/// opens the directory while the child still lives.
#[test]
fn a_forked_child_does_not_keep_the_directorys_lock() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let mut fds = [0i32; 2];
    // SAFETY: the array is live and has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only waits on the pipe and leaves with `_exit`, never returning
    // into the test harness.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let mut byte = 0u8;
        // SAFETY: a one-byte read into a live buffer, then `_exit`.
        unsafe {
            libc::read(fds[0], (&raw mut byte).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(store);
    let reopened = Store::builder()
        .journal(journal(dir.path(), RecoveryPolicy::Keep))
        .build();
    // SAFETY: a one-byte write from a live buffer lets the child go; then it is reaped.
    unsafe {
        libc::write(fds[1], [0u8].as_ptr().cast(), 1);
        libc::waitpid(child, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    let reopened = reopened.expect("the directory is free while the child lives");
    assert!(reopened.get(id, None).is_ok());
}

/// The lock file's descriptor, which a forked child keeps pointed at `/dev/null`, stays
/// close-on-exec there as it was: a child that goes on to `exec` (a host spawning a
/// program) must not hand that descriptor to the program it runs.
#[cfg(target_os = "linux")]
#[test]
fn a_forked_childs_stand_in_for_the_lock_file_is_closed_on_exec() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let lock = dir.path().join("LOCK").canonicalize().unwrap();
    let fd: i32 = fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .find(|entry| fs::read_link(entry.path()).is_ok_and(|target| target == lock))
        .and_then(|entry| entry.file_name().to_str()?.parse().ok())
        .expect("the lock file is open");
    // SAFETY: `fd` is open in this process.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    assert!(flags & libc::FD_CLOEXEC != 0, "close-on-exec in the parent");
    let mut fds = [0i32; 2];
    // SAFETY: the array is live and has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only calls fcntl and write, then leaves with `_exit`, never
    // returning into the test harness.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // SAFETY: async-signal-safe calls on live descriptors and a live buffer, then `_exit`.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::write(fds[1], (&raw const flags).cast(), size_of::<i32>());
            libc::_exit(0);
        }
    }
    let mut in_child = 0i32;
    // SAFETY: a read into a live buffer of its size; then the child is reaped.
    unsafe {
        let read = libc::read(fds[0], (&raw mut in_child).cast(), size_of::<i32>());
        assert_eq!(read, size_of::<i32>() as isize);
        libc::waitpid(child, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    assert!(in_child >= 0, "the descriptor is open in the child");
    assert!(
        in_child & libc::FD_CLOEXEC != 0,
        "close-on-exec in the child"
    );
    drop(store);
}

#[test]
fn the_lock_goes_with_the_store_and_a_lock_file_left_behind_does_not_block() {
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    // The file stays, as after a crash; only a live holder's lock counts (a killed child
    // holding it is covered by the SIGKILL test below, which reopens after every kill).
    assert!(dir.path().join("LOCK").exists());
    let store = open(dir.path());
    assert!(store.get(id, None).is_ok());
}

#[test]
fn compaction_snapshots_and_truncates_without_losing_anything() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = journal(dir.path(), RecoveryPolicy::Keep);
    config.compact_min_bytes = 16 * 1024;
    let store = Store::builder().journal(config.clone()).build().unwrap();
    let keep = store.create(CreateTask::new()).unwrap().task_id;
    // Few live tasks, many changes: the log outgrows the live data.
    let busy: Vec<_> = (0..3)
        .map(|_| store.create(CreateTask::new()).unwrap().task_id)
        .collect();
    for n in 0..600 {
        let id = busy[n % busy.len()];
        store
            .update_status(id, None, TaskStatus::Working, Some(format!("step {n}")))
            .unwrap();
    }
    store.cancel(busy[0], None, None).unwrap();
    // A compaction runs after its batch is answered: the barrier waits for it.
    store.sync().unwrap();
    let names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("snapshot-")),
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| n.ends_with(".log")).count(),
        1,
        "{names:?}"
    );
    let count = store.list(None, None).unwrap().tasks.len();
    drop(store);
    let store = Store::builder().journal(config).build().unwrap();
    assert_eq!(store.list(None, None).unwrap().tasks.len(), count);
    assert_eq!(store.get(keep, None).unwrap().status, TaskStatus::Working);
    assert_eq!(
        store.get(busy[0], None).unwrap().status,
        TaskStatus::Cancelled
    );
    let last = store.get(busy[599 % 3], None).unwrap();
    assert_eq!(last.status_message.as_deref(), Some("step 599"));
}

#[test]
fn leftovers_of_an_interrupted_compaction_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    fs::write(dir.path().join("snapshot.tmp"), b"half a snapshot").unwrap();
    let store = open(dir.path());
    assert!(store.get(id, None).is_ok());
    assert!(!dir.path().join("snapshot.tmp").exists());
}

#[test]
fn files_named_almost_like_the_journals_own_are_left_alone() {
    // The journal names its files with 16 lowercase hex digits. Other names (a copy made
    // by hand, say) are not part of the chain: read as generations, they sent recovery
    // after files that do not exist, and the store would not open.
    for stray in [
        "journal-1.log",
        "journal-+000000000000001.log",
        "journal-000000000000000A.log",
        "snapshot-7",
        "snapshot-00000000000000000007",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
        fs::write(dir.path().join(stray), b"not the journal's").unwrap();
        let store = Store::builder()
            .journal(journal(dir.path(), RecoveryPolicy::Keep))
            .build()
            .unwrap_or_else(|e| panic!("{stray}: {e}"));
        assert!(store.get(id, None).is_ok(), "{stray}");
        drop(store);
        assert!(dir.path().join(stray).exists(), "{stray}");
    }
}

/// A journal config that compacts after every batch.
fn compacting(dir: &Path) -> JournalConfig {
    let mut config = journal(dir, RecoveryPolicy::Keep);
    config.compact_ratio = 0;
    config.compact_min_bytes = 0;
    config
}

/// Every task a store reopened on `dir` holds, in creation order.
fn listed(dir: &Path) -> Vec<TaskId> {
    ids_in(&open(dir))
}

/// Every task `store` holds (one page's worth), in creation order.
fn ids_in(store: &Store) -> Vec<TaskId> {
    let tasks = store.list(None, None).unwrap().tasks;
    tasks.into_iter().map(|t| t.task_id).collect()
}

#[test]
fn a_compaction_that_cannot_write_its_snapshot_leaves_the_store_serving() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    // Stands in for a disk too full (or failing) for a snapshot: its file cannot be made.
    let blocker = dir.path().join("snapshot.tmp");
    fs::create_dir(&blocker).unwrap();
    // Every batch asks for a compaction, and each fails. The batch is durable all the
    // same, so it is answered, and the store goes on appending to the log it has.
    let store = Store::builder()
        .journal(compacting(dir.path()))
        .build()
        .unwrap();
    let second = store.create(CreateTask::new()).unwrap().task_id;
    assert!(store.get(first, None).is_ok());
    let third = store.create(CreateTask::new()).unwrap().task_id;
    drop(store);
    fs::remove_dir(&blocker).unwrap();
    assert_eq!(listed(dir.path()), [first, second, third]);
}

#[test]
fn a_compaction_that_cannot_start_its_log_leaves_the_store_serving() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    // Opening compacts (the log is due) before it returns; every batch after that asks
    // for another compaction.
    let store = Store::builder()
        .journal(compacting(dir.path()))
        .build()
        .unwrap();
    // The next generation's log cannot be created (a directory stands in its way): the
    // compaction is given up before anything is named, and the store goes on with the
    // log it has.
    let current = log_file(dir.path());
    let hex = current.file_name().unwrap().to_string_lossy();
    let hex = hex.trim_start_matches("journal-").trim_end_matches(".log");
    let next = u64::from_str_radix(hex, 16).unwrap() + 1;
    let blocker = dir.path().join(format!("journal-{next:016x}.log"));
    fs::create_dir(&blocker).unwrap();
    let second = store.create(CreateTask::new()).unwrap().task_id;
    let third = store.create(CreateTask::new()).unwrap().task_id;
    drop(store);
    assert!(!dir.path().join(format!("snapshot-{next:016x}")).exists());
    fs::remove_dir(&blocker).unwrap();
    assert_eq!(listed(dir.path()), [first, second, third]);
}

#[test]
fn a_store_whose_due_compaction_cannot_run_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
    // The log is due for compaction at start, as a large one would be, and there is no
    // room for a snapshot: the store opens on its log all the same.
    fs::create_dir(dir.path().join("snapshot.tmp")).unwrap();
    let store = Store::builder()
        .journal(compacting(dir.path()))
        .build()
        .unwrap();
    assert!(store.get(id, None).is_ok());
}

/// A journal compacted after every batch, holding `count` working tasks: their ids, and its
/// snapshot's and log's paths (one generation, above 0).
fn compacted(dir: &Path, count: usize) -> (Vec<TaskId>, PathBuf, PathBuf) {
    let mut config = journal(dir, RecoveryPolicy::Keep);
    config.compact_ratio = 0;
    config.compact_min_bytes = 0;
    let store = Store::builder().journal(config).build().unwrap();
    let ids = (0..count)
        .map(|_| store.create(CreateTask::new()).unwrap().task_id)
        .collect();
    // Compaction goes on after a batch is answered; the barrier finishes it.
    store.sync().unwrap();
    drop(store);
    let named = |prefix: &str| {
        let mut found: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        found.pop().unwrap()
    };
    (ids, named("snapshot-"), named("journal-"))
}

/// Opens `dir` expecting a journal error; returns its message.
fn refused(dir: &Path) -> String {
    match Store::builder().journal(JournalConfig::new(dir)).build() {
        Err(StoreError::Journal(message)) => message,
        other => panic!("expected a journal error, got {other:?}"),
    }
}

#[test]
fn a_log_whose_snapshot_is_missing_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (_, snapshot, log) = compacted(dir.path(), 3);
    assert!(!log.ends_with("journal-0000000000000000.log"), "{log:?}");
    fs::remove_file(&snapshot).unwrap();
    let message = refused(dir.path());
    assert!(message.contains(&log.display().to_string()), "{message}");
    assert!(
        message.contains(&snapshot.display().to_string()),
        "{message}"
    );
    assert!(log.exists(), "the log is not deleted");
}

#[test]
fn a_log_newer_than_the_newest_snapshot_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (_, snapshot, log) = compacted(dir.path(), 3);
    // An older snapshot is there, the newer one went missing: the newest log must not be
    // replaced by the older generation.
    let name = log.file_name().unwrap().to_string_lossy().into_owned();
    let generation = u64::from_str_radix(&name["journal-".len()..name.len() - 4], 16).unwrap();
    let newer = dir
        .path()
        .join(format!("journal-{:016x}.log", generation + 1));
    fs::rename(&log, &newer).unwrap();
    let message = refused(dir.path());
    assert!(message.contains(&newer.display().to_string()), "{message}");
    assert!(newer.exists() && snapshot.exists(), "nothing is deleted");
}

/// Where each frame of a journal file starts, and where the last one ends.
fn frame_bounds(bytes: &[u8]) -> Vec<usize> {
    let mut bounds = vec![0];
    let mut at = 0;
    while at < bytes.len() {
        at += 8 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        bounds.push(at);
    }
    bounds
}

#[test]
fn a_snapshot_cut_short_anywhere_is_damage_not_a_torn_tail() {
    // A snapshot is synced before it is renamed into place: no crash tears it, so a short
    // one lost tasks that were acknowledged, and must not be read as if whole.
    let dir = tempfile::tempdir().unwrap();
    let (ids, snapshot, _) = compacted(dir.path(), 3);
    let whole = fs::read(&snapshot).unwrap();
    let bounds = frame_bounds(&whole);
    assert_eq!(bounds.len(), 1 + 5, "a header, three tasks and an end");
    for cut in 0..whole.len() {
        fs::write(&snapshot, &whole[..cut]).unwrap();
        // The cut frame's start, or the cut itself when it falls between frames.
        let at = *bounds.iter().rev().find(|&&b| b <= cut).unwrap();
        let message = refused(dir.path());
        assert!(
            message.contains(&format!("offset {at}:")),
            "cut at {cut}: {message}"
        );
        assert!(
            message.contains(&snapshot.display().to_string()),
            "{message}"
        );
    }
    fs::write(&snapshot, &whole).unwrap();
    let store = open(dir.path());
    for id in ids {
        assert!(store.get(id, None).is_ok());
    }
}

#[test]
fn a_damaged_last_record_of_a_snapshot_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (_, snapshot, _) = compacted(dir.path(), 3);
    let mut bytes = fs::read(&snapshot).unwrap();
    // A header, three tasks, and the end that counts them: the end is the last record.
    let last = frame_bounds(&bytes)[4];
    bytes[last + 8 + 10] ^= 0x01;
    fs::write(&snapshot, &bytes).unwrap();
    let message = refused(dir.path());
    assert!(message.contains(&format!("offset {last}:")), "{message}");
}

/// Not a test by itself: the child process of the crash test (runs only when asked to).
#[test]
fn crash_child() {
    if let Ok(dir) = std::env::var("MCP_JOURNAL_CHILD_DIR") {
        let seed = std::env::var("MCP_JOURNAL_CHILD_SEED")
            .unwrap()
            .parse()
            .unwrap();
        harness::child(Path::new(&dir), seed);
    }
}

#[test]
fn sigkill_at_random_moments_never_loses_an_acknowledged_operation() {
    const CYCLES: u64 = 50;
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut model = harness::Model::default();
    let mut rng = harness::Rng::new(0x5eed);
    for cycle in 0..CYCLES {
        let child = Command::new(&exe)
            .args([
                "--exact",
                "journal::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("MCP_JOURNAL_CHILD_DIR", dir.path())
            .env("MCP_JOURNAL_CHILD_SEED", cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let kill_after = 1 + rng.below(60);
        let outcome = harness::drive(&mut model, child, kill_after)
            .and_then(|in_flight| harness::verify(&mut model, dir.path(), in_flight));
        if let Err(e) = outcome {
            panic!("cycle {cycle}: {e}");
        }
    }
    assert!(
        model.acks >= CYCLES,
        "the children did work: {} acks",
        model.acks
    );
}

#[test]
fn a_store_reopens_its_directory_while_other_threads_start_processes() {
    // A child process shares the directory's lock from its fork until its exec; reopening
    // right after a drop must wait that moment out rather than call the directory in use.
    let dir = tempfile::tempdir().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spawner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = Command::new("true").stdout(Stdio::null()).status();
            }
        })
    };
    let mut failures = Vec::new();
    for _ in 0..200 {
        let config = journal(dir.path(), RecoveryPolicy::Keep);
        match Store::builder().journal(config).build() {
            Ok(store) => drop(store),
            Err(error) => failures.push(error.to_string()),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spawner.join().unwrap();
    assert!(
        failures.is_empty(),
        "{} reopens failed: {:?}",
        failures.len(),
        failures.first()
    );
}

#[test]
fn one_stop_ends_waits_on_two_stores_holding_the_same_task_id() {
    // Two stores recovered from copies of one directory hold the same task id.
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let id = {
        let store = open(a_dir.path());
        store.create(CreateTask::new()).unwrap().task_id
    };
    fs::copy(
        log_file(a_dir.path()),
        b_dir
            .path()
            .join(log_file(a_dir.path()).file_name().unwrap()),
    )
    .unwrap();
    let (a, b) = (open(a_dir.path()), open(b_dir.path()));
    let stop = mcp_task_store::WaitStop::new();
    let wait = |store: &Store| {
        let (handle, stop) = (store.handle(), stop.clone());
        std::thread::spawn(move || {
            handle.wait_terminal_or_stop(id, None, Some(Duration::from_secs(20)), &stop)
        })
    };
    let parked = |store: &Store| {
        let started = std::time::Instant::now();
        while store.stats().unwrap().waiters == 0 {
            assert!(started.elapsed() < Duration::from_secs(10), "never parked");
            std::thread::yield_now();
        }
    };
    let on_b = wait(&b);
    parked(&b);
    let on_a = wait(&a);
    parked(&a);
    // The wait on A ends first; the stop must still reach the one on B.
    a.cancel(id, None, None).unwrap();
    assert_eq!(on_a.join().unwrap().unwrap().status, TaskStatus::Cancelled);
    stop.stop();
    assert_eq!(on_b.join().unwrap(), Err(StoreError::Stopped));
}

/// CRC-32 (IEEE), as the journal's frames carry it: a test that rewrites a record must
/// frame it as the journal would.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Rewrites every record of the log in `dir` through `edit`, each with a valid frame.
fn rewrite_log(dir: &Path, mut edit: impl FnMut(&mut serde_json::Value)) {
    let log = log_file(dir);
    let bytes = fs::read(&log).unwrap();
    let bounds = frame_bounds(&bytes);
    let mut out = Vec::new();
    for pair in bounds.windows(2) {
        let mut record: serde_json::Value =
            serde_json::from_slice(&bytes[pair[0] + 8..pair[1]]).unwrap();
        edit(&mut record);
        let payload = serde_json::to_vec(&record).unwrap();
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
    }
    fs::write(&log, out).unwrap();
}

#[test]
fn sequence_numbers_out_of_range_in_a_journal_are_refused_not_wrapped() {
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 2] = [
        ("a task's", |record| {
            if let Some(batch) = record.as_array_mut() {
                batch[0]["seq"] = u64::MAX.into();
            }
        }),
        ("the header's next", |record| {
            if record["kind"] == "header" {
                record["next_seq"] = u64::MAX.into();
            }
        }),
    ];
    for (which, edit) in edits {
        let dir = tempfile::tempdir().unwrap();
        open(dir.path()).create(CreateTask::new()).unwrap();
        rewrite_log(dir.path(), edit);
        // Opened, the next create would overflow the numbering (a panic in a debug build,
        // reused sequence numbers in a release one).
        let opened = std::panic::catch_unwind(|| {
            Store::builder()
                .journal(journal(dir.path(), RecoveryPolicy::Keep))
                .build()
                .map(|store| store.create(CreateTask::new()))
        })
        .unwrap_or_else(|_| panic!("{which} sequence number u64::MAX: a panic"));
        match opened {
            Err(StoreError::Journal(why)) => assert!(why.contains("out of range"), "{why}"),
            other => panic!("{which} sequence number u64::MAX: {other:?}"),
        }
    }
}

/// `[[[…]]]`, `depth` levels deep.
fn nested(depth: usize) -> serde_json::Value {
    (1..depth).fold(json!([]), |inner, _| json!([inner]))
}

#[test]
fn payloads_past_the_wire_limit_read_back_and_deeper_ones_are_refused() {
    // The wire takes requests 128 levels deep; a record wraps an origin a few levels more.
    // Near the reader's own bound (256 in all) is read back too, within a test thread's
    // stack.
    for depth in [130, 190] {
        let dir = tempfile::tempdir().unwrap();
        let id = open(dir.path())
            .create(CreateTask::new().origin(nested(depth)))
            .unwrap()
            .task_id;
        let store = open(dir.path());
        let origin = store.get_detail(id, None).unwrap().origin.unwrap();
        assert_eq!(origin.to_value(), nested(depth), "depth {depth}");
    }
    // Deeper values are refused on the way in: what is journaled must read back, and a
    // deep tree's clone or drop on the owner thread must not run its stack out.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let deep = CreateTask::new().origin(nested(200));
    assert!(matches!(
        store.create(deep),
        Err(StoreError::InvalidArgument(_))
    ));
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let outcome = Outcome::result(json!({"content": nested(200)}));
    let stored = store.store_result(id, None, TaskStatus::Completed, outcome, None);
    assert!(
        matches!(stored, Err(StoreError::InvalidArgument(_))),
        "{stored:?}"
    );
    drop(store);
    assert_eq!(listed(dir.path()), [id]);
    // A file nested deeper than the reader takes is refused with a clear error, not a
    // stack overflow.
    let dir = tempfile::tempdir().unwrap();
    open(dir.path()).create(CreateTask::new()).unwrap();
    rewrite_log(dir.path(), |record| {
        if let Some(batch) = record.as_array_mut() {
            batch[0]["origin"] = nested(1_000);
        }
    });
    match Store::builder()
        .journal(journal(dir.path(), RecoveryPolicy::Keep))
        .build()
    {
        Err(StoreError::Journal(why)) => assert!(why.contains("nested deeper"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cursor_into_changes_a_salvage_dropped_is_refused_not_read_past_new_tasks() {
    // A salvage drops acknowledged creates, and the next tasks take their sequence
    // numbers again. A list cursor a client got before the damage may name one of the
    // dropped tasks: read as before, it would start after the new tasks that took the
    // numbers, and the client would never see them.
    let dir = tempfile::tempdir().unwrap();
    let paged = |salvage: bool| {
        let mut config = journal(dir.path(), RecoveryPolicy::Keep);
        config.salvage = salvage;
        Store::builder()
            .page_size(3)
            .journal(config)
            .build()
            .unwrap()
    };
    let (ids, stale) = {
        let store = paged(false);
        let ids: Vec<TaskId> = (0..4)
            .map(|_| store.create(CreateTask::new()).unwrap().task_id)
            .collect();
        let page = store.list(None, None).unwrap();
        assert_eq!(page.tasks.last().unwrap().task_id, ids[2]);
        (ids, page.next_cursor.unwrap())
    };
    // The third create's batch is lost, the fourth's is whole after it: damage.
    let log = log_file(dir.path());
    let mut bytes = fs::read(&log).unwrap();
    let bounds = frame_bounds(&bytes);
    bytes[bounds[3]..bounds[4]].fill(0);
    fs::write(&log, &bytes).unwrap();
    let store = paged(true);
    assert_eq!(ids_in(&store), ids[..2]);
    let new = store.create(CreateTask::new()).unwrap().task_id;
    match store.list(None, Some(&stale)) {
        Err(StoreError::InvalidCursor) => {}
        Ok(page) => {
            let listed: Vec<TaskId> = page.tasks.iter().map(|t| t.task_id).collect();
            panic!("{new} is read past: {listed:?}");
        }
        Err(e) => panic!("{e:?}"),
    }
    // A cursor issued after the salvage stays good across restarts, the stale one stays
    // refused, and each start finds what the salvaging one left.
    let more = store.create(CreateTask::new()).unwrap().task_id;
    let fresh = store.list(None, None).unwrap().next_cursor.unwrap();
    drop(store);
    for _ in 0..2 {
        let store = paged(false);
        assert_eq!(ids_in(&store), [ids[0], ids[1], new]);
        let rest = store.list(None, Some(&fresh)).unwrap().tasks;
        assert_eq!(rest.iter().map(|t| t.task_id).collect::<Vec<_>>(), [more]);
        assert!(matches!(
            store.list(None, Some(&stale)),
            Err(StoreError::InvalidCursor)
        ));
    }
}

#[test]
fn after_a_salvage_set_a_newer_log_aside_its_generation_is_started_afresh() {
    // The salvage removes journal-1 (set aside whole); the compactions that follow create
    // a new journal-1 (and snapshot-1, and on): nothing of the old one may come back, and
    // the set-aside copy is left as it is.
    let dir = tempfile::tempdir().unwrap();
    let TornChain {
        ids,
        second,
        end,
        whole,
        ..
    } = torn_chain(dir.path());
    let mut config = compacting(dir.path());
    config.salvage = true;
    let store = Store::builder().journal(config).build().unwrap();
    let more = store.create(CreateTask::new()).unwrap().task_id;
    store.sync().unwrap();
    assert!(
        !log_at(dir.path(), 0).exists(),
        "compacted past generation 0"
    );
    drop(store);
    let aside = format!("{}.damaged-0", second.display());
    assert_eq!(fs::read(aside).unwrap(), whole[end..]);
    for _ in 0..2 {
        assert_eq!(listed(dir.path()), [ids[0], ids[1], more]);
    }
}

/// In a child process (see `a_cancel_whose_write_fails_fires_no_cancel_token`): a store
/// whose log cannot grow any more (`RLIMIT_FSIZE` at its size) is asked to cancel a task
/// whose worker holds its cancel token. Prints what the worker saw.
#[cfg(target_os = "linux")]
#[test]
fn write_failure_child() {
    let Ok(dir) = std::env::var("MCP_JOURNAL_WRITE_FAILURE_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let store = open(dir);
    let id = store.create(CreateTask::new()).unwrap().task_id;
    let token = store.cancel_token(id, None).unwrap();
    let size = fs::metadata(log_file(dir)).unwrap().len();
    // SAFETY: plain system calls on this (single-test) process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let limit = libc::rlimit {
            rlim_cur: size,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let cancelled = store.cancel(id, None, None);
    println!(
        "cancel: {:?}; token fired: {}",
        cancelled.map(|_| ()),
        token.is_cancelled()
    );
}

/// A worker must not be told to stop before the cancel that stops it is durable: a cancel
/// whose batch cannot be written is never acknowledged (the store stops), the task comes
/// back still running, and a worker that had stopped on its token would leave it so for
/// good.
#[cfg(target_os = "linux")]
#[test]
fn a_cancel_whose_write_fails_fires_no_cancel_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "journal::write_failure_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MCP_JOURNAL_WRITE_FAILURE_DIR", dir.path())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains("cancel: Err(Closed); token fired: false"),
        "{out}"
    );
    let store = open(dir.path());
    let tasks = store.list(None, None).unwrap().tasks;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].status, TaskStatus::Working);
    // Once the cancel is durable, the token fires before the cancel returns.
    let token = store.cancel_token(tasks[0].task_id, None).unwrap();
    store.cancel(tasks[0].task_id, None, None).unwrap();
    assert!(token.is_cancelled());
}

/// In a child process (see `a_write_that_fails_at_start_names_the_log`): a store opened on
/// a directory holding a running task, whose log cannot grow (`RLIMIT_FSIZE` at its size),
/// so failing the task at start cannot be written. Prints the error.
#[cfg(target_os = "linux")]
#[test]
fn start_write_failure_child() {
    let Ok(dir) = std::env::var("MCP_JOURNAL_START_FAILURE_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let size = fs::metadata(log_file(dir)).unwrap().len();
    // SAFETY: plain system calls on this (single-test) process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let limit = libc::rlimit {
            rlim_cur: size,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let opened = Store::builder()
        .journal(journal(dir, RecoveryPolicy::FailRunning))
        .build();
    println!("opened: {:?}", opened.map(|_| ()));
}

/// A write that fails says which file it could not write: "File too large" alone leaves
/// the operator to guess which disk is full.
#[cfg(target_os = "linux")]
#[test]
fn a_write_that_fails_at_start_names_the_log() {
    let dir = tempfile::tempdir().unwrap();
    open(dir.path()).create(CreateTask::new()).unwrap();
    let log = log_file(dir.path());
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "journal::start_write_failure_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MCP_JOURNAL_START_FAILURE_DIR", dir.path())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("opened: Err(Journal("), "{out}");
    assert!(out.contains(&log.display().to_string()), "{out}");
}

/// A chain whose earlier log ends torn is damage under `Fsync`, but what a power loss
/// leaves under `Flush` or `None`: the error says to open the directory once with the
/// durability it was written with (which keeps the newer log), not only to salvage (which
/// sets the newer log aside, and every change acknowledged in it).
#[test]
fn a_torn_earlier_log_under_fsync_points_to_the_durability_that_keeps_the_newer_log() {
    let dir = tempfile::tempdir().unwrap();
    let TornChain {
        ids, later, end, ..
    } = torn_chain(dir.path());
    let message = damage_at(dir.path(), end);
    assert!(message.contains("open it once with"), "{message}");
    assert!(message.contains("newer logs"), "{message}");
    let mut config = journal(dir.path(), RecoveryPolicy::Keep);
    config.durability = mcp_task_store::Durability::Flush;
    let store = Store::builder().journal(config).build().unwrap();
    assert_eq!(ids_in(&store), [ids[0], ids[1], later]);
}

/// Salvage does not apply to a snapshot: the error says so, and what is left to do.
#[test]
fn a_damaged_snapshot_says_that_salvage_cannot_help() {
    let dir = tempfile::tempdir().unwrap();
    let (_, snapshot, _) = compacted(dir.path(), 3);
    let bytes = fs::read(&snapshot).unwrap();
    fs::write(&snapshot, &bytes[..bytes.len() - 3]).unwrap();
    let mut config = journal(dir.path(), RecoveryPolicy::Keep);
    config.salvage = true;
    match Store::builder().journal(config).build() {
        Err(StoreError::Journal(message)) => {
            assert!(message.contains("salvage does not apply"), "{message}");
            assert!(message.contains("backup"), "{message}");
        }
        other => panic!("expected a journal error, got {other:?}"),
    }
}

/// A log whose snapshot is missing cannot be replayed: the error says to put it back.
#[test]
fn a_missing_snapshot_says_to_put_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_, snapshot, _) = compacted(dir.path(), 3);
    fs::remove_file(&snapshot).unwrap();
    let message = refused(dir.path());
    assert!(message.contains("put it back"), "{message}");
}
