//! A blocking MCP client that calls tools and follows their tasks to the end.
//!
//! It connects over stdio (spawning the server) or Streamable HTTP (with the `http`
//! feature), speaks either revision of MCP tasks, and handles tasks by itself:
//! [`Client::call_tool`] polls `tasks/get` at the server's suggested interval (following
//! changes to it), answers the server's input requests through registered elicitation and
//! sampling handlers (each request once), and returns the tool's final result, or a typed
//! [`ClientError`] for a task that failed, was cancelled, expired, got stuck in
//! `input_required`, outlived the call's deadline, or could not be followed (its polls or
//! updates failed three times in a row: `TaskAbandoned`). Passing failures are retried at
//! the poll interval.
//!
//! - **2025-11-25**: `initialize` + `notifications/initialized`; a task is asked for
//!   (`params.task`) when the tool's `execution.taskSupport` is `optional` or `required`
//!   and the server declared `capabilities.tasks.requests.tools.call` (otherwise the call
//!   goes plain). While it polls, the client holds a `tasks/result` open: the server's
//!   `elicitation/create` / `sampling/createMessage` requests (tagged with the related
//!   task) are answered as they arrive, on stdio or on the HTTP `GET` event stream, and
//!   the answers carry the same related-task `_meta`.
//! - **SEP-2663** (protocol 2026-07-28): `server/discover`; every request declares the
//!   tasks extension in its `_meta`, and the server decides whether a call becomes a task.
//!   A call answered `input_required` (multi-round-trip) is answered through the handlers
//!   and repeated with `inputResponses`; a task's `inputRequests` are answered with
//!   `tasks/update`. A followed task is also subscribed to (`subscriptions/listen`), and
//!   each `notifications/tasks` about it brings the next poll forward (see
//!   [`ClientBuilder::task_notifications`]).
//!
//! ```no_run
//! use mcp_task_store::client::Client;
//! use serde_json::json;
//!
//! let client = Client::builder()
//!     .on_elicitation(|request| Ok(json!({"action": "accept", "content": {"answer": "42"}})))
//!     .connect_stdio(std::process::Command::new("mcp-task-server"))?;
//! let result = client.call_tool("ask", json!({"question": "What is the answer?"}))?;
//! println!("{result}");
//! # Ok::<(), mcp_task_store::client::ClientError>(())
//! ```

mod error;
#[cfg(feature = "http")]
mod http;
mod transport;
mod types;

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

pub use error::ClientError;
#[cfg(feature = "http")]
#[doc(hidden)]
pub use http::fuzz_response;
pub use types::{
    CallOutcome, InputRequest, InputRequests, InputResponses, PolledTask, Progress, TaskInfo,
    TaskList, ToolCall,
};

use crate::model::TaskStatus;
use crate::protocol::jsonrpc::{self, RpcError, INVALID_PARAMS};
use crate::protocol::meta::{CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY, TASKS_EXTENSION};
pub use crate::protocol::Revision;
use crate::protocol::{sep2663, v2025};
pub use crate::server::TaskSupport;
pub use transport::MAX_QUEUED_SERVER_REQUESTS;
use transport::{Handler, Handlers, LineTransport, Pending, Shared, Transport};

/// Consecutive `input_required` polls without a new input request before a task counts as
/// stuck (the C# SDK's threshold).
pub const DEFAULT_STUCK_POLLS: u32 = 60;
/// The polling interval used when the server suggests none.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long a best-effort `tasks/cancel` may take before the client gives up on its answer.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// Failed polls of a followed task in a row (or failed SEP-2663 `tasks/update`s in a row),
/// the connection staying open, after which the client gives up on the task
/// ([`ClientError::TaskAbandoned`]). Each is tried again at the task's polling interval: a
/// poll that timed out, a proxy's 502 or a garbled answer may well pass. (A SEP-2663 look
/// that a task notification brought forward, and that failed, does not count.)
const MAX_FOLLOW_FAILURES: u32 = 3;
/// The shortest polling interval the client accepts from a server.
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Most task subscriptions one client keeps open over HTTP, where each holds one of the
/// server's connections for as long as its task runs (`HttpOptions::max_connections`, 1024
/// on this crate's server, which lets subscriptions take half of them and refuses more):
/// tasks followed beyond it are only polled, so that following many tasks at once never
/// leaves the client's own polls without a connection.
pub const MAX_HTTP_TASK_SUBSCRIPTIONS: usize = 16;
/// The longest polling interval the client accepts from a server unless configured
/// otherwise ([`ClientBuilder::max_poll_interval`]): a longer suggestion (up to `u64::MAX`
/// ms on the wire) would leave a task unpolled, and its stuck detector idle, for as long
/// as it says.
pub const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(60);
/// The most `tools/list` pages the client follows before it takes the listing for one that
/// never ends ([`ClientError::Protocol`]).
pub const MAX_TOOL_PAGES: usize = 1000;
/// The most tools the client accepts from one `tools/list` listing, all pages together,
/// before it fails with [`ClientError::Protocol`] rather than hold them all.
pub const MAX_TOOLS: usize = 100_000;
/// How long a request waits for its answer unless configured otherwise (the TypeScript
/// SDK's default too).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
struct Config {
    revision: Revision,
    stuck_polls: u32,
    deadline: Option<Duration>,
    request_timeout: Duration,
    poll_interval: Duration,
    max_poll_interval: Duration,
    client_name: String,
    client_version: String,
    /// Capabilities declared without a handler (see [`ClientBuilder::declare`]).
    declared: Map<String, Value>,
    /// SEP-2663: subscribe to a followed task's status notifications (see
    /// [`ClientBuilder::task_notifications`]).
    task_notifications: bool,
}

/// Configures and connects a [`Client`].
pub struct ClientBuilder {
    config: Config,
    handlers: Handlers,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("config", &self.config)
            .field("elicitation", &self.handlers.elicitation.is_some())
            .field("sampling", &self.handlers.sampling.is_some())
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            config: Config {
                revision: Revision::V2025,
                stuck_polls: DEFAULT_STUCK_POLLS,
                deadline: None,
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
                poll_interval: DEFAULT_POLL_INTERVAL,
                max_poll_interval: DEFAULT_MAX_POLL_INTERVAL,
                client_name: env!("CARGO_PKG_NAME").to_owned(),
                client_version: env!("CARGO_PKG_VERSION").to_owned(),
                declared: Map::new(),
                task_notifications: true,
            },
            handlers: Handlers::default(),
        }
    }
}

impl ClientBuilder {
    /// The revision to speak: [`Revision::V2025`] (the default; `initialize`) or
    /// [`Revision::Sep2663`] (`server/discover`, the tasks extension on protocol 2026-07-28).
    pub fn revision(mut self, revision: Revision) -> Self {
        self.config.revision = revision;
        self
    }

    /// SEP-2663: whether a followed task is also watched through the server's status
    /// notifications (on by default). The client then opens a `subscriptions/listen` for
    /// the task and looks at it (`tasks/get`) as soon as the server says it changed,
    /// instead of only at the next poll; it still polls at the server's interval, and a
    /// server without task notifications (it refuses the subscription) is only polled.
    /// The subscription ends with the task (over HTTP it holds a connection meanwhile).
    pub fn task_notifications(mut self, on: bool) -> Self {
        self.config.task_notifications = on;
        self
    }

    /// Consecutive `input_required` polls without a new input request after which a task
    /// counts as stuck, is cancelled and the call fails with [`ClientError::Stuck`]
    /// (default [`DEFAULT_STUCK_POLLS`]; at least 1). Polls at the polling interval: on
    /// SEP-2663, a look a task notification brought forward does not count.
    pub fn stuck_polls(mut self, polls: u32) -> Self {
        self.config.stuck_polls = polls.max(1);
        self
    }

