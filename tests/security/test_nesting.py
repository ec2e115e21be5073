"""Deep msgpack nesting in a process that raised Python's recursion limit.

msgspec recurses in C as far as the recursion limit allows; with the limit at 1,000,000 a
header of a few hundred thousand nested arrays overflowed the stack (SIGSEGV) before the
guard in mmcodec.runtime.nesting. Each case runs in a child process: a crash must fail the
test, not kill the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmcodec.runtime.nesting import SAFE_NESTING, nesting_exceeds

# The child raises the limit, then feeds every decoder of untrusted headers 5,000,000
# nested arrays (5 MB): the codec (frames and single buffer, with and without a typed
# body), inspect, and a shared-memory control part. It prints one line per decoder.
CHILD = textwrap.dedent(
    """
    import sys
    import threading

    import msgspec

    from mmcodec.generated import multimodal as mm
    from mmcodec.runtime import errors, framing
    from mmcodec.runtime.codec import codec_of
    from mmcodec.runtime.inspect import describe
    from mmcodec.runtime.limits import Limits
    from mmcodec.transport.shm._wire import MARKER, parse_control
    from tests.security.samples import kwargs_items

    sys.setrecursionlimit(1_000_000)
    frames = [bytes(f) for f in mm.encode(kwargs_items())]
    envelope = msgspec.msgpack.decode(frames[0])
    deep = b"\\x91" * 5_000_000 + b"\\xc0"
    in_body = b"\\x98" + msgspec.msgpack.encode(envelope[:7])[1:] + deep
    in_tensors = (
        b"\\x98" + msgspec.msgpack.encode(envelope[:5])[1:] + deep
        + msgspec.msgpack.encode(envelope[6:])[1:]
    )
    limits = Limits(max_header_bytes=16 << 20)
    items = mm.MultiModalKwargsItems

    def attempt(name, call):
        try:
            call()
        except errors.DecodeError as e:
            print(name, e.path, e.message, sep="|")
        else:
            print(name, "accepted", sep="|")

    def run():
        for where, head in (("body", in_body), ("tensors", in_tensors)):
            message = [head, *frames[1:]]
            attempt(f"decode {where}", lambda: mm.decode(message, items))
            single = framing.join([memoryview(f) for f in message])
            attempt(f"decode_bytes {where}", lambda: mm.decode_bytes(single, items))
            attempt(f"inspect {where}", lambda: describe(message, codec_of(mm)))
        attempt("shm control", lambda: parse_control(memoryview(MARKER + deep), limits))

    run()
    worker = threading.Thread(target=run)  # a thread's stack, not the main one's
    worker.start()
    worker.join()
    """
)


def test_deep_nesting_is_refused_under_a_raised_recursion_limit() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    lines = result.stdout.splitlines()
    once = [
        f"{name}|$|message nested too deeply"
        for where in ("body", "tensors")
        for name in (f"decode {where}", f"decode_bytes {where}", f"inspect {where}")
    ] + ["shm control|$|malformed shared memory control part (nested too deeply)"]
    assert lines == once + once


# -- the measure itself ----------------------------------------------------------------------

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what msgpack carries
scalars = (
    st.none()
    | st.booleans()
    | ints
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
    | st.binary(max_size=300)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=20)
        | st.dictionaries(st.text(max_size=5) | ints, inner, max_size=20)
    ),
    max_leaves=60,
)


def depth(value: Any) -> int:
    """Levels of arrays and maps that hold something (an empty one opens no level)."""
    if isinstance(value, list) and value:
        return 1 + max(depth(v) for v in value)
    if isinstance(value, dict) and value:
        return 1 + max(max(depth(k), depth(v)) for k, v in value.items())
    return 0


@given(values, st.integers(min_value=0, max_value=8))
def test_the_measure_agrees_with_the_value(value: Any, limit: int) -> None:
    encoded = msgspec.msgpack.encode(value)
    assert nesting_exceeds(encoded, limit) is (depth(value) > limit)
    # Whatever follows the first value is not read.
    assert nesting_exceeds(encoded + b"\x91" * (limit + 2), limit) is (depth(value) > limit)


@pytest.mark.parametrize(
    ("data", "limit", "expected"),
    [
        (b"\x91" * 3 + b"\xc0", 3, False),
        (b"\x91" * 4 + b"\xc0", 3, True),
        (b"\x91" * 4, 3, True),  # ends early, but already too deep
        (b"\x91\x91\xc1", 5, False),  # not msgpack: the decoder says so
        (b"\xdd\xff\xff\xff\xff" * 3, 2, True),  # huge declared counts cost nothing
        (b"\xdf\x00\x00\x00\x01\xc0" * 3 + b"\xc0", 2, True),  # map32: a value nests
        (b"\xc7\x03\x01abc", 0, False),  # ext8 is skipped whole
        (b"\x92\xdb\x00\x00\x00\x02hi\x91\xc0", 1, True),
        (b"", 0, False),
    ],
)
def test_edge_cases(data: bytes, limit: int, expected: bool) -> None:
    assert nesting_exceeds(data, limit) is expected


def test_the_safe_depth_decodes_normally_in_a_raised_limit_process() -> None:
    # Just under the bound decodes as msgspec would; the guard only refuses beyond it.
    code = (
        "import sys, msgspec\n"
        "from mmcodec.runtime.nesting import SAFE_NESTING, refuse_deep_nesting\n"
        "sys.setrecursionlimit(1_000_000)\n"
        "ok = b'\\x91' * SAFE_NESTING + b'\\xc0'\n"
        "refuse_deep_nesting(ok)\n"
        "msgspec.msgpack.decode(ok)\n"
        "try:\n"
        "    refuse_deep_nesting(b'\\x91' + ok)\n"
        "except RecursionError:\n"
        "    print('refused')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert (result.returncode, result.stdout) == (0, "refused\n"), result.stderr
    assert SAFE_NESTING == 10_000
