//! Column lists (wire version 3) in Rust: which lists the encoder lays out as columns (at
//! least [`MIN_ITEMS`] present items, as the Python encoder decides), the layout it writes (the bytes the Python encoder writes for the same items are checked by
//! `tests/rust/test_conformance.py`), and every check the decoder makes of one, each
//! refusal a `DecodeError` with the Python decoder's path and message.

use std::sync::Arc;

use mmcodec::columns::MIN_ITEMS;
use mmcodec::msgpack::{write, Kind, Reader};
use mmcodec::{Dtype, IndexMap, Limits, NestedTensors, Tensor};
use mmcodec_multimodal::{
    BaseMultiModalField, BatchedField, MultiModalFieldConfig, MultiModalFieldElem,
    MultiModalKwargsItem, MultiModalKwargsItems,
};

/// A batch of `n` items: `grid` int64[n, 3] (batched) and `scale` float32[2] (shared).
fn batch(n: usize, grid: &[u8], scale: &[u8]) -> MultiModalKwargsItems<'static> {
    let grid: &'static [u8] = Box::leak(grid.to_vec().into_boxed_slice());
    let scale: &'static [u8] = Box::leak(scale.to_vec().into_boxed_slice());
    let mut values = IndexMap::new();
    let grid = Tensor::new(Dtype::Int64, &[n as u64, 3], grid).expect("a tensor");
    values.insert("grid".to_string(), NestedTensors::Tensor(grid));
    let scale = Tensor::new(Dtype::Float32, &[2], scale).expect("a tensor");
    values.insert("scale".to_string(), NestedTensors::Tensor(scale));
    let mut config = IndexMap::new();
    config.insert("grid".to_string(), MultiModalFieldConfig::batched("image"));
    config.insert(
        "scale".to_string(),
        MultiModalFieldConfig::shared("image", n as u64),
    );
    MultiModalKwargsItems::from_hf_inputs(&values, &config).expect("items")
}

fn items(n: usize) -> MultiModalKwargsItems<'static> {
    let grid: Vec<u8> = (0..n as i64 * 3).flat_map(i64::to_le_bytes).collect();
    batch(n, &grid, &[0u8; 8])
}

/// The wire version of an encoded header and its body, as a reader at the body.
fn version_and_body(header: &[u8]) -> (i128, Reader<'_>) {
    let mut r = Reader::new(header);
    assert_eq!(r.array().unwrap(), 8);
    r.str().unwrap();
    let version = r.int().unwrap();
    for _ in 0..5 {
        r.skip().unwrap();
    }
    (version, r)
}

/// The msgpack kind of the list of modality `image` in an encoded `MultiModalKwargsItems`.
fn image_list(header: &[u8]) -> (i128, Kind) {
    let (version, mut body) = version_and_body(header);
    assert_eq!(body.map().unwrap(), 1);
    assert_eq!(body.str().unwrap(), "image");
    (version, body.peek_kind().unwrap())
}

#[test]
fn items_that_share_their_keys_travel_as_a_column_list_in_wire_version_3() {
    let value = items(MIN_ITEMS);
    let frames = mmcodec::encode(&value).unwrap();
    assert_eq!(image_list(frames.header()), (3, Kind::Map));
    let back: MultiModalKwargsItems = mmcodec::decode(&frames.slices()).unwrap();
    assert_eq!(back, value);
    // The shared element is still one object in every item, the batched field one per key.
    let list = &back["image"];
    let first = list[0].as_ref().unwrap();
    for item in list.iter().flatten() {
        assert!(Arc::ptr_eq(&item["scale"], &first["scale"]));
        assert!(Arc::ptr_eq(&item["grid"].field, &first["grid"].field));
    }
    assert!(!Arc::ptr_eq(
        &list[1].as_ref().unwrap()["grid"],
        &first["grid"]
    ));
}

