"""A TCP relay on loopback in front of a service, for tests that need the
way to it slow or broken: `held` (connections are accepted but nothing is
forwarded until release()), or cut (cut() closes every relayed connection
and turns new ones away until restore())."""

import socket
import threading

HOST = "127.0.0.1"


def pump(src, dst):
    """Copy src to dst until either side ends, then shut both down."""
    try:
        src.settimeout(None)
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Relay:
    """Relays HOST:self.port to HOST:target_port. `accepted` is set once a
    client has connected; a held connection waits at most hold_limit s."""

    def __init__(self, target_port, held=False, hold_limit=30.0):
        self.target, self.hold_limit = target_port, hold_limit
        self.srv = socket.create_server((HOST, 0))
        self.srv.settimeout(0.2)
        self.port = self.srv.getsockname()[1]
        self.lock = threading.Lock()
        self.socks = []
        self.is_cut = self.done = False
        self.gate, self.accepted = threading.Event(), threading.Event()
        if not held:
            self.gate.set()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.done:
            try:
                down, _ = self.srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                if self.is_cut:
                    down.close()
                    continue
                self.socks.append(down)
            self.accepted.set()
            threading.Thread(target=self._serve, args=(down,), daemon=True).start()

    def _serve(self, down):
        if not self.gate.wait(self.hold_limit) or self.done:
            return
        try:
            up = socket.create_connection((HOST, self.target), timeout=5)
        except OSError:
            down.close()
            return
        with self.lock:
            if self.is_cut:
                up.close()
                down.close()
                return
            self.socks.append(up)
        threading.Thread(target=pump, args=(up, down), daemon=True).start()
        pump(down, up)

    def release(self):
        """Held connections go through, and so do later ones."""
        self.gate.set()

    def cut(self):
        with self.lock:
            self.is_cut = True
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.socks = []

    def restore(self):
        with self.lock:
            self.is_cut = False

    def close(self):
        self.done = True
        self.gate.set()
        self.cut()
        self.thread.join(timeout=5)
        self.srv.close()
