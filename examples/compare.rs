//! The Rust side of the store comparison (`bench/compare.sh` runs it; see bench/README.md).
//!
//! Two implementations go through the same workloads:
//!
//! * `ours`: this crate's [`Store`] through its blocking [`StoreHandle`] (owner thread,
//!   crossbeam channels, timer wheel);
//! * `mutex`: [`LockedStore`] below, a `parking_lot::Mutex<BTreeMap>` store written for the
//!   comparison: what a plain lock costs, with the same operations (random v4 ids, wall
//!   timestamps, TTL deadlines in a `BTreeSet`, creation-order paging).
//!
//! Every figure is printed as `RESULT <implementation> <workload> <value> <unit>`.
//!
//! ```text
//! cargo run --release --example compare            # everything but memory
//! cargo run --release --example compare -- mem ours 0 1000000    # one memory figure
//! cargo run --release --example compare -- cycle ours 100000 8   # one cycle figure
//! ```
//!
//! Cycle workloads (`create -> get -> store_result -> get_result`) run in chunks of
//! [`CHUNK`] cycles; the chunk's tasks carry a short TTL and are reclaimed between chunks,
//! untimed (for `ours` by advancing a manual clock and `sync()`, for `mutex` by a sweep
//! with a later `now`), so the live count stays within one chunk of the nominal size.
//! Expiry and idle CPU use the system clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mcp_task_store::{
    CreateTask, ExpiryPolicy, ManualClock, Outcome, Store, StoreConfig, StoreHandle, TaskId,
    TaskStatus,
};
use parking_lot::Mutex;
use serde_json::{json, Value};

/// Cycles per timed chunk.
const CHUNK: usize = 2_000;
/// Wall-time budget of one cycle measurement (after warm-up).
const BUDGET: Duration = Duration::from_millis(1_500);
/// Warm-up before each cycle measurement.
const WARMUP: Duration = Duration::from_millis(300);
/// TTL (ms) of the tasks a cycle creates.
const SHORT_TTL: u64 = 1;

fn result_value() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

fn result_1kb() -> Value {
    json!({"content": [{"type": "text", "text": "x".repeat(1024)}]})
}

fn report(implementation: &str, workload: &str, value: f64, unit: &str) {
    println!("RESULT {implementation} {workload} {value:.3} {unit}");
}

// ----- the Mutex<BTreeMap> store -----------------------------------------------------------

/// A task as the locked store hands it out (an owned snapshot, like ours).
#[derive(Clone, Debug)]
pub struct LockedTask {
    pub id: u128,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at: u64,
    pub last_updated_at: u64,
    pub ttl: Option<u64>,
    pub poll_interval: u64,
}

#[derive(Debug)]
struct LockedEntry {
    task: LockedTask,
    seq: u64,
    deadline: Option<Instant>,
    result: Option<Value>,
}

#[derive(Debug, Default)]
struct LockedInner {
    tasks: BTreeMap<u128, LockedEntry>,
    order: BTreeMap<u64, u128>,
    deadlines: BTreeSet<(Instant, u128)>,
    next_seq: u64,
}

impl LockedInner {
    fn remove(&mut self, id: u128) {
        if let Some(entry) = self.tasks.remove(&id) {
            self.order.remove(&entry.seq);
            if let Some(at) = entry.deadline {
                self.deadlines.remove(&(at, id));
            }
        }
    }

    /// The entry, after removing it if its deadline has passed (nothing is visible past
    /// its TTL, as in ours).
    fn live(&mut self, id: u128, now: Instant) -> Option<&mut LockedEntry> {
        let due = self.tasks.get(&id)?.deadline.is_some_and(|at| at <= now);
        if due {
            self.remove(id);
            return None;
        }
        self.tasks.get_mut(&id)
    }
}