#[test]
fn the_layout_is_the_specs_fields_column_for_new_elements_values_for_a_shared_one() {
    let n = MIN_ITEMS;
    let value = items(n);
    let frames = mmcodec::encode(&value).unwrap();
    let (_, mut r) = version_and_body(frames.header());
    r.map().unwrap();
    r.str().unwrap();
    assert_eq!(r.map().unwrap(), 4);
    assert_eq!(r.str().unwrap(), "count");
    assert_eq!(r.int().unwrap(), n as i128);
    assert_eq!(r.str().unwrap(), "keys");
    assert_eq!(r.array().unwrap(), 2);
    assert_eq!((r.str().unwrap(), r.str().unwrap()), ("grid", "scale"));
    assert_eq!(r.str().unwrap(), "columns");
    assert_eq!(r.array().unwrap(), 2);
    // grid: [1, [tensor refs 0..n], [[0, false], 0, ...]]: a fields column, the one
    // BatchedField in full at the first item and by its index at the others.
    assert_eq!((r.array().unwrap(), r.int().unwrap()), (3, 1));
    assert_eq!(r.array().unwrap(), n);
    let refs: Vec<i128> = (0..n).map(|_| r.int().unwrap()).collect();
    assert_eq!(refs, (0..n as i128).collect::<Vec<_>>());
    assert_eq!(r.array().unwrap(), n);
    assert_eq!((r.array().unwrap(), r.int().unwrap()), (2, 0));
    assert!(!r.bool().unwrap());
    let rest: Vec<i128> = (1..n).map(|_| r.int().unwrap()).collect();
    assert_eq!(rest, vec![0; n - 1]);
    // scale: [0, [[n, [2, n, false]], n, ...]]: one element in every item, a values
    // column; it is element n (the grid's n come first), its field the second union value.
    assert_eq!((r.array().unwrap(), r.int().unwrap()), (2, 0));
    assert_eq!(r.array().unwrap(), n);
    assert_eq!((r.array().unwrap(), r.int().unwrap()), (2, n as i128));
    assert_eq!((r.array().unwrap(), r.int().unwrap()), (3, 2));
    assert_eq!(r.int().unwrap(), n as i128);
    assert!(!r.bool().unwrap());
    let rest: Vec<i128> = (1..n).map(|_| r.int().unwrap()).collect();
    assert_eq!(rest, vec![n as i128; n - 1]);
    assert_eq!(r.str().unwrap(), "absent");
    assert_eq!(r.array().unwrap(), 0);
    assert_eq!(r.remaining(), 0);
}

#[test]
fn absent_items_are_listed_and_come_back_as_none() {
    // Two of MIN_ITEMS + 2 absent: the fewest present items that make a column list.
    let mut value = items(MIN_ITEMS + 2);
    let list = value.get_mut("image").unwrap();
    list[0] = None;
    list[2] = None;
    let frames = mmcodec::encode(&value).unwrap();
    assert_eq!(image_list(frames.header()), (3, Kind::Map));
    let back: MultiModalKwargsItems = mmcodec::decode(&frames.slices()).unwrap();
    assert_eq!(back, value);
    assert!(back["image"][0].is_none() && back["image"][2].is_none());
}

#[test]
fn lists_that_make_no_column_list_stay_rows_in_wire_version_2() {
    let one = items(1);
    let mut nones = items(3);
    nones.insert("image".into(), vec![None; MIN_ITEMS]);
    let mut other_keys = items(MIN_ITEMS);
    let list = other_keys.get_mut("image").unwrap();
    let reordered: IndexMap<_, _> = list[1]
        .as_ref()
        .unwrap()
        .iter()
        .rev()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    list[1] = Some(MultiModalKwargsItem(reordered));
    let mut no_keys = items(2);
    no_keys.insert(
        "image".into(),
        vec![Some(MultiModalKwargsItem::default()); MIN_ITEMS],
    );
    for value in [one, nones, other_keys, no_keys] {
        let frames = mmcodec::encode(&value).unwrap();
        assert_eq!(image_list(frames.header()), (2, Kind::Array));
        let back: MultiModalKwargsItems = mmcodec::decode(&frames.slices()).unwrap();
        assert_eq!(back, value);
    }
}

