"""``python -m bench.ray`` (``make bench-ray``): the design payloads through Ray, two ways.

One run starts a two-node Ray cluster on this machine (one CPU and a 3 GiB object store
per node, no dashboard: default Ray stores the 16-image request as 2.4 GB) and sends
every design payload from the driver to an actor on each node, with
``mmcodec.integrations.ray.register(mm)`` and with Ray's default serializer (pickle,
torch's tensor reduction), interleaved payload by payload. The
actor verifies what it received against the payload it rebuilds from the same seed.

Per payload, node and method it reports: end to end (``ray.put`` on the driver until the
actor's method starts, i.e. the value decoded in the actor), ``ray.put`` and ``ray.get``
on the driver, object-store bytes (what ``ray.put`` writes, from Ray's serializer), the
bytes Ray's pickle stream holds in band, and the decoded tensor bytes that do not view
the receiver's object store (copies). Then the driver's ``ray.get`` of one stored item
holding one tensor of 1, 16 and 128 MiB (the same structure, only the bytes grow), both
ways. Prints the targets' PASS/FAIL lines (the exit status does not depend on them) and
writes ``bench/results/ray.md``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import ray
import ray.cloudpickle
import ray.util
import torch
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from bench.report import Table, fmt_bytes, fmt_ratio, fmt_stats
from bench.runner import Stats
from mmcodec.generated import multimodal as mm
from mmcodec.integrations.ray import WorkerSetup, register, registrable_types
from mmcodec.payloads import PAYLOADS, iter_tensors, tensor_bytes

ROOT: Final = Path(__file__).resolve().parent.parent
RESULTS: Final = ROOT / "bench" / "results" / "ray.md"
STORE_BYTES: Final = 3 << 30
DEFAULT: Final = "default Ray"
MMCODEC: Final = "mmcodec"
METHODS: Final = (MMCODEC, DEFAULT)
NODES: Final = ("same node", "second node")
REQUEST: Final = "qwen2.5-vl x16"
SINGLE_SHOT_ABOVE: Final = 1.0
"""Seconds: a default-Ray configuration whose first run takes longer is measured once."""


def _store_ranges() -> list[tuple[int, int]]:
    """This process's mappings of Ray's object store files (``/dev/shm/plasma…``)."""
    ranges = []
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and "/plasma" in fields[5]:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


def copied_bytes(value: object) -> int:
    """Decoded tensor bytes that do not view an object store mapped by this process."""
    ranges = _store_ranges()
    copied = 0
    for t in iter_tensors(value):
        start, size = t.data_ptr(), t.nbytes
        if size and not any(lo <= start and start + size <= hi for lo, hi in ranges):
            copied += size
    return copied


@ray.remote
class Receiver:
    """The engine side: records when a value arrived (decoded), then verifies it."""

    def ready(self) -> bool:
        return True

    def receive(self, value: Any, name: str, seed: int) -> dict[str, Any]:
        arrived = time.time()
        copied = copied_bytes(value)
        return {"arrived": arrived, "copied": copied, "equal": value == PAYLOADS[name](seed)}


@dataclass
class Row:
    payload: str
    node: str
    method: str
    tensor_bytes: int
    end_to_end: Stats
    put: Stats
    get: Stats
    store_bytes: int
    in_band: int
    copied_at_actor: int


def _use(method: str) -> None:
    """Make the driver serialize with ``method`` (workers registered via the job's hook;
    they only return small dicts here)."""
    if method == MMCODEC:
        register(mm)
    else:
        for cls in registrable_types(mm):
            ray.util.deregister_serializer(cls)


def _repeat(
    run: Callable[[], tuple[float, ...]], reps: int, seconds: float, single_shot: bool
) -> list[tuple[float, ...]]:
    first = run()
    if single_shot and first[0] > SINGLE_SHOT_ABOVE:
        return [first]
    samples = [run()]  # the first run was a warm-up
    started = time.perf_counter()
    while len(samples) < reps and (len(samples) < 3 or time.perf_counter() - started < seconds):
        samples.append(run())
    return samples


def measure(name: str, node: str, method: str, receiver: Any, reps: int, seconds: float) -> Row:
    seed = 0
    value = PAYLOADS[name](seed)
    _use(method)
    worker: Any = ray._private.worker.global_worker
    context = worker.get_serialization_context()
    store_bytes = context.serialize(value).total_bytes
    buffers: list[Any] = []
    in_band = len(ray.cloudpickle.dumps(value, protocol=5, buffer_callback=buffers.append))  # type: ignore[no-untyped-call]
    del buffers
    copies: dict[str, int] = {}

    def run() -> tuple[float, ...]:
        started = time.time()
        t0 = time.perf_counter()
        ref = ray.put(value)
        t1 = time.perf_counter()
        got = ray.get(receiver.receive.remote(ref, name, seed))
        if got["equal"] is not True:
            raise AssertionError(f"{name} via {method} to the {node}: not what was sent")
        copies["actor"] = got["copied"]
        t2 = time.perf_counter()
        local = ray.get(ref)
        t3 = time.perf_counter()
        del local, ref
        return got["arrived"] - started, t1 - t0, t3 - t2

    samples = _repeat(run, reps, seconds, single_shot=method == DEFAULT)
    gc.collect()  # drop what the slow path left before the next configuration
    return Row(
        name,
        node,
        method,
        tensor_bytes(value),
        Stats.of(s[0] for s in samples),
        Stats.of(s[1] for s in samples),
        Stats.of(s[2] for s in samples),
        store_bytes,
        in_band,
        copies["actor"],
    )


def _find(rows: Sequence[Row], payload: str, node: str, method: str) -> Row:
    return next(r for r in rows if (r.payload, r.node, r.method) == (payload, node, method))


def tables(rows: Sequence[Row]) -> list[Table]:
    out = []
    for node in NODES:
        body = []
        for name in dict.fromkeys(r.payload for r in rows):
            base = _find(rows, name, node, DEFAULT)
            ours = _find(rows, name, node, MMCODEC)
            for row in (ours, base):
                ratio = (
                    "1"
                    if row is ours
                    else fmt_ratio(row.end_to_end.median / ours.end_to_end.median)
                )
                body.append(
                    [
                        f"{name} ({row.tensor_bytes / 1e6:.2f} MB)" if row is ours else "",
                        row.method,
                        fmt_stats(row.end_to_end),
                        ratio,
                        fmt_stats(row.put),
                        fmt_stats(row.get),
                        fmt_bytes(row.store_bytes),
                        f"{row.store_bytes / row.tensor_bytes:.3f}",
                        fmt_bytes(row.in_band),
                        fmt_bytes(row.copied_at_actor),
                    ]
                )
        out.append(
            Table(
                f"Driver -> actor on the {node}, verified",
                [
                    "payload",
                    "method",
                    "end to end",
                    "x",
                    "ray.put",
                    "ray.get (driver)",
                    "store bytes",
                    "÷ tensor bytes",
                    "pickled in band",
                    "copied at actor",
                ],
                body,
            )
        )
    return out


@dataclass(frozen=True)
class Target:
    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.detail}"


def targets(rows: Sequence[Row], sweep: Sequence[SweepRow]) -> list[Target]:
    found = []
    for node in NODES:
        base = _find(rows, REQUEST, node, DEFAULT).end_to_end.median
        ours = _find(rows, REQUEST, node, MMCODEC).end_to_end.median
        found.append(
            Target(
                f"{REQUEST} end to end, {node}, >= 50x faster",
                base / ours >= 50,
                f"{fmt_ratio(base / ours)} ({base:.3g} s vs {ours * 1e3:.3g} ms)",
            )
        )
    ours_rows = [r for r in rows if r.method == MMCODEC and r.node == NODES[0]]
    worst = max(ours_rows, key=lambda r: r.store_bytes / r.tensor_bytes)
    large = [r for r in ours_rows if r.tensor_bytes >= 1 << 20]
    worst_large = max(large, key=lambda r: r.store_bytes / r.tensor_bytes)
    found.append(
        Target(
            "object-store bytes <= 1.01x tensor bytes, payloads of 1 MiB and more",
            worst_large.store_bytes <= 1.01 * worst_large.tensor_bytes,
            f"worst {worst_large.store_bytes / worst_large.tensor_bytes:.4f} "
            f"({worst_large.payload}); over every payload "
            f"{worst.store_bytes / worst.tensor_bytes:.3f} ({worst.payload})",
        )
    )
    if sweep:
        gets = [s.get.median for s in sweep if s.method == MMCODEC]
        low, high = min(gets), max(gets)
        found.append(
            Target(
                "ray.get on the driver independent of size (one item, 1 to 128 MiB, <= 1.5x)",
                high / low <= 1.5,
                f"{low * 1e6:.0f}-{high * 1e6:.0f} µs ({high / low:.2f}x for "
                f"{SWEEP_MIB[-1] // SWEEP_MIB[0]}x the bytes)",
            )
        )
    return found


SWEEP_MIB: Final = (1, 16, 128)
"""Sizes of the one-tensor items of the ray.get sweep: the same structure, only the bytes grow."""


@dataclass
class SweepRow:
    mib: int
    method: str
    get: Stats


def one_tensor_item(mib: int) -> mm.MultiModalKwargsItems:
    pixels = torch.zeros(mib << 19, dtype=torch.bfloat16)  # 2 bytes each
    item = mm.MultiModalKwargsItem(
        {"pixel_values": mm.MultiModalFieldElem(pixels, mm.BatchedField())}
    )
    return mm.MultiModalKwargsItems({"image": [item]})


def measure_get(mib: int, method: str, reps: int) -> SweepRow:
    """The driver's ``ray.get`` of one stored item of ``mib`` MiB (decode only)."""
    _use(method)
    ref = ray.put(one_tensor_item(mib))
    samples = []
    for _ in range(1 + reps):  # the first is a warm-up
        t0 = time.perf_counter()
        got = ray.get(ref)
        samples.append(time.perf_counter() - t0)
        del got
    return SweepRow(mib, method, Stats.of(samples[1:]))


