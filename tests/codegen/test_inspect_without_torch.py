"""``mmcodec inspect`` without torch (issue 22): what it imports, the checks and values it
computes without torch (held to the decoder's and torch's own), and ``--module`` found in
the working directory by the console script.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmcodec import payloads
from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing, runs, tensors
from mmcodec.runtime.dtypes import BY_NAME
from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.inspect_values import first_values
from mmcodec.runtime.limits import Limits
from mmcodec.runtime.wire import TensorRun
from mmcodec.runtime.wire_dtypes import WIRE_DTYPES

ROOT = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).parent / "mmcodec"


def test_the_cli_imports_no_torch_or_numpy_but_for_values_and_module(tmp_path: Path) -> None:
    capture = tmp_path / "items.mmc"
    framing.save_frames(mm.encode(payloads.internvl(0)), capture)
    probe = (
        "import sys, contextlib, io\n"
        "from mmcodec.codegen.cli import main\n"
        "seen = []\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    with contextlib.suppress(SystemExit):\n"
        "        main(['--help'])\n"
        "    assert main(['validate']) == 0 and main(['json-schema']) == 0\n"
        "    seen.append(sorted(m for m in ('torch', 'numpy') if m in sys.modules))\n"
        f"    assert main(['inspect', {str(capture)!r}]) == 0\n"
        "    seen.append(sorted(m for m in ('torch', 'numpy') if m in sys.modules))\n"
        f"    assert main(['inspect', {str(capture)!r}, '--tensors', '3']) == 0\n"
        "    seen.append(sorted(m for m in ('torch', 'numpy') if m in sys.modules))\n"
        "print(seen)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    # --help, the compiler's commands and a description without values: neither (they
    # imported torch through this command's module before); values are read with numpy.
    assert result.stdout == "[[], [], ['numpy']]\n"


def test_the_wire_dtype_table_is_the_decoder_s() -> None:
    assert set(BY_NAME) <= set(WIRE_DTYPES)  # an older torch may lack a float8 variant
    for name, info in BY_NAME.items():
        wire = WIRE_DTYPES[name]
        assert (wire.itemsize, wire.carrier) == (info.itemsize, info.numpy_carrier.name), name


def _torch_values(t: torch.Tensor, n: int) -> list[Any]:
    """What ``--tensors`` showed when it read values with torch."""
    flat = t.reshape(-1)[:n]
    if flat.is_complex():
        pairs = torch.view_as_real(flat.to(torch.complex128)).tolist()
        return [[_json(re), _json(im)] for re, im in pairs]
    if flat.is_floating_point():
        return [_json(v) for v in flat.to(torch.float64).tolist()]
    values: list[Any] = flat.tolist()
    return values


def _json(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _payload(t: torch.Tensor) -> memoryview:
    raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return memoryview(b"\xff" * 3 + raw)  # at an odd offset, as inline payloads can be


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_values_are_torch_s_for_every_dtype(name: str) -> None:
    dtype = BY_NAME[name].torch_dtype
    g = torch.Generator().manual_seed(0)
    if name.startswith("float8"):  # every byte: zeros, subnormals, NaNs, infinities
        t = torch.arange(256, dtype=torch.uint8).view(dtype)
    elif name == "bool":
        t = torch.rand(40, generator=g) > 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        base = torch.randn(37, generator=g, dtype=torch.complex128 if dtype.is_complex else None)
        special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-7, 65504.0])
        if dtype.is_complex:
            special = torch.complex(special, special.flip(0))
        t = torch.cat([special, base]).to(dtype) if name != "complex32" else base.to(dtype)
    else:
        info = torch.iinfo(dtype)
        t = torch.tensor([info.min, info.max, 0, 1, -1 if info.min < 0 else 2], dtype=dtype)
    n = t.numel()
    shown = first_values(WIRE_DTYPES[name], _payload(t), 3, n, n + 5)
    assert json.dumps(shown) == json.dumps(_torch_values(t, n)), name
    assert first_values(WIRE_DTYPES[name], _payload(t), 3, n, 2) == shown[:2]


# -- the run checks without torch agree with the decoder's ------------------------------


_EDGE_DIMS = [1 << 62, (1 << 63) - 1, 1 << 63, -1]


@st.composite
def _messages(draw: st.DrawFn) -> tuple[list[TensorRun], list[int], list[memoryview], Limits]:
    """Runs over a few frames: mostly plausible, with an edge value here and there."""
    frames = [memoryview(b"h" * draw(st.integers(1, 64)))]
    for size in draw(st.lists(st.sampled_from([0, 1, 2, 8, 64]), max_size=3)):
        fill = draw(st.sampled_from([b"\0", b"\1", b"\0\1", b"\2"]))
        frames.append(memoryview((fill * size)[:size]))
    message_runs = []
    for _ in range(draw(st.integers(0, 4))):
        dtype = draw(st.sampled_from(["bool", "bool", "int64", "float32", "bfloat16", "x"]))
        shape = draw(st.lists(st.sampled_from([0, 1, 2, 2, 4, *_EDGE_DIMS]), max_size=3))
        if draw(st.booleans()):
            data: int | memoryview = draw(st.integers(-1, len(frames)))
        else:
            data = memoryview(draw(st.sampled_from([b"", b"\0", b"\1\0", b"\2", b"\0" * 8])))
        offset = draw(st.sampled_from([0, 0, 0, 1, 8, -1, 1000]))
        count = draw(st.sampled_from([1, 1, 1, 2, 3, 0, 10**9]))
        message_runs.append(TensorRun(dtype, shape, data, offset, count))
    refs = draw(st.lists(st.integers(-1, 5), max_size=6))
    limits = draw(st.sampled_from([Limits(), Limits(max_ndim=2, max_tensors=3)]))
    return message_runs, refs, frames, limits


def _verdict(check_runs: Any, check_refs: Any, message: Any) -> Any:
    message_runs, refs, frames, limits = message
    try:
        layouts, total = check_runs(message_runs, frames, limits)
        used = check_refs(refs, layouts, total, limits)
    except (DecodeError, tensors.RunError) as e:
        return ("rejected", e.message)
    return (
        "accepted",
        total,
        used,
        [
            (info.name, shape, count, bytes(buffer), offset)
            for info, shape, count, buffer, offset in layouts
        ],
    )


@settings(max_examples=400, deadline=None)
@given(message=_messages())
def test_run_checks_without_torch_agree_with_the_decoder_s(message: Any) -> None:
    assert _verdict(runs.check_runs, runs.check_refs, message) == _verdict(
        tensors.check_runs, tensors.check_refs, message
    )


@pytest.mark.parametrize(
    ("message_runs", "refs", "expected"),
    [
        ([TensorRun("bool", [4], 1, 1)], [], "bool payload holds a byte other than 0 and 1"),
        ([TensorRun("bool", [4], 1, 0, 2)], [], "bool payload holds a byte other than 0 and 1"),
        ([TensorRun("bool", [4], 1)], [0, 0], "accepted"),
        ([TensorRun("uint8", [2], 1, 0, 4)], [0, 1, 3], "no entry of the tensor reference"),
        ([TensorRun("uint8", [2], 1, 0, 4)], [0, 1, 3, 2, 2], "accepted"),
        ([TensorRun("uint8", [], 2), TensorRun("uint8", [], 1)], [], "accepted"),
        ([TensorRun("uint8", [], 2), TensorRun("uint8", [], 2)], [], "frame 1 is not referenced"),
    ],
)
def test_run_checks_agree_on_bool_payloads_refs_and_frame_order(
    message_runs: list[TensorRun], refs: list[int], expected: str
) -> None:
    payload = memoryview(b"\0\1\1\0\2\0\1\0")
    frames = [memoryview(b"h" * 64), payload]
    if any(run.data == 2 for run in message_runs):
        frames.append(payload)
    message = (message_runs, refs, frames, Limits())
    verdict = _verdict(runs.check_runs, runs.check_refs, message)
    assert verdict == _verdict(tensors.check_runs, tensors.check_refs, message)
    assert verdict[0] == expected if expected == "accepted" else verdict[1].startswith(expected)


# -- --module from the working directory ------------------------------------------------

SCHEMA = """\
schema: drawing
version: 1
types:
  Stroke:
    struct:
      points: {type: tensor}
      width: {type: float}
