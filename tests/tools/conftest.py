"""Fixtures for tests that use mmcodec from the outside: a wheel, pre-commit, new venvs.

They install for real (pip, virtualenv, pre-commit), so each costs tens of seconds,
most of it unpacking torch: they are marked ``slow`` (``make test`` runs them,
``make test-fast`` does not).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCH_PIN = "torch==2.13.0"
"""The CPU build on this project's machines; an unpinned torch resolves to a CUDA build."""


def run(
    command: Sequence[str | Path],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; stdout and stderr captured as text."""
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that must succeed; its whole output in the failure message."""
    assert result.returncode == 0, (
        f"{result.args} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


@pytest.fixture(scope="session")
def outside_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment for commands run as a user would: no project paths, torch pinned.

    ``PIP_CONSTRAINT`` holds every pip run (pre-commit's hook environments, build
    environments included) to the CPU torch, whatever else asks for ``torch>=2.4``.
    """
    constraints = tmp_path_factory.mktemp("pip") / "constraints.txt"
    constraints.write_text(f"{TORCH_PIN}\n", encoding="utf-8")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"} and not key.startswith("GIT_")
    }
    env.update(
        PIP_CONSTRAINT=str(constraints),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        # No bytecode compiled at install: most of torch's install time (about 50 s of
        # 70), for modules these environments never import. (PIP_NO_COMPILE is inverted.)
        PIP_COMPILE="0",
        GIT_AUTHOR_NAME="mmcodec tests",
        GIT_AUTHOR_EMAIL="tests@mmcodec.invalid",
        GIT_COMMITTER_NAME="mmcodec tests",
        GIT_COMMITTER_EMAIL="tests@mmcodec.invalid",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def git(args: Sequence[str], cwd: Path, env: Mapping[str, str]) -> str:
    return ok(run(["git", *args], cwd=cwd, env=env))


def commit_all(repo: Path, env: Mapping[str, str], message: str) -> str:
    """Stage everything and commit; the new HEAD."""
    git(["add", "-A"], repo, env)
    git(["commit", "-q", "--allow-empty", "-m", message], repo, env)
    return git(["rev-parse", "HEAD"], repo, env).strip()


@pytest.fixture(scope="session")
def source_repo(tmp_path_factory: pytest.TempPathFactory, outside_env: dict[str, str]) -> Path:
    """This project's files as they are on disk (committed or not), as a one-commit git repo.

    pre-commit installs hooks from a commit, and a wheel built here leaves no build
    directory in the working tree. Untracked files that git does not ignore are taken
    too, so the tests see work in progress; symlinks stay symlinks.
    """
    listed = run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        env=outside_env,
    )
    files = sorted(set(ok(listed).split("\0")) - {""})
    repo = tmp_path_factory.mktemp("source") / "mmcodec"
    for name in files:
        source = ROOT / name
        if not os.path.lexists(source):
            continue  # deleted in the working tree, not yet in git
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    git(["init", "-q", "-b", "main"], repo, outside_env)
    commit_all(repo, outside_env, "snapshot of the mmcodec working tree")
    return repo
