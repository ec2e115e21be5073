"""What to install when an optional dependency is missing, said in one line.

mmcodec's own requirements are msgspec and numpy; everything else comes with an extra
(``pip install 'mmcodec[torch]'``) or is already there. A module that needs one turns
Python's bare ``No module named 'zmq'`` into the ``pip install`` that fixes it.
"""

from __future__ import annotations

from typing import Final

# Top-level importable name -> the extra of mmcodec that installs it.
EXTRA_OF: Final = {
    "torch": "torch",
    "zmq": "zmq",
    "ray": "ray",
    "yaml": "codegen",
    "jinja2": "codegen",
    "markupsafe": "codegen",
}


def install_hint(module: str) -> str | None:
    """``"zmq: pip install 'mmcodec[zmq]'"`` for a module an extra provides, else None."""
    name = module.partition(".")[0]
    extra = EXTRA_OF.get(name)
    return None if extra is None else f"{name}: pip install 'mmcodec[{extra}]'"


def missing_extra(error: ModuleNotFoundError, needed_by: str) -> ImportError:
    """The ImportError to raise instead of ``error``, naming the fix; ``error`` itself when
    no extra provides the missing module (a broken install of something else)."""
    hint = install_hint(error.name or "")
    if hint is None:
        return error
    return ModuleNotFoundError(f"{needed_by} needs {hint}", name=error.name)
