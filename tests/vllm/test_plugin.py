"""The switch: install() and uninstall() by hand; the entry point vLLM's loader reads."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.metadata import entry_points

import pytest
import vllm.distributed.device_communicators.shm_object_storage as shm_object_storage
import vllm.entrypoints.scale_out.token_in_token_out.mm_features as mm_features
import vllm.multimodal.cache.shm as shm_cache
import vllm.v1.engine.core_client as core_client
import vllm.v1.serial_utils as serial_utils

import mmcodec.integrations.vllm as plugin

VLLMS = {
    "MsgpackEncoder": serial_utils.MsgpackEncoder,
    "MsgpackDecoder": serial_utils.MsgpackDecoder,
    "MsgpackSerde": shm_object_storage.MsgpackSerde,
    "SingleWriterShmObjectStorage": shm_object_storage.SingleWriterShmObjectStorage,
    "encode_mm_kwargs_item": mm_features.encode_mm_kwargs_item,
}


@pytest.fixture
def switch() -> Iterator[None]:
    assert plugin.installed() is None
    yield
    plugin.uninstall()


def test_the_entry_point_is_the_install_function() -> None:
    (entry,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "mmcodec"]
    assert entry.value == "mmcodec.integrations.vllm:install"
    assert entry.load() is plugin.install


def test_install_swaps_every_place_and_uninstall_puts_vllms_back(switch: None) -> None:
    plugin.install()
    assert plugin.installed() == "view"
    for module in (serial_utils, core_client):
        assert module.MsgpackEncoder is plugin.MmcodecMsgpackEncoder
        assert module.MsgpackDecoder is plugin.MmcodecMsgpackDecoder
    for module in (shm_object_storage, shm_cache):
        assert module.MsgpackSerde is plugin.MmcodecSerde
        assert module.SingleWriterShmObjectStorage is plugin.ZeroCopyShmObjectStorage
    assert mm_features.encode_mm_kwargs_item is plugin.encode_mm_kwargs_item
    assert mm_features.decode_mm_kwargs_item is plugin.decode_mm_kwargs_item
    plugin.install()  # again: nothing changes
    assert plugin.installed() == "view"
    plugin.uninstall()
    assert plugin.installed() is None
    assert serial_utils.MsgpackEncoder is core_client.MsgpackEncoder is VLLMS["MsgpackEncoder"]
    assert shm_cache.MsgpackSerde is VLLMS["MsgpackSerde"]
    assert shm_cache.SingleWriterShmObjectStorage is VLLMS["SingleWriterShmObjectStorage"]
    assert mm_features.encode_mm_kwargs_item is VLLMS["encode_mm_kwargs_item"]
    plugin.uninstall()  # again: nothing changes


def test_copy_mode_keeps_vllms_storage_with_the_serde(
    switch: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MMCODEC_VLLM_SHM", "copy")
    plugin.install()
    assert plugin.installed() == "copy"
    assert shm_cache.MsgpackSerde is plugin.MmcodecSerde
    assert shm_cache.SingleWriterShmObjectStorage is VLLMS["SingleWriterShmObjectStorage"]
    plugin.install(shm="view")  # switches
    assert shm_cache.SingleWriterShmObjectStorage is plugin.ZeroCopyShmObjectStorage
    with pytest.raises(ValueError, match=r"^shm mode 'views' is not one of: view, copy$"):
        plugin.install(shm="views")


def test_a_module_imported_after_install_copies_the_swapped_names(switch: None) -> None:
    plugin.install()
    saved = sys.modules.pop("vllm.v1.engine.coordinator", None)
    try:
        import vllm.v1.engine.coordinator as coordinator

        assert coordinator.MsgpackDecoder is plugin.MmcodecMsgpackDecoder
        plugin.uninstall()
        assert coordinator.MsgpackDecoder is VLLMS["MsgpackDecoder"]
    finally:
        if saved is not None:
            sys.modules["vllm.v1.engine.coordinator"] = saved
