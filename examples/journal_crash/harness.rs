//! Crash harness for the journal, shared by the test suite (50 cycles) and the stress
//! program `examples/journal_crash` (1,000 cycles).
//!
//! A child process runs a journaled store under concurrent creates, status updates, results
//! and cancels, printing `try ...` before and `ack ...` after each operation. The parent
//! kills it with SIGKILL after a random number of acknowledgements, opens the journal itself
//! and checks that every acknowledged operation is there in its acknowledged state, that an
//! operation in flight at the kill is either wholly applied or not at all, and that no id
//! ever repeats.

#![allow(dead_code)] // each user of the harness takes a different half of it

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout};
use std::sync::Arc;

use mcp_task_store::{
    CreateTask, JournalConfig, Outcome, RecoveryPolicy, Store, StoreError, StoreHandle, TaskId,
    TaskStatus,
};
use serde_json::json;

/// Threads hammering the store in the child.
pub const THREADS: usize = 4;

/// A small deterministic generator (xorshift64*), so every run is reproducible by seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// Opens the journaled store the way both sides do: fsync, tasks kept as they are.
pub fn open(dir: &Path) -> Result<Store, StoreError> {
    let mut journal = JournalConfig::new(dir);
    journal.recovery = RecoveryPolicy::Keep;
    // Compact often, so crashes hit compaction too: at 4 (the default) the log never
    // outgrew this workload's live data 4 times over (about 1 KB of records a task
    // against the 256-byte estimate), and no cycle compacted at all.
    journal.compact_ratio = 1;
    journal.compact_min_bytes = 64 * 1024;
    Store::builder().journal(journal).build()
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The child: runs the workload until it is killed.
pub fn child(dir: &Path, seed: u64) -> ! {
    let store = match open(dir) {
        Ok(store) => Arc::new(store),
        Err(e) => {
            say(&format!("violation open failed: {e}"));
            std::process::exit(3);
        }
    };
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let handle = store.handle();
            std::thread::spawn(move || work(&handle, t, seed))
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    std::process::exit(4)
}

fn work(handle: &StoreHandle, t: usize, seed: u64) {
    let mut rng = Rng::new(seed ^ ((t as u64 + 1) * 0x1000_0001));
    let fail = |what: &str, e: StoreError| -> ! {
        say(&format!("violation {t} {what}: {e}"));
        std::process::exit(3)
    };
    loop {
        say(&format!("try {t} create"));
        let id = match handle.create(CreateTask::new()) {
            Ok(task) => task.task_id,
            Err(e) => fail("create", e),
        };
        say(&format!("ack {t} create {id}"));
        // Strong consistency: readable the moment create returned.
        if let Err(e) = handle.get(id, None) {
            fail("get after create", e);
        }
        for u in 0..rng.below(4) {
            let message = format!("m{u}");
            say(&format!("try {t} update {id} {message}"));
            if let Err(e) =
                handle.update_status(id, None, TaskStatus::Working, Some(message.clone()))
            {
                fail("update", e);
            }
            say(&format!("ack {t} update {id} {message}"));
        }
        if rng.below(3) == 0 {
            say(&format!("try {t} cancel {id}"));
            if let Err(e) = handle.cancel(id, None, None) {
                fail("cancel", e);
            }
            say(&format!("ack {t} cancel {id}"));
        } else {
            let n = rng.below(1_000_000);
            say(&format!("try {t} result {id} {n}"));
            let outcome = Outcome::result(json!({ "n": n }));
            if let Err(e) = handle.store_result(id, None, TaskStatus::Completed, outcome, None) {
                fail("result", e);
            }
            say(&format!("ack {t} result {id} {n}"));
        }
    }
}

/// What a task must look like.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct State {
    status: TaskStatus,
    message: Option<String>,
    result: Option<u64>,
}

impl State {
    fn fresh() -> State {
        State {
            status: TaskStatus::Working,
            message: None,
            result: None,
        }
    }
}

#[derive(Debug)]
struct Expected {
    acked: State,
    in_flight: Option<State>,
}

/// What the parent knows across cycles.
#[derive(Debug, Default)]
pub struct Model {
    tasks: HashMap<TaskId, Expected>,
    ids_ever: HashSet<TaskId>,
    pub acks: u64,
    pub recovered_in_flight: u64,
}

/// Per child thread: the operation it started and has not acknowledged yet.
#[derive(Default, Clone)]
struct Thread {
    in_flight_create: bool,
}

