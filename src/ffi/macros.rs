//! The panic boundary every `extern "C"` body runs inside.

/// Runs an entry point's body inside `catch_unwind`, so no panic ever unwinds into C.
///
/// - `ffi_boundary!(fallible { ... })`: the body returns `Result<(), ffi::error::Error>`
///   (so `?` works); the expansion returns an `mcpts_result` and records the calling
///   thread's last error (cleared on success, set on failure or panic).
/// - `ffi_boundary!(default = VALUE; { ... })`: for functions that return no code (frees,
///   accessors); a panic returns `VALUE` and leaves the last error alone.
macro_rules! ffi_boundary {
    (fallible $body:block) => {
        $crate::ffi::error::finish(::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
            || -> ::std::result::Result<(), $crate::ffi::error::Error> { $body },
        )))
    };
    (default = $default:expr; $body:block) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| $body)) {
            ::std::result::Result::Ok(value) => value,
            ::std::result::Result::Err(_) => $default,
        }
    };
}
