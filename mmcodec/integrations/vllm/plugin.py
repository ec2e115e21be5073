"""The switch: put mmcodec at vLLM's process boundaries, or take it away.

vLLM loads the entry point ``mmcodec = mmcodec.integrations.vllm:install`` of the group
``vllm.general_plugins`` (``load_general_plugins``) in every process it starts, before
it builds its encoders, decoders and caches; ``VLLM_PLUGINS`` (a comma-separated list of
plugin names) limits which load. :func:`install` swaps module attributes only, the way
any vLLM plugin reaches vLLM: the names vLLM's code looks up when it builds a codec or
a cache, in the modules that define them and in those already imported that copied
them (modules imported later copy the swapped names). :func:`uninstall` puts vLLM's back.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Final

from mmcodec.integrations.vllm import broadcast, request_path, scale_out, shm_serde, shm_storage

__all__ = ["SHM_MODES", "SHM_MODE_VARIABLE", "install", "installed", "uninstall"]

SHM_MODES: Final = ("view", "copy")
"""``view``: the cache's readers get tensors that view shared memory
(:class:`~mmcodec.integrations.vllm.ZeroCopyShmObjectStorage`); ``copy``: vLLM's storage
with :class:`~mmcodec.integrations.vllm.MmcodecSerde`, readers get copies."""
SHM_MODE_VARIABLE: Final = "MMCODEC_VLLM_SHM"
"""Chooses the shared-memory cache's mode where vLLM loads the plugin (default ``view``)."""

_SERIAL_UTILS: Final = "vllm.v1.serial_utils"
_SHM_STORAGE: Final = "vllm.distributed.device_communicators.shm_object_storage"
_MM_SERDE: Final = "vllm.entrypoints.scale_out.token_in_token_out.mm_serde"

_PLACES: Final = {
    # name: (the module that defines it, then the modules that copy it at import)
    "MsgpackEncoder": (_SERIAL_UTILS, "vllm.v1.engine.core_client", "vllm.v1.engine.core"),
    "MsgpackDecoder": (
        _SERIAL_UTILS,
        "vllm.v1.engine.core_client",
        "vllm.v1.engine.core",
        "vllm.v1.engine.coordinator",
    ),
    "MsgpackSerde": (_SHM_STORAGE, "vllm.multimodal.cache.shm"),
    "SingleWriterShmObjectStorage": (_SHM_STORAGE, "vllm.multimodal.cache.shm"),
    "encode_mm_kwargs_item": (
        _MM_SERDE,
        "vllm.entrypoints.scale_out.token_in_token_out.mm_features",
    ),
    "decode_mm_kwargs_item": (
        _MM_SERDE,
        "vllm.entrypoints.scale_out.token_in_token_out.mm_features",
    ),
}

_lock = threading.Lock()
_vllms: dict[str, Any] = {}
"""vLLM's own value of each name in :data:`_PLACES`, read before the first swap."""
_mode: str | None = None


def _ours(mode: str) -> dict[str, Any]:
    return {
        "MsgpackEncoder": request_path.MmcodecMsgpackEncoder,
        "MsgpackDecoder": request_path.MmcodecMsgpackDecoder,
        "MsgpackSerde": shm_serde.MmcodecSerde,
        "SingleWriterShmObjectStorage": (
            shm_storage.ZeroCopyShmObjectStorage
            if mode == "view"
            else _vllms["SingleWriterShmObjectStorage"]
        ),
        "encode_mm_kwargs_item": scale_out.encode_mm_kwargs_item,
        "decode_mm_kwargs_item": scale_out.decode_mm_kwargs_item,
    }


def _assign(values: dict[str, Any]) -> None:
    for name, modules in _PLACES.items():
        for module_name in modules:
            module = sys.modules.get(module_name)
            if module is not None and hasattr(module, name):
                setattr(module, name, values[name])


def install(*, shm: str | None = None) -> None:
    """Route vLLM's multimodal items through mmcodec in this process (idempotent).

    ``shm``: the shared-memory cache's mode, one of :data:`SHM_MODES`; by default the
    ``MMCODEC_VLLM_SHM`` environment variable's value, else ``"view"``. Installing again
    with another mode switches to it.
    """
    global _mode
    mode = shm if shm is not None else os.environ.get(SHM_MODE_VARIABLE) or "view"
    if mode not in SHM_MODES:
        raise ValueError(f"shm mode {mode!r} is not one of: {', '.join(SHM_MODES)}")
    # The modules that define the names: imported so that they are swapped before vLLM's
    # code copies or uses them (a vLLM process imports them anyway).
    import vllm.distributed.device_communicators.shm_object_storage
    import vllm.entrypoints.scale_out.token_in_token_out.mm_serde
    import vllm.multimodal.cache.shm
    import vllm.v1.serial_utils  # noqa: F401

    with _lock:
        if not _vllms:
            for name, (home, *_) in _PLACES.items():
                _vllms[name] = getattr(sys.modules[home], name)
        _assign(_ours(mode))
        broadcast.route_items()
        _mode = mode


def uninstall() -> None:
    """Put vLLM's own names back (idempotent). Objects already built keep their classes."""
    global _mode
    with _lock:
        if _vllms:
            _assign(_vllms)
        broadcast.unroute_items()
        _mode = None


def installed() -> str | None:
    """The shared-memory cache's mode while mmcodec is installed in this process, else None."""
    return _mode
