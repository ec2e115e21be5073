"""In ``make test-vllm`` a vLLM that cannot be imported is a failure, never a skip."""

from __future__ import annotations

import os

# Before vllm is imported: without it the CUDA wheel picks no platform and reports pinned
# memory as available (its decoder then asks for an accelerator that is not there).
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

try:
    import vllm.multimodal.inputs
    import vllm.v1.serial_utils  # noqa: F401
except ImportError as e:  # a collection error: pytest exits non-zero
    raise ImportError(
        f"tests/vllm needs vLLM 0.33 ({e}); run them with `make test-vllm`, which builds "
        ".venv-vllm from requirements/vllm-0.33-cpu.txt"
    ) from e
