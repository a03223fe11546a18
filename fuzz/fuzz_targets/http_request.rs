//! The server's HTTP/1.1 request reader on arbitrary bytes: requests are read one after
//! the other as a connection's reader does, and each gets the handler's checks of a head
//! and body (path, origin, content type, JSON-RPC, routing headers). Nothing may panic,
//! loop, or read a body past its limit.
//!
//! Input: one byte of options (bit 0: tiny limits; the high nibble: bytes per read, 0 for
//! unbounded), then the connection's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&options, bytes)) = data.split_first() else {
        return;
    };
    let small = options & 1 == 1;
    let chunk = usize::from(options >> 4);
    mcp_task_store::server::fuzz_http_requests(bytes, small, chunk);
});
