//! The store and handle entry points.

use std::collections::btree_map::{BTreeMap, Entry};
use std::ffi::c_char;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::args::{arg_bytes, arg_ref, arg_str, opt_session, opt_str, opt_text, Out};
use super::bytes::mcpts_bytes;
use super::config::parse_config;
use super::dispatch::DispatchStore;
use super::error::{mcpts_result, parse_object, Error};
use crate::model::forks;
use crate::protocol::RpcError;
use crate::store::StoreStats;
use crate::{
    CancelOutcome, CreateTask, Origin, Outcome, SessionId, Store, StoreError, StoreHandle, Task,
    TaskPage, TaskResult, TaskStatus,
};

/// A task store (opaque): owns the store's owner thread. Create it with [`mcpts_store_new`],
/// talk to it through an [`mcpts_handle`] from [`mcpts_store_handle`], release it with
/// [`mcpts_store_free`].
#[derive(Debug)]
pub struct mcpts_store {
    store: Store,
    owner: Arc<Owner>,
}

/// A handle to a store (opaque): cheap to clone, usable from any thread at once. It stays
/// valid after its store is freed; every call on it then returns `MCPTS_RESULT_CLOSED`.
/// Release it with [`mcpts_handle_free`].
#[derive(Debug)]
pub struct mcpts_handle {
    handle: StoreHandle,
    pub(super) owner: Arc<Owner>,
}

impl mcpts_handle {
    /// The store behind this handle, or `Closed` once it is freed or in a forked child.
    /// Every entry point on a handle goes through here, so calls that never reach the owner
    /// thread (a clone, a dispatch of a request that touches no task) report a freed store
    /// too.
    pub(super) fn live(&self) -> Result<&StoreHandle, Error> {
        self.owner.check()?;
        Ok(&self.handle)
    }
}

/// What a store shares with all its handles and event subscriptions.
#[derive(Debug)]
pub(super) struct Owner {
    /// The process that created the store.
    pid: u32,
    /// [`forks::generation`] when the store was created. `fork()` copies the store's
    /// memory into the child but not its owner thread, so in a forked child a call would
    /// wait forever for an answer, and freeing would wait forever for the thread to exit.
    generation: u64,
    /// Set by `mcpts_store_free` before it stops the owner thread.
    freed: AtomicBool,
}

impl Owner {
    /// An owner for a store created by this process.
    fn new() -> Owner {
        Owner {
            pid: std::process::id(),
            generation: forks::generation(),
            freed: AtomicBool::new(false),
        }
    }

    /// Whether this is a process other than the store's: a child forked after the store
    /// was created. Either sign tells: the counter catches a descendant that got the
    /// creator's pid back, the pid a fork that skips the atfork handlers (glibc's `_Fork`,
    /// a raw `clone`).
    pub(super) fn forked(&self) -> bool {
        std::process::id() != self.pid || forks::generation() != self.generation
    }

    /// `Closed` once the store is freed, or at once in a forked child.
    fn check(&self) -> Result<(), Error> {
        self.check_process()?;
        if self.freed.load(Ordering::Acquire) {
            return Err(StoreError::Closed.into());
        }
        Ok(())
    }

    /// `Closed` in a forked child, with a message that says so; fine in the store's own
    /// process, freed or not.
    pub(super) fn check_process(&self) -> Result<(), Error> {
        if self.forked() {
            return Err(Error::new(
                mcpts_result::Closed,
                format!(
                    "the task store is closed here: it belongs to process {}, which created \
                     it; this process ({}) is a fork() of it, where the store's thread does \
                     not run",
                    self.pid,
                    std::process::id()
                ),
            ));
        }
        Ok(())
    }
}

/// Pass as `timeout_ms` to wait without a timeout.
pub const MCPTS_WAIT_FOREVER: u64 = u64::MAX;

/// A C timeout as a Rust one: `None` for [`MCPTS_WAIT_FOREVER`].
pub(super) fn timeout(timeout_ms: u64) -> Option<Duration> {
    (timeout_ms != MCPTS_WAIT_FOREVER).then(|| Duration::from_millis(timeout_ms))
}

fn parse_json<T: DeserializeOwned>(json: &[u8], what: &str) -> Result<T, Error> {
    parse_object(json, what, mcpts_result::InvalidArgument)
}

/// Input requests or their answers: an object of keyed values, each key once. A map would
/// keep the last of two equal keys, dropping a request or an answer without a word.
struct Keyed(BTreeMap<String, Value>);

