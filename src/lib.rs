//! A synchronous, runtime-free implementation of the "tasks" feature of the Model Context
//! Protocol (MCP).
//!
//! # Where to start
//!
//! - **A task store of your own**: [`Store::builder`] configures and starts one. The
//!   [`Store`] derefs to a [`StoreHandle`], and [`Store::handle`] makes more for other
//!   threads: they create tasks, store results, wait for them, list and cancel (example
//!   below). Give the builder a [`JournalConfig`] to keep tasks across restarts. Other
//!   backends implement [`TaskStore`].
//! - **An MCP server whose tools run as tasks**: [`server::Server::builder`] with
//!   [`server::Tool`]s; a tool gets a [`server::TaskContext`] to report progress, see a
//!   cancel and ask the client for input. Serve it with [`server::Server::serve_stdio`] or
//!   [`server::HttpServer::bind`] (feature `http`, on by default). The [`server`] page has an
//!   example.
//! - **Calling such a server**: [`client::Client::builder`], then
//!   [`call_tool`](client::Client::call_tool), which follows a task to its result.
//! - **Without writing Rust**: the `mcp-task-server` binary serves demo tools over stdio or
//!   HTTP (`cargo run --bin mcp-task-server -- --help`; `--demo` shows a whole
//!   conversation), and the `ffi` feature builds a C library (header
//!   `include/mcp_task_store.h`).
//!
//! The `examples/` directory has `store_tour` (the store alone) and `long_task` (the client
//! following a task on the binary); the README covers the protocol decisions, the journal
//! and the HTTP transport's limits.
//!
//! # Architecture
//!
//! One owner thread holds every task in a `BTreeMap` and serves commands from its inbox (a
//! few single-command seats it polls, and a `crossbeam-channel` for the rest); callers hold
//! a cheap, cloneable, blocking [`StoreHandle`]. The owner thread drives a pure
//! [`StoreMachine`] (no threads, no clock reads: `now` and ids are arguments) and sleeps
//! exactly until the next command or the next deadline (TTLs on a hierarchical timer wheel,
//! timed waits in an exact map).
//! It is the only thread that changes the machine; without a journal, reads that change
//! nothing (`get`, `get_detail`, `get_result`) are answered on the caller's thread under a
//! read lock. Tests
//! swap in a [`ManualClock`] and use [`StoreHandle::sync`] as a barrier.
//!
//! Layers, bottom up: [`model`] (wire and domain types), [`store`] (machine, wheel, actor,
//! handle, journal), [`protocol`] (JSON-RPC and the two tasks revisions), [`server`] (tools,
//! connections, stdio and HTTP transports) and [`client`] (the blocking client). Nothing
//! below the protocol layer knows JSON-RPC. With the `ffi` feature, the
//! `ffi` module exposes the store to C (header: `include/mcp_task_store.h`).
//!
//! ```
//! use mcp_task_store::{CreateTask, Outcome, Store, TaskStatus};
//! use serde_json::json;
//!
//! let store = Store::builder().build()?;
//! let task = store.create(CreateTask::new().ttl(60_000))?;
//! store.store_result(task.task_id, None, TaskStatus::Completed, Outcome::result(json!({"ok": true})), None)?;
//! let done = store.get_result(task.task_id, None)?;
//! assert_eq!(done.task.status, TaskStatus::Completed);
//! # Ok::<(), mcp_task_store::StoreError>(())
//! ```

#![warn(missing_docs, unreachable_pub)]

pub mod client;
mod error;
#[cfg(feature = "ffi")]
pub mod ffi;
pub mod model;
pub mod protocol;
pub mod server;
pub mod store;

pub use error::StoreError;
pub use model::{
    CancelOutcome, CreateTask, InputRequests, InputResponses, LimitScope, Origin, Outcome,
    SessionId, StoreEvent, Task, TaskDetail, TaskId, TaskPage, TaskResult, TaskStatus, Timestamp,
    MAX_PAYLOAD_DEPTH,
};
pub use store::{
    CancelToken, Clock, Durability, ExpiryPolicy, JournalConfig, ManualClock, Millis, MissedAtStop,
    Now, RecoveryPolicy, Store, StoreBuilder, StoreConfig, StoreHandle, StoreMachine, SystemClock,
    TaskStore, WaitStop,
};

/// The README's code blocks, compiled and run as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
