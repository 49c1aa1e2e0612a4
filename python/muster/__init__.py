# SPDX-License-Identifier: MIT
"""Python binding for muster (ctypes over libmuster; no build step).

    from muster import Tracker, connect_tracker
    tracker = Tracker(port=9190)          # as tvm.rpc.tracker.Tracker
    client = connect_tracker("127.0.0.1", tracker.port)
    print(client.text_summary())
    tracker.terminate()

    llm = LLM("models/stories260K/stories260K.gguf")   # or stages=["h:p", ...]
    print(llm.generate("Once upon a time", max_tokens=100, temperature=0))
"""

from ._lib import (MusterConnectionError, MusterConnectionRefusedError, MusterError,
                   MusterTimeoutError, version as _version)
from . import md
from .llm import LLM
from .store import StoreClient, StoreServer
from .tracker import Session, Tracker, TrackerSession, connect, connect_tracker

__version__ = _version().decode()
__all__ = ["LLM", "md", "MusterConnectionError", "MusterConnectionRefusedError", "MusterError",
           "MusterTimeoutError", "Session", "StoreClient", "StoreServer", "Tracker",
           "TrackerSession", "connect", "connect_tracker"]