impl<'de> Deserialize<'de> for Keyed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyedVisitor;

        impl<'de> Visitor<'de> for KeyedVisitor {
            type Value = Keyed;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of keyed values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keyed, A::Error> {
                let mut keyed = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    match keyed.entry(key) {
                        Entry::Occupied(entry) => {
                            return Err(de::Error::custom(format!(
                                "duplicate key `{}`",
                                entry.key()
                            )))
                        }
                        Entry::Vacant(entry) => {
                            entry.insert(map.next_value()?);
                        }
                    }
                }
                Ok(Keyed(keyed))
            }
        }

        deserializer.deserialize_map(KeyedVisitor)
    }
}

/// `Ok` unless `text` holds a NUL, which JSON can spell (`\u0000`) and a C string cannot:
/// a session or an input key with one could never be passed back to the calls that take
/// it as a C string.
fn c_spellable(text: &str, what: &str) -> Result<(), Error> {
    if text.contains('\0') {
        return Err(Error::invalid(format!(
            "{what} must not contain a NUL character (no C string can name it)"
        )));
    }
    Ok(())
}

fn parse_status(name: &str) -> Result<TaskStatus, Error> {
    serde_json::from_value(Value::String(name.to_owned())).map_err(|_| {
        Error::invalid(format!(
            "unknown task status '{name}' (expected working, input_required, completed, \
             failed or cancelled)"
        ))
    })
}

/// Creates a store from a JSON configuration and starts its owner thread.
///
/// `config_json` points to `config_len` bytes of UTF-8 JSON (the length counts the JSON
/// text only: no trailing NUL is needed, and one counted in is `INVALID_JSON`), for example
/// `{"default_ttl": "10m", "max_ttl": 3600000, "page_size": 50}`. Fields, all optional:
/// `default_ttl`, `max_ttl`, `poll_interval` (humantime strings such as `"90s"` or integer
/// milliseconds), `page_size`, `max_tasks`, `max_tasks_per_session` (integers), `expiry`
/// (`"fail"`, `"remove"` or `{"policy": "fail", "grace": "30s"}`), `max_waiters_per_task`,
/// `event_buffer` (integers), and `journal`, which keeps tasks across restarts:
/// `{"dir": "/var/lib/app/tasks", "durability": "fsync"}` (also `"recovery"`:
/// `"fail_running"` or `"keep"`, `"salvage"`, `"compact_ratio"`, `"compact_min_bytes"`).
/// `null` or absent means the default; `{}` is the default configuration. Unknown fields
/// are rejected.
///
/// With a journal the store is rebuilt from it before this returns: tasks created before
/// the last [`mcpts_store_free`] (or a crash) are there again, and every change is on disk
/// (per `durability`) before the call that made it returns. One store at a time may use a
/// directory.
///
/// On success writes a new store to `*store_out`; free it with [`mcpts_store_free`].
/// Errors: `NULL_PARAMETER`, `INVALID_JSON`, `INVALID_CONFIG` (the last error names the
/// field), `JOURNAL` (the journal cannot be opened or read, is damaged, or its directory
/// is in use by another store; the last error names the file), `INVALID_ARGUMENT` (a
/// `config_len` no buffer has, past `SIZE_MAX / 2`; or the owner thread cannot be spawned:
/// the last error says why), and `PANIC` as any call.
///
/// Thread safety: any thread.
///
/// # Safety
///
/// `config_json` must be NULL or readable for `config_len` bytes; `store_out` must be NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_store_new(
    config_json: *const u8,
    config_len: usize,
    store_out: *mut *mut mcpts_store,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY: per this function's contract.
        let json = unsafe { arg_bytes(config_json, config_len, "config_json") }?;
        let store_out = Out::new(store_out, "store_out")?;
        let config = parse_config(json.bytes()?)?;
        let mut builder = Store::builder().config(config.store);
        if let Some(journal) = config.journal {
            builder = builder.journal(journal);
        }
        let store = builder.build()?;
        let owner = Arc::new(Owner::new());
        // SAFETY: per this function's contract.
        unsafe { store_out.write(Box::new(mcpts_store { store, owner })) };
        Ok(())
    })
}