    /// An overall deadline for every [`Client::call_tool`] (none by default): past it, the
    /// call's task is cancelled and the call fails with [`ClientError::Deadline`].
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.config.deadline = Some(deadline);
        self
    }

    /// How long each request waits for its answer (default [`DEFAULT_REQUEST_TIMEOUT`],
    /// 60 s) before it fails with [`ClientError::Timeout`] and a late answer is ignored
    /// (over HTTP its connection is shut down):
    /// the handshake, every method wrapper, the polls and updates of a followed task, and a
    /// plain (task-less) `tools/call`, so a long-running tool that is not run as a task
    /// needs a longer timeout. Not bounded by it: the `tasks/result` that
    /// [`Client::call_tool`] holds open while it polls, and
    /// [`Client::get_task_result`], which both wait for the task itself. `Duration::MAX`
    /// waits for ever. Over HTTP it also bounds sending a notification or an answer to a
    /// server request, the whole exchange (which otherwise gets the transport's 300 s idle
    /// limit per read), so a server that never acknowledges one, or trickles its answer,
    /// holds neither the handshake nor the answering of its other requests for long; the
    /// body of a 2xx answer to one is not read. (A session renewal the send meets on the
    /// way, and the send again after it, each get a timeout of their own: a few in all.
    /// Resolving the server's name is not bounded by it.)
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }

    /// The polling interval used when the server suggests none (default 1 s; at least
    /// 10 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval.max(MIN_POLL_INTERVAL);
        self
    }

    /// The longest the client waits between two polls of a task, whatever the server
    /// suggests (default [`DEFAULT_MAX_POLL_INTERVAL`], 60 s; at least 10 ms).
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.config.max_poll_interval = interval.max(MIN_POLL_INTERVAL);
        self
    }

    /// The `clientInfo` name and version sent at `initialize`.
    pub fn info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.config.client_name = name.into();
        self.config.client_version = version.into();
        self
    }

    /// Answers the server's `elicitation/create` requests. The handler gets the request
    /// (its params are the elicitation) and returns the `ElicitResult`
    /// (`{"action": "accept", "content": {...}}`). Registering it declares the
    /// `elicitation` capability. The handlers answer one server request at a time; one
    /// that finds [`MAX_QUEUED_SERVER_REQUESTS`] already waiting is refused at once
    /// (JSON-RPC error -32603, "client busy").
    pub fn on_elicitation(
        mut self,
        handler: impl Fn(&InputRequest) -> Result<Value, RpcError> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.elicitation = Some(Arc::new(handler) as Handler);
        self
    }

    /// Declares client capability `name` (`elicitation`, `sampling`, `roots`, ...) with
    /// `value` (its settings, `{}` for none) without registering a handler: for a client
    /// that answers the server's input requests itself, by
    /// [`update_task`](Client::update_task) (SEP-2663) or [`request`](Client::request).
    /// A server may only ask for input its client declared: a SEP-2663 server refuses a
    /// call whose tool would ask for undeclared input with -32021, and a 2025-11-25 tool
    /// gets an error instead of asking. A handler registered for the same capability
    /// declares it with its own settings.
    pub fn declare(mut self, name: impl Into<String>, value: Value) -> Self {
        self.config.declared.insert(name.into(), value);
        self
    }

    /// Answers the server's `sampling/createMessage` requests with a `CreateMessageResult`.
    /// Registering it declares the `sampling` capability.
    pub fn on_sampling(
        mut self,
        handler: impl Fn(&InputRequest) -> Result<Value, RpcError> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.sampling = Some(Arc::new(handler) as Handler);
        self
    }

    /// Spawns `command` as a stdio server (its stdin and stdout are taken; stderr is
    /// inherited unless the command says otherwise) and performs the handshake. The server
    /// is told to exit (its stdin is closed) when the client is dropped.
    pub fn connect_stdio(self, mut command: Command) -> Result<Client, ClientError> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(ClientError::Io)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(ClientError::closed(
                "the spawned server has no stdin/stdout",
            ));
        };
        let (shared, jobs) = Shared::new();
        let transport = LineTransport::start(
            shared.clone(),
            Box::new(stdout),
            Box::new(stdin),
            Some(child),
        )
        .map_err(ClientError::Io)?;
        self.finish(shared, jobs, Arc::new(transport))
    }

    /// Speaks newline-delimited JSON-RPC over any reader and writer (a socket, a pipe to a
    /// server started elsewhere) and performs the handshake.
    ///
    /// Dropping the client drops `writer` (once what is queued is written), but its
    /// reader thread stays blocked on `reader`, which cannot be interrupted for a generic
    /// [`Read`]: that thread, and the reader, live on until the reader ends. So the server
    /// sees no EOF while the underlying stream stays open (a socket whose reader and
    /// writer are clones stays open through the reader) until the caller closes it: for a
    /// socket, keep a handle (`try_clone`) and `shutdown` it after the drop.
    pub fn connect_streams(
        self,
        reader: impl Read + Send + 'static,
        writer: impl Write + Send + 'static,
    ) -> Result<Client, ClientError> {
        let (shared, jobs) = Shared::new();
        let transport =
            LineTransport::start(shared.clone(), Box::new(reader), Box::new(writer), None)
                .map_err(ClientError::Io)?;
        self.finish(shared, jobs, Arc::new(transport))
    }

    /// Connects to a Streamable HTTP endpoint (`http://host:port/mcp`; no TLS) and performs
    /// the handshake. On 2025-11-25 the session's `GET` event stream is opened for the
    /// server's requests (and opened again, after a short wait, whenever the server or a
    /// proxy ends it, unless the server offers no stream), and the session is deleted when
    /// the client is dropped.
    #[cfg(feature = "http")]
    pub fn connect_http(self, url: &str) -> Result<Client, ClientError> {
        let (shared, jobs) = Shared::new();
        let transport = http::HttpTransport::new(
            url,
            self.config.revision,
            shared.clone(),
            self.config.request_timeout,
        )?;
        self.finish(shared, jobs, Arc::new(transport))
    }

    fn finish(
        self,
        shared: Arc<Shared>,
        jobs: crossbeam_channel::Receiver<transport::Work>,
        transport: Arc<dyn Transport>,
    ) -> Result<Client, ClientError> {
        transport::start_dispatcher(
            jobs,
            shared.clone(),
            transport.clone(),
            self.handlers.clone(),
        )
        .map_err(ClientError::Io)?;
        let client = Client {
            inner: Arc::new(Inner {
                shared,
                transport,
                config: self.config,
                handlers: self.handlers,
                server: Mutex::new(Value::Null),
                tools: Mutex::new(None),
            }),
        };
        client.handshake()?;
        Ok(client)
    }
}

struct Inner {
    shared: Arc<Shared>,
    transport: Arc<dyn Transport>,
    config: Config,
    handlers: Handlers,
    server: Mutex<Value>,
    /// Each tool's task support, with the tools generation it was listed under.
    tools: Mutex<Option<(u64, BTreeMap<String, TaskSupport>)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.stop_dispatcher();
        self.transport.shutdown();
    }
}

/// A progress callback.
type ProgressFn<'a> = Box<dyn FnMut(&Progress) + 'a>;

/// Per-call options of [`Client::call_tool_with`] and [`Client::follow_task`].
#[derive(Default)]
pub struct CallOptions<'a> {
    deadline: Option<Duration>,
    task_ttl: Option<u64>,
    progress: Option<ProgressFn<'a>>,
}

