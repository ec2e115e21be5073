"""A Rust gateway's request, received by a Python engine: ``python -m mmcodec.demo.rust_gateway``.

The gateway (``rust/gateway``, the ``mmcodec-gateway`` binary) does what a Rust front end
in front of an engine does: it preprocesses images itself (synthetic ones here: 14 x 14
patches of 2 frames and 3 channels, CLIP-normalised, cast to bfloat16, Qwen2.5-VL's
layout), builds the items from the batch the way engines do (``flat_from_sizes`` for the
patches, ``batched`` for the grids) with the Rust crate generated from ``schema/``, and
sends one ``MultiModalFeatureSpec`` per image, with its placeholder range, over ZMQ.

This process binds the PULL socket, starts the gateway, and for each message: decodes it
with :mod:`mmcodec.generated.multimodal` (tensors are views of the ZMQ frames), compares
it with the request it builds itself from the same preprocessing (strict ``==``), checks
that the pixel tensor views the received frame, and that the message is byte for byte
the one this side would have encoded. Exit status 0 when every value was verified.

``make demo`` builds the gateway (``cargo build --release``) and runs this with 16 images
(151 MB of patches). In vLLM's environment, ``tests/vllm/test_rust_gateway.py`` decodes the
same messages with :mod:`mmcodec.generated.multimodal_vllm` into vLLM's own classes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch
import zmq

from mmcodec.generated import multimodal as mm
from mmcodec.payloads import QWEN_GRIDS

PATCH: Final = 14
FRAMES: Final = 2
CHANNELS: Final = 3
PATCH_DIM: Final = FRAMES * CHANNELS * PATCH * PATCH
MEAN: Final = np.array(["0.48145466", "0.4578275", "0.40821073"], dtype=np.float32)
STD: Final = np.array(["0.26862954", "0.26130258", "0.27577711"], dtype=np.float32)
"""CLIP's normalisation, as the gateway's f32 constants (rust/gateway/src/lib.rs)."""
PROMPT_PREFIX: Final = 15
BETWEEN_IMAGES: Final = 2
DEFAULT_BINARY: Final = Path("rust/target/release/mmcodec-gateway")


def preprocess(images: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The gateway's batch: ``pixel_values`` (patches, 1176) bf16 and ``image_grid_thw``
    (images, 3) int64, computed as the gateway computes them (f32 arithmetic, then a
    round-to-nearest-even cast)."""
    grids = [QWEN_GRIDS[i % len(QWEN_GRIDS)] for i in range(images)]
    channel = np.arange(CHANNELS).reshape(1, 1, CHANNELS, 1, 1, 1)
    mean = MEAN.reshape(1, 1, CHANNELS, 1, 1, 1)
    std = STD.reshape(1, 1, CHANNELS, 1, 1, 1)
    frame = np.arange(FRAMES).reshape(1, 1, 1, FRAMES, 1, 1)
    y = np.arange(PATCH).reshape(1, 1, 1, 1, PATCH, 1)
    x = np.arange(PATCH).reshape(1, 1, 1, 1, 1, PATCH)
    chunks = []
    for image, (h, w) in enumerate(grids):
        row = np.arange(h).reshape(h, 1, 1, 1, 1, 1)
        col = np.arange(w).reshape(1, w, 1, 1, 1, 1)
        value = (row * PATCH + y) * 7 + (col * PATCH + x) * 13 + channel * 31 + frame * 17
        value = (value + image * 5 + seed) % 256
        normalised = (value.astype(np.float32) / np.float32(255) - mean) / std
        chunks.append(normalised.astype(np.float32).reshape(h * w, PATCH_DIM))
    pixels = torch.from_numpy(np.concatenate(chunks)).to(torch.bfloat16)
    grid_thw = torch.tensor([(1, h, w) for h, w in grids], dtype=torch.int64)
    return pixels, grid_thw


