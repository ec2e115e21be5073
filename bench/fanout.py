"""``python -m bench.fanout`` (part of ``make bench``): one message to N readers on one host.

For Qwen2.5-VL's 12 MB item and the 151 MB 16-image request, to 1, 2 and 4 reader
processes behind one XPUB socket over ``ipc://``, three ways side by side in one run:

- ``mmcodec shm fan-out``: ``mmzmq.send(pub, mm, obj, shm=pool)`` with a
  ``SharedMemoryPool(readers=N)``; each frame is copied once, every reader decodes views;
- ``mmcodec ipc x N``: the same PUB send without shared memory; ZMQ writes the message
  to each subscriber's pipe (N kernel copies out, N in);
- ``pickle5 + shm``: how engines broadcast today: ``pickle.dumps(obj, protocol=5,
  buffer_callback=...)``, the pickle and its out-of-band buffers copied into a shared
  segment, a notification over the same PUB socket, each reader ``pickle.loads`` from the
  shared bytes (torch tensors pickle in band, so each reader copies them out). Its
  tensors are compacted first (outside the timing): pickled as they are, the 16-image
  request's views of one batch would write 2.4 GB.

Per case: the **sender's cost** (median time of one send call: encode or pickle, the
copy into shared memory, the ZMQ send), and **each reader's throughput** (payload bytes
per second while streaming with up to :data:`WINDOW` messages in flight, from the first
send to that reader's last decoded-and-touched message; the slowest reader is reported),
next to the memcpy bandwidth measured in the same run. Targets: the sender's cost for 4
readers at most 1.5 times that for 1; each reader at least half of memcpy.

The bench's own pickle baseline is the one place pickle appears, and only here: readers
unpickle what this process wrote (the shipped package never unpickles anything).
"""

from __future__ import annotations

import argparse
import mmap
import os
import pickle
import secrets
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import numpy as np
import torch
import zmq

from bench.runner import touch
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS, tensor_bytes

PAYLOAD_NAMES: Final = ("qwen2.5-vl", "qwen2.5-vl x16")
READERS: Final = (1, 2, 4)
SHM: Final = "mmcodec shm fan-out"
IPC: Final = "mmcodec ipc x N"
PICKLE: Final = "pickle5 + shm"
METHODS: Final = (SHM, IPC, PICKLE)
WINDOW: Final = 2
"""Messages in flight at most while streaming (the pools have room for WINDOW + 1)."""
TIMEOUT_MS: Final = 120_000
_ACK = struct.Struct("<qq")  # reader, decoded-and-touched at (perf_counter_ns)


class _Start(msgspec.Struct, array_like=True):
    method: str
    count: int


class _Pickled(msgspec.Struct, array_like=True):
    """Where a pickled message lies in the bench's segment: the pickle, then its buffers."""

    path: str
    spans: list[tuple[int, int]]


# -- readers ----------------------------------------------------------------------------------


def _reader(data: str, acks: str, reader: int) -> int:
    from mmcodec.transport import zmq as mmzmq
    from mmcodec.transport.shm import SharedMemoryAttacher

    context: zmq.Context[Any] = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.connect(data)
    ack = context.socket(zmq.PUSH)
    ack.connect(acks)
    attacher = SharedMemoryAttacher(reader=reader)
    mappings: dict[str, mmap.mmap] = {}
    clock = time.perf_counter_ns
    try:
        while True:
            start = msgspec.msgpack.decode(sub.recv(), type=_Start | None)
            if start is None:
                return 0
            ack.send(_ACK.pack(reader, 0))
            for _ in range(start.count):
                if start.method == PICKLE:
                    where = msgspec.msgpack.decode(sub.recv(), type=_Pickled)
                    mapping = mappings.get(where.path)
                    if mapping is None:
                        with open(where.path, "r+b") as file:
                            mapping = mappings[where.path] = mmap.mmap(file.fileno(), 0)
                    views = [memoryview(mapping)[a : a + n] for a, n in where.spans]
                    obj = pickle.loads(views[0], buffers=views[1:])  # the bench's own bytes
                    del views
                else:
                    obj = mmzmq.recv(sub, mm, mm.MultiModalKwargsItems, shm=attacher)
                touch(obj)
                ack.send(_ACK.pack(reader, clock()))
                del obj
    finally:
        attacher.close()
        sub.close(linger=0)
        ack.close(linger=1000)
        context.term()


# -- the sender -------------------------------------------------------------------------------


