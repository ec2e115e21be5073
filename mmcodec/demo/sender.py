"""The demo's sending side and command line (see :mod:`mmcodec.demo`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import zmq

import mmcodec
from mmcodec.demo.payloads import DEMO_PAYLOADS, QUICK, DemoPayload
from mmcodec.demo.protocol import ENCODER, REPORT_DECODER, Announce, Ready, Result, Stop
from mmcodec.generated import multimodal as mm
from mmcodec.transport import zmq as mmzmq
from mmcodec.transport.shm import (
    DEFAULT_POOL_BYTES,
    MAX_READERS,
    SharedMemoryPool,
    SharedMemoryUnavailable,
)

__all__ = ["HEADER", "fanout_header", "main", "run"]

TIMEOUT_S: Final = 60.0
"""The longest the sender waits for the receiver (to start, or to report on a message)."""

HEADER: Final = (
    f"{'payload':<20} {'MB':>8} {'frames':>6} {'encode µs':>10} {'send→decoded µs':>16} "
    f"{'GB/s':>6}  verified"
)


class DemoError(Exception):
    """The receiver failed, went away or answered out of turn."""


def fanout_header(readers: int) -> str:
    """The table's header with several readers: send→decoded per reader, shared bytes."""
    columns = " ".join(f"{f'r{reader} µs':>9}" for reader in range(readers))
    return (
        f"{'payload':<20} {'MB':>8} {'frames':>6} {'encode µs':>10} {'shm MB':>7} "
        f"{columns}  verified"
    )


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    wire_bytes: int
    frames: int
    encode_ns: float
    latency_ns: list[float]
    """Median send→decoded of each reader."""
    shared_bytes: float
    """Median bytes of each message that a reader decoded from shared memory."""
    ok: bool
    detail: str

    def format(self, marks: tuple[str, str]) -> str:
        mark = marks[0] if self.ok else marks[1]
        start = (
            f"{self.name:<20} {self.wire_bytes / 1e6:>8.2f} {self.frames:>6} "
            f"{self.encode_ns / 1e3:>10.1f}"
        )
        if len(self.latency_ns) > 1:
            readers = " ".join(f"{latency / 1e3:>9.1f}" for latency in self.latency_ns)
            return f"{start} {self.shared_bytes / 1e6:>7.2f} {readers}  {mark}"
        latency = self.latency_ns[0]
        gbps = self.wire_bytes / latency if latency > 0 else float("nan")
        return f"{start} {latency / 1e3:>16.1f} {gbps:>6.2f}  {mark}"


