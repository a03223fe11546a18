//! How commands reach the owner thread: a few seats, one command each, that the owner
//! polls, plus a channel for everything else.
//!
//! A brief call posts its command in a free seat: the caller writes the command and flips
//! the seat's state, the owner reads both and frees the seat, so one command moves in the
//! seat's own cache lines. Through the crossbeam channel the same command also moved the
//! channel's tail and its block pointers between the cores, and every 31st message
//! allocated a block on the caller's thread that the owner's thread freed. Measured here: a
//! bare ping-pong over one cache line takes 0.13 us, through the channel 0.5-0.6 us; a
//! `stats` round trip went from about 1.0 to 0.7 us, and the benchmark cycle with one
//! caller from 219k to 237k a second. The gate keeps the callers in flight at the number
//! of seats, so a gated caller nearly always finds one free; when it does not, or the call
//! may wait long, the command goes over the channel.
//!
//! The owner blocks only on the channel. Before it does, it raises `owner_blocked` and
//! looks at the seats once more; a caller that posts a command looks at the flag after
//! posting and, if it is raised, sends a no-op [`Command::Wake`] through the channel.
//! Both sides order their write before their read (`SeqCst`), so at least one sees the
//! other: no command is left in a seat while the owner sleeps.
//!
//! When the owner thread ends (also by panicking) its [`Inbox`] is dropped: it closes the
//! seats and drops the commands in them, and with them their replies, so their callers
//! hear `Closed`. A caller that posts after that sees `closed` and takes its command back
//! (which drops its reply in the same way); whoever takes a command first owns it.

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::actor::Command;

/// No command; a caller may claim the seat.
const FREE: u8 = 0;
/// A caller is writing its command.
const CLAIMED: u8 = 1;
/// A command waits in the seat.
const POSTED: u8 = 2;
/// The owner (or the caller taking it back) is moving the command out.
const TAKING: u8 = 3;

/// Most seats, whatever the cores: the owner looks at every seat whenever it looks for
/// work, so seats beyond the callers in flight would only cost it time.
const MAX_SEATS: usize = 8;

/// One command's place. Aligned so that two seats never share a cache line (nor a pair of
/// lines, which CPUs fetch together).
#[repr(align(128))]
struct Seat {
    state: AtomicU8,
    command: UnsafeCell<MaybeUninit<Command>>,
}

// SAFETY: `command` is only touched by the one thread that moved `state` to `CLAIMED`
// (writing) or to `TAKING` (reading), and those moves are compare-exchanges from `FREE`
// and `POSTED` respectively, so at most one thread touches it at a time; `Command` is
// `Send`, so moving it between threads is fine.
unsafe impl Sync for Seat {}

/// The `Sync` above rests on this.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Command>();
};

