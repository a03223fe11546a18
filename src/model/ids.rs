use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// A task id: a random (v4) UUID, so ids are unguessable as both MCP revisions require.
///
/// Inside the store the id is a 16-byte key; it becomes text (the hyphenated UUID) only on
/// the wire. Ids that do not parse can never name a task, so callers treat a parse failure
/// exactly like an unknown id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(u128); // the UUID's bits, big-endian: same order as its bytes, cheaper to compare

impl TaskId {
    /// A fresh random (v4) id from the operating system's CSPRNG.
    pub fn random() -> TaskId {
        TaskId(random_uuid().as_u128())
    }

    /// Builds an id from raw bits; meant for deterministic tests and journal replay.
    pub const fn from_u128(bits: u128) -> TaskId {
        TaskId(bits)
    }

    /// The raw 128 bits of the id.
    pub const fn as_u128(&self) -> u128 {
        self.0
    }

    /// Parses the wire form; `None` for anything that is not a UUID.
    pub fn parse(text: &str) -> Option<TaskId> {
        Uuid::try_parse(text)
            .ok()
            .map(|uuid| TaskId(uuid.as_u128()))
    }

    fn uuid(&self) -> Uuid {
        Uuid::from_u128(self.0)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.uuid().hyphenated(), f)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({})", self.uuid().hyphenated())
    }
}

impl FromStr for TaskId {
    type Err = crate::StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskId::parse(s).ok_or(crate::StoreError::NotFound)
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.uuid().hyphenated())
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        TaskId::parse(&text).ok_or_else(|| serde::de::Error::custom("task id is not a UUID"))
    }
}

/// A v4 UUID from the kernel's CSPRNG, read 4 KiB at a time per thread from
/// `/dev/urandom`: one system call per 256 ids instead of one per id. Where the device is
/// missing, or the thread's pool is gone (a call from a thread-exit hook, after the
/// thread's locals were torn down), each id comes from `Uuid::new_v4`. A pool copied into
/// a forked child is thrown away there, unused: parent and child would otherwise hand out
/// the same ids, and one process's clients could name (and so read) the other's tasks.
fn random_uuid() -> Uuid {
    use std::cell::RefCell;
    use std::io::Read;

    use super::forks;

    const BYTES: usize = 4096;
    struct Pool {
        source: Option<std::fs::File>,
        bytes: [u8; BYTES],
        used: usize,
        /// The fork generation the bytes were read in.
        generation: u64,
    }
    thread_local! {
        static POOL: RefCell<Pool> = RefCell::new(Pool {
            source: std::fs::File::open("/dev/urandom").ok(),
            bytes: [0; BYTES],
            used: BYTES,
            generation: forks::generation(),
        });
    }
    let pooled = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let generation = forks::generation();
        if pool.used + 16 > BYTES || pool.generation != generation {
            let Pool {
                source,
                bytes,
                used,
                generation: read_in,
            } = &mut *pool;
            *read_in = generation;
            match source.as_mut().map(|file| file.read_exact(bytes)) {
                Some(Ok(())) => *used = 0,
                _ => {
                    // Nothing left in it may be handed out (in a forked child, the bytes
                    // are the parent's).
                    bytes.fill(0);
                    *used = BYTES;
                    return Uuid::new_v4();
                }
            }
        }
        let start = pool.used;
        pool.used += 16;
        let mut random = [0u8; 16];
        random.copy_from_slice(&pool.bytes[start..start + 16]);
        // Clear the bytes handed out, so nothing about past ids stays in memory.
        pool.bytes[start..start + 16].fill(0);
        uuid::Builder::from_random_bytes(random).into_uuid()
    });
    pooled.unwrap_or_else(|_| Uuid::new_v4())
}

/// The session (or authorization context) a task is bound to.
///
/// Sessions are strict and fail-closed: a caller with no session sees only tasks created
/// without one, and a caller with a session sees only that session's tasks. Cloning is a
/// reference-count bump.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// Wraps any string as a session id.
    pub fn new(id: impl Into<Arc<str>>) -> SessionId {
        SessionId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({:?})", &*self.0)
    }
}

impl From<&str> for SessionId {
    fn from(value: &str) -> Self {
        SessionId::new(value)
    }
}

impl From<String> for SessionId {
    fn from(value: String) -> Self {
        SessionId::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::sync::mpsc;

    /// Makes an id when its thread's locals are torn down, and sends what came of it.
    struct IdOnExit(mpsc::Sender<std::thread::Result<TaskId>>);

    impl Drop for IdOnExit {
        fn drop(&mut self) {
            // A panic escaping a thread-local's destructor aborts the process: catch it.
            let _ = self.0.send(std::panic::catch_unwind(TaskId::random));
        }
    }

    thread_local! {
        static ON_EXIT: RefCell<Option<IdOnExit>> = const { RefCell::new(None) };
    }

    #[test]
    fn an_id_can_be_made_while_the_thread_is_torn_down() {
        // A C host's thread-exit hook may create a task (see the C ABI's tests): by then
        // the id pool, a thread-local made after the hook's, is gone.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Made before the pool, so torn down after it.
            ON_EXIT.with(|slot| slot.borrow_mut().take());
            let first = TaskId::random();
            ON_EXIT.with(|slot| *slot.borrow_mut() = Some(IdOnExit(tx)));
            first
        })
        .join()
        .unwrap();
        let made = rx.recv().expect("the hook ran");
        assert!(made.is_ok(), "making an id at thread exit panicked");
    }

    /// A forked child (a C or Python host's pre-forked workers) gets a copy of the id
    /// pool; using it would hand out the parent's next ids in both processes.
    #[cfg(unix)]
    #[test]
    fn a_forked_child_makes_other_ids_than_its_parent() {
        // Fills this thread's pool.
        let _ = TaskId::random();
        let mut fds = [0i32; 2];
        // SAFETY: the array is live and has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only makes an id (a read of /dev/urandom at most), writes it
        // and leaves with `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let bits = TaskId::random().as_u128().to_le_bytes();
            // SAFETY: the buffer is live for 16 bytes; `_exit` ends the child at once.
            unsafe {
                libc::write(fds[1], bits.as_ptr().cast(), bits.len());
                libc::_exit(0);
            }
        }
        let parent = TaskId::random();
        let mut bits = [0u8; 16];
        // SAFETY: the buffer is live for 16 bytes; the pid is our child's.
        unsafe {
            assert_eq!(libc::read(fds[0], bits.as_mut_ptr().cast(), bits.len()), 16);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        let child = TaskId::from_u128(u128::from_le_bytes(bits));
        assert_ne!(parent, child, "parent and child made the same id");
    }
}