impl std::fmt::Debug for CallOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("deadline", &self.deadline)
            .field("task_ttl", &self.task_ttl)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl<'a> CallOptions<'a> {
    /// The defaults: the client's deadline, the server's TTL, no progress reports.
    pub fn new() -> Self {
        CallOptions::default()
    }

    /// An overall deadline for this call (overrides the client's).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The TTL to request for the task, in ms (2025-11-25 only; SEP-2663 servers choose).
    pub fn task_ttl(mut self, ttl_ms: u64) -> Self {
        self.task_ttl = Some(ttl_ms);
        self
    }

    /// Called after the task is created and after every poll.
    pub fn on_progress(mut self, progress: impl FnMut(&Progress) + 'a) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }
}

/// Where a followed call stands: its start, deadline and progress callback.
struct Follow<'o, 'a> {
    started: Instant,
    deadline: Option<Duration>,
    progress: &'o mut Option<ProgressFn<'a>>,
    polls: u32,
}

impl Follow<'_, '_> {
    /// When the deadline passes; `None` without one, or for one too far off to name
    /// (`Duration::MAX`, say), which is no deadline in practice.
    fn deadline_at(&self) -> Option<Instant> {
        self.deadline.and_then(|d| self.started.checked_add(d))
    }

    fn report(&mut self, task: &TaskInfo) {
        if let Some(progress) = self.progress.as_mut() {
            progress(&Progress {
                task: task.clone(),
                polls: self.polls,
                elapsed: self.started.elapsed(),
            });
        }
    }

    /// [`ClientError::Deadline`]; `cancelled` as the task's `tasks/cancel` went.
    fn deadline_error(&self, task_id: Option<&str>, cancelled: bool) -> ClientError {
        ClientError::Deadline {
            task_id: task_id.map(str::to_owned),
            after: self.deadline.unwrap_or_default(),
            cancelled,
        }
    }

    /// When to poll next: `interval` from now, but not past the deadline.
    fn wake(&self, interval: Duration) -> Instant {
        let now = Instant::now();
        // An interval too long to add to the clock is capped (`max_poll_interval` may be
        // set that high).
        let wake = now
            .checked_add(interval)
            .unwrap_or(now + DEFAULT_MAX_POLL_INTERVAL);
        match self.deadline_at() {
            Some(deadline) => wake.min(deadline),
            None => wake,
        }
    }
}

/// A blocking MCP client. Cheap to clone; clones share the connection, which closes (and a
/// spawned server is told to exit) when the last clone is dropped. Methods may be called
/// from several threads at once.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("revision", &self.inner.config.revision)
            .finish_non_exhaustive()
    }
}

/// A request on its way: its id and where its answer will arrive.
struct InFlight {
    id: jsonrpc::RequestId,
    pending: Pending,
}

impl Client {
    /// A builder with the defaults (2025-11-25, no handlers, stuck after 60 polls).
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The negotiated revision.
    pub fn revision(&self) -> Revision {
        self.inner.config.revision
    }

    /// The server's handshake answer: the `initialize` result (2025-11-25) or the
    /// `server/discover` result (SEP-2663).
    pub fn server_info(&self) -> Value {
        self.inner.server.lock().clone()
    }

    /// The spawned server's process id ([`ClientBuilder::connect_stdio`] only).
    pub fn server_process_id(&self) -> Option<u32> {
        self.inner.transport.process_id()
    }

    fn capabilities(&self) -> Value {
        let mut capabilities = self.inner.config.declared.clone();
        if self.inner.handlers.elicitation.is_some() {
            capabilities.insert("elicitation".into(), json!({ "form": {} }));
        }
        if self.inner.handlers.sampling.is_some() {
            capabilities.insert("sampling".into(), json!({}));
        }
        Value::Object(capabilities)
    }

    fn handshake(&self) -> Result<(), ClientError> {
        let answer = match self.revision() {
            Revision::V2025 => {
                let answer = self.request(
                    "initialize",
                    json!({
                        "protocolVersion": v2025::PROTOCOL_VERSION,
                        "capabilities": self.capabilities(),
                        "clientInfo": {
                            "name": self.inner.config.client_name,
                            "version": self.inner.config.client_version,
                        },
                    }),
                )?;
                // Tasks exist only in 2025-11-25: a server that settles on an older
                // version would not understand the requests this client goes on to send.
                let version = answer.get("protocolVersion").and_then(Value::as_str);
                if version != Some(v2025::PROTOCOL_VERSION) {
                    return Err(ClientError::Unsupported(format!(
                        "the server answered initialize with protocol version {}; this \
                         client speaks {}",
                        version.map_or_else(|| "(none)".to_owned(), |v| format!("'{v}'")),
                        v2025::PROTOCOL_VERSION
                    )));
                }
                self.inner.transport.send(jsonrpc::notification(
                    "notifications/initialized",
                    json!({}),
                ))?;
                answer
            }
            Revision::Sep2663 => {
                let answer = self.request("server/discover", json!({}))?;
                let versions = answer.get("supportedVersions").and_then(Value::as_array);
                let speaks = versions.is_some_and(|v| {
                    v.iter()
                        .any(|v| v.as_str() == Some(sep2663::PROTOCOL_VERSION))
                });
                if !speaks {
                    return Err(ClientError::Unsupported(format!(
                        "the server does not support protocol {} (server/discover: {answer})",
                        sep2663::PROTOCOL_VERSION
                    )));
                }
                answer
            }
        };
        *self.inner.server.lock() = answer;
        self.inner.transport.ready();
        Ok(())
    }

