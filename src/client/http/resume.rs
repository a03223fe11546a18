//! Resuming a POST's event stream (2025-11-25, SEP-1699): a server may end the event
//! stream that answers a POST before the response comes (to free the connection, say),
//! having given its events ids, and a stream may break off (a network failure). The
//! client then asks for the rest with a `GET` that carries `Last-Event-ID`, once the
//! server's `retry:` time is over, and reads that stream as it read the POST's; one that
//! ends or breaks off without the answer too is resumed again from the newest id.
//!
//! Every wait stays bounded: the request's exchange is abandoned as a POST's is (a `GET`
//! resuming it belongs to it among the open connections, and the wait before each `GET`
//! ends as soon as nobody waits for the request, the client shuts down or the session is
//! replaced); the wait is the server's `retry:` time, which clients must respect, however
//! long (see [`resume_wait`]); and after
//! [`MAX_FRUITLESS_RESUMPTIONS`] in a row that bring no new event, or a `GET` the server
//! refuses, the request fails. These `GET`s are not the session's own event stream
//! ([`stream`](super::stream)), which the server never mixes with them: its reader knows
//! nothing of them.

use std::io;
use std::time::Duration;

use super::sse::Resume;
use super::stream::{reopen_wait, Wake};
use super::wire::exchange;
use super::{unanswered, Inner};
use crate::client::ClientError;
use crate::protocol::jsonrpc::RequestId;

/// How many resumptions in a row may bring no new event (a `GET` that could not be
/// opened, or was answered 408, 409, 429 or 5xx, counts as one) before the request fails.
pub(super) const MAX_FRUITLESS_RESUMPTIONS: u32 = 3;

/// The wait before a resumption after `fruitless` ones in a row that brought nothing, as
/// before the `GET` stream is opened again: the server's `retry:` time however long
/// (SEP-1699: clients MUST respect it), doubled after each fruitless resumption up to
/// [`MAX_REOPEN_WAIT`](super::stream::MAX_REOPEN_WAIT) or `retry` if longer. The wait
/// still ends early when nobody waits for the request any more (its timeout, say), the
/// client shuts down or the session is replaced.
pub(super) fn resume_wait(retry: Option<Duration>, fruitless: u32) -> Duration {
    reopen_wait(retry, fruitless)
}

/// How one resumption went, short of an end for the request.
enum Resumed {
    /// The resumed stream answered the request.
    Answered,
    /// It ended (or broke off) without the answer; `progress`: it brought a new event id.
    Ended { progress: bool },
    /// The `GET` could not be opened now (no connection, a passing server error).
    Failed(String),
}

impl Inner {
    /// Resumes the event stream of request `id`'s POST, which ended without its answer
    /// after the event `resume` names, until the answer comes (see the module's doc).
    /// `idle`: the read limit of the request's exchange until a response head comes;
    /// `session`: the session the POST went in, the one the `GET` asks in.
    pub(super) fn resume_answer(
        &self,
        id: &RequestId,
        initialize: bool,
        idle: Option<Duration>,
        session: Option<&str>,
        mut resume: Resume,
    ) -> Result<(), ClientError> {
        // The session's renewals so far: one more means the POST's session is gone.
        let renewals = self.stream.renewals();
        let mut fruitless = 0u32;
        loop {
            let wait = resume_wait(resume.retry, fruitless);
            let wanted = || self.shared.is_pending(id);
            match (self.stream).pause_while(&self.open, renewals, Some(wait), wanted) {
                Wake::TimedOut => {}
                Wake::Closed => {
                    return Err(unanswered(
                        id,
                        ", and the client shut down before it resumed",
                    ))
                }
                Wake::Abandoned => {
                    return Err(unanswered(id, ", and nobody waits for it any more"))
                }
                Wake::Renewed => {
                    return Err(unanswered(
                        id,
                        ", and its session was replaced (the server forgot it) before the \
                         client resumed it",
                    ))
                }
            }
            let what = match self.resume_once(id, initialize, idle, session, &mut resume)? {
                Resumed::Answered => return Ok(()),
                // A `GET` without `Last-Event-ID` asks for the session's own stream.
                Resumed::Ended { .. } if resume.last_id.is_empty() => {
                    return Err(unanswered(
                        id,
                        ", and the stream resuming it reset its event id: there is nothing \
                         to resume it from",
                    ))
                }
                Resumed::Ended { progress: true } => {
                    fruitless = 0;
                    continue;
                }
                Resumed::Ended { progress: false } => "a stream with no new event".to_owned(),
                Resumed::Failed(what) => what,
            };
            fruitless += 1;
            log::info!("mcp client: resuming the answer to request {id} brought nothing: {what}");
            if fruitless >= MAX_FRUITLESS_RESUMPTIONS {
                return Err(unanswered(
                    id,
                    &format!(
                        ", and {fruitless} attempts in a row to resume it from event id {:?} \
                         brought no new event (the last: {what})",
                        resume.last_id
                    ),
                ));
            }
        }
    }

