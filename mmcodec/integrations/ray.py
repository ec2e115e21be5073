"""Ray with mmcodec as the serializer of a generated codec's types.

``register(mm)`` tells Ray, in this process, to send every class of the generated
module ``mm`` as that module's frames, handed to Ray as out-of-band buffers: Ray's own
pickle carries only its envelope (references to the rebuild function, the module's
``decode`` and the class, and the list of buffers), its object store receives the frames
with one copy and no tensor is pickled. On the other side the frames are read-only views
of the object store, and so are the decoded tensors (zero copy) unless the receiving
process registered with ``copy=True``.

Register in every process that *sends* these values: the driver, and every worker that
returns them or calls ``ray.put`` (``ray.init(runtime_env={"worker_process_setup_hook":
WorkerSetup((mm,))})``). A process that only receives needs nothing: the envelope names
the module's ``decode``, which Ray's unpickler imports.

Ray's envelope is pickle: this removes tensor pickling and arbitrary object graphs from
the payload, not Ray's trust model (anyone who can write to the cluster's object store
or submit tasks runs code there). The frames themselves are validated like any other
untrusted mmcodec message: bad frames raise :class:`DecodeError`, which ``ray.get``
reports wrapped in Ray's own exceptions (see :func:`decode_error`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pickle import PickleBuffer  # a buffer wrapper; nothing here pickles (see _to_frames)
from types import ModuleType
from typing import Any

from mmcodec._extras import missing_extra

try:
    import ray
    import ray.exceptions
    import ray.util
except ModuleNotFoundError as e:
    raise missing_extra(e, __name__) from None

from mmcodec.runtime.errors import DecodeError
from mmcodec.runtime.limits import DEFAULT_LIMITS, Limits

__all__ = ["WorkerSetup", "decode_error", "register", "registrable_types", "serializers"]


@dataclass(frozen=True, slots=True)
class _DecodeOptions:
    copy: bool
    limits: Limits


_DEFAULT_OPTIONS = _DecodeOptions(copy=False, limits=DEFAULT_LIMITS)

# How this process decodes each registered module's messages, by the module's name.
# Receiving is the receiver's choice, so the options never travel with a message.
_options: dict[str, _DecodeOptions] = {}


def _to_frames(encode: Callable[..., Sequence[Any]], cls: type, obj: Any) -> list[PickleBuffer]:
    # A PickleBuffer is how a reduction hands a buffer to pickle protocol 5 out of band:
    # Ray's pickler passes each to its buffer callback and writes it into the object
    # store uncopied. This is the one name from pickle mmcodec imports (the exemption in
    # tests/security/test_no_unsafe_code.py); nothing in mmcodec pickles or unpickles.
    return [PickleBuffer(frame) for frame in encode(obj, type=cls)]


def _from_frames(decode: Callable[..., Any], cls: type, frames: Sequence[Any]) -> Any:
    # Module-level and bound with functools.partial, so Ray pickles this deserializer
    # as references (this function, the module's decode, the class), never as code.
    options = _options.get(decode.__module__, _DEFAULT_OPTIONS)
    return decode(frames, cls, copy=options.copy, limits=options.limits)


def registrable_types(module: ModuleType) -> list[type]:
    """The classes of a generated module's named types that Ray can dispatch on.

    Ray picks a serializer by an object's exact class, so union aliases (a
    ``slice | tuple[slice, ...]``) are left out, and so are builtin classes, whose
    pickling belongs to Ray.
    """
    return [
        cls
        for cls in module.NAMED_TYPES.values()
        if isinstance(cls, type) and cls.__module__ != "builtins"
    ]


def serializers(
    module: ModuleType, cls: type
) -> tuple[Callable[[Any], list[PickleBuffer]], Callable[[Sequence[Any]], Any]]:
    """The ``(serializer, deserializer)`` pair :func:`register` gives Ray for ``cls``.

    The serializer turns a value into the module's frames as out-of-band buffers; the
    deserializer decodes them with the options the receiving process registered.
    """
    if cls not in module.NAMED_TYPES.values():
        raise TypeError(f"{cls!r} is not a named type of {module.__name__}")
    return (
        functools.partial(_to_frames, module.encode, cls),
        functools.partial(_from_frames, module.decode, cls),
    )


def register(
    module: ModuleType, *, copy: bool = False, limits: Limits = DEFAULT_LIMITS
) -> list[type]:
    """Make Ray serialize every class of ``module`` with it, in this process.

    ``module`` is a generated codec (``mmcodec.generated.multimodal``, a binding such as
    ``mmcodec.generated.multimodal_vllm``). Values of these classes then travel as the
    module's frames wherever they sit: at the top of a ``ray.put``, inside a dict or
    list, as task arguments and return values. ``copy`` and ``limits`` say how this
    process decodes what it receives: by default decoded tensors view Ray's object
    store (read-only memory shared with every reader on the node; the object stays
    pinned while they live); ``copy=True`` gives tensors of their own. Registering
    again replaces the options. Works before or after ``ray.init``. Returns the
    classes registered.
    """
    _options[module.decode.__module__] = _DecodeOptions(copy=copy, limits=limits)
    registered = registrable_types(module)
    for cls in registered:
        serializer, deserializer = serializers(module, cls)
        ray.util.register_serializer(cls, serializer=serializer, deserializer=deserializer)
    return registered


@dataclass(frozen=True)
class WorkerSetup:
    """A worker process setup hook that registers generated modules in every worker.

    ``ray.init(runtime_env={"worker_process_setup_hook": WorkerSetup((mm,))})``: Ray
    pickles the hook (the modules by name) and runs it in each worker of the job before
    that worker runs anything. To combine it with your own setup, call it (or
    :func:`register`) from your hook function and name that function instead.
    """

    modules: tuple[ModuleType, ...]
    copy: bool = False
    limits: Limits = DEFAULT_LIMITS

    @property
    def __name__(self) -> str:
        # Ray names a callable hook by its __name__ in the job's runtime environment.
        return "mmcodec_register_" + "_".join(m.__name__.rsplit(".", 1)[-1] for m in self.modules)

    def __call__(self) -> None:
        for module in self.modules:
            register(module, copy=self.copy, limits=self.limits)


def decode_error(error: BaseException) -> DecodeError | None:
    """The :class:`DecodeError` behind an exception that ``ray.get`` raised, or None.

    Ray reports a failed deserialization as a ``RaySystemError`` whose ``client_exc`` is
    the DecodeError, where ``ray.get`` ran; a task or actor whose argument failed to
    decode fails with a ``RayTaskError`` whose ``cause`` is that ``RaySystemError``.
    The DecodeError keeps its message and path through both.
    """
    current: object = error
    for _ in range(8):  # Ray nests at most a few levels; never loop on a cycle
        if isinstance(current, DecodeError):
            return current
        # RayTaskError first: Ray's wrapper of a RaySystemError subclasses both.
        if isinstance(current, ray.exceptions.RayTaskError):
            current = current.cause
        elif isinstance(current, ray.exceptions.RaySystemError):
            current = current.client_exc
        else:
            return None
    return None
