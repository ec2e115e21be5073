"""``python -m bench.soak`` (``make soak``, ``make soak-ci``): the transports under SIGKILL.

``make soak`` runs 10 minutes (``--minutes``), ``make soak-ci`` one.

Three cells run side by side, each a sender process and its reader processes (fresh
interpreters started with :mod:`subprocess`; arguments on the command line, reports as
JSON over ZMQ: nothing is pickled):

- ``ipc``: PUSH -> PULL over ``ipc://``, no shared memory, one reader;
- ``shm1``: the same with a one-reader :class:`~mmcodec.transport.shm.SharedMemoryPool`;
- ``shm4``: XPUB -> 4 SUB readers with a ``readers=4`` pool (fan-out).

Senders send a mix of the realistic payloads (LLaVA, Whisper, Idefics3, MiniCPM-V,
Qwen2.5-VL, 64 small items), each tagged with its sequence number, payload and seed;
readers rebuild the expected value from the tag and compare with the domain classes'
strict ``==``. At random intervals the orchestrator SIGKILLs a random mortal process and
starts it again (every sender but ``ipc``'s, every reader but each cell's reader 0, which
stay up so their memory can be followed over the whole run).

Every worker reports each half second: messages sent / verified / mismatched / rejected (a
``DecodeError``: a message whose sender died, whose segment was swept, or whose frame was
revoked; expected around kills, never a wrong value), its resident memory without mapped
shared memory (``RssAnon + RssFile`` of ``/proc/self/status``: the shared pages a reader has
touched are the sender's, and counted there; read after ``malloc_trim(0)``, see
:func:`_memory`), and, for senders, the pool's occupancy. The run fails (exit status 1) when
any value was wrong, a worker died of anything but our SIGKILL, a cell verified nothing, a
process that lived through the run grew by more than 10 % after the warm-up (the lowest
sample of its last minute against that of its first: a full receive queue is not growth), or
a segment of the run is left: held (mapped, or open) at the end by a process of the run
although its sender is dead, or a file of that name in ``/dev/shm``. Segments are memfds,
freed by the kernel with the last process that holds one; so once every worker has exited,
none can be left at all.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS

MIX: Final = ("llava", "whisper", "idefics3", "minicpm-v", "qwen2.5-vl", "64 small items")
SEEDS: Final = 2
"""Seeds per payload: readers build every expected value once, before they report."""
RATE_HZ: Final = 8.0
"""Messages per second per sender: enough to fill pools, little enough for a shared host."""
QUEUE: Final = 8
"""Messages each data socket queues at most (ZMQ's high-water marks, both ends). A reader
slower than its sender (a loaded host) then holds a PUSH sender back or misses messages
of a PUB one, instead of piling up a backlog in its receive queue that reads as a leak."""
POOL_BYTES: Final = 64 << 20
REPORT_S: Final = 0.5
STARTUP_S: Final = 180.0
KILL_EVERY_S: Final = (2.0, 6.0)
"""Seconds between two kills (uniform): each kill costs a restart, a few seconds of CPU."""
GROWTH: Final = 0.10
WINDOW_S: Final = 60.0
"""Memory is compared by its lowest value over a window at each end of the run: a reader
samples it with up to QUEUE messages (12 MB each for Qwen) waiting in its receive queue or
none, which moved a single sample by 40 MB; a leak raises the lowest value, a queue does not."""
CELLS: Final = {"ipc": 1, "shm1": 1, "shm4": 4}
STEADY: Final = {("ipc", "sender"), ("ipc", "reader0"), ("shm1", "reader0"), ("shm4", "reader0")}
SETTLE_S: Final = 5.0
"""How long, at the end, readers have to drop the segments of senders killed last (they
look every REPORT_S)."""
_SEGMENT: Final = re.compile(r"/memfd:(mmcodec-[0-9a-f]{32})")


def _floors(samples: Sequence[int], warmup: float) -> tuple[int, int]:
    """The lowest of ``samples`` in the first and in the last window after ``warmup``."""
    steady = list(samples[int(warmup / REPORT_S) :]) or list(samples[-1:])
    window = max(1, min(int(WINDOW_S / REPORT_S), len(steady) // 2))
    return min(steady[:window]), min(steady[-window:])


_MALLOC_TRIM: Final = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc's; None elsewhere


def _resident() -> tuple[int, int]:
    """RssAnon and RssFile of this process, in bytes."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("RssAnon:", "RssFile:")):
                name, value, _ = line.split()
                fields[name] = int(value) * 1024
    return fields["RssAnon:"], fields["RssFile:"]


def _memory() -> list[int]:
    """Resident bytes without shared memory: [RssAnon, RssFile], read once glibc's malloc
    has given its free pages back to the system (``malloc_trim(0)``).

    Received ZMQ messages (up to 12 MB each, allocated by libzmq's I/O thread, freed with
    the tensors decoded from them) come from malloc's arenas once glibc's dynamic mmap
    threshold has risen past their size, and glibc keeps most of what they free: a reader
    fed mostly through ZMQ (the ``ipc`` cell; the fan-out cell while its pool is full) saw
    its arenas grow by 46-62 MB in 10 minutes with the bytes in use flat (``mallinfo2``).
    The trim returns only free pages: everything still allocated counts as before, by
    Python, torch or libzmq, and so does any page that a live allocation keeps.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    return list(_resident())


def _segments_held(pid: int) -> set[str]:
    """The segments (and boards) that process ``pid`` maps or holds a descriptor of."""
    found: set[str] = set()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
        found.update(_SEGMENT.findall(maps.read()))
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                found.update(_SEGMENT.findall(os.readlink(f"/proc/{pid}/fd/{fd}")))
    return found


def _tagged(index: int, seed: int, sequence: int) -> mm.MultiModalKwargsItems:
    value = PAYLOADS[MIX[index]](seed)
    tag = torch.tensor([sequence, index, seed], dtype=torch.int64)
    value["soak"] = [
        mm.MultiModalKwargsItem({"tag": mm.MultiModalFieldElem(tag, mm.BatchedField())})
    ]
    return value


def _tag_of(value: mm.MultiModalKwargsItems) -> torch.Tensor:
    item = value["soak"][0]
    assert item is not None
    tag = item["tag"].data
    assert isinstance(tag, torch.Tensor)
    return tag


# -- workers ----------------------------------------------------------------------------------


def _sender(cell: str, data: str, stats: str, stop: list[bool]) -> int:
    from mmcodec.transport import zmq as mmzmq
    from mmcodec.transport.shm import SharedMemoryPool

    readers = CELLS[cell]
    context: zmq.Context[Any] = zmq.Context()
    socket = context.socket(zmq.PUSH if readers == 1 else zmq.XPUB)
    socket.setsockopt(zmq.SNDTIMEO, 1000)
    socket.setsockopt(zmq.SNDHWM, QUEUE)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(data)
    report = context.socket(zmq.PUSH)
    report.setsockopt(zmq.LINGER, 1000)
    report.connect(stats)
    pool = None if cell == "ipc" else SharedMemoryPool(POOL_BYTES, readers=readers)
    values = [[_tagged(i, s, 0) for s in range(SEEDS)] for i in range(len(MIX))]
    tags = [[_tag_of(v) for v in row] for row in values]
    rng = random.Random(os.getpid())
    sent = timeouts = 0
    sequence = 0
    next_report = 0.0
    try:
        while not stop[0]:
            index, seed = rng.randrange(len(MIX)), rng.randrange(SEEDS)
            value = values[index][seed]
            sequence += 1
            tags[index][seed][0] = sequence  # inline in the header, copied at encode
            try:
                mmzmq.send(socket, mm, value, shm=pool, track=False)
                sent += 1
            except zmq.Again:  # PUSH with its reader dead or its queue full
                timeouts += 1
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + REPORT_S
                occupancy = None if pool is None else [pool.in_flight, pool.size - pool.free_bytes]
                report.send_json(
                    {
                        "cell": cell,
                        "role": "sender",
                        "pid": os.getpid(),
                        "sent": sent,
                        "timeouts": timeouts,
                        "memory": _memory(),
                        "occupancy": occupancy,
                        "revoked": 0 if pool is None else pool.revoked,
                        "segment": None if pool is None else pool.name,
                    }
                )
            time.sleep(rng.expovariate(RATE_HZ))
    finally:
        if pool is not None:
            pool.close()
        socket.close()
        report.close()
        context.term()
    return 0


def _reader(cell: str, index: int, data: str, stats: str, stop: list[bool]) -> int:
    from mmcodec.transport import zmq as mmzmq
    from mmcodec.transport.shm import SharedMemoryAttacher

    readers = CELLS[cell]
    expected = [[PAYLOADS[name](seed) for seed in range(SEEDS)] for name in MIX]
    context: zmq.Context[Any] = zmq.Context()
    socket = context.socket(zmq.PULL if readers == 1 else zmq.SUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVHWM, QUEUE)
    if readers > 1:
        socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(data)
    report = context.socket(zmq.PUSH)
    report.setsockopt(zmq.LINGER, 1000)
    report.connect(stats)
    attacher = None if cell == "ipc" else SharedMemoryAttacher(reader=index)
    verified = mismatched = rejected = 0
    problems: list[str] = []
    next_report = 0.0
    try:
        while not stop[0]:
            if socket.poll(100):
                try:
                    value = mmzmq.recv(socket, mm, mm.MultiModalKwargsItems, shm=attacher)
                except mm.DecodeError as e:
                    rejected += 1
                    if len(problems) < 5:
                        problems.append(str(e)[:200])
                else:
                    _, kind, seed = _tag_of(value).tolist()
                    del value["soak"]
                    if value == expected[kind][seed]:
                        verified += 1
                    else:
                        mismatched += 1
                        problems.append(f"wrong value for {MIX[kind]} seed {seed}")
                    del value
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + REPORT_S
                if attacher is not None:
                    attacher.orphaned()  # a killed sender's segment goes once we look
                report.send_json(
                    {
                        "cell": cell,
                        "role": f"reader{index}",
                        "pid": os.getpid(),
                        "verified": verified,
                        "mismatched": mismatched,
                        "rejected": rejected,
                        "memory": _memory(),
                        "problems": problems[-5:],
                    }
                )
    finally:
        if attacher is not None:
            attacher.close()
        socket.close()
        report.close()
        context.term()
    return 0


def _worker(argv: Sequence[str]) -> int:
    stop = [False]

    def stopping(*_: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, stopping)
    role, cell, data, stats = argv[:4]
    if role == "sender":
        return _sender(cell, data, stats, stop)
    return _reader(cell, int(role.removeprefix("reader")), data, stats, stop)


# -- the orchestrator -------------------------------------------------------------------------


@dataclass
class _Instance:
    """One run of one worker (a restart is a new instance)."""

    cell: str
    role: str
    process: subprocess.Popen[bytes]
    started: float
    killed: bool = False
    reports: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last(self) -> dict[str, Any]:
        return self.reports[-1] if self.reports else {}


class Soak:
    def __init__(self, seconds: float, seed: int, out: Any) -> None:
        self.seconds = seconds
        self.warmup = min(60.0, seconds / 3)
        self.rng = random.Random(seed)
        self.out = out
        self.directory = tempfile.TemporaryDirectory(prefix="mmcodec-soak-")
        self.context: zmq.Context[Any] = zmq.Context()
        self.stats = self.context.socket(zmq.PULL)
        self.stats_endpoint = f"ipc://{self.directory.name}/stats"
        self.stats.bind(self.stats_endpoint)
        self.instances: list[_Instance] = []
        self.current: dict[tuple[str, str], _Instance] = {}
        self.segments: set[str] = set()
        self.kills = 0
        self.own_memory: list[int] = []
        self.stale: set[str] = set()

    def endpoint(self, cell: str) -> str:
        return f"ipc://{self.directory.name}/{cell}"

    def start(self, cell: str, role: str) -> None:
        root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        command = [sys.executable, "-m", "bench.soak", "--worker", role, cell]
        command += [self.endpoint(cell), self.stats_endpoint]
        process = subprocess.Popen(command, env=env, cwd=root)
        instance = _Instance(cell, role, process, time.monotonic())
        self.instances.append(instance)
        self.current[(cell, role)] = instance

    def roles(self) -> list[tuple[str, str]]:
        return [
            (c, r) for c, n in CELLS.items() for r in ["sender", *(f"reader{i}" for i in range(n))]
        ]

    def collect(self, until: float) -> None:
        by_pid = {i.process.pid: i for i in self.instances}
        while (wait := until - time.monotonic()) > 0:
            if self.stats.poll(int(wait * 1000) + 1):
                report = self.stats.recv_json()
                assert isinstance(report, dict)
                instance = by_pid.get(report["pid"])
                if instance is not None:
                    instance.reports.append(report)
                    if report.get("segment"):
                        self.segments.add(report["segment"])

    def run(self) -> int:
        for cell, role in self.roles():
            self.start(cell, role)
        # Nine interpreters importing torch on a small shared host take a while: the clock
        # starts once every worker has reported.
        deadline = time.monotonic() + STARTUP_S
        while any(not i.reports for i in self.current.values()):
            if time.monotonic() > deadline:
                print(f"soak: workers did not start in {STARTUP_S:.0f} s", file=self.out)
                return self.finish(failed=True)
            self.collect(time.monotonic() + 0.5)
        started = time.monotonic()
        mortal = [key for key in self.roles() if key not in STEADY]
        end = started + self.seconds
        next_kill = started + self.rng.uniform(*KILL_EVERY_S)
        next_memory = started
        while time.monotonic() < end:
            self.collect(min(end, next_kill, next_memory))
            now = time.monotonic()
            if now >= next_memory:
                self.own_memory.append(sum(_memory()))
                next_memory = now + 5
            if now >= next_kill:
                next_kill = now + self.rng.uniform(*KILL_EVERY_S)
                ready = [key for key in mortal if self.current[key].reports]  # started up
                if ready and now < end - 5:
                    victim = self.current[self.rng.choice(ready)]
                    if victim.process.poll() is None:
                        os.kill(victim.process.pid, signal.SIGKILL)
                        victim.process.wait()
                        victim.killed = True
                        self.kills += 1
                        self.start(victim.cell, victim.role)
            for key, instance in list(self.current.items()):
                if instance.process.poll() is not None and not instance.killed:
                    code = instance.process.returncode
                    print(f"soak: {key} exited by itself with {code}", file=self.out)
                    self.start(*key)
        return self.finish()

    def stale_segments(self) -> set[str]:
        """Segments that a live reader holds although their sender is dead (or closed its
        pool): what a receiver failed to let go of. A live sender holds its own."""
        live: set[str] = set()
        held: set[str] = set()
        for instance in self.current.values():
            if instance.process.poll() is None:
                found = _segments_held(instance.process.pid)
                if instance.role == "sender":
                    live |= found
                else:
                    held |= found
        return held - live

    def finish(self, *, failed: bool = False) -> int:
        deadline = time.monotonic() + SETTLE_S
        while (stale := self.stale_segments()) and time.monotonic() < deadline:
            self.collect(time.monotonic() + REPORT_S)
        self.stale = stale
        for instance in self.current.values():  # readers first, so senders' pools see them go
            if instance.role != "sender" and instance.process.poll() is None:
                instance.process.terminate()
        self.collect(time.monotonic() + 2)
        for instance in self.current.values():
            if instance.role == "sender" and instance.process.poll() is None:
                instance.process.terminate()
        for instance in self.current.values():
            try:
                instance.process.wait(30)
            except subprocess.TimeoutExpired:
                instance.process.kill()
                instance.process.wait()
        self.collect(time.monotonic() + 1)
        self.stats.close()
        self.context.term()
        self.directory.cleanup()
        return 1 if failed else self.judge()

    def judge(self) -> int:
        out = self.out
        failures: list[str] = []
        print(
            f"soak: {self.seconds:.0f} s, {self.kills} processes SIGKILLed and restarted", file=out
        )
        print(
            f"{'cell':<6} {'sent':>8} {'verified (per reader)':>34} {'wrong':>6} {'rejected':>9}",
            file=out,
        )
        for cell, readers in CELLS.items():
            sent = sum(
                i.last.get("sent", 0)
                for i in self.instances
                if i.cell == cell and i.role == "sender"
            )
            verified = [
                sum(
                    i.last.get("verified", 0)
                    for i in self.instances
                    if i.cell == cell and i.role == f"reader{r}"
                )
                for r in range(readers)
            ]
            wrong = sum(i.last.get("mismatched", 0) for i in self.instances if i.cell == cell)
            rejected = sum(i.last.get("rejected", 0) for i in self.instances if i.cell == cell)
            print(
                f"{cell:<6} {sent:>8} {' / '.join(map(str, verified)):>34} "
                f"{wrong:>6} {rejected:>9}",
                file=out,
            )
            kinds = sorted(
                {
                    re.sub(r"[0-9a-f]{32}|\d+", "N", problem)
                    for i in self.instances
                    if i.cell == cell
                    for problem in i.last.get("problems", [])
                }
            )
            for kind in kinds:
                print(f"       rejected, for instance: {kind}", file=out)
            if wrong:
                failures.append(f"{cell}: {wrong} wrong values")
            if not all(verified):
                failures.append(f"{cell}: a reader verified nothing")
        for instance in self.instances:
            status = instance.process.returncode
            if not instance.killed and status not in (0, -signal.SIGTERM):
                failures.append(
                    f"{instance.cell} {instance.role} pid {instance.process.pid} "
                    f"exited with {status}"
                )
            for problem in instance.last.get("problems", []):
                if problem.startswith("wrong"):
                    failures.append(f"{instance.cell} {instance.role}: {problem}")
        print(
            "resident memory without shared memory after malloc_trim, MB (lowest in the first "
            f"and the last {WINDOW_S:.0f} s after warm-up):",
            file=out,
        )
        for instance in self.instances:
            if instance.killed or not instance.reports:
                continue
            samples = [r["memory"] for r in instance.reports if sum(r["memory"])]
            totals = [sum(sample) for sample in samples]
            start, end = _floors(totals, self.warmup)
            split = dict(zip(totals, samples, strict=True))
            growth = (end - start) / start
            verdict = "ok" if growth <= GROWTH else "GREW"
            (anon_start, file_start), (anon_end, file_end) = split[start], split[end]
            print(
                f"  {instance.cell:<5} {instance.role:<8} pid {instance.process.pid:<8} "
                f"{start / 1e6:8.1f} -> {end / 1e6:8.1f} ({growth:+.1%}) {verdict}  "
                f"(anon {anon_start / 1e6:.1f} -> {anon_end / 1e6:.1f}, "
                f"file {file_start / 1e6:.1f} -> {file_end / 1e6:.1f})",
                file=out,
            )
            if growth > GROWTH:
                failures.append(f"{instance.cell} {instance.role}: memory grew {growth:+.1%}")
        if self.own_memory:
            print(
                f"  orchestrator {self.own_memory[0] / 1e6:.1f} -> {self.own_memory[-1] / 1e6:.1f}",
                file=out,
            )
        for cell in ("shm1", "shm4"):
            senders = [
                i for i in self.instances if i.cell == cell and i.role == "sender" and i.reports
            ]
            peak = max(
                (r["occupancy"][1] for i in senders for r in i.reports if r["occupancy"]), default=0
            )
            last = senders[-1].last if senders else {}
            revoked = sum(i.last.get("revoked", 0) for i in senders)
            print(
                f"pool {cell}: peak {peak / 1e6:.1f} of {POOL_BYTES / 1e6:.0f} MB in use, at the "
                f"end {last.get('occupancy')} (tickets, bytes), {revoked} revoked",
                file=out,
            )
        files = sorted(name for name in self.segments if os.path.exists(f"/dev/shm/{name}"))
        print(
            f"segments: {len(self.segments)} made in the run; at the end {len(self.stale)} of "
            f"dead senders still held by a live worker, {len(files)} files in /dev/shm",
            file=out,
        )
        if self.stale:
            failures.append(f"segments of dead senders still held: {sorted(self.stale)}")
        if files:
            failures.append(f"segment files left in /dev/shm: {files}")
        for failure in failures:
            print(f"FAIL {failure}", file=out)
        print("soak: PASS" if not failures else "soak: FAIL", file=out)
        return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--worker"]:
        return _worker(args[1:])
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(args)
    soak = Soak(options.minutes * 60, options.seed, sys.stdout)
    try:
        return soak.run()
    except BaseException:
        for instance in soak.instances:
            with contextlib.suppress(OSError):
                instance.process.kill()
        raise


if __name__ == "__main__":
    sys.exit(main())
