//! The server layer: a registry of tools, a bounded worker pool that runs them (as tasks
//! or inline), per-connection state, and transports.
//!
//! ```no_run
//! use mcp_task_store::server::{text_result, Server, TaskSupport, Tool};
//! use serde_json::json;
//!
//! let slow = Tool::new(
//!     "report",
//!     "Builds a report; runs as a task",
//!     json!({"type": "object", "properties": {"pages": {"type": "integer"}}}),
//!     TaskSupport::Optional,
//!     |args, ctx| {
//!         let pages = args["pages"].as_u64().unwrap_or(1);
//!         for page in 1..=pages {
//!             ctx.set_status_message(format!("page {page} of {pages}")).ok();
//!             ctx.sleep(std::time::Duration::from_millis(100))?; // stops early on cancel
//!         }
//!         Ok(text_result(format!("{pages} pages")))
//!     },
//! );
//! let server = Server::builder().tool(slow).build()?;
//! server.serve_stdio()?; // MCP over stdin/stdout until the client closes it
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
mod connection;
mod context;
pub mod demo;
#[cfg(feature = "http")]
mod http;
mod listen;
mod pool;
mod stdio;
mod tools;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

pub use batch::MAX_BATCH_LEN;
pub use connection::{Connection, Responder, SUPPORTED_VERSIONS};
pub use context::{Cancelled, ClientPeer, TaskContext};
#[cfg(feature = "http")]
#[doc(hidden)]
pub use http::fuzz_requests as fuzz_http_requests;
#[cfg(feature = "http")]
pub use http::{Authenticate, HttpOptions, HttpServer, RequestHead, Unauthorized};
pub use listen::{MAX_LISTENS, MAX_LISTEN_ID_BYTES, MAX_LISTEN_TASKS};
pub use tools::{
    error_result, text_result, Preflight, TaskSupport, Tool, ToolRegistry, ToolResult,
};

use crate::store::{Store, StoreConfig};
use crate::{StoreError, TaskStore};
use pool::WorkerPool;

/// What every connection of a server shares.
pub(crate) struct ServerCore {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) tools: ToolRegistry,
    pub(crate) pool: WorkerPool,
    pub(crate) name: String,
    pub(crate) version: String,
    /// How long a SEP-2663 call may run inline before it becomes a task.
    pub(crate) promote_after: Duration,
    /// `tasks/result` calls waiting on their own threads, across all connections.
    pub(crate) waiting_results: AtomicUsize,
    pub(crate) max_waiting_results: usize,
    /// The embedded store, when the server made its own; dropped (and joined) last.
    _owned_store: Option<Store>,
}

/// An MCP server whose tools can run as tasks. Cheap to clone.
#[derive(Clone)]
pub struct Server {
    core: Arc<ServerCore>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.core.name)
            .field("tools", &self.core.tools)
            .finish_non_exhaustive()
    }
}

/// Configures a [`Server`].
pub struct ServerBuilder {
    store: Option<Arc<dyn TaskStore>>,
    store_config: StoreConfig,
    tools: ToolRegistry,
    workers: usize,
    queue: usize,
    name: String,
    version: String,
    promote_after: Duration,
    max_waiting_results: usize,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("store_config", &self.store_config)
            .field("tools", &self.tools)
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            store: None,
            store_config: StoreConfig::default(),
            tools: ToolRegistry::new(),
            workers: 16,
            queue: 1024,
            name: env!("CARGO_PKG_NAME").to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            promote_after: Duration::from_millis(50),
            max_waiting_results: 4096,
        }
    }
}

