"""In ``make test-vllm`` a vLLM that cannot be imported is a failure, never a skip."""

from __future__ import annotations

import os
import warnings

# Before vllm is imported: without it the CUDA wheel picks no platform and reports pinned
# memory as available (its decoder then asks for an accelerator that is not there).
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

try:
    import vllm.multimodal.inputs
    import vllm.v1.serial_utils

    # The modules of vLLM's process boundaries the tests use: imported once here, where
    # the DeprecationWarnings that importing them makes torch raise (torch.jit) are not
    # errors; they say nothing about this project.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import vllm.distributed.device_communicators.shm_broadcast
        import vllm.entrypoints.scale_out.token_in_token_out.mm_features
        import vllm.multimodal.cache.shm
        import vllm.v1.core.sched.output
        import vllm.v1.engine
        import vllm.v1.engine.tensor_ipc  # noqa: F401
except ImportError as e:  # a collection error: pytest exits non-zero
    raise ImportError(
        f"tests/vllm needs vLLM 0.33 ({e}); run them with `make test-vllm`, which builds "
        ".venv-vllm from requirements/vllm-0.33-cpu.txt"
    ) from e