#[test]
fn fifteen_present_items_stay_rows_and_sixteen_travel_as_columns() {
    // The Python encoder's threshold (mmcodec.runtime.columns.MIN_ITEMS), counted in
    // present items: `tests/rust/test_conformance.py` compares the bytes of both sides for
    // the corpus cases columns-15-present-rows and columns-16-present.
    assert_eq!(MIN_ITEMS, 16);
    let with_none = |n: usize| {
        let mut value = items(n);
        value.get_mut("image").unwrap()[1] = None;
        value
    };
    for (value, expected) in [
        (items(15), (2, Kind::Array)),
        (with_none(16), (2, Kind::Array)),
        (items(16), (3, Kind::Map)),
        (with_none(17), (3, Kind::Map)),
    ] {
        let frames = mmcodec::encode(&value).unwrap();
        assert_eq!(image_list(frames.header()), expected);
        let back: MultiModalKwargsItems = mmcodec::decode(&frames.slices()).unwrap();
        assert_eq!(back, value);
    }
}

#[test]
fn an_element_sent_before_makes_its_column_a_values_column() {
    // Two modalities holding the same elements: the second list refers back to them.
    let mut value = items(MIN_ITEMS);
    let list = value["image"].clone();
    value.insert("video".into(), list);
    let frames = mmcodec::encode(&value).unwrap();
    let back: MultiModalKwargsItems = mmcodec::decode(&frames.slices()).unwrap();
    assert_eq!(back, value);
    let (image, video) = (&back["image"], &back["video"]);
    assert!(Arc::ptr_eq(
        &image[1].as_ref().unwrap()["grid"],
        &video[1].as_ref().unwrap()["grid"]
    ));
}

// -- the decoder's checks --------------------------------------------------------------

/// A `MultiModalKwargsItems` message (version 3) whose `image` list `list` writes.
fn message(list: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    write::array(&mut out, 8);
    write::str(&mut out, "mmc");
    write::uint(&mut out, 3);
    write::str(&mut out, "multimodal");
    write::uint(&mut out, 1);
    write::str(&mut out, "MultiModalKwargsItems");
    write::array(&mut out, 0);
    write::array(&mut out, 0);
    write::map(&mut out, 1);
    write::str(&mut out, "image");
    list(&mut out);
    out
}

/// `[[None, [0, false]], 0, ...]`: a values column of `n` items, one element.
fn values_column(out: &mut Vec<u8>, n: usize) {
    write::array(out, 2);
    write::uint(out, 0);
    write::array(out, n);
    for i in 0..n {
        if i == 0 {
            elem(out);
        } else {
            write::uint(out, 0);
        }
    }
}

fn elem(out: &mut Vec<u8>) {
    write::array(out, 2);
    write::nil(out);
    write::array(out, 2);
    write::uint(out, 0);
    write::bool(out, false);
}

/// `{count, keys, columns, absent}`, the columns written by `columns`.
fn column_list(
    out: &mut Vec<u8>,
    count: u64,
    keys: &[&str],
    columns: impl Fn(&mut Vec<u8>),
    absent: &[u64],
) {
    write::map(out, 4);
    write::str(out, "count");
    write::uint(out, count);
    write::str(out, "keys");
    write::array(out, keys.len());
    keys.iter().for_each(|k| write::str(out, k));
    write::str(out, "columns");
    columns(out);
    write::str(out, "absent");
    write::array(out, absent.len());
    absent.iter().for_each(|&a| write::uint(out, a));
}

fn refused(header: &[u8]) -> String {
    refused_with(header, &Limits::DEFAULT)
}

fn refused_with(header: &[u8], limits: &Limits) -> String {
    mmcodec::decode_with::<MultiModalKwargsItems>(&[header], limits)
        .map(drop)
        .unwrap_err()
        .to_string()
}

fn one_values_column(n: usize) -> impl Fn(&mut Vec<u8>) {
    move |out: &mut Vec<u8>| {
        write::array(out, 1);
        values_column(out, n);
    }
}

#[test]
fn a_hand_written_column_list_decodes_to_its_items() {
    let header = message(|out| column_list(out, 3, &["k"], one_values_column(2), &[1]));
    let back: MultiModalKwargsItems = mmcodec::decode(&[&header]).unwrap();
    let list = &back["image"];
    assert_eq!(list.len(), 3);
    assert!(list[1].is_none());
    let elem = MultiModalFieldElem {
        data: None,
        field: Arc::new(BaseMultiModalField::BatchedField(BatchedField::default())),
    };
    assert_eq!(*list[0].as_ref().unwrap()["k"], elem);
    assert!(Arc::ptr_eq(
        &list[0].as_ref().unwrap()["k"],
        &list[2].as_ref().unwrap()["k"]
    ));
}