class _Receivers:
    """The receiver processes and the sender's two sockets to them: PUSH to one receiver,
    XPUB to several (each message to all of them), and one PULL for every report."""

    def __init__(
        self, transport: str, directory: str, expect_seed_offset: int, shm: bool, readers: int
    ) -> None:
        self.readers = readers
        self.context: zmq.Context[Any] = zmq.Context()
        self.data = self.context.socket(zmq.PUSH if readers == 1 else zmq.XPUB)
        self.reports = self.context.socket(zmq.PULL)
        self.processes: list[subprocess.Popen[bytes]] = []
        try:
            for socket in (self.data, self.reports):
                socket.setsockopt(zmq.SNDTIMEO, int(TIMEOUT_S * 1000))
                socket.setsockopt(zmq.LINGER, 0)
            if readers > 1:
                self.data.setsockopt(zmq.XPUB_VERBOSE, 1)  # one subscription per reader
                self.data.setsockopt(zmq.SNDHWM, 0)  # a PUB drops at its mark: keep all
            self.endpoints = [
                _bind(self.data, transport, directory, "data"),
                _bind(self.reports, transport, directory, "reports"),
            ]
            # The receiver imports the very code this process runs, wherever it lives.
            roots = {str(Path(mmcodec.__file__ or "").resolve().parents[1])}
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([*sorted(roots), env.get("PYTHONPATH", "")])
            for reader in range(readers):
                command = [sys.executable, "-m", "mmcodec.demo.receiver", *self.endpoints]
                command += [f"--sender-pid={os.getpid()}", f"--reader={reader}"]
                command.append(f"--readers={readers}")
                if expect_seed_offset:
                    command.append(f"--expect-seed-offset={expect_seed_offset}")
                if shm:
                    command.append("--shm")
                self.processes.append(subprocess.Popen(command, env=env))
            if readers > 1:
                self._subscribed()
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def _subscribed(self) -> None:
        """Wait until every reader's SUB socket subscribed: a PUB sends to subscribers only."""
        for _ in range(self.readers):
            deadline = time.monotonic() + TIMEOUT_S
            while not self.data.poll(100):
                self._check_alive()
                if time.monotonic() > deadline:
                    raise DemoError(f"a receiver did not subscribe in {TIMEOUT_S:.0f} s")
            if self.data.recv()[:1] != b"\x01":
                raise DemoError("a receiver unsubscribed")

    def announce(self, name: str, seed: int, repeat: int) -> None:
        self.data.send(ENCODER.encode(Announce(name, seed, repeat)))
        for _ in range(self.readers):
            report = self.report()
            if not isinstance(report, Ready):
                raise DemoError(f"receiver answered {report!r} to an announcement")

    def results(self) -> list[Result]:
        """One result from every reader, in reader order."""
        found: dict[int, Result] = {}
        while len(found) < self.readers:
            report = self.report()
            if not isinstance(report, Result) or report.reader in found:
                raise DemoError(f"receiver answered {report!r} instead of a result")
            found[report.reader] = report
        return [found[reader] for reader in range(self.readers)]

    def report(self) -> Ready | Result:
        deadline = time.monotonic() + TIMEOUT_S
        while not self.reports.poll(100):
            self._check_alive()
            if time.monotonic() > deadline:
                raise DemoError(f"no word from the receivers in {TIMEOUT_S:.0f} s")
        return REPORT_DECODER.decode(self.reports.recv())

    def _check_alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise DemoError(f"receiver exited with status {process.returncode}")

    def stop(self) -> int:
        """Stop every receiver; the worst exit status."""
        self.data.send(ENCODER.encode(Stop()))
        return max(abs(process.wait(TIMEOUT_S)) for process in self.processes)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.data.close()
        self.reports.close()
        self.context.term()


def _bind(socket: zmq.Socket[Any], transport: str, directory: str, name: str) -> str:
    if transport == "ipc":
        endpoint = f"ipc://{directory}/{name}"
        socket.bind(endpoint)
        return endpoint
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    return f"tcp://127.0.0.1:{port}"


def _measure(
    receivers: _Receivers,
    payload: DemoPayload,
    seed: int,
    repeat: int,
    pool: SharedMemoryPool | None,
) -> Row:
    value = payload.build(seed)
    frames = mm.encode(value, type=payload.type)
    wire_bytes = sum(frame.nbytes for frame in frames)
    n_frames = len(frames)
    del frames
    encode_ns = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        mm.encode(value, type=payload.type)
        encode_ns.append(time.perf_counter_ns() - start)

    receivers.announce(payload.name, seed, repeat)
    latencies: list[list[int]] = [[] for _ in range(receivers.readers)]
    shared = []
    problems = []
    for _ in range(repeat):
        # CLOCK_MONOTONIC: one clock for every process of the machine (see the docstring).
        sent_ns = time.monotonic_ns()
        mmzmq.send(receivers.data, mm, value, type=payload.type, shm=pool)
        for result in receivers.results():
            latencies[result.reader].append(result.decoded_ns - sent_ns)
            shared.append(result.shared_bytes)
            if not result.ok:
                problems.append(result.detail)
    return Row(
        payload.name,
        wire_bytes,
        n_frames,
        statistics.median(encode_ns),
        [statistics.median(samples) for samples in latencies],
        statistics.median(shared),
        not problems,
        problems[0] if problems else "",
    )


def _marks(out: TextIO) -> tuple[str, str]:
    try:
        "µ→✓✗".encode(getattr(out, "encoding", None) or "utf-8")  # None: a str stream
    except (UnicodeEncodeError, LookupError):
        return "ok", "MISMATCH"
    return "✓", "✗"


