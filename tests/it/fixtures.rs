//! Pieces several test files share: tools with odd behaviour, and a writer to read back.

use std::io::Write;
use std::sync::Arc;

use mcp_task_store::protocol::RpcError;
use mcp_task_store::server::{TaskSupport, Tool};
use parking_lot::Mutex;
use serde_json::json;

/// A tool that fails with a JSON-RPC error (code -32000, with data).
pub fn boom_tool() -> Tool {
    Tool::new(
        "boom",
        "Fails with a JSON-RPC error",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |_, _| Err(RpcError::new(-32000, "boom").with_data(json!({"why": "testing"}))),
    )
}

/// A tool that panics: the server must turn it into an error, not lose the worker.
pub fn panic_tool() -> Tool {
    Tool::new(
        "panic",
        "Panics",
        json!({"type": "object"}),
        TaskSupport::Optional,
        |_, _| panic!("tool bug"),
    )
}

/// A writer the test can read back while the server still holds it.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The JSON-RPC messages written so far, one per line.
    pub fn messages(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().clone();
        String::from_utf8(bytes)
            .expect("only UTF-8 goes out")
            .lines()
            .map(|line| serde_json::from_str(line).expect("only JSON-RPC goes out"))
            .collect()
    }
}
