"""The project's two error types, each carrying the path to the offending value.

Paths are built from the inside out: the code that finds a problem raises with the
innermost segment, and every enclosing rebuild step prepends its own segment with
:meth:`CodecError.at` while the exception unwinds. Nothing is formatted until the
message is read, so the happy path pays nothing for it.
"""

from __future__ import annotations


class CodecError(ValueError):
    """Base class of :class:`DecodeError` and :class:`EncodeError`."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self._segments: list[str] = [path] if path else []

    @property
    def path(self) -> str:
        """The path to the bad value, JSONPath-like: ``$.image[0]['pixel_values'].data``."""
        return "$" + "".join(reversed(self._segments))

    def at(self, segment: str) -> CodecError:
        """Prepend a path segment (``.field``, ``[3]``, ``['key']``) and return self."""
        self._segments.append(segment)
        return self

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class DecodeError(CodecError):
    """Bytes from a peer were rejected. The only exception decoding ever raises."""


class EncodeError(CodecError):
    """A value cannot be encoded. Nothing partial is returned."""
