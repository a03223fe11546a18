"""Forks a process that holds a store, as Python's multiprocessing does by default on Linux.

The child has the store's memory but not its owner thread: every call there must return
MCPTS_RESULT_CLOSED at once (never wait for an answer that cannot come), and freeing the
store and its handles must return rather than wait for the thread to exit. The parent's
store must carry on unharmed. A call that hangs in the child is ended by an alarm, which
the parent reports as a failure. Run by tests/ffi.rs:

    python3 tests/python/ffi_fork.py path/to/libmcp_task_store.so
"""

import ctypes
import json
import os
import signal
import sys
import traceback
import warnings

OK = 0
CLOSED = 6
WAIT_FOREVER = 2**64 - 1
# A child call that hangs is killed by SIGALRM after this long.
CHILD_TIMEOUT_S = 10


class Store(ctypes.Structure):
    pass


class Handle(ctypes.Structure):
    pass


class Bytes(ctypes.Structure):
    pass


def load(path):
    lib = ctypes.CDLL(path)
    u8p, size, u32, u64 = ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64
    s, h, b = ctypes.POINTER(Store), ctypes.POINTER(Handle), ctypes.POINTER(Bytes)
    signatures = {
        "mcpts_store_new": (u32, [u8p, size, ctypes.POINTER(s)]),
        "mcpts_store_free": (None, [s]),
        "mcpts_store_handle": (u32, [s, ctypes.POINTER(h)]),
        "mcpts_handle_clone": (u32, [h, ctypes.POINTER(h)]),
        "mcpts_handle_free": (None, [h]),
        "mcpts_handle_create": (u32, [h, u8p, size, ctypes.POINTER(b)]),
        "mcpts_handle_get": (u32, [h, u8p, u8p, ctypes.POINTER(b)]),
        "mcpts_handle_list": (u32, [h, u8p, u8p, ctypes.POINTER(b)]),
        "mcpts_handle_wait": (u32, [h, u8p, u8p, u64, ctypes.POINTER(b)]),
        "mcpts_handle_cancel": (u32, [h, u8p, u8p, u8p, ctypes.POINTER(b)]),
        "mcpts_handle_dispatch": (u32, [h, u8p, size, u8p, ctypes.POINTER(b)]),
        "mcpts_bytes_data": (ctypes.c_void_p, [b]),
        "mcpts_bytes_len": (size, [b]),
        "mcpts_bytes_free": (None, [b]),
        "mcpts_last_error": (size, [ctypes.c_char_p, size]),
        "mcpts_result_name": (ctypes.c_char_p, [u32]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def last_error(lib):
    buf = ctypes.create_string_buffer(512)
    lib.mcpts_last_error(buf, len(buf))
    return buf.value.decode()


def take_json(lib, out):
    try:
        return json.loads(ctypes.string_at(lib.mcpts_bytes_data(out), lib.mcpts_bytes_len(out)))
    finally:
        lib.mcpts_bytes_free(out)


def create(lib, handle):
    out = ctypes.POINTER(Bytes)()
    code = lib.mcpts_handle_create(handle, b"{}", 2, ctypes.byref(out))
    assert code == OK, (lib.mcpts_result_name(code), last_error(lib))
    return take_json(lib, out)["taskId"].encode()


def child(lib, store, handle, task_id):
    """Every call on the parent's store returns CLOSED at once; frees return."""
    signal.alarm(CHILD_TIMEOUT_S)
    failures = []
    out = ctypes.POINTER(Bytes)()
    request = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tasks/result", "params": {"taskId": task_id.decode()}}
    ).encode()
    twin = ctypes.POINTER(Handle)()
    calls = {
        "get": lambda: lib.mcpts_handle_get(handle, task_id, None, ctypes.byref(out)),
        "create": lambda: lib.mcpts_handle_create(handle, b"{}", 2, ctypes.byref(out)),
        "list": lambda: lib.mcpts_handle_list(handle, None, None, ctypes.byref(out)),
        "wait": lambda: lib.mcpts_handle_wait(handle, task_id, None, WAIT_FOREVER, ctypes.byref(out)),
        "cancel": lambda: lib.mcpts_handle_cancel(handle, task_id, None, None, ctypes.byref(out)),
        "dispatch": lambda: lib.mcpts_handle_dispatch(
            handle, request, len(request), None, ctypes.byref(out)
        ),
        "clone": lambda: lib.mcpts_handle_clone(handle, ctypes.byref(twin)),
        "store_handle": lambda: lib.mcpts_store_handle(store, ctypes.byref(twin)),
    }
    for name, call in calls.items():
        code = call()
        message = last_error(lib)
        if code != CLOSED:
            failures.append(f"{name} returned {lib.mcpts_result_name(code).decode()}, want CLOSED")
        elif f"belongs to process {os.getppid()}" not in message or "fork()" not in message:
            failures.append(f"{name}: last error does not explain the fork: {message!r}")
    if out or twin:
        failures.append("a failed call wrote its out-parameter")
    # Both must return: nothing to join here.
    lib.mcpts_handle_free(handle)
    lib.mcpts_store_free(store)
    return failures


def main(path):
    lib = load(path)
    store = ctypes.POINTER(Store)()
    assert lib.mcpts_store_new(b"{}", 2, ctypes.byref(store)) == OK
    handle = ctypes.POINTER(Handle)()
    assert lib.mcpts_store_handle(store, ctypes.byref(handle)) == OK
    task_id = create(lib, handle)

    with warnings.catch_warnings():
        # Python warns that forking a multi-threaded process may deadlock the child: that
        # is the very case under test.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            failures = child(lib, store, handle, task_id)
        except BaseException:
            traceback.print_exc()
            failures = ["the child raised"]
        for failure in failures:
            print(f"ffi_fork.py: child: {failure}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1 if failures else 0)

    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        raise SystemExit(f"ffi_fork.py: the child was killed by {sig}: a call hung")
    if os.WEXITSTATUS(status) != 0:
        raise SystemExit(f"ffi_fork.py: the child failed (exit {os.WEXITSTATUS(status)})")

    # The parent's store is untouched by what the child did.
    out = ctypes.POINTER(Bytes)()
    assert lib.mcpts_handle_get(handle, task_id, None, ctypes.byref(out)) == OK, last_error(lib)
    assert take_json(lib, out)["status"] == "working"
    create(lib, handle)
    lib.mcpts_handle_free(handle)
    lib.mcpts_store_free(store)
    print("ffi_fork.py: ok")


if __name__ == "__main__":
    main(sys.argv[1])