"""


def test_the_console_script_imports_module_from_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "drawing.yaml").write_text(SCHEMA)
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    generate = [str(CONSOLE_SCRIPT), "generate", "--schemas", "schema", "--out", "mypkg/codecs"]
    made = subprocess.run(generate, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert made.returncode == 0, made.stderr
    write = (
        "import torch\n"
        "from mypkg.codecs import drawing\n"
        "stroke = drawing.Stroke(points=torch.tensor([[0.0, 1.0]]), width=1.5)\n"
        "open('stroke.mmc', 'wb').write(drawing.encode_bytes(stroke))\n"
    )
    wrote = subprocess.run(
        [sys.executable, "-c", write], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert wrote.returncode == 0, wrote.stderr

    # The console script's own directory, not the working directory, starts sys.path:
    # "No module named 'mypkg'" before.
    shown = subprocess.run(
        [CONSOLE_SCRIPT, "inspect", "stroke.mmc", "--module", "mypkg.codecs.drawing"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout.endswith(
        "body:\n  Stroke\n    .points: tensor 0: float32[1, 2]\n    .width: 1.5\n"
    )


@pytest.mark.parametrize(
    ("name", "payload", "expected"),
    [
        # Signalling NaNs: widening one to float64 raises numpy's invalid flag, a warning that
        # filterwarnings = error made an exception (hypothesis found it in a random run).
        ("float32", b"\x01\x00\x80\x7f", ["nan"]),
        ("float16", b"\x01\x7c", ["nan"]),
        ("complex64", b"\x01\x00\x80\x7f\x00\x00\x80\x3f", [["nan", 1.0]]),
        ("float64", b"\x01\x00\x00\x00\x00\x00\xf0\x7f", ["nan"]),
    ],
)
def test_signalling_nans_show_as_nan_without_a_warning(
    name: str, payload: bytes, expected: list[Any]
) -> None:
    assert first_values(WIRE_DTYPES[name], memoryview(payload), 0, 1, 1) == expected
