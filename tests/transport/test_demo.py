"""The main job, ``python -m mmcodec.demo``, run in-process against a real receiver process."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from typing import Final

import pytest
import torch

from mmcodec.demo import sender
from mmcodec.demo.payloads import DEMO_PAYLOADS, QUICK, llava_feature_spec
from mmcodec.demo.receiver import describe_difference
from mmcodec.demo.sender import HEADER, fanout_header, main
from mmcodec.generated import multimodal as mm
from mmcodec.transport.shm import SharedMemoryUnavailable

pytestmark = pytest.mark.timeout(120)


def test_quick_demo_verifies_every_payload_over_ipc() -> None:
    out = io.StringIO()
    assert main(["--quick", "--repeat", "2"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert re.fullmatch(
        r"mmcodec demo: 4 payloads to receiver pid \d+ over ipc://\S+/data, "
        r"2 messages each \(medians\)",
        lines[0],
    )
    assert lines[1] == HEADER
    assert HEADER.split() == [
        "payload", "MB", "frames", "encode", "µs", "send→decoded", "µs", "GB/s", "verified",
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[2:6]] == ["llava", "whisper", "64", "llava"]
    assert [line[:20].strip() for line in lines[2:6]] == list(QUICK)
    assert all(line.endswith("  ✓") for line in lines[2:6])
    # wire MB and frame count of llava: one (3, 336, 336) bf16 tensor and the header
    assert lines[2].split()[1:3] == ["0.68", "2"]
    assert re.fullmatch(
        r"all 4 payloads \(\d+\.\d MB\) verified by the receiver against values it rebuilt "
        r"from the same seeds",
        lines[6],
    )
    assert len(lines) == 7


def test_quick_demo_with_shared_memory_verifies_every_payload() -> None:
    out = io.StringIO()
    assert main(["--quick", "--repeat", "2", "--shm"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert re.fullmatch(
        r"mmcodec demo: 4 payloads to receiver pid \d+ over ipc://\S+/data "
        r"\+ shared memory mmcodec-[0-9a-f]{32} \(frames ≥ 64 KiB\), 2 messages each \(medians\)",
        lines[0],
    )
    assert [line[:20].strip() for line in lines[2:6]] == list(QUICK)
    assert all(line.endswith("  ✓") for line in lines[2:6])
    assert lines[6].startswith("all 4 payloads (")


def test_shared_memory_demo_works_with_a_pool_smaller_than_its_payloads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Little free memory sizes the pool down: frames that do not fit go through ZMQ, and
    # every payload still arrives intact.
    monkeypatch.setattr(sender, "DEFAULT_POOL_BYTES", 1 << 20)
    out = io.StringIO()
    argv = ["--repeat", "2", "--shm", "--payload", "llava", "--payload", "qwen2.5-vl"]
    assert main(argv, out=out) == 0
    lines = out.getvalue().splitlines()
    assert all(line.endswith("  ✓") for line in lines[2:4])


def test_shared_memory_demo_is_skipped_where_there_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unavailable(*args: object, **kwargs: object) -> None:
        raise SharedMemoryUnavailable("no sealed memfds on this platform")

    monkeypatch.setattr(sender, "SharedMemoryPool", unavailable)
    out = io.StringIO()
    assert main(["--quick", "--shm"], out=out) == 0
    assert out.getvalue() == (
        "shared memory is not available here (no sealed memfds on this platform): "
        "skipped the --shm run\n"
    )


def test_demo_exits_1_and_names_the_difference_when_values_do_not_match() -> None:
    # The receiver checks against other seeds: the check itself must catch every message.
    out = io.StringIO()
    argv = ["--transport", "tcp", "--repeat", "1", "--expect-seed-offset", "1000"]
    argv += ["--payload", "llava", "--payload", "64 small items"]
    assert main(argv, out=out) == 1
    lines = out.getvalue().splitlines()
    assert " over tcp://127.0.0.1:" in lines[0]
    assert [line[:20].strip() for line in lines[2:4]] == ["llava", "64 small items"]
    assert all(line.endswith("  ✗") for line in lines[2:4])
    assert re.fullmatch(
        r"llava: \$\['image'\]\[0\]\['pixel_values'\]\.data: \d+ of 338688 values differ",
        lines[4],
    )
    assert re.fullmatch(
        r"64 small items: \$\['image'\]\[0\]\['grid'\]\.data: [123] of 3 values differ", lines[5]
    )
    assert lines[6] == "2 of 2 payloads did not arrive intact"


def test_the_payload_set_is_the_benchmarks_plus_a_feature_spec() -> None:
    assert list(DEMO_PAYLOADS) == [
        "qwen2.5-vl",
        "llava",
        "internvl",
        "minicpm-v",
        "whisper",
        "idefics3",
        "qwen2.5-vl x16",
        "64 small items",
        "llava feature spec",
    ]
    spec = llava_feature_spec(4)
    assert DEMO_PAYLOADS["llava feature spec"].type is mm.MultiModalFeatureSpec
    assert spec.mm_position == mm.PlaceholderRange(offset=5, length=576)
    assert spec.data == DEMO_PAYLOADS["llava"].build(4)["image"][0]
    assert spec == llava_feature_spec(4)


def test_describe_difference_names_the_first_difference() -> None:
    a = mm.MultiModalFieldElem(torch.zeros(2, 3), mm.FlatField([slice(0, 2)]))
    b = mm.MultiModalFieldElem(torch.zeros(2, 3), mm.FlatField([slice(0, 1)]))
    got = mm.MultiModalKwargsItem({"x": a})
    assert describe_difference(got, mm.MultiModalKwargsItem({"x": a})) == ""
    assert describe_difference(got, mm.MultiModalKwargsItem({"x": b})) == (
        f"$['x'].field: {a.field!r}, expected {b.field!r}"
    )
    assert describe_difference(got, mm.MultiModalKwargsItem({"y": a})) == (
        "$: keys ['x'], expected ['y']"
    )
    c = mm.MultiModalFieldElem([torch.zeros(2), torch.ones(2)], mm.BatchedField())
    d = mm.MultiModalFieldElem((torch.zeros(2), torch.ones(2)), mm.BatchedField())
    assert describe_difference(c, d) == "$.data: a list, expected a tuple"
    mixed: list[mm.NestedTensors] = [torch.zeros(2), torch.zeros(2, dtype=torch.int64)]
    e = mm.MultiModalFieldElem(mixed, mm.BatchedField())
    assert describe_difference(c, e) == "$.data[1]: torch.float32 [2], expected torch.int64 [2]"
    spec = llava_feature_spec(1)
    other = llava_feature_spec(1)
    other.mm_position = mm.PlaceholderRange(offset=6, length=576)
    assert describe_difference(spec, other) == "$.mm_position.offset: 5, expected 6"


def test_quick_demo_fans_out_one_copy_to_four_readers() -> None:
    out = io.StringIO()
    assert main(["--quick", "--repeat", "2", "--shm", "--readers", "4"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert re.fullmatch(
        r"mmcodec demo: 4 payloads to 4 receivers \(pids \d+, \d+, \d+, \d+\) via PUB over "
        r"ipc://\S+/data \+ shared memory mmcodec-[0-9a-f]{32} \(frames ≥ 64 KiB, one copy for "
        r"4 readers\), 2 messages each \(medians\)",
        lines[0],
    )
    assert lines[1] == fanout_header(4)
    assert lines[1].split() == [
        "payload", "MB", "frames", "encode", "µs", "shm", "MB",
        "r0", "µs", "r1", "µs", "r2", "µs", "r3", "µs", "verified",
    ]  # fmt: skip
    rows = {line[:20].strip(): line[20:].split() for line in lines[2:6]}
    assert list(rows) == list(QUICK)
    assert all(row[-1] == "✓" and len(row) == 9 for row in rows.values())
    # MB, frames, encode µs, shm MB: the image lies in shared memory for every reader
    assert rows["llava"][3] == rows["llava feature spec"][3] == "0.68"
    assert rows["64 small items"][3] == "0.00"  # nothing large: all through ZMQ
    assert lines[6].startswith("all 4 payloads (") and "each of the 4 receivers" in lines[6]


ORPHAN: Final = """
import ctypes, json, os, re, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans come to us, to be waited for
demo = subprocess.Popen(
    [sys.executable, "-m", "mmcodec.demo", "--shm", "--payload", "qwen2.5-vl", "--repeat", "5000"],
    stdout=subprocess.PIPE, text=True,
)
first = demo.stdout.readline()
pid = int(re.search(r"receiver pid (\\d+)", first).group(1))
name = re.search(r"(mmcodec-[0-9a-f]{32})", first).group(1)
segment = f"/memfd:{name} (deleted)"
def attached():
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == segment:
                return True
        except OSError:  # closed meanwhile
            pass
    return False
deadline = time.monotonic() + 60
while not attached():  # messages flow once the receiver has the segment open
    assert time.monotonic() < deadline, "the receiver never attached the segment"
    time.sleep(0.05)
time.sleep(0.5)
os.kill(demo.pid, signal.SIGKILL)
killed = time.monotonic()
demo.wait()
_, status = os.waitpid(pid, 0)  # the receiver, orphaned, is ours now
print(json.dumps({
    "status": os.waitstatus_to_exitcode(status),
    "seconds": time.monotonic() - killed,
    "segment left": os.path.exists(f"/dev/shm/{name}"),
}))
"""


def test_an_orphaned_receiver_says_so_and_exits_when_its_sender_is_killed() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ORPHAN], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == 3, done.stderr
    assert report["seconds"] < 10  # it checks every 0.5 s; the rest is its exit
    assert not report["segment left"]  # a memfd: never a file
    assert re.search(r"receiver 0: the sender \(pid \d+\) is gone; exiting", done.stderr)
