//! Drives the C ABI from outside Rust: builds the C library (`cdylib`), then runs the C
//! program `tests/c/smoke.c` (plainly and under valgrind), the README's C example, and the
//! Python ctypes programs `tests/python/ffi_threads.py` and `tests/python/ffi_fork.py`.
//! gcc, valgrind and python3 are required: a missing tool fails the test, it never skips.
#![cfg(feature = "ffi")]

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::ptr;
use std::sync::OnceLock;

use mcp_task_store::ffi::*;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cmd`, failing loudly with its output unless it exits 0.
fn run(what: &str, cmd: &mut Command) -> Output {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?} (is it installed?): {e}"));
    let text = format!(
        "{what}: {cmd:?} exited with {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    output
}

/// The C library, built once per test run. It gets its own target directory: the outer
/// cargo may hold the lock on ours while tests run.
fn library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ffi-lib");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        run(
            "build the C library",
            Command::new(cargo)
                .current_dir(manifest_dir())
                .args(["rustc", "--quiet", "--lib", "--features", "ffi"])
                .args(["--crate-type", "cdylib"])
                .env("CARGO_TARGET_DIR", &target_dir),
        );
        let name = format!(
            "{}mcp_task_store{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        );
        let library = target_dir.join("debug").join(name);
        assert!(library.is_file(), "{} was not built", library.display());
        library
    })
}

/// `tests/c/smoke.c` compiled with gcc against the committed header and the library.
fn smoke_binary() -> &'static Path {
    static SMOKE: OnceLock<PathBuf> = OnceLock::new();
    SMOKE.get_or_init(|| {
        let library = library();
        let lib_dir = library.parent().unwrap();
        let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ffi-smoke");
        run(
            "compile tests/c/smoke.c",
            Command::new("gcc")
                .current_dir(manifest_dir())
                .args(["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-g", "-O0"])
                .args([
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-Iinclude",
                    "tests/c/smoke.c",
                ])
                .arg("-L")
                .arg(lib_dir)
                .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
                .args(["-lmcp_task_store", "-lpthread", "-o"])
                .arg(&binary),
        );
        binary
    })
}

#[test]
fn c_smoke() {
    let output = run("tests/c/smoke.c", &mut Command::new(smoke_binary()));
    assert!(String::from_utf8_lossy(&output.stdout).contains("all checks passed"));
}

#[test]
fn c_smoke_under_valgrind() {
    let output = run(
        "tests/c/smoke.c under valgrind",
        Command::new("valgrind")
            .args(["--error-exitcode=1", "--leak-check=full"])
            .args(["--errors-for-leak-kinds=definite", "--quiet"])
            .arg(smoke_binary()),
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("all checks passed"));
}

/// The README's C example (its one `c` block), compiled and run as written, so it cannot
/// drift from the header.
#[test]
fn readme_c_example() {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    let (_, rest) = readme
        .split_once("\n```c\n")
        .expect("a ```c block in the README");
    let (source, _) = rest
        .split_once("\n```\n")
        .expect("the end of the ```c block");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (file, binary) = (dir.join("readme_example.c"), dir.join("readme-example"));
    std::fs::write(&file, format!("{source}\n")).unwrap();
    let lib_dir = library().parent().unwrap();
    run(
        "compile the README's C example",
        Command::new("gcc")
            .current_dir(manifest_dir())
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-Iinclude"])
            .arg(&file)
            .arg("-L")
            .arg(lib_dir)
            .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
            .args(["-lmcp_task_store", "-o"])
            .arg(&binary),
    );
    let output = run("the README's C example", &mut Command::new(&binary));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(r#""status":"completed""#), "{stdout}");
    assert!(stdout.contains(r#""text":"done""#), "{stdout}");
}

#[test]
fn python_ctypes_threads() {
    let output = run(
        "tests/python/ffi_threads.py",
        Command::new("python3")
            .current_dir(manifest_dir())
            .arg("tests/python/ffi_threads.py")
            .arg(library()),
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("ffi_threads.py: ok"));
}

/// A child forked from a process holding a store gets `CLOSED` at once from every call, and
/// freeing there returns (the child's calls are bounded by an alarm, so a hang fails).
#[test]
fn python_ctypes_fork() {
    let output = run(
        "tests/python/ffi_fork.py",
        Command::new("python3")
            .current_dir(manifest_dir())
            .arg("tests/python/ffi_fork.py")
            .arg(library()),
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("ffi_fork.py: ok"));
}

fn last_error() -> String {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: `buf` is writable for its length.
    unsafe { mcpts_last_error(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: the library NUL-terminates what it writes.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The same entry points called straight from Rust: NULLs, clone and free, error text.
#[test]
fn entry_points_from_rust() {
    // SAFETY (whole test): every pointer passed is NULL, a live local, or one the library
    // returned and that is freed exactly once.
    unsafe {
        let mut store: *mut mcpts_store = ptr::null_mut();
        let config = br#"{"page_size": 1}"#;
        assert_eq!(
            mcpts_store_new(ptr::null(), 0, &mut store),
            mcpts_result::NullParameter
        );
        assert_eq!(last_error(), "argument 'config_json' is NULL");
        // Lengths count the JSON text only: a NUL counted in is malformed JSON.
        assert_eq!(
            mcpts_store_new(c"{}".to_bytes_with_nul().as_ptr(), 3, &mut store),
            mcpts_result::InvalidJson
        );
        assert_eq!(
            mcpts_store_new(config.as_ptr(), config.len(), &mut store),
            mcpts_result::Ok
        );
        assert_eq!(last_error(), "");

        let mut handle: *mut mcpts_handle = ptr::null_mut();
        let mut twin: *mut mcpts_handle = ptr::null_mut();
        assert_eq!(mcpts_store_handle(store, &mut handle), mcpts_result::Ok);
        assert_eq!(mcpts_handle_clone(handle, &mut twin), mcpts_result::Ok);

        let mut task: *mut mcpts_bytes = ptr::null_mut();
        let req = br#"{"session": "s"}"#;
        assert_eq!(
            mcpts_handle_create(twin, req.as_ptr(), req.len(), &mut task),
            mcpts_result::Ok
        );
        let json: serde_json::Value = serde_json::from_slice(std::slice::from_raw_parts(
            mcpts_bytes_data(task).cast::<u8>(),
            mcpts_bytes_len(task),
        ))
        .unwrap();
        mcpts_bytes_free(task);
        assert_eq!(json["status"], "working");
        let id = std::ffi::CString::new(json["taskId"].as_str().unwrap()).unwrap();

        let mut out: *mut mcpts_bytes = ptr::null_mut();
        assert_eq!(
            mcpts_handle_get(handle, id.as_ptr(), ptr::null(), &mut out),
            mcpts_result::NotFound
        );
        assert_eq!(last_error(), "task not found");
        assert!(out.is_null());
        assert_eq!(
            mcpts_handle_get(handle, id.as_ptr(), c"s".as_ptr(), &mut out),
            mcpts_result::Ok
        );
        mcpts_bytes_free(out);

        let with_nul = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tasks/list\"}\0";
        assert_eq!(
            mcpts_handle_dispatch(
                handle,
                with_nul.as_ptr(),
                with_nul.len(),
                ptr::null(),
                &mut out
            ),
            mcpts_result::Ok
        );
        assert_eq!(take_json(out)["error"]["code"], -32700);

        mcpts_handle_free(twin);
        mcpts_store_free(store);
        assert_eq!(
            mcpts_handle_list(handle, c"s".as_ptr(), ptr::null(), &mut out),
            mcpts_result::Closed
        );
        assert_eq!(last_error(), "the task store is closed");
        // Calls that never reach the owner thread see the freed store too.
        out = ptr::null_mut();
        let mut clone: *mut mcpts_handle = ptr::null_mut();
        assert_eq!(mcpts_handle_clone(handle, &mut clone), mcpts_result::Closed);
        assert!(clone.is_null());
        for request in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/list"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "{oops",
        ] {
            assert_eq!(
                mcpts_handle_dispatch(
                    handle,
                    request.as_ptr(),
                    request.len(),
                    ptr::null(),
                    &mut out
                ),
                mcpts_result::Closed,
                "{request}"
            );
            assert_eq!(last_error(), "the task store is closed");
            assert!(out.is_null());
        }
        mcpts_handle_free(handle);

        let name = CStr::from_ptr(mcpts_result_name(mcpts_result::Closed as u32));
        assert_eq!(name.to_str().unwrap(), "MCPTS_RESULT_CLOSED");
    }
}

/// A store with one handle, freed (handle first) when dropped.
struct Fixture {
    store: *mut mcpts_store,
    handle: *mut mcpts_handle,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with_config("{}")
    }

    fn with_config(config: &str) -> Fixture {
        let mut store: *mut mcpts_store = ptr::null_mut();
        let mut handle: *mut mcpts_handle = ptr::null_mut();
        // SAFETY: the config is a live buffer; the out-params are live locals.
        unsafe {
            let code = mcpts_store_new(config.as_ptr(), config.len(), &mut store);
            assert_eq!(code, mcpts_result::Ok, "{config}: {}", last_error());
            assert_eq!(mcpts_store_handle(store, &mut handle), mcpts_result::Ok);
        }
        Fixture { store, handle }
    }

    /// Creates a sessionless task and returns its id.
    fn create(&self) -> std::ffi::CString {
        let mut task: *mut mcpts_bytes = ptr::null_mut();
        // SAFETY: the handle is live; the request is a live buffer; `task` is freed once.
        let json = unsafe {
            assert_eq!(
                mcpts_handle_create(self.handle, b"{}".as_ptr(), 2, &mut task),
                mcpts_result::Ok
            );
            take_json(task)
        };
        std::ffi::CString::new(json["taskId"].as_str().unwrap()).unwrap()
    }

    /// A second handle of the fixture's store, which the caller frees once
    /// (`mcpts_handle_free`); it outlives the fixture, and sees the store closed then.
    fn twin(&self) -> *mut mcpts_handle {
        let mut twin: *mut mcpts_handle = ptr::null_mut();
        // SAFETY: the fixture's handle is live; `twin` is a live local.
        let code = unsafe { mcpts_handle_clone(self.handle, &mut twin) };
        assert_eq!(code, mcpts_result::Ok);
        twin
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SAFETY: both came from the library and are freed once, here.
        unsafe {
            mcpts_handle_free(self.handle);
            mcpts_store_free(self.store);
        }
    }
}

/// Parses and frees a JSON output.
///
/// # Safety
///
/// `bytes` must be a live buffer from the library; it is freed here.
unsafe fn take_json(bytes: *mut mcpts_bytes) -> serde_json::Value {
    // SAFETY: per this function's contract.
    unsafe {
        let text = std::slice::from_raw_parts(
            mcpts_bytes_data(bytes).cast::<u8>(),
            mcpts_bytes_len(bytes),
        );
        let json = serde_json::from_slice(text).unwrap();
        mcpts_bytes_free(bytes);
        json
    }
}

/// A store configured with a journal keeps its tasks, results included, across
/// `mcpts_store_free` and a new `mcpts_store_new` on the same directory; while one store
/// uses the directory, another is refused with `JOURNAL`.
#[test]
fn a_journal_keeps_tasks_across_stores() {
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({
        "journal": {"dir": dir.path(), "durability": "flush", "recovery": "keep"},
    })
    .to_string();
    let first = Fixture::with_config(&config);
    let done = first.create();
    let running = first.create();
    let outcome = br#"{"result": {"content": [], "structuredContent": {"n": 7}}}"#;
    let mut out: *mut mcpts_bytes = ptr::null_mut();
    // SAFETY (whole test): the handles are live, the ids and JSON are live buffers, and
    // every output is freed once.
    unsafe {
        let code = mcpts_handle_store_result(
            first.handle,
            done.as_ptr(),
            ptr::null(),
            outcome.as_ptr(),
            outcome.len(),
            &mut out,
        );
        assert_eq!(code, mcpts_result::Ok, "{}", last_error());
        take_json(out);

        let mut other: *mut mcpts_store = ptr::null_mut();
        let code = mcpts_store_new(config.as_ptr(), config.len(), &mut other);
        assert_eq!(code, mcpts_result::Journal);
        assert!(last_error().contains("in use"), "{}", last_error());
        assert!(other.is_null());
        drop(first);

        let second = Fixture::with_config(&config);
        let code = mcpts_handle_get_result(second.handle, done.as_ptr(), ptr::null(), &mut out);
        assert_eq!(code, mcpts_result::Ok, "{}", last_error());
        let result = take_json(out);
        assert_eq!(result["result"]["structuredContent"]["n"], 7, "{result}");
        let code = mcpts_handle_get(second.handle, running.as_ptr(), ptr::null(), &mut out);
        assert_eq!(code, mcpts_result::Ok, "{}", last_error());
        let task = take_json(out);
        assert_eq!(task["status"], "working", "kept as it was: {task}");
    }
}

/// Journal settings that cannot work are refused before anything is opened.
#[test]
fn a_journal_configuration_is_checked() {
    let refused = [
        (r#"{"journal": {"dir": ""}}"#, "journal.dir"),
        (r#"{"journal": {}}"#, "missing field `dir`"),
        (
            r#"{"journal": {"dir": "x", "durability": "sometimes"}}"#,
            "sometimes",
        ),
        (
            r#"{"journal": {"dir": "x", "recovery": "resume"}}"#,
            "resume",
        ),
        (
            r#"{"journal": {"dir": "x", "fsync": true}}"#,
            "unknown field `fsync`",
        ),
        (r#"{"journal": "x"}"#, "expected a journal object"),
        // No path holds a NUL: the directory can never be opened, whatever is on disk.
        (r#"{"journal": {"dir": "tasks\u0000x"}}"#, "journal.dir"),
    ];
    for (config, needle) in refused {
        let mut store: *mut mcpts_store = ptr::null_mut();
        // SAFETY: the config is a live buffer; the out-param is a live local.
        let code = unsafe { mcpts_store_new(config.as_ptr(), config.len(), &mut store) };
        assert_eq!(code, mcpts_result::InvalidConfig, "{config}");
        assert!(last_error().contains(needle), "{config}: {}", last_error());
        assert!(store.is_null());
    }
}

/// A NULL is reported as `NULL_PARAMETER` even when other arguments are wrong too: the
/// pointers are checked before any argument is read.
#[test]
fn null_wins_over_bad_contents() {
    let f = Fixture::new();
    let h = f.handle;
    let id = f.create();
    let id = id.as_ptr();
    let (bad_utf8, bogus, nope) = (c"\xff".as_ptr(), c"bogus".as_ptr(), c"nope".as_ptr());
    let no_str = ptr::null();
    let no_out: *mut *mut mcpts_bytes = ptr::null_mut();
    let mut out: *mut mcpts_bytes = ptr::null_mut();
    let out_ptr: *mut *mut mcpts_bytes = &mut out;
    let not_json = b"{".as_ptr();
    type Call = Box<dyn Fn() -> mcpts_result>;
    // SAFETY (every call): each pointer is NULL, a live local, or the fixture's handle.
    let cases: Vec<(&str, Call)> = vec![
        (
            "task_out",
            Box::new(move || unsafe { mcpts_handle_get(h, nope, no_str, no_out) }),
        ),
        (
            "task_out",
            Box::new(move || unsafe { mcpts_handle_get(h, id, bad_utf8, no_out) }),
        ),
        (
            "task_out",
            Box::new(move || unsafe {
                mcpts_handle_update_status(h, id, no_str, bogus, no_str, no_out)
            }),
        ),
        (
            "status",
            Box::new(move || unsafe {
                mcpts_handle_update_status(h, nope, bad_utf8, no_str, bad_utf8, out_ptr)
            }),
        ),
        (
            "task_out",
            Box::new(move || unsafe {
                mcpts_handle_store_result(h, nope, no_str, not_json, 1, no_out)
            }),
        ),
        (
            "result_out",
            Box::new(move || unsafe { mcpts_handle_get_result(h, nope, bad_utf8, no_out) }),
        ),
        (
            "page_out",
            Box::new(move || unsafe { mcpts_handle_list(h, bad_utf8, bogus, no_out) }),
        ),
        (
            "outcome_out",
            Box::new(move || unsafe { mcpts_handle_cancel(h, nope, no_str, bad_utf8, no_out) }),
        ),
        (
            "task_out",
            Box::new(move || unsafe { mcpts_handle_wait(h, nope, no_str, 0, no_out) }),
        ),
        (
            "task_out",
            Box::new(move || unsafe {
                mcpts_handle_set_input_requests(h, nope, no_str, not_json, 1, no_out)
            }),
        ),
        (
            "task_out",
            Box::new(move || unsafe {
                mcpts_handle_resolve_input(h, nope, no_str, not_json, 1, no_out)
            }),
        ),
        (
            "key",
            Box::new(move || unsafe {
                mcpts_handle_wait_input(h, nope, bad_utf8, no_str, 0, out_ptr)
            }),
        ),
        (
            "answer_out",
            Box::new(move || unsafe {
                mcpts_handle_wait_input(h, nope, no_str, bad_utf8, 0, no_out)
            }),
        ),
        (
            "response_out",
            Box::new(move || unsafe {
                mcpts_handle_dispatch(h, b"\xff".as_ptr(), 1, bad_utf8, no_out)
            }),
        ),
    ];
    for (i, (arg, call)) in cases.iter().enumerate() {
        assert_eq!(call(), mcpts_result::NullParameter, "case {i} ({arg})");
        assert_eq!(
            last_error(),
            format!("argument '{arg}' is NULL"),
            "case {i}"
        );
    }
    assert!(out.is_null());
}

/// `mcpts_handle_store_result` takes only outcomes `tasks/result` may answer: a result
/// object, or a JSON-RPC error object. Anything else leaves the task running.
#[test]
fn store_result_refuses_outcomes_mcp_does_not_allow() {
    let f = Fixture::new();
    let id = f.create();
    let store = |outcome: &str| {
        let mut out: *mut mcpts_bytes = ptr::null_mut();
        // SAFETY: the handle is live, the id and outcome are live buffers; `out` is freed.
        let code = unsafe {
            mcpts_handle_store_result(
                f.handle,
                id.as_ptr(),
                ptr::null(),
                outcome.as_ptr(),
                outcome.len(),
                &mut out,
            )
        };
        if code == mcpts_result::Ok {
            // SAFETY: written on success, freed once.
            unsafe { take_json(out) };
        }
        code
    };
    let refused = [
        (r#"{"result": 5}"#, "'result' must be a JSON object"),
        (r#"{"result": null}"#, "not null"),
        (r#"{"result": [1]}"#, "not an array"),
        (r#"{"error": 5}"#, "'error' must be a JSON-RPC error object"),
        (
            r#"{"error": null}"#,
            "'error' must be a JSON-RPC error object",
        ),
        (r#"{"error": {"message": "m"}}"#, "missing field `code`"),
        (
            r#"{"error": {"code": "x", "message": "m"}}"#,
            "integer 'code'",
        ),
        (
            r#"{"error": {"code": 1.5, "message": "m"}}"#,
            "integer 'code'",
        ),
        (r#"{"error": {"code": 1}}"#, "missing field `message`"),
        (
            r#"{"error": {"code": 1, "message": 2}}"#,
            "string 'message'",
        ),
        (r#"{"result": null, "error": null}"#, "exactly one"),
        (r#"{"error": [7, "seven"]}"#, "not an array"),
        (
            r#"{"error": {"code": 1, "message": "m"}, "status": "completed"}"#,
            "only be stored with status 'failed'",
        ),
    ];
    for (outcome, needle) in refused {
        assert_eq!(store(outcome), mcpts_result::InvalidArgument, "{outcome}");
        let message = last_error();
        assert!(message.contains(needle), "{outcome}: {message}");
    }
    let mut task: *mut mcpts_bytes = ptr::null_mut();
    // SAFETY: as above.
    let task = unsafe {
        assert_eq!(
            mcpts_handle_get(f.handle, id.as_ptr(), ptr::null(), &mut task),
            mcpts_result::Ok
        );
        take_json(task)
    };
    assert_eq!(task["status"], "working");

    let error = r#"{"error": {"code": -32000, "message": "m", "data": {"why": 1}}}"#;
    assert_eq!(store(error), mcpts_result::Ok);
    let other = f.create();
    let mut out: *mut mcpts_bytes = ptr::null_mut();
    let result = br#"{"result": {"content": []}}"#;
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            mcpts_handle_store_result(
                f.handle,
                other.as_ptr(),
                ptr::null(),
                result.as_ptr(),
                result.len(),
                &mut out
            ),
            mcpts_result::Ok
        );
        take_json(out);
    }
}

/// The store's load from `mcpts_handle_stats` as parsed JSON, or the code of the failure
/// (which must leave the out-parameter alone).
///
/// # Safety
///
/// `handle` must be NULL or live.
unsafe fn stats(handle: *const mcpts_handle) -> Result<serde_json::Value, mcpts_result> {
    let untouched = ptr::NonNull::<mcpts_bytes>::dangling().as_ptr();
    let mut out = untouched;
    // SAFETY: per this function's contract; `out` is a live local, freed by `take_json`.
    match unsafe { mcpts_handle_stats(handle, &mut out) } {
        mcpts_result::Ok => Ok(unsafe { take_json(out) }),
        code => {
            assert_eq!(out, untouched, "a failed stats wrote its out-parameter");
            Err(code)
        }
    }
}

/// Spins (without sleeping) until at least `n` callers are parked in the fixture's store,
/// as `mcpts_handle_stats` counts them; fails after 10 s.
fn until_parked(f: &Fixture, n: u64) {
    let started = std::time::Instant::now();
    loop {
        // SAFETY: the fixture's handle is live.
        let stats = unsafe { stats(f.handle) }
            .unwrap_or_else(|code| panic!("stats: {code:?}: {}", last_error()));
        if stats["waiters"].as_u64().unwrap() >= n {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{n} waiter(s) never parked: {stats}"
        );
        std::thread::yield_now();
    }
}

/// `mcpts_handle_stats` counts the store's tasks, the callers parked in a wait, and the
/// pending timers (task expiries and wait timeouts).
#[test]
fn stats_count_tasks_waiters_and_timers() {
    let f = Fixture::with_config(r#"{"default_ttl": "10m"}"#);
    let counts = |tasks: u64, waiters: u64, timers: u64| serde_json::json!({"tasks": tasks, "waiters": waiters, "timers": timers});
    // SAFETY (every `stats` call): the fixture's handle is live.
    assert_eq!(unsafe { stats(f.handle) }, Ok(counts(0, 0, 0)));
    assert_eq!(last_error(), "");
    let id = f.create();
    f.create();
    // Each task's expiry is a timer.
    assert_eq!(unsafe { stats(f.handle) }, Ok(counts(2, 0, 2)));

    // The wait runs on a handle of its own: should the test fail first, dropping the
    // fixture frees the store, which ends the wait, and the thread never outlives a handle.
    // Freed once, by the thread.
    let own = f.twin();
    let own_addr = own as usize;
    let task_id = id.clone();
    let waiter = std::thread::spawn(move || {
        let own = own_addr as *mut mcpts_handle;
        let mut out: *mut mcpts_bytes = ptr::null_mut();
        // SAFETY: `own` is this thread's alone and freed once, here; `out` is freed once,
        // by `take_json`.
        unsafe {
            let code = mcpts_handle_wait(own, task_id.as_ptr(), ptr::null(), 60_000, &mut out);
            mcpts_handle_free(own);
            (code, (code == mcpts_result::Ok).then(|| take_json(out)))
        }
    });
    until_parked(&f, 1);
    // The parked wait and its timeout.
    assert_eq!(unsafe { stats(f.handle) }, Ok(counts(2, 1, 3)));

    let cancelled = call("cancel", |out| unsafe {
        mcpts_handle_cancel(f.handle, id.as_ptr(), ptr::null(), ptr::null(), out)
    });
    assert_eq!(cancelled["cancelled"], true);
    let (code, task) = waiter.join().unwrap();
    assert_eq!(code, mcpts_result::Ok, "the wait ended with the cancel");
    assert_eq!(task.unwrap()["status"], "cancelled");
    let after = unsafe { stats(f.handle) }.unwrap();
    assert_eq!((&after["tasks"], &after["waiters"]), (&2.into(), &0.into()));
}

#[test]
fn stats_null_parameters() {
    let f = Fixture::new();
    // SAFETY: every pointer is NULL or the fixture's live handle.
    unsafe {
        assert_eq!(stats(ptr::null()), Err(mcpts_result::NullParameter));
        assert_eq!(last_error(), "argument 'handle' is NULL");
        assert_eq!(
            mcpts_handle_stats(f.handle, ptr::null_mut()),
            mcpts_result::NullParameter
        );
        assert_eq!(last_error(), "argument 'stats_out' is NULL");
        assert_eq!(
            mcpts_handle_stats(ptr::null(), ptr::null_mut()),
            mcpts_result::NullParameter
        );
        assert_eq!(last_error(), "argument 'handle' is NULL");
    }
}

/// A handle of a freed store gets `CLOSED` from `mcpts_handle_stats`, as from every call.
#[test]
fn stats_after_the_store_is_freed_is_closed() {
    let f = Fixture::new();
    f.create();
    // Freed once, below.
    let handle = f.twin();
    drop(f);
    // SAFETY: the twin outlives its store; freed once, here.
    unsafe {
        assert_eq!(stats(handle), Err(mcpts_result::Closed));
        assert_eq!(last_error(), "the task store is closed");
        mcpts_handle_free(handle);
    }
}

/// A `tasks/result` waiting in `mcpts_handle_dispatch` when its store is freed returns
/// `CLOSED`, like every other wait, rather than `OK` with a JSON-RPC error.
#[test]
fn dispatch_waiting_when_the_store_is_freed_is_closed() {
    let f = Fixture::new();
    let id = f.create();
    // Freed once, below.
    let twin = f.twin();
    let request = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{{"taskId":"{}"}}}}"#,
        id.to_str().unwrap()
    );
    let twin_addr = twin as usize;
    let waiter = std::thread::spawn(move || {
        let twin = twin_addr as *const mcpts_handle;
        let mut out: *mut mcpts_bytes = ptr::null_mut();
        // SAFETY: `twin` stays live until this thread is joined; `out` is checked below.
        let code = unsafe {
            mcpts_handle_dispatch(twin, request.as_ptr(), request.len(), ptr::null(), &mut out)
        };
        (code, last_error(), out.is_null())
    });
    until_parked(&f, 1);
    drop(f);
    let (code, message, untouched) = waiter.join().unwrap();
    // SAFETY: from the library, freed once; the waiter is done with it.
    unsafe { mcpts_handle_free(twin) };
    assert_eq!(code, mcpts_result::Closed, "{message}");
    assert_eq!(message, "the task store is closed");
    assert!(untouched);
}

/// Runs `mcpts_handle_dispatch_timeout` on another thread, through a handle of its own,
/// and returns its code and parsed response. Should it hang, dropping the fixture frees
/// the store, which ends the wait with `CLOSED`, so the thread never outlives its handle.
fn dispatch_on_thread(
    f: &Fixture,
    request: String,
    timeout_ms: u64,
) -> std::sync::mpsc::Receiver<(mcpts_result, Option<serde_json::Value>)> {
    // Freed once, by the thread.
    let own = f.twin();
    let own_addr = own as usize;
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let own = own_addr as *mut mcpts_handle;
        let mut out: *mut mcpts_bytes = ptr::null_mut();
        // SAFETY: `own` is this thread's alone and freed once, here; `out` is freed once,
        // by `take_json`.
        unsafe {
            let code = mcpts_handle_dispatch_timeout(
                own,
                request.as_ptr(),
                request.len(),
                ptr::null(),
                timeout_ms,
                &mut out,
            );
            mcpts_handle_free(own);
            let _ = done.send((code, (code == mcpts_result::Ok).then(|| take_json(out))));
        }
    });
    outcome
}

/// Waits up to 10 s for a thread's outcome; `None` if it is still blocked.
fn join_within<T>(outcome: &std::sync::mpsc::Receiver<T>) -> Option<T> {
    outcome
        .recv_timeout(std::time::Duration::from_secs(10))
        .ok()
}

/// `mcpts_handle_dispatch_timeout` bounds a 2025-11-25 `tasks/result`: when the task is
/// still running at the timeout it answers -32603, and the task carries on.
#[test]
fn dispatch_timeout_bounds_tasks_result() {
    let f = Fixture::new();
    let id = f.create();
    let request = |n: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tasks/result","params":{{"taskId":"{}"}}}}"#,
            id.to_str().unwrap()
        )
    };
    let Some((code, response)) = join_within(&dispatch_on_thread(&f, request(1), 50)) else {
        panic!("tasks/result with a 50 ms timeout was still waiting after 10 s");
    };
    assert_eq!(code, mcpts_result::Ok);
    let response = response.unwrap();
    assert_eq!(response["id"], 1);
    assert_eq!(response["error"]["code"], -32603);
    assert_eq!(
        response["error"]["message"],
        "Timed out waiting on the task"
    );

    // 0 answers at once; the task is still there, still working.
    let Some((code, response)) = join_within(&dispatch_on_thread(&f, request(2), 0)) else {
        panic!("tasks/result with a 0 ms timeout was still waiting after 10 s");
    };
    assert_eq!(code, mcpts_result::Ok);
    assert_eq!(response.unwrap()["error"]["code"], -32603);

    // A task that ends within the timeout is answered with its result.
    // The earlier waits have ended (the store forgets a wait before it answers it), so the
    // one waiter it counts is this one.
    let waiter = dispatch_on_thread(&f, request(3), 10_000);
    until_parked(&f, 1);
    let outcome = br#"{"result": {"content": []}}"#;
    let mut task: *mut mcpts_bytes = ptr::null_mut();
    // SAFETY: the handle, id and outcome are live; `task` is freed once.
    unsafe {
        assert_eq!(
            mcpts_handle_store_result(
                f.handle,
                id.as_ptr(),
                ptr::null(),
                outcome.as_ptr(),
                outcome.len(),
                &mut task
            ),
            mcpts_result::Ok
        );
        take_json(task);
    }
    let (code, response) = join_within(&waiter).expect("tasks/result did not see the result");
    assert_eq!(code, mcpts_result::Ok);
    assert_eq!(
        response.unwrap()["result"]["content"],
        serde_json::json!([])
    );
}

/// A C host may call in from a thread-exit hook (a pthread key's destructor, a C++
/// `thread_local`) or an `atexit` handler, after the library's own thread-locals are gone
/// (they are torn down first when they were made later). The call still works.
#[test]
fn a_call_from_a_thread_exit_hook_works() {
    /// Cancels its task when the thread's locals are torn down, and reports the result.
    struct CancelOnExit {
        handle: usize,
        task: std::ffi::CString,
        done: std::sync::mpsc::Sender<mcpts_result>,
    }
    impl Drop for CancelOnExit {
        fn drop(&mut self) {
            let mut out: *mut mcpts_bytes = ptr::null_mut();
            // SAFETY: the handle outlives this thread (the test frees it after joining);
            // the task id is a live C string; `out` is freed once.
            let result = unsafe {
                let result = mcpts_handle_cancel(
                    self.handle as *const mcpts_handle,
                    self.task.as_ptr(),
                    ptr::null(),
                    ptr::null(),
                    &mut out,
                );
                mcpts_bytes_free(out);
                result
            };
            let _ = self.done.send(result);
        }
    }
    thread_local! {
        static ON_EXIT: std::cell::RefCell<Option<CancelOnExit>> =
            const { std::cell::RefCell::new(None) };
    }

    let f = Fixture::new();
    let handle = f.handle as usize;
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Made before the library's own thread-locals, so torn down after them.
        ON_EXIT.with(|slot| slot.borrow_mut().take());
        let mut task: *mut mcpts_bytes = ptr::null_mut();
        // SAFETY: the handle is live; the request is a live buffer; `task` is freed once.
        let json = unsafe {
            assert_eq!(
                mcpts_handle_create(handle as *const mcpts_handle, b"{}".as_ptr(), 2, &mut task),
                mcpts_result::Ok
            );
            take_json(task)
        };
        let task = std::ffi::CString::new(json["taskId"].as_str().unwrap()).unwrap();
        ON_EXIT.with(|slot| *slot.borrow_mut() = Some(CancelOnExit { handle, task, done }));
    })
    .join()
    .unwrap();
    assert_eq!(
        result.recv_timeout(std::time::Duration::from_secs(10)),
        Ok(mcpts_result::Ok)
    );
}

/// `(size_t)-1` is a common C error value: as a length it is refused, not read.
#[test]
fn a_length_no_buffer_can_have_is_refused() {
    let mut store: *mut mcpts_store = ptr::null_mut();
    // SAFETY: the pointer is live (for 2 bytes; the library must not read past the check).
    let result = unsafe { mcpts_store_new(b"{}".as_ptr(), usize::MAX, &mut store) };
    assert_eq!(result, mcpts_result::InvalidArgument);
    assert!(last_error().contains("length"), "{}", last_error());
    assert!(store.is_null());

    // A NULL is reported as such whatever else is wrong: a NULL out-parameter too.
    // SAFETY: as above.
    let result = unsafe { mcpts_store_new(b"{}".as_ptr(), usize::MAX, ptr::null_mut()) };
    assert_eq!(result, mcpts_result::NullParameter, "{}", last_error());
    assert_eq!(last_error(), "argument 'store_out' is NULL");
    let f = Fixture::new();
    // SAFETY: the handle is live; the buffer as above.
    let result = unsafe {
        mcpts_handle_dispatch(
            f.handle,
            b"{}".as_ptr(),
            usize::MAX,
            ptr::null(),
            ptr::null_mut(),
        )
    };
    assert_eq!(result, mcpts_result::NullParameter, "{}", last_error());
    assert_eq!(last_error(), "argument 'response_out' is NULL");
}

/// A new subscription to the fixture's store, freed by the caller.
fn subscribe(f: &Fixture) -> *mut mcpts_events {
    let mut events: *mut mcpts_events = ptr::null_mut();
    // SAFETY: the handle is live; `events` is a live local.
    let code = unsafe { mcpts_handle_subscribe(f.handle, &mut events) };
    assert_eq!(code, mcpts_result::Ok, "{}", last_error());
    assert!(!events.is_null());
    events
}

/// The subscription's next event as parsed JSON, or the code of the failure (which must
/// leave the out-parameter alone).
///
/// # Safety
///
/// `events` must be a live subscription.
unsafe fn next_event(
    events: *const mcpts_events,
    timeout_ms: u64,
) -> Result<serde_json::Value, mcpts_result> {
    let untouched = ptr::NonNull::<mcpts_bytes>::dangling().as_ptr();
    let mut out = untouched;
    // SAFETY: per this function's contract; `out` is a live local, freed by `take_json`.
    match unsafe { mcpts_events_next(events, timeout_ms, &mut out) } {
        mcpts_result::Ok => Ok(unsafe { take_json(out) }),
        code => {
            assert_eq!(out, untouched, "a failed next wrote its out-parameter");
            Err(code)
        }
    }
}

/// Calls one `mcpts_handle_*` function that writes a task or outcome, and returns its JSON.
fn call(what: &str, f: impl FnOnce(*mut *mut mcpts_bytes) -> mcpts_result) -> serde_json::Value {
    let mut out: *mut mcpts_bytes = ptr::null_mut();
    let code = f(&mut out);
    assert_eq!(code, mcpts_result::Ok, "{what}: {}", last_error());
    // SAFETY: written by the library on success; freed once, here.
    unsafe { take_json(out) }
}

/// A subscription hears of every change, in order, with the task as the call returned it
/// and its session: create, status update, result, and a cancel.
#[test]
fn events_arrive_in_order_for_every_change() {
    let f = Fixture::new();
    let h = f.handle;
    let events = subscribe(&f);
    let req = br#"{"session": "s"}"#;
    // SAFETY (every call): the handle is live, the buffers and C strings are live locals.
    let created = call("create", |out| unsafe {
        mcpts_handle_create(h, req.as_ptr(), req.len(), out)
    });
    let id = std::ffi::CString::new(created["taskId"].as_str().unwrap()).unwrap();
    let asked = call("update_status", |out| unsafe {
        mcpts_handle_update_status(
            h,
            id.as_ptr(),
            c"s".as_ptr(),
            c"input_required".as_ptr(),
            c"which file?".as_ptr(),
            out,
        )
    });
    let outcome = br#"{"result": {"content": []}}"#;
    let finished = call("store_result", |out| unsafe {
        mcpts_handle_store_result(
            h,
            id.as_ptr(),
            c"s".as_ptr(),
            outcome.as_ptr(),
            outcome.len(),
            out,
        )
    });
    let other = f.create();
    let cancelled = call("cancel", |out| unsafe {
        mcpts_handle_cancel(h, other.as_ptr(), ptr::null(), c"stop".as_ptr(), out)
    });
    let s = serde_json::json!("s");
    let want = [
        ("created", &created, &s),
        ("status", &asked, &s),
        ("status", &finished, &s),
        (
            "created",
            &serde_json::Value::Null,
            &serde_json::Value::Null,
        ),
        ("status", &cancelled["task"], &serde_json::Value::Null),
    ];
    for (i, (kind, task, session)) in want.into_iter().enumerate() {
        // SAFETY: `events` is live until freed below.
        let event = unsafe { next_event(events, 10_000) }
            .unwrap_or_else(|code| panic!("event {i}: {code:?}: {}", last_error()));
        assert_eq!(event["type"], kind, "event {i}: {event}");
        assert_eq!(&event["session"], session, "event {i}: {event}");
        if task.is_null() {
            assert_eq!(event["task"]["taskId"], other.to_str().unwrap());
            assert_eq!(event["task"]["status"], "working");
        } else {
            assert_eq!(&event["task"], task, "event {i}");
        }
    }
    assert_eq!(asked["status"], "input_required");
    assert_eq!(finished["status"], "completed");
    assert_eq!(cancelled["task"]["status"], "cancelled");
    // SAFETY: live until freed, once, here.
    unsafe {
        assert_eq!(next_event(events, 0), Err(mcpts_result::Timeout));
        mcpts_events_free(events);
    }
}

/// With nothing to read, `mcpts_events_next` waits out its timeout (0: not at all) and
/// returns `TIMEOUT`; the subscription is still good afterwards.
#[test]
fn events_next_times_out() {
    let f = Fixture::new();
    let events = subscribe(&f);
    // SAFETY: live until freed, once, at the end.
    unsafe {
        assert_eq!(next_event(events, 0), Err(mcpts_result::Timeout));
        assert_eq!(last_error(), "no event within the timeout");
        let start = std::time::Instant::now();
        assert_eq!(next_event(events, 50), Err(mcpts_result::Timeout));
        assert!(start.elapsed() >= std::time::Duration::from_millis(50));
        f.create();
        assert_eq!(next_event(events, 0).unwrap()["type"], "created");
        assert_eq!(last_error(), "");
        mcpts_events_free(events);
    }
}

/// A reader blocked without a timeout when the store is freed wakes with `CLOSED`, after
/// the events that were still queued; every later read is `CLOSED` at once.
#[test]
fn events_reader_blocked_when_the_store_is_freed_gets_closed() {
    let f = Fixture::new();
    let events = subscribe(&f);
    let events_addr = events as usize;
    let (done, outcome) = std::sync::mpsc::channel();
    let (read, was_read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let events = events_addr as *const mcpts_events;
        let mut kinds = Vec::new();
        // SAFETY: the subscription is freed only after this thread reports.
        let code = loop {
            match unsafe { next_event(events, MCPTS_WAIT_FOREVER) } {
                Ok(event) => {
                    kinds.push(event["type"].as_str().unwrap().to_owned());
                    let _ = read.send(());
                }
                Err(code) => break code,
            }
        };
        let _ = done.send((code, last_error(), kinds));
    });
    f.create();
    join_within(&was_read).expect("the reader did not get the created event within 10 s");
    // The reader is on its way back into `mcpts_events_next`, with nothing queued. Whether
    // it blocks there before the store is freed (the case this test is after) or only
    // gets there after, it reads `CLOSED` with the same message: a freed store's
    // subscription with an empty queue answers that at once.
    drop(f);
    let (code, message, kinds) =
        join_within(&outcome).expect("a reader was still blocked 10 s after the store was freed");
    assert_eq!(code, mcpts_result::Closed, "{message}");
    assert_eq!(
        message,
        "the task store is closed (every event it sent has been read)"
    );
    assert_eq!(kinds, ["created"]);
    // SAFETY: the reader is done; freed once, here.
    unsafe {
        assert_eq!(
            next_event(events, MCPTS_WAIT_FOREVER),
            Err(mcpts_result::Closed)
        );
        mcpts_events_free(events);
    }
}

/// Closing a subscription wakes the readers blocked on it without a timeout, with
/// `CLOSED`, while the store keeps serving: how a host stops a reader thread it no longer
/// needs. Every later read is `CLOSED` at once, events queued or not.
#[test]
fn closing_a_subscription_wakes_its_readers_and_leaves_the_store_running() {
    let f = Fixture::new();
    let events = subscribe(&f);
    let events_addr = events as usize;
    let (done, outcome) = std::sync::mpsc::channel();
    let (read, was_read) = std::sync::mpsc::channel();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (done, read) = (done.clone(), read.clone());
            std::thread::spawn(move || {
                let events = events_addr as *const mcpts_events;
                // SAFETY: the subscription is freed only after every reader reports.
                let code = loop {
                    match unsafe { next_event(events, MCPTS_WAIT_FOREVER) } {
                        Ok(_) => {
                            let _ = read.send(());
                        }
                        Err(code) => break code,
                    }
                };
                let _ = done.send((code, last_error()));
            })
        })
        .collect();
    f.create();
    join_within(&was_read).expect("no reader got the created event within 10 s");
    // Whether they are blocked by now (the case this test is after) or get there after,
    // the readers read `CLOSED`: a closed subscription answers that at once.
    // SAFETY: live until freed below.
    unsafe { mcpts_events_close(events) };
    for _ in &readers {
        let (code, message) =
            join_within(&outcome).expect("a reader was still blocked 10 s after the close");
        assert_eq!(code, mcpts_result::Closed, "{message}");
        assert_eq!(message, "the subscription was closed (mcpts_events_close)");
    }
    for reader in readers {
        reader.join().unwrap();
    }
    // The store still serves, and events queued after the close are not handed out.
    f.create();
    // SAFETY: the readers are done; closed again (a no-op), then freed once, here.
    unsafe {
        assert_eq!(next_event(events, 0), Err(mcpts_result::Closed));
        assert_eq!(next_event(events, 1000), Err(mcpts_result::Closed));
        mcpts_events_close(events);
        mcpts_events_close(ptr::null());
        mcpts_events_free(events);
    }
}

/// Freeing the store leaves a subscription's queued events to be read; a handle of the
/// freed store cannot subscribe.
#[test]
fn events_queued_before_the_store_is_freed_are_still_read() {
    let f = Fixture::new();
    let events = subscribe(&f);
    let (a, b) = (f.create(), f.create());
    // Freed once, below.
    let handle = f.twin();
    drop(f);
    // SAFETY: live until freed, once, here.
    unsafe {
        for id in [a, b] {
            let event = next_event(events, 0).unwrap();
            assert_eq!(event["task"]["taskId"], id.to_str().unwrap());
        }
        assert_eq!(next_event(events, 0), Err(mcpts_result::Closed));
        assert_eq!(next_event(events, 1000), Err(mcpts_result::Closed));
        mcpts_events_free(events);

        let mut again = ptr::NonNull::<mcpts_events>::dangling().as_ptr();
        let untouched = again;
        assert_eq!(
            mcpts_handle_subscribe(handle, &mut again),
            mcpts_result::Closed
        );
        assert_eq!(last_error(), "the task store is closed");
        assert_eq!(again, untouched);
        mcpts_handle_free(handle);
    }
}

#[test]
fn events_null_parameters() {
    let f = Fixture::new();
    let events = subscribe(&f);
    let mut out: *mut mcpts_events = ptr::null_mut();
    let mut bytes: *mut mcpts_bytes = ptr::null_mut();
    // SAFETY: every pointer is NULL, a live local, or live from the library.
    unsafe {
        assert_eq!(
            mcpts_handle_subscribe(ptr::null(), &mut out),
            mcpts_result::NullParameter
        );
        assert_eq!(last_error(), "argument 'handle' is NULL");
        assert_eq!(
            mcpts_handle_subscribe(f.handle, ptr::null_mut()),
            mcpts_result::NullParameter
        );
        assert_eq!(last_error(), "argument 'events_out' is NULL");
        assert!(out.is_null());
        assert_eq!(
            mcpts_events_next(ptr::null(), 0, &mut bytes),
            mcpts_result::NullParameter
        );
        assert_eq!(last_error(), "argument 'events' is NULL");
        assert_eq!(
            mcpts_events_next(events, MCPTS_WAIT_FOREVER, ptr::null_mut()),
            mcpts_result::NullParameter
        );
        assert_eq!(last_error(), "argument 'event_out' is NULL");
        assert!(bytes.is_null());
        mcpts_events_free(ptr::null_mut());
        mcpts_events_free(events);
    }
}

/// A subscription freed with events unread ends quietly: the store carries on, and other
/// subscriptions still hear of every change.
#[test]
fn events_freed_unread_leave_the_store_and_other_subscriptions_alone() {
    let f = Fixture::new();
    let (dropped, kept) = (subscribe(&f), subscribe(&f));
    let mut ids = vec![f.create(), f.create()];
    // SAFETY: live, freed once, here.
    unsafe { mcpts_events_free(dropped) };
    ids.extend([f.create(), f.create()]);
    for id in &ids {
        // SAFETY: live until freed below.
        let event = unsafe { next_event(kept, 1000) }.unwrap();
        assert_eq!(event["type"], "created");
        assert_eq!(event["task"]["taskId"], id.to_str().unwrap());
    }
    // SAFETY: live, freed once, here.
    unsafe { mcpts_events_free(kept) };
    f.create();
}

/// A subscription nobody reads never slows the store: its buffer fills, further events
/// are dropped for it, and once it has room it reads a `lagged` event with their number,
/// before any later event.
#[test]
fn events_a_slow_reader_lags_and_never_blocks_the_store() {
    const TASKS: u64 = 1100; // more than a subscription buffers (1024)
    let f = Fixture::new();
    let events = subscribe(&f);
    let start = std::time::Instant::now();
    for _ in 0..TASKS {
        f.create();
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
    // SAFETY: live until freed, once, at the end.
    unsafe {
        let mut read = 0;
        let mut lagged = None;
        while let Ok(event) = next_event(events, 0) {
            if event["type"] == "lagged" {
                lagged = Some(event);
                break;
            }
            assert_eq!(event["type"], "created");
            read += 1;
        }
        assert!(read < TASKS, "all {read} events were buffered");
        // What it missed comes once it has room: while the store idles (the owner looks
        // again shortly), or with the next change at the latest, before that change.
        let last = f.create();
        let lagged = lagged.unwrap_or_else(|| next_event(events, 1000).unwrap());
        assert_eq!(
            lagged,
            serde_json::json!({"type": "lagged", "missed": TASKS - read})
        );
        let event = next_event(events, 1000).unwrap();
        assert_eq!(event["task"]["taskId"], last.to_str().unwrap());
        mcpts_events_free(events);
    }
}

/// Readers on several threads share one subscription: each event goes to exactly one
/// of them, and each reader sees its share in the order the store made them.
#[test]
fn events_read_from_several_threads_go_to_one_reader_each() {
    const TASKS: usize = 300;
    let f = Fixture::new();
    let events = subscribe(&f);
    let events_addr = events as usize;
    let readers: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let events = events_addr as *const mcpts_events;
                let mut seen = Vec::new();
                // SAFETY: the subscription is freed only after every reader is joined.
                while let Ok(event) = unsafe { next_event(events, MCPTS_WAIT_FOREVER) } {
                    seen.push(event["task"]["taskId"].as_str().unwrap().to_owned());
                }
                seen
            })
        })
        .collect();
    let ids: Vec<String> = (0..TASKS)
        .map(|_| f.create().into_string().unwrap())
        .collect();
    // Freeing the store ends the readers once the queue is empty.
    drop(f);
    let mut all = Vec::new();
    for reader in readers {
        let seen = reader.join().unwrap();
        let positions: Vec<usize> = seen
            .iter()
            .map(|id| ids.iter().position(|x| x == id).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "out of order");
        all.extend(seen);
    }
    all.sort();
    let mut want = ids;
    want.sort();
    assert_eq!(all, want);
    // SAFETY: every reader is joined; freed once, here.
    unsafe { mcpts_events_free(events) };
}