/// Stops the store: shuts its owner thread down and joins it, then frees the store. NULL is
/// a no-op. Callers blocked on the store at that moment (for example in
/// [`mcpts_handle_wait`]) return `MCPTS_RESULT_CLOSED`; handles stay valid and return
/// `MCPTS_RESULT_CLOSED` from then on, and must still be freed.
///
/// In a child forked from the process that created the store, this returns at once and
/// releases nothing: the owner thread lives only in that parent (`fork()` does not copy
/// it), and every call on the store in the child returns `MCPTS_RESULT_CLOSED`. The
/// parent's store is unaffected and must still be freed there. With a
/// journal, the child does not hold the journal directory's lock (its copy of the lock
/// file is let go of at the fork): once the parent frees its store, a new store may open
/// the directory while the child lives.
///
/// Thread safety: any thread, but it blocks until the owner thread has exited, and no other
/// thread may use this `store` pointer at the same time (handles are fine).
///
/// # Safety
///
/// `store` must be NULL or a live pointer from [`mcpts_store_new`], freed at most once.
#[no_mangle]
pub unsafe extern "C" fn mcpts_store_free(store: *mut mcpts_store) {
    ffi_boundary!(default = (); {
        // SAFETY: NULL or live, per the contract.
        let Some(live) = (unsafe { store.as_ref() }) else {
            return;
        };
        if live.owner.forked() {
            // The owner thread runs only in the parent: joining it would never return, and
            // a parent thread may have held one of the store's locks at the fork. This copy
            // is left as it is; the child's exit reclaims it.
            return;
        }
        live.owner.freed.store(true, Ordering::Release);
        // SAFETY: from `Box::into_raw` in `mcpts_store_new`, freed once (the contract).
        drop(unsafe { Box::from_raw(store) });
    })
}

/// Writes a new handle to the store to `*handle_out`; free it with [`mcpts_handle_free`].
///
/// Errors: `NULL_PARAMETER`, `CLOSED` (in a child forked from the store's process).
///
/// Thread safety: any thread, concurrently with other calls on the same store except
/// [`mcpts_store_free`].
///
/// # Safety
///
/// `store` must be NULL or live; `handle_out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_store_handle(
    store: *const mcpts_store,
    handle_out: *mut *mut mcpts_handle,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY: per this function's contract.
        let store = unsafe { arg_ref(store, "store") }?;
        let handle_out = Out::new(handle_out, "handle_out")?;
        store.owner.check()?;
        let handle = mcpts_handle {
            handle: store.store.handle(),
            owner: Arc::clone(&store.owner),
        };
        // SAFETY: per this function's contract.
        unsafe { handle_out.write(Box::new(handle)) };
        Ok(())
    })
}

/// Writes a second handle to the same store to `*handle_out`; both must be freed.
///
/// Errors: `NULL_PARAMETER`, `CLOSED` (the store is freed, or this is a forked child: a new
/// handle would be of no use).
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; `handle_out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_clone(
    handle: *const mcpts_handle,
    handle_out: *mut *mut mcpts_handle,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY: per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let handle_out = Out::new(handle_out, "handle_out")?;
        let twin = mcpts_handle {
            handle: handle.live()?.clone(),
            owner: Arc::clone(&handle.owner),
        };
        // SAFETY: per this function's contract.
        unsafe { handle_out.write(Box::new(twin)) };
        Ok(())
    })
}

/// Frees a handle. NULL is a no-op. The store keeps running; freeing a handle after its
/// store is fine (and required). In a forked child it returns at once and releases nothing,
/// like [`mcpts_store_free`].
///
/// Thread safety: any thread, but no other thread may be using this `handle` pointer.
///
/// # Safety
///
/// `handle` must be NULL or a live handle from this library, freed at most once.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_free(handle: *mut mcpts_handle) {
    ffi_boundary!(default = (); {
        // SAFETY: NULL or live, per the contract.
        let Some(live) = (unsafe { handle.as_ref() }) else {
            return;
        };
        if live.owner.forked() {
            // As in `mcpts_store_free`: dropping the handle's channel end could wait on a
            // lock some parent thread held at the fork. Leave the child's copy alone.
            return;
        }
        // SAFETY: from `Box::into_raw` in this library, freed once (the contract).
        drop(unsafe { Box::from_raw(handle) });
    })
}

/// `mcpts_handle_create`'s request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    #[serde(default)]
    ttl: Option<u64>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    origin: Option<Value>,
}

/// Creates a task (status `working`, fresh random id) and writes it to `*task_out` as JSON
/// (an MCP task object: `taskId`, `status`, `createdAt`, `lastUpdatedAt`, `ttl`,
/// `pollInterval`). The task is visible to [`mcpts_handle_get`] before this returns.
///
/// `request_json` (`request_len` bytes) is an object with optional fields `ttl` (requested
/// retention in ms; absent, `null` or 0 take the store's default, `max_ttl` caps it,
/// 100 years at most), `session` (string; absent or `null` for a sessionless task) and
/// `origin` (any JSON, kept with the task, e.g. the originating JSON-RPC request). `{}` is
/// a valid request.
///
/// Errors: `NULL_PARAMETER`, `INVALID_JSON`, `INVALID_ARGUMENT` (wrong shape, unknown
/// field, a `session` holding a NUL, which no C string could name), `LIMIT_EXCEEDED`,
/// `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; `request_json` NULL or readable for `request_len` bytes;
/// `task_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_create(
    handle: *const mcpts_handle,
    request_json: *const u8,
    request_len: usize,
    task_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY: per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        // SAFETY: per this function's contract.
        let json = unsafe { arg_bytes(request_json, request_len, "request_json") }?;
        let task_out = Out::new(task_out, "task_out")?;
        let store = handle.live()?;
        let request: CreateRequest = parse_json(json.bytes()?, "create request")?;
        if let Some(session) = &request.session {
            c_spellable(session, "invalid create request: 'session'")?;
        }
        let create = CreateTask {
            ttl: request.ttl,
            session: request.session.map(SessionId::from),
            origin: request.origin.map(Origin::from),
        };
        let task = store.create(create)?;
        let bytes = mcpts_bytes::json(&task)?;
        // SAFETY: per this function's contract.
        unsafe { task_out.write(bytes) };
        Ok(())
    })
}

