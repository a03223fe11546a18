//! Waiting by spinning briefly before blocking, for as long as spinning pays.
//!
//! A round trip to the owner thread takes about a microsecond when both threads are awake.
//! A thread that parks costs far more to wake, and on virtual machines (where an idle vCPU
//! halts) tens of microseconds. So waiting threads first poll for a short, bounded while
//! and only then block; an idle store still goes back to sleep and uses no CPU.
//!
//! How long is learned per waiter ([`SpinBudget`]): when what it waits for comes within the
//! budget, the budget grows to twice that wait (it never shrinks on a hit); when it does
//! not, the budget halves; and every so often one wait spins the full length, so a budget
//! that shrank can learn to grow again. A thread whose
//! partner is busy elsewhere (say, a client process on the same cores) then stops burning
//! a CPU that partner needs: over stdio, with the client on one of two cores, fixed
//! 2,000-spin waits in the server's threads took more CPU than the client had.
//!
//! No `yield_now` in the loop: measured here it made round trips several times slower.

use crossbeam_channel::{Receiver, TryRecvError};

/// Most polls in one wait (each with the CPU's spin hint; some tens of microseconds).
pub(crate) const MAX_SPINS: u32 = 2000;
/// Fewest polls a budget shrinks to: an answer that is already on its way still gets
/// caught without parking.
const MIN_SPINS: u32 = 64;
/// One wait in this many spins the full [`MAX_SPINS`], whatever the budget.
const PROBE_EVERY: u32 = 32;

/// How many polls a waiter spends before blocking, adapted to how its recent waits went.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpinBudget {
    spins: u32,
    waits: u32,
}

impl Default for SpinBudget {
    fn default() -> Self {
        SpinBudget {
            spins: MAX_SPINS,
            waits: 0,
        }
    }
}

impl SpinBudget {
    /// Polls `ready` up to the budget; true as soon as it holds. Adjusts the budget.
    pub(crate) fn spin(&mut self, mut ready: impl FnMut() -> bool) -> bool {
        self.waits = self.waits.wrapping_add(1);
        let limit = if self.waits.is_multiple_of(PROBE_EVERY) {
            MAX_SPINS
        } else {
            self.spins
        };
        for spun in 0..limit {
            if ready() {
                // Room for twice this wait, so a slightly longer one still gets caught.
                self.spins = (spun.saturating_mul(2) + MIN_SPINS).clamp(self.spins, MAX_SPINS);
                return true;
            }
            std::hint::spin_loop();
        }
        self.spins = (self.spins / 2).max(MIN_SPINS);
        false
    }
}

/// What a bounded spin found.
pub(crate) enum Spun<T> {
    /// A message arrived.
    Ready(T),
    /// Every sender is gone.
    Disconnected,
    /// Nothing came in time: block now.
    Nothing,
}

/// Polls `receiver` for at most `budget` polls (and adjusts the budget).
pub(crate) fn spin_recv<T>(receiver: &Receiver<T>, budget: &mut SpinBudget) -> Spun<T> {
    spin_poll(|| receiver.try_recv(), budget)
}

/// Polls `try_recv` (a receiver's, or anything that answers like one) for at most
/// `budget` polls (and adjusts the budget).
pub(crate) fn spin_poll<T>(
    mut try_recv: impl FnMut() -> Result<T, TryRecvError>,
    budget: &mut SpinBudget,
) -> Spun<T> {
    let mut outcome = Spun::Nothing;
    budget.spin(|| match try_recv() {
        Ok(message) => {
            outcome = Spun::Ready(message);
            true
        }
        Err(TryRecvError::Disconnected) => {
            outcome = Spun::Disconnected;
            true
        }
        Err(TryRecvError::Empty) => false,
    });
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_halves_on_misses_and_follows_hits() {
        let mut budget = SpinBudget::default();
        assert!(!budget.spin(|| false));
        assert_eq!(budget.spins, MAX_SPINS / 2);
        for _ in 0..20 {
            budget.spin(|| false);
        }
        assert_eq!(budget.spins, MIN_SPINS, "never below the floor");
        // Waits of 100 polls miss a budget of 64 until the next full-length probe catches
        // one; then the budget makes room for 200 and more.
        let first_catch = (0..PROBE_EVERY)
            .find(|_| {
                let mut polls = 0;
                budget.spin(|| {
                    polls += 1;
                    polls > 100
                })
            })
            .expect("a probe within PROBE_EVERY waits");
        assert_eq!(
            budget.waits % PROBE_EVERY,
            0,
            "caught by the probe ({first_catch})"
        );
        assert_eq!(budget.spins, 100 * 2 + MIN_SPINS);
        // Now such waits are caught every time, and a quick answer does not shrink it.
        let mut polls = 0;
        assert!(budget.spin(|| {
            polls += 1;
            polls > 100
        }));
        assert!(budget.spin(|| true));
        assert_eq!(budget.spins, 100 * 2 + MIN_SPINS);
    }
}
