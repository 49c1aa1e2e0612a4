# SPDX-License-Identifier: MIT
"""Metadata exchange (NIXL-style) backed by libmuster.

`Agent` publishes and fetches named metadata blobs through P2P sockets,
etcd or a TCPStore; see include/muster/md.h for the semantics. Exchange
calls return an operation id; `wait(op)` blocks for its result and
`next_event()` reads the completion queue.
"""

import ctypes

from . import _lib
from ._lib import MusterError, check

KINDS = {1: "sent", 2: "fetched", 3: "invalidated", 4: "remote_loaded",
         5: "remote_dropped"}


def _enc(s):
    return None if s is None else s.encode()


def _peer(peer):
    if peer is None:
        return None
    ip, port = peer
    p = _lib.MdPeer(ip.encode(), port)
    return ctypes.byref(p), p


def _take(ptr, n):
    try:
        return ctypes.string_at(ptr, n.value) if n.value else b""
    finally:
        _lib.free(ptr)


class Agent:
    """An md agent (mu_md_agent_t)."""

    def __init__(self, name, listen=False, listen_host="0.0.0.0",
                 listen_port=8888, etcd_endpoints=None, etcd_namespace=None,
                 tcpstore_endpoint=None, use_env=True, etcd_watch_timeout=5.0,
                 lease_ttl=10.0, store_timeout=None, op_timeout=None,
                 remote_cache_max=None, listen_budget=None):
        """store_timeout, op_timeout: seconds; None leaves them to the
        library (for a TCPStore, $MUSTER_/NIXL_TCPSTORE_TIMEOUT_MS and
        _OP_TIMEOUT_MS, else 30 s and 5 s). remote_cache_max: bytes the
        cache of other agents' metadata may hold (None: 128 MiB); past it
        the least wanted agents are evicted (include/muster/md.h).
        listen_budget: a dict with any of conn_bytes, total_bytes, grace
        (mu_budget_t) for the listener; the rest keep their defaults."""
        o = _lib.MdOpts()
        _lib.md_opts_init(o)
        self._keep = [_enc(name), _enc(listen_host), _enc(etcd_endpoints),
                      _enc(etcd_namespace), _enc(tcpstore_endpoint)]
        (o.name, o.listen_host, o.etcd_endpoints, o.etcd_namespace,
         o.tcpstore_endpoint) = self._keep
        o.listen = 1 if listen else 0
        o.listen_port = listen_port
        o.no_env = 0 if use_env else 1
        o.etcd_watch_timeout = etcd_watch_timeout
        o.lease_ttl = lease_ttl
        o.store_timeout = store_timeout or 0.0
        o.op_timeout = op_timeout or 0.0
        o.remote_cache_max = remote_cache_max or 0
        for field, value in (listen_budget or {}).items():
            setattr(o.listen_budget, field, value)
        err = ctypes.create_string_buffer(512)
        h = ctypes.c_void_p()
        rc = _lib.md_agent_new(ctypes.byref(o), ctypes.byref(h), err, len(err))
        # the reason in the library's words (both stores configured, a bad
        # endpoint, a port in use), not only the code's generic text
        check(f"cannot create agent {name}", rc, err.value.decode(errors="replace"))
        self._h = h
        self.name = name

    @property
    def listen_port(self):
        return _lib.md_listen_port(self._h)

    @property
    def backend(self):
        return _lib.md_backend_name(self._h).decode()

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            _lib.md_agent_free(h)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # local
    def set_local(self, payload, label=None):
        p = bytes(payload)
        check("set_local", _lib.md_set_local(self._h, _enc(label), p, len(p)))

    def set_local_blob(self, blob, label=None):
        b = bytes(blob)
        check("set_local_blob", _lib.md_set_local_blob(self._h, _enc(label), b, len(b)))

    def get_local(self, label=None):
        ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
        check("get_local", _lib.md_get_local(self._h, _enc(label), ctypes.byref(ptr), ctypes.byref(n)))
        return _take(ptr, n)

    # exchange
    def _op(self, what, fn, *args):
        op = ctypes.c_uint64()
        check(what, fn(self._h, *args, ctypes.byref(op)))
        return op.value

    def send_local(self, peer=None, label=None):
        p = _peer(peer)
        return self._op("send_local", _lib.md_send_local, p[0] if p else None, _enc(label))

    def fetch_remote(self, name, peer=None, label=None):
        p = _peer(peer)
        return self._op(f"fetch_remote {name}", _lib.md_fetch_remote, name.encode(),
                        p[0] if p else None, _enc(label))

    def invalidate_local(self, peer=None):
        p = _peer(peer)
        return self._op("invalidate_local", _lib.md_invalidate_local, p[0] if p else None)

    def wait(self, op, timeout=None):
        """The status of op (0 or a negative muster code). Raises
        MusterTimeoutError (a TimeoutError) when op is not done in time."""
        st = ctypes.c_int()
        rc = _lib.md_wait(self._h, op, -1 if timeout is None else int(timeout * 1000),
                          ctypes.byref(st))
        check(f"wait for operation {op}", rc)
        return st.value

    @property
    def event_fd(self):
        return _lib.md_event_fd(self._h)

    def next_event(self):
        """The oldest queued event as a dict, or None."""
        ev = _lib.MdEvent()
        if _lib.md_next_event(self._h, ctypes.byref(ev)) != 0:
            return None
        return {"op": ev.op, "kind": KINDS.get(ev.kind, ev.kind), "status": ev.status,
                "name": ev.name.decode(errors="replace"),
                "detail": ev.detail.decode(errors="replace")}

    # remote
    def load_remote(self, blob, label=None):
        b = bytes(blob)
        name = ctypes.create_string_buffer(256)
        check("load_remote", _lib.md_load_remote(self._h, _enc(label), b, len(b), name, 256))
        return name.value.decode()

    def check_remote(self, name):
        return _lib.md_check_remote(self._h, name.encode()) == 0

    def get_remote(self, name, label=None):
        ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(f"get_remote {name}", _lib.md_get_remote(self._h, name.encode(), _enc(label),
                                                      ctypes.byref(ptr), ctypes.byref(n)))
        return _take(ptr, n)

    def invalidate_remote(self, name):
        check(f"invalidate_remote {name}", _lib.md_invalidate_remote(self._h, name.encode()))

    @property
    def remote_bytes(self):
        """What the remote cache holds, in the bytes remote_cache_max counts."""
        return _lib.md_remote_bytes(self._h)

    def list_remote(self):
        v, n = ctypes.POINTER(ctypes.c_char_p)(), ctypes.c_size_t()
        check("list_remote", _lib.md_list_remote(self._h, ctypes.byref(v), ctypes.byref(n)))
        try:
            return sorted(v[i].decode() for i in range(n.value))
        finally:
            _lib.md_strv_free(v)


def blob_make(name, payload):
    ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
    p = bytes(payload)
    check("blob_make", _lib.md_blob_make(name.encode(), p, len(p), ctypes.byref(ptr), ctypes.byref(n)))
    return _take(ptr, n)


def blob_name(blob):
    b = bytes(blob)
    name = ctypes.create_string_buffer(256)
    check("blob_name", _lib.md_blob_name(b, len(b), name, 256))
    return name.value.decode()


def blob_payload(blob):
    # the payload points into the blob: into a ctypes buffer of ours,
    # alive until it is copied out
    b = bytes(blob)
    buf = ctypes.create_string_buffer(b, len(b))
    ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
    check("blob_payload", _lib.md_blob_payload(buf, len(b), ctypes.byref(ptr), ctypes.byref(n)))
    return ctypes.string_at(ptr.value, n.value) if n.value else b""


__all__ = ["Agent", "MusterError", "blob_make", "blob_name", "blob_payload"]
