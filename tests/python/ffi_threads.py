"""Drives the mcp-task-store C library from Python threads through ctypes.

Four producer threads create tasks (two sessions, plus sessionless ones), one completer
thread stores a result for each, and the main thread lists every session page by page and
checks the counts. Run by tests/ffi.rs:

    python3 tests/python/ffi_threads.py path/to/libmcp_task_store.so
"""

import ctypes
import json
import queue
import sys
import threading

from mcpts import (
    INVALID_CONFIG,
    NOT_FOUND,
    OK,
    WAIT_FOREVER,
    Bytes,
    Handle,
    Store,
    last_error,
    load,
    take_json,
)

PRODUCERS = 4
TASKS_PER_PRODUCER = 50


class Api:
    """Thin wrappers: raise on any code but OK, return parsed JSON."""

    def __init__(self, lib):
        self.lib = lib

    def check(self, code, what):
        if code != OK:
            name = self.lib.mcpts_result_name(code).decode()
            raise RuntimeError(f"{what}: {name}: {last_error(self.lib)}")

    def take_json(self, out):
        return take_json(self.lib, out)

    def call(self, name, *args):
        out = ctypes.POINTER(Bytes)()
        self.check(getattr(self.lib, name)(*args, ctypes.byref(out)), name)
        return self.take_json(out)

    def create(self, handle, request):
        text = json.dumps(request).encode()
        return self.call("mcpts_handle_create", handle, text, len(text))

    def store_result(self, handle, task_id, session, outcome):
        text = json.dumps(outcome).encode()
        return self.call("mcpts_handle_store_result", handle, task_id, session, text, len(text))

    def list_all(self, handle, session):
        tasks, cursor = [], None
        while True:
            page = self.call("mcpts_handle_list", handle, session, cursor)
            tasks.extend(page["tasks"])
            cursor = page.get("nextCursor")
            if cursor is None:
                return tasks
            cursor = cursor.encode()


def session_of(producer):
    # Producers 0 and 1 share session "a", 2 uses "b", 3 creates sessionless tasks.
    return [b"a", b"a", b"b", None][producer]


def main(path):
    lib = load(path)
    api = Api(lib)

    store = ctypes.POINTER(Store)()
    bad = b'{"page_size": 10, "colour": "blue"}'
    code = lib.mcpts_store_new(bad, len(bad), ctypes.byref(store))
    assert code == INVALID_CONFIG and not store, code
    config = b'{"page_size": 7, "default_ttl": "5m", "max_tasks": 1000}'
    api.check(lib.mcpts_store_new(config, len(config), ctypes.byref(store)), "store_new")
    handle = ctypes.POINTER(Handle)()
    api.check(lib.mcpts_store_handle(store, ctypes.byref(handle)), "store_handle")

    created = queue.Queue()
    errors = []

    def producer(index):
        try:
            session = session_of(index)
            for n in range(TASKS_PER_PRODUCER):
                request = {"ttl": 60_000, "origin": {"producer": index, "n": n}}
                if session is not None:
                    request["session"] = session.decode()
                task = api.create(handle, request)
                assert task["status"] == "working", task
                created.put((task["taskId"].encode(), session))
        except Exception as e:  # reported by the main thread
            errors.append(e)

    def completer(total):
        try:
            for _ in range(total):
                task_id, session = created.get(timeout=30)
                task = api.store_result(handle, task_id, session, {"result": {"content": []}})
                assert task["status"] == "completed", task
        except Exception as e:
            errors.append(e)

    total = PRODUCERS * TASKS_PER_PRODUCER
    threads = [threading.Thread(target=producer, args=(i,)) for i in range(PRODUCERS)]
    threads.append(threading.Thread(target=completer, args=(total,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    expected = {b"a": 2 * TASKS_PER_PRODUCER, b"b": TASKS_PER_PRODUCER, None: TASKS_PER_PRODUCER}
    seen = set()
    for session, count in expected.items():
        tasks = api.list_all(handle, session)
        assert len(tasks) == count, (session, len(tasks), count)
        assert all(t["status"] == "completed" for t in tasks), session
        ids = {t["taskId"] for t in tasks}
        assert len(ids) == count and not (ids & seen), session
        seen |= ids
    assert len(seen) == total
    assert api.list_all(handle, b"nobody") == []

    # Each finished task can be waited on; a foreign session sees nothing.
    some_id = next(iter(seen)).encode()
    out = ctypes.POINTER(Bytes)()
    code = lib.mcpts_handle_get(handle, some_id, b"nobody", ctypes.byref(out))
    assert code == NOT_FOUND and not out, code
    sessionless = api.list_all(handle, None)[0]["taskId"].encode()
    done = api.call("mcpts_handle_wait", handle, sessionless, None, WAIT_FOREVER)
    assert done["status"] == "completed", done

    lib.mcpts_handle_free(handle)
    lib.mcpts_store_free(store)
    print(f"ffi_threads.py: ok ({total} tasks from {PRODUCERS} threads)")


if __name__ == "__main__":
    main(sys.argv[1])
