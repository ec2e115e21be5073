"""``mmcodec`` (= ``python -m mmcodec.codegen``): validate, generate, check, compat,
json-schema, inspect.

This module only parses arguments: the compiler's commands live in
:mod:`mmcodec.codegen.commands`, imported when one of them runs, so that ``inspect`` works
in a runtime-only install (``pip install mmcodec``, without jinja2 and pyyaml), and
nothing here imports torch (``--help`` and the compiler start in a fraction of a second).
A missing extra is one line naming the ``pip install`` that fixes it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from mmcodec import __version__
from mmcodec._extras import install_hint
from mmcodec.codegen import inspect_command
from mmcodec.codegen.diagnostics import UsageError

CLEAN, FINDINGS, USAGE = 0, 1, 2
EXIT_CODES = """\
exit codes:
  0  clean: the schemas are valid, the output is up to date, the change is compatible
  1  findings: an invalid schema, a stale, missing, extra or foreign output file,
     a breaking change, an undecodable message (inspect)
  2  usage or I/O error: bad arguments, a missing or unreadable file, a directory
     without schema files, an unknown git ref, an --out directory holding files
     mmcodec did not write (generate refuses and writes nothing)
"""
DEFAULT_SCHEMAS = "schema"
DEFAULT_OUT = "generated"
LANGUAGES = ("python", "rust")


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its options; ``args.run(args)`` runs the chosen one."""
    parser = argparse.ArgumentParser(
        prog="mmcodec",
        description="The mmcodec schema compiler (python -m mmcodec.codegen is the same).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mmcodec {__version__}")
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
    validate.set_defaults(run=_compiler_command("run_validate"))

    generate = command("generate", "rewrite the output directory from the schemas")
    check = command(
        "check", "exit 1 if the output directory is stale, incomplete, or holds extra files"
    )
    for p in (generate, check):
        p.add_argument("--schemas", help=f"schema directory or file (default: {DEFAULT_SCHEMAS})")
        p.add_argument(
            "--out", help=f"output directory (default: {DEFAULT_OUT}; required with --lang rust)"
        )
        p.add_argument("--package", help="import name of the output package (default: from --out)")
        p.add_argument(
            "--lang",
            choices=LANGUAGES,
            default="python",
            help="the output's language: python (a package) or rust (a module per schema and "
            "mod.rs, for the mmcodec runtime crate)",
        )
    generate.add_argument(
        "--force",
        action="store_true",
        help="also overwrite or remove files in --out that mmcodec did not write",
    )
    output_format(check)
    generate.set_defaults(run=_compiler_command("run_generate"))
    check.set_defaults(run=_compiler_command("run_check"))

    compat = command(
        "compat", "exit 1 if the schemas break wire compatibility with an older version"
    )
    compat.add_argument(
        "old", nargs="?", help="the older schema file or directory (not with --against)"
    )
    compat.add_argument("new", nargs="?", help="the newer one (default: schema/)")
    compat.add_argument("--against", metavar="GIT_REF", help="take the older schemas from git")
    output_format(compat)
    compat.set_defaults(run=_compiler_command("run_compat"))

    json_schema = command("json-schema", "print the schema language as JSON Schema")
    json_schema.set_defaults(run=_compiler_command("run_json_schema"))

    inspect_command.add_parser(sub)  # the runtime alone serves it
    return parser


def _compiler_command(name: str) -> Callable[[argparse.Namespace], int]:
    """Run ``commands.<name>``; the compiler's dependencies come with the codegen extra."""

    def run(args: argparse.Namespace) -> int:
        from mmcodec.codegen import commands

        command: Callable[[argparse.Namespace], int] = getattr(commands, name)
        return command(args)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = inspect_command.run(args) if args.command == "inspect" else args.run(args)
    except UsageError as e:
        print(f"mmcodec {args.command}: error: {e}", file=sys.stderr)
        return USAGE
    except ModuleNotFoundError as e:
        hint = install_hint(e.name or "")
        if hint is None:
            raise  # not an extra of mmcodec: a broken installation, shown as it is
        print(f"mmcodec {args.command} needs {hint}", file=sys.stderr)
        return USAGE
    return code
