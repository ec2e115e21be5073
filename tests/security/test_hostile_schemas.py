"""Schemas from an untrusted contributor: the compiler stays bounded and reads only schema
files of the project (issue 21, items 2, 9 and 10).

The reproducers that hung or exhausted memory run in a child process under an
address-space limit, so that a regression fails the test (MemoryError, or the child
killed) instead of taking the machine down; the child imports only the compiler.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from mmcodec.codegen import load, typeexpr
from mmcodec.codegen.diagnostics import SchemaErrors
from mmcodec.codegen.output import plan_output
from mmcodec.codegen.validate import compile_schemas

ADDRESS_SPACE = 1 << 30  # 1 GiB: the compiler needs a few tens of MB for any input here


def _validate_in_child(root: Path, name: str) -> list[str]:
    """Diagnostics of ``compile_schemas([root/name], root)``, run in a bounded child."""
    probe = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from mmcodec.codegen.diagnostics import SchemaErrors\n"
        "from mmcodec.codegen.validate import compile_schemas\n"
        "root = Path(sys.argv[1])\n"
        "try:\n"
        "    compile_schemas([root / sys.argv[2]], root)\n"
        "    print(json.dumps([]))\n"
        "except SchemaErrors as e:\n"
        "    print(json.dumps([str(d) for d in e.diagnostics]))\n"
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    done = subprocess.run(
        [sys.executable, "-c", probe, str(root), name],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found: list[str] = json.loads(done.stdout)
    return found


def _alias_bomb(levels: int, fanout: int = 10) -> str:
    """``levels`` of anchors, each a list of ``fanout`` aliases of the one before: a few
    hundred bytes that stand for fanout**levels nodes."""
    lines = ["schema: bomb", "version: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels + 1):
        aliases = ", ".join([f"*a{level - 1}"] * fanout)
        lines.append(f"a{level}: &a{level} [{aliases}]")
    lines.append("types: {A: {struct: {x: int}}}")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    """Item 2: 506 bytes (8 levels of 10 aliases) grew past 639 MB in 60 s."""
    text = _alias_bomb(8)
    assert len(text) < 600
    (tmp_path / "bomb.yaml").write_text(text)
    found = _validate_in_child(tmp_path, "bomb.yaml")
    assert found == [
        f"bomb.yaml:7:45: the document holds more than {load.MAX_NODES} nodes once its "
        "aliases are expanded (an alias stands for a copy of its anchor's value)"
    ]


def test_aliases_within_the_budget_are_shared_not_copied(tmp_path: Path) -> None:
    """Anchors stay usable: a field spec reused through an alias is one value."""
    (tmp_path / "reuse.yaml").write_text(
        "schema: reuse\nversion: 1\ntypes:\n"
        "  A: {struct: {x: &count {type: int, ge: 0, doc: A count.}}}\n"
        "  B: {struct: {y: *count}}\n"
    )
    modules = compile_schemas([tmp_path / "reuse.yaml"], tmp_path)
    a, b = modules[0].types
    assert a.fields[0].constraints == b.fields[0].constraints  # type: ignore[union-attr]
    assert b.fields[0].doc == "A count."  # type: ignore[union-attr]
    loaded = load.load_file(tmp_path / "reuse.yaml", "reuse.yaml", [])
    assert loaded.root is not None
    types = loaded.root.get("types")  # type: ignore[union-attr]
    spec_a = types.get("A").get("struct").get("x")  # type: ignore[union-attr]
    spec_b = types.get("B").get("struct").get("y")  # type: ignore[union-attr]
    assert spec_a is spec_b


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("schema: deep\nversion: 1\ntypes: " + "[" * 5000 + "]" * 5000 + "\n", "3:71"),
        ("schema: deep\nversion: 1\ntypes: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "3:260"),
    ],
    ids=["lists", "mappings"],
)
def test_deep_nesting_is_a_diagnostic_not_a_recursion_error(
    tmp_path: Path, text: str, where: str
) -> None:
    """Item 10: 5,000 nested ``[`` raised RecursionError out of ``validate``."""
    (tmp_path / "deep.yaml").write_text(text)
    found = _validate_in_child(tmp_path, "deep.yaml")
    assert found == [f"deep.yaml:{where}: mappings and lists nest deeper than 64 levels"]


def test_deeply_nested_type_expressions_are_a_diagnostic(tmp_path: Path) -> None:
    expression = "list[" * 5000 + "int" + "]" * 5000
    (tmp_path / "t.yaml").write_text(
        f'schema: t\nversion: 1\ntypes:\n  A:\n    struct:\n      x: "{expression}"\n'
    )
    with pytest.raises(SchemaErrors) as caught:
        compile_schemas([tmp_path / "t.yaml"], tmp_path)
    [diagnostic] = caught.value.diagnostics
    assert diagnostic.message.endswith(f": type nested deeper than {typeexpr.MAX_DEPTH} levels")
    assert (diagnostic.position.line, diagnostic.position.column) == (6, 11 + 5 * 32)


def test_imports_stay_inside_the_project_root(tmp_path: Path) -> None:
    """Item 10: ``imports:`` read /etc/hostname and quoted it in the error."""
    root = tmp_path / "project"
    (root / "schema").mkdir(parents=True)
    outside = tmp_path / "secret.yaml"
    outside.write_text("schema: secret\nversion: 1\ntypes: {S: {struct: {token: str}}}\n")
    (root / "schema" / "link.yaml").symlink_to(outside)
    (root / "schema" / "notes.txt").write_text("password: hunter2\n")
    (root / "schema" / "a.yaml").write_text(
        "schema: a\nversion: 1\n"
        "imports: [/etc/hostname, ../../secret.yaml, link.yaml, notes.txt, ~/x.yaml]\n"
        "types: {A: {struct: {x: int}}}\n"
    )
    with pytest.raises(SchemaErrors) as caught:
        compile_schemas([root / "schema" / "a.yaml"], root)
    shown = [
        f"{d.position.line}:{d.position.column}: {d.message}" for d in caught.value.diagnostics
    ]
    limit = root.resolve().as_posix()
    assert shown == [
        "3:11: imported schema file '/etc/hostname' must be a path relative to the file that "
        "names it, not an absolute path",
        f"3:26: imported schema file '../../secret.yaml' leaves the project root ({limit})",
        f"3:45: imported schema file 'link.yaml' leaves the project root ({limit})",
        "3:56: imported schema file 'notes.txt' is not a schema file (*.yaml, *.yml)",
        "3:67: imported schema file '~/x.yaml' must be a path relative to the file that names "
        "it, not an absolute path",
    ]
    assert "hunter2" not in str(caught.value) and "token" not in str(caught.value)


def test_a_bindings_file_cannot_bind_a_schema_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (tmp_path / "other.yaml").write_text("schema: other\nversion: 1\ntypes: {A: {struct: {}}}\n")
    (root / "b.yaml").write_text("bindings: bound\nschema: ../other.yaml\nbind: {A: generated}\n")
    with pytest.raises(SchemaErrors) as caught:
        compile_schemas([root / "b.yaml"], root)
    assert [d.message for d in caught.value.diagnostics] == [
        f"bound schema '../other.yaml' leaves the project root ({root.resolve().as_posix()})"
    ]


def test_imports_within_the_root_still_work_including_through_parent_folders(
    tmp_path: Path,
) -> None:
    (tmp_path / "common").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "common" / "base.yaml").write_text(
        "schema: base\nversion: 1\ntypes: {Point: {struct: {x: int}}}\n"
    )
    (tmp_path / "app" / "app.yaml").write_text(
        "schema: app\nversion: 1\nimports: [../common/base.yaml]\n"
        "types: {Line: {struct: {a: base.Point}}}\n"
    )
    names = [m.name for m in compile_schemas([tmp_path / "app" / "app.yaml"], tmp_path)]
    assert names == ["app", "base"]


NUMBERS = """\
schema: num
version: 9223372036854775808
types:
  A:
    struct:
      x: {type: float, le: .inf, ge: .nan}
      z: {type: str, max_length: 9223372036854775808}
      w: {type: int, lt: -9223372036854775809}
      y: {type: int, default: 18446744073709551616}
"""


def test_numbers_that_cannot_be_written_or_carried_are_diagnostics(tmp_path: Path) -> None:
    """Item 9: ``le: .inf``/``ge: .nan`` were emitted as bare ``inf``/``nan`` and a version
    of 2**63 or more made a module that failed on import; validate said ok."""
    (tmp_path / "num.yaml").write_text(NUMBERS)
    with pytest.raises(SchemaErrors) as caught:
        compile_schemas([tmp_path / "num.yaml"], tmp_path)
    assert [str(d) for d in caught.value.diagnostics] == [
        "num.yaml:2:10: 'version' must be at most 9223372036854775807 (it travels as an int64)",
        "num.yaml:6:28: A.x: 'le' must be a finite number, not inf",
        "num.yaml:6:38: A.x: 'ge' must be a finite number, not nan",
        "num.yaml:7:34: A.z: 'max_length' must be an int from 0 to 2**63 - 1",
        "num.yaml:8:26: A.w: 'lt' -9223372036854775809 is out of range: msgpack carries ints "
        "from -2**63 to 2**64 - 1",
        # Last: a field that means to have a default (a wrong one) puts fields after it
        # out of order, a mistake of its own.
        "num.yaml:9:31: A.y: default 18446744073709551616 is out of range: msgpack carries "
        "ints from -2**63 to 2**64 - 1",
    ]


def test_a_catastrophic_pattern_does_not_hang_the_default_check(tmp_path: Path) -> None:
    """``(a+)+$`` against 40 a's and a '!' takes hours in ``re``; the compiler gives it two
    seconds, in a child process, and reports the default."""
    (tmp_path / "re.yaml").write_text(
        yaml.safe_dump(
            {
                "schema": "redos",
                "version": 1,
                "types": {
                    "A": {
                        "struct": {
                            "s": {"type": "str", "pattern": "(a+)+$", "default": "a" * 40 + "!"}
                        }
                    }
                },
            }
        )
    )
    with pytest.raises(SchemaErrors) as caught:
        compile_schemas([tmp_path / "re.yaml"], tmp_path)
    [diagnostic] = caught.value.diagnostics
    assert diagnostic.message == f"A.s: default {'a' * 40 + '!'!r} violates pattern='(a+)+$'"


def test_valid_extreme_numbers_compile_and_import(tmp_path: Path) -> None:
    """The bounds of what is allowed still make modules that import."""
    (tmp_path / "edge.yaml").write_text(
        "schema: edge\nversion: 9223372036854775807\ntypes:\n  A:\n    struct:\n"
        "      a: {type: int, default: 18446744073709551615}\n"
        "      b: {type: int, default: -9223372036854775808}\n"
        "      c: {type: float, default: .inf}\n"
        "      d: {type: str, max_length: 9223372036854775807, default: ''}\n"
    )
    modules = compile_schemas([tmp_path / "edge.yaml"], tmp_path)
    source = plan_output(modules, "out").files["edge.py"]
    module = types.ModuleType("mmcodec_test_edge")
    sys.modules[module.__name__] = module  # msgspec resolves annotations through it
    try:
        exec(compile(source, "edge.py", "exec"), module.__dict__)
        a = module.A()
        assert (a.a, a.b, a.c, a.d) == (2**64 - 1, -(2**63), float("inf"), "")
        assert module.decode(module.encode(a), module.A) == a
        assert module.SCHEMA_MAJOR == 2**63 - 1
    finally:
        del sys.modules[module.__name__]
