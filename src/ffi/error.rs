//! Result codes, the one mapping from [`StoreError`] to them, and the per-thread last error.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};

use crate::StoreError;

/// The outcome of a fallible `mcpts_*` call. `MCPTS_RESULT_OK` (0) is success.
///
/// Values are explicit and part of the ABI. Rule: a value, once released, keeps its meaning
/// forever; a retired variant leaves a `// reserved: N (was Name)` comment and its number
/// is never handed out again. New codes take the next free number in their group
/// (1..99: calling and library errors; 100..199: store outcomes).
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum mcpts_result {
    /// Success.
    Ok = 0,
    /// A pointer argument that must not be NULL was NULL.
    NullParameter = 1,
    /// Rust panicked inside the call; the library caught it. The store may still work, but
    /// this is a bug worth reporting.
    Panic = 2,
    /// A JSON input is not well-formed JSON (a syntax error).
    InvalidJson = 3,
    /// An argument is well-formed but wrong: JSON of the wrong shape or with unknown fields,
    /// a string that is not UTF-8, an unknown status name, an out-of-range value.
    InvalidArgument = 4,
    /// The store configuration is invalid (unknown field, bad value); the message names the
    /// field.
    InvalidConfig = 5,
    /// The store is gone: it was freed (or its owner thread died) before or during the call,
    /// or the call is made in a child forked from the process that created the store.
    Closed = 6,
    /// The store's journal could not be read or written (the message names the file).
    Journal = 7,
    /// No task with this id is visible to the caller: unknown, another session's, expired, or
    /// not a UUID at all. The cases are deliberately indistinguishable.
    NotFound = 100,
    /// The lifecycle does not allow this status change (terminal states are absorbing).
    InvalidTransition = 101,
    /// The task is already terminal, so nothing changed (first writer wins).
    AlreadyTerminal = 102,
    /// The task has no stored result: still running, cancelled, or failed by expiring.
    NoResult = 103,
    /// The list cursor is malformed or belongs to another session.
    InvalidCursor = 104,
    /// A limit (`max_tasks`, `max_tasks_per_session`, waiters per task) is reached.
    LimitExceeded = 105,
    /// An input request key was already used on this task.
    InputKeyReused = 106,
    /// No input request with this key exists on the task.
    UnknownInputKey = 107,
    /// A wait reached its timeout first.
    Timeout = 108,
}

impl mcpts_result {
    /// The C name of the code, e.g. `"MCPTS_RESULT_NOT_FOUND"`.
    fn name(self) -> &'static CStr {
        match self {
            mcpts_result::Ok => c"MCPTS_RESULT_OK",
            mcpts_result::NullParameter => c"MCPTS_RESULT_NULL_PARAMETER",
            mcpts_result::Panic => c"MCPTS_RESULT_PANIC",
            mcpts_result::InvalidJson => c"MCPTS_RESULT_INVALID_JSON",
            mcpts_result::InvalidArgument => c"MCPTS_RESULT_INVALID_ARGUMENT",
            mcpts_result::InvalidConfig => c"MCPTS_RESULT_INVALID_CONFIG",
            mcpts_result::Closed => c"MCPTS_RESULT_CLOSED",
            mcpts_result::Journal => c"MCPTS_RESULT_JOURNAL",
            mcpts_result::NotFound => c"MCPTS_RESULT_NOT_FOUND",
            mcpts_result::InvalidTransition => c"MCPTS_RESULT_INVALID_TRANSITION",
            mcpts_result::AlreadyTerminal => c"MCPTS_RESULT_ALREADY_TERMINAL",
            mcpts_result::NoResult => c"MCPTS_RESULT_NO_RESULT",
            mcpts_result::InvalidCursor => c"MCPTS_RESULT_INVALID_CURSOR",
            mcpts_result::LimitExceeded => c"MCPTS_RESULT_LIMIT_EXCEEDED",
            mcpts_result::InputKeyReused => c"MCPTS_RESULT_INPUT_KEY_REUSED",
            mcpts_result::UnknownInputKey => c"MCPTS_RESULT_UNKNOWN_INPUT_KEY",
            mcpts_result::Timeout => c"MCPTS_RESULT_TIMEOUT",
        }
    }

    fn from_u32(code: u32) -> Option<mcpts_result> {
        const ALL: [mcpts_result; 17] = [
            mcpts_result::Ok,
            mcpts_result::NullParameter,
            mcpts_result::Panic,
            mcpts_result::InvalidJson,
            mcpts_result::InvalidArgument,
            mcpts_result::InvalidConfig,
            mcpts_result::Closed,
            mcpts_result::Journal,
            mcpts_result::NotFound,
            mcpts_result::InvalidTransition,
            mcpts_result::AlreadyTerminal,
            mcpts_result::NoResult,
            mcpts_result::InvalidCursor,
            mcpts_result::LimitExceeded,
            mcpts_result::InputKeyReused,
            mcpts_result::UnknownInputKey,
            mcpts_result::Timeout,
        ];
        ALL.into_iter().find(|&r| r as u32 == code)
    }
}

