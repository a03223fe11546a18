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

from mcpts import CLOSED, OK, WAIT_FOREVER, Bytes, Events, Handle, Store, last_error, load, take_json

# A child call that hangs is killed by SIGALRM after this long.
CHILD_TIMEOUT_S = 10


def create(lib, handle):
    out = ctypes.POINTER(Bytes)()
    code = lib.mcpts_handle_create(handle, b"{}", 2, ctypes.byref(out))
    assert code == OK, (lib.mcpts_result_name(code), last_error(lib))
    return take_json(lib, out)["taskId"].encode()


def child(lib, store, handle, events, task_id):
    """Every call on the parent's store returns CLOSED at once (reading a subscription
    too, though an event is queued on it); frees return."""
    signal.alarm(CHILD_TIMEOUT_S)
    failures = []
    out = ctypes.POINTER(Bytes)()
    request = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tasks/result", "params": {"taskId": task_id.decode()}}
    ).encode()
    twin = ctypes.POINTER(Handle)()
    subscription = ctypes.POINTER(Events)()
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
        "stats": lambda: lib.mcpts_handle_stats(handle, ctypes.byref(out)),
        "subscribe": lambda: lib.mcpts_handle_subscribe(handle, ctypes.byref(subscription)),
        "events_next": lambda: lib.mcpts_events_next(events, WAIT_FOREVER, ctypes.byref(out)),
    }
    for name, call in calls.items():
        code = call()
        message = last_error(lib)
        if code != CLOSED:
            failures.append(f"{name} returned {lib.mcpts_result_name(code).decode()}, want CLOSED")
        elif f"belongs to process {os.getppid()}" not in message or "fork()" not in message:
            failures.append(f"{name}: last error does not explain the fork: {message!r}")
    if out or twin or subscription:
        failures.append("a failed call wrote its out-parameter")
    # All must return: nothing to join here.
    lib.mcpts_events_free(events)
    lib.mcpts_handle_free(handle)
    lib.mcpts_store_free(store)
    return failures


def main(path):
    lib = load(path)
    store = ctypes.POINTER(Store)()
    assert lib.mcpts_store_new(b"{}", 2, ctypes.byref(store)) == OK
    handle = ctypes.POINTER(Handle)()
    assert lib.mcpts_store_handle(store, ctypes.byref(handle)) == OK
    events = ctypes.POINTER(Events)()
    assert lib.mcpts_handle_subscribe(handle, ctypes.byref(events)) == OK, last_error(lib)
    task_id = create(lib, handle)

    # os.fork runs the atfork handlers; glibc's _Fork (2.34 and later) does not, as a raw
    # clone would not: the library must tell the child either way.
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "_Fork"):
        raise SystemExit("ffi_fork.py: this C library has no _Fork (glibc 2.34 or later has)")
    for name, fork in [("os.fork", os.fork), ("_Fork", libc._Fork)]:
        with warnings.catch_warnings():
            # Python warns that forking a multi-threaded process may deadlock the child:
            # that is the very case under test.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = fork()
        if pid == 0:
            try:
                failures = child(lib, store, handle, events, task_id)
            except BaseException:
                traceback.print_exc()
                failures = ["the child raised"]
            for failure in failures:
                print(f"ffi_fork.py: {name} child: {failure}", file=sys.stderr)
            sys.stderr.flush()
            os._exit(1 if failures else 0)

        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            sig = signal.Signals(os.WTERMSIG(status)).name
            raise SystemExit(f"ffi_fork.py: the {name} child was killed by {sig}: a call hung")
        if os.WEXITSTATUS(status) != 0:
            raise SystemExit(
                f"ffi_fork.py: the {name} child failed (exit {os.WEXITSTATUS(status)})"
            )

    # The parent's store is untouched by what the child did.
    out = ctypes.POINTER(Bytes)()
    assert lib.mcpts_handle_get(handle, task_id, None, ctypes.byref(out)) == OK, last_error(lib)
    assert take_json(lib, out)["status"] == "working"
    # The event queued before the forks is still the parent's to read.
    assert lib.mcpts_events_next(events, 0, ctypes.byref(out)) == OK, last_error(lib)
    event = take_json(lib, out)
    assert event["type"] == "created" and event["task"]["taskId"] == task_id.decode(), event
    create(lib, handle)
    lib.mcpts_events_free(events)
    lib.mcpts_handle_free(handle)
    lib.mcpts_store_free(store)
    print("ffi_fork.py: ok")


if __name__ == "__main__":
    main(sys.argv[1])
