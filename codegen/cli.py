"""``python -m codegen``: validate, generate, check, json-schema."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from codegen.diagnostics import SchemaErrors, format_json, format_text
from codegen.jsonschema import schema_language_json
from codegen.output import compare, plan_output, write
from codegen.validate import compile_schemas

FIX_HINT = "run: make generate"


def _schema_files(paths: Sequence[str], schema_dir: Path) -> list[Path]:
    if not paths:
        return sorted(schema_dir.glob("*.yaml"))
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
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

    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if args.command == "json-schema":
        sys.stdout.write(schema_language_json())
        return 0
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