/// `parking_lot::Mutex<BTreeMap>`: every operation takes the one lock.
#[derive(Debug, Default)]
pub struct LockedStore {
    inner: Mutex<LockedInner>,
    page_size: usize,
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl LockedStore {
    pub fn new(page_size: usize) -> LockedStore {
        LockedStore {
            inner: Mutex::new(LockedInner::default()),
            page_size,
        }
    }

    pub fn create(&self, ttl: Option<u64>) -> LockedTask {
        let id = uuid::Uuid::new_v4().as_u128();
        let now = Instant::now();
        let wall = wall_ms();
        let task = LockedTask {
            id,
            status: TaskStatus::Working,
            status_message: None,
            created_at: wall,
            last_updated_at: wall,
            ttl,
            poll_interval: 1000,
        };
        let deadline = ttl.map(|ms| now + Duration::from_millis(ms));
        let mut inner = self.inner.lock();
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.order.insert(seq, id);
        if let Some(at) = deadline {
            inner.deadlines.insert((at, id));
        }
        inner.tasks.insert(
            id,
            LockedEntry {
                task: task.clone(),
                seq,
                deadline,
                result: None,
            },
        );
        task
    }

    pub fn get(&self, id: u128) -> Option<LockedTask> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.live(id, now).map(|e| e.task.clone())
    }

    pub fn store_result(&self, id: u128, result: Value) -> Option<LockedTask> {
        let now = Instant::now();
        let wall = wall_ms();
        let mut inner = self.inner.lock();
        let entry = inner.live(id, now)?;
        if entry.task.status.is_terminal() {
            return None;
        }
        entry.task.status = TaskStatus::Completed;
        entry.task.last_updated_at = wall;
        entry.result = Some(result);
        Some(entry.task.clone())
    }

