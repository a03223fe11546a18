//! Task store benchmarks (criterion).
//!
//! Groups (throughput is reported per operation; for `cycle` per whole cycle):
//!
//! * `machine/{create,get,complete}/{1000,100000}`: the bare [`StoreMachine`] on the calling
//!   thread, no channels, with 1,000 or 100,000 live tasks (random v4 ids). `create` makes a
//!   task with a TTL (a BTreeMap insert, a session-index insert and a timer-wheel insert);
//!   `get` reads a live task in scattered order; `complete` is `store_result` on a running
//!   task.
//! * `handle/{create,get,complete}/{1000,100000}x{1,8}`: the same operations through a
//!   [`StoreHandle`] from 1 or 8 caller threads at once (N operations spread over the
//!   threads; the time is wall time for all of them). `create` and `complete` are round
//!   trips to the owner thread; `get` is answered on the calling thread under a read lock.
//! * `cycle/{1000,100000,1000000}x1`, `cycle/100000x{2,8}`: a task's whole life through the
//!   handle, `create -> get -> store_result -> get_result`, with that many other live tasks.
//! * `expiry/1000000`: the bare machine reclaiming 1,000,000 due tasks in batches of 1,024
//!   (what the owner thread pays; creating them is untimed).
//! * `list_walk/100000_p100`: a full `list` walk of 100,000 tasks, page size 100, through
//!   the handle (one iteration = the whole walk).
//!
//! The `handle` group runs with 1, 2 and 8 callers. Memory per live task is not a
//! criterion figure (it needs a fresh process): `cargo run --release --example compare --
//! mem ours 0 1000000` (see bench/README.md).
//!
//! Operations run in timed chunks of at most [`CHUNK`]; the tasks a chunk creates have a
//! 1 ms TTL and are reclaimed between chunks (untimed, by advancing the manual clock), so
//! the live count stays within [`CHUNK`] of the nominal size however long criterion runs.
//! Setup (creating a chunk's tasks for `complete`, prefilling 100,000 tasks) is untimed.
//!
//! Run everything (a few minutes): `cargo bench --bench store`; one group:
//! `cargo bench --bench store -- handle`; a quick look:
//! `cargo bench --bench store -- --warm-up-time 1 --measurement-time 2`.
//! The machine figures are the store's own cost; the handle figures add the channel round
//! trip and the thread hand-off, which dominate on small machines.