/// Writes the task `task_id` to `*task_out` as JSON (an MCP task object).
///
/// `session` is the caller's session, or NULL for sessionless; sessions are strict (a
/// task of another session is `NOT_FOUND`). Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT`
/// (a string that is not UTF-8), `NOT_FOUND` (unknown, foreign, expired, or not a UUID),
/// `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; `task_id` and `session` NULL or NUL-terminated;
/// `task_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_get(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    task_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let task_out = Out::new(task_out, "task_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let task = store.get(id, session.as_ref())?;
        unsafe { task_out.write(mcpts_bytes::json(&task)?) };
        Ok(())
    })
}

/// Moves a live task to `status` (`"working"`, `"input_required"`, `"completed"`,
/// `"failed"` or `"cancelled"`), with an optional status `message` (NULL for none), and
/// writes the updated task to `*task_out` as JSON. To finish a task with its result, use
/// [`mcpts_handle_store_result`] instead.
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT` (unknown status name, not UTF-8, or a move
/// to `working` while the task's input requests are still pending), `NOT_FOUND`,
/// `INVALID_TRANSITION` (the task is terminal), `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `task_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_update_status(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    status: *const c_char,
    message: *const c_char,
    task_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let status = unsafe { arg_str(status, "status") }?;
        let message = unsafe { opt_str(message, "message") };
        let task_out = Out::new(task_out, "task_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let status = parse_status(status.text()?)?;
        let message = opt_text(message)?.map(str::to_owned);
        let task = store.update_status(id, session.as_ref(), status, message)?;
        unsafe { task_out.write(mcpts_bytes::json(&task)?) };
        Ok(())
    })
}

/// `mcpts_handle_store_result`'s request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreResultRequest {
    #[serde(default)]
    status: Option<TaskStatus>,
    /// An explicit `null` is `Some(Value::Null)`, refused as "not an object" rather than
    /// mistaken for an absent field.
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    /// As `result`.
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

/// Reads a field that is present, even as `null`, as `Some`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// What kind of JSON value this is, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The outcome a [`StoreResultRequest`] names, and the status it implies. `tasks/result`
/// later answers the stored value as is, so only what MCP allows there is taken: a result
/// object, or a JSON-RPC error object (integer `code`, string `message`, optional `data`).
fn outcome_of(result: Option<Value>, error: Option<Value>) -> Result<(Outcome, TaskStatus), Error> {
    match (result, error) {
        (Some(result), None) if result.is_object() => {
            Ok((Outcome::result(result), TaskStatus::Completed))
        }
        (Some(result), None) => Err(Error::invalid(format!(
            "invalid result: 'result' must be a JSON object (the original request's result), \
             not {}",
            json_kind(&result)
        ))),
        // Only an object: serde would also read the error from an array (`[7, "seven"]`).
        (None, Some(error)) if !error.is_object() => Err(Error::invalid(format!(
            "invalid result: 'error' must be a JSON-RPC error object, not {}",
            json_kind(&error)
        ))),
        (None, Some(error)) => match serde_json::from_value::<RpcError>(error.clone()) {
            Ok(_) => Ok((Outcome::error(error), TaskStatus::Failed)),
            Err(why) => Err(Error::invalid(format!(
                "invalid result: 'error' must be a JSON-RPC error object with an integer \
                 'code' and a string 'message' ({why})"
            ))),
        },
        _ => Err(Error::invalid(
            "invalid result: exactly one of 'result' or 'error' is required",
        )),
    }
}

/// Finishes a live task with its outcome and writes the updated task to `*task_out` as
/// JSON. First writer wins: on a task that is already terminal nothing changes and the call
/// returns `ALREADY_TERMINAL`.
///
/// `outcome_json` (`outcome_len` bytes) is an object with exactly one of `result` (the
/// original request's result: a JSON object) or `error` (its JSON-RPC error: an object with
/// an integer `code`, a string `message` and optional `data`), plus optional
/// `status` (`"completed"` or `"failed"`; default `"completed"` with `result`, `"failed"`
/// with `error`) and `message` (a status message). Example:
/// `{"result": {"content": [], "isError": false}}`.
///
/// Errors: `NULL_PARAMETER`, `INVALID_JSON`, `INVALID_ARGUMENT` (wrong shape, unknown field,
/// a `result` that is not an object, an `error` that is not a JSON-RPC error object, a
/// `status` other than `completed` or `failed`, `completed` with an `error`), `NOT_FOUND`,
/// `ALREADY_TERMINAL`, `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `outcome_json`
/// NULL or readable for `outcome_len` bytes; `task_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_store_result(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    outcome_json: *const u8,
    outcome_len: usize,
    task_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let json = unsafe { arg_bytes(outcome_json, outcome_len, "outcome_json") }?;
        let task_out = Out::new(task_out, "task_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let request: StoreResultRequest = parse_json(json.bytes()?, "result")?;
        let (outcome, default_status) = outcome_of(request.result, request.error)?;
        let status = request.status.unwrap_or(default_status);
        let task = store.store_result(
            id,
            session.as_ref(),
            status,
            outcome,
            request.message,
        )?;
        unsafe { task_out.write(mcpts_bytes::json(&task)?) };
        Ok(())
    })
}

