"""A shell command as generated headers show it: the command that regenerates a file.

Shared by the Python and Rust renderers; each prints the lines after its comment marker
(``#   ``, ``//   ``) and ends every line but the last with `` \\``.
"""

from __future__ import annotations

import shlex


def command_lines(command: str, width: int) -> list[str]:
    """A shell command in lines of at most ``width`` characters, an option beside its value
    (a longer pair keeps a line of its own). The caller ends each line but the last with
    `` \\``, as a shell continues a line."""
    words = [shlex.quote(word) for word in shlex.split(command)]
    groups: list[str] = []
    for word in words:
        if groups and groups[-1].startswith("--") and " " not in groups[-1]:
            groups[-1] += " " + word  # --out generated
        else:
            groups.append(word)
    lines: list[str] = []
    for group in groups:
        if lines and len(lines[-1]) + 1 + len(group) <= width:
            lines[-1] += " " + group
        else:
            lines.append(group)
    return lines
