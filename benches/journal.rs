//! Acknowledged creates per second: in memory, and with the journal in each durability
//! mode, with 1 and 8 caller threads. With fsync, group commit lets many callers share one
//! sync, so 8 callers should get several times the rate of 1.
//!
//! Then what compaction costs callers: a store of 50,000 tasks under `Flush`, compacting
//! whenever its log outgrows the live data (ratio 1, so that it does every second or so),
//! takes updates as fast as one thread sends them while a second thread times one update
//! every 200 us; the same with compaction off. The longest waits of the two should match.
//!
//! `cargo bench --bench journal` (set `JOURNAL_BENCH_SECS` to change the 2 s per figure, and
//! `JOURNAL_BENCH_DIR` to put the journal on another disk; the default is the system's
//! temp dir).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mcp_task_store::{CreateTask, Durability, JournalConfig, Store, StoreBuilder, TaskStatus};

fn creates_per_second(builder: StoreBuilder, threads: usize, secs: f64) -> f64 {
    let store = builder.build().expect("store");
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let handle = store.handle();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let until = Instant::now() + Duration::from_secs_f64(secs);
                let mut done = 0u64;
                while Instant::now() < until {
                    handle.create(CreateTask::new()).expect("create");
                    done += 1;
                }
                done
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let total: u64 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    total as f64 / began.elapsed().as_secs_f64()
}

/// Waits for one update while another thread keeps the store busy with updates for
/// `secs`: the longest wait, the 99.9th percentile, and how many snapshots were written.
fn update_waits(
    root: &std::path::Path,
    tasks: usize,
    compact: bool,
    secs: f64,
) -> (Duration, Duration, usize) {
    let dir = tempfile::tempdir_in(root).expect("temp dir");
    let mut journal = JournalConfig::new(dir.path());
    journal.durability = Durability::Flush;
    journal.compact_ratio = 1;
    if !compact {
        journal.compact_min_bytes = u64::MAX;
    }
    let store = Store::builder().journal(journal).build().expect("store");
    let ids: Vec<_> = (0..tasks)
        .map(|_| store.create(CreateTask::new()).expect("create").task_id)
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (handle, stop, id) = (store.handle(), stop.clone(), ids[0]);
        let dir = dir.path().to_owned();
        std::thread::spawn(move || {
            let mut waits = Vec::new();
            let mut snapshots = std::collections::BTreeSet::new();
            while !stop.load(Ordering::Relaxed) {
                let began = Instant::now();
                handle
                    .update_status(id, None, TaskStatus::Working, None)
                    .expect("update");
                waits.push(began.elapsed());
                if waits.len() % 64 == 0 {
                    for entry in std::fs::read_dir(&dir).expect("dir").flatten() {
                        let name = entry.file_name().to_string_lossy().into_owned();
                        if name.starts_with("snapshot-") {
                            snapshots.insert(name);
                        }
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            waits.sort_unstable();
            let p999 = waits[waits.len() * 999 / 1000];
            (*waits.last().expect("waits"), p999, snapshots.len())
        })
    };
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut n = 0;
    while Instant::now() < until {
        let id = ids[1 + n % (tasks - 1)];
        store
            .update_status(id, None, TaskStatus::Working, Some(format!("step {n}")))
            .expect("update");
        n += 1;
    }
    stop.store(true, Ordering::Relaxed);
    probe.join().expect("probe")
}

fn main() {
    // `cargo test --benches` runs bench targets with `--bench`-less args; stay quick then.
    if std::env::args().any(|a| a == "--test") {
        return;
    }
    let secs: f64 = std::env::var("JOURNAL_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let root = std::env::var("JOURNAL_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    println!(
        "acknowledged creates per second ({secs} s per figure, journal under {})",
        root.display()
    );
    let mut fsync = [0.0; 2];
    for (slot, threads) in [1usize, 8].into_iter().enumerate() {
        let memory = creates_per_second(Store::builder(), threads, secs);
        println!("RESULT memory           creates_{threads}_threads {memory:>10.0} ops/s");
        for (name, durability) in [
            ("journal-fsync", Durability::Fsync),
            ("journal-flush", Durability::Flush),
            ("journal-none", Durability::None),
        ] {
            let dir = tempfile::tempdir_in(&root).expect("temp dir");
            let mut journal = JournalConfig::new(dir.path());
            journal.durability = durability;
            let rate = creates_per_second(Store::builder().journal(journal), threads, secs);
            println!("RESULT {name:<15} creates_{threads}_threads {rate:>10.0} ops/s");
            if durability == Durability::Fsync {
                fsync[slot] = rate;
            }
        }
    }
    println!(
        "group commit: 8 callers get {:.1}x the fsync rate of 1 (target >= 4x)",
        fsync[1] / fsync[0]
    );
    let tasks = 50_000;
    println!(
        "one update's wait while another thread updates {tasks} tasks under flush ({:.0} s each)",
        secs * 3.0
    );
    for compact in [true, false] {
        let (worst, p999, snapshots) = update_waits(&root, tasks, compact, secs * 3.0);
        let name = if compact {
            "compacting"
        } else {
            "no-compaction"
        };
        println!(
            "RESULT journal-{name:<13} update_wait_max {:>8.3} ms (p99.9 {:.3} ms, {snapshots} snapshots seen)",
            worst.as_secs_f64() * 1e3,
            p999.as_secs_f64() * 1e3
        );
    }
}
