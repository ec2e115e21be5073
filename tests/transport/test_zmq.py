"""The ZMQ transport within one process: message layout, zero copy, buffer lifetime, errors.

``inproc://`` hands the sender's memory to the receiver without a copy, which makes the
buffer-lifetime contract directly observable: a received tensor *is* the sent tensor's
memory until the receiver lets go, and the tracker says exactly when that is.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest
import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import PAYLOADS, iter_tensors
from mmcodec.transport import zmq as mmzmq
from tests.transport._sockets import Sockets

CODEC: Final[mmzmq.Codec] = mm  # a generated module is a Codec (checked by mypy)

TIMEOUT_MS: Final = 5000
BIG: Final = 1 << 18  # float32 elements: 1 MiB, well above COPY_THRESHOLD


def pair(
    sockets: Sockets, name: str, kinds: tuple[int, int] = (zmq.PUSH, zmq.PULL)
) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
    """(sender, receiver) over ``inproc://name``; every blocking call times out."""
    options = {"RCVTIMEO": TIMEOUT_MS, "SNDTIMEO": TIMEOUT_MS, "LINGER": 0}
    receiver = sockets(kinds[1], **options)
    receiver.bind(f"inproc://{name}")
    sender = sockets(kinds[0], **options)
    sender.connect(f"inproc://{name}")
    return sender, receiver


def item(**tensors: torch.Tensor) -> mm.MultiModalKwargsItem:
    return mm.MultiModalKwargsItem(
        {key: mm.MultiModalFieldElem(t, mm.BatchedField()) for key, t in tensors.items()}
    )


def tensor_of(value: mm.MultiModalKwargsItem, key: str) -> torch.Tensor:
    data = value[key].data
    assert isinstance(data, torch.Tensor)
    return data


def settle(push: zmq.Socket[Any], pull: zmq.Socket[Any]) -> None:
    """Wait until pyzmq has processed every release of a message that already happened.

    libzmq reports releases to pyzmq's garbage-collector thread in order; once a
    zero-copy sentinel sent and dropped now is reported done, so is everything earlier.
    """
    tracker = mmzmq.send(push, mm, item(sentinel=torch.zeros(BIG)))
    assert tracker is not None
    mmzmq.recv(pull, mm, mm.MultiModalKwargsItem)  # decoded and dropped at once
    tracker.wait(TIMEOUT_MS / 1000)


def test_importing_the_codec_does_not_import_zmq() -> None:
    code = (
        "import sys, mmcodec, mmcodec.transport, mmcodec.generated.multimodal, mmcodec.runtime;"
        "print(sorted(m for m in sys.modules if m == 'zmq' or m.startswith('zmq.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out == "[]\n"


def test_copy_threshold_matches_pyzmq() -> None:
    # Below pyzmq's own threshold a copy=False send is copied anyway; above ours we ask
    # for zero copy. Keeping them equal means no part is tracked for nothing.
    assert mmzmq.COPY_THRESHOLD == zmq.COPY_THRESHOLD == 65536


def test_small_parts_are_copied_and_not_tracked(sockets: Sockets) -> None:
    push, pull = pair(sockets, "small")
    sent = PAYLOADS["64 small items"](5)
    frames = mm.encode(sent)
    assert [f.nbytes < mmzmq.COPY_THRESHOLD for f in frames] == [True, True, True]
    assert mmzmq.send(push, mm, sent) is None  # nothing zero-copy: reuse at once
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems)
    assert received == sent
    assert received == PAYLOADS["64 small items"](5)
    # Copied parts do not alias the sender's memory.
    ptrs = {t.data_ptr() for t in iter_tensors(sent)}
    assert all(t.data_ptr() not in ptrs for t in iter_tensors(received))


def test_large_parts_go_zero_copy_and_the_tracker_waits_for_the_receiver(
    sockets: Sockets,
) -> None:
    push, pull = pair(sockets, "large")
    source = torch.arange(BIG, dtype=torch.float32)
    tracker = mmzmq.send(push, mm, item(x=source))
    assert tracker is not None
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem)
    x = tensor_of(received, "x")
    # inproc: the received tensor is the sent tensor's memory (nothing was copied) ...
    assert x.data_ptr() == source.data_ptr()
    assert x.dtype == torch.float32 and x.shape == (BIG,)
    # ... so mutating the source before the tracker is done changes what the peer got:
    # the reason for the contract.
    source[7] = -1.0
    assert float(x[7]) == -1.0
    settle(push, pull)
    assert not tracker.done
    del received, x
    tracker.wait(TIMEOUT_MS / 1000)
    assert tracker.done


def test_untracked_sends_are_still_zero_copy_and_keep_the_memory(sockets: Sockets) -> None:
    push, pull = pair(sockets, "untracked")
    source = torch.arange(BIG, dtype=torch.float32)
    assert mmzmq.send(push, mm, item(x=source), track=False) is None  # no tracker to wait on
    address = source.data_ptr()
    del source  # the frame still holds the storage: ZMQ reads it later
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem)
    x = tensor_of(received, "x")
    assert x.data_ptr() == address  # inproc: the sender's memory, not a copy
    assert torch.equal(x, torch.arange(BIG, dtype=torch.float32))


