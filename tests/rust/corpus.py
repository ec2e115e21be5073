"""The conformance corpus both sides read and write: messages and the batches they came
from, made from fixed seeds at test time (the design payloads reach 151 MB).

* :func:`samples`: the hostile-input samples (``tests/security/samples.py``): every kind
  of field, ragged and tuple data, empty and 0-d tensors, runs, inline payloads, None.
* :func:`payloads`: every design payload (``mmcodec.payloads``), seed 0, with the batch
  and configs it was built from (recorded through the generators' ``api=`` hook).
* :func:`golden`: a value of every named type of ``tests/schemas/features.yaml`` (the
  cases of ``tests/codegen/test_features.py``), or of ``tests/schemas/enums.yaml`` (those
  of ``tests/codegen/test_enums.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import torch

from mmcodec.domain import multimodal as domain
from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS
from mmcodec.runtime.codec import codec_of
from mmcodec.runtime.columns import MIN_ITEMS
from mmcodec.runtime.dtypes import BY_TORCH
from tests.security.samples import SAMPLES


@dataclass
class Batch:
    """A processor's batch and its field configs, as a payload generator built them."""

    batch: dict[str, Any]
    config: dict[str, domain.MultiModalFieldConfig]
    items: mm.MultiModalKwargsItems


def samples() -> Iterator[tuple[str, Any, Any]]:
    """(name, type, value) of every hostile-input sample, then of :func:`column_lists`."""
    for name, (tp, make) in SAMPLES.items():
        yield name, tp, make()
    for name, value in column_lists():
        yield name, mm.MultiModalKwargsItems, value


def _elem(data: Any, field: Any) -> Any:
    return mm.MultiModalFieldElem(data, field)


def _batch(n: int) -> list[mm.MultiModalKwargsItem | None]:
    """``n`` items of one batch: ``grid`` int64[n, 3] (batched), ``scale`` (shared)."""
    config = {
        "grid": mm.MultiModalFieldConfig.batched("image"),
        "scale": mm.MultiModalFieldConfig.shared("image", n),
    }
    grid = torch.arange(n * 3, dtype=torch.int64).reshape(n, 3)
    batch = {"grid": grid, "scale": torch.tensor([0.5, 2.0])}
    return list(mm.MultiModalKwargsItems.from_hf_inputs(batch, config)["image"])


def column_lists() -> Iterator[tuple[str, mm.MultiModalKwargsItems]]:
    """(name, items) of item lists that travel as column lists (wire version 3: at least
    ``MIN_ITEMS`` present items), each way the encoder lays one out, and of lists that
    fall back to rows."""
    n = MIN_ITEMS
    grid = torch.arange(n * 3, dtype=torch.int64).reshape(n, 3)
    scale = torch.tensor([0.5, 2.0])
    # Absent (cached) items: their positions travel in `absent`.
    absent = _batch(n + 2)
    absent[0] = absent[2] = None
    yield "columns-absent", mm.MultiModalKwargsItems({"image": absent})
    # Field variants: one object per item (each value in full), or all items but the last
    # sharing one (rows' back-reference form `[-1, i]` inside the field column).
    flat = mm.FlatField([slice(i, i + 1) for i in range(n)])
    own = [mm.BatchedField() for _ in range(n)]
    mixed = [*[flat] * (n - 1), mm.FlatField([slice(0, n)], keep_on_cpu=True)]
    other = grid * 2  # the same tensor twice would travel once from Rust, twice from Python
    rows: list[mm.MultiModalKwargsItem | None] = [
        mm.MultiModalKwargsItem({"own": _elem(grid[i], own[i]), "mixed": _elem(other[i], mixed[i])})
        for i in range(n)
    ]
    yield "columns-distinct-fields", mm.MultiModalKwargsItems({"image": rows})
    # Elements met before (another modality holds them): values columns of back-references;
    # an element all items but the last share: a values column, the others back-references.
    shared = _elem(scale, mm.SharedField(n))
    pairs: list[mm.MultiModalKwargsItem | None] = [
        *(
            mm.MultiModalKwargsItem({"scale": shared, "grid": _elem(grid[i], own[0])})
            for i in range(n)
        ),
        mm.MultiModalKwargsItem({"scale": _elem(scale, own[1]), "grid": _elem(None, own[0])}),
    ]
    yield "columns-sent-before", mm.MultiModalKwargsItems({"image": pairs, "video": pairs[:n]})
    # Rows: keys in another order, items without keys, a single item, only None.
    first, second = pairs[0], pairs[1]
    assert first is not None and second is not None
    swapped = mm.MultiModalKwargsItem(dict(reversed(list(second.items()))))
    yield (
        "columns-fall-back-to-rows",
        mm.MultiModalKwargsItems(
            {
                "image": [first, swapped, *pairs[2:n]],
                "audio": [mm.MultiModalKwargsItem() for _ in range(n)],
                "video": [first],
                "cached": [None] * n,
            }
        ),
    )
    # The threshold, counted in present items: 15 stay rows (wire version 2), 16 columns.
    fifteen = _batch(n)
    # The last absent: a gap among one storage's small views would split them into inline
    # runs that Rust, re-encoding, no longer knows share a storage (and orders otherwise).
    fifteen[-1] = None
    yield (
        "columns-15-present-rows",
        mm.MultiModalKwargsItems({"image": _batch(n - 1), "video": fifteen}),
    )
    sixteen = _batch(n + 1)
    sixteen[1] = None
    yield "columns-16-present", mm.MultiModalKwargsItems({"image": _batch(n), "video": sixteen})


