//! The protocol layer: JSON-RPC framing and the adapters that turn MCP task requests into
//! store calls and store records into wire messages. Everything here works on a
//! [`TaskStore`] trait object, so any backend can serve MCP.

mod errors;
#[cfg(feature = "http")]
pub(crate) mod header_value;
pub mod jsonrpc;
pub(crate) mod lines;
pub mod meta;
mod params;
pub mod sep2663;
pub mod v2025;

pub use errors::rpc_error;
pub use jsonrpc::{Message, Notification, Request, RequestId, Response, RpcError};
pub use meta::{RequestMeta, Revision};

use serde_json::Value;

use crate::model::SessionId;
use crate::TaskStore;

/// Serves one raw JSON-RPC `tasks/*` request against any store, in whichever revision the
/// request speaks (SEP-2663 when its `_meta` names protocol 2026-07-28, else 2025-11-25;
/// a version this server does not speak gets -32022, see [`meta::unsupported_version`]):
/// a host with its own transport can serve MCP tasks without rewriting the adapters. The
/// answer is the complete JSON-RPC response; `None` for a notification or a response.
/// A 2025-11-25 `tasks/result` blocks until the task is terminal. Methods outside
/// `tasks/` are -32601: tools and the handshake belong to the host.
pub fn dispatch_tasks(
    store: &dyn TaskStore,
    session: Option<&SessionId>,
    request: &str,
) -> Option<Value> {
    let request = match jsonrpc::parse_message(request) {
        Ok(Message::Request(request)) => request,
        Ok(_) => return None,
        // A response is never answered, not even one that could not be read.
        Err(rejected) => return rejected.answer(),
    };
    let Request { id, method, params } = request;
    let meta = RequestMeta::of(params.as_ref());
    if let Some(version) = meta.protocol_version.as_deref() {
        if !meta::supported_version(version) {
            return Some(jsonrpc::error_response(
                Some(&id),
                &meta::unsupported_version(version),
            ));
        }
    }
    let outcome = match meta.revision() {
        Revision::V2025 => v2025::handle(store, session, &method, params),
        Revision::Sep2663 => sep2663::handle(store, session, &method, params),
    };
    Some(match outcome {
        Some(Ok(result)) => jsonrpc::response(&id, result),
        Some(Err(error)) => jsonrpc::error_response(Some(&id), &error),
        None => jsonrpc::error_response(Some(&id), &RpcError::method_not_found(&method)),
    })
}
