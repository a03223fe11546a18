//! One integration-test binary (each file under tests/ would otherwise re-link the crate).

mod handle;
mod model;
mod server;
mod stdio;
mod wire;
