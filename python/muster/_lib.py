# SPDX-License-Identifier: MIT
"""Loading libmuster and declaring the C functions the binding calls.

Pure ctypes, no build step. The library is looked for, in order, at
$MUSTER_LIB, in the build tree next to this source tree (build/lib), next to
an installed copy of this package (PREFIX/lib), and where the dynamic loader
finds it by its soname, libmuster.so.0.
"""

import atexit
import ctypes
import ctypes.util
import errno as _errno
import glob
import logging
import os

_here = os.path.dirname(os.path.abspath(__file__))
# libmuster's soname: its major version (CMakeLists.txt's SOVERSION)
_SONAME = "libmuster.so.0"


def _candidates():
    env = os.environ.get("MUSTER_LIB")
    if env:
        yield env
    repo = os.path.dirname(os.path.dirname(_here))
    yield from sorted(glob.glob(os.path.join(repo, "build", "lib", "libmuster.so*")))
    # installed: PREFIX/lib/pythonX.Y/dist-packages/muster -> PREFIX/lib
    prefix_lib = os.path.normpath(os.path.join(_here, "..", "..", ".."))
    yield from sorted(glob.glob(os.path.join(prefix_lib, "libmuster.so*")))
    # a system install (Debian's python3-muster): the loader's search by
    # soname, whatever the multiarch directory
    yield _SONAME
    found = ctypes.util.find_library("muster")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as err:
            tried.append(f"{path}: {err}")
    raise ImportError("cannot load libmuster (build it with `make`, or set "
                      "MUSTER_LIB); tried: " + ("; ".join(tried) or "nothing found"))


lib = _load()

c_int, c_uint, c_double, c_char_p, c_void_p, c_size_t = (
    ctypes.c_int, ctypes.c_uint, ctypes.c_double, ctypes.c_char_p,
    ctypes.c_void_p, ctypes.c_size_t)


class Budget(ctypes.Structure):
    """mu_budget_t (include/muster/common.h)."""
    _fields_ = [("conn_bytes", c_size_t), ("total_bytes", c_size_t), ("grace", c_double)]


class TrackerOpts(ctypes.Structure):
    """mu_tracker_opts_t (include/muster/tracker.h); field order matters.

    Options structs mirrored here are sized (include/muster/common.h): the
    library reads only the fields this binding knows, so a library with
    fields added since still works with it; check_layouts() below makes
    sure every field mirrored here is where the library has it."""
    _fields_ = [("struct_size", c_size_t), ("host", c_char_p), ("port", c_int), ("port_end", c_int),
                ("silent", c_int), ("reuse_addr", c_int), ("timeout", c_double),
                ("max_frame", c_uint), ("max_keys", c_uint),
                ("max_per_conn", c_uint), ("max_keys_per_conn", c_uint),
                ("budget", Budget), ("metrics", c_void_p)]


class StoreServerOpts(ctypes.Structure):
    """mu_store_server_opts_t (include/muster/store.h)."""
    _fields_ = [("struct_size", c_size_t), ("host", c_char_p), ("port", c_int), ("max_key_bytes", c_size_t),
                ("max_value_bytes", c_size_t), ("max_keys", c_size_t),
                ("request_timeout", c_double), ("silent", c_int), ("budget", Budget),
                ("max_watches", c_size_t), ("max_watches_total", c_size_t),
                ("metrics", c_void_p)]


class StoreClientOpts(ctypes.Structure):
    """mu_store_client_opts_t (include/muster/store.h)."""
    _fields_ = [("struct_size", c_size_t), ("host", c_char_p), ("port", c_int), ("dialect", c_int),
                ("timeout_ms", c_int), ("raw_keys", c_int),
                ("max_value_bytes", c_size_t), ("connect_timeout_ms", c_int)]


class StoreValue(ctypes.Structure):
    """mu_store_value_t."""
    _fields_ = [("data", c_void_p), ("len", c_size_t)]


