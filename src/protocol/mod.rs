//! The protocol layer: JSON-RPC framing and the adapters that turn MCP task requests into
//! store calls and store records into wire messages. Everything here works on a
//! [`TaskStore`](crate::TaskStore) trait object, so any backend can serve MCP.

mod errors;
pub mod jsonrpc;
pub mod meta;
pub mod sep2663;
pub mod v2025;

pub use errors::rpc_error;
pub use jsonrpc::{Message, Notification, Request, RequestId, Response, RpcError};
pub use meta::{RequestMeta, Revision};