/// The JSON shape of a stored result: the task and exactly one of `result` / `error`.
#[derive(Serialize)]
struct ResultJson<'a> {
    task: &'a Task,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
}

impl<'a> From<&'a TaskResult> for ResultJson<'a> {
    fn from(res: &'a TaskResult) -> Self {
        let (result, error) = match &res.outcome {
            Outcome::Result(value) => (Some(&**value), None),
            Outcome::Error(value) => (None, Some(&**value)),
        };
        ResultJson {
            task: &res.task,
            result,
            error,
        }
    }
}

/// Writes the stored outcome of a finished task to `*result_out` as JSON:
/// `{"task": {...}, "result": {...}}` or `{"task": {...}, "error": {...}}`.
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT`, `NOT_FOUND`, `NO_RESULT` (still running,
/// cancelled, or failed by expiring), `CLOSED`. It does not block; see
/// [`mcpts_handle_wait`].
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `result_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_get_result(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    result_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let result_out = Out::new(result_out, "result_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let res = store.get_result(id, session.as_ref())?;
        unsafe { result_out.write(mcpts_bytes::json(&ResultJson::from(&res))?) };
        Ok(())
    })
}

/// The JSON shape of a page: `{"tasks": [...], "nextCursor": "..."}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PageJson<'a> {
    tasks: &'a [Task],
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<&'a str>,
}