class MdOpts(ctypes.Structure):
    """mu_md_opts_t (include/muster/md.h)."""
    _fields_ = [("struct_size", c_size_t), ("name", c_char_p), ("listen", c_int), ("listen_host", c_char_p),
                ("listen_port", c_int), ("etcd_endpoints", c_char_p),
                ("etcd_namespace", c_char_p), ("tcpstore_endpoint", c_char_p),
                ("no_env", c_int), ("etcd_watch_timeout", c_double),
                ("lease_ttl", c_double), ("store_timeout", c_double),
                ("op_timeout", c_double), ("listen_budget", Budget),
                ("on_event", c_void_p), ("ud", c_void_p),
                ("remote_cache_max", c_size_t), ("metrics", c_void_p)]


class MdPeer(ctypes.Structure):
    _fields_ = [("ip", c_char_p), ("port", c_int)]


class MdEvent(ctypes.Structure):
    _fields_ = [("op", ctypes.c_uint64), ("kind", c_int), ("status", c_int),
                ("name", ctypes.c_char * 256), ("detail", ctypes.c_char * 256)]


class LlmOpts(ctypes.Structure):
    """mu_llm_opts_t (include/muster/llm.h)."""
    _fields_ = [("struct_size", c_size_t), ("tokenizer", c_char_p), ("threads", c_int),
                ("max_sequences", c_int), ("ctx", ctypes.c_int32), ("chunk", ctypes.c_int32),
                ("batch", c_int), ("io_timeout_ms", c_int), ("keepalive_ms", c_int),
                ("stages", ctypes.POINTER(c_char_p)), ("nstages", c_int), ("coord", c_void_p),
                ("cluster", c_void_p), ("device_sequences", c_int),
                ("replay_bytes", ctypes.c_uint64), ("kv_type", c_int)]


class LlmGenOpts(ctypes.Structure):
    """mu_llm_gen_opts_t (include/muster/llm.h); the callbacks are set as
    pointers (ctypes.cast of a CFUNCTYPE object kept alive by the caller)."""
    _fields_ = [("struct_size", c_size_t), ("max_tokens", ctypes.c_int32),
                ("temperature", c_double), ("top_k", ctypes.c_int32), ("top_p", c_double),
                ("seed", ctypes.c_uint64), ("no_bos", c_int), ("ignore_eos", c_int),
                ("prompt_ids", ctypes.POINTER(ctypes.c_int32)), ("nprompt_ids", c_size_t),
                ("ctx", ctypes.c_int32), ("on_token", c_void_p), ("on_logits", c_void_p),
                ("on_done", c_void_p), ("ud", c_void_p)]


class LlmStats(ctypes.Structure):
    """mu_llm_stats_t."""
    _fields_ = [("prompt_tokens", ctypes.c_int32), ("new_tokens", ctypes.c_int32),
                ("decode_steps", ctypes.c_int32), ("stop", c_int), ("prefill_ms", c_double),
                ("ttft_ms", c_double), ("decode_ms", c_double)]


class LlmInfo(ctypes.Structure):
    """mu_llm_info_t."""
    _fields_ = [("arch", c_char_p), ("format", c_int), ("layers", ctypes.c_int32),
                ("dim", ctypes.c_int32), ("vocab", ctypes.c_int32),
                ("trained_ctx", ctypes.c_int32), ("ctx", ctypes.c_int32),
                ("weight_bytes", ctypes.c_uint64), ("stages", c_int), ("where", c_char_p)]


# the callbacks of mu_llm_gen_opts_t
LLM_TOKEN_CB = ctypes.CFUNCTYPE(c_int, c_void_p, ctypes.c_int32, c_void_p, c_size_t)
LLM_LOGITS_CB = ctypes.CFUNCTYPE(None, c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int32)
LLM_DONE_CB = ctypes.CFUNCTYPE(None, c_void_p, c_int, ctypes.POINTER(LlmStats), c_char_p)


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


