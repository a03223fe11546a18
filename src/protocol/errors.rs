//! The one place where store errors become JSON-RPC errors.

use super::jsonrpc::{RpcError, INTERNAL_ERROR, INVALID_PARAMS};
use crate::StoreError;

/// Maps a store error to the JSON-RPC error a client sees. Unknown, foreign and expired
/// tasks all become the same -32602, so a client learns nothing about other sessions.
pub fn rpc_error(error: &StoreError) -> RpcError {
    let code = match error {
        StoreError::NotFound
        | StoreError::InvalidCursor
        | StoreError::InvalidArgument(_)
        | StoreError::InvalidTransition { .. }
        | StoreError::AlreadyTerminal(_)
        | StoreError::NoResult { .. }
        | StoreError::InputKeyReused { .. }
        | StoreError::UnknownInputKey { .. } => INVALID_PARAMS,
        _ => INTERNAL_ERROR,
    };
    let message = match error {
        StoreError::NotFound => "Failed to retrieve task: Task not found".to_string(),
        StoreError::InvalidCursor => "Invalid cursor".to_string(),
        other => {
            let text = other.to_string();
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect(),
                None => text,
            }
        }
    };
    RpcError::new(code, message)
}

impl From<StoreError> for RpcError {
    fn from(error: StoreError) -> Self {
        rpc_error(&error)
    }
}
