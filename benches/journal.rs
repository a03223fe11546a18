//! Acknowledged creates per second: in memory, and with the journal in each durability
//! mode, with 1 and 8 caller threads. With fsync, group commit lets many callers share one
//! sync, so 8 callers should get several times the rate of 1.
//!
//! `cargo bench --bench journal` (set `JOURNAL_BENCH_SECS` to change the 2 s per figure, and
//! `JOURNAL_BENCH_DIR` to put the journal on another disk; the default is the system's
//! temp dir).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mcp_task_store::{CreateTask, Durability, JournalConfig, Store, StoreBuilder};

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
}
