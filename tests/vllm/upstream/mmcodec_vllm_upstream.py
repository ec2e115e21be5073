"""A pytest plugin for the run of vLLM 0.33.0's own test files (``-p mmcodec_vllm_upstream``).

It asks vLLM's own plugin loader (``vllm.plugins.load_general_plugins``, which reads the
``vllm.general_plugins`` entry points and honours ``VLLM_PLUGINS``) to load plugins before
pytest imports any test module, so that vLLM's tests import the names mmcodec swapped
(``from vllm.v1.serial_utils import MsgpackEncoder`` and the like), and it fails the run
if that did not install mmcodec. It is not a test module: ``tests/vllm/test_upstream.py``
puts this folder on ``PYTHONPATH`` and names it.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import vllm.plugins

    vllm.plugins.load_general_plugins()
    from mmcodec.integrations.vllm import installed

    if installed() is None:
        raise pytest.UsageError("vLLM's load_general_plugins() did not install mmcodec")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from mmcodec.integrations.vllm import installed

    terminalreporter.write_line(
        f"mmcodec installed by vLLM's load_general_plugins (shared-memory cache: {installed()})"
    )
