"""Setup the Ray tests run in every process: count tensor pickling, register the codec.

Ray runs :func:`setup` in each worker of the test job (the job's
``worker_process_setup_hook``); the driver calls :func:`install_counter` itself. Each
process appends one byte to ``reduce-<pid>`` per call of torch's tensor reduction, and
writes ``setup-<pid>`` once, in the directory ``MMCODEC_RAY_TEST_DIR`` names, so the
driver can count reductions in every process of the cluster.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mmcodec.generated import multimodal as mm
from mmcodec.integrations.ray import WorkerSetup

DIRECTORY_VARIABLE = "MMCODEC_RAY_TEST_DIR"


def install_counter(directory: Path) -> Callable[[], None]:
    """Count calls of ``torch.Tensor.__reduce_ex__`` in this process; returns the undo."""
    original: Callable[[torch.Tensor, Any], Any] = torch.Tensor.__reduce_ex__
    pid = os.getpid()
    (directory / f"setup-{pid}").touch()

    def counting(self: torch.Tensor, protocol: Any) -> Any:
        with open(directory / f"reduce-{pid}", "ab") as f:
            f.write(b".")
        return original(self, protocol)

    torch.Tensor.__reduce_ex__ = counting  # type: ignore[method-assign]

    def undo() -> None:
        torch.Tensor.__reduce_ex__ = original  # type: ignore[method-assign]

    return undo


def setup() -> None:
    """The test job's worker process setup hook."""
    install_counter(Path(os.environ[DIRECTORY_VARIABLE]))
    WorkerSetup((mm,))()


def reductions(directory: Path) -> dict[int, int]:
    """Tensor reductions so far, by process id (processes with none left out)."""
    return {
        int(path.name.removeprefix("reduce-")): path.stat().st_size
        for path in directory.glob("reduce-*")
    }


def set_up_processes(directory: Path) -> set[int]:
    """Process ids that ran the counter's setup."""
    return {int(path.name.removeprefix("setup-")) for path in directory.glob("setup-*")}
