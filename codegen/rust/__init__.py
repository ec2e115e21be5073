"""The compiler's Rust backend: the same IR rendered as a Rust module per schema.

:mod:`~mmcodec.codegen.rust.source` (the one escaping path for schema text),
:mod:`~mmcodec.codegen.rust.names` (identifiers), :mod:`~mmcodec.codegen.rust.types`
(IR types as Rust types), :mod:`~mmcodec.codegen.rust.layout` (rustfmt's line breaks),
:mod:`~mmcodec.codegen.rust.render` (the module, through ``templates/rust``) and
:mod:`~mmcodec.codegen.rust.output` (the files of an output directory). The generated
modules use the hand-written runtime crate ``mmcodec`` (``rust/mmcodec``).
"""