/// Writes one page of the caller's tasks, in creation order, to `*page_out` as JSON:
/// `{"tasks": [...], "nextCursor": "..."}`; `nextCursor` is absent on the last page.
///
/// `session` selects the caller's tasks (NULL: sessionless tasks only). `cursor` is NULL
/// for the first page, else a `nextCursor` from an earlier page of the same session.
/// Pages hold the configured `page_size` tasks at most.
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT`, `INVALID_CURSOR`, `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `page_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_list(
    handle: *const mcpts_handle,
    session: *const c_char,
    cursor: *const c_char,
    page_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let session = unsafe { opt_str(session, "session") };
        let cursor = unsafe { opt_str(cursor, "cursor") };
        let page_out = Out::new(page_out, "page_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let session = opt_session(session)?;
        let cursor = opt_text(cursor)?;
        let TaskPage { tasks, next_cursor } = store.list(session.as_ref(), cursor)?;
        let page = PageJson {
            tasks: &tasks,
            next_cursor: next_cursor.as_deref(),
        };
        unsafe { page_out.write(mcpts_bytes::json(&page)?) };
        Ok(())
    })
}

/// The JSON shape of a store's load: `{"tasks": N, "waiters": N, "timers": N}`.
#[derive(Serialize)]
struct StatsJson {
    tasks: usize,
    waiters: usize,
    timers: usize,
}

impl From<StoreStats> for StatsJson {
    fn from(stats: StoreStats) -> Self {
        // Exhaustive on purpose: a new counter must be placed in the JSON (or left out) here.
        let StoreStats {
            tasks,
            waiters,
            timers,
        } = stats;
        StatsJson {
            tasks,
            waiters,
            timers,
        }
    }
}

/// Writes the store's current load to `*stats_out` as JSON: `{"tasks": N, "waiters": N,
/// "timers": N}`. `tasks` counts the tasks the store holds, of every session (expired
/// ones not yet reclaimed included); `waiters` the callers blocked in a wait
/// ([`mcpts_handle_wait`], [`mcpts_handle_wait_input`], a `tasks/result` in
/// [`mcpts_handle_dispatch`]); `timers` the pending deadlines (task expiries, stale ones
/// included until they come due, and the timeouts of the waits still blocked). The
/// counts are read on the store's owner thread and include every change made by a call
/// that returned before this one began. For monitoring, and for a test that must know
/// another thread's wait has begun.
///
/// Errors: `NULL_PARAMETER`, `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; `stats_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_stats(
    handle: *const mcpts_handle,
    stats_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY: per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let stats_out = Out::new(stats_out, "stats_out")?;
        let stats = handle.live()?.stats()?;
        let bytes = mcpts_bytes::json(&StatsJson::from(stats))?;
        // SAFETY: per this function's contract.
        unsafe { stats_out.write(bytes) };
        Ok(())
    })
}

/// The JSON shape of a cancel: `{"task": {...}, "cancelled": true}`.
#[derive(Serialize)]
struct CancelJson<'a> {
    task: &'a Task,
    cancelled: bool,
}

/// Cancels a live task (it is `cancelled` before this returns, and its waiters wake) and
/// writes `{"task": {...}, "cancelled": true}` to `*outcome_out`. On a task that is already
/// terminal nothing changes and `cancelled` is `false` (cancel is idempotent). `message`
/// is an optional status message (NULL for none).
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT`, `NOT_FOUND`, `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `outcome_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_cancel(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    message: *const c_char,
    outcome_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let message = unsafe { opt_str(message, "message") };
        let outcome_out = Out::new(outcome_out, "outcome_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let message = opt_text(message)?.map(str::to_owned);
        let CancelOutcome { task, cancelled } =
            store.cancel(id, session.as_ref(), message)?;
        let outcome = CancelJson {
            task: &task,
            cancelled,
        };
        unsafe { outcome_out.write(mcpts_bytes::json(&outcome)?) };
        Ok(())
    })
}

/// Blocks until the task is terminal and writes it to `*task_out` as JSON, or returns
/// `TIMEOUT` after `timeout_ms` milliseconds ([`MCPTS_WAIT_FOREVER`] for no timeout; 0
/// checks without waiting). Cancel, completion and expiry all wake it.
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT`, `NOT_FOUND` (also when the task disappears
/// while waiting), `TIMEOUT`, `LIMIT_EXCEEDED` (too many waiters on the task), `CLOSED`
/// (also when the store is freed while waiting).
///
/// Thread safety: any thread, concurrently with other calls on `handle`; blocks only the
/// calling thread.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `task_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_wait(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    timeout_ms: u64,
    task_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let task_out = Out::new(task_out, "task_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let task = store.wait_terminal(id, session.as_ref(), timeout(timeout_ms))?;
        unsafe { task_out.write(mcpts_bytes::json(&task)?) };
        Ok(())
    })
}

