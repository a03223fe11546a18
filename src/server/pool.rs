//! A pool of worker threads with a bounded queue, so a flood of calls cannot spawn
//! unbounded threads.
//!
//! A tool that waits for its client (an elicitation, a sampling request, SEP-2663 input)
//! may wait for minutes, or until its task's TTL when the client never answers. Holding a
//! pool place meanwhile let a handful of unanswered prompts stop every other call (with
//! the default 16 workers, 16 of them did). A waiting tool lends its place instead: while
//! it waits, a stand-in thread serves the queue, so `workers` threads are always free to
//! run tools, and a stand-in that is no longer needed leaves. Stand-ins are capped
//! ([`MAX_STAND_INS`]); past that, a waiting tool keeps its place, as before.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send>;

/// Most stand-in threads at once, across a pool: each is a thread blocked on a client,
/// and a client that never answers must not make a server spawn without bound.
pub(crate) const MAX_STAND_INS: usize = 1024;

/// How long a surplus thread waits for a job before it leaves.
const SURPLUS_IDLE: Duration = Duration::from_secs(5);

thread_local! {
    /// Set on the pool's own threads: only they have a place to lend.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

/// Runs jobs on `workers` threads (plus stand-ins for workers waiting on a client);
/// refuses new jobs when the queue is full.
///
/// Dropping the pool closes the queue; workers finish the jobs already queued (a run whose
/// call was cancelled meanwhile returns at once without calling its tool) and exit. They
/// are not joined, since a tool may block for a long time (an unanswered elicitation, say) and
/// shutting a server down must not wait for it.
#[derive(Debug)]
pub(crate) struct WorkerPool {
    jobs: Sender<Job>,
    places: Places,
    _threads: Vec<JoinHandle<()>>,
}

/// What the pool's threads share: the queue, and how many threads serve it.
#[derive(Debug)]
struct Shared {
    inbox: Receiver<Job>,
    workers: usize,
    /// Most jobs that may wait in `inbox`, and how many do. Counted rather than set as
    /// the channel's capacity, which would be allocated up front: any bound is valid,
    /// and only the jobs that wait take memory.
    queue: usize,
    queued: AtomicUsize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// Threads alive (workers and stand-ins).
    threads: usize,
    /// Of those, how many are waiting on a client with their place lent.
    lent: usize,
    /// Numbers the next stand-in's thread name.
    named: usize,
}

impl Counts {
    /// Threads free to run jobs.
    fn serving(&self) -> usize {
        self.threads - self.lent
    }
}

/// A handle through which a job lends its pool place while it waits (see
/// [`lend_place`](Places::lend_place)). Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Places(Arc<Shared>);

/// The job was refused: the queue is full (or the pool is shutting down).
#[derive(Debug)]
pub(crate) struct Busy;

impl WorkerPool {
    /// Starts the workers. If one cannot be spawned (the system is out of threads or
    /// memory), the error is returned and the workers already started exit, as their queue
    /// closes.
    pub(crate) fn new(workers: usize, queue: usize) -> std::io::Result<WorkerPool> {
        let (jobs, inbox) = crossbeam_channel::unbounded::<Job>();
        let workers = workers.max(1);
        let shared = Arc::new(Shared {
            inbox,
            workers,
            queue,
            queued: AtomicUsize::new(0),
            counts: Mutex::new(Counts {
                threads: workers,
                lent: 0,
                named: workers,
            }),
        });
        let threads = (0..workers)
            .map(|n| spawn(&shared, format!("mcp-tool-{n}")))
            .collect::<std::io::Result<_>>()?;
        Ok(WorkerPool {
            jobs,
            places: Places(shared),
            _threads: threads,
        })
    }

    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) -> Result<(), Busy> {
        let shared = &self.places.0;
        let room = shared
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < shared.queue).then_some(n + 1)
            });
        if room.is_err() {
            return Err(Busy);
        }
        self.jobs.send(Box::new(job)).map_err(|_| {
            shared.queued.fetch_sub(1, Ordering::AcqRel);
            Busy
        })
    }

    /// The handle jobs lend their places through.
    pub(crate) fn places(&self) -> Places {
        self.places.clone()
    }
}

/// A pool place lent to a stand-in (see [`Places::lend_place`]), taken back when dropped.
#[derive(Debug)]
pub(crate) struct Lent(Arc<Shared>);

impl Drop for Lent {
    fn drop(&mut self) {
        self.0.counts.lock().lent -= 1;
    }
}

impl Places {
    /// These places, if the calling thread is one of the pool's (only a job running there
    /// holds a place to lend).
    pub(crate) fn if_in_pool(&self) -> Option<Places> {
        IN_POOL.with(Cell::get).then(|| self.clone())
    }

