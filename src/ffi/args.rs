//! Checked reading of C arguments and writing of out-parameters.

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

/// A required NUL-terminated UTF-8 string.
///
/// # Safety
///
/// `ptr` must be NULL or a NUL-terminated string live for `'a`.
pub(crate) unsafe fn arg_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str, Error> {
    // SAFETY: forwarded from the caller.
    unsafe { opt_str(ptr, name) }?.ok_or_else(|| Error::null(name))
}

/// An optional NUL-terminated UTF-8 string: NULL is `None`.
///
/// # Safety
///
/// `ptr` must be NULL or a NUL-terminated string live for `'a`.
pub(crate) unsafe fn opt_str<'a>(ptr: *const c_char, name: &str) -> Result<Option<&'a str>, Error> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL and NUL-terminated, per the caller.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str()
        .map(Some)
        .map_err(|e| Error::invalid(format!("argument '{name}' is not UTF-8: {e}")))
}

/// A required byte buffer (`ptr`, `len`); NULL is refused even when `len` is 0.
///
/// # Safety
///
/// `ptr` must be NULL or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn arg_bytes<'a>(
    ptr: *const u8,
    len: usize,
    name: &str,
) -> Result<&'a [u8], Error> {
    if ptr.is_null() {
        return Err(Error::null(name));
    }
    // SAFETY: non-NULL and readable for `len` bytes, per the caller.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A task id argument. Text that is not a UUID can never name a task: `NotFound`.
///
/// # Safety
///
/// As [`arg_str`].
pub(crate) unsafe fn arg_task_id(ptr: *const c_char) -> Result<TaskId, Error> {
    // SAFETY: forwarded from the caller.
    let text = unsafe { arg_str(ptr, "task_id") }?;
    TaskId::parse(text).ok_or_else(|| {
        Error::new(
            mcpts_result::NotFound,
            format!("task not found (task id '{text}' is not a UUID)"),
        )
    })
}

/// An optional session: NULL means sessionless.
///
/// # Safety
///
/// As [`opt_str`].
pub(crate) unsafe fn opt_session(ptr: *const c_char) -> Result<Option<SessionId>, Error> {
    // SAFETY: forwarded from the caller.
    Ok(unsafe { opt_str(ptr, "session") }?.map(SessionId::from))
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
