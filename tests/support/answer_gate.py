"""A TCP relay in front of a real server that can stop passing its answers on: requests still reach
the server and are carried out, their answers never reach the client. Before a kill -9 it turns
"the server died after it took messages and before its answer left" from a race the test may
lose into a state the test can wait for; the kill then makes it final (the relay closes the
client's connection when the server's closes, as a dead server's would be).

Only the answers to the calls named in ``held_calls`` are held (by default ReceiveMessage and
SendMessage/SendMessageBatch, the calls whose lost answers the kill test is about): a client whose
DeleteMessageBatch was under way when the hold began gets its answer and goes on to its next
receive, instead of waiting out its read timeout on a delete while the test waits for a receive
that can't come (2 of 5 loaded runs of the FIFO kill test, 2026-11-25). The call is read from the
request's own bytes (``X-Amz-Target: AmazonSQS.<Action>``, or ``Action=<Action>`` in a query-protocol
body), which come before the answer on the same connection.

Of those, only an answer that carries a ``MessageId`` is dropped: a receive that took messages, a
send that wrote them. An empty receive's answer is buffered whole (by its Content-Length) and passed
on, so its receiver goes on to another receive through the gate, one that can take something. When
every receive under way through the victim was empty as the hold began, holding that empty answer
left those receivers waiting out their 60 s read timeout with nothing taken, and the kill test
waited for a take that could not come (main, 2026-11-25: 1 failure in 7 runs of its file).

A dropped answer is buffered whole first, and the deliveries of a dropped ReceiveMessage answer (JSON
protocol: MessageId and ApproximateReceiveCount) are kept in ``held``: the messages the server took
whose answer never reached a client, by name, so a test can follow each of them to its redelivery.
"""

from __future__ import annotations

import json
import socket
import threading


class AnswerGate:
    def __init__(self, target_url: str, held_calls: tuple[bytes, ...] = (b"ReceiveMessage", b"SendMessage")) -> None:
        self.held_calls = held_calls
        host, port = target_url.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.holding = threading.Event()  # set: answers are dropped
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.closed = False
        self.lock = threading.Lock()
        self.held: list[tuple[str, int]] = []  # (MessageId, ApproximateReceiveCount) of each delivery dropped
        self.dropped = 0  # answers dropped
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
            # The last request on this connection: whether its call is held, and its answer so far.
            call = {"held": False, "buf": b""}
            threading.Thread(target=self._pump, args=(client, upstream, False, call), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True, call), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool, call: dict) -> None:
        try:
            while data := src.recv(65536):
                if not answers:
                    if b"AmazonSQS." in data or b"Action=" in data:  # a new request begins
                        call.update(held=any(name in data for name in self.held_calls), buf=b"")
                    dst.sendall(data)
                elif call["held"] and (self.holding.is_set() or call["buf"]):
                    self._hold(dst, call, data)
                else:
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

    def _hold(self, dst: socket.socket, call: dict, data: bytes) -> None:
        """Buffer a held call's answer until its Content-Length is in: then dropped if it carries a
        MessageId (its deliveries kept in ``held``), else passed on whole."""
        buf = call["buf"] = call["buf"] + data
        head, sep, body = buf.partition(b"\r\n\r\n")
        lines = head.lower().split(b"\r\n")
        length = next((int(x.split(b":", 1)[1]) for x in lines if x.startswith(b"content-length:")), None)
        if not sep or length is None or len(body) < length:
            return
        call["buf"] = b""
        if b"MessageId" not in body:
            dst.sendall(buf)
            return
        try:
            messages = json.loads(body[:length]).get("Messages", [])
        except ValueError:
            messages = []  # not a JSON protocol answer: dropped all the same, its deliveries unnamed
        with self.lock:
            self.dropped += 1
            self.held += [
                (m["MessageId"], int(m.get("Attributes", {}).get("ApproximateReceiveCount", 0))) for m in messages
            ]

    def held_deliveries(self) -> list[tuple[str, int]]:
        with self.lock:
            return list(self.held)

    def dropped_answers(self) -> int:
        with self.lock:
            return self.dropped

    def close(self) -> None:
        self.closed = True
        self.listener.close()