P = ctypes.POINTER
strerror = _fn("mu_strerror", c_char_p, c_int)
version = _fn("mu_version", c_char_p)
free = _fn("mu_free", None, c_void_p)
log_set_sink = _fn("mu_log_set_sink", None, c_void_p, c_void_p, c_int)
log_stderr_sink = ctypes.cast(lib.mu_log_stderr_sink, c_void_p)

def _sized_init(name, cls):
    """mu_X_opts_init(o) is a C macro: call what it expands to, with this
    binding's size of the struct, so the library fills only that much."""
    f = _fn(name, None, P(cls), c_size_t)
    return lambda o: f(ctypes.byref(o), ctypes.sizeof(o))


tracker_opts_init = _sized_init("mu_tracker_opts_init_size", TrackerOpts)
tracker_start = _fn("mu_tracker_start", c_int, P(TrackerOpts), P(c_void_p))
tracker_port = _fn("mu_tracker_port", c_int, c_void_p)
tracker_stop_key = _fn("mu_tracker_stop_key", c_char_p, c_void_p)
tracker_stop = _fn("mu_tracker_stop", None, c_void_p)
tracker_free = _fn("mu_tracker_free", None, c_void_p)

client_connect = _fn("mu_tracker_client_connect", c_int, c_char_p, c_int, c_int,
                     P(c_void_p))
client_close = _fn("mu_tracker_client_close", None, c_void_p)
client_stop = _fn("mu_tracker_client_stop", c_int, c_void_p, c_char_p, c_int)
client_summary = _fn("mu_tracker_client_summary", c_int, c_void_p, c_int,
                     P(c_void_p))
summary_text = _fn("mu_tracker_summary_text", c_int, c_char_p, P(c_void_p))

session_request = _fn("mu_session_request", c_int, c_char_p, c_int, c_char_p,
                      c_double, c_double, c_int, c_void_p, c_int, P(c_void_p))
session_connect = _fn("mu_session_connect", c_int, c_char_p, c_int, c_char_p,
                      c_double, c_void_p, c_int, P(c_void_p))
session_send = _fn("mu_session_send", c_int, c_void_p, c_char_p, c_size_t, c_int)
session_recv = _fn("mu_session_recv", c_int, c_void_p, c_void_p, c_size_t,
                   P(c_size_t), c_int)
session_shutdown = _fn("mu_session_shutdown", c_int, c_void_p)
session_peer = _fn("mu_session_peer", c_char_p, c_void_p)
session_server_key = _fn("mu_session_server_key", c_char_p, c_void_p)
session_close = _fn("mu_session_close", None, c_void_p)

store_server_opts_init = _sized_init("mu_store_server_opts_init_size", StoreServerOpts)
store_server_start = _fn("mu_store_server_start", c_int, P(StoreServerOpts), P(c_void_p))
store_server_port = _fn("mu_store_server_port", c_int, c_void_p)
store_server_free = _fn("mu_store_server_free", None, c_void_p)
store_client_opts_init = _sized_init("mu_store_client_opts_init_size", StoreClientOpts)
store_client_connect = _fn("mu_store_client_connect", c_int, P(StoreClientOpts), P(c_void_p))
store_client_close = _fn("mu_store_client_close", None, c_void_p)
store_client_dialect = _fn("mu_store_client_dialect", c_int, c_void_p)
_KEYS = P(c_char_p)
store_set = _fn("mu_store_set", c_int, c_void_p, c_char_p, c_char_p, c_size_t)
store_get = _fn("mu_store_get", c_int, c_void_p, c_char_p, P(StoreValue))
store_add = _fn("mu_store_add", c_int, c_void_p, c_char_p, ctypes.c_int64, P(ctypes.c_int64))
store_compare_set = _fn("mu_store_compare_set", c_int, c_void_p, c_char_p, c_char_p,
                        c_size_t, c_char_p, c_size_t, P(StoreValue))