    pub fn get_result(&self, id: u128) -> Option<(LockedTask, Value)> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        let entry = inner.live(id, now)?;
        let result = entry.result.clone()?;
        Some((entry.task.clone(), result))
    }

    /// One page after `cursor` (a creation sequence number), in creation order.
    pub fn list(&self, cursor: Option<u64>) -> (Vec<LockedTask>, Option<u64>) {
        let inner = self.inner.lock();
        let start = cursor.map_or(0, |c| c + 1);
        let window: Vec<(u64, u128)> = inner
            .order
            .range(start..)
            .take(self.page_size + 1)
            .map(|(&seq, &id)| (seq, id))
            .collect();
        let on_page = &window[..window.len().min(self.page_size)];
        let next = (window.len() > self.page_size).then(|| on_page[on_page.len() - 1].0);
        let page = on_page
            .iter()
            .map(|(_, id)| inner.tasks[id].task.clone())
            .collect();
        (page, next)
    }

    /// Removes at most `max` tasks due by `now`; true if more are due.
    pub fn expire(&self, now: Instant, max: usize) -> bool {
        let mut inner = self.inner.lock();
        for _ in 0..max {
            let Some(&(at, id)) = inner.deadlines.first() else {
                return false;
            };
            if at > now {
                return false;
            }
            inner.remove(id);
        }
        inner.deadlines.first().is_some_and(|&(at, _)| at <= now)
    }

    pub fn len(&self) -> usize {
        self.inner.lock().tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ----- a uniform face for the cycle workloads ----------------------------------------------

trait Subject: Sync {
    /// One whole cycle on a new task.
    fn cycle(&self, result: &Value);
    /// Reclaims the chunk's tasks (untimed).
    fn reclaim(&self);
}

struct Ours {
    store: Store,
    clock: ManualClock,
}

#[allow(clippy::field_reassign_with_default)]
fn ours_config() -> StoreConfig {
    let mut config = StoreConfig::default();
    config.expiry = ExpiryPolicy::Remove;
    config
}

impl Ours {
    /// A store on a manual clock with `n` live tasks that never expire.
    fn new(n: usize) -> Ours {
        let clock = ManualClock::new();
        let store = Store::builder()
            .config(ours_config())
            .clock(clock.clone())
            .build()
            .expect("valid config");
        for _ in 0..n {
            store.create(CreateTask::new()).expect("create");
        }
        Ours { store, clock }
    }

    fn handle(&self) -> &StoreHandle {
        &self.store
    }
}

impl Subject for Ours {
    fn cycle(&self, result: &Value) {
        let h = self.handle();
        let id = h
            .create(CreateTask::new().ttl(SHORT_TTL))
            .expect("create")
            .task_id;
        std::hint::black_box(h.get(id, None).expect("get"));
        let outcome = Outcome::result(result.clone());
        let done = h.store_result(id, None, TaskStatus::Completed, outcome, None);
        std::hint::black_box(done.expect("store_result"));
        std::hint::black_box(h.get_result(id, None).expect("get_result"));
    }

    fn reclaim(&self) {
        self.clock.advance(Duration::from_millis(SHORT_TTL + 1));
        self.store.sync().expect("store alive");
    }
}

struct Locked {
    store: LockedStore,
}

/// TTL (ms) of the locked store's cycle tasks: long enough never to expire mid-cycle on
/// the system clock; they are swept between chunks with a `now` past it.
const LOCKED_CYCLE_TTL: u64 = 60_000;

impl Locked {
    fn new(n: usize) -> Locked {
        let store = LockedStore::new(100);
        for _ in 0..n {
            store.create(None);
        }
        Locked { store }
    }
}

impl Subject for Locked {
    fn cycle(&self, result: &Value) {
        let s = &self.store;
        let id = s.create(Some(LOCKED_CYCLE_TTL)).id;
        std::hint::black_box(s.get(id).expect("get"));
        std::hint::black_box(s.store_result(id, result.clone()).expect("store_result"));
        std::hint::black_box(s.get_result(id).expect("get_result"));
    }

    fn reclaim(&self) {
        let later = Instant::now() + Duration::from_millis(LOCKED_CYCLE_TTL + 1);
        while self.store.expire(later, usize::MAX) {}
    }
}

/// Cycles per second with `threads` callers: chunks of [`CHUNK`] cycles shared out over
/// the threads, for [`BUDGET`] of timed work after [`WARMUP`].
fn cycles_per_sec(subject: &dyn Subject, threads: usize) -> f64 {
    let result = result_value();
    let start = Barrier::new(threads + 1);
    let end = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        for t in 0..threads {
            let (start, end, stop, result) = (&start, &end, &stop, &result);
            scope.spawn(move || loop {
                start.wait();
                if stop.load(Ordering::Acquire) {
                    return;
                }
                for _ in (t..CHUNK).step_by(threads) {
                    subject.cycle(result);
                }
                end.wait();
            });
        }
        let mut timed = Duration::ZERO;
        let mut cycles = 0usize;
        let began = Instant::now();
        loop {
            let warm = began.elapsed() < WARMUP;
            if !warm && timed >= BUDGET {
                break;
            }
            start.wait();
            let t0 = Instant::now();
            end.wait();
            if !warm {
                timed += t0.elapsed();
                cycles += CHUNK;
            }
            subject.reclaim();
        }
        stop.store(true, Ordering::Release);
        start.wait();
        cycles as f64 / timed.as_secs_f64()
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// `get` round trips (1 caller) on scattered live tasks: (p50, p99) in µs.
fn latencies(samples: usize, mut get: impl FnMut(usize)) -> (f64, f64) {
    for i in 0..samples / 10 {
        get(i);
    }
    let mut us: Vec<f64> = (0..samples)
        .map(|i| {
            let t0 = Instant::now();
            get(i);
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(f64::total_cmp);
    (percentile(&us, 0.5), percentile(&us, 0.99))
}

const STRIDE: usize = 7_919;
const LATENCY_SAMPLES: usize = 200_000;

fn run_cycles() {
    for n in [1_000, 10_000, 100_000, 1_000_000] {
        let ours = Ours::new(n);
        let label = size_label(n);
        report(
            "ours",
            &format!("cycle_{label}"),
            cycles_per_sec(&ours, 1),
            "cycles/s",
        );
        if n == 100_000 {
            for threads in [2, 8] {
                let rate = cycles_per_sec(&ours, threads);
                report(
                    "ours",
                    &format!("cycle_{label}_t{threads}"),
                    rate,
                    "cycles/s",
                );
            }
            // get latency at 100k, 1 caller
            let ids: Vec<TaskId> = {
                let mut ids = Vec::with_capacity(n);
                let mut cursor: Option<String> = None;
                loop {
                    let page = ours.handle().list(None, cursor.as_deref()).expect("list");
                    ids.extend(page.tasks.iter().map(|t| t.task_id));
                    match page.next_cursor {
                        Some(c) => cursor = Some(c),
                        None => break,
                    }
                }
                ids
            };
            let h = ours.handle();
            let (p50, p99) = latencies(LATENCY_SAMPLES, |i| {
                let id = ids[i.wrapping_mul(STRIDE) % ids.len()];
                std::hint::black_box(h.get(id, None).expect("get"));
            });
            report("ours", "get_p50_100k", p50, "us");
            report("ours", "get_p99_100k", p99, "us");
            // a full list walk of 100,000 tasks at page size 100 (the store's default)
            let walks: Vec<f64> = (0..5)
                .map(|_| {
                    let t0 = Instant::now();
                    let mut cursor: Option<String> = None;
                    let mut seen = 0;
                    loop {
                        let page = h.list(None, cursor.as_deref()).expect("list");
                        seen += page.tasks.len();
                        match page.next_cursor {
                            Some(c) => cursor = Some(c),
                            None => break,
                        }
                    }
                    assert_eq!(seen, n, "the walk sees every task once");
                    t0.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            report("ours", "list_walk_100k_p100", median(walks), "ms");
        }
        drop(ours);

        let locked = Locked::new(n);
        report(
            "mutex",
            &format!("cycle_{label}"),
            cycles_per_sec(&locked, 1),
            "cycles/s",
        );
        if n == 100_000 {
            for threads in [2, 8] {
                let rate = cycles_per_sec(&locked, threads);
                report(
                    "mutex",
                    &format!("cycle_{label}_t{threads}"),
                    rate,
                    "cycles/s",
                );
            }
            let ids: Vec<u128> = locked.store.inner.lock().tasks.keys().copied().collect();
            let s = &locked.store;
            let (p50, p99) = latencies(LATENCY_SAMPLES, |i| {
                let id = ids[i.wrapping_mul(STRIDE) % ids.len()];
                std::hint::black_box(s.get(id).expect("get"));
            });
            report("mutex", "get_p50_100k", p50, "us");
            report("mutex", "get_p99_100k", p99, "us");
            let walks: Vec<f64> = (0..5)
                .map(|_| {
                    let t0 = Instant::now();
                    let mut cursor = None;
                    let mut seen = 0;
                    loop {
                        let (page, next) = s.list(cursor);
                        seen += page.len();
                        match next {
                            Some(c) => cursor = Some(c),
                            None => break,
                        }
                    }
                    assert_eq!(seen, n, "the walk sees every task once");
                    t0.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            report("mutex", "list_walk_100k_p100", median(walks), "ms");
        }
    }
}

fn size_label(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}m", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

// ----- CPU and memory readings --------------------------------------------------------------

/// CPU time (ns) the thread named `name` of this process has used (from schedstat).
fn thread_cpu_ns(name: &str) -> Option<u64> {
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let path = entry.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            return stat.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

/// CPU time (ns) of the calling thread.
fn own_thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// User + system CPU time of the whole process, in clock ticks (from /proc/self/stat).
fn process_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields[11].parse().expect("utime");
    let stime: u64 = fields[12].parse().expect("stime");
    utime + stime
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

// ----- expiry and idle ----------------------------------------------------------------------

const EXPIRE_N: usize = 1_000_000;
/// Creations timed to estimate how long creating [`EXPIRE_N`] takes.
const CALIBRATE: usize = 20_000;
/// Idle window measured before the deadline.
const IDLE: Duration = Duration::from_secs(10);

/// Paced `get`s from another thread while `running`: (max µs, p99 µs, count).
fn probe(running: &AtomicBool, mut get: impl FnMut()) -> (f64, f64, usize) {
    let mut us = Vec::new();
    while running.load(Ordering::Acquire) {
        let t0 = Instant::now();
        get();
        us.push(t0.elapsed().as_secs_f64() * 1e6);
        thread::sleep(Duration::from_micros(100));
    }
    us.sort_by(f64::total_cmp);
    if us.is_empty() {
        return (0.0, 0.0, 0);
    }
    (us[us.len() - 1], percentile(&us, 0.99), us.len())
}

fn run_expiry_ours() {
    let store = Store::builder()
        .config(ours_config())
        .build()
        .expect("valid config");
    let h = store.handle();
    let keeper = h.create(CreateTask::new()).expect("create").task_id;
    // Calibrate: time CALIBRATE creations (tasks without a TTL, which stay, like `keeper`),
    // then give all EXPIRE_N tasks one deadline after the estimated creation time plus the
    // idle window.
    let t0 = Instant::now();
    for _ in 0..CALIBRATE {
        h.create(CreateTask::new()).expect("create");
    }
    let estimate = t0.elapsed().mul_f64(EXPIRE_N as f64 / CALIBRATE as f64);
    let t0 = Instant::now();
    let deadline = t0 + estimate.mul_f64(1.5) + IDLE + Duration::from_secs(2);
    for _ in 0..EXPIRE_N {
        let left = deadline.saturating_duration_since(Instant::now());
        h.create(CreateTask::new().ttl(left.as_millis().max(1) as u64))
            .expect("create");
    }
    let live = CALIBRATE + 1;
    let created = t0.elapsed();
    let idle_fits = Instant::now() + IDLE + Duration::from_millis(500) < deadline;
    if !idle_fits {
        println!("NOTE ours idle window skipped: creating took {created:?}, past the estimate");
    }
    // Idle: nobody calls the store for IDLE; the process's CPU time is read around it.
    // Only the sleep lies between the two process readings: reading the owner thread's
    // time (a directory walk under /proc) inside them once cost a 10 ms tick.
    if idle_fits {
        let owner = thread_cpu_ns("mcp-task-store").expect("owner thread");
        let ticks = process_cpu_ticks();
        thread::sleep(IDLE);
        let ticks = process_cpu_ticks() - ticks;
        let owner = thread_cpu_ns("mcp-task-store").expect("owner thread") - owner;
        let tick_ms = 1000.0 / clock_ticks_per_sec();
        report("ours", "idle_cpu_1m_10s", ticks as f64 * tick_ms, "ms");
        report("ours", "idle_owner_cpu_1m_10s", owner as f64 / 1e6, "ms");
    }
    // Expiry: the owner thread's CPU from just before the deadline until the store is empty,
    // with a paced prober measuring what other callers wait meanwhile.
    thread::sleep(deadline.saturating_duration_since(Instant::now() + Duration::from_millis(200)));
    let running = AtomicBool::new(true);
    let (before, after, stall) = thread::scope(|scope| {
        let prober = scope.spawn(|| {
            let h = store.handle();
            probe(&running, || {
                std::hint::black_box(h.get(keeper, None).expect("keeper lives"));
            })
        });
        let before = thread_cpu_ns("mcp-task-store").expect("owner thread");
        while h.stats().expect("stats").tasks > live {
            thread::sleep(Duration::from_millis(5));
        }
        let after = thread_cpu_ns("mcp-task-store").expect("owner thread");
        running.store(false, Ordering::Release);
        (before, after, prober.join().expect("prober"))
    });
    let per_task_us = (after - before) as f64 / 1e3 / EXPIRE_N as f64;
    report("ours", "expire_1m_owner_cpu_per_task", per_task_us, "us");
    report("ours", "expire_1m_stall_max", stall.0 / 1e3, "ms");
    report("ours", "expire_1m_stall_p99", stall.1 / 1e3, "ms");
}

fn run_expiry_locked() {
    let store = LockedStore::new(100);
    let keeper = store.create(None).id;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(5);
    for _ in 0..EXPIRE_N {
        let left = deadline.saturating_duration_since(Instant::now());
        store.create(Some(left.as_millis() as u64));
    }
    thread::sleep(deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(5));
    let running = AtomicBool::new(true);
    let (cpu, stall) = thread::scope(|scope| {
        let prober = scope.spawn(|| {
            probe(&running, || {
                std::hint::black_box(store.get(keeper).expect("keeper lives"));
            })
        });
        // A sweeper in bounded batches (1024, as ours), on this thread.
        let before = own_thread_cpu_ns();
        while store.expire(Instant::now(), 1024) {}
        let cpu = own_thread_cpu_ns() - before;
        running.store(false, Ordering::Release);
        (cpu, prober.join().expect("prober"))
    });
    assert_eq!(store.len(), 1);
    let per_task_us = cpu as f64 / 1e3 / EXPIRE_N as f64;
    report("mutex", "expire_1m_owner_cpu_per_task", per_task_us, "us");
    report("mutex", "expire_1m_stall_max", stall.0 / 1e3, "ms");
    report("mutex", "expire_1m_stall_p99", stall.1 / 1e3, "ms");
}

fn clock_ticks_per_sec() -> f64 {
    // USER_HZ, the unit of /proc/self/stat times, is 100 on Linux (no libc here to ask).
    100.0
}

// ----- memory -------------------------------------------------------------------------------

/// RSS growth per task for `n` live tasks (fresh process), optionally each with a 1 KB
/// result.
fn run_mem(implementation: &str, payload: usize, n: usize) {
    let result = if payload > 0 {
        Some(result_1kb())
    } else {
        None
    };
    let workload = if payload > 0 {
        "mem_per_task_1kb_result"
    } else {
        "mem_per_task"
    };
    match implementation {
        "ours" => {
            let store = Store::builder().build().expect("store");
            store.sync().expect("alive");
            let base = rss_bytes();
            for _ in 0..n {
                let task = store.create(CreateTask::new()).expect("create");
                if let Some(r) = &result {
                    let outcome = Outcome::result(r.clone());
                    store
                        .store_result(task.task_id, None, TaskStatus::Completed, outcome, None)
                        .expect("store_result");
                }
            }
            store.sync().expect("alive");
            let grown = rss_bytes().saturating_sub(base);
            report("ours", workload, grown as f64 / n as f64, "bytes");
        }
        "mutex" => {
            let store = LockedStore::new(100);
            let base = rss_bytes();
            for _ in 0..n {
                let task = store.create(None);
                if let Some(r) = &result {
                    store
                        .store_result(task.id, r.clone())
                        .expect("store_result");
                }
            }
            let grown = rss_bytes().saturating_sub(base);
            report("mutex", workload, grown as f64 / n as f64, "bytes");
        }
        other => panic!("unknown implementation {other}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["mem", implementation, payload, n] => run_mem(
            implementation,
            payload.parse().expect("payload bytes"),
            n.parse().expect("task count"),
        ),
        ["cycles"] => run_cycles(),
        // One figure, for profiling: `cycle <ours|mutex> <live tasks> <callers>`.
        ["cycle", implementation, n, threads] => {
            let n: usize = n.parse().expect("task count");
            let threads: usize = threads.parse().expect("caller threads");
            let subject: Box<dyn Subject> = match *implementation {
                "ours" => Box::new(Ours::new(n)),
                "mutex" => Box::new(Locked::new(n)),
                other => panic!("unknown implementation {other}"),
            };
            let rate = cycles_per_sec(subject.as_ref(), threads);
            let workload = format!("cycle_{}_t{threads}", size_label(n));
            report(implementation, &workload, rate, "cycles/s");
        }
        ["expiry"] => {
            run_expiry_ours();
            run_expiry_locked();
        }
        [] | ["all"] => {
            run_cycles();
            run_expiry_ours();
            run_expiry_locked();
        }
        _ => {
            eprintln!(
                "usage: compare [all | cycles | expiry | mem <ours|mutex> <payload> <n> \\
                 | cycle <ours|mutex> <n> <callers>]"
            );
            std::process::exit(2);
        }
    }
}
