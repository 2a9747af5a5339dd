"""A TCP relay that holds each chunk a client sends for a while before passing it on: a Redis across a
slow network, so that two round trips of one request are far apart in time, as they are in production
under load, and races between them show."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType


class LaggyRelay:
    """Listens on loopback; each connection is relayed to `upstream`, client to server `delay_s` late."""

    def __init__(self, upstream: tuple[str, int], delay_s: float) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, self.delay_s), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, 0.0), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, delay_s: float) -> None:
        try:
            while chunk := source.recv(65536):
                if delay_s:
                    time.sleep(delay_s)  # the network's latency, not a wait for anything
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, target):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self.listener.close()
        for s in sockets:
            s.close()

    def __enter__(self) -> LaggyRelay:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