/// The README's C section names every function of the header, so a new one cannot be
/// left out of it.
#[test]
fn readme_names_every_function() {
    let header = std::fs::read_to_string(manifest_dir().join("include/mcp_task_store.h")).unwrap();
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    let functions: Vec<&str> = header
        .lines()
        .filter(|line| !line.starts_with(' ') && !line.starts_with('#'))
        .filter_map(|line| line.split_once('(').map(|(head, _)| head))
        .filter_map(|head| head.rsplit([' ', '*']).next())
        .filter(|name| name.starts_with("mcpts_"))
        .collect();
    assert!(functions.len() > 20, "{functions:?}");
    for name in functions {
        assert!(
            readme.contains(&format!("`{name}`")),
            "the README does not name {name}"
        );
    }
}

/// The header declares the crate's C API and nothing else: a declaration of a C library
/// function there (cbindgen copies any `extern "C"` block it finds at module level) would
/// clash with the system's own in C++ (`dup2` is `noexcept` in glibc's `<unistd.h>`), so a
/// C++ host including this header before `<unistd.h>` would not compile.
#[test]
fn the_header_declares_no_foreign_function() {
    let header = std::fs::read_to_string(manifest_dir().join("include/mcp_task_store.h")).unwrap();
    let foreign: Vec<&str> = header
        .lines()
        .filter(|line| !line.starts_with(' ') && !line.starts_with('#') && !line.starts_with('*'))
        .filter(|line| line.contains('(') && !line.starts_with("typedef"))
        .filter(|line| {
            let head = line.split_once('(').map_or("", |(head, _)| head);
            let name = head.rsplit([' ', '*']).next().unwrap_or("");
            !name.starts_with("mcpts_")
        })
        .collect();
    assert!(foreign.is_empty(), "declared in the header: {foreign:?}");
}

