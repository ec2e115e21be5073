"""A Rust gateway's request decoded into vLLM's own classes.

The messages the Rust ``mmcodec-gateway`` sends (``rust/gateway``) decode with
``mmcodec.generated.multimodal_vllm`` into ``vllm.multimodal.inputs`` objects that hold,
in every detail (``tests.vllm.strict``, across bindings), the request the Python side
builds from the same batch, are the bytes this package encodes for it, and that vLLM's
own code can batch (``get_data``). The gateway builds items as this package's domain
does: a flat field's slices along dim 0 are plain slices, where vLLM's
``flat_from_sizes`` builds one-slice tuples; both mean the same batch.
"""

from __future__ import annotations

import tempfile

import torch
import vllm.multimodal.inputs as vi
import zmq

from mmcodec.demo import rust_gateway
from mmcodec.generated import multimodal as mm
from mmcodec.generated import multimodal_vllm as mv
from tests.rust.cargo import gateway
from tests.vllm.strict import assert_same

IMAGES = 3


def test_the_rust_gateways_request_decodes_into_vllms_classes() -> None:
    expected = rust_gateway.expected_request(IMAGES, seed=1)
    context = zmq.Context()
    received = []
    with tempfile.TemporaryDirectory() as folder:
        pull = context.socket(zmq.PULL)
        pull.setsockopt(zmq.RCVTIMEO, 120_000)
        endpoint = f"ipc://{folder}/gateway.sock"
        pull.bind(endpoint)
        process = rust_gateway.start_gateway(gateway(), endpoint, IMAGES, seed=1)
        try:
            for want in expected:
                parts = pull.recv_multipart(copy=False)
                got = mv.decode(parts, vi.MultiModalFeatureSpec)
                assert type(got) is vi.MultiModalFeatureSpec
                assert type(got.data) is vi.MultiModalKwargsItem
                assert type(got.mm_position) is vi.PlaceholderRange
                assert_same(got, want, cross=True)
                assert [bytes(p.buffer) for p in parts] == [bytes(f) for f in mm.encode(want)]
                received.append(got)
        finally:
            assert process.wait(timeout=120) == 0
            pull.close(linger=0)
            context.term()
    # vLLM batches the decoded items itself: the patches of every image, concatenated.
    items = vi.MultiModalKwargsItems({"image": [spec.data for spec in received]})
    batch = items.get_data()
    pixels, grids = rust_gateway.preprocess(IMAGES, seed=1)
    assert torch.equal(batch["pixel_values"], pixels)
    assert torch.equal(batch["image_grid_thw"], grids)
