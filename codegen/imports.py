"""The import block of a generated module: the names its body uses, in a fixed order.

Which names a module imports follows from its text: the renderer renders the body,
this module reads the names it uses (``ast``), and imports exactly those, plus the
names ``__all__`` re-exports. Nothing depends on what exists on disk. The groups,
one blank line apart, each sorted the way isort (ruff's ``I001``) sorts them:

1. ``from __future__ import annotations``;
2. the standard library (``collections.abc``, ``typing``);
3. third-party packages: ``msgspec``, ``torch``, and modules of bound classes and
   exports in any other package (``vllm.multimodal.inputs``);
4. ``mmcodec`` (the runtime, and classes bound from it), and modules of bound classes
   in the output package's own top-level package (``tests.bound_classes`` for
   ``tests.golden``): what a project's ruff takes for first-party code;
5. the other modules of the output package, imported relatively
   (``from . import common as _common``), so the package can be imported under any name.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from mmcodec.codegen.layout import WIDTH

FUTURE, STDLIB, THIRD_PARTY, FIRST_PARTY, LOCAL = range(5)


@dataclass(frozen=True, order=True)
class Import:
    """``from module import name as alias`` (``import module`` when ``name`` is empty)."""

    module: str
    """``"."`` for a module of the output package itself."""
    name: str = ""
    alias: str = ""

    @property
    def bound(self) -> str:
        """The name the import binds in the module."""
        return self.alias or self.name or self.module.split(".")[0]


def section(module: str, package: str) -> int:
    """Which group an import of ``module`` goes in, for output package ``package``."""
    top = module.split(".")[0]
    if module == "__future__":
        return FUTURE
    if module == ".":
        return LOCAL
    if top in ("mmcodec", package.split(".")[0]):
        return FIRST_PARTY
    if top in sys.stdlib_module_names:
        return STDLIB
    return THIRD_PARTY


def used_names(source: str) -> set[str]:
    """Every name the module's code reads, with the names in ``__all__`` and in string
    type expressions (an alias quoted because of a cycle)."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Assign) and _targets(node) == ["__all__"]:
            assert isinstance(node.value, ast.List)
            used.update(str(e.value) for e in node.value.elts if isinstance(e, ast.Constant))
        elif isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) == "TypeAlias":
            if isinstance(node.value, ast.Constant):
                used |= _names_in_string(node.value)
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                for part in ast.walk(base):
                    if isinstance(part, ast.Constant):
                        used |= _names_in_string(part)
    return used


def _targets(node: ast.Assign) -> list[str]:
    return [t.id for t in node.targets if isinstance(t, ast.Name)]


def _names_in_string(node: ast.Constant) -> set[str]:
    if not isinstance(node.value, str):
        return set()
    expression = ast.parse(node.value, mode="eval")
    return {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}


def import_block(candidates: Iterable[Import], used: set[str], package: str) -> str:
    """The import statements for the candidates whose names ``used`` contains."""
    sections: dict[int, list[Import]] = {}
    for candidate in set(candidates):
        if candidate.bound in used:
            sections.setdefault(section(candidate.module, package), []).append(candidate)
    blocks = [_section(sections[s]) for s in sorted(sections)]
    return "\n\n".join("\n".join(block) for block in blocks)


def _section(imports: list[Import]) -> list[str]:
    """One group: ``import x`` lines first, then ``from`` lines, as isort orders them.

    Names imported plainly from one module share a statement; each ``as`` import
    has its own (ruff's default, ``combine-as-imports = false``).
    """
    straight = sorted((i.module for i in imports if not i.name), key=_module_key)
    statements: dict[tuple[str, str], list[Import]] = {}
    for i in imports:
        if i.name:
            statements.setdefault((i.module, i.alias), []).append(i)
    members = [sorted(names, key=_member_key) for names in statements.values()]
    members.sort(key=lambda names: (_module_key(names[0].module), _member_key(names[0])))
    lines = [f"import {module}" for module in straight]
    lines += [_from_import(names) for names in members]
    return lines


def _from_import(names: list[Import]) -> str:
    module = names[0].module
    spelled = [f"{i.name} as {i.alias}" if i.alias else i.name for i in names]
    line = f"from {module} import {', '.join(spelled)}"
    if len(line) <= WIDTH:
        return line
    return f"from {module} import (\n" + "".join(f"    {s},\n" for s in spelled) + ")"


def _natural(text: str) -> tuple[tuple[int, int], ...]:
    """A natural sort key (``a2`` before ``a10``), as ruff's ``natord`` compares."""
    return tuple(
        (ord("0"), int(run)) if run.isdigit() else (ord(run), 0)
        for run in re.findall(r"\d+|\D", text)
    )


def _module_key(module: str) -> tuple[object, ...]:
    return (_natural(module.lower()), _natural(module))


def _member_key(i: Import) -> tuple[object, ...]:
    return (_member_type(i.name), _natural(i.name.lower()), _natural(i.name), i.alias)


def _member_type(name: str) -> int:
    """isort's order by type: CONSTANTS, then Classes, then everything else."""
    if len(name) > 1 and name.isupper():
        return 0
    return 1 if name[:1].isupper() else 2


def sort_all(names: Iterable[str]) -> list[str]:
    """``__all__`` in the order ruff's ``RUF022`` wants: by kind, then naturally."""
    return sorted(set(names), key=lambda name: (_member_type(name), _natural(name), name))
