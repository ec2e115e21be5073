"""A user's own schema compiles to Rust that builds with cargo, passes clippy with warnings
as errors, and round-trips: a fresh crate, outside this project's workspace, whose schemas
take names Rust cannot spell or that shadow its prelude, import each other, and carry
text written to break out of literals and comments (a doc that closes a block comment, a
bidirectional control rustc rejects in source, quotes and backslashes in tags and
defaults).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from mmcodec.codegen.cli import main
from tests.rust.cargo import RUST, cargo_config

HOSTILE = '*/ } fn evil() {} /* "quoted" \\ \r\n\u202e end'

SCHEMAS = {
    "shapes.yaml": {
        "schema": "shapes",
        "version": 2,
        "doc": HOSTILE,
        "types": {
            "Option": {
                "doc": HOSTILE,
                "struct": {
                    "type": {"type": "int", "ge": 0, "doc": HOSTILE},
                    "self": {"type": "str", "default": HOSTILE},
                    "fn": {"type": "bytes", "default": HOSTILE.encode("utf-8")},
                    "match": {"type": "optional[tensor]", "default": None},
                },
            },
            "Tensor": {
                "struct": {"values": "list[float]", "label": {"type": "str", "pattern": "^[a-z]+$"}}
            },
            "Cell": {
                "struct": {
                    "shape": "Self",
                    "size": {"type": "int", "ge": 1, "default": 1, "doc": HOSTILE},
                }
            },
            "Self": {
                "union": [
                    {"tag": 'quote"tag\\', "type": "Option"},
                    {"tag": "\u202e", "type": "Tensor"},
                    {"tag": "plain", "type": "nested_tensors"},
                ]
            },
        },
    },
    "scene.yaml": {
        "schema": "scene",
        "version": 1,
        "imports": ["shapes.yaml"],
        "types": {
            "u8": {"mapping": {"key": "str", "value": "shapes.Self"}},
            "Scene": {"struct": {"items": "u8", "first": "optional[shapes.Self]"}},
            # Lists of a mapping of str to a struct of another schema: column lists; a
            # tuple of them stays rows.
            "Row": {"mapping": {"key": "str", "value": "shapes.Cell"}},
            "Table": {
                "struct": {
                    "rows": "list[optional[Row]]",
                    "pinned": {"type": "tuple[Row, ...]", "default": []},
                }
            },
        },
    },
}

LIB = """
pub mod schemas;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mmcodec::{Dtype, IndexMap, NestedTensors, Tensor};

    use crate::schemas::scene::{u8_, Scene};
    use crate::schemas::shapes::{self, Option_, Self_, Tensor_};

    #[test]
    fn a_scene_round_trips() {
        let bytes = [1u8, 0, 1];
        let mask = Tensor::new(Dtype::Bool, &[3], &bytes).unwrap();
        let option = Option_ {
            r#type: 7,
            self_: shapes::Option_::SELF__DEFAULT.to_string(),
            r#fn: b"raw".to_vec().into(),
            r#match: Some(mask.clone()),
        };
        let shared = Arc::new(Self_::Option_(option));
        let mut items = IndexMap::new();
        items.insert("a".to_string(), shared.clone());
        items.insert("b".to_string(), shared.clone());
        let label = "abc".to_string();
        let tensor = Tensor_ { values: vec![0.5, -1.0], label };
        items.insert("c".to_string(), Arc::new(Self_::Tensor_(tensor)));
        let nested = NestedTensors::List(vec![NestedTensors::Tensor(mask), NestedTensors::Int(3)]);
        items.insert("d".to_string(), Arc::new(Self_::NestedTensors(nested)));
        let scene = Scene { items: u8_(items), first: Some(shared) };
        let frames = mmcodec::encode(&scene).unwrap();
        let back: Scene = mmcodec::decode(&frames.slices()).unwrap();
        assert_eq!(back, scene);
        // The same Arc twice travels once and comes back as one Arc.
        assert!(Arc::ptr_eq(&back.items["a"], &back.items["b"]));
        assert!(Arc::ptr_eq(&back.items["a"], back.first.as_ref().unwrap()));
        // A constraint fails at the sender, with the path.
        let bad = Tensor_ { values: vec![], label: "ABC".to_string() };
        let mut items = IndexMap::new();
        items.insert("x".to_string(), Arc::new(Self_::Tensor_(bad)));
        let error = mmcodec::encode(&Scene { items: u8_(items), first: None }).unwrap_err();
        assert_eq!(error.path(), "$.items['x'].label");
    }

    #[test]
    fn a_table_travels_as_columns_and_its_tuple_as_rows() {
        use crate::schemas::scene::{Row, Table};
        use mmcodec::Rows;

        let circle = Arc::new(Self_::NestedTensors(NestedTensors::Int(1)));
        let cell = |size: u64| Arc::new(shapes::Cell { shape: circle.clone(), size });
        let row = |size: u64| {
            let mut cells = IndexMap::new();
            cells.insert("x".to_string(), cell(size));
            cells.insert("y".to_string(), cell(2));
            Row(cells)
        };
        // 16 present items (mmcodec::columns::MIN_ITEMS): the fewest that travel as columns.
        let rows = |n: u64| -> Vec<Option<Row>> {
            (1..=n).map(|size| if size == 2 { None } else { Some(row(size)) }).collect()
        };
        let table = Table { rows: rows(17), pinned: Rows(vec![row(4), row(5)]) };
        let frames = mmcodec::encode(&table).unwrap();
        assert_eq!(frames.header()[5], 3, "wire version 3: a column list");
        let back: Table = mmcodec::decode(&frames.slices()).unwrap();
        assert_eq!(back, table);
        let first = back.rows[0].as_ref().unwrap();
        assert!(Arc::ptr_eq(&first["x"].shape, &back.rows[2].as_ref().unwrap()["y"].shape));
        // Only its tuple holds rows: no column list, wire version 2; nor 15 present items.
        let tuple_only = Table { rows: vec![], pinned: Rows(vec![row(4), row(5)]) };
        assert_eq!(mmcodec::encode(&tuple_only).unwrap().header()[5], 2);
        let fifteen = Table { rows: rows(16), pinned: Rows(vec![]) };
        assert_eq!(mmcodec::encode(&fifteen).unwrap().header()[5], 2);
        // A constraint of a field, checked item by item: the path rows would give.
        let mut bad = Table { rows: rows(17), pinned: Rows(vec![]) };
        bad.rows[2] = Some(row(0));
        let error = mmcodec::encode(&bad).unwrap_err();
        assert_eq!(error.path(), "$.rows[2]['x'].size");
    }
}
"""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _cargo(crate: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["cargo", *args[:1], *cargo_config(), *args[1:]],
        cwd=crate,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**__import__("os").environ, "CARGO_TARGET_DIR": str(RUST / "target" / "user-crate")},
    )


def test_a_users_schema_builds_lints_and_round_trips_as_a_crate(tmp_path: Path) -> None:
    crate = tmp_path / "users_crate"
    (crate / "schema").mkdir(parents=True)
    for name, schema in SCHEMAS.items():
        text = yaml.safe_dump(schema, sort_keys=False, allow_unicode=True)
        (crate / "schema" / name).write_text(text, encoding="utf-8")
    args = ["--root", str(crate), "generate", "--lang", "rust", "--schemas", "schema"]
    assert main([*args, "--out", "src/schemas"]) == 0
    assert sorted(p.name for p in (crate / "src/schemas").iterdir()) == [
        "mod.rs",
        "scene.rs",
        "shapes.rs",
    ]
    (crate / "Cargo.toml").write_text(
        "[package]\n"
        'name = "users_crate"\n'
        'version = "0.1.0"\n'
        'edition = "2021"\n\n'
        "[dependencies]\n"
        f'mmcodec = {{ path = "{RUST / "mmcodec"}", features = ["patterns"] }}\n\n'
        "[workspace]\n"
    )
    (crate / "src/lib.rs").write_text(LIB.lstrip())
    fmt = subprocess.run(
        ["rustfmt", "--edition", "2021", "--check", *map(str, (crate / "src/schemas").iterdir())],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fmt.returncode == 0, fmt.stdout[:3000]
    clippy = _cargo(crate, "clippy", "--all-targets", "--", "-D", "warnings")
    assert clippy.returncode == 0, clippy.stderr[-4000:]
    test = _cargo(crate, "test")
    assert test.returncode == 0, test.stdout[-3000:] + test.stderr[-3000:]
    assert "test tests::a_scene_round_trips ... ok" in test.stdout
    assert "test tests::a_table_travels_as_columns_and_its_tuple_as_rows ... ok" in test.stdout
