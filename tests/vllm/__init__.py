"""The vLLM binding (``mmcodec.generated.multimodal_vllm``) in vLLM 0.33's own environment.

Run by ``make test-vllm`` in ``.venv-vllm`` only; ``make test`` does not collect them.
"""
