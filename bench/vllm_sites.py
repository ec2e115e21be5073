"""vLLM's process boundaries, stock vs the mmcodec plugin (``make bench-vllm``'s second part).

One table per site, both paths on the very same vLLM objects, interleaved
(:func:`bench.runner.measure_interleaved`), every decoded tensor touched:

- request path: an ``EngineCoreRequest`` (one feature per item) through vLLM's
  ``MsgpackEncoder`` / ``MsgpackDecoder(EngineCoreRequest)`` vs the plugin's subclasses;
- shm cache: ``put`` into a ``SingleWriterShmObjectStorage`` and ``get`` by a reader of the
  same segment (vLLM's ``MsgpackSerde``) vs ``ZeroCopyShmObjectStorage`` + ``MmcodecSerde``
  (the plugin's default) and vLLM's storage + ``MmcodecSerde`` (its copy mode);
- scale-out: ``encode_mm_kwargs_item`` then ``decode_mm_kwargs_item``, vLLM's vs the plugin's;
- broadcast: a ``SchedulerOutput`` carrying the items through ``MessageQueue`` to 1, 2 and 4
  reader processes, until every reader has touched them, items pickled by vLLM vs routed.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import Lock
from typing import Any, Final

import vllm.entrypoints.scale_out.token_in_token_out.mm_serde as vllm_mm_serde
import vllm.multimodal.inputs as vi
from vllm.distributed.device_communicators.shm_broadcast import MessageQueue
from vllm.distributed.device_communicators.shm_object_storage import (
    MsgpackSerde,
    SingleWriterShmObjectStorage,
    SingleWriterShmRingBuffer,
)
from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput
from vllm.v1.engine import EngineCoreRequest
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

from bench.runner import Budget, Stats, measure_interleaved, touch
from mmcodec.integrations import vllm as plugin
from mmcodec.integrations.vllm import broadcast
from mmcodec.payloads import qwen2_5_vl, small_items

STOCK: Final = "vLLM"
PLUGIN: Final = "mmcodec"
COPY_MODE: Final = "mmcodec copy mode"
TARGETS: Final = {
    ("request path", "1 Qwen image"): 1.0,
    ("request path", "4 Qwen images"): 1.0,
    ("request path", "16 Qwen images"): 1.0,
    ("request path", "64 small items"): 5.0,
    ("shm cache", "Qwen item (12 MB)"): 1.4,
    ("shm cache", "small item (1 KB)"): 1.3,
    ("scale-out", "Qwen item (12 MB)"): 1.0,
    ("scale-out", "small item (1 KB)"): 1.3,
}
"""Issue 20's targets: vLLM's median ÷ the plugin's."""


@dataclass
class Row:
    site: str
    payload: str
    stats: dict[str, Stats] = field(default_factory=dict)

    def ratio(self, method: str = PLUGIN, stat: str = "median") -> float:
        stock = getattr(self.stats[STOCK], stat)
        return stock / getattr(self.stats[method], stat)  # type: ignore[no-any-return]


def _qwen_item() -> Any:
    return qwen2_5_vl(0, 1, api=vi)["image"][0]


def _small_item() -> Any:
    return small_items(0, 1, api=vi)["image"][0]


def _touch(items: list[Any]) -> object:
    """Touch every tensor of ``items`` (:func:`bench.runner.touch` reads any mapping)."""
    mapping: Any = {"image": items}
    return touch(mapping)


def _touch_features(features: list[Any]) -> object:
    return _touch([f.data for f in features])


def _writable(frames: Any) -> list[Any]:
    """What a transport hands a decoder (vLLM's warns about read-only headers)."""
    return [bytearray(f) if isinstance(f, bytes) else f for f in frames]


# -- request path -------------------------------------------------------------------------------


def _request(items: list[Any]) -> Any:
    features = [
        vi.MultiModalFeatureSpec(
            data=item,
            modality="image",
            identifier=f"item-{i}",
            mm_position=vi.PlaceholderRange(offset=10 * i, length=8),
            mm_hash=f"item-{i}",
        )
        for i, item in enumerate(items)
    ]
    return EngineCoreRequest(
        request_id="request",
        prompt_token_ids=list(range(256)),
        mm_features=features,
        sampling_params=None,
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
    )


