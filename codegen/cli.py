"""``mmcodec`` (= ``python -m mmcodec.codegen``): validate, generate, check, compat, json-schema."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from mmcodec.codegen.compat import compare_schemas
from mmcodec.codegen.diagnostics import (
    Diagnostic,
    Position,
    SchemaErrors,
    UsageError,
    format_json,
    format_text,
)
from mmcodec.codegen.gitref import Tree, checkout_schemas
from mmcodec.codegen.jsonschema import schema_language_json
from mmcodec.codegen.load import schema_files
from mmcodec.codegen.output import Plan, plan_output, survey, write
from mmcodec.codegen.validate import compile_schemas

CLEAN, FINDINGS, USAGE = 0, 1, 2
EXIT_CODES = """\
exit codes:
  0  clean: the schemas are valid, the output is up to date, the change is compatible
  1  findings: an invalid schema, a stale, missing, extra or foreign output file,
     a breaking change
  2  usage or I/O error: bad arguments, a missing or unreadable file, a directory
     without schema files, an unknown git ref, an --out directory holding files
     mmcodec did not write (generate refuses and writes nothing)
"""
DEFAULT_SCHEMAS = "schema"
DEFAULT_OUT = "generated"


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its options; ``args.run(args)`` runs the chosen one."""
    parser = argparse.ArgumentParser(
        prog="mmcodec",
        description="The mmcodec schema compiler (python -m mmcodec.codegen is the same).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--root", type=Path, default=Path.cwd(), help="project root; relative paths start there"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=text,
            description=text,
            epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    def output_format(p: argparse.ArgumentParser) -> None:
        p.add_argument("--format", choices=("text", "json"), default="text")

    validate = command("validate", "check schema files; report every error")
    validate.add_argument("paths", nargs="*", help="schema files or directories (default: schema/)")
    output_format(validate)
    validate.set_defaults(run=run_validate)

    generate = command("generate", "rewrite the output directory from the schemas")
    check = command(
        "check", "exit 1 if the output directory is stale, incomplete, or holds extra files"
    )
    for p in (generate, check):
        p.add_argument("--schemas", help=f"schema directory or file (default: {DEFAULT_SCHEMAS})")
        p.add_argument("--out", help=f"output directory (default: {DEFAULT_OUT})")
        p.add_argument("--package", help="import name of the output package (default: from --out)")
    generate.add_argument(
        "--force",
        action="store_true",
        help="also overwrite or remove files in --out that mmcodec did not write",
    )
    output_format(check)
    generate.set_defaults(run=run_generate)
    check.set_defaults(run=run_check)

    compat = command(
        "compat", "exit 1 if the schemas break wire compatibility with an older version"
    )
    compat.add_argument(
        "old", nargs="?", help="the older schema file or directory (not with --against)"
    )
    compat.add_argument("new", nargs="?", help="the newer one (default: schema/)")
    compat.add_argument("--against", metavar="GIT_REF", help="take the older schemas from git")
    output_format(compat)
    compat.set_defaults(run=run_compat)

    json_schema = command("json-schema", "print the schema language as JSON Schema")
    json_schema.set_defaults(run=run_json_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except UsageError as e:
        print(f"mmcodec {args.command}: error: {e}", file=sys.stderr)
        return USAGE
    return code


def _root(args: argparse.Namespace) -> Path:
    return Path(args.root).resolve()


def _print_schema_errors(errors: SchemaErrors, args: argparse.Namespace) -> int:
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(format_json(errors.diagnostics))
    else:
        sys.stdout.write(format_text(errors.diagnostics))
        print(f"{len(errors.diagnostics)} error(s)", file=sys.stderr)
    return FINDINGS


# -- validate ----------------------------------------------------------------------


def run_validate(args: argparse.Namespace) -> int:
    root = _root(args)
    files = schema_files([root / p for p in args.paths or [DEFAULT_SCHEMAS]], root)
    try:
        compile_schemas(files, root)
    except SchemaErrors as e:
        return _print_schema_errors(e, args)
    if args.format == "json":
        sys.stdout.write(format_json([]))
    else:
        print(f"ok: {len(files)} schema file(s) valid")
    return CLEAN


# -- generate and check ------------------------------------------------------------


def _fix_command(args: argparse.Namespace, force: bool = False) -> str:
    """The ``generate`` command that repairs what ``check`` found, with the user's options."""
    words = ["mmcodec"]
    if _root(args) != Path.cwd().resolve():
        words += ["--root", str(args.root)]
    words.append("generate")
    for option in ("schemas", "out", "package"):
        value = getattr(args, option)
        if value is not None:
            words += [f"--{option}", value]
    if force:
        words.append("--force")
    return shlex.join(words)


def _plan(args: argparse.Namespace) -> tuple[Path, Path, Plan]:
    root = _root(args)
    out = args.out or DEFAULT_OUT
    out_dir = (root / out).resolve()
    package = args.package or Path(out).as_posix().strip("/").replace("/", ".")
    files = schema_files([root / (args.schemas or DEFAULT_SCHEMAS)], root)
    modules = compile_schemas(files, root)
    return root, out_dir, plan_output(modules, package, out_dir, root)


def run_generate(args: argparse.Namespace) -> int:
    try:
        _, out_dir, plan = _plan(args)
    except SchemaErrors as e:
        return _print_schema_errors(e, args)
    for line in write(plan, out_dir, force=args.force):
        print(line)
    return CLEAN


def run_check(args: argparse.Namespace) -> int:
    try:
        root, out_dir, plan = _plan(args)
    except SchemaErrors as e:
        return _print_schema_errors(e, args)
    found = survey(plan, out_dir)
    problems = found.problems()
    fix = None
    if found.foreign:
        fix = (
            f"move the foreign files out of {out_dir}, or run: {_fix_command(args, force=True)}"
            " (removes them)"
        )
    elif problems:
        fix = f"run: {_fix_command(args)}"
    if args.format == "json":
        rows = [{"problem": kind, "path": str(path)} for kind, path in problems]
        document = {"errors": [], "files": rows, "fix": fix}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return FINDINGS if problems else CLEAN
    for kind, path in problems:
        print(f"{kind}: {path}" + (" (not written by mmcodec)" if kind == "foreign" else ""))
    if fix is not None:
        print(fix)
        return FINDINGS
    shown = out_dir.relative_to(root) if out_dir.is_relative_to(root) else out_dir
    print(f"ok: {shown} is up to date")
    return CLEAN


# -- compat ------------------------------------------------------------------------


def run_compat(args: argparse.Namespace) -> int:
    if args.against is not None and args.new is None:
        args.old, args.new = None, args.old  # `compat --against REF [NEW]`
    if (args.old is None) == (args.against is None):
        raise UsageError("give either OLD [NEW] or --against GIT_REF [NEW]")
    root = _root(args)
    new_paths = [root / (args.new or DEFAULT_SCHEMAS)]
    new_files = schema_files(new_paths, root)
    with tempfile.TemporaryDirectory() as scratch:
        if args.against:
            tree = Tree.at(args.against, root)
            into = Path(scratch).resolve()
            directories = [p for p in new_paths if p.is_dir()]
            old_files = checkout_schemas(tree, new_files, directories, into)
            inside = root.is_relative_to(tree.toplevel)
            old_root = into / root.relative_to(tree.toplevel) if inside else into
            label = f"{args.against}:"
        else:
            old_files = schema_files([root / args.old], root)
            old_root, label = root, ""
        try:
            old = compile_schemas(old_files, old_root)
        except SchemaErrors as e:  # say which version is broken, as git does: REF:path
            relabelled = SchemaErrors([_relabel(d, label) for d in e.diagnostics])
            return _print_schema_errors(relabelled, args)
    try:
        new = compile_schemas(new_files, root)
    except SchemaErrors as e:
        return _print_schema_errors(e, args)
    report = compare_schemas(old, new)
    breaking = report.breaking
    if args.format == "json":
        sys.stdout.write(json.dumps({"errors": [], **report.as_json()}, indent=2) + "\n")
        return FINDINGS if breaking else CLEAN
    older = args.against or "the older version"
    for source in report.new:
        print(f"new: {source} (not in {older}; nothing to compare)")
    for change in report.changes:
        print(change)
    if breaking:
        print(
            f"{len(breaking)} breaking change(s): they need a new major version "
            "(the schema's `version`)"
        )
        return FINDINGS
    new_count = f", {len(report.new)} new" if report.new else ""
    print(f"ok: {len(report.compared)} schema(s) compatible with {older}{new_count}")
    return CLEAN


def _relabel(d: Diagnostic, label: str) -> Diagnostic:
    p = d.position
    return Diagnostic(Position(label + p.file, p.line, p.column), d.message)


# -- json-schema -------------------------------------------------------------------


def run_json_schema(args: argparse.Namespace) -> int:
    del args
    sys.stdout.write(schema_language_json())
    return CLEAN
