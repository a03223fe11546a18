//! JSON-RPC batches, for clients of protocol version 2025-03-26 (which says servers MUST
//! accept them) and 2024-11-05 (plain JSON-RPC 2.0, which allows them); 2025-06-18
//! removed them, and a connection that settled on a later version refuses an array.
//!
//! Every message of a batch is handled as if it had come alone, in order, and the answers
//! to its requests go back together as one array once the last is ready (JSON-RPC 2.0,
//! "Batch"): a quick `ping` beside a slow `tools/call` waits for it. A batch of
//! notifications and responses only gets no answer at all.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::connection::{Connection, Responder};
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::RequestMeta;

/// Most messages one batch may hold. A batch's answers are built as a tree in memory
/// before they are written, and the answer to a short message (`1,` is one) can be fifty
/// times its size: the bound keeps a hostile batch within a few megabytes.
pub const MAX_BATCH_LEN: usize = 1024;

/// Handles a batch on `connection`, which accepts batches: answers `respond` exactly once,
/// with the array of the answers, with `Value::Null` when none is due, or with one error
/// for an empty or oversized batch (JSON-RPC answers `[]` with a single error).
pub(crate) fn handle(connection: &Arc<Connection>, items: Vec<Value>, respond: Responder) {
    if items.is_empty() {
        let error = RpcError::invalid_request("an empty batch");
        return respond(jsonrpc::error_response(None, &error));
    }
    if items.len() > MAX_BATCH_LEN {
        let error = RpcError::invalid_request(format!(
            "a batch of {} messages (at most {MAX_BATCH_LEN})",
            items.len()
        ));
        return respond(jsonrpc::error_response(None, &error));
    }
    let answers = Answers::new(items.len(), respond);
    for (slot, item) in items.into_iter().enumerate() {
        let refuse = |id, why: &str| {
            let error = RpcError::invalid_request(why);
            answers.put(slot, jsonrpc::error_response(id, &error));
        };
        if item.is_array() {
            refuse(None, "a batch cannot hold a batch");
            continue;
        }
        match jsonrpc::classify(item) {
            Ok(Message::Request(request)) if request.method == "initialize" => {
                // 2025-03-26: "The initialize request MUST NOT be part of a JSON-RPC batch".
                refuse(Some(&request.id), "initialize cannot be part of a batch")
            }
            Ok(Message::Request(request))
                if RequestMeta::of(request.params.as_ref()).speaks_sep2663(&request.method) =>
            {
                // 2026-07-28 has no batches (and over HTTP its requests belong to another
                // connection than the session's).
                refuse(
                    Some(&request.id),
                    "a 2026-07-28 request cannot be part of a batch",
                )
            }
            Ok(request @ Message::Request(_)) => {
                let answers = answers.clone();
                connection
                    .handle_message(request, Box::new(move |answer| answers.put(slot, answer)))
            }
            Ok(other) => {
                connection.handle_message(other, Box::new(|_| {}));
                answers.put(slot, Value::Null);
            }
            Err(rejected) => {
                if rejected.response {
                    log::debug!("dropped a response: {}", rejected.error);
                }
                answers.put(slot, rejected.answer().unwrap_or(Value::Null));
            }
        }
    }
}

/// The answers of one batch as they come in, from any thread; the last one sends them.
#[derive(Clone)]
struct Answers(Arc<Mutex<Pending>>);

struct Pending {
    /// In the order of the batch's messages; `Null` for those answered with nothing
    /// (notifications, responses, requests their client cancelled).
    answers: Vec<Value>,
    missing: usize,
    respond: Option<Responder>,
}

impl Answers {
    fn new(len: usize, respond: Responder) -> Answers {
        Answers(Arc::new(Mutex::new(Pending {
            answers: vec![Value::Null; len],
            missing: len,
            respond: Some(respond),
        })))
    }

    /// Records the answer to the message in `slot` (each slot is answered once).
    fn put(&self, slot: usize, answer: Value) {
        let mut pending = self.0.lock();
        pending.answers[slot] = answer;
        pending.missing -= 1;
        if pending.missing > 0 {
            return;
        }
        let respond = pending.respond.take();
        let answers: Vec<Value> = std::mem::take(&mut pending.answers)
            .into_iter()
            .filter(|answer| !answer.is_null())
            .collect();
        drop(pending);
        if let Some(respond) = respond {
            respond(if answers.is_empty() {
                Value::Null
            } else {
                Value::Array(answers)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;
    use serde_json::json;

    fn collector(len: usize) -> (Answers, crossbeam_channel::Receiver<Value>) {
        let (tx, rx) = unbounded();
        (
            Answers::new(len, Box::new(move |v| tx.send(v).unwrap())),
            rx,
        )
    }

    #[test]
    fn answers_go_out_together_in_batch_order_once_the_last_arrives() {
        let (answers, sent) = collector(3);
        answers.put(2, json!("c"));
        answers.put(1, Value::Null);
        assert!(sent.try_recv().is_err(), "sent before the last answer");
        answers.put(0, json!("a"));
        assert_eq!(sent.try_recv().unwrap(), json!(["a", "c"]));
        assert!(sent.try_recv().is_err(), "sent twice");
    }

    #[test]
    fn a_batch_with_nothing_to_answer_is_answered_with_null() {
        let (answers, sent) = collector(2);
        answers.put(0, Value::Null);
        answers.put(1, Value::Null);
        assert_eq!(sent.try_recv().unwrap(), Value::Null);
    }
}