impl ServerBuilder {
    /// Adds a tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.register(tool);
        self
    }

    /// Uses an existing store (any [`TaskStore`]) instead of starting an embedded one.
    pub fn store(mut self, store: Arc<dyn TaskStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Configuration of the embedded store (ignored when [`store`](Self::store) is set).
    pub fn store_config(mut self, config: StoreConfig) -> Self {
        self.store_config = config;
        self
    }

    /// Worker threads that run tools (default 16). A tool waiting on its client
    /// (elicitation, sampling, SEP-2663 input) does not count: a stand-in thread takes its
    /// place meanwhile (at most 1,024 stand-ins at once).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Calls that may wait for a worker before the server answers "busy" (default 1024).
    pub fn queue(mut self, queue: usize) -> Self {
        self.queue = queue;
        self
    }

    /// How long a task-optional tool called over SEP-2663, by a client that declares the
    /// tasks extension, may run inline before it becomes a task (default 50 ms). A call that
    /// finishes in time gets a plain result and never touches the store; a task-required
    /// tool becomes a task at once.
    pub fn promote_after(mut self, budget: Duration) -> Self {
        self.promote_after = budget;
        self
    }

    /// Most `tasks/result` calls on unfinished tasks that may wait at once across all
    /// connections (default 4096; one connection may have at most 256). Each waits on a
    /// thread of its own, so this bounds the threads clients can make the server hold;
    /// calls beyond it get an error. Calls on finished tasks never wait.
    pub fn max_waiting_results(mut self, max: usize) -> Self {
        self.max_waiting_results = max;
        self
    }

    /// The name and version reported in `serverInfo`.
    pub fn info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.name = name.into();
        self.version = version.into();
        self
    }

    /// Starts the embedded store if needed and the worker pool.
    ///
    /// Fails with [`StoreError::InvalidConfig`] when `workers`, `queue` or
    /// `max_waiting_results` is 0, or when the worker threads cannot all be started, and
    /// with the embedded store's own error when it cannot start.
    pub fn build(self) -> Result<Server, StoreError> {
        let zero = [
            ("workers", self.workers),
            ("queue", self.queue),
            ("max_waiting_results", self.max_waiting_results),
        ]
        .into_iter()
        .find(|&(_, value)| value == 0);
        if let Some((field, _)) = zero {
            return Err(StoreError::InvalidConfig {
                field,
                reason: "must be at least 1".into(),
            });
        }
        let pool =
            WorkerPool::new(self.workers, self.queue).map_err(|e| StoreError::InvalidConfig {
                field: "workers",
                reason: format!("could not all be started ({e})"),
            })?;
        let (store, owned): (Arc<dyn TaskStore>, Option<Store>) = match self.store {
            Some(store) => (store, None),
            None => {
                let owned = Store::start(self.store_config)?;
                (Arc::new(owned.handle()), Some(owned))
            }
        };
        Ok(Server {
            core: Arc::new(ServerCore {
                store,
                tools: self.tools,
                pool,
                name: self.name,
                version: self.version,
                promote_after: self.promote_after,
                waiting_results: AtomicUsize::new(0),
                max_waiting_results: self.max_waiting_results,
                _owned_store: owned,
            }),
        })
    }
}

impl Server {
    /// A builder with no tools and an embedded store with the default configuration.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The store behind the server.
    pub fn store(&self) -> Arc<dyn TaskStore> {
        self.core.store.clone()
    }

    /// A new connection whose outgoing messages (server-to-client requests and
    /// notifications) go to `outgoing`; `session` scopes the tasks it sees. A task
    /// subscription's messages, its result included, go there too and wait for room (its
    /// `subscriptions/listen` gets `Value::Null` from the responder). Connections with the
    /// same session, `None` included, see (and may cancel) each other's tasks: give each
    /// client its own session unless they trust each other.
    pub fn connect(
        &self,
        outgoing: crossbeam_channel::Sender<serde_json::Value>,
        session: Option<crate::SessionId>,
    ) -> Arc<Connection> {
        Connection::new(self.core.clone(), outgoing, session, false, MAX_LISTENS)
    }

    /// A connection that serves stateless (2026-07-28) HTTP clients: all of them (no
    /// `session`), or those of one identity (its store session). Their request ids may
    /// collide, so `notifications/cancelled` is not applied there. At most `max_listens`
    /// task subscriptions are open on it at once.
    #[cfg(feature = "http")]
    pub(crate) fn connect_stateless(
        &self,
        outgoing: crossbeam_channel::Sender<serde_json::Value>,
        session: Option<crate::SessionId>,
        max_listens: usize,
    ) -> Arc<Connection> {
        Connection::new(self.core.clone(), outgoing, session, true, max_listens)
    }

    /// Serves MCP over this process's stdin and stdout until stdin closes.
    ///
    /// The connection is sessionless, as stdio has one client per server process; a
    /// journaled store's tasks are then visible again to the client after a restart.
    ///
    /// A client that stops reading stdout stops the server reading stdin once 1024
    /// messages wait to be written (backpressure); notifications are dropped meanwhile
    /// (a task subscription's wait, as answers do).
    pub fn serve_stdio(&self) -> std::io::Result<()> {
        let stdin = std::io::stdin();
        stdio::serve(self, stdin.lock(), std::io::stdout())
    }

    /// Serves MCP over any line-oriented reader and writer (newline-delimited JSON-RPC)
    /// until the reader reaches its end.
    ///
    /// Like [`serve_stdio`](Self::serve_stdio), the connection is sessionless: two calls
    /// on one `Server` serve clients that see each other's tasks. To keep several clients
    /// apart, [`connect`](Self::connect) each with a session of its own.
    pub fn serve_lines(
        &self,
        input: impl std::io::BufRead,
        output: impl std::io::Write + Send + 'static,
    ) -> std::io::Result<()> {
        stdio::serve(self, input, output)
    }
}