use std::hint::black_box;
use std::sync::{Barrier, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mcp_task_store::{
    CreateTask, ExpiryPolicy, ManualClock, Now, Outcome, Store, StoreConfig, StoreHandle,
    StoreMachine, TaskId, TaskStatus,
};
use serde_json::json;

/// Live task counts the `machine` and `handle` groups run at.
const SIZES: [usize; 2] = [1_000, 100_000];
/// Caller threads the `handle` group (and `cycle` at 100,000) run with.
const THREADS: [usize; 3] = [1, 2, 8];
/// Most operations per timed chunk.
const CHUNK: u64 = 1_000;
/// TTL (ms) of the tasks the benchmarks create, so they can be reclaimed between chunks.
const SHORT_TTL: u64 = 1;
/// Spreads consecutive reads over the whole id set (coprime with both sizes).
const STRIDE: usize = 7_919;

fn outcome() -> Outcome {
    Outcome::result(json!({"content": [{"type": "text", "text": "done"}]}))
}

fn short_task() -> CreateTask {
    CreateTask::new().ttl(SHORT_TTL)
}

/// The default configuration, except that expired running tasks are removed at once
/// (no grace period), which keeps the live count flat.
// `StoreConfig` is `#[non_exhaustive]`: outside the crate it has no struct literal.
#[allow(clippy::field_reassign_with_default)]
fn config() -> StoreConfig {
    let mut config = StoreConfig::default();
    config.expiry = ExpiryPolicy::Remove;
    config
}

/// Chunk sizes adding up to `iters`.
fn chunks(iters: u64) -> impl Iterator<Item = usize> {
    let full = iters / CHUNK;
    let rest = iters % CHUNK;
    std::iter::repeat_n(CHUNK as usize, full as usize).chain((rest > 0).then_some(rest as usize))
}

// ----- machine -----------------------------------------------------------------------------

/// A bare machine holding `live` tasks that never expire, and its clock.
struct Bare {
    m: StoreMachine<u32>,
    now: u64,
    live: Vec<TaskId>,
}

impl Bare {
    fn new(n: usize) -> Bare {
        let mut m = StoreMachine::new(config(), 0x5eed).expect("valid config");
        let live = (0..n)
            .map(|_| {
                let id = TaskId::random();
                m.create(Now::at(0), id, CreateTask::new()).expect("create");
                id
            })
            .collect();
        Bare { m, now: 0, live }
    }

    fn at(&self) -> Now {
        Now::at(self.now)
    }

    /// Moves past the short TTL and reclaims every task made since the last call.
    fn reclaim(&mut self) {
        self.now += SHORT_TTL + 1;
        while self.m.handle_timeout(self.at(), usize::MAX) {}
        debug_assert_eq!(self.m.len(), self.live.len());
    }
}

fn bench_machine(c: &mut Criterion) {
    let mut group = c.benchmark_group("machine");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let mut bare = Bare::new(n);
        group.bench_function(BenchmarkId::new("create", n), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for k in chunks(iters) {
                    let ids: Vec<TaskId> = (0..k).map(|_| TaskId::random()).collect();
                    let now = bare.at();
                    let start = Instant::now();
                    for &id in &ids {
                        black_box(bare.m.create(now, id, short_task()).expect("create"));
                    }
                    total += start.elapsed();
                    bare.reclaim();
                }
                total
            })
        });
        group.bench_function(BenchmarkId::new("get", n), |b| {
            b.iter_custom(|iters| {
                let now = bare.at();
                let len = bare.live.len();
                let start = Instant::now();
                for i in 0..iters as usize {
                    let id = bare.live[i.wrapping_mul(STRIDE) % len];
                    black_box(bare.m.get(now, id, None).expect("get"));
                }
                start.elapsed()
            })
        });
        let done = outcome();
        group.bench_function(BenchmarkId::new("complete", n), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for k in chunks(iters) {
                    let now = bare.at();
                    let ids: Vec<TaskId> = (0..k)
                        .map(|_| {
                            let id = TaskId::random();
                            bare.m.create(now, id, short_task()).expect("create");
                            id
                        })
                        .collect();
                    let start = Instant::now();
                    for &id in &ids {
                        let status = TaskStatus::Completed;
                        let result = bare
                            .m
                            .store_result(now, id, None, status, done.clone(), None);
                        black_box(result.expect("store_result"));
                    }
                    total += start.elapsed();
                    bare.reclaim();
                }
                total
            })
        });
    }
    group.finish();
}

// ----- handle ------------------------------------------------------------------------------

/// A threaded store on a manual clock holding `live` tasks that never expire.
struct Threaded {
    store: Store,
    clock: ManualClock,
    live: Vec<TaskId>,
}

impl Threaded {
    fn new(n: usize) -> Threaded {
        let clock = ManualClock::new();
        let store = Store::builder()
            .config(config())
            .clock(clock.clone())
            .build()
            .expect("valid config");
        let live = (0..n)
            .map(|_| store.create(CreateTask::new()).expect("create").task_id)
            .collect();
        Threaded { store, clock, live }
    }

    fn handle(&self) -> &StoreHandle {
        &self.store
    }

    /// Moves past the short TTL and lets the owner thread reclaim the short-lived tasks.
    fn reclaim(&self) {
        self.clock.advance(Duration::from_millis(SHORT_TTL + 1));
        self.store.sync().expect("store alive");
    }
}

/// Runs `iters` operations spread over `threads` caller threads, in chunks, and returns
/// the wall time of the chunks alone. Before each chunk `prepare(k)` (untimed) builds the
/// chunk's shared input; `op(input, i)` is operation `i` of `0..k` (thread `t` runs the `i`
/// with `i % threads == t`); after each chunk `after()` runs, untimed.
fn timed_chunks<T: Send + Sync>(
    iters: u64,
    threads: usize,
    mut prepare: impl FnMut(usize) -> T,
    op: impl Fn(&T, usize) + Sync,
    mut after: impl FnMut(),
) -> Duration {
    let sizes: Vec<usize> = chunks(iters).collect();
    let input: RwLock<Option<T>> = RwLock::new(None);
    let start = Barrier::new(threads + 1);
    let end = Barrier::new(threads + 1);
    thread::scope(|scope| {
        for t in 0..threads {
            let (sizes, input, start, end, op) = (&sizes, &input, &start, &end, &op);
            scope.spawn(move || {
                for &k in sizes {
                    start.wait();
                    {
                        let guard = input.read().expect("not poisoned");
                        let input = guard.as_ref().expect("prepared");
                        for i in (t..k).step_by(threads) {
                            op(input, i);
                        }
                    }
                    end.wait();
                }
            });
        }
        let mut total = Duration::ZERO;
        for &k in &sizes {
            *input.write().expect("not poisoned") = Some(prepare(k));
            start.wait();
            let began = Instant::now();
            end.wait();
            total += began.elapsed();
            after();
        }
        total
    })
}

