"""mmcodec inside vLLM 0.33: a general plugin that carries multimodal items through mmcodec.

Installed into vLLM's environment, the entry point ``mmcodec`` of the group
``vllm.general_plugins`` calls :func:`install` in every vLLM process; ``VLLM_PLUGINS``
without ``mmcodec`` turns it off; :func:`install` / :func:`uninstall` do it by hand (a
program that builds ``VllmConfig`` without ``EngineArgs`` never loads plugins). One module
per process boundary (docs/vllm.md tells the whole story):

- :mod:`~mmcodec.integrations.vllm.request_path`: front end -> engine core
  (:class:`MmcodecMsgpackEncoder`, :class:`MmcodecMsgpackDecoder`);
- :mod:`~mmcodec.integrations.vllm.shm_serde` and
  :mod:`~mmcodec.integrations.vllm.shm_storage`: the shared-memory processor cache
  (:class:`MmcodecSerde`, :class:`ZeroCopyShmObjectStorage`);
- :mod:`~mmcodec.integrations.vllm.scale_out`: the scale-out endpoint's strings
  (:func:`encode_mm_kwargs_item`, :func:`decode_mm_kwargs_item`);
- :mod:`~mmcodec.integrations.vllm.broadcast`: executor -> tensor-parallel workers;
- :mod:`~mmcodec.integrations.vllm.plugin`: the switch.

Importing this package imports vLLM; nothing else in mmcodec does.
"""

from __future__ import annotations

from mmcodec.integrations.vllm.plugin import install, installed, uninstall
from mmcodec.integrations.vllm.request_path import MmcodecMsgpackDecoder, MmcodecMsgpackEncoder
from mmcodec.integrations.vllm.scale_out import decode_mm_kwargs_item, encode_mm_kwargs_item
from mmcodec.integrations.vllm.shm_serde import MmcodecSerde
from mmcodec.integrations.vllm.shm_storage import ZeroCopyShmObjectStorage

__all__ = [
    "MmcodecMsgpackDecoder",
    "MmcodecMsgpackEncoder",
    "MmcodecSerde",
    "ZeroCopyShmObjectStorage",
    "decode_mm_kwargs_item",
    "encode_mm_kwargs_item",
    "install",
    "installed",
    "uninstall",
]