/// The header is all a C host reads: its comments never send the reader to the Rust
/// module documentation, and the rules that hold for every call (threads, `fork()`) are
/// in it.
#[test]
fn the_header_is_self_contained() {
    let header = std::fs::read_to_string(manifest_dir().join("include/mcp_task_store.h")).unwrap();
    for (n, line) in header.lines().enumerate() {
        assert!(
            !line.contains("module"),
            "line {}: points to Rust docs: {line}",
            n + 1
        );
    }
    let (preamble, _) = header.split_once("#ifndef").unwrap();
    for rule in ["any thread", "fork()", "MCPTS_RESULT_CLOSED"] {
        assert!(preamble.contains(rule), "the preamble lacks {rule:?}");
    }
}

/// A field given twice is refused, in the configuration and in a request: a JSON object
/// with duplicate names means different things to different readers, and taking the last
/// one silently (a `max_tasks` limit undone by a later `null`, say) hides the mistake.
#[test]
fn a_field_given_twice_is_refused() {
    let configs = [
        r#"{"max_tasks": 10, "max_tasks": null}"#,
        r#"{"expiry": {"policy": "fail", "grace": "1s", "grace": "2s"}}"#,
        r#"{"journal": {"dir": "a", "dir": "b"}}"#,
    ];
    for config in configs {
        let mut store: *mut mcpts_store = ptr::null_mut();
        // SAFETY: the config is a live buffer; the out-param is a live local.
        let code = unsafe { mcpts_store_new(config.as_ptr(), config.len(), &mut store) };
        assert_eq!(
            code,
            mcpts_result::InvalidConfig,
            "{config}: {}",
            last_error()
        );
        assert!(
            last_error().contains("duplicate field"),
            "{config}: {}",
            last_error()
        );
        assert!(store.is_null());
    }
    let f = Fixture::new();
    let request = br#"{"ttl": 1000, "ttl": 2000}"#;
    let mut task: *mut mcpts_bytes = ptr::null_mut();
    // SAFETY: the handle is live; the request is a live buffer; `task` is a live local.
    let code = unsafe { mcpts_handle_create(f.handle, request.as_ptr(), request.len(), &mut task) };
    assert_eq!(code, mcpts_result::InvalidArgument, "{}", last_error());
    assert!(
        last_error().contains("duplicate field `ttl`"),
        "{}",
        last_error()
    );
    assert!(task.is_null());
}

