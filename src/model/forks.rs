//! Counting `fork()`s, so that state a process keeps for itself is not reused in a child
//! that got a copy of it: the per-thread pool of random bytes task ids are made from (a
//! child would hand out its parent's next ids), and a C store whose owner thread did not
//! come along (see `ffi`).
//!
//! A process id alone misleads after pid reuse: a double-forking daemon's grandchild can
//! get the pid of the long-gone creator. A counter that every fork's child increments
//! cannot repeat. Forks that run no atfork handler (glibc's `_Fork`, a raw `clone`) are not
//! counted; the C ABI looks at the pid as well.

use std::sync::atomic::{AtomicU64, Ordering};

static GENERATION: AtomicU64 = AtomicU64::new(0);

/// How many forks separate this process from the first that asked (0 there). The first
/// call registers the handler that counts, so state tagged with the generation it was made
/// in can tell, from then on, when it finds itself in a child.
#[cfg(unix)]
pub(crate) fn generation() -> u64 {
    static WATCH: std::sync::Once = std::sync::Once::new();
    WATCH.call_once(|| {
        extern "C" {
            fn pthread_atfork(
                prepare: Option<unsafe extern "C" fn()>,
                parent: Option<unsafe extern "C" fn()>,
                child: Option<unsafe extern "C" fn()>,
            ) -> std::ffi::c_int;
        }
        unsafe extern "C" fn in_child() {
            // Runs in the child right after fork(): an atomic add is safe there.
            GENERATION.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: registers a handler that only touches an atomic; the C library keeps the
        // pointer for the life of the process, and the function is static.
        let failed = unsafe { pthread_atfork(None, None, Some(in_child)) } != 0;
        if failed {
            log::error!(
                "cannot watch for fork(): a forked child may repeat its parent's task ids, \
                 and its C ABI calls may hang"
            );
        }
    });
    GENERATION.load(Ordering::Relaxed)
}

/// No `fork()` outside Unix.
#[cfg(not(unix))]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}
