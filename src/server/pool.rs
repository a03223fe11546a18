//! A fixed pool of worker threads with a bounded queue, so a flood of calls cannot spawn
//! unbounded threads.

use std::thread::JoinHandle;

use crossbeam_channel::{Sender, TrySendError};

type Job = Box<dyn FnOnce() + Send>;

/// Runs jobs on `workers` threads; refuses new jobs when the queue is full.
///
/// Dropping the pool closes the queue; workers finish their current job and exit. They are
/// not joined, since a tool may block for a long time (an unanswered elicitation, say) and
/// shutting a server down must not wait for it.
#[derive(Debug)]
pub(crate) struct WorkerPool {
    jobs: Sender<Job>,
    _threads: Vec<JoinHandle<()>>,
}

/// The job was refused: the queue is full (or the pool is shutting down).
#[derive(Debug)]
pub(crate) struct Busy;

impl WorkerPool {
    /// Starts the workers. If one cannot be spawned (the system is out of threads or
    /// memory), the error is returned and the workers already started exit, as their queue
    /// closes.
    pub(crate) fn new(workers: usize, queue: usize) -> std::io::Result<WorkerPool> {
        let (jobs, inbox) = crossbeam_channel::bounded::<Job>(queue);
        let threads = (0..workers.max(1))
            .map(|n| {
                let inbox = inbox.clone();
                std::thread::Builder::new()
                    .name(format!("mcp-tool-{n}"))
                    .spawn(move || {
                        for job in inbox {
                            // A panicking tool must not take its worker down with it.
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        }
                    })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(WorkerPool {
            jobs,
            _threads: threads,
        })
    }

    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) -> Result<(), Busy> {
        self.jobs.try_send(Box::new(job)).map_err(|e| match e {
            TrySendError::Full(_) | TrySendError::Disconnected(_) => Busy,
        })
    }
}
