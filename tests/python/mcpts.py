"""ctypes bindings of the mcp-task-store C library shared by the Python FFI tests.

Result codes and signatures follow include/mcp_task_store.h.
"""

import ctypes
import json

OK = 0
INVALID_CONFIG = 5
CLOSED = 6
NOT_FOUND = 100
WAIT_FOREVER = 2**64 - 1


class Store(ctypes.Structure):
    pass


class Handle(ctypes.Structure):
    pass


class Bytes(ctypes.Structure):
    pass


class Events(ctypes.Structure):
    pass


def load(path):
    """Loads the library at `path` with the argument and result types of what the tests call."""
    lib = ctypes.CDLL(path)
    u8p, size, u32, u64 = ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64
    s, h, b = ctypes.POINTER(Store), ctypes.POINTER(Handle), ctypes.POINTER(Bytes)
    e = ctypes.POINTER(Events)
    signatures = {
        "mcpts_store_new": (u32, [u8p, size, ctypes.POINTER(s)]),
        "mcpts_store_free": (None, [s]),
        "mcpts_store_handle": (u32, [s, ctypes.POINTER(h)]),
        "mcpts_handle_clone": (u32, [h, ctypes.POINTER(h)]),
        "mcpts_handle_free": (None, [h]),
        "mcpts_handle_create": (u32, [h, u8p, size, ctypes.POINTER(b)]),
        "mcpts_handle_get": (u32, [h, u8p, u8p, ctypes.POINTER(b)]),
        "mcpts_handle_store_result": (u32, [h, u8p, u8p, u8p, size, ctypes.POINTER(b)]),
        "mcpts_handle_list": (u32, [h, u8p, u8p, ctypes.POINTER(b)]),
        "mcpts_handle_wait": (u32, [h, u8p, u8p, u64, ctypes.POINTER(b)]),
        "mcpts_handle_cancel": (u32, [h, u8p, u8p, u8p, ctypes.POINTER(b)]),
        "mcpts_handle_dispatch": (u32, [h, u8p, size, u8p, ctypes.POINTER(b)]),
        "mcpts_handle_stats": (u32, [h, ctypes.POINTER(b)]),
        "mcpts_handle_subscribe": (u32, [h, ctypes.POINTER(e)]),
        "mcpts_events_next": (u32, [e, u64, ctypes.POINTER(b)]),
        "mcpts_events_close": (None, [e]),
        "mcpts_events_free": (None, [e]),
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
    """The calling thread's last error message."""
    buf = ctypes.create_string_buffer(512)
    lib.mcpts_last_error(buf, len(buf))
    return buf.value.decode()


def take_json(lib, out):
    """Parses an mcpts_bytes output and frees it."""
    try:
        return json.loads(ctypes.string_at(lib.mcpts_bytes_data(out), lib.mcpts_bytes_len(out)))
    finally:
        lib.mcpts_bytes_free(out)
