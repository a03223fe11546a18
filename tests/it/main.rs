//! One integration-test binary (each file under tests/ would otherwise re-link the crate).

mod client;
mod client_faults;
mod fixtures;
mod handle;
mod hostile;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
mod http_auth;
#[cfg(feature = "http")]
mod http_conn;
#[cfg(feature = "http")]
mod http_hostile;
mod journal;
mod model;
#[cfg(feature = "http")]
mod raw_http;
mod server;
mod stdio;
mod wire;
