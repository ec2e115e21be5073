"""Wire versions 2 and 3: old messages still decode, and old decoders refuse new ones clearly.

Column lists (wire version 3) change how an item list travels, not what it holds. So:

* every version-2 message that main's encoder wrote before column lists (kept as files in
  ``messages_v2/``, see :mod:`tests.evolution.wire_v2`) decodes with today's decoder to the
  value it was written from, with the same objects shared as that decoder shared them;
* an encoder still writes version 2, byte for byte as before, when it lays out no list as
  columns (an old decoder reads those), and version 3 only when it does;
* the decoder of main at :data:`MAIN` (the last that reads version 2 only), run from a copy
  of that commit in a subprocess, refuses a version-3 message with a DecodeError naming the
  version, and reads today's version-2 messages as its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import msgspec
import pytest

from mmcodec.generated import multimodal as mm
from mmcodec.runtime import framing
from tests.evolution.wire_v2 import HERE, MESSAGES, SHARING, sharing
from tests.security.samples import SAMPLES, same

ROOT = Path(__file__).resolve().parents[2]
MAIN = "85fe65f"
"""main before column lists: its encoder wrote the messages of ``messages_v2/``."""
RECORDED: dict[str, list[int]] = json.loads(SHARING.read_text())

COLUMNS = {"64-small-items", "sample-column_list"}
"""The messages whose item lists an encoder now lays out as columns (at least
``columns.MIN_ITEMS`` present items that share their keys); the other lists are shorter.
``sample-column_list`` (17 items) came after main and is no kept message."""


def _version(buffer: bytes | bytearray | memoryview) -> int:
    header = framing.split(buffer, mm.DEFAULT_LIMITS)[0]
    version: int = msgspec.msgpack.decode(header)[1]
    return version


def test_every_message_is_kept_with_what_its_decode_shared() -> None:
    assert sorted(path.stem for path in HERE.glob("*.mmcb")) == sorted(MESSAGES)
    assert sorted(RECORDED) == sorted(MESSAGES)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_a_version_2_message_decodes_as_it_did(name: str) -> None:
    tp, make = MESSAGES[name]
    buffer = (HERE / f"{name}.mmcb").read_bytes()
    assert _version(buffer) == 2
    decoded = mm.decode_bytes(buffer, tp)
    assert same(decoded, make())
    assert sharing(decoded) == RECORDED[name]


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_an_encoder_writes_version_3_only_for_column_lists(name: str) -> None:
    tp, make = MESSAGES[name]
    buffer = mm.encode_bytes(make(), type=tp)
    if name in COLUMNS:
        assert _version(buffer) == 3
    else:  # no list laid out as columns: the message of before, byte for byte
        assert bytes(buffer) == (HERE / f"{name}.mmcb").read_bytes()
    decoded = mm.decode_bytes(buffer, tp)
    assert same(decoded, make())
    assert sharing(decoded) == RECORDED[name]  # the same objects shared, whichever layout


# -- main's decoder ---------------------------------------------------------------------

_PROBE = """\
import hashlib, json, sys
import mmcodec
from mmcodec.generated import multimodal as mm
assert mmcodec.__file__.startswith(sys.argv[1]), mmcodec.__file__  # main's, not ours
out = {}
for path in sys.argv[2:]:
    data = open(path, "rb").read()
    try:
        value = mm.decode_bytes(data, mm.MultiModalKwargsItems)
    except mm.DecodeError as e:
        out[path] = "DecodeError: " + str(e)
        continue
    again = bytes(mm.encode_bytes(value))  # what it read, written back by main's encoder
    out[path] = "read: " + hashlib.sha256(again).hexdigest()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def main_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runtime, compiler and generated modules of :data:`MAIN`, extracted from git."""
    out = tmp_path_factory.mktemp("main")
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "archive",
            "--format=tar",
            MAIN,
            "mmcodec",
            "codegen",
            "generated",
        ],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(out, filter="tar")
    return out


def _main_reads(runtime: Path, messages: dict[str, bytes], tmp_path: Path) -> dict[str, str]:
    paths = []
    for name, data in messages.items():
        path = tmp_path / f"{name}.mmcb"
        path.write_bytes(data)
        paths.append(str(path))
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(runtime), *paths],
        capture_output=True,
        text=True,
        cwd=runtime,
        env={"PYTHONPATH": str(runtime), "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    said: dict[str, str] = json.loads(result.stdout.splitlines()[-1])
    return {Path(path).name.removesuffix(".mmcb"): text for path, text in said.items()}


def test_main_s_decoder_refuses_version_3_by_name_and_reads_version_2(
    main_runtime: Path, tmp_path: Path
) -> None:
    items = {name: item for name, item in MESSAGES.items() if item[0] is mm.MultiModalKwargsItems}
    items["sample-column_list"] = SAMPLES["column_list"]
    messages = {name: bytes(mm.encode_bytes(make(), type=tp)) for name, (tp, make) in items.items()}
    kept = {
        f"{name}.kept": (HERE / f"{name}.mmcb").read_bytes() for name in items if name in MESSAGES
    }
    said = _main_reads(main_runtime, {**messages, **kept}, tmp_path)
    for name in messages:
        if name in COLUMNS:
            assert said[name] == (
                "DecodeError: $: wire format version 3 is not supported "
                "(this decoder reads version 2)"
            ), name
        else:  # read as main read its own message (written back by it, the same bytes)
            assert said[name].startswith("read: ") and said[name] == said[f"{name}.kept"], name
    assert COLUMNS & set(messages) and set(messages) - COLUMNS  # both kinds were tried
