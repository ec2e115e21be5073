"""mmcodec: schema-first, pickle-free, zero-copy codec for multimodal model inputs.

The hand-written half of the project: ``mmcodec.runtime`` (what generated codecs
import), ``mmcodec.domain`` (classes that schemas bind to) and ``mmcodec.transport``.
Importing ``mmcodec`` imports none of them, and nothing else.
"""

__version__ = "0.3.0"
"""The one version: the distribution's (pyproject reads it from here), ``mmcodec
--version`` and the compiler's, which every generated header names."""
