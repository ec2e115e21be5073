"""Run a page's examples in a temporary project, in the order the page shows them.

What runs, by the code block's language:

* ``python`` / ``py``: each block on its own (a fresh namespace), in a fresh interpreter
  started in the project, warnings as errors; consecutive blocks share the interpreter.
  A block that imports vLLM runs only in vLLM's environment (``tests/vllm``).
* ``console``: a shell session. Each ``$ `` line runs in the project (``mmcodec`` and
  ``git`` commands only: setup for anything else goes in ``sh`` blocks, which do not run),
  and the lines after it, when shown, must be exactly what it printed (stdout and stderr
  as one stream); a line ``...`` stands for any number of lines.
* ``sh``: installation and set-up commands for the reader's machine; its ``mmcodec``
  lines run in the project.
* A block preceded by ``<!-- file: PATH -->`` is written to PATH in the project, whatever
  its language, and not run. Other blocks (``yaml``, ``text``, ``json``) are shown only.

With ``MMCODEC_DOCS_UPDATE=1`` the shown outputs that differ are rewritten in the page
instead (review the diff): after a deliberate change to what a command prints.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs.markdown import Block, blocks

RUNNER = Path(__file__).with_name("run_python.py")
PYTHON = {"python", "py"}
ELLIPSIS = "..."
_VLLM = re.compile(
    r"^\s*(?:import|from)\s+(?:vllm\b|mmcodec\.(?:generated\.multimodal_vllm|integrations\.vllm)\b)"
    r"|\bmultimodal_vllm\b",
    re.M,
)
_PROMPT = "$ "


def needs_vllm(block: Block) -> bool:
    return bool(_VLLM.search(block.code))


def environment(project: Path) -> dict[str, str]:
    """What a reader's shell would have: this environment's scripts first, no repository
    paths, git without the reader's configuration, unbuffered Python (one output stream
    in the order it was written)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "VIRTUAL_ENV"} and not key.startswith("GIT_")
    }
    env.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        HOME=str(project.parent),
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="mmcodec docs",
        GIT_AUTHOR_EMAIL="docs@mmcodec.invalid",
        GIT_COMMITTER_NAME="mmcodec docs",
        GIT_COMMITTER_EMAIL="docs@mmcodec.invalid",
        GIT_AUTHOR_DATE="2026-12-01T12:00:00Z",
        GIT_COMMITTER_DATE="2026-12-01T12:00:00Z",
        RAY_USAGE_STATS_ENABLED="0",
        COLUMNS="100",
    )
    return env


@dataclass
class Command:
    """One ``$`` line of a console block and the output the page shows for it."""

    block: Block
    line: int
    command: str
    shown: list[str]
    """Lines 1.. after the command; empty when the page shows no output."""


