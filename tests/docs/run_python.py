"""Run Python blocks of a page as a reader would: each on its own, in this interpreter.

``python run_python.py BLOCKS.json``, started in the page's example project: each block
runs in a fresh namespace as ``__main__`` (so a block never leans on an earlier one), with
the project first on ``sys.path`` and tracebacks pointing at the page's own lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path.cwd()))
    for block in json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")):
        source = "\n" * (block["line"] - 1) + block["code"]
        exec(compile(source, block["page"], "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    main()
