//! Server-sent events (the `text/event-stream` format): events and their data read off a
//! body line by line, with the event id and `retry:` time kept for reopening a stream.
//! Pure functions over a `BufRead`, shared by POST answers and the `GET` stream, so the
//! format's rules are tested without a socket.

use std::io::{self, BufRead};
use std::time::Duration;

use super::wire::header_safe;
use crate::client::transport::MAX_SERVER_MESSAGE;

/// Reads server-sent events, calling `on_data` with each event's data; stops when the
/// stream ends or `on_data` returns false.
pub(super) fn read_events(
    body: &mut dyn BufRead,
    on_data: impl FnMut(&str) -> bool,
) -> io::Result<()> {
    read_events_resuming(body, &mut Resume::default(), on_data)
}

/// Longest event id kept for `Last-Event-ID`: a longer one is ignored, as is one that could
/// not go into a header.
pub(super) const MAX_EVENT_ID: usize = 1024;

/// What an event stream said about opening it again, as the SSE rules keep it across the
/// stream's events (and across its reopenings).
#[derive(Default, Debug, PartialEq)]
pub(super) struct Resume {
    /// The last event id (`id:`), sent back in `Last-Event-ID` so that a resumable server
    /// can replay what came after it; empty when there is none.
    pub(super) last_id: String,
    /// How long the server asks the client to wait before opening the stream again
    /// (`retry:`, in milliseconds).
    pub(super) retry: Option<Duration>,
}

/// One line of an event stream (without its line ending), at most `max` bytes: `None`
/// when the stream ended (a last line with no line ending is dropped, as SSE drops an
/// event the stream ended in), an error when the line is longer.
///
/// SSE ends a line with CRLF, LF or a bare CR. A line is returned as soon as its CR is
/// read, without waiting for the next byte (a server may end an event with CR CR and
/// then stay silent): `after_cr` remembers that the last line ended in CR, so that an LF
/// the next read starts with (the rest of a CRLF split between two reads) is skipped.
fn event_line(
    input: &mut dyn BufRead,
    after_cr: &mut bool,
    max: usize,
) -> io::Result<Option<String>> {
    let mut buf = Vec::new();
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(None);
        }
        if std::mem::take(after_cr) && chunk[0] == b'\n' {
            input.consume(1);
            continue;
        }
        let end = chunk.iter().position(|&b| b == b'\n' || b == b'\r');
        let taken = end.unwrap_or(chunk.len());
        if buf.len() + taken > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the server sent a line longer than {max} bytes"),
            ));
        }
        buf.extend_from_slice(&chunk[..taken]);
        let Some(end) = end else {
            input.consume(taken);
            continue;
        };
        *after_cr = chunk[end] == b'\r';
        input.consume(end + 1);
        return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
    }
}

/// [`read_events`], keeping the stream's event id and reconnection time in `resume`.
pub(super) fn read_events_resuming(
    body: &mut dyn BufRead,
    resume: &mut Resume,
    mut on_data: impl FnMut(&str) -> bool,
) -> io::Result<()> {
    let mut data = String::new();
    // The SSE "last event ID buffer": it becomes the stream's last event id only when
    // its event is dispatched (at the blank line), whether or not that event has data.
    let mut id = resume.last_id.clone();
    let mut after_cr = false;
    loop {
        let Some(line) = event_line(body, &mut after_cr, MAX_SERVER_MESSAGE)? else {
            return Ok(());
        };
        let text = line.as_str();
        if text.is_empty() {
            resume.last_id.clone_from(&id);
            if !data.is_empty() {
                let keep_going = on_data(&data);
                data.clear();
                if !keep_going {
                    return Ok(());
                }
            }
            continue;
        }
        if let Some(value) = text.strip_prefix("data:") {
            if data.len() + value.len() > MAX_SERVER_MESSAGE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the server sent an event larger than {MAX_SERVER_MESSAGE} bytes"),
                ));
            }
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        } else if text == "id" {
            // A field with no colon has an empty value: the stream resets its event id.
            id.clear();
        } else if let Some(value) = text.strip_prefix("id:") {
            let value = value.strip_prefix(' ').unwrap_or(value);
            // SSE ignores an id with NUL; an id the client could not send back in a
            // header is no use to it either.
            if value.len() <= MAX_EVENT_ID && header_safe(value) {
                value.clone_into(&mut id);
            }
        } else if let Some(value) = text.strip_prefix("retry:") {
            let value = value.strip_prefix(' ').unwrap_or(value);
            if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(ms) = value.parse() {
                    resume.retry = Some(Duration::from_millis(ms));
                }
            }
        }
        // `event:` and `:` comments need nothing from us.
    }
}
