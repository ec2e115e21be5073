"""mmcodec: schema-first, pickle-free, zero-copy codec for multimodal model inputs.

The hand-written half of the project: ``mmcodec.runtime`` (what generated codecs
import), ``mmcodec.domain`` (classes that schemas bind to) and ``mmcodec.transport``.
"""