store_check = _fn("mu_store_check", c_int, c_void_p, _KEYS, c_size_t, P(c_int))
store_wait = _fn("mu_store_wait", c_int, c_void_p, _KEYS, c_size_t, c_int)
store_delete = _fn("mu_store_delete", c_int, c_void_p, c_char_p, P(c_int))
store_num_keys = _fn("mu_store_num_keys", c_int, c_void_p, P(ctypes.c_int64))
store_append = _fn("mu_store_append", c_int, c_void_p, c_char_p, c_char_p, c_size_t)
store_multi_get = _fn("mu_store_multi_get", c_int, c_void_p, _KEYS, c_size_t, P(StoreValue))
store_multi_set = _fn("mu_store_multi_set", c_int, c_void_p, _KEYS, P(StoreValue), c_size_t)

_U64P = P(ctypes.c_uint64)
md_opts_init = _sized_init("mu_md_opts_init_size", MdOpts)
md_agent_new = _fn("mu_md_agent_new", c_int, P(MdOpts), P(c_void_p), c_char_p, c_size_t)
md_agent_free = _fn("mu_md_agent_free", None, c_void_p)
md_listen_port = _fn("mu_md_listen_port", c_int, c_void_p)
md_backend_name = _fn("mu_md_backend_name", c_char_p, c_void_p)
md_set_local = _fn("mu_md_set_local", c_int, c_void_p, c_char_p, c_char_p, c_size_t)
md_set_local_blob = _fn("mu_md_set_local_blob", c_int, c_void_p, c_char_p, c_char_p, c_size_t)
md_get_local = _fn("mu_md_get_local", c_int, c_void_p, c_char_p, P(c_void_p), P(c_size_t))
md_send_local = _fn("mu_md_send_local", c_int, c_void_p, c_void_p, c_char_p, _U64P)
md_fetch_remote = _fn("mu_md_fetch_remote", c_int, c_void_p, c_char_p, c_void_p, c_char_p, _U64P)
md_invalidate_local = _fn("mu_md_invalidate_local", c_int, c_void_p, c_void_p, _U64P)
md_wait = _fn("mu_md_wait", c_int, c_void_p, ctypes.c_uint64, c_int, P(c_int))
md_event_fd = _fn("mu_md_event_fd", c_int, c_void_p)
md_next_event = _fn("mu_md_next_event", c_int, c_void_p, P(MdEvent))
md_load_remote = _fn("mu_md_load_remote", c_int, c_void_p, c_char_p, c_char_p, c_size_t,
                     c_char_p, c_size_t)
md_check_remote = _fn("mu_md_check_remote", c_int, c_void_p, c_char_p)
md_get_remote = _fn("mu_md_get_remote", c_int, c_void_p, c_char_p, c_char_p, P(c_void_p),
                    P(c_size_t))
md_invalidate_remote = _fn("mu_md_invalidate_remote", c_int, c_void_p, c_char_p)
md_remote_bytes = _fn("mu_md_remote_bytes", c_size_t, c_void_p)
md_list_remote = _fn("mu_md_list_remote", c_int, c_void_p, P(P(c_char_p)), P(c_size_t))
md_strv_free = _fn("mu_md_strv_free", None, P(c_char_p))
md_blob_make = _fn("mu_md_blob_make", c_int, c_char_p, c_char_p, c_size_t, P(c_void_p),
                   P(c_size_t))
md_blob_name = _fn("mu_md_blob_name", c_int, c_char_p, c_size_t, c_char_p, c_size_t)
md_blob_payload = _fn("mu_md_blob_payload", c_int, c_void_p, c_size_t, P(c_void_p),
                      P(c_size_t))

