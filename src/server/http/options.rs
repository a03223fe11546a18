//! [`HttpOptions`]: the transport's settings and their defaults. The one public type the
//! transport has besides the server itself, kept apart so that its documentation, which is
//! what users read, does not sit among the machinery.

use std::time::Duration;

use super::auth::Authenticate;

/// Settings of the HTTP transport.
#[derive(Clone)]
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
    /// With [`authenticate`](Self::authenticate): most 2025-11-25 sessions one identity
    /// holds at once (default 64), so that no identity can take all of `max_sessions`
    /// and lock the others out. An `initialize` beyond it ends that identity's least
    /// recently active quiet session, as at `max_sessions`, and gets HTTP 503 if it has
    /// none. 0 counts as 1.
    pub max_sessions_per_identity: usize,
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
    /// Tells who sent each request to `/mcp` (whatever its method but `OPTIONS`, which a
    /// browser's CORS preflight sends without credentials) from its head: an identity (a
    /// user or client id the embedder trusts, say from a bearer token it verified or a
    /// header its authenticating proxy sets), or a refusal, answered with HTTP 401 or 403
    /// and its `WWW-Authenticate` field ([`Unauthorized`](super::Unauthorized)).
    ///
    /// Tasks are then bound to identities, as MCP requires where an authorization context
    /// exists. A 2025-11-25 session belongs to the identity that opened it: a request
    /// naming it with another identity gets 404, as an unknown session does, so that
    /// session's tasks (its `tasks/list` included) are out of reach. A 2026-07-28 task
    /// belongs to the identity that created it: another identity's `tasks/get`,
    /// `tasks/update`, `tasks/cancel` and `subscriptions/listen` find no such task. Those
    /// tasks live in the store session `auth:<identity>`, so a journaled store keeps the
    /// binding across restarts, and [`StoreConfig::max_tasks_per_session`] caps the
    /// 2026-07-28 tasks each identity holds, finished ones included until their TTL removes
    /// them (each of its 2025-11-25 sessions is capped apart).
    /// Return a stable id (not a token that rotates): a new identity sees none of the old
    /// one's tasks. An identity holds at most
    /// [`max_sessions_per_identity`](Self::max_sessions_per_identity) sessions, and an
    /// `initialize` at [`max_sessions`](Self::max_sessions) ends a quiet session of its own
    /// identity first, another identity's only when it has none (and with it the results
    /// of that session's finished tasks). The other limits are shared: one identity may
    /// take all of [`StoreConfig::max_tasks`] or of the event streams. Idle connections of
    /// more than `max_sessions` identities are not kept (they hold nothing the store does
    /// not).
    ///
    /// The hook runs on the connection's reader once the request's head is read and found
    /// well formed, before its body is read: a refused request's body is never taken in
    /// (nor an `Expect: 100-continue` client told to send it), and its connection closes
    /// after the refusal, so a client sends credentials with a new one. (Whatever of the
    /// body still arrives as it closes is read and dropped for a moment, lest it reset the
    /// connection and lose the refusal.) It should not block for
    /// long (a network lookup holds that connection's next request). A hook that panics
    /// gets the request HTTP 500. Default: none, every request is served and 2026-07-28 task ids
    /// are bearer capabilities bound to nothing else.
    ///
    /// [`StoreConfig::max_tasks_per_session`]: crate::StoreConfig::max_tasks_per_session
    /// [`StoreConfig::max_tasks`]: crate::StoreConfig::max_tasks
    pub authenticate: Option<Authenticate>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_connections", &self.max_connections)
            .field("read_timeout", &self.read_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("max_sessions", &self.max_sessions)
            .field("max_sessions_per_identity", &self.max_sessions_per_identity)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .field("allowed_origins", &self.allowed_origins)
            .field(
                "authenticate",
                &self.authenticate.as_ref().map(|_| "<hook>"),
            )
            .finish()
    }
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
            max_sessions_per_identity: 64,
            session_idle_timeout: Duration::from_secs(30 * 60),
            allowed_origins: Vec::new(),
            authenticate: None,
        }
    }
}