/// Adds input requests to a live task, moves it to `input_required`, and writes the
/// updated task to `*task_out` as JSON.
///
/// `requests_json` (`requests_len` bytes) is an object mapping each new key to its request,
/// e.g. `{"ask-1": {"method": "elicitation/create", "params": {...}}}`. Keys are unique
/// over the task's whole life.
///
/// Errors: `NULL_PARAMETER`, `INVALID_JSON`, `INVALID_ARGUMENT` (not an object, empty, too
/// many keys, a key given twice, a key holding a NUL, which no C string could name),
/// `NOT_FOUND`, `ALREADY_TERMINAL`, `INPUT_KEY_REUSED`, `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `requests_json`
/// NULL or readable for `requests_len` bytes; `task_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_set_input_requests(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    requests_json: *const u8,
    requests_len: usize,
    task_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let json = unsafe { arg_bytes(requests_json, requests_len, "requests_json") }?;
        let task_out = Out::new(task_out, "task_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let Keyed(requests) = parse_json(json.bytes()?, "input requests")?;
        for key in requests.keys() {
            c_spellable(key, "invalid input requests: a key")?;
        }
        let task = store.set_input_requests(id, session.as_ref(), requests)?;
        unsafe { task_out.write(mcpts_bytes::json(&task)?) };
        Ok(())
    })
}

/// Answers input requests and writes the updated task to `*task_out` as JSON. Answered keys
/// stop being pending; when none is left the task returns to `working`. Keys that are not
/// pending are ignored; a terminal task is never revived.
///
/// `responses_json` (`responses_len` bytes) is an object mapping keys to answers, e.g.
/// `{"ask-1": {"action": "accept", "content": {"name": "x"}}}`.
///
/// Errors: `NULL_PARAMETER`, `INVALID_JSON`, `INVALID_ARGUMENT` (not an object, a key
/// given twice), `NOT_FOUND`, `ALREADY_TERMINAL`, `CLOSED`.
///
/// Thread safety: any thread, concurrently with other calls on `handle`.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `responses_json`
/// NULL or readable for `responses_len` bytes; `task_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_resolve_input(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    responses_json: *const u8,
    responses_len: usize,
    task_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let json = unsafe { arg_bytes(responses_json, responses_len, "responses_json") }?;
        let task_out = Out::new(task_out, "task_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let Keyed(responses) = parse_json(json.bytes()?, "input responses")?;
        let task = store.resolve_input(id, session.as_ref(), responses)?;
        unsafe { task_out.write(mcpts_bytes::json(&task)?) };
        Ok(())
    })
}

/// Blocks until the input request `key` of the task is answered and writes the answer (the
/// JSON value given to [`mcpts_handle_resolve_input`]) to `*answer_out`; `TIMEOUT` after
/// `timeout_ms` ([`MCPTS_WAIT_FOREVER`] for none). This is how a worker written in C reads
/// the answers to its input requests.
///
/// Each answer is handed out once, to one waiter. Once a wait has returned the answer, a
/// later wait on the same key gives `UNKNOWN_INPUT_KEY`. While one caller is blocked
/// waiting on a key, a second wait on that key is refused at once with `INVALID_ARGUMENT`,
/// rather than queued for an answer that would go to the first.
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT` (not UTF-8, or another caller is already
/// waiting on this key), `NOT_FOUND`, `UNKNOWN_INPUT_KEY` (no such request, or its answer
/// already handed out), `ALREADY_TERMINAL` (the task ended without an answer), `TIMEOUT`,
/// `LIMIT_EXCEEDED`, `CLOSED` (also when the store is freed while waiting).
///
/// Thread safety: any thread, concurrently with other calls on `handle`; blocks only the
/// calling thread.
///
/// # Safety
///
/// `handle` must be NULL or live; string arguments NULL or NUL-terminated; `answer_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_wait_input(
    handle: *const mcpts_handle,
    task_id: *const c_char,
    session: *const c_char,
    key: *const c_char,
    timeout_ms: u64,
    answer_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let task_id = unsafe { arg_str(task_id, "task_id") }?;
        let session = unsafe { opt_str(session, "session") };
        let key = unsafe { arg_str(key, "key") }?;
        let answer_out = Out::new(answer_out, "answer_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let id = task_id.task_id()?;
        let session = opt_session(session)?;
        let key = key.text()?;
        let answer = store.wait_input(id, session.as_ref(), key, timeout(timeout_ms))?;
        unsafe { answer_out.write(mcpts_bytes::json(&answer)?) };
        Ok(())
    })
}