def run(
    names: Sequence[str],
    *,
    transport: str = "ipc",
    repeat: int = 5,
    seed: int = 0,
    out: TextIO | None = None,
    expect_seed_offset: int = 0,
    shm: bool = False,
    readers: int = 1,
) -> int:
    """Send ``names`` to fresh receiver processes and print the table.

    Returns 0 when every message was verified, 1 on any mismatch, 2 when a receiver
    failed. Payload ``i`` of the full list is built from ``seed + i`` on both sides.
    ``shm`` sends frames of 64 KiB and more through a shared-memory pool (the receivers
    attach it) instead of the socket. ``readers`` > 1 starts that many receivers behind
    a PUB socket: each message is sent once, and with ``shm`` copied once, for all.
    """
    out = sys.stdout if out is None else out
    marks = _marks(out)
    header = HEADER if readers == 1 else fanout_header(readers)
    if marks[0] != "✓":
        header = header.replace("µ", "u").replace("→", "->")
    seeds = {name: seed + index for index, name in enumerate(DEMO_PAYLOADS)}
    rows: list[Row] = []
    pool = _open_pool(out, readers) if shm else None
    if shm and pool is None:
        return 0
    with (
        tempfile.TemporaryDirectory(prefix="mmcodec-demo-") as directory,
        pool if pool is not None else contextlib.nullcontext(),
    ):
        receiver = _Receivers(transport, directory, expect_seed_offset, shm, readers)
        try:
            copies = f", one copy for {readers} readers" if readers > 1 else ""
            via = f" + shared memory {pool.name} (frames ≥ 64 KiB{copies})" if pool else ""
            if readers == 1:
                to = f"receiver pid {receiver.pids[0]}"
            else:
                to = f"{readers} receivers (pids {', '.join(map(str, receiver.pids))}) via PUB"
            if marks[0] != "✓":
                via = via.replace("≥", ">=")
            print(
                f"mmcodec demo: {len(names)} payloads to {to} "
                f"over {receiver.endpoints[0]}{via}, {repeat} messages each (medians)",
                file=out,
            )
            print(header, file=out)
            for name in names:
                row = _measure(receiver, DEMO_PAYLOADS[name], seeds[name], repeat, pool)
                rows.append(row)
                print(row.format(marks), file=out, flush=True)
            status = receiver.stop()
            if status != 0:
                raise DemoError(f"receiver exited with status {status}")
        except (DemoError, zmq.ZMQError, subprocess.TimeoutExpired) as e:
            print(f"demo failed: {e}", file=out)
            return 2
        finally:
            receiver.close()
    failed = [row for row in rows if not row.ok]
    for row in failed:
        print(f"{row.name}: {row.detail}", file=out)
    total = sum(row.wire_bytes for row in rows)
    if failed:
        print(f"{len(failed)} of {len(rows)} payloads did not arrive intact", file=out)
        return 1
    by = "the receiver" if readers == 1 else f"each of the {readers} receivers"
    print(
        f"all {len(rows)} payloads ({total / 1e6:.1f} MB) verified by {by} against "
        "values it rebuilt from the same seeds",
        file=out,
    )
    return 0


def _open_pool(out: TextIO, readers: int) -> SharedMemoryPool | None:
    """A pool that fits this machine's free memory, or None (said on ``out``) when there is
    none. The pool sends what does not fit through ZMQ, so a smaller pool only means fewer
    frames go through shared memory.
    """
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return SharedMemoryPool(size=min(DEFAULT_POOL_BYTES, free // 2), readers=readers)
    except (SharedMemoryUnavailable, OSError, ValueError) as e:
        print(f"shared memory is not available here ({e}): skipped the --shm run", file=out)
        return None


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mmcodec.demo",
        description="Send realistic multimodal payloads to a second process over ZMQ, "
        "verify them there, and print a table.",
    )
    parser.add_argument("--transport", choices=["ipc", "tcp"], default="ipc")
    parser.add_argument(
        "--shm",
        action="store_true",
        help="send frames of 64 KiB and more through shared memory (Linux, same host)",
    )
    parser.add_argument(
        "--readers",
        type=int,
        default=1,
        help="receiver processes; more than 1: each message to all of them over PUB/SUB",
    )
    parser.add_argument("--repeat", type=int, default=5, help="messages per payload (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument(
        "--payload",
        action="append",
        choices=list(DEMO_PAYLOADS),
        help="send only this payload (repeatable)",
    )
    parser.add_argument("--expect-seed-offset", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not 1 <= args.readers <= MAX_READERS:
        parser.error(f"--readers must be in 1..{MAX_READERS}")
    names = args.payload or (list(QUICK) if args.quick else list(DEMO_PAYLOADS))
    return run(
        names,
        transport=args.transport,
        repeat=args.repeat,
        seed=args.seed,
        out=out,
        expect_seed_offset=args.expect_seed_offset,
        shm=args.shm,
        readers=args.readers,
    )
