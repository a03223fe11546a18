//! Journal recovery on arbitrary files: the bytes become a snapshot and a log in a fresh
//! directory, and a store is opened on it. It must give a store or a clear error, never a
//! panic, an abort or an unbounded allocation. A store that opened then has each task
//! driven through every call the protocol makes (whatever state recovery left it in), and
//! must read back what it wrote: opened again (without salvage), it opens, with the same
//! tasks in the same states (less any whose TTL ran out in between).
//!
//! Input: one byte of options, then parts separated by the bytes FF FE (never in UTF-8,
//! so never inside a JSON record):
//! - bit 0: `salvage`; bit 1: `RecoveryPolicy::Keep` (else `FailRunning`);
//! - bit 2: framed: each part is one record's payload, framed here with a correct length
//!   and checksum (so the records themselves get fuzzed); else the parts are raw file bytes;
//! - bit 3: with a snapshot (generation 1): framed, the parts before the first empty one
//!   are its records and the rest the log's; raw, the first part is the snapshot and the
//!   rest (separators kept) the log. Without, everything is generation 0's log.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use std::time::Duration;

use mcp_task_store::{
    CreateTask, Durability, JournalConfig, Outcome, RecoveryPolicy, SessionId, Store, StoreError,
    TaskId, TaskStatus,
};
use serde_json::json;

const SEPARATOR: &[u8] = &[0xFF, 0xFE];

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
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

fn frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

fn split(bytes: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = bytes;
    while let Some(at) = rest.windows(2).position(|w| w == SEPARATOR) {
        parts.push(&rest[..at]);
        rest = &rest[at + 2..];
    }
    parts.push(rest);
    parts
}

/// A directory of its own under /dev/shm (cheap syncs) or the temporary directory.
fn fresh_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!("mcpts-fuzz-journal-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn open(config: &JournalConfig) -> Result<Store, StoreError> {
    Store::builder().journal(config.clone()).build()
}

/// Every task the store lists, sessionless and in the seeds' session, with its status.
fn listed(store: &Store) -> Vec<(TaskId, Option<SessionId>, TaskStatus)> {
    let mut tasks = Vec::new();
    for session in [None, Some(SessionId::from("s-1"))] {
        let mut cursor: Option<String> = None;
        for page in 0.. {
            assert!(page < 10_000, "listing never ended");
            let page = store
                .list(session.as_ref(), cursor.as_deref())
                .expect("listing a store that opened");
            tasks.extend(
                page.tasks
                    .iter()
                    .map(|t| (t.task_id, session.clone(), t.status)),
            );
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    tasks
}

/// Drives a recovered task through what the protocol layer may ask of it: whatever
/// state recovery left it in, no call may panic.
fn exercise(store: &Store, id: TaskId, session: Option<&SessionId>) {
    let _ = store.get_result(id, session);
    if let Ok(detail) = store.get_detail(id, session) {
        for key in detail.input_requests.keys() {
            let answer = [(key.clone(), json!({"action": "accept"}))].into();
            let _ = store.resolve_input(id, session, answer);
        }
    }
    let _ = store.resolve_input(id, session, [("k".to_string(), json!({}))].into());
    let request = json!({"method": "elicitation/create", "params": {}});
    let _ = store.set_input_requests(id, session, [("fz".to_string(), request)].into());
    let _ = store.update_status(id, session, TaskStatus::Working, Some("fuzz".into()));
    let _ = store.wait_input(id, session, "fz", Some(Duration::ZERO));
    let outcome = Outcome::result(json!({"content": []}));
    let _ = store.store_result(id, session, TaskStatus::Completed, outcome, None);
    let _ = store.cancel(id, session, None);
    let _ = store.wait_terminal(id, session, Some(Duration::ZERO));
}

fuzz_target!(|data: &[u8]| {
    let Some((&options, rest)) = data.split_first() else {
        return;
    };
    let (salvage, keep, framed, snapshot) = (
        options & 1 != 0,
        options & 2 != 0,
        options & 4 != 0,
        options & 8 != 0,
    );
    let parts = split(rest);
    let (snapshot_bytes, log_bytes) = if framed {
        let cut = if snapshot {
            parts
                .iter()
                .position(|p| p.is_empty())
                .unwrap_or(parts.len())
        } else {
            0
        };
        let (mut s, mut l) = (Vec::new(), Vec::new());
        for part in &parts[..cut] {
            frame(&mut s, part);
        }
        for part in parts[cut..].iter().filter(|p| !p.is_empty()) {
            frame(&mut l, part);
        }
        (snapshot.then_some(s), l)
    } else if snapshot {
        let at = rest.windows(2).position(|w| w == SEPARATOR);
        match at {
            Some(at) => (Some(rest[..at].to_vec()), rest[at + 2..].to_vec()),
            None => (Some(rest.to_vec()), Vec::new()),
        }
    } else {
        (None, rest.to_vec())
    };
    let dir = fresh_dir();
    let generation = u64::from(snapshot_bytes.is_some());
    if let Some(bytes) = &snapshot_bytes {
        std::fs::write(dir.join(format!("snapshot-{generation:016x}")), bytes).unwrap();
    }
    std::fs::write(
        dir.join(format!("journal-{generation:016x}.log")),
        &log_bytes,
    )
    .unwrap();
    let mut config = JournalConfig::new(&dir);
    config.durability = Durability::Flush;
    config.salvage = salvage;
    config.recovery = if keep {
        RecoveryPolicy::Keep
    } else {
        RecoveryPolicy::FailRunning
    };
    config.compact_min_bytes = 4096;
    if let Ok(store) = open(&config) {
        for (id, session, _) in listed(&store) {
            exercise(&store, id, session.as_ref());
        }
        let created = store.create(CreateTask::new().ttl(60_000)).ok();
        let before = listed(&store);
        drop(store);
        config.salvage = false;
        let store = match open(&config) {
            Ok(store) => store,
            Err(e) => panic!("a journal the store wrote does not open again: {e}"),
        };
        let after = listed(&store);
        // Tasks may expire in between (their TTL ran out), and those still running fail
        // under `FailRunning`; nothing else may change.
        for (id, session, status) in &after {
            let was = before.iter().find(|(i, s, _)| i == id && s == session);
            let Some((_, _, was)) = was else {
                panic!("{id} was not listed before: {before:?}");
            };
            let failed = !keep && !was.is_terminal() && *status == TaskStatus::Failed;
            assert!(was == status || failed, "{id} was {was:?}, is {status:?}");
        }
        if let Some(created) = created {
            assert!(
                after.iter().any(|(id, _, _)| *id == created.task_id),
                "the task created is lost"
            );
        }
        drop(store);
    }
    let _ = std::fs::remove_dir_all(&dir);
});
