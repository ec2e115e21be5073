"""The Rust rows of ``make bench``: decode and encode of every design payload in Rust,
beside the same operations in Python, in the same run.

For each payload Python encodes the message into one buffer (``encode_bytes``); the Rust
side (``rust/tools``, the ``mmcodec-bench`` binary) decodes the buffer's frames, encodes the
decoded value to frames and to one buffer, and says how many tensor bytes its decoded value
holds outside the input (0: no copy). Python decodes the same frames and encodes the
payload, both ways, timed the same way (calls sampled for the budget's seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.runner import Budget, Stats, measure
from mmcodec.domain.multimodal import MultiModalKwargsItems
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from mmcodec.runtime.limits import DEFAULT_LIMITS

RUST: Final = Path(__file__).resolve().parents[1] / "rust"
BINARY: Final = RUST / "target" / "release" / "mmcodec-bench"


@dataclass(frozen=True, slots=True)
class RustRow:
    """One payload's decode and encode times on both sides."""

    payload: str
    python: dict[str, Stats]
    rust: dict[str, Stats]
    rust_copied: int
    """Tensor bytes of Rust's decoded value outside the input buffer (0: no copy)."""


OPERATIONS: Final = ("decode", "encode", "encode_bytes")


def build() -> Path:
    """Build ``mmcodec-bench`` (release), against Debian's crates unless
    ``MMCODEC_CARGO_CONFIG`` says otherwise (``make bench`` sets it; empty: crates.io)."""
    config = os.environ.get("MMCODEC_CARGO_CONFIG", str(RUST / "offline.toml"))
    command = ["cargo", "build", "--release", "--quiet", "-p", "mmcodec-tools"]
    if config:
        command[2:2] = ["--config", config]
    subprocess.run(command, cwd=RUST, check=True)
    return BINARY


def run_rust(
    payloads: Mapping[str, MultiModalKwargsItems],
    budget: Budget,
    progress: Callable[[str], None],
) -> list[RustRow]:
    binary = build()
    rows = []
    for name, items in payloads.items():
        progress(f"rust: {name}")
        buffer = bytes(mm.encode_bytes(items))
        with tempfile.NamedTemporaryFile(suffix=".mmcb") as file:
            file.write(buffer)
            file.flush()
            limits = ["--min-reps", str(budget.min_reps), "--max-reps", str(budget.max_reps)]
            out = subprocess.run(
                [str(binary), file.name, "--seconds", str(budget.seconds), *limits],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        measured = json.loads(out)
        rust = {op: Stats.of(measured[op]) for op in OPERATIONS}
        rows.append(RustRow(name, _python(items, buffer, budget), rust, int(measured["copied"])))
    return rows


def _python(items: MultiModalKwargsItems, buffer: bytes, budget: Budget) -> dict[str, Stats]:
    """Python's times for what the Rust side did with the same message."""
    frames = framing.split(buffer, DEFAULT_LIMITS)
    return {
        "decode": measure(lambda: mm.decode(frames, mm.MultiModalKwargsItems), budget),
        "encode": measure(lambda: mm.encode(items), budget),
        "encode_bytes": measure(lambda: mm.encode_bytes(items), budget),
    }
