//! The task store: a pure state machine and timer wheel (no threads, no clock reads),
//! driven by one owner thread (the actor) that callers reach through blocking handles.
//!
//! Data flows one way: handle -> command over the inbox (a seat the owner polls, or a
//! channel) -> actor -> machine; each command carries its own reply slot. A gate keeps the
//! callers in flight at one fewer than the cores, so the owner thread keeps a core of its
//! own. Without a journal, reads that change nothing skip the trip: the owner changes the
//! machine under a write lock and callers read it under a read lock (`shared`), falling
//! back to a command when the read must settle an expired task (or waited too long for
//! the lock). With a journal every read is a command, so none shows an unsynced change.

mod actor;
mod clock;
mod config;
mod contract;
mod gate;
mod handle;
mod inbox;
mod journal;
pub mod machine;
mod record;
mod reply;
mod shared;
pub(crate) mod spin;
mod stop;
mod token;
mod wheel;

pub use clock::{Clock, ManualClock, Millis, Now, SystemClock};
pub use config::{ExpiryPolicy, StoreConfig};
pub use contract::{TaskStore, STOP_POLL};
pub use handle::{MissedAtStop, Store, StoreBuilder, StoreHandle};
pub use journal::{Durability, JournalConfig};
pub use machine::{StoreMachine, StoreStats};
pub use record::{Change, OutcomeRecord, RecoveryPolicy, TaskRecord};
pub use stop::WaitStop;
pub use token::CancelToken;
