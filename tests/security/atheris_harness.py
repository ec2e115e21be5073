"""Coverage-guided fuzzing of the decoder with atheris, run by hand (not part of the suite).

atheris is not a project dependency; install it anywhere and put it on the path::

    pip install --target /tmp/atheris atheris
    PYTHONPATH=/tmp/atheris:. .venv/bin/python tests/security/atheris_harness.py \\
        -atheris_runs=1000000 -max_len=16384 -artifact_prefix=/tmp/mmcodec-crash- \\
        /tmp/mmcodec-corpus

The corpus directory is seeded with the valid messages of ``samples.SAMPLES`` (single
buffers, and header frames). The first input byte picks the entry point and the type:
``decode_bytes`` on the rest, or ``decode`` with the rest as frame 0 and a sample's
payload frames after it. The contract checked is the fuzz test's: a well-typed value
or ``DecodeError``; anything else is a crash that atheris reports and saves.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]
except ImportError:  # pragma: no cover - atheris is optional
    atheris = None

# Imported first, so that only the codec (not torch, numpy, msgspec) is instrumented.
import msgspec  # noqa: F401
import numpy  # noqa: F401
import torch  # noqa: F401

if atheris is not None:  # pragma: no cover - needs atheris
    with atheris.instrument_imports(include=["mmcodec", "generated"]):
        from mmcodec.generated import multimodal as mm
        from tests.security.samples import SAMPLES, check_value
else:
    from mmcodec.generated import multimodal as mm
    from tests.security.samples import SAMPLES, check_value

_KINDS = list(SAMPLES.values())
_PAYLOADS = [[bytes(f) for f in mm.encode(make())][1:] for _, make in _KINDS]


def test_one_input(data: bytes) -> None:
    """One fuzz case: DecodeError or a well-typed value, nothing else."""
    if not data:
        return
    selector, rest = data[0], data[1:]
    index = (selector >> 1) % len(_KINDS)
    tp = _KINDS[index][0]
    try:
        if selector & 1:
            value: Any = mm.decode([rest, *_PAYLOADS[index]], tp)
        else:
            value = mm.decode_bytes(rest, tp)
    except mm.DecodeError:
        return
    check_value(value, tp)
    mm.encode(value)


def seed(corpus: Path) -> None:
    """Write the valid messages into ``corpus``, in this harness's input format."""
    corpus.mkdir(parents=True, exist_ok=True)
    for index, (_, make) in enumerate(_KINDS):
        value = make()
        frames = mm.encode(value)
        (corpus / f"seed-{index}-buffer").write_bytes(bytes([index << 1]) + mm.encode_bytes(value))
        (corpus / f"seed-{index}-header").write_bytes(bytes([index << 1 | 1]) + bytes(frames[0]))


def main(argv: list[str]) -> int:
    if atheris is None:
        print("atheris is not installed; see this file's docstring", file=sys.stderr)
        return 0
    for arg in argv[1:]:  # pragma: no cover - needs atheris
        if not arg.startswith("-"):
            seed(Path(arg))
    atheris.Setup(argv, test_one_input)  # pragma: no cover
    atheris.Fuzz()  # pragma: no cover
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main(sys.argv))