fn bench_handle(c: &mut Criterion) {
    let mut group = c.benchmark_group("handle");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let store = Threaded::new(n);
        let handle = store.handle();
        let done = outcome();
        for threads in THREADS {
            let id = |op: &str| BenchmarkId::new(op, format!("{n}x{threads}"));
            group.bench_function(id("create"), |b| {
                b.iter_custom(|iters| {
                    timed_chunks(
                        iters,
                        threads,
                        |_| (),
                        |_, _| {
                            black_box(handle.create(short_task()).expect("create"));
                        },
                        || store.reclaim(),
                    )
                })
            });
            group.bench_function(id("get"), |b| {
                b.iter_custom(|iters| {
                    let live = &store.live;
                    timed_chunks(
                        iters,
                        threads,
                        |_| (),
                        |_, i| {
                            let id = live[i.wrapping_mul(STRIDE) % live.len()];
                            black_box(handle.get(id, None).expect("get"));
                        },
                        || {},
                    )
                })
            });
            group.bench_function(id("complete"), |b| {
                b.iter_custom(|iters| {
                    timed_chunks(
                        iters,
                        threads,
                        |k| -> Vec<TaskId> {
                            (0..k)
                                .map(|_| handle.create(short_task()).expect("create").task_id)
                                .collect()
                        },
                        |ids, i| {
                            let status = TaskStatus::Completed;
                            let result =
                                handle.store_result(ids[i], None, status, done.clone(), None);
                            black_box(result.expect("store_result"));
                        },
                        || store.reclaim(),
                    )
                })
            });
        }
    }
    group.finish();
}

/// Live task counts the `cycle` group runs at (1 caller); 100,000 also runs with 2 and 8.
const CYCLE_SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];

fn bench_cycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("cycle");
    group.throughput(Throughput::Elements(1));
    let done = outcome();
    for n in CYCLE_SIZES {
        let store = Threaded::new(n);
        let handle = store.handle();
        let threads: &[usize] = if n == 100_000 { &THREADS } else { &[1] };
        for &threads in threads {
            let id = BenchmarkId::from_parameter(format!("{n}x{threads}"));
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    timed_chunks(
                        iters,
                        threads,
                        |_| (),
                        |_, _| {
                            let id = handle.create(short_task()).expect("create").task_id;
                            black_box(handle.get(id, None).expect("get"));
                            let status = TaskStatus::Completed;
                            let result = handle.store_result(id, None, status, done.clone(), None);
                            black_box(result.expect("store_result"));
                            black_box(handle.get_result(id, None).expect("get_result"));
                        },
                        || store.reclaim(),
                    )
                })
            });
        }
    }
    group.finish();
}

/// Tasks the `expiry` group expires per iteration.
const EXPIRE_N: usize = 1_000_000;

/// The owner thread's share of expiry: the bare machine reclaiming 1,000,000 due tasks in
/// bounded batches of 1,024 (as the actor does). Creating them is untimed.
fn bench_expiry(c: &mut Criterion) {
    let mut group = c.benchmark_group("expiry");
    group.throughput(Throughput::Elements(EXPIRE_N as u64));
    group.sample_size(10);
    group.bench_function("1000000", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut m: StoreMachine<u32> =
                    StoreMachine::new(config(), 0x5eed).expect("valid config");
                for _ in 0..EXPIRE_N {
                    m.create(Now::at(0), TaskId::random(), CreateTask::new().ttl(10))
                        .expect("create");
                }
                let due = Now::at(11);
                let start = Instant::now();
                while m.handle_timeout(due, 1024) {}
                total += start.elapsed();
                assert!(m.is_empty());
            }
            total
        })
    });
    group.finish();
}

/// A full `list` walk of 100,000 tasks at page size 100, through the handle.
fn bench_list(c: &mut Criterion) {
    let mut group = c.benchmark_group("list_walk");
    group.sample_size(10);
    let store = Threaded::new(100_000);
    let handle = store.handle();
    group.bench_function("100000_p100", |b| {
        b.iter(|| {
            let mut cursor: Option<String> = None;
            let mut seen = 0;
            loop {
                let page = handle.list(None, cursor.as_deref()).expect("list");
                seen += page.tasks.len();
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            assert_eq!(seen, 100_000);
        })
    });
    group.finish();
}

fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = criterion();
    targets = bench_machine, bench_handle, bench_cycle, bench_expiry, bench_list
}
criterion_main!(benches);