/// Reads the child's output until `kill_after` acknowledgements (then kills it) or its
/// end, applying every line to the model.
pub fn drive(model: &mut Model, mut child: Child, kill_after: u64) -> Result<usize, String> {
    let stdout: ChildStdout = child.stdout.take().ok_or("the child has no stdout")?;
    let lines = BufReader::new(stdout).lines();
    let mut threads = vec![Thread::default(); THREADS];
    let mut acks_seen = 0u64;
    let mut killed = false;
    for line in lines {
        let line = line.map_err(|e| e.to_string())?;
        // A record may follow other output on the same line (the test harness prints
        // `test ... ` without a newline before the child's first line), so find it.
        let start = ["try ", "ack ", "violation"]
            .iter()
            .filter_map(|marker| line.find(marker))
            .min();
        let Some(start) = start else { continue };
        let line = &line[start..];
        if line.starts_with("violation") {
            let _ = child.kill();
            return Err(format!("the child reported: {line}"));
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let (kind, t, op) = match words.as_slice() {
            [kind @ ("try" | "ack"), t, op, ..] => {
                (*kind, t.parse::<usize>().map_err(|e| e.to_string())?, *op)
            }
            _ => continue, // test-harness chatter
        };
        let id = words
            .get(3)
            .map(|w| TaskId::parse(w).ok_or(format!("bad id in {line}")));
        let next = |model: &Model, id: TaskId| -> Result<State, String> {
            let current = &model
                .tasks
                .get(&id)
                .ok_or(format!("unknown task in {line}"))?
                .acked;
            Ok(match op {
                "update" => State {
                    message: words.get(4).map(|m| m.to_string()),
                    ..current.clone()
                },
                "cancel" => State {
                    status: TaskStatus::Cancelled,
                    message: None,
                    result: None,
                },
                "result" => State {
                    status: TaskStatus::Completed,
                    message: None,
                    result: Some(words[4].parse().map_err(|_| format!("bad n in {line}"))?),
                },
                other => return Err(format!("unknown op {other}")),
            })
        };
        match (kind, op) {
            ("try", "create") => threads[t].in_flight_create = true,
            ("ack", "create") => {
                threads[t].in_flight_create = false;
                let id = id.ok_or("ack create without id")??;
                if !model.ids_ever.insert(id) {
                    return Err(format!("id {id} was handed out twice"));
                }
                model.tasks.insert(
                    id,
                    Expected {
                        acked: State::fresh(),
                        in_flight: None,
                    },
                );
            }
            ("try", _) => {
                let id = id.ok_or("try without id")??;
                let state = next(model, id)?;
                model.tasks.get_mut(&id).expect("known").in_flight = Some(state);
            }
            ("ack", _) => {
                let id = id.ok_or("ack without id")??;
                let task = model.tasks.get_mut(&id).expect("known");
                task.acked = task
                    .in_flight
                    .take()
                    .ok_or(format!("ack without try: {line}"))?;
            }
            _ => {}
        }
        if kind == "ack" {
            acks_seen += 1;
            model.acks += 1;
            if acks_seen >= kill_after && !killed {
                child.kill().map_err(|e| e.to_string())?; // SIGKILL
                killed = true;
            }
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !killed {
        return Err(format!("the child ended by itself: {status}"));
    }
    Ok(threads.iter().filter(|t| t.in_flight_create).count())
}

/// Opens the journal after a kill and checks it against the model; then folds in what
/// the recovery shows about operations that were in flight.
pub fn verify(model: &mut Model, dir: &Path, in_flight_creates: usize) -> Result<(), String> {
    let store = open(dir).map_err(|e| format!("recovery failed: {e}"))?;
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list(None, cursor.as_deref())
            .map_err(|e| e.to_string())?;
        listed.extend(page.tasks);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut seen = HashSet::new();
    let mut orphans = 0;
    for task in &listed {
        if !seen.insert(task.task_id) {
            return Err(format!("task {} listed twice", task.task_id));
        }
        let result = match store.get_result(task.task_id, None) {
            Ok(stored) => match stored.outcome {
                Outcome::Result(v) => v["n"].as_u64(),
                Outcome::Error(_) => return Err("unexpected error outcome".into()),
            },
            Err(_) => None,
        };
        let state = State {
            status: task.status,
            message: task.status_message.clone(),
            result,
        };
        match model.tasks.get_mut(&task.task_id) {
            Some(expected) => {
                if state == expected.acked {
                    expected.in_flight = None;
                } else if Some(&state) == expected.in_flight.as_ref() {
                    expected.acked = state;
                    expected.in_flight = None;
                    model.recovered_in_flight += 1;
                } else {
                    return Err(format!(
                        "task {}: recovered {state:?}, acknowledged {:?}, in flight {:?}",
                        task.task_id, expected.acked, expected.in_flight
                    ));
                }
            }
            None => {
                // A create that was durable but not yet acknowledged at the kill.
                if state != State::fresh() {
                    return Err(format!(
                        "unacknowledged task {} is half-applied: {state:?}",
                        task.task_id
                    ));
                }
                if !model.ids_ever.insert(task.task_id) {
                    return Err(format!("id {} repeats", task.task_id));
                }
                orphans += 1;
                model.tasks.insert(
                    task.task_id,
                    Expected {
                        acked: state,
                        in_flight: None,
                    },
                );
            }
        }
    }
    if orphans > in_flight_creates {
        return Err(format!(
            "{orphans} unacknowledged tasks, but only {in_flight_creates} creates were in flight"
        ));
    }
    if let Some((id, _)) = model.tasks.iter().find(|(id, _)| !seen.contains(*id)) {
        return Err(format!("acknowledged task {id} is missing after recovery"));
    }
    for expected in model.tasks.values_mut() {
        expected.in_flight = None; // the child that started it is gone
    }
    store.shutdown().map_err(|e| e.to_string())
}