def _recording_api() -> tuple[Any, list[Batch]]:
    seen: list[Batch] = []

    class Items(domain.MultiModalKwargsItems):
        @classmethod
        def from_hf_inputs(cls, batch: Any, config: Any) -> Any:
            items = domain.MultiModalKwargsItems.from_hf_inputs(batch, config)
            seen.append(Batch(dict(batch), dict(config), items))
            return items

    api = SimpleNamespace(
        MultiModalFieldConfig=domain.MultiModalFieldConfig, MultiModalKwargsItems=Items
    )
    return api, seen


def payloads(names: list[str] | None = None) -> Iterator[tuple[str, Batch]]:
    """Every design payload (seed 0) with the batch it was built from."""
    for name, generator in PAYLOADS.items():
        if names is not None and name not in names:
            continue
        api, seen = _recording_api()
        generator(0, api=api)  # type: ignore[call-arg]
        (batch,) = seen
        yield name, batch


def golden(schema: str = "features") -> Iterator[tuple[str, str, Any]]:
    """(case name, ``schema.Type``, value) for every case of the features (or enums)
    schema's round-trip tests."""
    module = golden_module(schema)
    cases = importlib.import_module(f"tests.codegen.test_{schema}").CASES
    names = {id(tp): name for name, tp in codec_of(module).named_types.items()}
    for case, tp, value in cases:
        yield case, f"{schema}.{names[id(tp)]}", value


def golden_module(schema: str) -> Any:
    """The golden Python module of a test schema (``tests.golden.features``)."""
    return importlib.import_module(f"tests.golden.{schema}")


def golden_type(type_name: str) -> Any:
    """The Python type a ``schema.Type`` name of :func:`golden` stands for."""
    schema, name = type_name.split(".")
    return codec_of(golden_module(schema)).named_types[name]


def _nested(value: Any) -> Any:
    """A batch value for ``build`` inputs: tensors as [dtype, shape, bytes], lists nested."""
    if isinstance(value, torch.Tensor):
        info = BY_TORCH[value.dtype]
        raw = value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return ["t", info.name, list(value.shape), raw]
    kind = "l" if type(value) is list else "u"
    return [kind, [_nested(v) for v in value]]


def build_inputs(batch: Batch) -> bytes:
    """What ``mmcodec-conformance build`` reads: per key its modality, field kind and
    parameters, and its data (the batch tensors' bytes, each once)."""
    rows = []
    for key, value in batch.batch.items():
        config = batch.config[key]
        field = config.field
        if isinstance(field, domain.SharedField):
            kind, params = "shared", [field.batch_size]
        elif isinstance(field, domain.FlatField):
            assert field.dim == 0, "the Rust builder slices along dim 0"
            kind, params = "flat", [s.stop - s.start for s in field.slices]  # type: ignore[union-attr]
        else:
            kind, params = "batched", []
        rows.append([key, config.modality, kind, params, _nested(value)])
    return msgspec.msgpack.encode(rows)


# -- the committed corpus of the Rust mutation test -----------------------------------------

CORPUS_DIR = Path(__file__).resolve().parents[2] / "rust" / "corpus"
"""Small messages Python encodes, committed so that ``cargo test`` needs no Python."""


def corpus_files() -> dict[str, bytes]:
    """File name -> content: each message as one buffer, and ``manifest.txt`` (one
    ``file schema.Type`` a line)."""
    files: dict[str, bytes] = {}
    lines = []
    for name, tp, value in samples():
        files[f"{name}.mmcb"] = bytes(mm.encode_bytes(value))
        lines.append(f"{name}.mmcb multimodal.{tp.__name__}")
    for name, batch in payloads(["64 small items"]):
        file = name.replace(" ", "-") + ".mmcb"
        files[file] = bytes(mm.encode_bytes(batch.items))
        lines.append(f"{file} multimodal.MultiModalKwargsItems")
    for schema in ("features", "enums"):
        module = golden_module(schema)
        for case, type_name, value in golden(schema):
            tp = golden_type(type_name)
            files[f"{schema}-{case}.mmcb"] = bytes(module.encode_bytes(value, type=tp))
            lines.append(f"{schema}-{case}.mmcb {type_name}")
    files["manifest.txt"] = ("\n".join(lines) + "\n").encode()
    return files


if __name__ == "__main__":  # python -m tests.rust.corpus: rewrite rust/corpus
    CORPUS_DIR.mkdir(exist_ok=True)
    for stale in CORPUS_DIR.iterdir():
        stale.unlink()
    for file, content in corpus_files().items():
        (CORPUS_DIR / file).write_bytes(content)
    print(f"wrote {len(corpus_files())} files to {CORPUS_DIR}")
