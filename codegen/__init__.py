"""The mmcodec schema compiler: YAML type specs -> validated IR -> generated msgspec codecs.

Pipeline: :mod:`codegen.load` (YAML with positions) -> :mod:`codegen.validate`
(every error, with file:line:col, or the IR) -> :mod:`codegen.ir` -> :mod:`codegen.render`
(Jinja2 templates) -> :mod:`codegen.output` (format, compare, write atomically).
The compiler never imports generated code.
"""

GENERATOR_VERSION = "0.2.0"