@pytest.mark.parametrize("held", [1, 2])
def test_the_tracker_covers_every_zero_copy_part(sockets: Sockets, held: int) -> None:
    push, pull = pair(sockets, "parts")
    a = torch.full((BIG,), 1.0)
    b = torch.full((BIG,), 2.0)
    frames = mm.encode(item(a=a, b=b))
    assert [f.nbytes for f in frames[1:]] == [4 * BIG, 4 * BIG]  # two storages, two parts
    tracker = mmzmq.send_frames(push, frames)
    assert tracker is not None
    parts = pull.recv_multipart(copy=False)
    assert len(parts) == 3
    kept = parts[held]
    del parts
    settle(push, pull)
    assert not tracker.done  # one part is still referenced: the message is not done
    assert np.frombuffer(kept.buffer, np.float32)[0] == float(held)
    del kept
    tracker.wait(TIMEOUT_MS / 1000)
    assert tracker.done


def test_sent_frames_keep_the_storage_alive_after_the_sender_drops_it(sockets: Sockets) -> None:
    push, pull = pair(sockets, "alive")
    values = torch.randn(4, BIG, generator=torch.Generator().manual_seed(3))
    expected = values.clone()
    tracker = mmzmq.send(push, mm, item(x=values[2]))  # a view: its storage must live on
    assert tracker is not None
    del values
    gc.collect()
    churn = [torch.full((4, BIG), 9.0) for _ in range(4)]  # would reuse freed memory
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem)
    assert torch.equal(tensor_of(received, "x"), expected[2])
    del churn


class _RecordingSocket(zmq.Socket[Any]):
    """Remembers the parts of the last message received with ``copy=False``."""

    last: list[Any]

    def recv_multipart(self, flags: int = 0, copy: bool = True, track: bool = False) -> Any:
        parts = super().recv_multipart(flags, copy, track)
        self.last = list(parts)
        return parts


@pytest.mark.parametrize("name", ["idefics3", "whisper", "minicpm-v"])
def test_recv_decodes_in_place_over_tcp_and_tensors_keep_the_frames(
    sockets: Sockets, name: str
) -> None:
    pull = sockets.context.socket(zmq.PULL, socket_class=_RecordingSocket)
    sockets._open.append(pull)
    pull.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = sockets(zmq.PUSH, SNDTIMEO=TIMEOUT_MS, LINGER=0)
    push.connect(f"tcp://127.0.0.1:{port}")
    sent = PAYLOADS[name](21)
    mmzmq.send(push, mm, sent)
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItems)
    spans = []
    for part in pull.last[1:]:
        start = np.frombuffer(part.buffer, np.uint8).ctypes.data
        spans.append((start, start + len(part.buffer)))
    tensors = list(iter_tensors(received))
    large = [t for t in tensors if t.nbytes >= mmzmq.COPY_THRESHOLD]
    assert large
    for t in large:  # aligned for their dtype here, so views of ZMQ's memory
        assert any(a <= t.data_ptr() and t.data_ptr() + t.nbytes <= b for a, b in spans)
    del pull.last, spans
    gc.collect()
    assert received == PAYLOADS[name](21)  # the tensors still own their frames


def test_copy_true_gives_tensors_independent_of_the_message(sockets: Sockets) -> None:
    push, pull = pair(sockets, "copy")
    source = torch.arange(BIG, dtype=torch.float32)
    tracker = mmzmq.send(push, mm, item(x=source))
    assert tracker is not None
    x = tensor_of(mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, copy=True), "x")
    assert x.data_ptr() != source.data_ptr()
    tracker.wait(TIMEOUT_MS / 1000)  # the message is released once decoded
    x[0] = 5.0  # writable, and the source is untouched
    assert float(source[0]) == 0.0
    assert torch.equal(x[1:], source[1:])


def test_a_malformed_message_is_a_decode_error_and_only_consumes_itself(
    sockets: Sockets,
) -> None:
    push, pull = pair(sockets, "hostile")
    push.send(b"garbage")
    valid = PAYLOADS["whisper"](2)
    mmzmq.send(push, mm, valid)
    with pytest.raises(mm.DecodeError) as caught:
        mmzmq.recv(pull, mm, mm.MultiModalKwargsItems)
    assert str(caught.value) == "$: frame 0 is not an mmcodec header (Expected `array`, got `int`)"
    assert mmzmq.recv(pull, mm, mm.MultiModalKwargsItems) == valid


def test_limits_reach_the_decoder(sockets: Sockets) -> None:
    push, pull = pair(sockets, "limits")
    mmzmq.send(push, mm, item(x=torch.zeros(BIG)))
    with pytest.raises(mm.DecodeError) as caught:
        mmzmq.recv(pull, mm, mm.MultiModalKwargsItem, limits=mm.Limits(max_frames=1))
    assert str(caught.value) == "$: 2 frames exceed the limit of 1"


