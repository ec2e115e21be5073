"""No pickle, marshal, eval, exec or import by name in the runtime, the compiler or generated code.

The scan reads the source (AST), so it also covers code paths no test executes.
``bench/`` is exempt: pickle is a baseline there, measured, never used by the codec.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("mmcodec", "codegen", "generated")

BANNED_MODULES = frozenset(
    {"pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
)
"""Modules whose loaders run code named by the bytes they read; importlib loads by name."""
ALLOWED_IMPORTS = frozenset(
    {
        ("mmcodec/integrations/ray.py", "pickle", "PickleBuffer"),
        ("mmcodec/integrations/vllm/broadcast.py", "pickle", "PickleBuffer"),
    }
)
"""The one exemption: ``from pickle import PickleBuffer`` in the Ray integration and in the
vLLM plugin's broadcast, and only there. A PickleBuffer wraps a buffer so that pickle
protocol 5 (Ray's, vLLM's MessageQueue's) carries it out of band (that is how the codec's
frames travel uncopied); it neither pickles nor unpickles. Every other name from pickle,
an alias, or ``import pickle`` stays banned."""
IMPORT_BY_NAME = frozenset({"importlib", "imp", "runpy", "pkgutil", "zipimport"})
BANNED_BUILTINS = frozenset({"eval", "exec", "compile", "__import__", "breakpoint"})
BANNED_ATTRIBUTE_CALLS = frozenset(
    {
        ("torch", "load"),
        ("importlib", "import_module"),
        ("np", "load"),
        ("numpy", "load"),
        ("pickle", "loads"),
        ("pickle", "load"),
        ("marshal", "loads"),
    }
)


def violations(source: str, filename: str) -> list[str]:
    """``file:line: what`` for every banned construct in ``source``."""
    found: list[str] = []
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in BANNED_MODULES | IMPORT_BY_NAME:
                    found.append(f"{where}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            allowed = all(
                alias.asname is None and (filename, node.module, alias.name) in ALLOWED_IMPORTS
                for alias in node.names
            )
            if node.level == 0 and top in BANNED_MODULES | IMPORT_BY_NAME and not allowed:
                found.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in BANNED_BUILTINS:
                found.append(f"{where}: call to {func.id}()")
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and (func.value.id, func.attr) in BANNED_ATTRIBUTE_CALLS
            ):
                found.append(f"{where}: call to {func.value.id}.{func.attr}()")
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "builtins"
                and func.attr in BANNED_BUILTINS
            ):
                found.append(f"{where}: call to builtins.{func.attr}()")
        elif (
            isinstance(node, ast.Name)
            and node.id in {"eval", "exec", "__import__"}
            and not isinstance(node.ctx, ast.Store)
        ):
            found.append(f"{where}: reference to {node.id}")
    return sorted(set(found))


def _sources() -> list[Path]:
    files = [path for top in SCANNED for path in sorted((ROOT / top).rglob("*.py"))]
    assert len(files) > 10, files
    return files


EXEMPT = {
    "codegen/inspect_command.py": ["import importlib", "call to importlib.import_module()"],
}
"""The one import by name: ``mmcodec inspect --module NAME`` imports the generated module
the user names on the command line (as ``python -m NAME`` would), never one a message
names. Exempt are exactly these constructs, each once, in this file."""


def _without_exemption(found: list[str], filename: str) -> list[str]:
    # make mutate's snapshot swaps the folders: codegen/ lives under mmcodec/ there.
    canonical = (
        filename.removeprefix("mmcodec/") if filename.startswith("mmcodec/codegen/") else filename
    )
    allowed = list(EXEMPT.get(canonical, []))
    kept = []
    for entry in found:
        what = entry.split(": ", 1)[1]
        if what in allowed:
            allowed.remove(what)  # each exempt construct once
        else:
            kept.append(entry)
    return kept


def test_package_sources_use_no_pickle_eval_or_import_by_name() -> None:
    found: list[str] = []
    for path in _sources():
        name = path.relative_to(ROOT).as_posix()
        found += _without_exemption(violations(path.read_text(encoding="utf-8"), name), name)
    assert found == [], "banned constructs:\n" + "\n".join(found)


def test_the_exemption_covers_exactly_the_inspect_command_import() -> None:
    # If the file changes shape (a second import by name, or none), this says so.
    for name, allowed in EXEMPT.items():
        found = violations((ROOT / name).read_text(encoding="utf-8"), name)
        assert sorted(entry.split(": ", 1)[1] for entry in found) == sorted(allowed)
    assert _without_exemption(["x.py:1: import importlib"], "x.py") == ["x.py:1: import importlib"]


def test_templates_emit_none_of_them() -> None:
    # Templates are Jinja, not Python; generated output is scanned above, and a plain
    # text search guards the templates for output not yet generated.
    templates = sorted((ROOT / "codegen" / "templates").glob("*.j2"))
    assert templates
    words = ("pickle", "marshal", "eval(", "exec(", "__import__", "import_module", "torch.load")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {word}"
        for path in templates
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for word in words
        if word in line
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import pickle", "x.py:1: import pickle"),
        ("import cloudpickle as cp", "x.py:1: import cloudpickle"),
        ("from pickle import loads", "x.py:1: from pickle import ..."),
        ("import marshal", "x.py:1: import marshal"),
        ("import dill.settings", "x.py:1: import dill.settings"),
        ("import shelve", "x.py:1: import shelve"),
        ("import importlib", "x.py:1: import importlib"),
        ("from importlib import import_module", "x.py:1: from importlib import ..."),
        ("x = 1\neval('1')", "x.py:2: call to eval()"),
        ("exec('x = 1')", "x.py:1: call to exec()"),
        ("compile('1', 'f', 'eval')", "x.py:1: call to compile()"),
        ("__import__('os')", "x.py:1: call to __import__()"),
        ("importlib.import_module('os')", "x.py:1: call to importlib.import_module()"),
        ("torch.load('f.pt')", "x.py:1: call to torch.load()"),
        ("np.load('f.npy', allow_pickle=True)", "x.py:1: call to np.load()"),
        ("builtins.eval('1')", "x.py:1: call to builtins.eval()"),
        ("f = eval", "x.py:1: reference to eval"),
    ],
)
def test_the_scanner_finds_each_banned_construct(source: str, expected: str) -> None:
    assert expected in violations(source, "x.py")


@pytest.mark.parametrize(
    "source",
    [
        "import re\nre.compile('x')",  # a method named compile is not the builtin
        "from mmcodec.runtime import builtins as _b\n_b.identity(1, None)",
        "evaluate = 1",
        "def f(loads): return loads",
        "from . import pickle_free",
    ],
)
def test_the_scanner_lets_ordinary_code_pass(source: str) -> None:
    assert violations(source, "x.py") == []


def test_the_one_exemption_is_pickle_buffer_in_the_ray_and_vllm_integrations() -> None:
    assert sorted(ALLOWED_IMPORTS) == [
        ("mmcodec/integrations/ray.py", "pickle", "PickleBuffer"),
        ("mmcodec/integrations/vllm/broadcast.py", "pickle", "PickleBuffer"),
    ]
    assert violations("from pickle import PickleBuffer", "mmcodec/integrations/ray.py") == []
    broadcast = "mmcodec/integrations/vllm/broadcast.py"
    assert violations("from pickle import PickleBuffer", broadcast) == []
    assert violations("from pickle import loads", broadcast) != []


@pytest.mark.parametrize(
    ("source", "filename"),
    [
        ("from pickle import PickleBuffer", "mmcodec/runtime/codec.py"),  # another file
        ("from pickle import PickleBuffer, loads", "mmcodec/integrations/ray.py"),
        ("from pickle import loads", "mmcodec/integrations/ray.py"),
        ("from pickle import PickleBuffer as loads", "mmcodec/integrations/ray.py"),
        ("from _pickle import PickleBuffer", "mmcodec/integrations/ray.py"),
        ("import pickle", "mmcodec/integrations/ray.py"),
    ],
)
def test_the_exemption_stays_that_narrow(source: str, filename: str) -> None:
    assert violations(source, filename) != []