    /// Runs `wait` (a wait on the client) with this thread's pool place lent to a stand-in,
    /// when called on one of the pool's threads and the cap allows; otherwise just runs it.
    #[cfg(test)]
    pub(crate) fn lend<R>(&self, wait: impl FnOnce() -> R) -> R {
        let _lent = self.if_in_pool().map(|places| places.lend_place());
        wait()
    }

    /// Lends the place of a job running on one of the pool's threads to a stand-in (when
    /// the cap allows), until the returned guard drops, however the wait ends. The job may
    /// wait on any of its threads meanwhile; it must lend its place once at a time.
    pub(crate) fn lend_place(&self) -> Lent {
        let shared = &self.0;
        let stand_in = {
            let mut counts = shared.counts.lock();
            counts.lent += 1;
            let short = counts.serving() < shared.workers;
            let room = counts.threads < shared.workers + MAX_STAND_INS;
            (short && room).then(|| {
                counts.threads += 1;
                counts.named += 1;
                counts.named - 1
            })
        };
        if let Some(n) = stand_in {
            if let Err(e) = spawn(shared, format!("mcp-tool-{n}")) {
                log::warn!("no stand-in for a tool waiting on its client: {e}");
                shared.counts.lock().threads -= 1;
            }
        }
        Lent(shared.clone())
    }
}

/// Starts a thread serving the queue (its count is taken already).
fn spawn(shared: &Arc<Shared>, name: String) -> std::io::Result<JoinHandle<()>> {
    let shared = shared.clone();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || serve(&shared))
}