/// JSON nested past serde_json's limit (128 levels) is well-formed: it is refused as a
/// wrong shape (`INVALID_ARGUMENT`, `INVALID_CONFIG`), not as `INVALID_JSON`, which says
/// the text has a syntax error.
#[test]
fn json_nested_too_deep_is_not_a_syntax_error() {
    let deep = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    let f = Fixture::new();
    let request = format!(r#"{{"origin": {}}}"#, deep(150));
    let mut task: *mut mcpts_bytes = ptr::null_mut();
    // SAFETY: the handle is live; the request is a live buffer; `task` is a live local.
    let code = unsafe { mcpts_handle_create(f.handle, request.as_ptr(), request.len(), &mut task) };
    assert_eq!(code, mcpts_result::InvalidArgument, "{}", last_error());
    assert!(last_error().contains("recursion limit"), "{}", last_error());
    assert!(task.is_null());

    let config = format!(r#"{{"expiry": {}}}"#, deep(150));
    let mut store: *mut mcpts_store = ptr::null_mut();
    // SAFETY: the config is a live buffer; the out-param is a live local.
    let code = unsafe { mcpts_store_new(config.as_ptr(), config.len(), &mut store) };
    assert_eq!(code, mcpts_result::InvalidConfig, "{}", last_error());
    assert!(store.is_null());

    // A syntax error is still one, however deep it sits.
    let broken = format!(r#"{{"origin": {}"#, deep(10));
    // SAFETY: as above.
    let code = unsafe { mcpts_handle_create(f.handle, broken.as_ptr(), broken.len(), &mut task) };
    assert_eq!(code, mcpts_result::InvalidJson, "{}", last_error());
}

/// `null` means "not set" for every field of the configuration, as `mcpts_store_new`
/// says: the expiry's `grace` and the journal's optional fields too.
#[test]
fn null_is_the_default_for_nested_fields_too() {
    let dir = tempfile::tempdir().unwrap();
    let configs = [
        r#"{"expiry": {"policy": "fail", "grace": null}}"#.to_owned(),
        r#"{"expiry": {"policy": "remove", "grace": null}}"#.to_owned(),
        serde_json::json!({"journal": {
            "dir": dir.path(), "durability": null, "recovery": null, "salvage": null,
            "compact_ratio": null, "compact_min_bytes": null,
        }})
        .to_string(),
    ];
    for config in configs {
        let f = Fixture::with_config(&config);
        f.create();
    }
}

/// `mcpts_last_error` always leaves a C string in a buffer it is given room in, even when
/// it has no message to copy because the calling thread's slot is already torn down (a
/// call from a thread-exit hook): a host that prints the buffer must not read garbage.
#[test]
fn last_error_terminates_the_buffer_in_a_thread_exit_hook() {
    /// Makes a call fail when the thread's locals are torn down, then reads the last error
    /// into a buffer full of 'x', and reports what it returned and the buffer's first byte.
    struct ReadOnExit {
        handle: usize,
        done: std::sync::mpsc::Sender<(mcpts_result, usize, std::ffi::c_char)>,
    }
    impl Drop for ReadOnExit {
        fn drop(&mut self) {
            let mut out: *mut mcpts_bytes = ptr::null_mut();
            let mut buf = [b'x' as std::ffi::c_char; 16];
            // SAFETY: the handle outlives this thread (the test frees it after joining);
            // the task id is a live C string; `buf` is writable for its length.
            let (result, n) = unsafe {
                let result = mcpts_handle_get(
                    self.handle as *const mcpts_handle,
                    c"no-such-task".as_ptr(),
                    ptr::null(),
                    &mut out,
                );
                (result, mcpts_last_error(buf.as_mut_ptr(), buf.len()))
            };
            let _ = self.done.send((result, n, buf[0]));
        }
    }
    thread_local! {
        static ON_EXIT: std::cell::RefCell<Option<ReadOnExit>> =
            const { std::cell::RefCell::new(None) };
    }

    let f = Fixture::new();
    let handle = f.handle as usize;
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Made before the library's own thread-locals, so torn down after them.
        ON_EXIT.with(|slot| slot.borrow_mut().take());
        // A failure makes the library's last-error slot, torn down before `ON_EXIT`.
        let mut out: *mut mcpts_bytes = ptr::null_mut();
        // SAFETY: the handle is live; the id is a live C string.
        let code = unsafe {
            mcpts_handle_get(
                handle as *const mcpts_handle,
                c"no-such-task".as_ptr(),
                ptr::null(),
                &mut out,
            )
        };
        assert_eq!(code, mcpts_result::NotFound);
        ON_EXIT.with(|slot| *slot.borrow_mut() = Some(ReadOnExit { handle, done }));
    })
    .join()
    .unwrap();
    let (result, n, first) = outcome
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    assert_eq!(result, mcpts_result::NotFound);
    // The slot was gone (the case under test), and the buffer holds the empty string.
    assert_eq!(n, 0);
    assert_eq!(first, 0, "no message, and the buffer was left unterminated");
}

/// A key given twice in input requests or in their answers is refused, as a field given
/// twice is: the store would otherwise keep the last request, or hand the worker the last
/// answer, and drop the other without a word.
#[test]
fn an_input_key_given_twice_is_refused() {
    let f = Fixture::new();
    let id = f.create();
    let twice = br#"{"ask": {"method": "elicitation/create", "params": {}},
                     "ask": {"method": "sampling/createMessage", "params": {}}}"#;
    let mut out: *mut mcpts_bytes = ptr::null_mut();
    // SAFETY: the handle is live; the id and request are live buffers; `out` is a local.
    let code = unsafe {
        mcpts_handle_set_input_requests(
            f.handle,
            id.as_ptr(),
            ptr::null(),
            twice.as_ptr(),
            twice.len(),
            &mut out,
        )
    };
    assert_eq!(code, mcpts_result::InvalidArgument, "{}", last_error());
    assert!(last_error().contains("`ask`"), "{}", last_error());
    assert!(out.is_null());
    let task = call("get", |out| unsafe {
        // SAFETY: as above.
        mcpts_handle_get(f.handle, id.as_ptr(), ptr::null(), out)
    });
    assert_eq!(task["status"], "working");

    let once = br#"{"ask": {"method": "elicitation/create", "params": {}}}"#;
    call("set_input_requests", |out| unsafe {
        // SAFETY: as above.
        mcpts_handle_set_input_requests(
            f.handle,
            id.as_ptr(),
            ptr::null(),
            once.as_ptr(),
            once.len(),
            out,
        )
    });
    let answers = br#"{"ask": {"action": "accept"}, "ask": {"action": "decline"}}"#;
    // SAFETY: as above.
    let code = unsafe {
        mcpts_handle_resolve_input(
            f.handle,
            id.as_ptr(),
            ptr::null(),
            answers.as_ptr(),
            answers.len(),
            &mut out,
        )
    };
    assert_eq!(code, mcpts_result::InvalidArgument, "{}", last_error());
    assert!(last_error().contains("`ask`"), "{}", last_error());
    assert!(out.is_null());
    let task = call("get", |out| unsafe {
        // SAFETY: as above.
        mcpts_handle_get(f.handle, id.as_ptr(), ptr::null(), out)
    });
    assert_eq!(task["status"], "input_required");
}

