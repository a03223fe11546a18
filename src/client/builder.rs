//! Configuring a [`Client`]: [`ClientBuilder`], its `Config`, and the defaults and
//! bounds of its settings. Kept apart from the client itself: it only gathers settings
//! and handlers until a `connect_*` call hands them over and performs the handshake.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Map, Value};

#[cfg(feature = "http")]
use super::http;
use super::transport::{self, Handler, Handlers, LineTransport, Shared, Transport};
#[cfg(doc)]
use super::MAX_QUEUED_SERVER_REQUESTS;
use super::{Client, ClientError, Inner, InputRequest, Revision};
use crate::protocol::jsonrpc::RpcError;

/// Consecutive `input_required` polls without a new input request before a task counts as
/// stuck (the C# SDK's threshold).
pub const DEFAULT_STUCK_POLLS: u32 = 60;
/// The polling interval used when the server suggests none.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The shortest polling interval the client accepts from a server.
pub(super) const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// The longest polling interval the client accepts from a server unless configured
/// otherwise ([`ClientBuilder::max_poll_interval`]): a longer suggestion (up to `u64::MAX`
/// ms on the wire) would leave a task unpolled, and its stuck detector idle, for as long
/// as it says.
pub const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(60);
/// How long a request waits for its answer unless configured otherwise (the TypeScript
/// SDK's default too).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub(super) struct Config {
    pub(super) revision: Revision,
    pub(super) stuck_polls: u32,
    pub(super) deadline: Option<Duration>,
    pub(super) request_timeout: Duration,
    pub(super) poll_interval: Duration,
    pub(super) max_poll_interval: Duration,
    pub(super) client_name: String,
    pub(super) client_version: String,
    /// Capabilities declared without a handler (see [`ClientBuilder::declare`]).
    pub(super) declared: Map<String, Value>,
    /// SEP-2663: subscribe to a followed task's status notifications (see
    /// [`ClientBuilder::task_notifications`]).
    pub(super) task_notifications: bool,
    /// Header fields sent with every HTTP request (see [`ClientBuilder::http_header`]).
    pub(super) http_headers: HeaderFields,
}

/// Header fields whose values (credentials, often) a `Debug` print leaves out.
#[derive(Clone, Default)]
pub(super) struct HeaderFields(pub(super) Vec<(String, String)>);

impl std::fmt::Debug for HeaderFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| format!("{name}: …")))
            .finish()
    }
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
            .field("roots", &self.handlers.roots.is_some())
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
                http_headers: HeaderFields::default(),
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

    /// Over HTTP, sends the header field `name: value` with every request of the client
    /// (its `POST`s, its `GET` event stream, the `DELETE` that ends its session): the
    /// credentials of a server that authenticates clients, say `("Authorization",
    /// "Bearer …")`. Call it again for more fields. [`connect_http`](Self::connect_http)
    /// refuses (with [`ClientError::Unsupported`]) a name that is not a header name, is
    /// given twice, or is one the transport sets itself (`Host`, `Content-Type`,
    /// `Mcp-Session-Id`...), and a value holding a line break or another control
    /// character. Ignored over stdio.
    pub fn http_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        (self.config.http_headers.0).push((name.into(), value.into()));
        self
    }

    /// SEP-2663: whether a followed task is also watched through the server's status
    /// notifications (on by default). The client then opens a `subscriptions/listen` for
    /// the task and looks at it (`tasks/get`) as soon as the server says it changed,
    /// instead of only at the next poll; it still polls at the server's interval, and a
    /// server without task notifications (it refuses the subscription) is only polled.
    /// The subscription ends with the task (over HTTP it holds a connection meanwhile); one
    /// whose event stream breaks off before (a proxy's idle limit, say) is opened again,
    /// unless they keep breaking off at once.
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
    /// call's task is cancelled and the call fails with [`ClientError::Deadline`]. The
    /// cancel may take up to 5 s more; so may the answer to a `tools/call` that could
    /// create a task (2025-11-25 with a task asked for; any on SEP-2663), so that a task
    /// created just as the deadline passed is cancelled too, not left running unknown.
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
    /// that finds [`MAX_QUEUED_SERVER_REQUESTS`] (or 64 MiB of requests) already waiting
    /// is refused at once
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
    /// declares it with its own settings. On 2025-11-25 the server asks by a request,
    /// which only a handler can answer: one for a capability declared without a handler
    /// gets -32601, so register `on_elicitation`, `on_sampling` or `on_roots` there.
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

    /// Answers the server's `roots/list` requests with a `ListRootsResult`
    /// (`{"roots": [{"uri": "file:///home/ada/project", "name": "project"}]}`): on
    /// 2025-11-25 as a request, on SEP-2663 as a task's input request. Registering it
    /// declares the `roots` capability (without `listChanged`: this client sends no
    /// `notifications/roots/list_changed`).
    pub fn on_roots(
        mut self,
        handler: impl Fn(&InputRequest) -> Result<Value, RpcError> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.roots = Some(Arc::new(handler) as Handler);
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
    /// the client is dropped. A request whose `POST` the server answers with an event
    /// stream that it ends before the answer, having given its events ids (SEP-1699), is
    /// resumed there with a `GET` carrying `Last-Event-ID`, after the server's `retry:`
    /// time (at most 5 s); the request fails with [`ClientError::Io`] if the server refuses
    /// that `GET` (405, 404 for a forgotten session, another 4xx) or three resumptions in
    /// a row bring no new event.
    #[cfg(feature = "http")]
    pub fn connect_http(self, url: &str) -> Result<Client, ClientError> {
        let (shared, jobs) = Shared::new();
        let transport = http::HttpTransport::new(
            url,
            self.config.revision,
            shared.clone(),
            self.config.request_timeout,
            &self.config.http_headers.0,
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
