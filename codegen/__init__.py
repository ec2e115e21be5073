"""The mmcodec schema compiler: YAML type specs -> validated IR -> generated msgspec codecs.

Pipeline: :mod:`~mmcodec.codegen.load` (YAML with positions) ->
:mod:`~mmcodec.codegen.validate` (every error, with file:line:col, or the IR; one module per
job) -> :mod:`~mmcodec.codegen.ir` -> :mod:`~mmcodec.codegen.render` (Jinja2 templates; every
string from a schema through :mod:`~mmcodec.codegen.pysource`; imports from
:mod:`~mmcodec.codegen.imports`, long lines by :mod:`~mmcodec.codegen.layout`: no formatter) ->
:mod:`~mmcodec.codegen.output` (compare, write atomically).
The compiler never imports generated code. Installed as ``mmcodec.codegen``; its
command is ``mmcodec`` (``python -m mmcodec.codegen``).
"""

from mmcodec import __version__

GENERATOR_VERSION = __version__
"""Named in every generated header: the compiler ships with the runtime, one version."""
