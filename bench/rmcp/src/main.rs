//! The Rust SDK's `rmcp::task_manager::TaskManager` (rmcp 3.9.0, SEP-2663) through the
//! comparison workloads. Prints `RESULT rmcp <workload> <value> <unit>` and `NOTE` lines.
//!
//! `TaskManager` is not a store with a `store_result`: it runs each task's future on tokio
//! and records the outcome when the future ends. The cycle is therefore:
//! `spawn` (create; the future waits on a oneshot) -> `get_task` -> send the result through
//! the oneshot and yield until the manager has recorded it (store result) -> `get_task`,
//! whose payload carries the result (get result). One current-thread runtime, one caller.
//!
//! Every `TaskManager` entry point sweeps the whole map under its mutex, so every call is
//! O(n), and so is every `spawn` of a prefill: prefilling n tasks costs O(n^2). Sizes whose
//! estimated prefill exceeds [`PREFILL_LIMIT`] are skipped with a NOTE. Completed tasks are
//! retained for one more TTL and cannot be removed from outside, so each measurement round
//! runs at most n/10 cycles on a fresh manager (the live count grows by at most 10%).

use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, ContentBlock, TaskPayload, TaskStatus};
use rmcp::task_manager::{TaskManager, TaskOptions};
use tokio::sync::oneshot;

const BUDGET: Duration = Duration::from_millis(1_500);
const PREFILL_LIMIT: Duration = Duration::from_secs(60);
const CYCLE_TTL_MS: u64 = 60_000;
const STRIDE: usize = 7_919;

fn report(workload: &str, value: f64, unit: &str) {
    println!("RESULT rmcp {workload} {value:.3} {unit}");
}

fn size_label(n: usize) -> String {
    match n {
        n if n >= 1_000_000 => format!("{}m", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// A manager holding `n` running tasks that never finish and never expire.
fn prefill(n: usize) -> (TaskManager, Vec<String>) {
    let manager = TaskManager::new();
    let ids = (0..n)
        .map(|_| {
            manager
                .spawn(TaskOptions::new().with_ttl_ms(None), |_ctx| {
                    Box::pin(std::future::pending())
                })
                .task_id
        })
        .collect();
    (manager, ids)
}

async fn cycle(manager: &TaskManager) {
    let (tx, rx) = oneshot::channel::<()>();
    let task = manager.spawn(TaskOptions::new().with_ttl_ms(CYCLE_TTL_MS), move |_ctx| {
        Box::pin(async move {
            let _ = rx.await;
            Ok(CallToolResult::success(vec![ContentBlock::text("done")]))
        })
    });
    let id = task.task_id;
    std::hint::black_box(manager.get_task(&id).expect("get"));
    tx.send(()).expect("operation waiting");
    // Let the runtime run the operation, which records the result under the lock.
    tokio::task::yield_now().await;
    loop {
        let detailed = manager.get_task(&id).expect("get result");
        if detailed.task.status == TaskStatus::Completed {
            assert!(matches!(detailed.payload, TaskPayload::Completed { .. }));
            std::hint::black_box(detailed);
            return;
        }
        tokio::task::yield_now().await;
    }
}

async fn run() {
    let mut prefill_cost_per_n2 = None::<f64>;
    for n in [1_000usize, 10_000, 100_000, 1_000_000] {
        let label = size_label(n);
        if let Some(k) = prefill_cost_per_n2 {
            let estimate = Duration::from_secs_f64(k * (n as f64) * (n as f64));
            if estimate > PREFILL_LIMIT {
                println!(
                    "NOTE rmcp cycle_{label} skipped: prefilling {n} tasks through spawn() is O(n^2), estimated {:.0} s",
                    estimate.as_secs_f64()
                );
                continue;
            }
        }
        let per_round = (n / 10).max(100);
        let mut timed = Duration::ZERO;
        let mut cycles = 0usize;
        let mut rounds = 0;
        let mut last = None;
        while timed < BUDGET && rounds < 20 {
            let t0 = Instant::now();
            let (manager, ids) = prefill(n);
            let took = t0.elapsed().as_secs_f64();
            prefill_cost_per_n2 = Some(took / (n as f64 * n as f64));
            // one warm-up cycle
            cycle(&manager).await;
            let t0 = Instant::now();
            let mut done = 0;
            while done < per_round && t0.elapsed() < BUDGET {
                cycle(&manager).await;
                done += 1;
            }
            timed += t0.elapsed();
            cycles += done;
            rounds += 1;
            last = Some((manager, ids));
        }
        report(&format!("cycle_{label}"), cycles as f64 / timed.as_secs_f64(), "cycles/s");
        if n == 100_000 {
            let (manager, ids) = last.expect("one round");
            let mut us: Vec<f64> = Vec::new();
            let t_end = Instant::now() + Duration::from_secs(3);
            let mut i: usize = 0;
            while Instant::now() < t_end && us.len() < 200_000 {
                let id = &ids[i.wrapping_mul(STRIDE) % ids.len()];
                let t0 = Instant::now();
                std::hint::black_box(manager.get_task(id).expect("get"));
                us.push(t0.elapsed().as_secs_f64() * 1e6);
                i += 1;
            }
            us.sort_by(f64::total_cmp);
            println!("NOTE rmcp get latency from {} samples", us.len());
            report("get_p50_100k", us[us.len() / 2], "us");
            report("get_p99_100k", us[((us.len() - 1) as f64 * 0.99).round() as usize], "us");
            manager.shutdown();
        }
    }
    println!("NOTE rmcp has no list operation (SEP-2663 dropped tasks/list); list walk not applicable");
    println!("NOTE rmcp expiry of 1,000,000 tasks not run: the prefill alone is O(n^2) through spawn()");
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}
