"""Cross-process measurements over ZMQ ``ipc://``: send -> received -> decoded, and throughput.

The sender (this process) PUSHes messages to a receiver process (``spawn``), which decodes
each one with the same method, touches every tensor (:func:`bench.runner.touch`) and PUSHes
back an ack: the ``time.perf_counter_ns()`` at which the message was decoded and touched
(CLOCK_MONOTONIC, one clock for every process on the machine) and what it touched.

- **latency**: one message at a time; from just before ``encode`` on the sender to the
  moment the receiver has decoded and touched it (the ack's own trip is not counted).
- **throughput**: a stream of messages with up to ``WINDOW`` in flight; payload bytes
  (:func:`mmcodec.payloads.tensor_bytes`, what any codec must move) per second, from the first
  send until the last message is decoded.

mmcodec goes through :mod:`mmcodec.transport.zmq` when it exists (else through the same
``send_multipart(copy=False)`` / ``recv_multipart(copy=False)`` path as the baselines);
the baselines send their frames with ``send_multipart(copy=False)``, receive with
``recv_multipart(copy=False)`` and decode the received frames' buffers. The method
"mmcodec shm" (:data:`SHM_METHOD`) is mmcodec through the transport with a
:class:`~mmcodec.transport.shm.SharedMemoryPool` on this side and an attacher on the
receiver's: frames of 64 KiB and more are copied once into shared memory instead of
crossing ``ipc://``.

Protocol on the data socket: a one-frame JSON control message ``{"method", "count"}`` (or
``{"method": null}`` to stop), acked once, then ``count`` data messages, each acked.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import os
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import zmq

from bench.baselines import Baseline
from bench.runner import MMCODEC, Budget, Mmcodec, Stats, method_by_name, touch
from mmcodec.domain.multimodal import MultiModalKwargsItems
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import tensor_bytes

__all__ = [
    "MMCODEC_SHM",
    "SHM_METHOD",
    "WINDOW",
    "CrossResult",
    "MmcodecShm",
    "Receiver",
    "shm_available",
    "shm_pool_bytes",
    "transport_module",
]

WINDOW: Final = 4
"""Messages in flight at most while measuring throughput."""

_ACK = struct.Struct("<qqq")  # decoded-at ns, tensor references touched, their bytes
_ERROR: Final = -1
_TIMEOUT_MS: Final = 120_000


MMCODEC_SHM: Final = "mmcodec shm"


class MmcodecShm(Mmcodec):
    """mmcodec with large frames in shared memory: in-process, the same codec as mmcodec;
    across processes, the transport with a pool (sender) and an attacher (receiver)."""

    def __init__(self) -> None:
        super().__init__()
        self.name = MMCODEC_SHM


SHM_METHOD: Final = MmcodecShm()


def transport_module() -> ModuleType | None:
    """:mod:`mmcodec.transport.zmq` if it exists, else None."""
    try:
        return importlib.import_module("mmcodec.transport.zmq")
    except ImportError:
        return None


def _shm_module() -> ModuleType | None:
    try:
        return importlib.import_module("mmcodec.transport.shm")
    except ImportError:
        return None


def shm_available() -> bool:
    """Whether this machine can run "mmcodec shm" (the module exists, Linux /dev/shm)."""
    shm = _shm_module()
    return shm is not None and Path(shm.SEGMENT_DIR).is_dir() and sys.platform == "linux"


def shm_pool_bytes(wanted: int) -> int:
    """The pool size "mmcodec shm" can have here: ``wanted``, at most half of /dev/shm's free
    space (a default Docker container has 64 MB), 0 without shared memory."""
    shm = _shm_module()
    if shm is None or not shm_available():
        return 0
    stats = os.statvfs(shm.SEGMENT_DIR)
    return min(wanted, stats.f_bavail * stats.f_frsize // 2)


def _method(name: str) -> Baseline:
    return SHM_METHOD if name == MMCODEC_SHM else method_by_name(name)


def _send(
    sock: zmq.Socket[Any], method: Baseline, obj: Any, transport: ModuleType | None, pool: Any
) -> None:
    if transport is not None and method.name == MMCODEC_SHM:
        transport.send(sock, mm, obj, shm=pool)
    elif transport is not None and method.name == MMCODEC:
        transport.send(sock, mm, obj)
    else:
        sock.send_multipart(method.encode(obj), copy=False)


def _recv(
    sock: zmq.Socket[Any], method: Baseline, transport: ModuleType | None, attacher: Any
) -> Any:
    if transport is not None and method.name in (MMCODEC, MMCODEC_SHM):
        # A receiver with an attacher reads plain messages too; "mmcodec" never sends
        # shared-memory ones, so both methods can share it.
        return transport.recv(sock, mm, mm.MultiModalKwargsItems, shm=attacher)
    parts = sock.recv_multipart(copy=False)
    return method.decode([p.buffer for p in parts])


# -- the receiver process ---------------------------------------------------------------------


def _receiver_main(data_address: str, ack_address: str, use_transport: bool) -> None:
    transport = transport_module() if use_transport else None
    shm = _shm_module() if transport is not None and shm_available() else None
    attacher = shm.SharedMemoryAttacher() if shm is not None else None
    ctx = zmq.Context()
    data = ctx.socket(zmq.PULL)
    ack = ctx.socket(zmq.PUSH)
    data.setsockopt(zmq.LINGER, 0)
    ack.setsockopt(zmq.LINGER, 0)
    data.connect(data_address)
    ack.connect(ack_address)
    clock = time.perf_counter_ns
    try:
        ack.send(_ACK.pack(0, 0, 0))  # ready
        while True:
            control = json.loads(data.recv())
            name = control["method"]
            if name is None:
                return
            try:
                method = _method(name)
            except KeyError:
                ack.send(_ACK.pack(_ERROR, _ERROR, _ERROR))
                continue
            if method.name == MMCODEC_SHM and attacher is None:
                ack.send(_ACK.pack(_ERROR, _ERROR, _ERROR))
                continue
            ack.send(_ACK.pack(0, 0, 0))
            for _ in range(control["count"]):
                obj = _recv(data, method, transport, attacher)
                count, nbytes = touch(obj)
                decoded_at = clock()
                del obj
                ack.send(_ACK.pack(decoded_at, count, nbytes))
    finally:
        data.close()
        ack.close()
        ctx.term()
        if attacher is not None:
            attacher.close()


# -- the sender -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CrossResult:
    """One method on one payload across processes."""

    payload: str
    method: str
    latency: Stats
    """Seconds from before encode to decoded and touched in the receiver."""
    throughput: float
    """Payload bytes per second, streaming with up to ``WINDOW`` messages in flight."""
    messages: int
    """Messages in the throughput stream."""


class Receiver:
    """A receiver process and the sender's two sockets; use as a context manager.

    ``shm_bytes`` sizes the sender's pool for "mmcodec shm" (made on first use): give it
    room for ``WINDOW + 1`` messages, or the throughput stream measures the fallback
    to ZMQ for the messages that find the pool full.
    """

    def __init__(self, *, use_transport: bool = True, shm_bytes: int = 256 << 20) -> None:
        self.transport = transport_module() if use_transport else None
        self.shm_bytes = shm_bytes
        self._pool: Any = None
        self._dir = tempfile.TemporaryDirectory(prefix="mmcodec-bench-")
        base = Path(self._dir.name)
        self._ctx = zmq.Context()
        self._data = self._ctx.socket(zmq.PUSH)
        self._ack = self._ctx.socket(zmq.PULL)
        for sock in (self._data, self._ack):
            sock.setsockopt(zmq.LINGER, 0)
        data_address, ack_address = f"ipc://{base / 'data'}", f"ipc://{base / 'ack'}"
        self._data.bind(data_address)
        self._ack.bind(ack_address)
        spawn = multiprocessing.get_context("spawn")
        self._process = spawn.Process(
            target=_receiver_main,
            args=(data_address, ack_address, self.transport is not None),
            name="mmcodec-bench-receiver",
            daemon=True,
        )
        self._process.start()
        self._wait_ack()  # ready

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(zmq.ZMQError):
                self._data.send(json.dumps({"method": None}).encode(), flags=zmq.NOBLOCK)
            self._process.join(10)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(5)
        self._data.close()
        self._ack.close()
        self._ctx.term()
        self._dir.cleanup()
        if self._pool is not None:
            self._pool.close()

    def _pool_for(self, method: Baseline) -> Any:
        """The shared-memory pool when ``method`` is "mmcodec shm", else None."""
        if method.name != MMCODEC_SHM:
            return None
        if self._pool is None:
            shm = _shm_module()
            assert shm is not None
            self._pool = shm.SharedMemoryPool(self.shm_bytes)
        return self._pool

    def _wait_ack(self) -> tuple[int, int, int]:
        if not self._ack.poll(_TIMEOUT_MS):
            alive = "alive" if self._process.is_alive() else f"exit {self._process.exitcode}"
            raise RuntimeError(f"no ack from the receiver in {_TIMEOUT_MS // 1000} s ({alive})")
        result: tuple[int, int, int] = _ACK.unpack(self._ack.recv())
        return result

    def _start(self, method: Baseline, count: int) -> None:
        self._data.send(json.dumps({"method": method.name, "count": count}).encode())
        if self._wait_ack()[0] == _ERROR:
            raise RuntimeError(f"the receiver does not know method {method.name!r}")

    def _check(self, ack: tuple[int, int, int], expected: tuple[int, int], what: str) -> int:
        decoded_at, count, nbytes = ack
        if (count, nbytes) != expected:
            raise RuntimeError(
                f"{what}: receiver touched {count} tensors / {nbytes} bytes, "
                f"expected {expected[0]} / {expected[1]}"
            )
        return decoded_at

    def latencies(self, method: Baseline, items: MultiModalKwargsItems, count: int) -> list[float]:
        """``count`` messages one at a time; seconds from before encode to decoded."""
        expected = touch(items)
        self._start(method, count)
        pool = self._pool_for(method)
        out = []
        for _ in range(count):
            t0 = time.perf_counter_ns()
            _send(self._data, method, items, self.transport, pool)
            decoded_at = self._check(self._wait_ack(), expected, method.name)
            out.append((decoded_at - t0) / 1e9)
        return out

    def stream(self, method: Baseline, items: MultiModalKwargsItems, count: int) -> float:
        """``count`` messages with up to ``WINDOW`` in flight; seconds until the last decoded."""
        expected = touch(items)
        self._start(method, count)
        pool = self._pool_for(method)
        in_flight = 0
        decoded_at = 0
        t0 = time.perf_counter_ns()
        for _ in range(count):
            if in_flight == WINDOW:
                decoded_at = self._check(self._wait_ack(), expected, method.name)
                in_flight -= 1
            _send(self._data, method, items, self.transport, pool)
            in_flight += 1
        while in_flight:
            decoded_at = self._check(self._wait_ack(), expected, method.name)
            in_flight -= 1
        return (decoded_at - t0) / 1e9

    def measure(
        self,
        payload: str,
        methods: Sequence[Baseline],
        items: MultiModalKwargsItems,
        budget: Budget,
        rounds: int = 5,
    ) -> list[CrossResult]:
        """Latency and throughput of each method, side by side in ``rounds`` rounds.

        Each method is warmed up (``budget.warmup`` messages) and probed once; then every
        round gives each method a block of latency samples (one more warm-up message
        first, not counted) worth ``budget.seconds / rounds``, and a throughput stream
        of ``1 / rounds`` of its messages.
        """
        probes = {m.name: self.latencies(m, items, budget.warmup + 1)[-1] for m in methods}
        latency: dict[str, list[float]] = {m.name: [] for m in methods}
        streamed: dict[str, tuple[int, float]] = {m.name: (0, 0.0) for m in methods}
        for _ in range(rounds):
            for m in methods:
                probe = max(probes[m.name], 1e-6)
                reps = int(budget.seconds / rounds / probe)
                reps = max(-(-budget.min_reps // rounds), min(budget.max_reps // rounds, reps))
                latency[m.name] += self.latencies(m, items, reps + 1)[1:]
                messages = int(2 * budget.seconds / rounds / probe)
                messages = max(-(-budget.min_reps // rounds), min(100 // rounds, messages))
                count, seconds = streamed[m.name]
                streamed[m.name] = (count + messages, seconds + self.stream(m, items, messages))
        size = tensor_bytes(items)
        results = []
        for m in methods:
            count, seconds = streamed[m.name]
            results.append(
                CrossResult(
                    payload, m.name, Stats.of(latency[m.name]), count * size / seconds, count
                )
            )
        return results