def request_rows(budget: Budget, rounds: int) -> list[Row]:
    payloads: dict[str, Callable[[], Any]] = {
        "1 Qwen image": lambda: qwen2_5_vl(0, 1, api=vi)["image"],
        "4 Qwen images": lambda: qwen2_5_vl(0, 4, api=vi)["image"],
        "16 Qwen images": lambda: qwen2_5_vl(0, 16, api=vi)["image"],
        "64 small items": lambda: small_items(0, 64, api=vi)["image"],
    }
    codecs = {
        STOCK: (MsgpackEncoder(), MsgpackDecoder(EngineCoreRequest)),
        PLUGIN: (plugin.MmcodecMsgpackEncoder(), plugin.MmcodecMsgpackDecoder(EngineCoreRequest)),
    }
    rows = []
    for name, make in payloads.items():
        request = _request(list(make()))

        def round_trip(codec: tuple[Any, Any], obj: Any = request) -> object:
            encoder, decoder = codec
            return _touch_features(decoder.decode(_writable(encoder.encode(obj))).mm_features)

        fns = {method: (lambda c=codec: round_trip(c)) for method, codec in codecs.items()}
        rows.append(Row("request path", name, measure_interleaved(fns, budget, rounds)))
    return rows


# -- shm cache ----------------------------------------------------------------------------------


class _ShmPair:
    """A writer and one reader (its own mapping, the readers' lock) of one segment."""

    keys = itertools.count()

    def __init__(self, storage: Any, serde: Any) -> None:
        ring = SingleWriterShmRingBuffer(256 << 20, create=True)
        self.writer = storage(
            max_object_size=64 << 20, n_readers=1, ring_buffer=ring, serde_class=serde
        )
        handle = self.writer.handle()
        handle.reader_lock = Lock()
        self.reader = storage.create_from_handle(handle)

    def put_get(self, item: Any) -> object:
        key = f"item-{next(self.keys)}"
        address, monotonic_id = self.writer.put(key, item)
        value = self.reader.get(address, monotonic_id, self.writer.get_signature(key), key)
        return _touch([value])

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


def shm_rows(budget: Budget, rounds: int) -> list[Row]:
    pairs = {
        STOCK: _ShmPair(SingleWriterShmObjectStorage, MsgpackSerde),
        PLUGIN: _ShmPair(plugin.ZeroCopyShmObjectStorage, plugin.MmcodecSerde),
        COPY_MODE: _ShmPair(SingleWriterShmObjectStorage, plugin.MmcodecSerde),
    }
    rows = []
    try:
        for name, item in (
            ("Qwen item (12 MB)", _qwen_item()),
            ("small item (1 KB)", _small_item()),
        ):
            fns = {method: (lambda p=pair, i=item: p.put_get(i)) for method, pair in pairs.items()}
            rows.append(Row("shm cache", name, measure_interleaved(fns, budget, rounds)))
    finally:
        for pair in pairs.values():
            pair.close()
    return rows


# -- scale-out ----------------------------------------------------------------------------------


def scale_out_rows(budget: Budget, rounds: int) -> list[Row]:
    functions = {
        STOCK: (vllm_mm_serde.encode_mm_kwargs_item, vllm_mm_serde.decode_mm_kwargs_item),
        PLUGIN: (plugin.encode_mm_kwargs_item, plugin.decode_mm_kwargs_item),
    }
    rows = []
    for name, item in (("Qwen item (12 MB)", _qwen_item()), ("small item (1 KB)", _small_item())):

        def round_trip(pair: tuple[Callable[..., Any], ...], obj: Any = item) -> object:
            encode, decode = pair
            return _touch([decode(encode(obj))])

        fns = {method: (lambda p=pair: round_trip(p)) for method, pair in functions.items()}
        rows.append(Row("scale-out", name, measure_interleaved(fns, budget, rounds)))
    return rows


# -- broadcast ----------------------------------------------------------------------------------


def _scheduler_output(items: list[Any]) -> Any:
    output = SchedulerOutput.make_empty()
    output.scheduled_new_reqs = [
        NewRequestData(
            req_id="request",
            prompt_token_ids=list(range(256)),
            mm_features=_request(items).mm_features,
            sampling_params=None,
            pooling_params=None,
            block_ids=([1, 2, 3],),
            num_computed_tokens=0,
            lora_request=None,
        )
    ]
    return output


def _reader(handle: Any, rank: int, done: Any) -> None:
    queue = MessageQueue.create_from_handle(handle, rank)
    queue.wait_until_ready()
    while (output := queue.dequeue()) is not None:
        _touch_features(output.scheduled_new_reqs[0].mm_features)
        del output
        done.send_bytes(b"")


