# SPDX-License-Identifier: MIT
"""TCPStore client and server, backed by libmuster.

`StoreClient` speaks torch's c10d TCPStore protocol (torch 1.13's "v1" or
torch 2.x's "v2", or finds out) to any TCPStore, muster's or torch's, with
torch's method names. `StoreServer` runs muster's store in this process.
"""

import ctypes
import datetime

from . import _lib
from ._lib import MusterError, check

_DIALECTS = {"auto": 0, "v1": 1, "v2": 2}


def _seconds(t):
    return t.total_seconds() if isinstance(t, datetime.timedelta) else float(t)


def _keys(keys):
    arr = (ctypes.c_char_p * len(keys))(*[k.encode() for k in keys])
    return arr, len(keys)


def _bytes(v):
    return v.encode() if isinstance(v, str) else bytes(v)


class StoreClient:
    """One connection to a TCPStore; keys get torch's "/" unless raw_keys."""

    def __init__(self, host, port, dialect="auto", timeout=300.0, raw_keys=False):
        opts = _lib.StoreClientOpts()
        _lib.store_client_opts_init(opts)
        self._host = host.encode()
        opts.host = self._host
        opts.port = port
        opts.dialect = _DIALECTS[dialect]
        opts.timeout_ms = int(_seconds(timeout) * 1000)
        opts.raw_keys = 1 if raw_keys else 0
        handle = ctypes.c_void_p()
        check(f"cannot reach a store at {host}:{port}",
              _lib.store_client_connect(ctypes.byref(opts), ctypes.byref(handle)))
        self._h = handle

    @property
    def dialect(self):
        return {1: "v1", 2: "v2"}[_lib.store_client_dialect(self._h)]

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            _lib.store_client_close(h)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def _take(value):
        data = ctypes.string_at(value.data, value.len) if value.len else b""
        _lib.free(value.data)
        return data

    def set(self, key, value):
        v = _bytes(value)
        check(f"set {key}", _lib.store_set(self._h, key.encode(), v, len(v)))

    def get(self, key):
        out = _lib.StoreValue()
        check(f"get {key}", _lib.store_get(self._h, key.encode(), ctypes.byref(out)))
        return self._take(out)

    def add(self, key, delta):
        result = ctypes.c_int64()
        check(f"add {key}", _lib.store_add(self._h, key.encode(), delta,
                                           ctypes.byref(result)))
        return result.value

    def compare_set(self, key, expected, desired):
        e, d = _bytes(expected), _bytes(desired)
        out = _lib.StoreValue()
        check(f"compare_set {key}", _lib.store_compare_set(
            self._h, key.encode(), e, len(e), d, len(d), ctypes.byref(out)))
        return self._take(out)

    def check(self, keys):
        arr, n = _keys(keys)
        ready = ctypes.c_int()
        check("check", _lib.store_check(self._h, arr, n, ctypes.byref(ready)))
        return bool(ready.value)

    def wait(self, keys, timeout=None):
        arr, n = _keys(keys)
        ms = -1 if timeout is None else int(_seconds(timeout) * 1000)
        # a timeout raises MusterTimeoutError, a TimeoutError as torch's is
        check(f"wait for keys {keys}", _lib.store_wait(self._h, arr, n, ms))

    def delete_key(self, key):
        deleted = ctypes.c_int()
        check(f"delete_key {key}", _lib.store_delete(self._h, key.encode(),
                                                     ctypes.byref(deleted)))
        return bool(deleted.value)

    def num_keys(self):
        n = ctypes.c_int64()
        check("num_keys", _lib.store_num_keys(self._h, ctypes.byref(n)))
        return n.value

    def append(self, key, value):
        v = _bytes(value)
        check(f"append {key}", _lib.store_append(self._h, key.encode(), v, len(v)))

    def multi_get(self, keys):
        arr, n = _keys(keys)
        out = (_lib.StoreValue * n)()
        check("multi_get", _lib.store_multi_get(self._h, arr, n, out))
        return [self._take(v) for v in out]

    def multi_set(self, keys, values):
        arr, n = _keys(keys)
        blobs = [_bytes(v) for v in values]
        vals = (_lib.StoreValue * n)()
        keep = [ctypes.create_string_buffer(b, len(b)) for b in blobs]
        for i, b in enumerate(blobs):
            vals[i].data = ctypes.cast(keep[i], ctypes.c_void_p)
            vals[i].len = len(b)
        check("multi_set", _lib.store_multi_set(self._h, arr, vals, n))


class StoreServer:
    """muster's TCPStore server on a thread of this process."""

    def __init__(self, host="::", port=29500, max_value_bytes=None, silent=True):
        opts = _lib.StoreServerOpts()
        _lib.store_server_opts_init(opts)
        self._host = host.encode()
        opts.host = self._host
        opts.port = port
        opts.silent = 1 if silent else 0
        if max_value_bytes is not None:
            opts.max_value_bytes = max_value_bytes
        handle = ctypes.c_void_p()
        check(f"cannot start a store on {host}:{port}",
              _lib.store_server_start(ctypes.byref(opts), ctypes.byref(handle)))
        self._h = handle
        self.host = host
        self.port = _lib.store_server_port(handle)

    def stop(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            _lib.store_server_free(h)

    def __del__(self):
        self.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


__all__ = ["MusterError", "StoreClient", "StoreServer"]
