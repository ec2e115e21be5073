"""Build and run the Rust side's tools (``rust/tools``) from the Python tests.

The project builds Rust offline against Debian's packaged crates: ``rust/offline.toml``
(``make test`` installs them). ``MMCODEC_CARGO_CONFIG=`` (empty) builds from crates.io.
A machine without cargo fails these tests: they are not optional.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUST = ROOT / "rust"


def cargo_config() -> list[str]:
    """The ``--config`` arguments this project's cargo calls take."""
    config = os.environ.get("MMCODEC_CARGO_CONFIG", str(RUST / "offline.toml"))
    return ["--config", config] if config else []


@functools.cache
def tool(name: str = "mmcodec-conformance", package: str = "mmcodec-tools") -> Path:
    """A binary of the workspace (``rust/tools`` by default), built (release) on first
    use in this process."""
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", *cargo_config(), "-p", package],
        cwd=RUST,
        check=True,
    )
    path = RUST / "target" / "release" / name
    assert path.is_file(), path
    return path


def gateway() -> Path:
    """The gateway example's binary (``rust/gateway``)."""
    return tool("mmcodec-gateway", "mmcodec-gateway-example")


def run(*args: str | Path, timeout: float = 600) -> str:
    """Run the conformance tool; its standard output (it exits 0 or the test fails)."""
    result = subprocess.run(
        [tool(), *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
