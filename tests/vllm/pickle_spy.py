"""Count pickle in a process: every call into the pickle module, and every multimodal value pickled.

``calls`` counts ``pickle.dumps/loads/dump/load`` and every ``Pickler`` / ``Unpickler``
made through the module (vLLM's code calls them as ``pickle.X``). ``multimodal`` counts the
reductions pickle makes of vLLM's multimodal values: an element, a field, an item map, an
item pickled by vLLM's default reduction, and a tensor (torch's reduction, and the one
``shm_broadcast`` gives its pickler). An item reduced to mmcodec frames is not one.
"""

from __future__ import annotations

import pickle
from collections import Counter
from types import TracebackType
from typing import Any

import torch
import vllm.distributed.device_communicators.shm_broadcast as shm_broadcast
import vllm.multimodal.inputs as vi

_PICKLE_FUNCTIONS = ("dumps", "loads", "dump", "load", "Pickler", "Unpickler")
_MULTIMODAL = (
    vi.MultiModalFieldElem,
    vi.MultiModalBatchedField,
    vi.MultiModalFlatField,
    vi.MultiModalSharedField,
    vi.MultiModalKwargsItems,
    vi.MultiModalKwargsItem,
)


class PickleSpy:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._undo: list[tuple[Any, str, Any, bool]] = []

    @property
    def calls(self) -> int:
        return sum(n for name, n in self.counts.items() if name in _PICKLE_FUNCTIONS)

    @property
    def multimodal(self) -> int:
        return sum(n for name, n in self.counts.items() if name not in _PICKLE_FUNCTIONS)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        had = name in vars(owner)
        self._undo.append((owner, name, vars(owner).get(name), had))
        setattr(owner, name, value)

    def __enter__(self) -> PickleSpy:
        counts = self.counts
        for name in _PICKLE_FUNCTIONS:
            original = getattr(pickle, name)

            def counted(*args: Any, __name: str = name, __f: Any = original, **kw: Any) -> Any:
                counts[__name] += 1
                return __f(*args, **kw)

            self._patch(pickle, name, counted)
        for cls in _MULTIMODAL:
            if "__reduce_ex__" in vars(cls):
                continue  # routed (mmcodec.integrations.vllm.broadcast): not vLLM's reduction

            def reduce_ex(obj: Any, protocol: int, __name: str = cls.__name__) -> Any:
                counts[__name] += 1
                return object.__reduce_ex__(obj, protocol)

            self._patch(cls, "__reduce_ex__", reduce_ex)
        tensor_reduce: Any = torch.Tensor.__reduce_ex__

        def tensor_reduce_ex(obj: Any, protocol: int) -> Any:
            counts["Tensor"] += 1
            return tensor_reduce(obj, protocol)

        self._patch(torch.Tensor, "__reduce_ex__", tensor_reduce_ex)
        broadcast_reduce = shm_broadcast._reduce_tensor

        def reduce_tensor(obj: Any) -> Any:
            counts["Tensor"] += 1
            return broadcast_reduce(obj)

        self._patch(shm_broadcast, "_reduce_tensor", reduce_tensor)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        while self._undo:
            owner, name, original, had = self._undo.pop()
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