def expected_request(images: int, seed: int, api: Any = mm) -> list[Any]:
    """The request the gateway sends, built here from the same batch: ``api`` is any
    namespace with the four classes (this package's generated module, or vLLM's
    ``vllm.multimodal.inputs``)."""
    pixels, grid_thw = preprocess(images, seed)
    batch = {"pixel_values": pixels, "image_grid_thw": grid_thw}
    config = {
        "pixel_values": api.MultiModalFieldConfig.flat_from_sizes("image", grid_thw.prod(-1)),
        "image_grid_thw": api.MultiModalFieldConfig.batched("image"),
    }
    items = api.MultiModalKwargsItems.from_hf_inputs(batch, config)["image"]
    specs, offset = [], PROMPT_PREFIX
    for index, (item, (_, h, w)) in enumerate(zip(items, grid_thw.tolist(), strict=True)):
        length = h * w // 4  # 2 x 2 patches merge into one token
        identifier = f"qwen-{seed}-{index}"
        position = api.PlaceholderRange(offset=offset, length=length)
        specs.append(
            api.MultiModalFeatureSpec(
                data=item,
                modality="image",
                identifier=identifier,
                mm_position=position,
                mm_hash=identifier,
            )
        )
        offset += length + BETWEEN_IMAGES
    return specs


def start_gateway(binary: Path, endpoint: str, images: int, seed: int) -> subprocess.Popen[bytes]:
    command = [str(binary), "--connect", endpoint, "--images", str(images), "--seed", str(seed)]
    return subprocess.Popen(command)


def _inside(tensor: torch.Tensor, frame: zmq.Frame) -> bool:
    """Whether ``tensor``'s bytes lie in ``frame``'s memory (a view, not a copy)."""
    start = np.frombuffer(frame.buffer, dtype=np.uint8).ctypes.data
    return start <= tensor.data_ptr() and tensor.data_ptr() + tensor.nbytes <= start + len(
        frame.buffer
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmcodec.demo.rust_gateway")
    parser.add_argument("--binary", type=Path, default=DEFAULT_BINARY)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per message")
    args = parser.parse_args(argv)
    expected = expected_request(args.images, args.seed)
    context = zmq.Context()
    with tempfile.TemporaryDirectory() as folder:
        pull = context.socket(zmq.PULL)
        pull.setsockopt(zmq.RCVTIMEO, int(args.timeout * 1000))
        endpoint = f"ipc://{folder}/gateway.sock"
        pull.bind(endpoint)
        gateway = start_gateway(args.binary, endpoint, args.images, args.seed)
        verified, rows = 0, []
        try:
            for index, want in enumerate(expected):
                parts = pull.recv_multipart(copy=False)
                started = time.perf_counter()
                got: Any = mm.decode(parts, mm.MultiModalFeatureSpec)
                decode_us = (time.perf_counter() - started) * 1e6
                pixels: torch.Tensor = got.data["pixel_values"].data
                same_value = got == want
                same_bytes = [bytes(p.buffer) for p in parts] == [bytes(f) for f in mm.encode(want)]
                viewed = _inside(pixels, parts[1])
                verified += same_value and same_bytes and viewed
                size = sum(len(p.buffer) for p in parts)
                rows.append(
                    f"  image {index:2d}: pixel_values {tuple(pixels.shape)} {pixels.dtype}, "
                    f"{size / 1e6:6.2f} MB, decoded in {decode_us:6.1f} us, "
                    f"{'equal' if same_value else 'DIFFERENT'}, "
                    f"{'same bytes' if same_bytes else 'OTHER BYTES'}, "
                    f"{'a view of the frame' if viewed else 'A COPY'}"
                )
        finally:
            status = gateway.wait(timeout=args.timeout)
            pull.close(linger=0)
            context.term()
    print(f"Rust gateway -> Python engine over ZMQ ({endpoint.split('/')[-1]}):")
    print("\n".join(rows))
    print(f"{verified} of {len(expected)} feature specs verified (value, bytes, zero copy)")
    return 0 if verified == len(expected) and status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
