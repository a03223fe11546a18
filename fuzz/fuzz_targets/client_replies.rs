//! The client's reading of a server's HTTP answer on arbitrary bytes: status line, header
//! fields, framing (length, chunked, to the end), then the JSON-RPC response to the POST's
//! request in a JSON body or an event stream, and the same body read as the `GET` event
//! stream. Nothing may panic, loop, or allocate without bound.
//!
//! Input: the bytes a server sends back to a POST of request id 1.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mcp_task_store::client::fuzz_response(data, 1);
});