    /// One `GET` resuming request `id`'s stream after `resume.last_id`, read until it
    /// answers or ends. An error ends the request: the server refused to resume it, or
    /// nobody waits for it any more.
    fn resume_once(
        &self,
        id: &RequestId,
        initialize: bool,
        idle: Option<Duration>,
        session: Option<&str>,
        resume: &mut Resume,
    ) -> Result<Resumed, ClientError> {
        let mut headers = vec![
            ("Accept", "text/event-stream".to_owned()),
            ("MCP-Protocol-Version", self.version()),
        ];
        if let Some(session) = session {
            headers.push(("Mcp-Session-Id", session.to_owned()));
        }
        headers.push(("Last-Event-ID", resume.last_id.clone()));
        // Abandoned like the POST: its connection is shut down, and an exchange that
        // starts after that ends at once.
        let mut link = self.link_within(idle, None);
        link.owner = Some((id, &*self.shared));
        let gone = || self.open.is_closed() || !self.shared.is_pending(id);
        let mut response = match exchange(&self.endpoint, "GET", &headers, &[], link) {
            Ok(response) => response,
            Err(_) if gone() => return Err(unanswered(id, ", and nobody waits for it any more")),
            Err(error) => return Ok(Resumed::Failed(format!("the GET failed: {error}"))),
        };
        let status = response.status;
        // A forgotten session is not renewed here: the request went in it, and sending
        // it again in a new one could run it twice.
        if status == 404 && session.is_some() {
            return Err(unanswered(
                id,
                &format!(
                    ", and the server no longer knows its session {} (HTTP 404 to the GET \
                     resuming it)",
                    session.unwrap_or_default()
                ),
            ));
        }
        if matches!(status, 408 | 409 | 429 | 500..=599) {
            return Ok(Resumed::Failed(format!("HTTP {status} to the GET")));
        }
        if !(200..300).contains(&status) {
            return Err(unanswered(
                id,
                &format!(
                    ", and the server refused to resume it (HTTP {status} to the GET with \
                     Last-Event-ID {:?})",
                    resume.last_id
                ),
            ));
        }
        if !response.is_event_stream() {
            return Err(unanswered(
                id,
                &format!(", and the GET resuming it got no event stream (HTTP {status})"),
            ));
        }
        response.session = session.map(str::to_owned);
        let before = resume.last_id.clone();
        match self.answer_events(id, initialize, response, resume) {
            Ok(true) => Ok(Resumed::Answered),
            // An event too large to read is no passing trouble.
            Err(error) if error.kind() == io::ErrorKind::InvalidData => Err(self.io_error(error)),
            // A stream that breaks off is resumed as one that ends.
            Ok(false) | Err(_) => {
                if gone() {
                    return Err(unanswered(id, ", and nobody waits for it any more"));
                }
                Ok(Resumed::Ended {
                    progress: resume.last_id != before,
                })
            }
        }
    }
}