def broadcast_rows(budget: Budget, rounds: int) -> list[Row]:
    context = multiprocessing.get_context("fork")
    payloads = {
        "1 Qwen image": _scheduler_output([_qwen_item()]),
        "64 small items": _scheduler_output(list(small_items(0, 64, api=vi)["image"])),
    }
    rows = []
    for readers in (1, 2, 4):
        queue = MessageQueue(readers, readers, max_chunk_bytes=16 << 20)
        pipes = [context.Pipe(duplex=False) for _ in range(readers)]
        processes = [
            context.Process(target=_reader, args=(queue.export_handle(), rank, pipes[rank][1]))
            for rank in range(readers)
        ]
        for process in processes:
            process.start()
        queue.wait_until_ready()

        def send(obj: Any, route: bool, queue: Any = queue, pipes: list[Any] = pipes) -> None:
            (broadcast.route_items if route else broadcast.unroute_items)()
            queue.enqueue(obj)
            for receive, _ in pipes:
                receive.recv_bytes()

        try:
            for name, obj in payloads.items():
                fns = {
                    STOCK: (lambda o=obj: send(o, False)),
                    PLUGIN: (lambda o=obj: send(o, True)),
                }
                stats = measure_interleaved(fns, budget, rounds)
                rows.append(Row("broadcast", f"{name}, {readers} reader(s)", stats))
        finally:
            broadcast.unroute_items()
            queue.enqueue(None)
            for process in processes:
                process.join(timeout=60)
    return rows


SITES: Final = {
    "request path": request_rows,
    "shm cache": shm_rows,
    "scale-out": scale_out_rows,
    "broadcast": broadcast_rows,
}


def run(budget: Budget, rounds: int, progress: Callable[[str], None] = print) -> list[Row]:
    """Every site's rows (the plugin is not installed: both paths are called directly)."""
    rows: list[Row] = []
    for site, rows_of in SITES.items():
        for row in rows_of(budget, rounds):
            progress(f"{site:>12} {row.payload:>30}: {_ratios(row)}")
            rows.append(row)
    return rows


def _t(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} µs"


def _ratios(row: Row) -> str:
    return ", ".join(
        f"{method} {_t(stats.median)} ({row.ratio(method):.2f}x)"
        for method, stats in row.stats.items()
    )


def report(rows: list[Row]) -> list[str]:
    """Markdown: one table per site, then the targets."""
    out = [
        "## The plugin at vLLM's process boundaries (issue 20)",
        "",
        "vLLM's own path vs the mmcodec plugin's on the same objects, interleaved in one run; "
        "medians with the 10th-90th percentile; x is vLLM's median ÷ the other's. Request "
        "path: an `EngineCoreRequest` (one feature per item) encoded and decoded. shm cache: "
        "`put` by the writer, `get` by a reader of the same segment (in this process). "
        "Scale-out: a string and back. Broadcast: a `SchedulerOutput` through `MessageQueue` "
        "until every reader process has touched the items.",
    ]
    for site in SITES:
        site_rows = [row for row in rows if row.site == site]
        if not site_rows:
            continue
        methods = list(site_rows[0].stats)
        header = " | ".join(f"{m} | x" if m != STOCK else m for m in methods)
        out += ["", f"**{site}**", "", f"| payload | {header} |"]
        out.append("|:---|" + "---:|" * (2 * len(methods) - 1))
        for row in site_rows:
            cells = []
            for method, stats in row.stats.items():
                cell = f"{_t(stats.median)} ({_t(stats.p10)}-{_t(stats.p90)})"
                cells.append(cell if method == STOCK else f"{cell} | {row.ratio(method):.2f}x")
            out.append(f"| {row.payload} | {' | '.join(cells)} |")
    out += ["", "**Targets (issue 20)**", ""]
    by_key = {(row.site, row.payload): row for row in rows}
    for key, target in TARGETS.items():
        if key in by_key:
            got = by_key[key].ratio()
            verdict = "PASS" if got >= target else "FAIL"
            out.append(
                f"- {verdict}: {key[0]}, {key[1]}: {got:.2f}x vLLM (target ≥ {target}x); "
                f"{by_key[key].ratio(stat='p10'):.2f}x at the 10th percentile"
            )
    return out