def test_type_names_the_schema_type_of_a_plain_value(sockets: Sockets) -> None:
    push, pull = pair(sockets, "typed")
    elem = mm.MultiModalFieldElem(torch.arange(6).reshape(2, 3), mm.FlatField([slice(0, 2)]))
    mmzmq.send(push, mm, {"k": elem}, type=mm.MultiModalKwargsItem)
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem)
    assert type(received) is mm.MultiModalKwargsItem
    assert received == mm.MultiModalKwargsItem({"k": elem})


def test_send_rejects_what_is_not_one_whole_message(sockets: Sockets) -> None:
    push, _ = pair(sockets, "reject")
    with pytest.raises(ValueError, match=r"^a message has at least one frame \(the header\)$"):
        mmzmq.send_frames(push, [])
    with pytest.raises(ValueError) as caught:
        mmzmq.send(push, mm, item(x=torch.zeros(3)), flags=zmq.SNDMORE)
    assert str(caught.value) == "flags must not include SNDMORE: a call sends one whole message"


def test_a_full_queue_raises_again_before_any_part_is_queued(sockets: Sockets) -> None:
    push = sockets(zmq.PUSH, SNDTIMEO=TIMEOUT_MS, LINGER=0)
    push.bind("inproc://later")  # no peer yet: PUSH cannot queue anything
    with pytest.raises(zmq.Again):
        mmzmq.send(push, mm, item(x=torch.ones(BIG), y=torch.ones(BIG)), flags=zmq.NOBLOCK)
    pull = sockets(zmq.PULL, RCVTIMEO=TIMEOUT_MS, LINGER=0)
    pull.connect("inproc://later")
    valid = item(z=torch.arange(10))
    mmzmq.send(push, mm, valid)
    assert mmzmq.recv(pull, mm, mm.MultiModalKwargsItem) == valid  # no stray parts before it


def test_sender_holds_messages_until_zmq_is_done(sockets: Sockets) -> None:
    push, pull = pair(sockets, "sender")
    sender = mmzmq.Sender(push, mm)
    assert sender.send(PAYLOADS["64 small items"](0)) is None
    assert sender.pending() == 0
    tracker = sender.send(item(x=torch.ones(BIG)))
    assert tracker is not None
    mmzmq.recv(pull, mm, mm.MultiModalKwargsItems)  # not held
    received = mmzmq.recv(pull, mm, mm.MultiModalKwargsItem)
    settle(push, pull)
    assert sender.pending() == 1
    assert sender.wait(timeout=0.01) is False
    del received
    assert sender.wait(timeout=TIMEOUT_MS / 1000) is True
    assert sender.pending() == 0
    assert tracker.done


def _in_thread(target: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


THREAD_PLAN: Final = [("llava", 1), ("whisper", 2), ("idefics3", 3), ("64 small items", 4)]


def test_push_pull_between_threads_over_inproc(sockets: Sockets) -> None:
    pull = sockets(zmq.PULL, RCVTIMEO=TIMEOUT_MS, LINGER=0)
    pull.bind("inproc://threads")
    results: list[bool] = []

    def receive() -> None:
        for name, seed in THREAD_PLAN:
            results.append(mmzmq.recv(pull, mm, mm.MultiModalKwargsItems) == PAYLOADS[name](seed))

    thread, errors = _in_thread(receive)
    push = sockets(zmq.PUSH, SNDTIMEO=TIMEOUT_MS, LINGER=0)
    push.connect("inproc://threads")
    sender = mmzmq.Sender(push, mm)
    for name, seed in THREAD_PLAN:
        sender.send(PAYLOADS[name](seed))
    thread.join(TIMEOUT_MS / 1000 * 2)
    assert not thread.is_alive() and errors == []
    assert results == [True] * len(THREAD_PLAN)
    assert sender.wait(timeout=TIMEOUT_MS / 1000)


def test_dealer_router_between_threads_over_inproc(sockets: Sockets) -> None:
    router = sockets(zmq.ROUTER, RCVTIMEO=TIMEOUT_MS, SNDTIMEO=TIMEOUT_MS, LINGER=0)
    router.bind("inproc://router")
    seen: list[tuple[bytes, bool]] = []

    def serve() -> None:
        for name, seed in THREAD_PLAN:
            routing_id, value = mmzmq.recv_routed(router, mm, mm.MultiModalKwargsItems)
            seen.append((routing_id, value == PAYLOADS[name](seed)))
            mmzmq.send(router, mm, value, routing_id=routing_id)  # echo to that peer

    thread, errors = _in_thread(serve)
    dealer = sockets(zmq.DEALER, RCVTIMEO=TIMEOUT_MS, SNDTIMEO=TIMEOUT_MS, LINGER=0)
    dealer.setsockopt(zmq.ROUTING_ID, b"engine-0")
    dealer.connect("inproc://router")
    for name, seed in THREAD_PLAN:
        sent = PAYLOADS[name](seed)
        mmzmq.send(dealer, mm, sent)
        assert mmzmq.recv(dealer, mm, mm.MultiModalKwargsItems) == sent
    thread.join(TIMEOUT_MS / 1000 * 2)
    assert not thread.is_alive() and errors == []
    assert seen == [(b"engine-0", True)] * len(THREAD_PLAN)