/// JSON can spell a NUL (`\u0000`) where a C string cannot: a session or an input key
/// holding one could never be passed back to the calls that take it as a C string (every
/// call on the task, `mcpts_handle_wait_input`), so it is refused where it comes in.
#[test]
fn a_name_c_cannot_spell_is_refused() {
    let f = Fixture::new();
    let request = br#"{"session": "a\u0000b"}"#;
    let mut out: *mut mcpts_bytes = ptr::null_mut();
    // SAFETY: the handle is live; the request is a live buffer; `out` is a local.
    let code = unsafe { mcpts_handle_create(f.handle, request.as_ptr(), request.len(), &mut out) };
    assert_eq!(code, mcpts_result::InvalidArgument, "{}", last_error());
    assert!(last_error().contains("NUL"), "{}", last_error());
    assert!(out.is_null());

    let id = f.create();
    let requests = br#"{"a\u0000b": {"method": "elicitation/create", "params": {}}}"#;
    // SAFETY: as above; the id is a live C string.
    let code = unsafe {
        mcpts_handle_set_input_requests(
            f.handle,
            id.as_ptr(),
            ptr::null(),
            requests.as_ptr(),
            requests.len(),
            &mut out,
        )
    };
    assert_eq!(code, mcpts_result::InvalidArgument, "{}", last_error());
    assert!(last_error().contains("NUL"), "{}", last_error());
    assert!(out.is_null());
}