impl Seat {
    fn new() -> Seat {
        Seat {
            state: AtomicU8::new(FREE),
            command: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Moves the state from `from` to `to` if nobody else does first (Acquire: pairs with
    /// the store that set `from`). A plain load comes first, so that polling a seat in
    /// another state never takes its cache line away from the thread using it.
    fn moves(&self, from: u8, to: u8) -> bool {
        self.state.load(Ordering::Acquire) == from
            && self
                .state
                .compare_exchange(from, to, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Claims a free seat and posts `command` in it; gives the command back if the seat is
    /// not free.
    fn post(&self, command: Command) -> Result<(), Command> {
        if !self.moves(FREE, CLAIMED) {
            return Err(command);
        }
        // SAFETY: we moved the state from FREE to CLAIMED, so the seat is ours and empty
        // (whoever took the last command out read it before freeing the seat, with
        // Release, which our Acquire pairs with).
        unsafe { (*self.command.get()).write(command) };
        // SeqCst: pairs with the owner's `owner_blocked` and the `closed` flag (see the
        // module docs).
        self.state.store(POSTED, Ordering::SeqCst);
        Ok(())
    }

    /// Moves the posted command out, if there is one and nobody else takes it first.
    fn take(&self) -> Option<Command> {
        if !self.moves(POSTED, TAKING) {
            return None;
        }
        // SAFETY: we moved the state from POSTED to TAKING: the command is written (the
        // poster stored POSTED after writing it, and our Acquire pairs with that) and no
        // one else reads it.
        let command = unsafe { (*self.command.get()).assume_init_read() };
        self.state.store(FREE, Ordering::Release);
        Some(command)
    }
}

/// The seats, shared by the owner's [`Inbox`] and every handle's [`Poster`].
struct Seats {
    seats: Box<[Seat]>,
    /// The owner thread is blocked, or about to block, on the channel.
    owner_blocked: AtomicBool,
    /// The owner thread has ended: nothing posted will be served.
    closed: AtomicBool,
}

impl Seats {
    /// Takes a posted command from any seat, looking first at `*next` and moving it past
    /// the seat served (so every seat gets its turn).
    fn take_any(&self, next: &mut usize) -> Option<Command> {
        // (No `%`: this runs in the owner's polling loop, where a division is not free.)
        let n = self.seats.len();
        let mut at = *next;
        for _ in 0..n {
            let seat = &self.seats[at];
            at = if at + 1 == n { 0 } else { at + 1 };
            if let Some(command) = seat.take() {
                *next = at;
                return Some(command);
            }
        }
        None
    }
}

thread_local! {
    /// The seat this thread posted to last: one caller keeps to one seat (whose lines then
    /// move only between it and the owner).
    static LAST_SEAT: Cell<usize> = const { Cell::new(0) };
}

/// A new inbox: the handles' side and the owner's. `seats` is clamped to 1..=8.
pub(crate) fn inbox(seats: usize) -> (Poster, Inbox) {
    let seats = Arc::new(Seats {
        seats: (0..seats.clamp(1, MAX_SEATS))
            .map(|_| Seat::new())
            .collect(),
        owner_blocked: AtomicBool::new(false),
        closed: AtomicBool::new(false),
    });
    let (tx, rx) = crossbeam_channel::unbounded();
    (
        Poster {
            tx,
            seats: Arc::clone(&seats),
        },
        Inbox {
            rx,
            seats,
            next_seat: 0,
            channel_first: false,
        },
    )
}

/// The handles' side of the inbox.
#[derive(Clone)]
pub(crate) struct Poster {
    // Unbounded on purpose: when the owner thread ends (also by panicking) and drops its
    // receiver, this channel flavour drops the commands still queued, and with them their
    // replies, so their callers hear `Closed`. A bounded channel was ~4% faster but keeps
    // such commands until every handle is gone: their callers hung.
    tx: Sender<Command>,
    seats: Arc<Seats>,
}

impl std::fmt::Debug for Poster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poster")
            .field("seats", &self.seats.seats.len())
            .field("closed", &self.seats.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Poster {
    /// Sends a command over the channel (for waits, shutdown, and when no seat is free).
    /// False if the owner thread has gone; the command (and its reply) is dropped then.
    pub(crate) fn send(&self, command: Command) -> bool {
        self.tx.send(command).is_ok()
    }

    /// Posts a brief command in a free seat (this thread's last one or the next), or sends
    /// it over the channel if both are taken. False if the owner thread has gone (the
    /// command, and its reply, are then dropped).
    pub(crate) fn post(&self, command: Command) -> bool {
        let seats = &self.seats.seats;
        let first = LAST_SEAT.get() % seats.len();
        let mut command = command;
        for at in (0..seats.len().min(2)).map(|k| (first + k) % seats.len()) {
            match seats[at].post(command) {
                Ok(()) => {
                    LAST_SEAT.set(at);
                    return self.posted(&seats[at]);
                }
                Err(back) => command = back,
            }
        }
        self.send(command)
    }

    /// After a post: wakes a blocked owner, or takes the command back from an owner that
    /// has gone.
    fn posted(&self, seat: &Seat) -> bool {
        if self.seats.closed.load(Ordering::SeqCst) {
            // Taken back (and dropped here) unless the closing owner already dropped it.
            drop(seat.take());
            return false;
        }
        if self.seats.owner_blocked.load(Ordering::SeqCst)
            && self.seats.owner_blocked.swap(false, Ordering::SeqCst)
        {
            // One wake-up per sleep is enough: the owner looks at every seat when it wakes.
            return self.send(Command::Wake);
        }
        true
    }
}

/// The owner thread's side of the inbox. Dropping it closes the seats (see module docs).
pub(crate) struct Inbox {
    rx: Receiver<Command>,
    seats: Arc<Seats>,
    next_seat: usize,
    /// Alternates which source is looked at first, so a steady stream on one never keeps
    /// the other waiting.
    channel_first: bool,
}

impl Inbox {
    /// A command if one is waiting; `Disconnected` once every handle is gone and the
    /// channel is empty (a seat cannot hold a command then: a caller keeps its handle for
    /// the whole call, and whatever is left is dropped with the inbox).
    pub(crate) fn try_recv(&mut self) -> Result<Command, TryRecvError> {
        self.channel_first = !self.channel_first;
        if self.channel_first {
            match self.rx.try_recv() {
                Err(TryRecvError::Empty) => {}
                got => return got,
            }
        }
        if let Some(command) = self.seats.take_any(&mut self.next_seat) {
            return Ok(command);
        }
        if self.channel_first {
            // The channel was empty a moment ago: no second look (this is the owner's
            // polling loop).
            return Err(TryRecvError::Empty);
        }
        self.rx.try_recv()
    }

    /// Blocks until a command comes (or, with a deadline, until it passes).
    pub(crate) fn recv(&mut self, deadline: Option<Instant>) -> Result<Command, RecvTimeoutError> {
        self.seats.owner_blocked.store(true, Ordering::SeqCst);
        // Orders the flag before the seats' states are read (the posters' side is SeqCst
        // stores and loads): either we see their command, or they see the flag.
        fence(Ordering::SeqCst);
        let command = match self.seats.take_any(&mut self.next_seat) {
            Some(command) => Ok(command),
            None => match deadline {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(at) => self.rx.recv_deadline(at),
            },
        };
        self.seats.owner_blocked.store(false, Ordering::SeqCst);
        command
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        self.seats.closed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst); // as in `recv`
        for seat in self.seats.seats.iter() {
            drop(seat.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::{round_trip, Expect};
    use crate::StoreError;
    use std::sync::atomic::AtomicUsize;
    use std::thread;

    /// One brief round trip (a `Sync`, which the test owners answer without a machine).
    fn call(poster: &Poster, spinners: &AtomicUsize) -> Result<(), StoreError> {
        round_trip(spinners, Expect::Brief, |reply| {
            poster.post(Command::Sync { reply })
        })
    }

    /// Calls per caller (few under Miri, which checks the seats' unsafe code and orderings:
    /// `cargo +nightly miri test --lib store::inbox`).
    const CALLS: u64 = if cfg!(miri) { 30 } else { 2_000 };

    #[test]
    fn every_command_is_served_once_and_a_sleeping_owner_wakes() {
        // Two seats for four callers: some commands go over the channel. The owner blocks
        // whenever it finds nothing, so every post must wake it (a lost wake-up hangs).
        let (poster, mut inbox) = inbox(2);
        let owner = thread::spawn(move || {
            let mut served = 0u64;
            loop {
                let command = match inbox.try_recv() {
                    Ok(command) => command,
                    Err(TryRecvError::Disconnected) => return served,
                    Err(TryRecvError::Empty) => match inbox.recv(None) {
                        Ok(command) => command,
                        Err(_) => return served,
                    },
                };
                match command {
                    Command::Sync { reply } => {
                        served += 1;
                        reply.send(Ok(()));
                    }
                    Command::Wake => {}
                    _ => unreachable!("only syncs and wake-ups are sent"),
                }
            }
        });
        let spinners = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let (poster, spinners) = (poster.clone(), Arc::clone(&spinners));
                thread::spawn(move || {
                    for i in 0..CALLS {
                        if i % 10 == 0 {
                            // Not for synchronising: gives the owner time to block, so
                            // the wake-up path runs too.
                            thread::sleep(std::time::Duration::from_micros(200));
                        }
                        call(&poster, &spinners).expect("served");
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().expect("caller");
        }
        drop(poster);
        assert_eq!(owner.join().expect("owner"), 4 * CALLS);
    }

    #[test]
    fn commands_posted_to_a_gone_owner_are_closed() {
        let (poster, inbox) = inbox(1);
        let spinners = AtomicUsize::new(0);
        // Posted while the owner is alive but not serving: dropped when it goes.
        let waiting = {
            let poster = poster.clone();
            thread::spawn(move || call(&poster, &AtomicUsize::new(0)))
        };
        while poster.seats.seats[0].state.load(Ordering::SeqCst) != POSTED {
            thread::yield_now();
        }
        drop(inbox);
        assert_eq!(waiting.join().expect("caller"), Err(StoreError::Closed));
        // Posted after it went: taken back at once.
        assert_eq!(call(&poster, &spinners), Err(StoreError::Closed));
        assert_eq!(poster.seats.seats[0].state.load(Ordering::SeqCst), FREE);
    }
}
