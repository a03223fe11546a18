//! 2026-07-28 (SEP-2663) requests, which stand alone and go to one shared connection (one
//! per identity with [`HttpOptions::authenticate`](super::HttpOptions::authenticate), see
//! `auth`): the removed methods are refused, the routing headers (`Mcp-Method`,
//! `Mcp-Name`) must match the body, and `subscriptions/listen` gets an event stream of its
//! own. Apart from `session`: nothing here keeps anything between requests.

use std::sync::Arc;

use crossbeam_channel::select;
use serde_json::Value;

use super::outbox::{Responder, CLIENT_CHECK};
use super::wire::Head;
use super::{dispatch, respond, too_many_streams, Answer, State, KEEP_ALIVE};
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::{header_value, sep2663};
use crate::server::listen::{stream_queue, Ending, Sink, STREAM_QUEUE, STREAM_QUEUE_BYTES};
use crate::server::Connection;

fn status_of(response: &Value) -> u16 {
    match response.pointer("/error/code").and_then(Value::as_i64) {
        Some(sep2663::HEADER_MISMATCH | sep2663::MISSING_CAPABILITY) => 400,
        _ => 200,
    }
}

/// A message for a stateless `connection` (the shared one, or its sender's identity's),
/// which must only ever see 2026-07-28 requests: SEP-2663 tasks live there, bound to no
/// session its clients share, so a 2025-11-25 handler (`tasks/list`, `tasks/result`,
/// `initialize`) run there would hand them to anyone.
pub(super) fn post_stateless(
    state: &Arc<State>,
    connection: Arc<Connection>,
    head: &Head,
    responder: Responder,
    message: Message,
    speaks_sep2663: bool,
    version_mismatch: bool,
) {
    if let Message::Request(r) = &message {
        // Removed methods are refused before any header or parameter is looked at.
        if matches!(
            r.method.as_str(),
            "tasks/result" | "tasks/list" | "initialize"
        ) {
            let error = RpcError::method_not_found(&r.method);
            let response = jsonrpc::error_response(Some(&r.id), &error);
            return respond(responder, Answer::json(200, response));
        }
        let checked = if version_mismatch || !speaks_sep2663 {
            Err(RpcError::new(
                sep2663::HEADER_MISMATCH,
                format!(
                    "the MCP-Protocol-Version header does not match the body: a {} request \
                     names its protocol version in params._meta[\"{}\"]",
                    sep2663::PROTOCOL_VERSION,
                    crate::protocol::meta::PROTOCOL_VERSION_KEY,
                ),
            ))
        } else {
            check_routing_headers(head, &r.method, r.params.as_ref())
        };
        if let Err(error) = checked {
            let response = jsonrpc::error_response(Some(&r.id), &error);
            return respond(responder, Answer::json(400, response));
        }
    } else if !speaks_sep2663 {
        // Nothing to answer, and nothing a 2025-11-25 notification or response could mean
        // to the stateless connection.
        return respond(responder, Answer::empty(202));
    }
    let message = match message {
        Message::Request(request) if request.method == "subscriptions/listen" => {
            return listen(state, connection, head, responder, request)
        }
        other => other,
    };
    dispatch(&connection, responder, message, |response| {
        Answer::json(status_of(&response), response)
    });
}

/// `subscriptions/listen`: an event stream of its own carries the subscription's messages
/// (the acknowledgement, task states, and the result when the server ends it) until it
/// ends, or its client closes the stream, which ends the subscription. A refusal is a JSON
/// answer, as for any request. `connection` is held while the stream lasts, which keeps it
/// among its identity's (see `auth`).
fn listen(
    state: &Arc<State>,
    connection: Arc<Connection>,
    head: &Head,
    responder: Responder,
    request: jsonrpc::Request,
) {
    let jsonrpc::Request { id, params, .. } = request;
    let (queue, messages) = stream_queue(STREAM_QUEUE, STREAM_QUEUE_BYTES);
    let key = match connection.open_listen(&id, params.as_ref(), Sink::Own(queue)) {
        Ok(key) => key,
        Err(error) => {
            let response = jsonrpc::error_response(Some(&id), &error);
            return respond(responder, Answer::json(status_of(&response), response));
        }
    };
    // Looked at once the request is found sound: a refusal is JSON, which such a client
    // takes.
    if head.accepts("text/event-stream") == Some(false) {
        connection.close_listen(key, Ending::Silent);
        let error =
            RpcError::invalid_request("subscriptions/listen answers with text/event-stream");
        return respond(responder, Answer::error(406, error));
    }
    let Some(_slot) = state.streams.claim() else {
        connection.close_listen(key, Ending::Silent);
        let response = jsonrpc::error_response(Some(&id), &too_many_streams());
        return respond(responder, Answer::json(status_of(&response), response));
    };
    let fields = [
        ("Content-Type", "text/event-stream"),
        ("Cache-Control", "no-cache"),
    ];
    let Some(stream) = responder.stream(&fields) else {
        return connection.close_listen(key, Ending::Silent);
    };
    let send = |message: String| {
        messages.taken(&message);
        stream.send(format!("event: message\ndata: {message}\n\n").as_bytes())
    };
    let ending = loop {
        select! {
            recv(messages.receiver()) -> message => match message {
                Ok(message) => if send(message).is_err() {
                    break Ending::Silent;
                },
                // Ended, and everything it queued is written.
                Err(_) => return,
            },
            recv(state.stopping.closed()) -> _ => break Ending::Graceful,
            default(CLIENT_CHECK) => if stream.idle_tick(KEEP_ALIVE).is_err() {
                break Ending::Silent;
            },
        }
    };
    connection.close_listen(key, ending);
    if ending == Ending::Graceful {
        for message in messages.receiver().try_iter() {
            if send(message).is_err() {
                break;
            }
        }
    }
}

/// SEP-2243 routing headers: `Mcp-Method` must name the body's method, and `Mcp-Name` the
/// tool (for `tools/call`) or the task (for `tasks/get|update|cancel`), each sent once.
pub(super) fn check_routing_headers(
    head: &Head,
    method: &str,
    params: Option<&Value>,
) -> Result<(), RpcError> {
    let mismatch = |what: String| RpcError::new(sep2663::HEADER_MISMATCH, what);
    // Two values would let an intermediary act on one while the body is checked against
    // the other.
    let field = |name: &str| {
        (head.single_field(name)).map_err(|_| mismatch(format!("the {name} header is repeated")))
    };
    match field("Mcp-Method")? {
        Some(value) if value == method => {}
        Some(value) => {
            return Err(mismatch(format!(
                "Mcp-Method header '{value}' does not match the method '{method}'"
            )))
        }
        None => return Err(mismatch("the Mcp-Method header is missing".into())),
    }
    let named = match method {
        "tools/call" => params.and_then(|p| p.get("name")),
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.and_then(|p| p.get("taskId")),
        _ => return Ok(()),
    };
    let named = named.and_then(Value::as_str).unwrap_or("");
    // A name that cannot ride in a header as it is arrives encoded (SEP-2243).
    match field("Mcp-Name")? {
        Some(value) if header_value::decode(value).as_deref() == Some(named) => Ok(()),
        Some(value) => Err(mismatch(format!(
            "Mcp-Name header '{value}' does not match '{named}'"
        ))),
        None => Err(mismatch("the Mcp-Name header is missing".into())),
    }
}
