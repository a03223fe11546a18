//! Listing: keyset pages ([`list`](StoreMachine::list)) over a session's creation-order
//! index, and the cursors that carry a page's position, tagged with a keyed hash so a
//! cursor works only for the session it was issued to.

use std::hash::Hasher;

use super::StoreMachine;
use crate::model::{SessionId, TaskPage};
use crate::store::clock::Now;
use crate::StoreError;

/// The second key of the cursor tag's hash (the first is the store's secret): sets these
/// tags apart from any other use of that secret.
const CURSOR_DOMAIN: u64 = u64::from_le_bytes(*b"mcpts-cr");

impl<W> StoreMachine<W> {
    /// One page of the caller's tasks in creation order, after `cursor` (an opaque value
    /// from a previous page). Costs O(log n + page size).
    pub fn list(
        &mut self,
        now: Now,
        session: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<TaskPage, StoreError> {
        let now = self.observe(now);
        let after = match cursor {
            Some(text) => self.decode_cursor(text, session)?,
            None => 0,
        };
        let key = session.cloned();
        let page_size = self.config.page_size;
        let from = after.saturating_add(1);
        // The page's window is its tasks plus the one after (which tells whether there are
        // more). Expired tasks in it are settled first (under `Fail` they stay, failed;
        // otherwise they go and the window moves on), until the window holds none: a
        // listing reclaims no more than it has to read.
        loop {
            let Some(index) = self.sessions.get(&key) else {
                return Ok(TaskPage::default());
            };
            let mut tasks = Vec::with_capacity(page_size.min(index.len()));
            let mut due = Vec::new();
            let mut last_seq = None;
            let mut more = false;
            for (i, seq) in index.range_from(from).take(page_size + 1).enumerate() {
                let entry = self.tasks.by_seq(seq).expect("indexed tasks exist");
                if entry.is_due(now) {
                    due.push(entry.id);
                } else if i < page_size {
                    tasks.push(self.snapshot(entry.id, entry));
                    last_seq = Some(seq);
                } else {
                    more = true;
                }
            }
            if !due.is_empty() {
                // Settled tasks are either gone or no longer due, so this loop ends.
                for id in due {
                    self.settle(id, now);
                }
                continue;
            }
            let next_cursor = match (more, last_seq) {
                (true, Some(seq)) => Some(self.encode_cursor(seq, session)),
                _ => None,
            };
            return Ok(TaskPage { tasks, next_cursor });
        }
    }

    /// A tag that binds a cursor position to the session it was issued for, keyed with a
    /// store secret so cursors cannot be forged for another session.
    ///
    /// The algorithm and the bytes it reads are fixed (SipHash-2-4 keyed by the store's
    /// secret, over the sequence number and the session, little-endian and length-prefixed),
    /// so a cursor a client holds across a restart stays valid whatever toolchain built the
    /// store (`DefaultHasher` and the `Hash` impls promise no such thing).
    fn cursor_tag(&self, seq: u64, session: Option<&SessionId>) -> u64 {
        // Deprecated for hashing tables, not for this: it is the one keyed hash in std
        // whose algorithm is documented and stays put.
        #[allow(deprecated)]
        let mut hasher = std::hash::SipHasher::new_with_keys(self.cursor_key, CURSOR_DOMAIN);
        hasher.write(&seq.to_le_bytes());
        match session {
            None => hasher.write(&[0]),
            Some(session) => {
                let session = session.as_str().as_bytes();
                hasher.write(&[1]);
                hasher.write(&(session.len() as u64).to_le_bytes());
                hasher.write(session);
            }
        }
        hasher.finish()
    }

    fn encode_cursor(&self, seq: u64, session: Option<&SessionId>) -> String {
        format!("{seq:016x}{:016x}", self.cursor_tag(seq, session))
    }

    fn decode_cursor(&self, text: &str, session: Option<&SessionId>) -> Result<u64, StoreError> {
        let parse = |hex: Option<&str>| hex.and_then(|h| u64::from_str_radix(h, 16).ok());
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::InvalidCursor);
        }
        let (seq, tag) = match (parse(text.get(..16)), parse(text.get(16..))) {
            (Some(seq), Some(tag)) => (seq, tag),
            _ => return Err(StoreError::InvalidCursor),
        };
        if tag != self.cursor_tag(seq, session) {
            return Err(StoreError::InvalidCursor);
        }
        Ok(seq)
    }
}