/// A pool thread's life: run jobs until the queue closes, or until it is surplus (more
/// threads free than `workers`, once a waiting job got its place back).
fn serve(shared: &Shared) {
    IN_POOL.with(|in_pool| in_pool.set(true));
    loop {
        match shared.inbox.recv_timeout(SURPLUS_IDLE) {
            Ok(job) => {
                shared.queued.fetch_sub(1, Ordering::AcqRel);
                // A panicking tool must not take its worker down with it.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let mut counts = shared.counts.lock();
        if counts.serving() > shared.workers {
            counts.threads -= 1;
            return;
        }
    }
    shared.counts.lock().threads -= 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With one worker, jobs that wait on something lend their place: a later job runs
    /// meanwhile, and the stand-ins leave once the waits are over.
    #[test]
    fn a_waiting_job_lends_its_place_and_the_stand_in_leaves_after() {
        let pool = WorkerPool::new(1, 16).unwrap();
        let (release, released) = crossbeam_channel::unbounded::<()>();
        let (done, finished) = crossbeam_channel::unbounded::<&str>();
        for _ in 0..3 {
            let (places, released, done) = (pool.places(), released.clone(), done.clone());
            pool.submit(move || {
                places.lend(|| released.recv().unwrap());
                done.send("waiter").unwrap();
            })
            .unwrap();
        }
        let done_quick = done.clone();
        pool.submit(move || done_quick.send("quick").unwrap())
            .unwrap();
        assert_eq!(
            finished.recv_timeout(Duration::from_secs(10)),
            Ok("quick"),
            "three jobs wait, and one worker: the fourth runs on a stand-in"
        );
        assert_eq!(pool.places.0.counts.lock().threads, 4);
        for _ in 0..3 {
            release.send(()).unwrap();
        }
        for _ in 0..3 {
            assert_eq!(finished.recv_timeout(Duration::from_secs(10)), Ok("waiter"));
        }
        // Each thread, after its job, sees whether it is surplus; three of four are.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.places.0.counts.lock().threads > 1 {
            assert!(std::time::Instant::now() < deadline, "stand-ins stayed");
            std::thread::yield_now();
        }
    }

    /// The queue holds at most `queue` jobs waiting for a worker: one more is refused, and
    /// a place is free again once a worker takes a job.
    #[test]
    fn jobs_past_the_queue_are_refused_until_a_worker_takes_one() {
        let pool = WorkerPool::new(1, 2).unwrap();
        let (release, released) = crossbeam_channel::unbounded::<()>();
        let (started, start) = crossbeam_channel::unbounded::<()>();
        let (done, finished) = crossbeam_channel::unbounded::<()>();
        let job = |released: Receiver<()>, started: Sender<()>, done: Sender<()>| {
            move || {
                started.send(()).unwrap();
                released.recv().unwrap();
                done.send(()).unwrap();
            }
        };
        let submit =
            |pool: &WorkerPool| pool.submit(job(released.clone(), started.clone(), done.clone()));
        submit(&pool).unwrap();
        start.recv_timeout(Duration::from_secs(10)).unwrap(); // the worker is busy
        submit(&pool).unwrap();
        submit(&pool).unwrap();
        assert!(submit(&pool).is_err(), "two wait already");
        release.send(()).unwrap();
        start.recv_timeout(Duration::from_secs(10)).unwrap(); // it took the next
        submit(&pool).unwrap();
        assert!(submit(&pool).is_err(), "two wait again");
        for _ in 0..4 {
            release.send(()).unwrap();
            finished.recv_timeout(Duration::from_secs(10)).unwrap();
        }
    }

    /// A job that got its place back and waits again while a stand-in is still there (busy
    /// with another job, so it cannot have left) finds `workers` threads serving: it lends
    /// its place without spawning another stand-in.
    #[test]
    fn a_second_wait_needs_no_second_stand_in_while_the_first_is_there() {
        let pool = WorkerPool::new(1, 4).unwrap();
        let (started, on_stand_in) = crossbeam_channel::unbounded::<()>();
        let (release, released) = crossbeam_channel::unbounded::<()>();
        let (report, threads) = crossbeam_channel::unbounded::<usize>();
        let places = pool.places();
        pool.submit(move || {
            let lent = places.lend_place();
            on_stand_in.recv().unwrap(); // the stand-in runs the second job
            drop(lent);
            let _again = places.lend_place();
            report.send(places.0.counts.lock().threads).unwrap();
        })
        .unwrap();
        pool.submit(move || {
            started.send(()).unwrap();
            released.recv().unwrap();
        })
        .unwrap();
        assert_eq!(
            threads.recv_timeout(Duration::from_secs(10)),
            Ok(2),
            "the worker and one stand-in"
        );
        release.send(()).unwrap();
    }

    /// Stand-ins stop at [`MAX_STAND_INS`]: with one fewer alive (each serving for a job
    /// that lent its place), a job that waits gets one more; with that many, it keeps its
    /// place. The counts are set as those stand-ins would leave them, rather than spawning
    /// a thousand threads.
    #[test]
    fn stand_ins_stop_at_the_cap() {
        let workers = 2;
        let (jobs, inbox) = crossbeam_channel::unbounded::<Job>();
        for (stand_ins, spawned) in [(MAX_STAND_INS - 1, 1), (MAX_STAND_INS, 0)] {
            let threads = workers + stand_ins;
            let places = Places(Arc::new(Shared {
                inbox: inbox.clone(),
                workers,
                queue: 1,
                queued: AtomicUsize::new(0),
                counts: Mutex::new(Counts {
                    threads,
                    lent: stand_ins,
                    named: threads,
                }),
            }));
            let _lent = places.lend_place();
            assert_eq!(
                places.0.counts.lock().threads,
                threads + spawned,
                "{stand_ins} stand-ins"
            );
        }
        drop(jobs); // the stand-in spawned exits
    }

    /// Stand-ins are named on from the workers (`mcp-tool-0` is the one worker here, the
    /// first stand-in `mcp-tool-1`), so each pool thread has its own name in a panic
    /// message or a debugger.
    #[test]
    fn a_stand_in_is_named_after_the_workers() {
        let pool = WorkerPool::new(1, 4).unwrap();
        let (report, names) = crossbeam_channel::unbounded::<Option<String>>();
        let (release, released) = crossbeam_channel::unbounded::<()>();
        let name = || std::thread::current().name().map(str::to_owned);
        let (places, report_worker) = (pool.places(), report.clone());
        pool.submit(move || {
            report_worker.send(name()).unwrap();
            places.lend(|| released.recv().unwrap());
        })
        .unwrap();
        pool.submit(move || report.send(name()).unwrap()).unwrap();
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.push(names.recv_timeout(Duration::from_secs(10)).unwrap());
        }
        assert_eq!(
            seen,
            [Some("mcp-tool-0".to_owned()), Some("mcp-tool-1".to_owned())]
        );
        release.send(()).unwrap();
    }

    /// Threads that exit as the queue closes are counted out, so the counts a job still
    /// holding [`Places`] lends against stay true after the pool is dropped: none left.
    #[test]
    fn threads_leaving_a_closed_queue_are_counted_out() {
        let WorkerPool {
            jobs,
            places,
            _threads: threads,
        } = WorkerPool::new(2, 4).unwrap();
        drop(jobs);
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(places.0.counts.lock().threads, 0);
    }

    /// Off the pool's threads there is no place to lend: nothing is spawned.
    #[test]
    fn lending_off_the_pool_runs_the_wait_and_spawns_nothing() {
        let pool = WorkerPool::new(2, 4).unwrap();
        assert_eq!(pool.places().lend(|| 7), 7);
        let counts = pool.places.0.counts.lock();
        assert_eq!((counts.threads, counts.lent), (2, 0));
    }
}