_I32P = P(ctypes.c_int32)
llm_opts_init = _sized_init("mu_llm_opts_init_size", LlmOpts)
llm_open = _fn("mu_llm_open", c_int, c_char_p, P(LlmOpts), P(c_void_p), c_char_p, c_size_t)
llm_kv_type_parse = _fn("mu_llm_kv_type_parse", c_int, c_char_p, P(c_int), c_char_p, c_size_t)
llm_free = _fn("mu_llm_free", None, c_void_p)
llm_tokenizer = _fn("mu_llm_tokenizer", c_void_p, c_void_p)
llm_info = _fn("mu_llm_info", None, c_void_p, P(LlmInfo))
llm_gen_opts_init = _sized_init("mu_llm_gen_opts_init_size", LlmGenOpts)
llm_generate = _fn("mu_llm_generate", c_int, c_void_p, c_char_p, c_size_t, P(LlmGenOpts),
                   P(LlmStats), c_char_p, c_size_t)
llm_submit = _fn("mu_llm_submit", c_int, c_void_p, c_char_p, c_size_t, P(LlmGenOpts),
                 _U64P, c_char_p, c_size_t)
llm_cancel = _fn("mu_llm_cancel", None, c_void_p, ctypes.c_uint64)
llm_drain = _fn("mu_llm_drain", None, c_void_p)
tokenizer_encode = _fn("mu_tokenizer_encode", c_int, c_void_p, c_char_p, c_size_t, c_int,
                       P(_I32P), P(c_size_t))
tokenizer_decode = _fn("mu_tokenizer_decode", c_int, c_void_p, _I32P, c_size_t, c_int,
                       P(c_void_p), P(c_size_t))
tokenizer_vocab = _fn("mu_tokenizer_vocab", ctypes.c_int32, c_void_p)

layout_size = _fn("mu_layout_size", c_size_t, c_char_p)
layout_field = _fn("mu_layout_field", c_int, c_char_p, c_char_p, P(c_size_t), P(c_size_t))

# Every C struct this binding mirrors: (ctypes class, C type, sized). A
# sized options struct may be shorter here than in the library (fields
# added since keep their defaults); a plain data struct must match whole.
MIRRORED = [(Budget, "mu_budget_t", False), (TrackerOpts, "mu_tracker_opts_t", True),
            (StoreServerOpts, "mu_store_server_opts_t", True),
            (StoreClientOpts, "mu_store_client_opts_t", True),
            (StoreValue, "mu_store_value_t", False), (MdOpts, "mu_md_opts_t", True),
            (MdPeer, "mu_md_peer_t", False), (MdEvent, "mu_md_event_t", False),
            (LlmOpts, "mu_llm_opts_t", True), (LlmGenOpts, "mu_llm_gen_opts_t", True),
            (LlmStats, "mu_llm_stats_t", False), (LlmInfo, "mu_llm_info_t", False)]


def check_layouts(mirrored=None, library=None):
    """Raise ImportError, naming the struct, the field and both layouts,
    when a structure mirrored here does not match the library loaded:
    calls with it would read or write the wrong bytes."""
    where = f"libmuster {version().decode()} ({library or lib._name})"
    for cls, cname, sized in MIRRORED if mirrored is None else mirrored:
        size = layout_size(cname.encode())
        if size == 0:
            raise ImportError(f"the muster binding mirrors {cname}, which {where} does not "
                              "describe: use the binding that came with the library")
        for field, _ in cls._fields_:
            off, n = c_size_t(), c_size_t()
            mine = getattr(cls, field)
            if layout_field(cname.encode(), field.encode(), ctypes.byref(off),
                            ctypes.byref(n)) != 0:
                raise ImportError(f"the muster binding has {cname}.{field}, which {where} "
                                  "lacks: use the binding that came with the library")
            if (off.value, n.value) != (mine.offset, mine.size):
                raise ImportError(
                    f"{cname}.{field} is at offset {mine.offset} ({mine.size} bytes) in the "
                    f"muster binding but at {off.value} ({n.value} bytes) in {where}: use "
                    "the binding that came with the library")
        if not sized and ctypes.sizeof(cls) != size:
            raise ImportError(f"{cname} is {ctypes.sizeof(cls)} bytes in the muster binding "
                              f"but {size} in {where}: use the binding that came with the "
                              "library")