    /// Adds the SEP-2663 per-request declarations to `params._meta`.
    fn with_meta(&self, mut params: Value) -> Value {
        if self.revision() != Revision::Sep2663 {
            return params;
        }
        let mut capabilities = self.capabilities();
        // Beside the extensions the builder declared, if any (a declared `extensions`
        // that is no object cannot hold the tasks extension: it is replaced).
        let extensions = &mut capabilities["extensions"];
        if !extensions.is_object() {
            *extensions = json!({});
        }
        extensions[TASKS_EXTENSION] = json!({});
        if let Value::Object(object) = &mut params {
            let meta = object.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.insert(
                    PROTOCOL_VERSION_KEY.into(),
                    json!(sep2663::PROTOCOL_VERSION),
                );
                meta.insert(CLIENT_CAPABILITIES_KEY.into(), capabilities);
            }
        }
        params
    }

    fn start(&self, method: &str, params: Value) -> Result<InFlight, ClientError> {
        let (id, pending) = self.inner.shared.register()?;
        let message = jsonrpc::request(&id, method, self.with_meta(params));
        if let Err(error) = self.inner.transport.send_request(&id, message) {
            self.forget(&id);
            return Err(error);
        }
        Ok(InFlight { id, pending })
    }

    /// Drops request `id`, which nobody waits for any more, and ends its exchange (over
    /// HTTP its connection is shut down, and the thread reading it ends).
    fn forget(&self, id: &jsonrpc::RequestId) {
        self.inner.shared.forget(id);
        self.inner.transport.abandon(id);
    }

    /// Waits for an answer; `Err(None)` when `deadline` passed first.
    fn wait(
        &self,
        call: InFlight,
        deadline: Option<Instant>,
    ) -> Result<Value, Option<ClientError>> {
        let outcome = match deadline {
            Some(at) => match call.pending.recv_deadline(at) {
                Ok(outcome) => outcome,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    self.forget(&call.id);
                    return Err(None);
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(self.gone()),
            },
            None => call.pending.recv().unwrap_or_else(|_| Err(self.gone())),
        };
        outcome.map_err(Some)
    }

    fn gone(&self) -> ClientError {
        ClientError::closed(
            self.inner
                .shared
                .closed_reason()
                .unwrap_or_else(|| "the connection is closed".into()),
        )
    }

    /// Sends any request and waits for its result (on SEP-2663 the request's `_meta` gets
    /// the protocol version and the tasks extension). The escape hatch for methods this
    /// client has no wrapper for.
    /// Waits at most the request timeout ([`ClientBuilder::request_timeout`]).
    pub fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.ask(method, params, None)
            .map(|answer| answer.expect("no deadline to miss"))
    }

    /// Sends a request and waits for its answer for at most the request timeout, and not
    /// past `deadline`: `Ok(None)` when the deadline came first, [`ClientError::Timeout`]
    /// when the timeout did. Either way the request is forgotten; a late answer is
    /// dropped.
    fn ask(
        &self,
        method: &str,
        params: Value,
        deadline: Option<Instant>,
    ) -> Result<Option<Value>, ClientError> {
        let call = self.start(method, params)?;
        self.wait_within(call, method, deadline)
    }

    /// Waits for a request already sent, as [`ask`](Self::ask) does.
    fn wait_within(
        &self,
        call: InFlight,
        method: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Value>, ClientError> {
        let timeout = self.inner.config.request_timeout;
        let timeout_at = Instant::now().checked_add(timeout);
        let by = match (deadline, timeout_at) {
            (Some(deadline), Some(timeout_at)) => Some(deadline.min(timeout_at)),
            (deadline, timeout_at) => deadline.or(timeout_at),
        };
        match self.wait(call, by) {
            Ok(value) => Ok(Some(value)),
            Err(Some(error)) => Err(error),
            Err(None) if deadline.is_some() && deadline == by => Ok(None),
            Err(None) => Err(ClientError::Timeout {
                method: method.to_owned(),
                after: timeout,
            }),
        }
    }

    /// Lists the server's tools (every page), and remembers each tool's
    /// `execution.taskSupport` for [`call_tool`](Self::call_tool).
    ///
    /// A listing that does not end fails with [`ClientError::Protocol`]: a `nextCursor`
    /// that repeats one already followed (the pages would go round for ever), or more
    /// than [`MAX_TOOL_PAGES`] pages or [`MAX_TOOLS`] tools.
    pub fn list_tools(&self) -> Result<Vec<Value>, ClientError> {
        self.list_tools_until(None)
            .map(|tools| tools.expect("no deadline to miss"))
    }

    /// [`list_tools`](Self::list_tools), `Ok(None)` if `deadline` passes first.
    fn list_tools_until(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Option<Vec<Value>>, ClientError> {
        // Read before asking: a change announced while the list is on its way makes it
        // out of date.
        let generation = self.inner.shared.tools_generation();
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        // The cursors followed so far: a server that hands one out again would have the
        // client list (and keep) the same pages for ever.
        let mut followed = HashSet::new();
        for page_number in 1.. {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let Some(page) = self.ask("tools/list", params, deadline)? else {
                return Ok(None);
            };
            let listed = page.get("tools").and_then(Value::as_array).ok_or_else(|| {
                ClientError::Protocol(format!("tools/list without tools: {page}"))
            })?;
            if tools.len() + listed.len() > MAX_TOOLS {
                return Err(ClientError::Protocol(format!(
                    "tools/list lists more than {MAX_TOOLS} tools"
                )));
            }
            tools.extend(listed.iter().cloned());
            let Some(next) = page.get("nextCursor").and_then(Value::as_str) else {
                break;
            };
            if !followed.insert(next.to_owned()) {
                return Err(ClientError::Protocol(format!(
                    "tools/list gave cursor {next:?} again (page {page_number}): its pages \
                     would never end"
                )));
            }
            if page_number >= MAX_TOOL_PAGES {
                return Err(ClientError::Protocol(format!(
                    "tools/list has more than {MAX_TOOL_PAGES} pages"
                )));
            }
            cursor = Some(next.to_owned());
        }
        let support = tools
            .iter()
            .filter_map(|tool| {
                let name = tool.get("name")?.as_str()?.to_owned();
                let support = match tool
                    .pointer("/execution/taskSupport")
                    .and_then(Value::as_str)
                {
                    Some("optional") => TaskSupport::Optional,
                    Some("required") => TaskSupport::Required,
                    _ => TaskSupport::Forbidden,
                };
                Some((name, support))
            })
            .collect();
        let mut cached = self.inner.tools.lock();
        // A listing that overtook this one may hold a newer list: keep that.
        if cached.as_ref().is_none_or(|(held, _)| *held <= generation) {
            *cached = Some((generation, support));
        }
        Ok(Some(tools))
    }

    /// A tool's `execution.taskSupport` (2025-11-25), from `tools/list` (fetched once, and
    /// again after the server sends `notifications/tools/list_changed`).
    pub fn task_support(&self, tool: &str) -> Result<TaskSupport, ClientError> {
        self.task_support_until(tool, None)
            .map(|support| support.expect("no deadline to miss"))
    }

    /// Whether the server declared task-augmented `tools/call` at `initialize`
    /// (`capabilities.tasks.requests.tools.call`, 2025-11-25).
    fn server_takes_tool_tasks(&self) -> bool {
        self.inner
            .server
            .lock()
            .pointer("/capabilities/tasks/requests/tools/call")
            .is_some()
    }

    /// [`task_support`](Self::task_support), `Ok(None)` if `deadline` passes first.
    fn task_support_until(
        &self,
        tool: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<TaskSupport>, ClientError> {
        // A list from before the server last said its tools changed may be wrong now.
        let current = self.inner.shared.tools_generation();
        let fresh = self
            .inner
            .tools
            .lock()
            .as_ref()
            .is_some_and(|(generation, _)| *generation == current);
        if !fresh && self.list_tools_until(deadline)?.is_none() {
            return Ok(None);
        }
        Ok(Some(
            self.inner
                .tools
                .lock()
                .as_ref()
                .and_then(|(_, tools)| tools.get(tool).copied())
                .unwrap_or(TaskSupport::Forbidden),
        ))
    }

    /// Calls a tool and returns its final result, following a task to its end if one
    /// comes back (see the [module docs](self)). A tool result with `isError: true` is
    /// returned as a result when no task was involved, and on SEP-2663 (where such a task
    /// ends `completed`); on 2025-11-25 it ends its task `failed`:
    /// [`ClientError::TaskFailed`] with the result inside.
    pub fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, ClientError> {
        self.call_tool_with(name, arguments, CallOptions::new())
    }

    /// [`call_tool`](Self::call_tool) with per-call options (deadline, TTL, progress).
    pub fn call_tool_with(
        &self,
        name: &str,
        arguments: Value,
        mut options: CallOptions<'_>,
    ) -> Result<Value, ClientError> {
        let mut follow = Follow {
            started: Instant::now(),
            deadline: options.deadline.or(self.inner.config.deadline),
            progress: &mut options.progress,
            polls: 0,
        };
        let mut call = ToolCall::new(name, arguments);
        // A server that does not declare task-augmented `tools/call` must not get one,
        // whatever its tools say: the call goes plain (and needs no `tools/list`).
        if self.revision() == Revision::V2025 && self.server_takes_tool_tasks() {
            match self.task_support_until(name, follow.deadline_at())? {
                None => return Err(follow.deadline_error(None, false)),
                Some(TaskSupport::Forbidden) => {}
                Some(_) => call = call.as_task(options.task_ttl),
            }
        }
        let mut rounds = 0;
        loop {
            let outcome = self.call_raw_until(&call, follow.deadline_at())?;
            match outcome {
                Some(CallOutcome::Complete(result)) => return Ok(result),
                Some(CallOutcome::Task(task)) => return self.follow(task, &mut follow),
                Some(CallOutcome::InputRequired {
                    input_requests,
                    request_state,
                }) => {
                    rounds += 1;
                    if rounds > self.inner.config.stuck_polls {
                        return Err(ClientError::Protocol(format!(
                            "tools/call '{name}' still needs input after {rounds} rounds"
                        )));
                    }
                    let mut responses = call.input_responses.take().unwrap_or_default();
                    for (key, request) in &input_requests {
                        let answer = self.answer_input(key, request, None)?;
                        responses.insert(key.clone(), answer);
                    }
                    call.input_responses = Some(responses);
                    call.request_state = request_state;
                }
                None => return Err(follow.deadline_error(None, false)),
            }
        }
    }

    /// Sends one `tools/call` as given and returns what came back: the result, the created
    /// task, or (SEP-2663) the input the server needs first. Nothing is followed or
    /// answered: that is up to the caller.
    pub fn call_tool_raw(&self, call: &ToolCall) -> Result<CallOutcome, ClientError> {
        self.call_raw_until(call, None)
            .map(|outcome| outcome.expect("no deadline to miss"))
    }

    fn call_raw_until(
        &self,
        call: &ToolCall,
        deadline: Option<Instant>,
    ) -> Result<Option<CallOutcome>, ClientError> {
        let Some(reply) = self.ask("tools/call", call.params(), deadline)? else {
            return Ok(None);
        };
        let result_type = reply.get("resultType").and_then(Value::as_str);
        let outcome = match (self.revision(), result_type) {
            (Revision::V2025, _) => match reply.get("task") {
                Some(task) => CallOutcome::Task(TaskInfo::from_value(task)?),
                None => CallOutcome::Complete(reply),
            },
            (Revision::Sep2663, Some("task")) => CallOutcome::Task(TaskInfo::from_value(&reply)?),
            (Revision::Sep2663, Some("input_required")) => CallOutcome::InputRequired {
                input_requests: match reply.get("inputRequests") {
                    Some(Value::Object(map)) => {
                        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
                    }
                    _ => {
                        return Err(ClientError::Protocol(format!(
                            "input_required without inputRequests: {reply}"
                        )))
                    }
                },
                request_state: reply.get("requestState").cloned(),
            },
            (Revision::Sep2663, _) => CallOutcome::Complete(reply),
        };
        Ok(Some(outcome))
    }

    /// Follows a task (from [`call_tool_raw`](Self::call_tool_raw)) to its end, exactly as
    /// [`call_tool`](Self::call_tool) does.
    pub fn follow_task(
        &self,
        task: TaskInfo,
        mut options: CallOptions<'_>,
    ) -> Result<Value, ClientError> {
        let mut follow = Follow {
            started: Instant::now(),
            deadline: options.deadline.or(self.inner.config.deadline),
            progress: &mut options.progress,
            polls: 0,
        };
        self.follow(task, &mut follow)
    }

    fn follow(&self, task: TaskInfo, follow: &mut Follow<'_, '_>) -> Result<Value, ClientError> {
        follow.report(&task);
        match self.revision() {
            Revision::V2025 => {
                let id = task.task_id.clone();
                let outcome = self.follow_2025(task, follow);
                self.inner.shared.forget_task(&id);
                outcome
            }
            Revision::Sep2663 => self.follow_sep2663(task, follow),
        }
    }

    /// The interval to poll at next: the server's latest suggestion (a poll that names
    /// none keeps the one before), else the client's default.
    fn interval(&self, task: &TaskInfo, current: &mut Option<Duration>) -> Duration {
        if let Some(ms) = task.poll_interval_ms {
            *current = Some(Duration::from_millis(ms));
        }
        let config = &self.inner.config;
        current
            .unwrap_or(config.poll_interval)
            .max(MIN_POLL_INTERVAL)
            .min(config.max_poll_interval)
    }

    /// `tasks/get` for a followed task, within the request timeout and the call's
    /// deadline.
    fn poll_task(&self, task_id: &str, follow: &Follow<'_, '_>) -> Result<PolledTask, Failure> {
        match self.ask(
            "tasks/get",
            json!({ "taskId": task_id }),
            follow.deadline_at(),
        ) {
            Ok(Some(value)) => PolledTask::from_value(&value).map_err(Failure::Passing),
            Ok(None) => Err(Failure::Deadline),
            Err(error) => Err(self.sort_failure(task_id, error)),
        }
    }

    /// Whether a failed request about a followed task ends following it: -32602 means the
    /// server forgot the task ([`ClientError::TaskExpired`]), and a closed connection
    /// answers nothing any more; anything else may pass.
    fn sort_failure(&self, task_id: &str, error: ClientError) -> Failure {
        match error {
            ClientError::Rpc(e) if e.code == INVALID_PARAMS => {
                Failure::Over(ClientError::TaskExpired {
                    task_id: task_id.to_owned(),
                })
            }
            error if self.inner.shared.closed_reason().is_some() => Failure::Over(error),
            error => Failure::Passing(error),
        }
    }

    /// How a followed call goes on after a failed poll (or update) of its task: `None`
    /// to try again at the next poll, while fewer than [`MAX_FOLLOW_FAILURES`] passing
    /// failures came in a row (counted in `failures`); else how the call ends.
    fn after_failure(
        &self,
        failure: Failure,
        failures: &mut u32,
        task_id: &str,
        follow: &Follow<'_, '_>,
    ) -> Option<Result<Value, ClientError>> {
        let error = match failure {
            Failure::Deadline => return Some(self.deadline_passed(task_id, follow)),
            Failure::Over(error) => return Some(Err(error)),
            Failure::Passing(error) => error,
        };
        *failures += 1;
        if *failures < MAX_FOLLOW_FAILURES {
            log::info!("mcp client: following task {task_id}: {error}; trying again");
            return None;
        }
        Some(
            self.abandon(task_id, |cancelled| ClientError::TaskAbandoned {
                task_id: task_id.to_owned(),
                cancelled,
                error: Box::new(error),
            }),
        )
    }

    /// The call's deadline passed: the task is abandoned.
    fn deadline_passed(
        &self,
        task_id: &str,
        follow: &Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        self.abandon(task_id, |cancelled| {
            follow.deadline_error(Some(task_id), cancelled)
        })
    }

    /// Gives up on a task: a best-effort `tasks/cancel`, then `error(cancelled)`, where
    /// `cancelled` says whether the server accepted the cancel. A server that refuses it
    /// may do so because the task already ended: one more look then tells how, and the
    /// call ends as the task did (with a completed task's result, after all).
    fn abandon(
        &self,
        task_id: &str,
        error: impl FnOnce(bool) -> ClientError,
    ) -> Result<Value, ClientError> {
        let Ok(call) = self.start("tasks/cancel", json!({ "taskId": task_id })) else {
            return Err(error(false));
        };
        // One budget for the cancel and the look after it.
        let within = Instant::now() + CANCEL_WAIT;
        match self.wait(call, Some(within)) {
            // SEP-2663 acknowledges a cancel of a task that already ended: a task that did
            // end otherwise meanwhile ends the call as it ended.
            Ok(_) if self.revision() == Revision::Sep2663 => {
                match self.ended_meanwhile(task_id, within) {
                    Some(end) if !matches!(end, Err(ClientError::TaskCancelled { .. })) => end,
                    _ => Err(error(true)),
                }
            }
            Ok(_) => Err(error(true)),
            Err(Some(ClientError::Rpc(_))) => self
                .ended_meanwhile(task_id, within)
                .unwrap_or_else(|| Err(error(false))),
            Err(_) => Err(error(false)),
        }
    }

    /// How a task the server would not cancel ended, if a last look (by `within`) finds it
    /// ended; `None` if it did not, or the look failed.
    fn ended_meanwhile(
        &self,
        task_id: &str,
        within: Instant,
    ) -> Option<Result<Value, ClientError>> {
        let within = Some(within);
        let params = json!({ "taskId": task_id });
        let polled = self.ask("tasks/get", params.clone(), within).ok()??;
        let polled = PolledTask::from_value(&polled).ok()?;
        match (self.revision(), polled.task.status) {
            (_, status) if !status.is_terminal() => None,
            (Revision::Sep2663, _) => settle_sep2663(polled),
            (Revision::V2025, TaskStatus::Cancelled) => {
                Some(settle_2025(polled.task, Ok(json!({}))))
            }
            (Revision::V2025, status) => match self.ask("tasks/result", params, within) {
                Ok(Some(value)) => Some(settle_2025(polled.task, Ok(value))),
                Err(error @ ClientError::Rpc(_)) if status == TaskStatus::Failed => {
                    Some(settle_2025(polled.task, Err(error)))
                }
                _ => None,
            },
        }
    }

    /// Counts consecutive `input_required` polls that brought nothing new: `None` while
    /// that may change, else how the call ends, the task abandoned as stuck.
    fn stuck_check(&self, stale: &mut u32, task_id: &str) -> Option<Result<Value, ClientError>> {
        *stale += 1;
        if *stale < self.inner.config.stuck_polls {
            return None;
        }
        let polls = *stale;
        Some(self.abandon(task_id, |cancelled| ClientError::Stuck {
            task_id: task_id.to_owned(),
            polls,
            cancelled,
        }))
    }

    /// 2025-11-25: hold `tasks/result` open (the server's input requests ride on it, or on
    /// stdio/the event stream beside it, and the dispatcher answers them) while polling
    /// `tasks/get` for status, the stuck detector and the deadline.
    fn follow_2025(
        &self,
        task: TaskInfo,
        follow: &mut Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        let mut held = None;
        let outcome = self.follow_2025_holding(task, follow, &mut held);
        // However the call ended, nobody waits for a `tasks/result` still held.
        if let Some(call) = held {
            self.forget(&call.id);
        }
        outcome
    }

    /// [`follow_2025`](Self::follow_2025), with the `tasks/result` it holds (if any) in
    /// `held`.
    fn follow_2025_holding(
        &self,
        mut task: TaskInfo,
        follow: &mut Follow<'_, '_>,
        held: &mut Option<InFlight>,
    ) -> Result<Value, ClientError> {
        let id = task.task_id.clone();
        let params = json!({ "taskId": id });
        *held = Some(self.start("tasks/result", params.clone())?);
        let mut seen = self.inner.shared.task_inputs(&id).seen;
        let mut stale = 0;
        let mut interval = None;
        let mut failures = 0;
        loop {
            let wake = follow.wake(self.interval(&task, &mut interval));
            if let Some(call) = held.as_ref() {
                match call.pending.recv_deadline(wake) {
                    Ok(Ok(value)) => {
                        *held = None;
                        return self.finish_2025(task, value, follow);
                    }
                    Ok(Err(error)) => {
                        *held = None;
                        if self.inner.shared.closed_reason().is_some() {
                            return Err(error);
                        }
                        // It ended before a poll saw the task end: the task failed with
                        // this error, or the answer's stream or connection broke off (an
                        // HTTP server may end a resumable stream early; a proxy may cut
                        // it) while the task works on. The poll tells which; it waits
                        // for the interval, so a server that keeps ending `tasks/result`
                        // at once is not asked again at once.
                        log::info!("mcp client: tasks/result for task {id} ended early: {error}");
                        sleep_until(wake);
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                        return Err(self.gone())
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                }
            } else {
                sleep_until(wake);
            }
            if follow.deadline_at().is_some_and(|d| Instant::now() >= d) {
                return self.deadline_passed(&id, follow);
            }
            let polled = match self.poll_task(&id, follow) {
                Ok(polled) => polled,
                Err(failure) => match self.after_failure(failure, &mut failures, &id, follow) {
                    Some(end) => return end,
                    None => continue,
                },
            };
            failures = 0;
            task = polled.task;
            follow.polls += 1;
            follow.report(&task);
            if task.status == TaskStatus::Cancelled {
                // A cancelled task has no result to wait for (what `tasks/result` answers
                // for one is not defined, and a server may never answer it): the call ends
                // here, and the held one is forgotten.
                return settle_2025(task, Ok(Value::Null));
            }
            if task.status.is_terminal() {
                // The held tasks/result answers now: wait for it, but no longer than a
                // request may take (and not past the deadline). If it ended early, a new
                // one answers at once for an ended task.
                let was_held = held.is_some();
                let mut outcome = match held.take() {
                    Some(call) => self.wait_within(call, "tasks/result", follow.deadline_at()),
                    None => self.ask("tasks/result", params.clone(), follow.deadline_at()),
                };
                // A held one whose stream broke off just then (not a JSON-RPC answer, the
                // connection still open) is asked once more: the task has ended, so a new
                // one answers at once.
                if was_held
                    && matches!(&outcome, Err(e) if !matches!(e, ClientError::Rpc(_)))
                    && self.inner.shared.closed_reason().is_none()
                {
                    outcome = self.ask("tasks/result", params, follow.deadline_at());
                }
                let outcome = match outcome {
                    Ok(Some(value)) => Ok(value),
                    Ok(None) => return self.deadline_passed(&id, follow),
                    Err(error) => Err(error),
                };
                return settle_2025(task, outcome);
            }
            if held.is_none() {
                // The task works on: hold a new tasks/result (the server's requests for
                // the task may ride on it).
                match self.start("tasks/result", params.clone()) {
                    Ok(call) => *held = Some(call),
                    Err(error) if self.inner.shared.closed_reason().is_some() => return Err(error),
                    Err(error) => log::info!(
                        "mcp client: cannot send tasks/result for task {id} again: {error}; \
                         trying at the next poll"
                    ),
                }
            }
            let inputs = self.inner.shared.task_inputs(&id);
            if task.status == TaskStatus::InputRequired
                && inputs.in_flight == 0
                && inputs.seen == seen
            {
                if let Some(end) = self.stuck_check(&mut stale, &id) {
                    return end;
                }
            } else {
                stale = 0;
            }
            seen = inputs.seen;
        }
    }

    /// Turns the `tasks/result` answer into the call's outcome, by the task's final status.
    fn finish_2025(
        &self,
        task: TaskInfo,
        result: Value,
        follow: &mut Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        let task = if task.status.is_terminal() {
            task
        } else {
            // tasks/result answered before a poll saw the end: one last poll for the
            // status. The result is in hand: a poll that fails (the task expired just
            // now, say) must not lose it, and the result tells the status itself (only
            // a tool error, `isError`, ends a task failed with a result).
            match self.poll_task(&task.task_id, follow) {
                Ok(polled) => {
                    follow.polls += 1;
                    follow.report(&polled.task);
                    polled.task
                }
                Err(_) => {
                    let failed = result.get("isError").and_then(Value::as_bool) == Some(true);
                    TaskInfo {
                        status: if failed {
                            TaskStatus::Failed
                        } else {
                            TaskStatus::Completed
                        },
                        ..task
                    }
                }
            }
        };
        settle_2025(task, Ok(result))
    }

    /// SEP-2663: poll `tasks/get`; answer new `inputRequests` keys with `tasks/update`.
    fn follow_sep2663(
        &self,
        mut task: TaskInfo,
        follow: &mut Follow<'_, '_>,
    ) -> Result<Value, ClientError> {
        let id = task.task_id.clone();
        let mut answered: HashSet<String> = HashSet::new();
        // Answers whose tasks/update failed: sent again while the task still asks for
        // them (a server ignores keys it no longer expects, so a repeat is harmless).
        let mut unsent = InputResponses::new();
        let mut stale = 0;
        let mut interval = None;
        let mut poll_failures = 0;
        let mut update_failures = 0;
        let watch = TaskWatch::new(self, &id);
        // When the next poll at the interval is due. A notification brings a look forward
        // (`early`) but leaves this schedule as it is: the stuck detector and the failed
        // polls in a row count polls at the interval only, so a server that keeps saying
        // the task changed cannot make a task count as stuck, or a passing failure as
        // lasting, in a fraction of the time it would take without.
        let mut due = None;
        loop {
            if follow.deadline_at().is_some_and(|d| Instant::now() >= d) {
                return self.deadline_passed(&id, follow);
            }
            let at = *due.get_or_insert_with(|| follow.wake(self.interval(&task, &mut interval)));
            let early = watch.sleep_until(at);
            if !early {
                due = None;
            }
            let polled = match self.poll_task(&id, follow) {
                Ok(polled) => polled,
                // Like a stale poll, a look brought forward that fails does not count:
                // the polls at the interval tell whether the failures pass.
                Err(Failure::Passing(error)) if early => {
                    log::info!("mcp client: following task {id}: {error}; trying again");
                    continue;
                }
                Err(failure) => {
                    match self.after_failure(failure, &mut poll_failures, &id, follow) {
                        Some(end) => return end,
                        None => continue,
                    }
                }
            };
            poll_failures = 0;
            task = polled.task.clone();
            follow.polls += 1;
            follow.report(&task);
            if task.status != TaskStatus::InputRequired {
                if let Some(end) = settle_sep2663(polled) {
                    return end;
                }
                // Working: whatever was sent last has arrived.
                stale = 0;
                unsent.clear();
                update_failures = 0;
                continue;
            }
            // An answer the server no longer asks for has arrived.
            unsent.retain(|key, _| polled.input_requests.contains_key(key));
            let fresh: Vec<(&String, &Value)> = polled
                .input_requests
                .iter()
                .filter(|(key, _)| !answered.contains(*key))
                .collect();
            if fresh.is_empty() && unsent.is_empty() {
                if !early {
                    if let Some(end) = self.stuck_check(&mut stale, &id) {
                        return end;
                    }
                }
                continue;
            }
            stale = 0;
            for (key, request) in fresh {
                let answer = match self.answer_input(key, request, Some(&id)) {
                    Ok(answer) => answer,
                    Err(error) => return self.abandon(&id, |_| error),
                };
                answered.insert(key.clone());
                unsent.insert(key.clone(), answer);
            }
            let update = json!({ "taskId": id, "inputResponses": unsent });
            let failure = match self.ask("tasks/update", update, follow.deadline_at()) {
                Ok(Some(_)) => {
                    update_failures = 0;
                    unsent.clear();
                    continue;
                }
                Ok(None) => Failure::Deadline,
                // On tasks/update, -32602 may as well refuse the answers as the task: the
                // next poll tells (-32602 there is the task gone).
                Err(ClientError::Rpc(e)) if e.code == INVALID_PARAMS => {
                    Failure::Passing(ClientError::Rpc(e))
                }
                Err(error) => self.sort_failure(&id, error),
            };
            if let Some(end) = self.after_failure(failure, &mut update_failures, &id, follow) {
                return end;
            }
        }
    }

    /// Answers one SEP-2663 input request (`{method, params}`) through the handlers.
    fn answer_input(
        &self,
        key: &str,
        request: &Value,
        task_id: Option<&str>,
    ) -> Result<Value, ClientError> {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let input = InputRequest {
            method: method.to_owned(),
            params: request.get("params").cloned().unwrap_or_else(|| json!({})),
            task_id: task_id.map(str::to_owned),
            key: key.to_owned(),
        };
        self.inner
            .handlers
            .answer(&input)
            .map_err(|error| ClientError::Input {
                key: key.to_owned(),
                error,
            })
    }

    /// `tasks/get`: the task's current state (on SEP-2663 with its input requests, result
    /// or error inline).
    pub fn get_task(&self, task_id: &str) -> Result<PolledTask, ClientError> {
        let value = self.request("tasks/get", json!({ "taskId": task_id }))?;
        PolledTask::from_value(&value)
    }

    /// `tasks/result` (2025-11-25): blocks until the task is terminal and returns what the
    /// tool call would have returned (its JSON-RPC error as [`ClientError::Rpc`]). Server
    /// requests that arrive meanwhile are answered by the handlers. It waits for the task,
    /// however long it takes: the request timeout does not apply (the connection closing
    /// still ends it).
    pub fn get_task_result(&self, task_id: &str) -> Result<Value, ClientError> {
        self.require(Revision::V2025, "tasks/result")?;
        let call = self.start("tasks/result", json!({ "taskId": task_id }))?;
        self.wait(call, None)
            .map_err(|error| error.unwrap_or_else(|| self.gone()))
    }

    /// `tasks/list` (2025-11-25): one page of this client's tasks.
    pub fn list_tasks(&self, cursor: Option<&str>) -> Result<TaskList, ClientError> {
        self.require(Revision::V2025, "tasks/list")?;
        let params = match cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let page = self.request("tasks/list", params)?;
        let tasks = page
            .get("tasks")
            .and_then(Value::as_array)
            .ok_or_else(|| ClientError::Protocol(format!("tasks/list without tasks: {page}")))?
            .iter()
            .map(TaskInfo::from_value)
            .collect::<Result<_, _>>()?;
        Ok(TaskList {
            tasks,
            next_cursor: page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// `tasks/update` (SEP-2663): answers input requests of a task, by key.
    pub fn update_task(&self, task_id: &str, responses: InputResponses) -> Result<(), ClientError> {
        self.require(Revision::Sep2663, "tasks/update")?;
        self.request(
            "tasks/update",
            json!({ "taskId": task_id, "inputResponses": responses }),
        )
        .map(|_| ())
    }

    /// `tasks/cancel`: on 2025-11-25 the cancelled task comes back (a task that already
    /// ended is a -32602 [`ClientError::Rpc`]); on SEP-2663 the server only acknowledges,
    /// so `None`.
    pub fn cancel_task(&self, task_id: &str) -> Result<Option<TaskInfo>, ClientError> {
        let answer = self.request("tasks/cancel", json!({ "taskId": task_id }))?;
        match self.revision() {
            Revision::V2025 => TaskInfo::from_value(&answer).map(Some),
            Revision::Sep2663 => Ok(None),
        }
    }

    fn require(&self, revision: Revision, method: &str) -> Result<(), ClientError> {
        if self.revision() == revision {
            Ok(())
        } else {
            Err(ClientError::Unsupported(format!(
                "{method} does not exist in revision {}",
                self.revision().as_str()
            )))
        }
    }
}

/// Why a poll (or update) of a followed task brought no answer.
enum Failure {
    /// The call's deadline passed first.
    Deadline,
    /// Following the task is over: the server forgot it, or the connection is closed.
    Over(ClientError),
    /// Perhaps passing (a timeout, a malformed answer, an HTTP error, another JSON-RPC
    /// error): worth trying again.
    Passing(ClientError),
}

/// Sleeps until `wake` (at once if it passed).
fn sleep_until(wake: Instant) {
    std::thread::sleep(wake.saturating_duration_since(Instant::now()));
}

/// A SEP-2663 task followed through the server's status notifications as well as polls
/// (see [`ClientBuilder::task_notifications`]): a `subscriptions/listen` for it, and a
/// wake-up for each `notifications/tasks` about it. Dropped, it ends the subscription if
/// the server has not (it does once the task ended).
struct TaskWatch<'c> {
    client: &'c Client,
    task_id: String,
    key: u64,
    woken: crossbeam_channel::Receiver<()>,
    /// The subscription's request: answered when it ends (or at once, with an error, by
    /// a server without task notifications).
    listen: Option<InFlight>,
    /// Whether it holds one of the [`MAX_HTTP_TASK_SUBSCRIPTIONS`] places.
    placed: bool,
}

impl<'c> TaskWatch<'c> {
    fn new(client: &'c Client, task_id: &str) -> TaskWatch<'c> {
        let shared = &client.inner.shared;
        let (key, woken) = shared.watch_task(task_id);
        let wanted = client.inner.config.task_notifications;
        // Over HTTP a subscription holds a connection (its exchange is one of its own).
        let costs_a_connection = client.inner.transport.abandon_ends_exchange();
        let placed =
            wanted && costs_a_connection && shared.claim_subscription(MAX_HTTP_TASK_SUBSCRIPTIONS);
        let listen = if wanted && (placed || !costs_a_connection) {
            let filter = json!({ "notifications": { "taskIds": [task_id] } });
            client.start("subscriptions/listen", filter).ok()
        } else {
            None
        };
        TaskWatch {
            client,
            task_id: task_id.to_owned(),
            key,
            woken,
            listen,
            placed,
        }
    }

    /// Sleeps until `wake`, or until the server says the task changed (but at least
    /// [`MIN_POLL_INTERVAL`]: a server sending notifications without end cannot make the
    /// client poll without pause). True if it woke before `wake`.
    fn sleep_until(&self, wake: Instant) -> bool {
        let floor = Instant::now() + MIN_POLL_INTERVAL;
        match self.woken.recv_deadline(wake) {
            Ok(()) => {
                let at = floor.min(wake);
                sleep_until(at);
                at < wake
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                sleep_until(wake);
                false
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => false,
        }
    }
}

impl Drop for TaskWatch<'_> {
    fn drop(&mut self) {
        let client = self.client;
        client.inner.shared.unwatch_task(&self.task_id, self.key);
        if self.placed {
            client.inner.shared.release_subscription();
        }
        let Some(listen) = self.listen.take() else {
            return;
        };
        if listen.pending.try_recv().is_ok() {
            // Ended (or refused) already.
            return;
        }
        client.forget(&listen.id);
        if !client.inner.transport.abandon_ends_exchange() {
            let cancel = json!({ "requestId": listen.id });
            let _ = (client.inner.transport)
                .send(jsonrpc::notification("notifications/cancelled", cancel));
        }
    }
}

/// The outcome of a 2025-11-25 call whose task ended `task.status`, given its
/// `tasks/result` answer: a `failed` task's result (`isError`) or JSON-RPC error becomes
/// [`ClientError::TaskFailed`]; a `cancelled` task is [`ClientError::TaskCancelled`]
/// whatever the answer (no `tasks/result` needs waiting for then).
fn settle_2025(task: TaskInfo, outcome: Result<Value, ClientError>) -> Result<Value, ClientError> {
    match (task.status, outcome) {
        (TaskStatus::Cancelled, _) => Err(ClientError::TaskCancelled {
            task: Box::new(task),
        }),
        (TaskStatus::Failed, Ok(result)) => Err(ClientError::TaskFailed {
            task: Box::new(task),
            result: Some(result),
            error: None,
        }),
        (TaskStatus::Failed, Err(ClientError::Rpc(error))) => Err(ClientError::TaskFailed {
            task: Box::new(task),
            result: None,
            error: Some(error),
        }),
        (_, outcome) => outcome,
    }
}

/// The outcome of a SEP-2663 call whose task ended, from the poll that saw the end;
/// `None` while the task has not ended.
fn settle_sep2663(polled: PolledTask) -> Option<Result<Value, ClientError>> {
    let task = Box::new(polled.task);
    Some(match task.status {
        TaskStatus::Completed => polled.result.ok_or_else(|| {
            ClientError::Protocol(format!("task {} completed without a result", task.task_id))
        }),
        TaskStatus::Failed => Err(ClientError::TaskFailed {
            task,
            result: polled.result,
            error: polled.error,
        }),
        TaskStatus::Cancelled => Err(ClientError::TaskCancelled { task }),
        TaskStatus::Working | TaskStatus::InputRequired => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;

    use super::*;

    /// What the scripted server below does with `subscriptions/listen`.
    #[derive(Clone, Copy, Debug)]
    enum Listen {
        /// Never answers it.
        Silent,
        /// Refuses it, as a server without task notifications does.
        Refused,
        /// Ends it (its result) right before the poll that finds the task ended.
        EndsWithTheTask,
    }

    /// A SEP-2663 server over a socket pair whose task t1 works until `ends` polls (never
    /// with `None`; a cancel ends it too), and treats the subscription as `listen` says.
    /// Returns the client end, and the server's thread, which returns every message it
    /// read once the client is gone.
    fn server(
        listen: Listen,
        ends: Option<usize>,
    ) -> (UnixStream, std::thread::JoinHandle<Vec<Value>>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let thread = std::thread::spawn(move || {
            let mut out = theirs.try_clone().unwrap();
            let (mut seen, mut polls, mut listening, mut cancelled) = (Vec::new(), 0, None, false);
            for line in BufReader::new(theirs).lines() {
                let Ok(line) = line else { break };
                let message: Value = serde_json::from_str(&line).unwrap();
                seen.push(message.clone());
                let (Some(method), Some(id)) = (message["method"].as_str(), message.get("id"))
                else {
                    continue;
                };
                let answer = |outcome: Value| {
                    let mut answer = json!({"jsonrpc": "2.0", "id": id});
                    answer
                        .as_object_mut()
                        .unwrap()
                        .extend(outcome.as_object().unwrap().clone());
                    answer
                };
                let task =
                    |status: &str| json!({"taskId": "t1", "status": status, "pollIntervalMs": 10});
                let reply = match method {
                    "server/discover" => {
                        answer(json!({"result": {"supportedVersions": ["2026-07-28"]}}))
                    }
                    "tools/list" => answer(json!({"result": {"tools": [{"name": "work",
                        "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}]}})),
                    "tools/call" => {
                        let mut created = task("working");
                        created["resultType"] = json!("task");
                        answer(json!({ "result": created }))
                    }
                    "subscriptions/listen" => match listen {
                        Listen::Refused => {
                            answer(json!({"error": {"code": -32601, "message": "no"}}))
                        }
                        Listen::Silent | Listen::EndsWithTheTask => {
                            listening = Some(id.clone());
                            continue;
                        }
                    },
                    "tasks/cancel" => {
                        cancelled = true;
                        answer(json!({"result": {"resultType": "complete"}}))
                    }
                    "tasks/get" => {
                        polls += 1;
                        let ended = cancelled || ends.is_some_and(|ends| polls >= ends);
                        if ended && matches!(listen, Listen::EndsWithTheTask) {
                            if let Some(id) = listening.take() {
                                let end = json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete"}});
                                writeln!(out, "{end}").unwrap();
                            }
                        }
                        let mut polled = match (cancelled, ended) {
                            (true, _) => task("cancelled"),
                            (_, true) => task("completed"),
                            _ => task("working"),
                        };
                        if ended && !cancelled {
                            polled["result"] = json!({"content": []});
                        }
                        answer(json!({ "result": polled }))
                    }
                    _ => answer(json!({"result": {}})),
                };
                if writeln!(out, "{reply}").is_err() {
                    break;
                }
            }
            seen
        });
        (ours, thread)
    }

    /// The `notifications/cancelled` the client sent, by the request id they name.
    fn cancelled(seen: &[Value]) -> Vec<Value> {
        seen.iter()
            .filter(|m| m["method"] == "notifications/cancelled")
            .map(|m| m["params"]["requestId"].clone())
            .collect()
    }

    fn listen_id(seen: &[Value]) -> Value {
        seen.iter()
            .find(|m| m["method"] == "subscriptions/listen")
            .map(|m| m["id"].clone())
            .expect("the client subscribed")
    }

    #[test]
    fn without_task_notifications_a_followed_task_is_only_polled() {
        let (stream, thread) = server(Listen::Silent, Some(2));
        let control = stream.try_clone().unwrap();
        let client = Client::builder()
            .revision(Revision::Sep2663)
            .task_notifications(false)
            .connect_streams(stream.try_clone().unwrap(), stream)
            .unwrap();
        assert_eq!(
            client.call_tool("work", json!({})).unwrap(),
            json!({"content": []})
        );
        drop(client);
        control.shutdown(std::net::Shutdown::Both).unwrap();
        let seen = thread.join().unwrap();
        let methods: Vec<&str> = seen.iter().filter_map(|m| m["method"].as_str()).collect();
        assert!(!methods.contains(&"subscriptions/listen"), "{methods:?}");
        assert!(methods.contains(&"tasks/get"), "{methods:?}");
    }

    #[test]
    fn a_followed_task_leaves_no_subscription_behind_however_the_call_ends() {
        for (listen, ends, deadline) in [
            (Listen::Silent, Some(2), None),
            (Listen::Refused, Some(2), None),
            (Listen::EndsWithTheTask, Some(2), None),
            (Listen::Silent, None, Some(Duration::from_millis(200))),
            (
                Listen::EndsWithTheTask,
                None,
                Some(Duration::from_millis(200)),
            ),
        ] {
            let case = format!("{listen:?}, task ends after {ends:?} polls");
            let (stream, thread) = server(listen, ends);
            let mut builder = Client::builder().revision(Revision::Sep2663);
            if let Some(deadline) = deadline {
                builder = builder.deadline(deadline);
            }
            let control = stream.try_clone().unwrap();
            let client = builder
                .connect_streams(stream.try_clone().unwrap(), stream)
                .unwrap();
            // A hang guard: the call ends within milliseconds.
            let (done, called) = crossbeam_channel::bounded(1);
            std::thread::spawn(move || {
                let outcome = client.call_tool("work", json!({}));
                let _ = done.send((client, outcome));
            });
            let (client, outcome) = called
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("{case}: the call hangs"));
            match deadline {
                None => assert_eq!(outcome.unwrap(), json!({"content": []}), "{case}"),
                Some(_) => assert!(
                    matches!(
                        outcome,
                        Err(ClientError::Deadline {
                            cancelled: true,
                            ..
                        })
                    ),
                    "{case}: {outcome:?}"
                ),
            }
            // No request waits any more, and no task is watched.
            assert_eq!(client.inner.shared.waiting(), (0, 0), "{case}");
            // Answered after whatever the client sent before it (one queue, in order).
            client.request("ping", json!({})).unwrap();
            // The server's reading ends when the socket does.
            drop(client);
            control.shutdown(std::net::Shutdown::Both).unwrap();
            let seen = thread.join().unwrap();
            // A subscription the server did not end is ended by the client (stdio:
            // `notifications/cancelled`), and only then.
            let expected = match listen {
                Listen::Silent => vec![listen_id(&seen)],
                Listen::Refused | Listen::EndsWithTheTask => Vec::new(),
            };
            assert_eq!(cancelled(&seen), expected, "{case}");
        }
    }
}