def sweep_table(sweep: Sequence[SweepRow]) -> Table:
    rows = []
    for mib in SWEEP_MIB:
        ours = next(s for s in sweep if (s.mib, s.method) == (mib, MMCODEC))
        base = next(s for s in sweep if (s.mib, s.method) == (mib, DEFAULT))
        rows.append([f"{mib} MiB", fmt_stats(ours.get), fmt_stats(base.get)])
    return Table(
        "ray.get on the driver of one stored item holding one tensor",
        ["tensor", MMCODEC, DEFAULT],
        rows,
    )


def _setup(node_args: dict[str, Any]) -> tuple[Cluster, dict[str, Any]]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args=node_args)
    head: Any = cluster.head_node
    second = cluster.add_node(**node_args)
    cluster.wait_for_nodes()
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    ray.init(
        address=cluster.address,
        log_to_driver=False,
        runtime_env={
            "worker_process_setup_hook": WorkerSetup((mm,)),
            "env_vars": {"PYTHONPATH": python_path},
        },
    )
    receivers = {
        where: Receiver.options(  # type: ignore[attr-defined]
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        ).remote()
        for where, node in zip(NODES, (head.node_id, second.node_id), strict=True)
    }
    ray.get([r.ready.remote() for r in receivers.values()])  # started before timing
    return cluster, receivers