class _PickleRing:
    """The pickle baseline's shared memory: WINDOW + 1 slots, each a pickle and its buffers."""

    def __init__(self, slot_bytes: int) -> None:
        self.path = f"/dev/shm/mmcodec-bench-{secrets.token_hex(8)}"
        self.slot_bytes = slot_bytes
        size = slot_bytes * (WINDOW + 1)
        with open(self.path, "w+b") as file:
            file.truncate(size)
            self.mapping = mmap.mmap(file.fileno(), size)
        self.next = 0

    def put(self, obj: Any) -> bytes:
        buffers: list[pickle.PickleBuffer] = []
        data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        base = self.next * self.slot_bytes
        self.next = (self.next + 1) % (WINDOW + 1)
        spans = []
        offset = base
        for chunk in [memoryview(data), *(b.raw() for b in buffers)]:
            self.mapping[offset : offset + chunk.nbytes] = chunk
            spans.append((offset, chunk.nbytes))
            offset += (chunk.nbytes + 63) // 64 * 64
        return msgspec.msgpack.encode(_Pickled(self.path, spans))

    def close(self) -> None:
        self.mapping.close()
        os.unlink(self.path)


@dataclass(frozen=True, slots=True)
class FanoutResult:
    payload: str
    method: str
    readers: int
    send_s: float
    """Median seconds of one send call."""
    reader_bps: float
    """The slowest reader's payload bytes per second while streaming."""


class _Bench:
    def __init__(self, readers: int, directory: str) -> None:
        self.readers = readers
        self.context: zmq.Context[Any] = zmq.Context()
        self.pub = self.context.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.pub.setsockopt(zmq.SNDHWM, 0)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.acks = self.context.socket(zmq.PULL)
        self.acks.setsockopt(zmq.LINGER, 0)
        data, acks = f"ipc://{directory}/data{readers}", f"ipc://{directory}/acks{readers}"
        self.pub.bind(data)
        self.acks.bind(acks)
        root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.fanout", "--reader", data, acks, str(i)],
                env=env,
                cwd=root,
            )
            for i in range(readers)
        ]
        for _ in range(readers):
            if not self.pub.poll(TIMEOUT_MS):
                raise RuntimeError("a reader did not subscribe")
            self.pub.recv()

    def close(self) -> None:
        self.pub.send(msgspec.msgpack.encode(None))
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.pub.close()
        self.acks.close()
        self.context.term()

    def _ack(self) -> tuple[int, int]:
        if not self.acks.poll(TIMEOUT_MS):
            raise RuntimeError("no ack from a reader")
        reader, at = _ACK.unpack(self.acks.recv())
        return reader, at

    def _start(self, method: str, count: int) -> None:
        self.pub.send(msgspec.msgpack.encode(_Start(method, count)))
        for _ in range(self.readers):
            self._ack()

    def run(
        self, payload: str, method: str, obj: Any, pool: Any, ring: Any, count: int
    ) -> FanoutResult:
        from mmcodec.transport import zmq as mmzmq

        def send() -> None:
            if method == PICKLE:
                self.pub.send(ring.put(obj))
            else:
                mmzmq.send(self.pub, mm, obj, shm=pool if method == SHM else None, track=False)

        self._start(method, count)
        send_ns: list[int] = []
        last = [0] * self.readers
        in_flight = 0
        acked = 0
        first = time.perf_counter_ns()
        for _ in range(count):
            while in_flight >= WINDOW:  # a message is done when every reader acked it
                reader, at = self._ack()
                last[reader] = at
                acked += 1
                if acked % self.readers == 0:
                    in_flight -= 1
            begin = time.perf_counter_ns()
            send()
            send_ns.append(time.perf_counter_ns() - begin)
            in_flight += 1
        while acked < count * self.readers:
            reader, at = self._ack()
            last[reader] = at
            acked += 1
        size = tensor_bytes(obj)
        slowest = max(last) - first
        return FanoutResult(
            payload,
            method,
            self.readers,
            statistics.median(send_ns) / 1e9,
            count * size / (slowest / 1e9),
        )


def _compact(value: Any) -> Any:
    """``value`` with every tensor cloned into its own storage: pickle writes a view's whole
    storage, and the 16-image request's items are views of one 151 MB batch (2.4 GB of
    pickle). An engine that broadcasts with pickle compacts first; so does the baseline."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, mm.MultiModalFieldElem):
        return mm.MultiModalFieldElem(_compact(value.data), value.field)
    if isinstance(value, dict):
        return type(value)({key: _compact(v) for key, v in value.items()})
    if isinstance(value, (list, tuple)):
        return type(value)(_compact(v) for v in value)
    return value


def _pickled_bytes(obj: Any) -> int:
    """Room for one pickled message and its out-of-band buffers, each 64-byte aligned."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return sum(n + 64 for n in [len(data), *(b.raw().nbytes for b in buffers)])


