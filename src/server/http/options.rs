//! [`HttpOptions`]: the transport's settings and their defaults. The one public type the
//! transport has besides the server itself, kept apart so that its documentation, which is
//! what users read, does not sit among the machinery.

use std::time::Duration;

/// Settings of the HTTP transport.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Largest request body accepted, in bytes (default 4 MiB); larger ones get HTTP 413.
    pub max_body_bytes: usize,
    /// Client connections open at once (default 1024), each with a reader and a writer
    /// thread, counted until its socket closes; one more gets HTTP 503 and is closed. Event
    /// streams, each of which holds a connection while it lasts (2025-11-25 sessions' `GET`
    /// streams and 2026-07-28 task subscriptions, at most
    /// [`MAX_LISTENS`](crate::server::MAX_LISTENS) of those), may take at most half of
    /// them together; one more is refused (a `GET` with 503, a `subscriptions/listen` with
    /// -32603; a session replacing its own stream never is), so other requests always find
    /// a connection.
    pub max_connections: usize,
    /// A request must arrive whole (head and body) within this of its first byte, else it
    /// gets HTTP 408 and the connection closes (default 30 s). A body behind `Expect:
    /// 100-continue` has this from when the interim answer goes out, which waits for the
    /// answers before it on the connection.
    pub read_timeout: Duration,
    /// A connection with no request coming and no answer due closes after this (default
    /// 2 minutes).
    pub idle_timeout: Duration,
    /// An answer (or an event) not written within this, plus a second per 64 KiB of it,
    /// ends its connection (default 30 s): a client that reads steadily gets a large answer
    /// whole, and one that stopped reading holds its connection's writer no longer.
    pub write_timeout: Duration,
    /// Most 2025-11-25 sessions open at once (default 1024). An `initialize` beyond it
    /// ends the least recently active session that loses nothing by it (no request in
    /// progress, no event stream open, no live task), and gets HTTP 503 if none does.
    pub max_sessions: usize,
    /// A 2025-11-25 session with no request in progress, no open event stream and no
    /// request for this long is ended as if the client had sent `DELETE` (its live tasks
    /// are cancelled). Default 30 minutes.
    pub session_idle_timeout: Duration,
    /// Browser origins whose pages may use the server, as a browser sends them in `Origin`
    /// (`https://app.example`, `http://localhost:6274`; scheme and host are compared in
    /// lower case and a default port is dropped, as browsers write them): they get CORS (a
    /// preflight `OPTIONS` is answered, allowing MCP's header fields and any other field
    /// names the page asks to send, and the page may read the answers, `Mcp-Session-Id`
    /// and `MCP-Protocol-Version`). Loopback origins not named here are served but get no
    /// CORS field, so a browser lets their pages do nothing that needs it (a JSON `POST`
    /// does). Any other `Origin` gets 403 (DNS rebinding).
    pub allowed_origins: Vec<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body_bytes: 4 * 1024 * 1024,
            max_connections: 1024,
            read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(30),
            max_sessions: 1024,
            session_idle_timeout: Duration::from_secs(30 * 60),
            allowed_origins: Vec::new(),
        }
    }
}