def _machine() -> str:
    cpu = platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return (
        f"CPU: {cpu}, cores: {os.cpu_count()}, OS: {platform.system()} {platform.release()}, "
        f"Python: {platform.python_version()}, torch: {torch.__version__}, ray: {ray.__version__}"
    )


def markdown(
    rows: Sequence[Row], sweep: Sequence[SweepRow], found: Sequence[Target], header: Sequence[str]
) -> str:
    parts = ["# mmcodec through Ray: latest results", "", *(f"{h}  " for h in header), ""]
    parts += [
        "End to end: `ray.put` on the driver until the actor's method starts (its argument "
        "decoded). `ray.put` and `ray.get` are the driver's own calls on the same object. "
        "Store bytes: what `ray.put` writes into the object store (Ray's serialized size). "
        "Pickled in band: the bytes of Ray's pickle stream (for default Ray the tensors' "
        "storages, copied into it and out of it again; for mmcodec Ray's envelope only, "
        "the frames going out of band). Copied at actor: decoded tensor bytes in the actor "
        "that do not view its object store. Times are medians (10th-90th percentile); "
        "n=1 marks a default-Ray configuration measured once because one run took over a "
        "second; every other one had a warm-up run first.",
        "",
    ]
    for table in [*tables(rows), sweep_table(sweep)]:
        parts += [table.markdown(), ""]
    parts += ["**Targets**", "", *(f"- {t.line()}" for t in found), ""]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ray", description=__doc__.split("\n")[0])
    parser.add_argument("--payloads", nargs="+", choices=list(PAYLOADS), metavar="NAME")
    parser.add_argument("--reps", type=int, default=7, help="samples per fast configuration")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    names = args.payloads or list(PAYLOADS)
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    node_args = {"num_cpus": 1, "object_store_memory": STORE_BYTES, "include_dashboard": False}
    cluster, receivers = _setup(node_args)
    rows: list[Row] = []
    try:
        for name in names:
            for node in NODES:
                for method in METHODS:
                    print(f"  … {name}, {node}, {method}", file=sys.stderr, flush=True)
                    rows.append(measure(name, node, method, receivers[node], args.reps, 2.0))
        print("  … ray.get sweep", file=sys.stderr, flush=True)
        sweep = [measure_get(mib, method, args.reps) for mib in SWEEP_MIB for method in METHODS]
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
    found = targets(rows, sweep) if REQUEST in names else []
    elapsed = time.perf_counter() - started
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "make bench-ray" if os.environ.get("MAKELEVEL") else "python -m bench.ray"
    header = [
        f"Command: `{command}` — {now}, {elapsed:.0f} s.",
        f"Machine: {_machine()}, load average at start: {load_start:.2f}, "
        f"at end: {os.getloadavg()[0]:.2f}.",
        "Cluster: two Ray nodes on this machine (ray.cluster_utils.Cluster), one CPU and a "
        f"{STORE_BYTES >> 20} MiB object store each; the actor pinned to the driver's node "
        "or to the second one (objects then cross object stores, as between hosts).",
    ]
    for table in [*tables(rows), sweep_table(sweep)]:
        print(table.text(), end="\n\n")
    for target in found:
        print(target.line())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(rows, sweep, found, header), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
