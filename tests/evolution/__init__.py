"""Schemas for the evolution test, compiled into a temporary package at test time.

``v1.yaml`` and ``v2.yaml`` are two releases of schema ``evolution`` within major
version 1 (v2 appends fields with defaults); ``breaking.yaml`` is major version 2.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from mmcodec.codegen.output import plan_output, write
from mmcodec.codegen.validate import compile_schemas

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def generate(schema: Path, package: str, out_dir: Path) -> ModuleType:
    """Compile ``schema`` into ``out_dir/package`` and import its module.

    ``out_dir`` is put on ``sys.path``; call :func:`forget` to undo that.
    """
    modules = compile_schemas([schema], ROOT)
    (module,) = modules
    target = out_dir / package
    plan = plan_output(modules, package)
    write(plan, target)
    if str(out_dir) not in sys.path:
        sys.path.insert(0, str(out_dir))
    importlib.invalidate_caches()
    return importlib.import_module(f"{package}.{module.name}")


def forget(package: str, out_dir: Path) -> None:
    """Drop a generated package from ``sys.modules`` and its directory from ``sys.path``."""
    for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")]:
        del sys.modules[name]
    if str(out_dir) in sys.path:
        sys.path.remove(str(out_dir))
