//! Counting `fork()`s, so that state a process keeps for itself is not reused in a child
//! that got a copy of it: the per-thread pool of random bytes task ids are made from (a
//! child would hand out its parent's next ids), and a C store whose owner thread did not
//! come along (see `ffi`).
//!
//! A process id alone misleads after pid reuse: a double-forking daemon's grandchild can
//! get the pid of the long-gone creator. A counter that every fork's child increments
//! cannot repeat. Forks that run no atfork handler (glibc's `_Fork`, a raw `clone`) are not
//! counted; the C ABI looks at the pid as well.
//!
//! The same handler keeps a journal's `LOCK` file from children (see [`ForkPrivate`]).

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
            // Runs in the child right after fork(): only atomics, dup2 and fcntl (which
            // are async-signal-safe) there.
            GENERATION.fetch_add(1, Ordering::Relaxed);
            private::let_go();
        }
        // SAFETY: registers a handler that only touches atomics and calls dup2 and fcntl;
        // the C library keeps the pointer for the life of the process, and the function is
        // static.
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

/// A file whose copy a forked child must let go of: a journal's `LOCK` file. Its lock
/// (`flock`) belongs to the open file, which `fork()` shares with the child, so a child that
/// does not `exec` (a Python `multiprocessing` worker, a pre-forked server's) would hold the
/// directory's lock for as long as it lives: after the parent frees its store, or dies, no
/// store could open the directory again until the child exits. In each child the file's
/// descriptor is pointed at `/dev/null` instead (the number stays valid, so whatever owns
/// it may still close it). Registered for as long as this lives; at most
/// [`MAX_PRIVATE`](private::MAX_PRIVATE) files at once (more are left as they were).
#[cfg(unix)]
#[derive(Debug)]
pub(crate) struct ForkPrivate(Option<(usize, std::os::fd::RawFd)>);

#[cfg(unix)]
impl ForkPrivate {
    /// Keeps `fd` from the children forked from now on, until this is dropped.
    pub(crate) fn new(fd: std::os::fd::RawFd) -> ForkPrivate {
        generation(); // the handler is registered
        ForkPrivate(private::register(fd).map(|slot| (slot, fd)))
    }
}

#[cfg(unix)]
impl Drop for ForkPrivate {
    fn drop(&mut self) {
        if let Some((slot, fd)) = self.0 {
            private::unregister(slot, fd);
        }
    }
}

/// No `fork()` outside Unix.
#[cfg(not(unix))]
#[derive(Debug)]
pub(crate) struct ForkPrivate;

#[cfg(not(unix))]
impl ForkPrivate {
    /// Nothing to do without `fork()`.
    pub(crate) fn new<T>(_: T) -> ForkPrivate {
        ForkPrivate
    }
}

#[cfg(unix)]
mod private {
    use std::os::fd::{IntoRawFd, RawFd};
    use std::sync::atomic::{AtomicI32, Ordering};

    /// Most files kept from children at once (one per journaled store).
    pub(crate) const MAX_PRIVATE: usize = 64;

    /// The registered descriptors, -1 for a free slot: atomics, since the child's handler
    /// may take no lock (another thread may have held it at the fork).
    static FILES: [AtomicI32; MAX_PRIVATE] = [const { AtomicI32::new(-1) }; MAX_PRIVATE];
    /// `/dev/null`, opened once, to point the children's copies at.
    static DEV_NULL: AtomicI32 = AtomicI32::new(-1);

    pub(super) fn register(fd: RawFd) -> Option<usize> {
        if DEV_NULL.load(Ordering::Acquire) < 0 {
            let null = std::fs::File::open("/dev/null").ok()?.into_raw_fd();
            if DEV_NULL
                .compare_exchange(-1, null, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // Another thread got there first: its descriptor is the one kept.
                close_own(null);
            }
        }
        let slot = FILES.iter().position(|slot| {
            slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        if slot.is_none() {
            log::debug!("more than {MAX_PRIVATE} files to keep from forked children");
        }
        slot
    }

    pub(super) fn unregister(slot: usize, fd: RawFd) {
        let _ = FILES[slot].compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire);
    }

    /// In a forked child: points every registered descriptor at `/dev/null`.
    pub(super) fn let_go() {
        // Declared here, not at module level, where cbindgen would copy it into the C
        // header (and clash, in C++, with `<unistd.h>`'s own `noexcept` declaration).
        extern "C" {
            fn dup2(old: std::ffi::c_int, new: std::ffi::c_int) -> std::ffi::c_int;
            fn fcntl(fd: std::ffi::c_int, cmd: std::ffi::c_int, ...) -> std::ffi::c_int;
        }
        // POSIX's values, the same on every Unix.
        const F_GETFD: std::ffi::c_int = 1;
        const F_SETFD: std::ffi::c_int = 2;
        let null = DEV_NULL.load(Ordering::Acquire);
        if null < 0 {
            return;
        }
        for slot in &FILES {
            let fd = slot.swap(-1, Ordering::AcqRel);
            if fd >= 0 {
                // dup2 clears close-on-exec on `fd`: its flags are put back, or a child that
                // goes on to `exec` would hand the program it runs a stray descriptor.
                // SAFETY: fcntl and dup2 on descriptors this process owns; they allocate
                // nothing and are async-signal-safe, as a fork child's handler requires.
                unsafe {
                    let flags = fcntl(fd, F_GETFD);
                    if dup2(null, fd) >= 0 && flags >= 0 {
                        fcntl(fd, F_SETFD, flags);
                    }
                }
            }
        }
    }

    /// Closes a descriptor this module just opened and gave to no one.
    fn close_own(fd: RawFd) {
        use std::os::fd::FromRawFd;
        // SAFETY: `fd` was just opened here and given to no one else.
        drop(unsafe { std::fs::File::from_raw_fd(fd) });
    }
}
