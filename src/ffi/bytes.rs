//! `mcpts_bytes`: a Rust-owned JSON output buffer, released by `mcpts_bytes_free`.

use std::ffi::c_char;

/// A JSON document returned by the library (opaque). The text is UTF-8 and followed by a NUL
/// that [`mcpts_bytes_len`] does not count, so [`mcpts_bytes_data`] can be used as a C
/// string. Release it with [`mcpts_bytes_free`]; it is not tied to the store or handle that
/// produced it.
#[derive(Debug)]
pub struct mcpts_bytes {
    /// The text followed by one NUL byte.
    text: Box<[u8]>,
}

impl mcpts_bytes {
    /// Serialises `value` into a new buffer, ready to hand to C.
    pub(crate) fn json(
        value: &impl serde::Serialize,
    ) -> Result<Box<mcpts_bytes>, super::error::Error> {
        let mut text = serde_json::to_vec(value).map_err(|e| {
            super::error::Error::invalid(format!("cannot serialise the output: {e}"))
        })?;
        // serde_json escapes NUL inside strings, so the text itself never contains one.
        text.push(0);
        Ok(Box::new(mcpts_bytes {
            text: text.into_boxed_slice(),
        }))
    }
}

/// The bytes of the document: `mcpts_bytes_len(bytes)` bytes of UTF-8 JSON followed by a
/// NUL. NULL when `bytes` is NULL. Valid until `bytes` is freed.
///
/// Thread safety: read-only; a buffer may be read from any thread.
///
/// # Safety
///
/// `bytes` must be NULL or a live pointer returned by this library.
#[no_mangle]
pub unsafe extern "C" fn mcpts_bytes_data(bytes: *const mcpts_bytes) -> *const c_char {
    ffi_boundary!(default = std::ptr::null(); {
        // SAFETY: NULL or a live `mcpts_bytes`, per the contract above.
        match unsafe { bytes.as_ref() } {
            Some(bytes) => bytes.text.as_ptr().cast::<c_char>(),
            None => std::ptr::null(),
        }
    })
}

/// The length of the document in bytes, without the trailing NUL; 0 when `bytes` is NULL.
///
/// Thread safety: read-only; a buffer may be read from any thread.
///
/// # Safety
///
/// `bytes` must be NULL or a live pointer returned by this library.
#[no_mangle]
pub unsafe extern "C" fn mcpts_bytes_len(bytes: *const mcpts_bytes) -> usize {
    ffi_boundary!(default = 0; {
        // SAFETY: NULL or a live `mcpts_bytes`, per the contract above.
        unsafe { bytes.as_ref() }.map_or(0, |bytes| bytes.text.len() - 1)
    })
}

/// Releases a buffer returned by this library. NULL is a no-op.
///
/// Thread safety: any thread, but no other thread may be reading the buffer.
///
/// # Safety
///
/// `bytes` must be NULL or a live pointer returned by this library, freed at most once.
#[no_mangle]
pub unsafe extern "C" fn mcpts_bytes_free(bytes: *mut mcpts_bytes) {
    ffi_boundary!(default = (); {
        if !bytes.is_null() {
            // SAFETY: the pointer came from `Box::into_raw` in this library and is freed once.
            drop(unsafe { Box::from_raw(bytes) });
        }
    })
}