/// A failure on its way to C: a code and the message that becomes the last error.
#[derive(Debug)]
pub(crate) struct Error {
    code: mcpts_result,
    message: String,
}

impl Error {
    pub(crate) fn new(code: mcpts_result, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn null(arg: &str) -> Error {
        Error::new(
            mcpts_result::NullParameter,
            format!("argument '{arg}' is NULL"),
        )
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(mcpts_result::InvalidArgument, message)
    }

    /// A JSON parse failure: syntax errors are `InvalidJson`, well-formed JSON of the wrong
    /// shape gets `shape_code`.
    fn json(what: &str, err: serde_json::Error, shape_code: mcpts_result) -> Error {
        use serde_json::error::Category;
        let code = match err.classify() {
            // serde_json calls nesting past its limit (128 levels) a syntax error, and stops
            // reading there: the text may well be well-formed, and is refused for its shape.
            Category::Syntax if err.to_string().starts_with("recursion limit exceeded") => {
                shape_code
            }
            Category::Syntax | Category::Eof | Category::Io => mcpts_result::InvalidJson,
            Category::Data => shape_code,
        };
        Error::new(code, format!("invalid {what}: {err}"))
    }
}

/// Parses a JSON object into `T`, in one pass when it is well-formed. Syntax errors give
/// `InvalidJson`; anything but an object (serde would otherwise accept an array for a
/// struct), or an object of the wrong shape (a field given twice included), gives
/// `shape_code`.
pub(crate) fn parse_object<T: serde::de::DeserializeOwned>(
    json: &[u8],
    what: &str,
    shape_code: mcpts_result,
) -> Result<T, Error> {
    // Syntax first, on the error paths only: a wrong shape may stop the typed read before
    // the text's syntax error, which must still read as `InvalidJson`.
    let well_formed = || {
        serde_json::from_slice::<serde::de::IgnoredAny>(json)
            .map_err(|e| Error::json(what, e, shape_code))
    };
    let first = json.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        well_formed()?;
        return Err(Error::new(
            shape_code,
            format!("invalid {what}: expected a JSON object"),
        ));
    }
    // Typed from the text (a `Value` would keep only the last of two equal names, so a
    // field given twice would be taken silently instead of refused).
    serde_json::from_slice(json).map_err(|e| {
        if let Err(syntax) = well_formed() {
            return syntax;
        }
        Error::json(what, e, shape_code)
    })
}