/// Serves one raw JSON-RPC request for a `tasks/` method (`request_len` bytes of UTF-8
/// JSON) against the store, so a host with its own transport can serve MCP tasks without
/// rewriting the protocol adapters. The revision is read from the request: SEP-2663 when
/// its `params._meta` names protocol `2026-07-28`, else 2025-11-25. `session` scopes the
/// tasks (NULL: sessionless).
///
/// On `OK`, `*response_out` is the complete JSON-RPC response to send back (a protocol error,
/// such as an unknown task or malformed JSON, is a JSON-RPC error response, still `OK`), or
/// NULL when the message needs no response (a notification, or a response: even one with
/// a null or missing id is never answered). Methods outside `tasks/` get
/// -32601. A 2025-11-25 `tasks/result` blocks until the task is terminal, with no timeout;
/// [`mcpts_handle_dispatch_timeout`] bounds that wait.
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT` (not UTF-8), `CLOSED` when the store is
/// freed before the call (whatever the request, even one that touches no task), or during
/// it for a request that reaches the store:
/// as on every failure, `*response_out` is left untouched, and answering the request (for
/// example with a JSON-RPC -32603 error) is up to the host.
///
/// Thread safety: any thread, concurrently with other calls on `handle`; blocks only the
/// calling thread.
///
/// # Safety
///
/// `handle` must be NULL or live; `request_json` NULL or readable for `request_len` bytes;
/// `session` NULL or NUL-terminated; `response_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_dispatch(
    handle: *const mcpts_handle,
    request_json: *const u8,
    request_len: usize,
    session: *const c_char,
    response_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    // SAFETY: the same contract.
    unsafe {
        mcpts_handle_dispatch_timeout(
            handle,
            request_json,
            request_len,
            session,
            MCPTS_WAIT_FOREVER,
            response_out,
        )
    }
}

/// [`mcpts_handle_dispatch`] that blocks at most `timeout_ms` milliseconds
/// ([`MCPTS_WAIT_FOREVER`] for no timeout, which is exactly [`mcpts_handle_dispatch`]; 0
/// answers at once). Only a 2025-11-25 `tasks/result` ever waits: when its task is still
/// not terminal after `timeout_ms`, the call returns `OK` with the JSON-RPC error response
/// -32603 `"Timed out waiting on the task"` (the JSON-RPC form of the store's timeout),
/// ready to send; the task is unaffected and the client may ask again. Every other request
/// is answered exactly as by [`mcpts_handle_dispatch`].
///
/// Errors: as [`mcpts_handle_dispatch`].
///
/// Thread safety: any thread, concurrently with other calls on `handle`; blocks only the
/// calling thread.
///
/// # Safety
///
/// `handle` must be NULL or live; `request_json` NULL or readable for `request_len` bytes;
/// `session` NULL or NUL-terminated; `response_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcpts_handle_dispatch_timeout(
    handle: *const mcpts_handle,
    request_json: *const u8,
    request_len: usize,
    session: *const c_char,
    timeout_ms: u64,
    response_out: *mut *mut mcpts_bytes,
) -> mcpts_result {
    ffi_boundary!(fallible {
        // SAFETY (all `unsafe` blocks in this body): per this function's contract.
        let handle = unsafe { arg_ref(handle, "handle") }?;
        let request = unsafe { arg_bytes(request_json, request_len, "request_json") }?;
        let session = unsafe { opt_str(session, "session") };
        let response_out = Out::new(response_out, "response_out")?;
        // Every pointer is checked (see `args`); now the store and what they point to.
        let store = handle.live()?;
        let session = opt_session(session)?;
        let request = std::str::from_utf8(request.bytes()?)
            .map_err(|e| Error::invalid(format!("the request is not UTF-8: {e}")))?;
        let store = DispatchStore::new(store, timeout(timeout_ms));
        let response = crate::protocol::dispatch_tasks(&store, session.as_ref(), request);
        if store.saw_closed() {
            // The response would only say so in prose; C gets the code, and no response.
            return Err(StoreError::Closed.into());
        }
        let bytes = response.map(|r| mcpts_bytes::json(&r)).transpose()?;
        unsafe { response_out.write_optional(bytes) };
        Ok(())
    })
}
