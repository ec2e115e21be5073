"""How a diagnostic looks: the source line, a caret under the offending text, the hint.

The invalid/*.expected files fix the layout for real schemas; these tests pin the edges:
what a hostile source line may not do to a terminal, wide characters, long hints, a
position past the text, and YAML syntax errors told in the schema language's words.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmcodec.codegen.cli import main
from mmcodec.codegen.diagnostics import Diagnostic, Position, count_line, format_text


def _text(line: str, column: int, length: int, hint: str = "") -> str:
    d = Diagnostic(Position("a.yaml", 1, column, length), "bad", hint)
    return format_text([d], {"a.yaml": line + "\n"})


def test_the_caret_spans_the_offending_text_and_the_hint_follows_it() -> None:
    assert _text("x: Piont", 4, 5, "did you mean 'Point'?") == (
        "a.yaml:1:4: error: bad\n"
        "  |\n"
        "1 | x: Piont\n"
        "  |    ^^^^^ did you mean 'Point'?\n"
        "\n"
        "1 error in 1 file\n"
    )


def test_a_hint_too_long_for_the_caret_line_gets_its_own() -> None:
    hint = "h" * 100
    assert _text("x: y", 4, 1, hint).splitlines()[3:5] == ["  |    ^", f"  = help: {hint}"]


def test_control_characters_in_a_source_line_never_reach_the_terminal() -> None:
    """A schema is untrusted: an escape sequence in it is shown, not obeyed."""
    shown = _text("doc: \x1b[2J\x07x\ty: Piont", 16, 5)
    assert "\x1b" not in shown and "\x07" not in shown and "\t" not in shown
    assert shown.splitlines()[2:4] == [
        "1 | doc: \ufffd[2J\ufffdx y: Piont",
        "  |                ^^^^^",
    ]


def test_wide_characters_before_the_column_move_the_caret_by_their_width() -> None:
    assert _text("doc: 画像 x: Piont", 12, 5).splitlines()[2:4] == [
        "1 | doc: 画像 x: Piont",
        "  |              ^^^^^",
    ]


def test_a_position_past_the_line_or_the_file_still_shows() -> None:
    assert _text("ab", 9, 0).splitlines()[2:4] == ["1 | ab", "  |   ^"]
    past = Diagnostic(Position("a.yaml", 7, 1), "bad", "fix it")
    assert format_text([past], {"a.yaml": "x\n"}) == (
        "a.yaml:7:1: error: bad\n  = help: fix it\n\n1 error in 1 file\n"
    )


def test_the_count_says_errors_and_files() -> None:
    one = Diagnostic(Position("a.yaml", 1, 1), "bad")
    other = Diagnostic(Position("b.yaml", 1, 1), "bad")
    assert count_line([one]) == "1 error in 1 file"
    assert count_line([one, other, one]) == "3 errors in 2 files"


# -- YAML syntax errors -----------------------------------------------------------------

YAML_ERRORS = {
    "missing colon": (
        "schema: a\nversion 1\n",
        "2:1: expected 'key: value', found no ':'",
        "a mapping entry is 'key: value', e.g. version: 1",
    ),
    "list item without its dash": (
        "imports:\n  - a.yaml\n  b.yaml\n",
        "3:3: expected 'key: value', found no ':'",
        "a list item starts with '- ': - b.yaml",
    ),
    "block scalar not indented": (
        "doc: |\nText.\nschema: a\n",
        "2:1: expected 'key: value', found no ':'",
        "indent the text of the block scalar that `doc` starts on line 1 more than that key",
    ),
    "key indented under a value": (
        "types:\n  A:\n    struct:\n      x: int\n        y: int\n",
        "5:9: bad indentation: `y` is indented under `x` (line 4), which already has a value",
        "indent it to column 7 to make it a key beside `x`",
    ),
    "list item between two indentations": (
        "imports:\n  - a.yaml\n - b.yaml\n",
        "3:2: bad indentation: `-` (column 2) lines up with no key above it",
        "indent it to column 3 like `-` (line 2) or to column 1 like `imports` (line 1)",
    ),
    "unterminated string": (
        "schema: a\ndoc: 'text\n",
        "2:6: unterminated string: this quote is never closed",
        "close it with '",
    ),
    "unknown escape": (
        'doc: "C:\\path"\n',
        "1:9: unknown escape sequence in a double-quoted string",
        r"write \\ for a backslash, or quote the text with single quotes",
    ),
    "unclosed list": (
        "imports: [a.yaml, b.yaml\n",
        "1:10: '[' is not closed before the end of the file",
        "add ']' at the end of line 1",
    ),
    "reserved character": (
        "doc: @home\n",
        "1:6: '@' cannot start an unquoted value in YAML",
        'quote the value: "@home"',
    ),
    "undefined alias": (
        "doc: *text\n",
        "1:6: alias '*text' refers to no anchor '&text' before it",
        'quote the value if the * is text: "*text"',
    ),
    "duplicate anchor": (
        "a: &x 1\nb: &x 2\n",
        "2:4: anchor '&x' is defined twice (first on line 1)",
        "give each anchor its own name",
    ),
    "unmatched bracket": (
        "imports: [a.yaml]]\n",
        "1:18: unmatched ']'",
        "remove it, or open it with '['",
    ),
    "tag of a type no safe loader knows": (
        "doc: !!python/object:os.system x\n",
        "1:6: unknown tag '!!python/object:os.system': a schema holds plain YAML values",
        "remove the tag (quote a text that starts with '!')",
    ),
    "tag that does not fit its value": (
        "version: !!int one\n",
        "1:10: 'one' is not a valid !!int: a schema holds plain YAML values",
        "remove the tag (quote a text that starts with '!')",
    ),
    "tag of another kind of node": (
        "doc: !!map text\n",
        "1:6: !!map asks for a mapping, but the value is a scalar: a schema holds plain YAML "
        "values",
        "remove the tag (quote a text that starts with '!')",
    ),
    "two documents": (
        "schema: a\n---\nschema: b\n",
        "2:1: a second YAML document: a schema file holds one",
        "remove the '---' line, or put the second document in a file of its own",
    ),
}


@pytest.mark.parametrize("case", list(YAML_ERRORS), ids=list(YAML_ERRORS))
def test_yaml_syntax_errors_in_our_words(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, expected, hint = YAML_ERRORS[case]
    (tmp_path / "s.yaml").write_text(text)
    assert main(["--root", str(tmp_path), "validate", "--format", "json", "s.yaml"]) == 1
    (error,) = json.loads(capsys.readouterr().out)["errors"]
    assert (f"{error['line']}:{error['column']}: {error['message']}", error["hint"]) == (
        expected,
        hint,
    )


def test_an_unknown_yaml_error_keeps_pyyaml_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.yaml").write_text("doc: |x\n")
    assert main(["--root", str(tmp_path), "validate", "--format", "json", "s.yaml"]) == 1
    (error,) = json.loads(capsys.readouterr().out)["errors"]
    assert (error["line"], error["column"], error["hint"]) == (1, 7, None)
    assert error["message"] == (
        "YAML syntax error: while scanning a block scalar: expected chomping or indentation "
        "indicators, but found 'x'"
    )