/// A member given twice in a JSON-RPC request is refused, not resolved: the host's own
/// JSON reader (many take the first of two equal names) must never route, log or
/// authorise one request while the library serves another. Here a host would see a
/// harmless `tasks/get` where the last `method` cancels the task.
#[test]
fn dispatch_refuses_a_member_given_twice() {
    let f = Fixture::new();
    let id = f.create();
    let id = id.to_str().unwrap();
    let requests = [
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","method":"tasks/cancel",
                "params":{{"taskId":"{id}"}}}}"#
        ),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/cancel",
                "params":{{"taskId":"{id}","_meta":{{}},"_meta":{{}}}}}}"#
        ),
    ];
    for request in requests {
        let response = call("dispatch", |out| unsafe {
            // SAFETY: the handle is live; the request is a live buffer.
            mcpts_handle_dispatch(f.handle, request.as_ptr(), request.len(), ptr::null(), out)
        });
        assert_eq!(response["error"]["code"], -32700, "{request}: {response}");
        let message = response["error"]["message"].as_str().unwrap();
        assert!(message.contains("given twice"), "{message}");
    }
    let id = std::ffi::CString::new(id).unwrap();
    let task = call("get", |out| unsafe {
        // SAFETY: the handle is live; the id is a live C string.
        mcpts_handle_get(f.handle, id.as_ptr(), ptr::null(), out)
    });
    assert_eq!(task["status"], "working");
}

/// A reader that fell behind is told how many events it missed even when the store is
/// freed before it made room: after the events still queued comes the `lagged` event,
/// then `CLOSED`.
#[test]
fn events_missed_before_the_store_is_freed_are_reported() {
    let f = Fixture::with_config(r#"{"event_buffer": 1}"#);
    let events = subscribe(&f);
    let first = f.create();
    f.create();
    f.create();
    drop(f);
    // SAFETY: live until freed, once, here.
    unsafe {
        let event = next_event(events, 0).unwrap();
        assert_eq!(event["task"]["taskId"], first.to_str().unwrap());
        assert_eq!(
            next_event(events, MCPTS_WAIT_FOREVER),
            Ok(serde_json::json!({"type": "lagged", "missed": 2}))
        );
        assert_eq!(next_event(events, 0), Err(mcpts_result::Closed));
        mcpts_events_free(events);
    }
}
