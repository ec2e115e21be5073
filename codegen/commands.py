"""The compiler's commands behind ``mmcodec``: validate, generate, check, compat, json-schema.

:mod:`mmcodec.codegen.cli` parses the arguments and imports this module only to run one of
these (it needs the ``codegen`` extra: pyyaml and jinja2).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

from mmcodec.codegen.cli import CLEAN, DEFAULT_OUT, DEFAULT_SCHEMAS, FINDINGS
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
from mmcodec.codegen.output import (
    Plan,
    default_package,
    display,
    generate_command,
    plan_output,
    survey,
    write,
)
from mmcodec.codegen.project import project_defaults
from mmcodec.codegen.rust.output import plan_rust_output
from mmcodec.codegen.validate import compile_schemas


def _root(args: argparse.Namespace) -> Path:
    return Path(args.root).resolve()


def _print_schema_errors(errors: SchemaErrors, args: argparse.Namespace) -> int:
    """Text to stderr, each error with its source line, then their count (stdout keeps a
    command's product: the files written, the report); ``--format json`` to stdout."""
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(format_json(errors.diagnostics))
    else:
        sys.stderr.write(format_text(errors.diagnostics, errors.sources))
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
    if getattr(args, "lang", "python") != "python":
        words += ["--lang", args.lang]
    for option in ("schemas", "out", "package"):
        value = getattr(args, option)
        if value is not None:
            words += [f"--{option}", value]
    if force:
        words.append("--force")
    return shlex.join(words)


def _plan(args: argparse.Namespace) -> tuple[Path, Path, Plan]:
    root = _root(args)
    rust = getattr(args, "lang", "python") == "rust"
    if rust and args.out is None:
        raise UsageError("--lang rust needs --out: the folder of the generated Rust modules")
    if rust and args.package is not None:
        raise UsageError("--package names a Python package; Rust output has none")
    defaults = {} if rust else project_defaults(root)
    out = _from_root(args.out or defaults.get("out", DEFAULT_OUT), root)
    out_dir = (root / out).resolve()
    # The project's package is the import name of its own output folder, not of another.
    configured = (
        defaults.get("package")
        if out == _from_root(defaults.get("out", DEFAULT_OUT), root)
        else None
    )
    package = args.package or configured or default_package(out)
    schemas = args.schemas or defaults.get("schemas", DEFAULT_SCHEMAS)
    files = schema_files([root / schemas], root)
    modules = compile_schemas(files, root)
    if rust:
        command = generate_command(_from_root(schemas, root), out, package, lang="rust")
        return root, out_dir, plan_rust_output(modules, command)
    command = generate_command(_from_root(schemas, root), out, package)
    return root, out_dir, plan_output(modules, package, command)


def _from_root(path: str, root: Path) -> str:
    """``path`` (as given, relative to ``root`` or absolute) relative to ``root``, spelled
    the same whatever the spelling given (``./schema/``) and wherever the project is."""
    return Path(os.path.relpath(os.path.normpath(root / path), root)).as_posix()


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
            f"move the foreign files out of {display(out_dir)}, or run: "
            f"{_fix_command(args, force=True)} (removes them)"
        )
    elif problems:
        fix = f"run: {_fix_command(args)}"
    if args.format == "json":
        rows = [{"problem": kind, "path": str(path)} for kind, path in problems]
        document = {"errors": [], "files": rows, "fix": fix}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return FINDINGS if problems else CLEAN
    for kind, path in problems:
        print(
            f"{kind}: {display(path)}" + (" (not written by mmcodec)" if kind == "foreign" else "")
        )
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
            relabelled = SchemaErrors(
                [_relabel(d, label) for d in e.diagnostics],
                {label + name: text for name, text in e.sources.items()},
            )
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
    for major in report.majors:  # a new major version: allowed to break, and says what
        print(major)
        for change in major.changes:
            note = "" if change.breaking else "note: "
            print(
                f"{change.position}: {note}{change.subject}: {change.message} "
                f"[major version {major.old} -> {major.new}]"
            )
    for change in report.changes:
        print(change)
    if breaking:
        print(
            f"{len(breaking)} breaking change(s): they need a new major version "
            "(the schema's `version`)"
        )
        return FINDINGS
    new_count = f", {len(report.new)} new" if report.new else ""
    compatible = len(report.compared) - len(report.majors)
    if report.majors and compatible:
        print(
            f"ok: {compatible} schema(s) compatible with {older}, {len(report.majors)} with a "
            f"new major version{new_count}"
        )
    elif report.majors:
        print(f"ok: {len(report.majors)} schema(s) with a new major version{new_count}")
    else:
        print(f"ok: {len(report.compared)} schema(s) compatible with {older}{new_count}")
    return CLEAN


def _relabel(d: Diagnostic, label: str) -> Diagnostic:
    p = d.position
    return Diagnostic(Position(label + p.file, p.line, p.column, p.length), d.message, d.hint)


# -- json-schema -------------------------------------------------------------------


def run_json_schema(args: argparse.Namespace) -> int:
    del args
    sys.stdout.write(schema_language_json())
    return CLEAN