/// The one mapping from store errors to C result codes.
impl From<StoreError> for Error {
    fn from(err: StoreError) -> Error {
        let code = match &err {
            StoreError::NotFound => mcpts_result::NotFound,
            StoreError::InvalidTransition { .. } => mcpts_result::InvalidTransition,
            StoreError::AlreadyTerminal(_) => mcpts_result::AlreadyTerminal,
            StoreError::NoResult { .. } => mcpts_result::NoResult,
            StoreError::InvalidCursor => mcpts_result::InvalidCursor,
            StoreError::LimitExceeded { .. } => mcpts_result::LimitExceeded,
            StoreError::InputKeyReused { .. } => mcpts_result::InputKeyReused,
            StoreError::UnknownInputKey { .. } => mcpts_result::UnknownInputKey,
            StoreError::InvalidArgument(_) => mcpts_result::InvalidArgument,
            // The C ABI has no stoppable wait, so this never reaches C; a stopped wait is
            // closest to one that timed out.
            StoreError::Timeout | StoreError::Stopped => mcpts_result::Timeout,
            StoreError::InvalidConfig { .. } => mcpts_result::InvalidConfig,
            StoreError::Closed => mcpts_result::Closed,
            StoreError::Journal(_) => mcpts_result::Journal,
        };
        Error::new(code, err.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn set_last_error(message: Option<String>) {
    // A message never holds NUL in practice; strip any rather than lose the message.
    let message = message.map(|m| CString::new(m.replace('\0', "")).unwrap_or_default());
    // `try_with` fails only while the thread is being torn down; nothing to record then.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = message);
}

/// Turns a fallible body's outcome (or its panic) into the code C sees, recording the
/// calling thread's last error.
pub(crate) fn finish(outcome: std::thread::Result<Result<(), Error>>) -> mcpts_result {
    match outcome {
        Ok(Ok(())) => {
            set_last_error(None);
            mcpts_result::Ok
        }
        Ok(Err(err)) => {
            set_last_error(Some(err.message));
            err.code
        }
        Err(payload) => {
            set_last_error(Some(format!(
                "panic inside mcp-task-store: {}",
                panic_text(&*payload)
            )));
            mcpts_result::Panic
        }
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "(no message)"
    }
}

/// Copies the calling thread's last error message into `buf` and returns the message's full
/// length in bytes, without the NUL (0 when the last call succeeded or none was made).
///
/// The copy works like `snprintf`: at most `buf_len - 1` bytes of UTF-8 text followed by a
/// NUL; if the return value is `>= buf_len`, the text was truncated (possibly inside a
/// UTF-8 sequence). Pass `buf = NULL, buf_len = 0` to learn the length only. Nothing is
/// written when `buf` is NULL or `buf_len` is 0; otherwise `buf` always ends up holding a
/// C string (the empty one when this returns 0).
///
/// The last error is set by every function that returns an [`mcpts_result`]: cleared on
/// `MCPTS_RESULT_OK`, replaced on failure. This function does not change it. The one
/// exception: while a thread is being torn down (a call from a thread-exit hook, or from
/// an `atexit` handler on the main thread), its slot may be gone, and a failure there
/// leaves no message (this function then returns 0). Calls from such hooks are best
/// effort: late in the teardown (a pthread key's destructor, say), a call that needs the
/// Rust runtime's per-thread state, already gone, fails with `MCPTS_RESULT_PANIC`.
///
/// Thread safety: reads only the calling thread's slot; call it from any thread.
///
/// # Safety
///
/// `buf` must be NULL or valid for writes of `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcpts_last_error(buf: *mut c_char, buf_len: usize) -> usize {
    // The empty string first, so that the buffer holds a C string whatever happens next
    // (no message, a slot already torn down, a panic).
    if !buf.is_null() && buf_len > 0 {
        // SAFETY: the caller guarantees `buf` holds `buf_len` > 0 bytes.
        unsafe { *buf = 0 };
    }
    ffi_boundary!(default = 0; {
        LAST_ERROR
            .try_with(|slot| {
                let slot = slot.borrow();
                let Some(message) = slot.as_ref() else {
                    return 0;
                };
                let bytes = message.as_bytes();
                if !buf.is_null() && buf_len > 0 {
                    let n = bytes.len().min(buf_len - 1);
                    // SAFETY: `n + 1 <= buf_len`, which the caller guarantees is writable;
                    // the source is a live Rust string that cannot overlap a C buffer.
                    unsafe {
                        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, n);
                        *buf.add(n) = 0;
                    }
                }
                bytes.len()
            })
            .unwrap_or(0)
    })
}

/// The name of a result code as a static NUL-terminated string, e.g.
/// `"MCPTS_RESULT_NOT_FOUND"`; `"MCPTS_RESULT_UNKNOWN"` for a value this library does not
/// define. Never NULL; the caller must not free it.
///
/// Thread safety: pure; call it from any thread.
#[no_mangle]
pub extern "C" fn mcpts_result_name(code: u32) -> *const c_char {
    ffi_boundary!(default = c"MCPTS_RESULT_UNKNOWN".as_ptr(); {
        mcpts_result::from_u32(code)
            .map_or(c"MCPTS_RESULT_UNKNOWN", mcpts_result::name)
            .as_ptr()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        let mut buf = [0 as c_char; 128];
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { mcpts_last_error(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated by `mcpts_last_error`.
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(n, text.to_bytes().len());
        text.to_string_lossy().into_owned()
    }

    #[test]
    fn boundary_turns_panics_and_errors_into_codes() {
        let panicking = || ffi_boundary!(fallible { panic!("boom") });
        assert_eq!(panicking(), mcpts_result::Panic);
        assert_eq!(last_error(), "panic inside mcp-task-store: boom");

        let failing = || ffi_boundary!(fallible { Err(StoreError::Timeout.into()) });
        assert_eq!(failing(), mcpts_result::Timeout);
        assert_eq!(last_error(), "timed out waiting on the task");

        let fine = || ffi_boundary!(fallible { Ok(()) });
        assert_eq!(fine(), mcpts_result::Ok);
        assert_eq!(last_error(), "");

        let defaulted = || ffi_boundary!(default = 7usize; { panic!("quiet") });
        assert_eq!(defaulted(), 7);
    }

    #[test]
    fn names_cover_every_code() {
        for code in 0..200 {
            let name = mcpts_result_name(code);
            // SAFETY: always a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap();
            match mcpts_result::from_u32(code) {
                Some(result) => {
                    assert_eq!(result as u32, code);
                    assert_ne!(name, "MCPTS_RESULT_UNKNOWN");
                }
                None => assert_eq!(name, "MCPTS_RESULT_UNKNOWN"),
            }
        }
    }
}
