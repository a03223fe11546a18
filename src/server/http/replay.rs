//! Resumable event streams (Streamable HTTP, "Resumability and Redelivery"): every message
//! a session's `GET` stream carries gets an event id, the session keeps its latest
//! messages, and a client that reopens the stream with `Last-Event-ID` gets again those it
//! had not received. Without this, a message written into a connection that was already
//! dead (a proxy or NAT dropped it without a word) was lost, and a tool waiting on an
//! elicitation it carried waited until its task's TTL.
//!
//! A request to the client outlives the notifications recorded after it: status
//! notifications are optional and a newer one says more, while a request that never
//! arrives leaves its tool waiting.
//!
//! Event ids are positions in the session's sequence of messages, from 1. A stream starts
//! with a priming event (an id and no data, as the spec asks of a server that opens a
//! stream) naming the position it starts at, so a client that loses the stream before any
//! message arrived still resumes from there.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

/// Most messages a session keeps for replay (requests to the client first, then the
/// latest notifications)...
pub(super) const KEEP_MESSAGES: usize = 128;
/// ...and most bytes of them (the newest is always kept, whatever its size): with the
/// default 1,024 sessions, at most a quarter of a GiB in all, and a few tens of KiB per
/// session in practice (status notifications and prompts are small).
pub(super) const KEEP_BYTES: usize = 256 * 1024;

/// A session's latest messages, by event id.
#[derive(Debug, Default)]
pub(super) struct Replay(Mutex<Kept>);

#[derive(Debug, Default)]
struct Kept {
    /// The id of the newest message (0: none yet).
    newest: u64,
    /// The id of the newest message a stream took to write. Those after it were recorded
    /// by a stream that found itself replaced before it wrote them: nobody has them yet.
    taken: u64,
    /// The kept messages, oldest first, the newest last: the latest ones, and the
    /// requests among those before them.
    messages: VecDeque<Message>,
    bytes: usize,
    /// The id of the newest message no longer kept (0: none).
    dropped: u64,
}

#[derive(Debug)]
struct Message {
    id: u64,
    text: Arc<str>,
    /// A request to the client, which its tool waits on (not a notification).
    request: bool,
}

impl Replay {
    /// Gives the next message its id and keeps it, for whichever stream writes it (see
    /// [`after`](Self::after)). Past the bounds the oldest notification goes, or the
    /// oldest request when only requests are older than the newest message.
    pub(super) fn record(&self, message: &Value) {
        let text: Arc<str> = message.to_string().into();
        let request = message.get("id").is_some() && message.get("method").is_some();
        let mut kept = self.0.lock();
        kept.newest += 1;
        kept.bytes += text.len();
        let id = kept.newest;
        kept.messages.push_back(Message { id, text, request });
        while kept.messages.len() > KEEP_MESSAGES
            || (kept.bytes > KEEP_BYTES && kept.messages.len() > 1)
        {
            let newest = kept.messages.len() - 1;
            let at = (kept.messages.iter().position(|m| !m.request))
                .filter(|&at| at < newest)
                .unwrap_or(0);
            if let Some(old) = kept.messages.remove(at) {
                kept.bytes -= old.text.len();
                kept.dropped = kept.dropped.max(old.id);
            }
        }
    }

    /// Where a stream that starts now begins, and the events it writes first: the kept
    /// messages after `last_seen` (the client's `Last-Event-ID`, when it is one of this
    /// session's), then the priming event at the newest position. Without a usable
    /// `last_seen` (none, or beyond the newest: no id this session gave) only what no
    /// stream took to write is: what a replaced stream recorded as it ended (the session's
    /// queue gave it to that stream, and to no other).
    pub(super) fn start(&self, last_seen: Option<&str>) -> (Cursor, Vec<String>) {
        let mut kept = self.0.lock();
        let last_seen = last_seen.and_then(|id| id.trim().parse::<u64>().ok());
        let from = last_seen
            .filter(|&id| id <= kept.newest)
            .unwrap_or(kept.taken);
        let mut cursor = Cursor(from);
        let mut events = kept.take(&mut cursor);
        events.push(format!("id: {}\ndata: \n\n", kept.newest));
        (cursor, events)
    }

