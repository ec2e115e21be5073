"""Sockets that a test closes for sure, whatever happens."""

from __future__ import annotations

from typing import Any

import zmq


class Sockets:
    """Makes sockets of one context; :meth:`close` closes them all and ends the context.

    Holding every socket here also keeps pyzmq from warning about a socket collected
    while open when a test's locals go away.
    """

    def __init__(self) -> None:
        self.context: zmq.Context[Any] = zmq.Context()
        self._open: list[zmq.Socket[Any]] = []

    def __call__(self, kind: int, **options: int) -> zmq.Socket[Any]:
        socket: zmq.Socket[Any] = self.context.socket(kind)
        self._open.append(socket)
        for name, value in options.items():
            socket.setsockopt(getattr(zmq, name), value)
        return socket

    def close(self) -> None:
        for socket in self._open:
            socket.close(linger=0)
        self.context.term()
