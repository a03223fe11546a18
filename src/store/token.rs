use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Tells a task's worker to stop: fires when the task is cancelled, or fails because its
/// TTL ran out, or is removed. Cheap to clone and to check from any thread.
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token that has not fired.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// True once the worker should stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Fires the token; idempotent.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }
}