check_layouts()

def take_string(ptr):
    """Copy a char * the library handed over, then free it with mu_free."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        free(ptr)


class MusterError(RuntimeError):
    """A libmuster call failed; .code is the negative error code, .errno
    the errno it carries (None for muster's own codes), .detail the
    library's own words on why (or None when it gave none).

    Failures Python has a class for are raised as subclasses that are
    also that class: a timeout is a TimeoutError, a refused or lost
    connection a ConnectionError (see error())."""

    def __init__(self, what, code, detail=None):
        text = strerror(code).decode()
        super().__init__(f"{what}: {detail} ({text})" if detail else f"{what}: {text}")
        self.code = code
        self.detail = detail or None
        # -errno codes lie above muster's own range (include/muster/common.h)
        self.errno = -code if MU_ECODE_MAX < code < 0 else None


class MusterTimeoutError(MusterError, TimeoutError):
    """A call ran out of time (-ETIMEDOUT)."""


class MusterConnectionError(MusterError, ConnectionError):
    """The peer is gone: the connection was reset or closed under the call
    (-ECONNRESET, -EPIPE, -ECONNABORTED, -ENOTCONN, MU_EEOF)."""


class MusterConnectionRefusedError(MusterConnectionError, ConnectionRefusedError):
    """Nothing accepts connections at the address (-ECONNREFUSED)."""


# Codes of include/muster/common.h that callers branch on.
MU_EEOF = -1004
MU_EFAIL = -1005
MU_EMISMATCH = -1006
MU_EBIND = -1008
MU_ECODE_MIN, MU_ECODE_MAX = -1099, -1000  # muster's own codes

_CLASSES = {-_errno.ETIMEDOUT: MusterTimeoutError,
            -_errno.ECONNREFUSED: MusterConnectionRefusedError,
            -_errno.ECONNRESET: MusterConnectionError,
            -_errno.ECONNABORTED: MusterConnectionError,
            -_errno.EPIPE: MusterConnectionError,
            -_errno.ENOTCONN: MusterConnectionError,
            MU_EEOF: MusterConnectionError}


def error(what, code, detail=None):
    """The exception for a failed call's code: a MusterError, of the
    subclass that matches the code when there is one."""
    return _CLASSES.get(code, MusterError)(what, code, detail)


def check(what, rc, detail=None):
    if rc != 0:
        raise error(what, rc, detail)


# ---- the library's log lines go to Python's logging ----------------------
#
# Once, here at import: the sink is one setting for the whole process
# (include/muster/common.h), so no object of the binding installs its own.
# A line of the library's module M goes to the logger "muster.M" (a
# tracker's to "muster.tracker") at the matching level; lines past INFO
# are not even formatted unless route_logs(LOG_DEBUG) asks for them.
# Handlers, levels and format are the application's, as for any library.

LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3
_LEVELS = (logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG)
_SINK_T = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_char_p, c_void_p)


def _log_to_python(level, module, msg, ud):
    # called on the library's threads; an exception must not reach C
    try:
        logger = logging.getLogger("muster." + module.decode(errors="replace"))
        lvl = _LEVELS[level] if 0 <= level < len(_LEVELS) else logging.DEBUG
        if logger.isEnabledFor(lvl):
            logger.log(lvl, "%s", msg.decode(errors="replace"))
    except Exception:  # noqa: BLE001 - interpreter shutting down, say
        pass


_sink = _SINK_T(_log_to_python)  # kept alive as long as the module


def route_logs(max_level=LOG_INFO):
    """Send the library's lines up to max_level (LOG_*) to logging."""
    log_set_sink(ctypes.cast(_sink, c_void_p), None, max_level)


route_logs()
# Threads of the library that outlive the interpreter must not call into
# it: drop the sink before Python goes away.
atexit.register(log_set_sink, None, None, LOG_ERROR)