    /// The events for the messages kept after `cursor` that no other stream took to
    /// write; `cursor` moves past them. A stream writes what it recorded itself this way,
    /// and also what a stream it replaced recorded as it was ending (which the client
    /// never saw). A replaced stream that has not noticed yet gets nothing its successor
    /// took: no message is written twice but to a client that resumes.
    pub(super) fn after(&self, cursor: &mut Cursor) -> Vec<String> {
        let mut kept = self.0.lock();
        cursor.0 = cursor.0.max(kept.taken);
        kept.take(cursor)
    }
}

impl Kept {
    /// The events for the messages kept after `cursor`, which moves past them, all taken.
    fn take(&mut self, cursor: &mut Cursor) -> Vec<String> {
        if cursor.0 < self.dropped {
            log::warn!(
                "an event stream missed messages no longer kept (after event {}, up to {})",
                cursor.0,
                self.dropped
            );
        }
        let events = (self.messages.iter())
            .filter(|m| m.id > cursor.0)
            .map(|m| event(m.id, &m.text))
            .collect();
        cursor.0 = self.newest;
        self.taken = self.newest;
        events
    }
}

/// The id of the last message a stream wrote (or that another stream took to write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cursor(u64);

fn event(id: u64, message: &str) -> String {
    format!("id: {id}\nevent: message\ndata: {message}\n\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn resumed(replay: &Replay, last: Option<&str>) -> Vec<String> {
        replay.start(last).1
    }

    #[test]
    fn a_resumed_stream_gets_what_followed_the_last_event_it_saw() {
        let replay = Replay::default();
        assert_eq!(resumed(&replay, None), ["id: 0\ndata: \n\n"]);
        let (mut cursor, _) = replay.start(None);
        replay.record(&json!({}));
        assert_eq!(
            replay.after(&mut cursor),
            ["id: 1\nevent: message\ndata: {}\n\n"]
        );
        assert!(replay.after(&mut cursor).is_empty(), "written twice");
        replay.record(&json!([2]));
        replay.record(&json!([3]));
        assert_eq!(
            resumed(&replay, Some("1")),
            [
                "id: 2\nevent: message\ndata: [2]\n\n",
                "id: 3\nevent: message\ndata: [3]\n\n",
                "id: 3\ndata: \n\n",
            ]
        );
        // Up to date, unknown, or not an id of ours: nothing replayed.
        for last in [Some("3"), None, Some("4"), Some("x"), Some("-1")] {
            assert_eq!(resumed(&replay, last), ["id: 3\ndata: \n\n"], "{last:?}");
        }
        // What another stream recorded after this one started reaches it too.
        let (mut late, _) = replay.start(None);
        replay.record(&json!([4]));
        assert_eq!(
            replay.after(&mut late),
            ["id: 4\nevent: message\ndata: [4]\n\n"]
        );
    }

    #[test]
    fn a_fresh_stream_gets_what_a_replaced_stream_recorded_but_never_wrote() {
        let replay = Replay::default();
        let (mut old, _) = replay.start(None);
        replay.record(&json!([1]));
        assert_eq!(replay.after(&mut old).len(), 1, "the old stream writes [1]");
        // The old stream takes [2] off the session's queue and records it, then finds
        // itself replaced and writes nothing: a stream that starts without resuming (no
        // `Last-Event-ID`) must still carry it, since no stream ever did.
        replay.record(&json!([2]));
        let (mut new, events) = replay.start(None);
        assert_eq!(
            events,
            ["id: 2\nevent: message\ndata: [2]\n\n", "id: 2\ndata: \n\n"]
        );
        // ...once: neither stream writes it again (the old one may not have seen yet
        // that it was replaced).
        assert!(replay.after(&mut old).is_empty(), "written twice");
        assert!(replay.after(&mut new).is_empty(), "written twice");
        // What a stream wrote is not written again to one that starts without resuming.
        replay.record(&json!([3]));
        assert_eq!(replay.after(&mut new).len(), 1);
        assert_eq!(resumed(&replay, None), ["id: 3\ndata: \n\n"]);
    }

    /// A request to the client (an elicitation its tool waits on) must reach a client that
    /// resumes: one that never arrives leaves the tool waiting until its task's TTL. Status
    /// notifications are optional and a newer one says more, so however many follow it
    /// (a busy session whose stream died without a word), they go first.
    #[test]
    fn a_request_outlives_the_notifications_that_follow_it() {
        let replay = Replay::default();
        let request = json!({"jsonrpc": "2.0", "id": "s-1", "method": "elicitation/create"});
        replay.record(&request);
        for n in 0..KEEP_MESSAGES + 10 {
            replay.record(
                &json!({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": n}),
            );
        }
        let resumed = resumed(&replay, Some("0"));
        assert!(
            resumed[0].starts_with("id: 1\n") && resumed[0].contains(&request.to_string()),
            "{}",
            resumed[0]
        );
        assert_eq!(resumed.len(), KEEP_MESSAGES + 1, "no more kept in all");
        // The newest notifications are the ones kept, in order, and the newest ids.
        let last = format!("id: {}\nevent: message", KEEP_MESSAGES + 11);
        assert!(resumed[KEEP_MESSAGES - 1].starts_with(&last));
    }

    /// A client whose connection died without a word resumes from the last event it saw,
    /// which may be older than what its stream went on to write into the dead connection:
    /// it gets those events again, not only what no stream took to write.
    #[test]
    fn a_client_resumes_from_before_what_its_dead_stream_wrote() {
        let replay = Replay::default();
        let (mut stream, _) = replay.start(None);
        replay.record(&json!([1]));
        replay.record(&json!([2]));
        assert_eq!(replay.after(&mut stream).len(), 2, "the stream writes both");
        // Only the first reached the client.
        assert_eq!(
            resumed(&replay, Some("1")),
            ["id: 2\nevent: message\ndata: [2]\n\n", "id: 2\ndata: \n\n"]
        );
    }

    /// The newest message is kept whatever its size, even when only a request is older:
    /// the request goes, not the message just recorded, which no stream has written yet.
    #[test]
    fn the_newest_message_is_kept_over_an_older_request() {
        let replay = Replay::default();
        replay.record(&json!({"jsonrpc": "2.0", "id": "s-1", "method": "elicitation/create"}));
        let big = "x".repeat(KEEP_BYTES);
        let newest = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": big});
        replay.record(&newest);
        assert_eq!(
            resumed(&replay, Some("0")),
            [
                event(2, &newest.to_string()),
                "id: 2\ndata: \n\n".to_string()
            ]
        );
    }

    /// Messages up to exactly [`KEEP_BYTES`] in all are kept: the bound is on what is more.
    #[test]
    fn messages_of_exactly_the_byte_bound_are_all_kept() {
        let replay = Replay::default();
        // A JSON string's text is its characters and two quotes.
        let half = "x".repeat(KEEP_BYTES / 2 - 2);
        replay.record(&json!(half));
        replay.record(&json!(half));
        assert_eq!(resumed(&replay, Some("0")).len(), 3, "both kept");
        replay.record(&json!(0));
        let kept = resumed(&replay, Some("0"));
        assert_eq!(kept.len(), 3, "one byte more: the oldest goes");
        assert!(kept[0].starts_with("id: 2\n"), "{}", kept[0]);
    }

    /// The bytes of a message no longer kept are counted no more: once a big message
    /// goes, smaller ones after it are kept beside the next big one, not dropped too.
    #[test]
    fn a_dropped_message_frees_its_bytes() {
        let replay = Replay::default();
        let big = "x".repeat(KEEP_BYTES / 2 + 1);
        replay.record(&json!(big));
        replay.record(&json!(big)); // the first goes
        replay.record(&json!(3));
        let kept = resumed(&replay, Some("0"));
        assert_eq!(kept.len(), 3, "the second big one and 3 are kept");
        assert!(kept[0].starts_with("id: 2\n"), "{}", kept[0]);
        assert_eq!(kept[1], "id: 3\nevent: message\ndata: 3\n\n");
    }

    #[test]
    fn only_the_latest_messages_are_kept() {
        let replay = Replay::default();
        for n in 0..KEEP_MESSAGES + 10 {
            replay.record(&json!(n));
        }
        let all = resumed(&replay, Some("0"));
        assert_eq!(all.len(), KEEP_MESSAGES + 1);
        assert!(all[0].starts_with("id: 11\n"), "{}", all[0]);
        // Bytes bound it too, but the newest message is kept whatever its size.
        let big = "x".repeat(KEEP_BYTES / 2 + 1);
        replay.record(&json!(big));
        replay.record(&json!(big));
        let newest = "y".repeat(KEEP_BYTES + 1);
        replay.record(&json!(newest));
        let kept = resumed(&replay, Some("0"));
        assert_eq!(kept.len(), 2);
        assert!(kept[0].contains(&newest));
    }
}
