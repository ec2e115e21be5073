"""``mmcodec`` (= ``python -m mmcodec.codegen``): validate, generate, check, compat, json-schema,
inspect.

Compiler modules (and so jinja2 and pyyaml) are imported only by the commands that
compile: ``inspect`` runs where only the runtime is installed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from mmcodec.codegen import inspect_command

FIX_HINT = "run: make generate"


def _schema_files(paths: Sequence[str], schema_dir: Path) -> list[Path]:
    if not paths:
        return sorted(schema_dir.glob("*.yaml"))
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmcodec", description=__doc__)
    parser.add_argument(
        "--root", type=Path, default=Path.cwd(), help="project root; relative paths start there"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check schema files; report every error")
    validate.add_argument("paths", nargs="*", help="schema files or directories (default: schema/)")
    validate.add_argument("--format", choices=("text", "json"), default="text")

    for name, text in (
        ("generate", "rewrite the output directory from the schemas"),
        ("check", "exit 1 if the output directory is stale, incomplete or has extra files"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("--schemas", default="schema", help="schema directory or file")
        command.add_argument("--out", default="generated", help="output directory")
        command.add_argument("--package", default=None, help="import name of the output package")

    sub.add_parser("json-schema", help="print the schema language as JSON Schema")

    compat = sub.add_parser(
        "compat", help="exit 1 if the schemas break wire compatibility with an older version"
    )
    compat.add_argument("old", nargs="?", help="the older schema file or directory")
    compat.add_argument("new", nargs="?", default="schema", help="the newer one (default: schema/)")
    compat.add_argument("--against", metavar="GIT_REF", help="take the older schemas from git")

    inspect_command.add_parser(sub)

    args = parser.parse_args(argv)
    if args.command == "inspect":  # the runtime alone serves it: no compiler import
        return inspect_command.run(args)
    try:  # the compiler's own dependencies come with the codegen extra
        from mmcodec.codegen.diagnostics import SchemaErrors, format_json, format_text
        from mmcodec.codegen.jsonschema import schema_language_json
        from mmcodec.codegen.output import compare, plan_output, write
        from mmcodec.codegen.validate import compile_schemas
    except ModuleNotFoundError as e:
        print(
            f"mmcodec {args.command} needs {e.name}: pip install 'mmcodec[codegen]'",
            file=sys.stderr,
        )
        return 2
    root: Path = args.root.resolve()
    if args.command == "json-schema":
        sys.stdout.write(schema_language_json())
        return 0
    if args.command == "compat":
        return _compat(args, root)
    if args.command == "validate":
        files = _schema_files([str(root / p) for p in args.paths], root / "schema")
        try:
            compile_schemas(files, root)
        except SchemaErrors as e:
            out = format_json if args.format == "json" else format_text
            sys.stdout.write(out(e.diagnostics))
            if args.format == "text":
                print(f"{len(e.diagnostics)} error(s)", file=sys.stderr)
            return 1
        if args.format == "json":
            sys.stdout.write(format_json([]))
        else:
            print(f"ok: {len(files)} schema file(s) valid")
        return 0

    out_dir = (root / args.out).resolve()
    package = args.package or Path(args.out).as_posix().strip("/").replace("/", ".")
    try:
        modules = compile_schemas(_schema_files([str(root / args.schemas)], root), root)
    except SchemaErrors as e:
        sys.stdout.write(format_text(e.diagnostics))
        return 1
    plan = plan_output(modules, package, out_dir, root)
    if args.command == "generate":
        for line in write(plan, out_dir):
            print(line)
        return 0
    problems = compare(plan, out_dir)
    for line in problems:
        print(line)
    if problems:
        print(FIX_HINT)
        return 1
    shown = out_dir.relative_to(root) if out_dir.is_relative_to(root) else out_dir
    print(f"ok: {shown} is up to date")
    return 0


def _compat(args: argparse.Namespace, root: Path) -> int:
    from mmcodec.codegen.compat import breaking_changes
    from mmcodec.codegen.diagnostics import SchemaErrors, format_text
    from mmcodec.codegen.validate import compile_schemas

    if (args.old is None) == (args.against is None):
        print("compat: give either OLD [NEW] or --against GIT_REF", file=sys.stderr)
        return 2
    new_files = _schema_files([str(root / args.new)], root / "schema")
    with tempfile.TemporaryDirectory() as scratch:
        if args.against:
            old_files = _checkout_schemas(args.against, new_files, root, Path(scratch))
        else:
            old_files = _schema_files([str(root / args.old)], root / "schema")
        try:
            old = compile_schemas(old_files, Path(scratch) if args.against else root)
            new = compile_schemas(new_files, root)
        except SchemaErrors as e:
            sys.stdout.write(format_text(e.diagnostics))
            return 1
    problems = breaking_changes(old, new)
    for line in problems:
        print(line)
    if problems:
        print("breaking changes need a new major version (the schema's `version`)")
        return 1
    print(f"ok: {len(new)} schema(s) compatible with the older version")
    return 0


def _checkout_schemas(ref: str, files: list[Path], root: Path, into: Path) -> list[Path]:
    """Write each schema file as it was at ``ref`` under ``into`` (missing ones skipped)."""
    found = []
    for path in files:
        relative = path.resolve().relative_to(root).as_posix()
        shown = subprocess.run(
            ["git", "show", f"{ref}:{relative}"], cwd=root, capture_output=True, check=False
        )
        if shown.returncode != 0:
            continue  # a schema added since ref: nothing to break
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shown.stdout)
        found.append(target)
    return found