def memcpy_bps(nbytes: int = 64 << 20, reps: int = 9) -> float:
    source, target = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    np.copyto(target, source)
    samples = []
    for _ in range(reps):
        begin = time.perf_counter_ns()
        np.copyto(target, source)
        samples.append(time.perf_counter_ns() - begin)
    return nbytes / (statistics.median(samples) / 1e9)


def measure(
    count_12mb: int = 30, count_151mb: int = 6, progress: Any = None
) -> tuple[float, list[FanoutResult]]:
    from mmcodec.transport.shm import SharedMemoryPool

    objects = {name: PAYLOADS[name](0) for name in PAYLOAD_NAMES}
    counts = {"qwen2.5-vl": count_12mb, "qwen2.5-vl x16": count_151mb}
    results: list[FanoutResult] = []
    memcpy = [memcpy_bps()]
    with tempfile.TemporaryDirectory(prefix="mmcodec-fanout-") as directory:
        for readers in READERS:
            bench = _Bench(readers, directory)
            try:
                for name, obj in objects.items():
                    size = tensor_bytes(obj)
                    with SharedMemoryPool(size * (WINDOW + 2), readers=readers) as pool:
                        compact = _compact(obj)
                        ring = _PickleRing(_pickled_bytes(compact))
                        try:
                            for method in METHODS:
                                if progress:
                                    progress(f"fan-out: {name} to {readers} readers, {method}")
                                value = compact if method == PICKLE else obj
                                bench.run(name, method, value, pool, ring, 2)  # warm-up
                                result = bench.run(name, method, value, pool, ring, counts[name])
                                results.append(result)
                        finally:
                            ring.close()
                memcpy.append(memcpy_bps())
            finally:
                bench.close()
    return statistics.median(memcpy), results


def table(memcpy: float, results: list[FanoutResult]) -> str:
    lines = [
        f"memcpy (64 MiB, median of the run): {memcpy / 1e9:.2f} GB/s",
        f"{'payload':<16} {'method':<20} {'readers':>7} {'send ms':>9} {'send / 1 reader':>15} "
        f"{'slowest reader GB/s':>19} {'% memcpy':>8}",
    ]
    base = {(r.payload, r.method): r.send_s for r in results if r.readers == 1}
    for r in results:
        ratio = r.send_s / base[(r.payload, r.method)]
        lines.append(
            f"{r.payload:<16} {r.method:<20} {r.readers:>7} {r.send_s * 1e3:>9.2f} {ratio:>14.2f}x "
            f"{r.reader_bps / 1e9:>19.2f} {r.reader_bps / memcpy:>8.0%}"
        )
    lines.append("")
    for payload in PAYLOAD_NAMES:
        four = [r for r in results if r.payload == payload and r.method == SHM and r.readers == 4]
        if four:
            ratio = four[0].send_s / base[(payload, SHM)]
            verdict = "PASS" if ratio <= 1.5 else "FAIL"
            lines.append(
                f"{verdict} {payload}: fan-out sender cost, 4 readers / 1 reader = {ratio:.2f} "
                "(target <= 1.5)"
            )
        shm = [r for r in results if r.payload == payload and r.method == SHM]
        worst = min((r.reader_bps for r in shm), default=0.0)
        verdict = "PASS" if worst >= memcpy / 2 else "FAIL"
        lines.append(
            f"{verdict} {payload}: fan-out slowest reader {worst / memcpy:.0%} of memcpy "
            "(target >= 50 %)"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--reader"]:
        return _reader(args[1], args[2], int(args[3]))
    parser = argparse.ArgumentParser(
        prog="python -m bench.fanout", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="a few messages per case")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    options = parser.parse_args(args)
    counts = (4, 2) if options.quick else (30, 6)

    def progress(message: str) -> None:
        print(f"  … {message}", file=sys.stderr, flush=True)

    memcpy, results = measure(*counts, progress=progress)
    text = table(memcpy, results)
    print(text)
    options.out.mkdir(parents=True, exist_ok=True)
    command = "python -m bench.fanout" + (" --quick" if options.quick else "")
    (options.out / "fanout.md").write_text(
        f"# Fan-out: one message to N readers\n\n`{command}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{os.getloadavg()[0]:.2f}\n\n```text\n{text}\n```\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
