# SPDX-License-Identifier: MIT
"""Loading libmuster and declaring the C functions the binding calls.

Pure ctypes, no build step. The library is looked for, in order, at
$MUSTER_LIB, in the build tree next to this source tree (build/lib), next to
an installed copy of this package (PREFIX/lib), and where the dynamic loader
finds it.
"""

import ctypes
import ctypes.util
import glob
import os

_here = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("MUSTER_LIB")
    if env:
        yield env
    repo = os.path.dirname(os.path.dirname(_here))
    yield from sorted(glob.glob(os.path.join(repo, "build", "lib", "libmuster.so*")))
    # installed: PREFIX/lib/pythonX.Y/dist-packages/muster -> PREFIX/lib
    prefix_lib = os.path.normpath(os.path.join(_here, "..", "..", ".."))
    yield from sorted(glob.glob(os.path.join(prefix_lib, "libmuster.so*")))
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


class TrackerOpts(ctypes.Structure):
    """mu_tracker_opts_t (include/muster/tracker.h); field order matters."""
    _fields_ = [("host", c_char_p), ("port", c_int), ("port_end", c_int),
                ("silent", c_int), ("reuse_addr", c_int), ("timeout", c_double),
                ("max_frame", c_uint), ("max_keys", c_uint),
                ("max_per_conn", c_uint)]


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

tracker_opts_init = _fn("mu_tracker_opts_init", None, P(TrackerOpts))
tracker_start = _fn("mu_tracker_start", c_int, P(TrackerOpts), P(c_void_p))
tracker_port = _fn("mu_tracker_port", c_int, c_void_p)
tracker_stop_key = _fn("mu_tracker_stop_key", c_char_p, c_void_p)
tracker_stop = _fn("mu_tracker_stop", None, c_void_p)
tracker_free = _fn("mu_tracker_free", None, c_void_p)

client_connect = _fn("mu_tracker_client_connect", c_int, c_char_p, c_int, c_int,
                     P(c_void_p))
client_close = _fn("mu_tracker_client_close", None, c_void_p)
client_summary = _fn("mu_tracker_client_summary", c_int, c_void_p, c_int,
                     P(c_void_p))
summary_text = _fn("mu_tracker_summary_text", c_int, c_char_p, P(c_void_p))

session_request = _fn("mu_session_request", c_int, c_char_p, c_int, c_char_p,
                      c_double, c_double, c_int, c_int, P(c_void_p))
session_connect = _fn("mu_session_connect", c_int, c_char_p, c_int, c_char_p,
                      c_double, c_int, P(c_void_p))
session_fd = _fn("mu_session_fd", c_int, c_void_p)
session_peer = _fn("mu_session_peer", c_char_p, c_void_p)
session_server_key = _fn("mu_session_server_key", c_char_p, c_void_p)
session_close = _fn("mu_session_close", None, c_void_p)

# Codes of include/muster/common.h that callers branch on.
MU_EBIND = -1008
MU_EMISMATCH = -1006


def take_string(ptr):
    """Copy a char * the library handed over, then free it with mu_free."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        free(ptr)


class MusterError(RuntimeError):
    """A libmuster call failed; .code is the negative error code."""

    def __init__(self, what, code):
        super().__init__(f"{what}: {strerror(code).decode()}")
        self.code = code


def check(what, rc):
    if rc != 0:
        raise MusterError(what, rc)
