"""A TCP relay in front of a real server that can stop passing its answers on: requests still reach
the server and are carried out, their answers never reach the client. Before a kill -9 it turns
"the server died after it took messages and before its answer left" from a race the test may
lose into a state the test can wait for; the kill then makes it final (the relay closes the
client's connection when the server's closes, as a dead server's would be).
"""

from __future__ import annotations

import socket
import threading


class AnswerGate:
    def __init__(self, target_url: str) -> None:
        host, port = target_url.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.holding = threading.Event()  # set: answers are dropped
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()  # the server is gone: refused, as it would be
                continue
            upstream.settimeout(None)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (answers and self.holding.is_set()):
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