#[test]
fn the_decoder_refuses_what_the_python_decoder_refuses_with_its_path_and_message() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            message(|out| column_list(out, 2, &[], |o| write::array(o, 0), &[])),
            "$['image']: a column list has no keys",
        ),
        (
            message(|out| column_list(out, 2, &["k", "j"], one_values_column(2), &[])),
            "$['image']: a column list of 2 keys holds 1 columns",
        ),
        (
            message(|out| {
                column_list(
                    out,
                    2,
                    &["k", "k"],
                    |o| {
                        write::array(o, 2);
                        values_column(o, 2);
                        values_column(o, 2);
                    },
                    &[],
                )
            }),
            "$['image']: a column list names a key twice",
        ),
        (
            message(|out| column_list(out, 3, &["k"], one_values_column(1), &[2, 1])),
            "$['image']: absent item positions must increase and lie below the count (3)",
        ),
        (
            message(|out| column_list(out, 2, &["k"], one_values_column(1), &[2])),
            "$['image']: absent item positions must increase and lie below the count (2)",
        ),
        (
            message(|out| column_list(out, 1, &["k"], one_values_column(0), &[0])),
            "$['image']: a column list has no present item",
        ),
        (
            message(|out| column_list(out, 3, &["k"], one_values_column(2), &[])),
            "$['image']['k']: a column holds 2 values for 3 present items",
        ),
        (
            message(|out| {
                column_list(
                    out,
                    2,
                    &["k"],
                    |o| {
                        write::array(o, 1);
                        write::array(o, 2);
                        write::uint(o, 7);
                        write::array(o, 0);
                    },
                    &[],
                )
            }),
            "$['image']['k'].<tag>: Invalid value 7",
        ),
        (
            // A fields column: data [None, None], field [[0, false], 5]: element 1
            // refers to a field variant never sent.
            message(|out| {
                column_list(
                    out,
                    2,
                    &["k"],
                    |o| {
                        write::array(o, 1);
                        write::array(o, 3);
                        write::uint(o, 1);
                        write::array(o, 2);
                        write::nil(o);
                        write::nil(o);
                        write::array(o, 2);
                        write::array(o, 2);
                        write::uint(o, 0);
                        write::bool(o, false);
                        write::uint(o, 5);
                    },
                    &[],
                )
            }),
            "$['image'][1]['k'].field: back-reference to BaseMultiModalField value 5, but 1 \
             were sent",
        ),
        (
            message(|out| {
                column_list(
                    out,
                    3,
                    &["k"],
                    |o| {
                        write::array(o, 1);
                        write::array(o, 3);
                        write::uint(o, 1);
                        write::array(o, 3);
                        (0..3).for_each(|_| write::nil(o));
                        write::array(o, 2);
                        write::array(o, 2);
                        write::uint(o, 0);
                        write::bool(o, false);
                        write::uint(o, 0);
                    },
                    &[],
                )
            }),
            "$['image']['k'].field: a column holds 2 values for 3 present items",
        ),
        (
            // A value of a values column: the path rows give it (position 2, absent 1).
            message(|out| {
                column_list(
                    out,
                    3,
                    &["k"],
                    |o| {
                        write::array(o, 1);
                        write::array(o, 2);
                        write::uint(o, 0);
                        write::array(o, 2);
                        elem(o);
                        write::uint(o, 9);
                    },
                    &[1],
                )
            }),
            "$['image'][2]['k']: back-reference to MultiModalFieldElem value 9, but 1 were \
             sent",
        ),
        (
            message(|out| {
                write::map(out, 1);
                write::str(out, "count");
                write::uint(out, 2);
            }),
            "$['image']: Object missing required field `keys`",
        ),
        (
            message(|out| {
                write::map(out, 1);
                write::str(out, "rows");
                write::uint(out, 2);
            }),
            "$['image']: Object contains unknown field `rows`",
        ),
        (
            message(|out| write::uint(out, 2)),
            "$['image']: Expected `object | array`, got `int`",
        ),
    ];
    for (header, expected) in cases {
        assert_eq!(refused(&header), expected);
    }
}

