//! Checked reading of C arguments and writing of out-parameters.
//!
//! Every entry point takes its arguments in two steps. First it checks each pointer for NULL
//! without reading what it points to ([`arg_ref`], [`arg_str`], [`opt_str`], [`arg_bytes`],
//! [`Out::new`]); only then does it read the contents ([`StrArg::text`],
//! [`StrArg::task_id`], [`opt_text`], [`opt_session`], [`BytesArg::bytes`], JSON parsing).
//! So a NULL is always reported as `NullParameter`, whatever else is wrong with the call:
//! a bad task id, a string that is not UTF-8 or a length no buffer has never hides it.

use std::ffi::{c_char, CStr};

use super::error::{mcpts_result, Error};
use crate::{SessionId, TaskId};

/// A required pointer as a reference; `NullParameter` when NULL.
///
/// # Safety
///
/// `ptr` must be NULL or point to a live `T` for `'a`.
pub(crate) unsafe fn arg_ref<'a, T>(ptr: *const T, name: &str) -> Result<&'a T, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { ptr.as_ref() }.ok_or_else(|| Error::null(name))
}

/// A C string argument that is known not to be NULL but has not been read yet.
#[derive(Clone, Copy)]
pub(crate) struct StrArg<'a> {
    text: &'a CStr,
    name: &'static str,
}

impl<'a> StrArg<'a> {
    /// The string as UTF-8; `InvalidArgument` naming the argument otherwise.
    pub(crate) fn text(self) -> Result<&'a str, Error> {
        self.text
            .to_str()
            .map_err(|e| Error::invalid(format!("argument '{}' is not UTF-8: {e}", self.name)))
    }

    /// The string as a task id. Text that is not a UUID can never name a task: `NotFound`.
    pub(crate) fn task_id(self) -> Result<TaskId, Error> {
        let text = self.text()?;
        TaskId::parse(text).ok_or_else(|| {
            Error::new(
                mcpts_result::NotFound,
                format!("task not found (task id '{text}' is not a UUID)"),
            )
        })
    }
}

/// A required NUL-terminated string, checked for NULL only.
///
/// # Safety
///
/// `ptr` must be NULL or a NUL-terminated string live for `'a`.
pub(crate) unsafe fn arg_str<'a>(
    ptr: *const c_char,
    name: &'static str,
) -> Result<StrArg<'a>, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { opt_str(ptr, name) }.ok_or_else(|| Error::null(name))
}

/// An optional NUL-terminated string: NULL is `None`.
///
/// # Safety
///
/// `ptr` must be NULL or a NUL-terminated string live for `'a`.
pub(crate) unsafe fn opt_str<'a>(ptr: *const c_char, name: &'static str) -> Option<StrArg<'a>> {
    // SAFETY: non-NULL and NUL-terminated, per the caller.
    (!ptr.is_null()).then(|| StrArg {
        text: unsafe { CStr::from_ptr(ptr) },
        name,
    })
}

/// An optional string's text: `None` stays `None`, anything else must be UTF-8.
pub(crate) fn opt_text(arg: Option<StrArg<'_>>) -> Result<Option<&str>, Error> {
    arg.map(StrArg::text).transpose()
}

/// An optional session: NULL means sessionless.
pub(crate) fn opt_session(arg: Option<StrArg<'_>>) -> Result<Option<SessionId>, Error> {
    Ok(opt_text(arg)?.map(SessionId::from))
}

/// A byte buffer argument that is known not to be NULL but whose length has not been
/// checked yet.
#[derive(Clone, Copy)]
pub(crate) struct BytesArg<'a> {
    /// `None` when the length is no buffer's.
    bytes: Option<&'a [u8]>,
    len: usize,
    name: &'static str,
}

impl<'a> BytesArg<'a> {
    /// The buffer; `InvalidArgument` naming the argument when its length is no buffer's.
    pub(crate) fn bytes(self) -> Result<&'a [u8], Error> {
        self.bytes.ok_or_else(|| {
            Error::invalid(format!(
                "argument '{}': a length of {} bytes is not a buffer's",
                self.name, self.len
            ))
        })
    }
}

/// A required byte buffer (`ptr`, `len`), checked for NULL only; NULL is refused even when
/// `len` is 0.
///
/// # Safety
///
/// `ptr` must be NULL or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn arg_bytes<'a>(
    ptr: *const u8,
    len: usize,
    name: &'static str,
) -> Result<BytesArg<'a>, Error> {
    if ptr.is_null() {
        return Err(Error::null(name));
    }
    // No buffer is that long (`(size_t)-1` is a common C error value): a slice past
    // `isize::MAX` bytes is undefined behaviour, and a debug build aborts on it.
    let bytes = (len <= isize::MAX as usize).then(|| {
        // SAFETY: non-NULL, at most `isize::MAX` bytes, and readable for `len` bytes, per
        // the caller.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    });
    Ok(BytesArg { bytes, len, name })
}

/// A checked out-parameter: validated up front, written only once the call has succeeded.
pub(crate) struct Out<T>(*mut *mut T);

impl<T> Out<T> {
    /// Checks `ptr` for NULL without writing through it.
    pub(crate) fn new(ptr: *mut *mut T, name: &str) -> Result<Out<T>, Error> {
        if ptr.is_null() {
            return Err(Error::null(name));
        }
        Ok(Out(ptr))
    }

    /// Hands `value` to C.
    ///
    /// # Safety
    ///
    /// The pointer given to [`Out::new`] must be valid for a write.
    pub(crate) unsafe fn write(self, value: Box<T>) {
        // SAFETY: forwarded from the caller.
        unsafe { self.write_optional(Some(value)) };
    }

    /// Hands `value` to C, or NULL for "no output".
    ///
    /// # Safety
    ///
    /// The pointer given to [`Out::new`] must be valid for a write.
    pub(crate) unsafe fn write_optional(self, value: Option<Box<T>>) {
        let raw = value.map_or(std::ptr::null_mut(), Box::into_raw);
        // SAFETY: non-NULL (checked in `new`) and writable, per the caller.
        unsafe { self.0.write(raw) };
    }
}
