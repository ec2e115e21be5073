"""Schema files as committed at a git ref, for ``mmcodec compat --against REF``.

Every failure to reach the ref is an error (:class:`UsageError`, exit 2): a typo in
the ref must never turn the check green. Only a file that the ref's tree does not
hold is "new".
"""

from __future__ import annotations

import posixpath
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from mmcodec.codegen.diagnostics import UsageError
from mmcodec.codegen.load import SCHEMA_SUFFIXES


def _git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError as e:
        raise UsageError("compat --against needs git, which is not installed") from e


@dataclass(frozen=True)
class Tree:
    """One commit's tree of a repository."""

    toplevel: Path
    commit: str

    @classmethod
    def at(cls, ref: str, cwd: Path) -> Tree:
        top = _git(["rev-parse", "--show-toplevel"], cwd)
        if top.returncode != 0:
            raise UsageError(f"{cwd} is not in a git repository (compat --against needs one)")
        if ref.startswith("-") or not ref:
            raise UsageError(f"unknown git ref {ref!r}")
        found = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd)
        if found.returncode != 0:
            raise UsageError(f"unknown git ref {ref!r} (not a commit, branch or tag here)")
        return cls(Path(top.stdout.decode().strip()).resolve(), found.stdout.decode().strip())

    def relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.toplevel).as_posix()
        except ValueError:
            raise UsageError(f"{path} is outside the git repository {self.toplevel}") from None

    def read(self, relative: str) -> bytes | None:
        """The file's bytes at the commit; None when its tree has no such file."""
        kind = _git(["cat-file", "-t", f"{self.commit}:{relative}"], self.toplevel)
        if kind.returncode != 0 or kind.stdout.strip() != b"blob":
            return None
        shown = _git(["cat-file", "blob", f"{self.commit}:{relative}"], self.toplevel)
        if shown.returncode != 0:
            raise UsageError(f"git could not read {relative} at {self.commit[:12]}")
        return shown.stdout

    def schema_files_in(self, directory: str) -> list[str]:
        """Schema files directly in ``directory`` at the commit (none if it did not exist)."""
        prefix = "" if directory in ("", ".") else directory.rstrip("/") + "/"
        listed = _git(["ls-tree", "-z", "--name-only", self.commit, "--", prefix], self.toplevel)
        if listed.returncode != 0:
            return []
        names = [n.decode() for n in listed.stdout.split(b"\0") if n]
        return sorted(n for n in names if posixpath.splitext(n)[1] in SCHEMA_SUFFIXES)


def checkout_schemas(
    tree: Tree, files: Sequence[Path], directories: Sequence[Path], into: Path
) -> list[Path]:
    """Write the schemas as they were at ``tree`` under ``into`` (same relative paths).

    Takes ``files`` that existed then, every schema file that was then in one of
    ``directories`` (so a removed schema is noticed), and the files those import.
    Returns the written files named by the first two; imports are compiled with them.
    """
    wanted = [tree.relative(p) for p in files]
    for directory in directories:
        wanted.extend(tree.schema_files_in(tree.relative(directory)))
    written: dict[str, Path] = {}
    roots: list[Path] = []
    pending = list(dict.fromkeys(wanted))
    requested = set(pending)
    while pending:
        relative = pending.pop(0)
        if relative in written:
            continue
        content = tree.read(relative)
        if content is None:
            continue  # not in the tree then: a new file (or a broken import, reported later)
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        written[relative] = target
        if relative in requested:
            roots.append(target)
        pending.extend(_imports(relative, content))
    return roots


def _imports(relative: str, content: bytes) -> list[str]:
    """Paths (from the repository's top) of the files a schema imports, as far as readable."""
    try:
        document = yaml.safe_load(content)
    except yaml.YAMLError:
        return []  # the compiler reports it
    imports = document.get("imports") if isinstance(document, dict) else None
    if not isinstance(imports, list):
        return []
    found = []
    for item in imports:
        if isinstance(item, str):
            path = posixpath.normpath(posixpath.join(posixpath.dirname(relative), item))
            if not path.startswith("../"):
                found.append(path)
    return found