#[test]
fn a_column_list_is_held_to_the_limits() {
    let header = message(|out| column_list(out, 5, &["k"], one_values_column(5), &[]));
    let limits = Limits {
        max_elements: 4,
        ..Limits::DEFAULT
    };
    assert_eq!(
        refused_with(&header, &limits),
        "$['image']: 5 elements exceed the limit of 4"
    );
    // Keys copied into items: at most 64 bytes per byte of the header.
    let key = "k".repeat(4000);
    let header = message(|out| column_list(out, 100, &[&key], one_values_column(100), &[]));
    assert_eq!(
        refused(&header),
        format!(
            "$['image']: the keys of a column list (4000 bytes) copied into its 100 items take \
             more than 64 bytes per byte of the header ({})",
            header.len()
        )
    );
}

#[test]
fn wire_versions_2_and_3_are_read_and_no_other() {
    let rows = mmcodec::encode(&items(1)).unwrap();
    assert_eq!(image_list(rows.header()), (2, Kind::Array));
    mmcodec::decode::<MultiModalKwargsItems>(&rows.slices()).unwrap();
    let mut header = message(|out| column_list(out, 2, &["k"], one_values_column(2), &[]));
    header[5] = 4; // the version, after [array head, "mmc"]
    assert_eq!(
        refused(&header),
        "$: wire format version 4 is not supported (this decoder reads versions 2 to 3)"
    );
}

// -- the encoder's refusals ------------------------------------------------------------

/// MIN_ITEMS items of keys `a` and `b`, each element its own batched field over
/// `data(item, key)`.
fn column_items(
    data: impl Fn(usize, &str) -> NestedTensors<'static>,
) -> MultiModalKwargsItems<'static> {
    let field = Arc::new(BaseMultiModalField::BatchedField(BatchedField::default()));
    let item = |i: usize| {
        let mut entries = IndexMap::new();
        for key in ["a", "b"] {
            let elem = MultiModalFieldElem {
                data: Some(data(i, key)),
                field: field.clone(),
            };
            entries.insert(key.to_string(), Arc::new(elem));
        }
        Some(MultiModalKwargsItem(entries))
    };
    let mut items = MultiModalKwargsItems::default();
    items.insert("image".into(), (0..MIN_ITEMS).map(item).collect());
    items
}

fn encode_error(value: &MultiModalKwargsItems<'_>, limits: Limits) -> String {
    let options = mmcodec::EncodeOptions {
        limits,
        ..Default::default()
    };
    mmcodec::encode_with(value, &options)
        .unwrap_err()
        .to_string()
}

static BYTES: [u8; 16 * MIN_ITEMS] = [0; 16 * MIN_ITEMS];

fn tensor(i: usize) -> NestedTensors<'static> {
    NestedTensors::Tensor(Tensor::new(Dtype::Int64, &[1], &BYTES[8 * i..8 * i + 8]).unwrap())
}

#[test]
fn a_refused_value_is_named_where_rows_meet_it_first() {
    // Item 0's `b` and item 1's `a` nest too deep: rows meet item 0's first (columns, key
    // by key, would meet item 1's), as the Python encoder reports it.
    let value = column_items(|i, key| {
        let deep = (i, key) == (0, "b") || (i, key) == (1, "a");
        let leaf = tensor(2 * i + usize::from(key == "b"));
        if deep {
            NestedTensors::List(vec![NestedTensors::List(vec![leaf])])
        } else {
            leaf
        }
    });
    let limits = Limits {
        max_depth: 1,
        ..Limits::DEFAULT
    };
    assert_eq!(
        encode_error(&value, limits),
        "$['image'][0]['b'].data[0]: nested tensors deeper than 1 levels"
    );
}

#[test]
fn a_refused_tensor_is_named_where_columns_meet_it() {
    // One tensor too many: the Python encoder finds it among the tensors in the order the
    // message meets them, key by key in a column list.
    let value = column_items(|i, key| tensor(2 * i + usize::from(key == "b")));
    let limits = Limits {
        max_tensors: 1,
        ..Limits::DEFAULT
    };
    assert_eq!(
        encode_error(&value, limits),
        "$['image'][1]['a'].data: a message of more than 1 tensors exceeds the receiver's \
         limit (max_tensors)"
    );
}
