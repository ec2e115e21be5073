from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

from tests.transport._sockets import Sockets


@pytest.fixture
def sockets() -> Iterator[Sockets]:
    made = Sockets()
    yield made
    made.close()


@pytest.fixture
def ipc_dir() -> Iterator[str]:
    # Short, private paths: ipc:// endpoints are limited to ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="mmz-") as directory:
        yield directory
