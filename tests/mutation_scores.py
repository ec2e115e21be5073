"""Mutation score per module from mutmut's results (``make mutate`` runs this after it).

Run in the directory mutmut ran in: it reads ``mutants/**/*.py.meta``, mutmut's record of
each mutant's outcome. A mutant is *killed* when a test failed (or timed out) with it in
place; the score is killed / (mutants with a verdict). Survivors are listed by name for
``mutmut show NAME``; ``--fail-under PERCENT`` fails when a module scores lower.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

KILLED = frozenset({"killed", "timeout", "segfault", "caught by type check"})
"""A test failed, ran out of time, or its process died (a crash is caught too)."""
NO_VERDICT = frozenset({"not checked", "skipped", "check was interrupted by user"})


def scores(root: Path) -> dict[str, tuple[Counter[str], list[str]]]:
    """Per mutated module (its path): counts by status, and the names of the survivors."""
    out: dict[str, tuple[Counter[str], list[str]]] = {}
    for meta in sorted((root / "mutants").rglob("*.py.meta")):
        results: dict[str, int | None] = json.loads(meta.read_text(encoding="utf-8"))[
            "exit_code_by_key"
        ]
        if not results:
            continue  # nothing to mutate in it (constants, a dataclass)
        counts: Counter[str] = Counter()
        survivors = []
        for name, code in sorted(results.items()):
            status = status_by_exit_code[code]
            counts[status] += 1
            if status not in KILLED and status not in NO_VERDICT:
                survivors.append(f"{name} ({status})")
        module = meta.relative_to(root / "mutants").as_posix().removesuffix(".meta")
        out[module] = (counts, survivors)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--fail-under", type=float, default=0.0)
    parser.add_argument("--survivors", action="store_true", help="list every survivor")
    args = parser.parse_args(argv)
    found = scores(args.root)
    if not found:
        print("no mutmut results under", args.root / "mutants")
        return 1
    low = []
    print(f"{'module':44} {'mutants':>7} {'killed':>7} {'survived':>8} {'score':>7}")
    total: Counter[str] = Counter()
    for module, (counts, survivors) in found.items():
        total.update(counts)
        judged = sum(counts.values()) - sum(counts[s] for s in NO_VERDICT)
        killed = sum(counts[s] for s in KILLED)
        if not judged:
            continue  # none of its mutants ran (a run given MUTANTS)
        score = 100.0 * killed / judged
        print(f"{module:44} {judged:7d} {killed:7d} {len(survivors):8d} {score:6.1f}%")
        if score < args.fail_under:
            low.append(module)
        if args.survivors:
            for name in survivors:
                print(f"    {name}")
    judged = sum(total.values()) - sum(total[s] for s in NO_VERDICT)
    killed = sum(total[s] for s in KILLED)
    print(f"{'all':44} {judged:7d} {killed:7d} {judged - killed:8d} "
          f"{100.0 * killed / max(judged, 1):6.1f}%")  # fmt: skip
    if low:
        print(f"below {args.fail_under}%: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