def commands(block: Block) -> Iterator[Command]:
    current: Command | None = None
    for offset, text in enumerate(block.code.splitlines()):
        if text.startswith(_PROMPT):
            if current is not None:
                yield current
            current = Command(block, block.line + offset, text[len(_PROMPT) :], [])
        elif current is None:
            raise AssertionError(f"{block.where()}: a console block starts with `$ command`")
        else:
            current.shown.append(text)
    if current is not None:
        yield current


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is what ``shown`` shows (``...`` lines match any lines)."""
    if not shown:
        return not printed
    if shown[0] == ELLIPSIS:
        return any(matches(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and shown[0] == printed[0] and matches(shown[1:], printed[1:])


@dataclass
class PageRun:
    """The outcome of running one page: what failed, and what an update would rewrite."""

    page: Path
    failures: list[str] = field(default_factory=list)
    updates: list[tuple[Command, list[str]]] = field(default_factory=list)


def run_page(page: Path, project: Path, *, vllm: bool = False, update: bool = False) -> PageRun:
    """Run ``page``'s examples in ``project`` (a new, empty git repository).

    ``vllm``: run only the Python blocks that need vLLM (and write the page's files).
    """
    outcome = PageRun(page)
    env = environment(project)
    _git(["init", "-q", "-b", "main"], project, env)
    queued: list[Block] = []
    for block in blocks(page):
        if block.file is not None:
            _flush(queued, project, env, outcome)
            target = project / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
        elif block.lang in PYTHON:
            if needs_vllm(block) == vllm:
                queued.append(block)
        elif vllm:
            continue
        elif block.lang == "console":
            _flush(queued, project, env, outcome)
            for command in commands(block):
                _run_command(command, project, env, outcome, update)
        elif block.lang == "sh":
            _flush(queued, project, env, outcome)
            for offset, text in enumerate(block.code.splitlines()):
                if text.startswith("mmcodec "):
                    command = Command(block, block.line + offset, text, [])
                    printed, code = _shell(command.command, project, env)
                    if code != 0:
                        outcome.failures.append(
                            f"{block.where(command.line)}: `{text}` exited {code}:\n"
                            + "\n".join(printed)
                        )
    _flush(queued, project, env, outcome)
    if update and outcome.updates:
        _rewrite(page, outcome.updates)
    return outcome


def _git(args: list[str], project: Path, env: Mapping[str, str]) -> None:
    subprocess.run(["git", *args], cwd=project, env=dict(env), check=True, capture_output=True)


def _shell(command: str, project: Path, env: Mapping[str, str]) -> tuple[list[str], int]:
    result = subprocess.run(
        ["bash", "-c", command],
        cwd=project,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )
    return [line.rstrip() for line in result.stdout.splitlines()], result.returncode


def _run_command(
    command: Command, project: Path, env: Mapping[str, str], outcome: PageRun, update: bool
) -> None:
    words = shlex.split(command.command, comments=True)
    if not words or words[0] not in {"mmcodec", "git"}:
        outcome.failures.append(
            f"{command.block.where()}: `{command.command}`: console blocks run mmcodec and git "
            "commands only (put other set-up in a ```sh block)"
        )
        return
    printed, code = _shell(command.command, project, env)
    if not command.shown:
        if code != 0:
            outcome.failures.append(
                f"{page_line(command)}: `{command.command}` exited {code} and the page shows no "
                "output:\n" + "\n".join(printed)
            )
        return
    shown = [line.rstrip() for line in command.shown]
    if matches(shown, printed):
        return
    if update and ELLIPSIS not in shown:
        outcome.updates.append((command, printed))
        return
    outcome.failures.append(
        f"{page_line(command)}: `{command.command}` printed (exit {code}):\n"
        + "\n".join(printed)
        + "\n--- the page shows:\n"
        + "\n".join(shown)
    )


def page_line(command: Command) -> str:
    return command.block.where(command.line)


def _flush(queued: list[Block], project: Path, env: Mapping[str, str], outcome: PageRun) -> None:
    """Run the queued Python blocks in one fresh interpreter, each on its own."""
    if not queued:
        return
    spec = project.parent / f"{project.name}-blocks.json"
    spec.write_text(
        json.dumps([{"page": str(b.page), "line": b.line, "code": b.code} for b in queued]),
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", str(RUNNER), str(spec)],
        cwd=project,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        first, last = queued[0], queued[-1]
        outcome.failures.append(
            f"python blocks {first.where()} to line {last.line}: exit {result.returncode}\n"
            f"{result.stdout}{result.stderr}"
        )
    queued.clear()


def _rewrite(page: Path, updates: list[tuple[Command, list[str]]]) -> None:
    """Replace each command's shown output lines by what it printed, bottom-up."""
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    for command, printed in sorted(updates, key=lambda u: -u[0].line):
        indent = " " * command.block.indent
        first = command.line  # 0-based index of the line after the command
        lines[first : first + len(command.shown)] = [f"{indent}{p}\n" for p in printed]
    page.write_text("".join(lines), encoding="utf-8")
