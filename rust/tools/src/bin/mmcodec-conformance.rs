//! What the Python conformance and hostile-input tests ask of the Rust side.
//!
//! ```text
//! mmcodec-conformance describe TYPE FILE       decode a capture file, print its value as JSON
//! mmcodec-conformance reencode TYPE IN OUT     decode IN, encode the value again into OUT
//! mmcodec-conformance build INPUTS OUT         build items from a batch (gateway-style), encode
//! mmcodec-conformance enums FOLDER             build the enum cases, one capture file each
//! mmcodec-conformance replay MANIFEST          decode every case a manifest lists, print results
//! mmcodec-conformance dtypes                   the dtype table, one `name itemsize` a line
//! ```
//!
//! TYPE is `schema.Type`; files hold a message as one buffer (the capture format, what
//! `encode_bytes` writes). Every result is one JSON line; a decode error is
//! `{"error": {"path": ..., "message": ...}}`.

use std::fs;
use std::process::ExitCode;

use mmcodec::msgpack::Reader;
use mmcodec::{framing, DecodeError, Dtype, IndexMap, Limits, Message, NestedTensors, Tensor};
use mmcodec_multimodal as mm;
use mmcodec_tools::{json_str, with_type, Describer};

fn error_json(e: &DecodeError) -> String {
    format!(
        "{{\"error\":{{\"path\":{},\"message\":{}}}}}",
        json_str(&e.path()),
        json_str(e.message())
    )
}

/// The frames of a capture file, bounded only by the file itself (a case may hold more
/// frames than the default limits allow: the decoder under test must see them).
fn frames_of(buffer: &[u8]) -> Result<Vec<&[u8]>, String> {
    let unbounded = Limits {
        max_frames: usize::MAX >> 8,
        max_total_bytes: u64::MAX,
        ..Limits::DEFAULT
    };
    framing::split(buffer, &unbounded).map_err(|e| format!("not a capture file: {e}"))
}

fn describe(name: &str, buffer: &[u8]) -> Result<String, String> {
    let frames = frames_of(buffer)?;
    let d = Describer { base: buffer };
    macro_rules! show {
        ($T:ty, $f:ident) => {
            match mmcodec::decode::<$T>(&frames) {
                Ok(value) => d.$f(&value),
                Err(e) => error_json(&e),
            }
        };
    }
    Ok(match name {
        "multimodal.MultiModalKwargsItems" => show!(mm::MultiModalKwargsItems, items),
        "multimodal.MultiModalKwargsItem" => show!(mm::MultiModalKwargsItem, item),
        "multimodal.MultiModalFeatureSpec" => show!(mm::MultiModalFeatureSpec, spec),
        "multimodal.MultiModalFieldElem" => show!(mm::MultiModalFieldElem, elem),
        "multimodal.PlaceholderRange" => show!(mm::PlaceholderRange, range),
        "multimodal.BaseMultiModalField" => show!(mm::BaseMultiModalField, field),
        other => return Err(format!("describe knows no {other}")),
    })
}

/// Decode and encode again: Ok(bytes) or the JSON of the decode error.
fn reencode<'a, M: Message<'a>>(frames: &[&'a [u8]]) -> Result<Vec<u8>, String> {
    let value: M = mmcodec::decode(frames).map_err(|e| error_json(&e))?;
    let again = mmcodec::encode(&value).map_err(|e| format!("encode failed: {e}"))?;
    Ok(again.to_bytes())
}

fn decode_only<'a, M: Message<'a>>(
    frames: &[&'a [u8]],
    limits: &Limits,
) -> Result<(), DecodeError> {
    mmcodec::decode_with::<M>(frames, limits).map(drop)
}

/// One line of a replay manifest: `name kind type max_frames max_total_bytes
/// max_header_bytes max_depth max_elements max_tensors max_ndim`; the case's bytes are in
/// `name` next to the manifest (`kind` is `frames`, a capture of the frames, or `buffer`,
/// the buffer given to decode_bytes).
fn replay(manifest: &str) -> Result<(), String> {
    let text = fs::read_to_string(manifest).map_err(|e| format!("{manifest}: {e}"))?;
    let folder = std::path::Path::new(manifest)
        .parent()
        .unwrap_or(std::path::Path::new("."));
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let words: Vec<&str> = line.split(' ').collect();
        let [name, kind, type_name, numbers @ ..] = &words[..] else {
            return Err(format!("bad manifest line {line:?}"));
        };
        let n: Vec<u64> = numbers
            .iter()
            .map(|w| w.parse().unwrap_or(u64::MAX))
            .collect();
        let [frames_, total, header, depth, elements, tensors, ndim] = n[..] else {
            return Err(format!("bad limits in {line:?}"));
        };
        let limits = Limits {
            max_frames: frames_ as usize,
            max_total_bytes: total,
            max_header_bytes: header as usize,
            max_depth: depth as usize,
            max_elements: elements as usize,
            max_tensors: tensors as usize,
            max_ndim: ndim as usize,
            ..Limits::DEFAULT
        };
        let bytes = fs::read(folder.join(name)).map_err(|e| format!("{name}: {e}"))?;
        let result = match *kind {
            "frames" => {
                let frames = frames_of(&bytes)?;
                with_type!(*type_name, T => Ok(decode_only::<T<'_>>(&frames, &limits)))?
            }
            "buffer" => with_type!(*type_name, T => Ok(
                framing::split(&bytes, &limits).and_then(|frames| decode_only::<T<'_>>(&frames, &limits))
            ))?,
            other => return Err(format!("bad kind {other}")),
        };
        let outcome = match result {
            Ok(()) => "{\"ok\":true}".to_string(),
            Err(e) => error_json(&e),
        };
        println!("{{\"case\":{},\"result\":{outcome}}}", json_str(name));
    }
    Ok(())
}

/// A batch value of `build`'s input: `["t", dtype, shape, bytes]` for a tensor (a view of
/// the input), `["l", items]` for a list, `["u", items]` for a tuple.
fn read_nested<'a>(r: &mut Reader<'a>) -> Result<NestedTensors<'a>, String> {
    let text = |e: DecodeError| e.to_string();
    r.array().map_err(text)?;
    match r.str().map_err(text)? {
        "t" => {
            let dtype = Dtype::from_name(r.str().map_err(text)?).ok_or("unknown dtype")?;
            let ndim = r.array().map_err(text)?;
            let mut shape = Vec::with_capacity(ndim);
            for _ in 0..ndim {
                shape.push(r.int().map_err(text)? as u64);
            }
            let data = r.bin().map_err(text)?;
            let tensor = Tensor::new(dtype, &shape, data).map_err(|e| e.to_string())?;
            Ok(NestedTensors::Tensor(tensor))
        }
        kind @ ("l" | "u") => {
            let n = r.array().map_err(text)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_nested(r)?);
            }
            Ok(if kind == "l" {
                NestedTensors::List(items)
            } else {
                NestedTensors::Tuple(items)
            })
        }
        other => Err(format!("unknown batch value kind {other}")),
    }
}

/// A batch as the Python side hands it over (`tests/rust/corpus.py`): a msgpack array of
/// `[key, modality, kind, params, value]` (`kind` is `batched`, `flat` with the items'
/// sizes, `shared` with the batch size). Items are built as a gateway builds them and
/// encoded into one buffer.
fn build(inputs: &[u8]) -> Result<Vec<u8>, String> {
    let mut r = Reader::new(inputs);
    let text = |e: DecodeError| e.to_string();
    let n = r.array().map_err(text)?;
    let mut batch = IndexMap::new();
    let mut config = IndexMap::new();
    for _ in 0..n {
        r.array().map_err(text)?;
        let key = r.str().map_err(text)?.to_string();
        let modality = r.str().map_err(text)?;
        let kind = r.str().map_err(text)?;
        let count = r.array().map_err(text)?;
        let mut params = Vec::with_capacity(count);
        for _ in 0..count {
            params.push(r.int().map_err(text)? as u64);
        }
        let field = match kind {
            "batched" => mm::MultiModalFieldConfig::batched(modality),
            "flat" => mm::MultiModalFieldConfig::flat_from_sizes(modality, &params, 0),
            "shared" => mm::MultiModalFieldConfig::shared(modality, params[0]),
            other => return Err(format!("unknown field kind {other}")),
        };
        batch.insert(key.clone(), read_nested(&mut r)?);
        config.insert(key, field);
    }
    let items =
        mm::MultiModalKwargsItems::from_hf_inputs(&batch, &config).map_err(|e| e.to_string())?;
    mmcodec::encode_bytes(&items).map_err(|e| e.to_string())
}

/// The values of the enum cases of `tests/codegen/test_enums.py` (`CASES`), built in Rust
/// from the generated types and written as capture files `FOLDER/<case>.mmcb`, for Python
/// to decode and compare with the values it builds.
fn enum_cases(folder: &str) -> Result<(), String> {
    use mmcodec_golden::common::Unit;
    use mmcodec_golden::enums::{Item, Level, LevelNames, Modality, Priority, Setting};

    let item = Item {
        modality: Modality::Audio,
        levels: vec![Level::Low, Level::Unset],
        by_modality: IndexMap::from_iter([(Modality::Video, 2), (Modality::Image, 1)]),
        pair: (Modality::Image, Level::High),
        priorities: vec![Priority::High, Priority::Low],
        maybe: None,
        mode: Modality::Image, // the schema's defaults, written out
        urgent: Some(Priority::High),
        unit: Unit::Pixel,
    };
    let changed = Item {
        maybe: Some(Level::High),
        mode: Modality::Video,
        urgent: None,
        ..item.clone()
    };
    let names = IndexMap::from_iter([(Level::Unset, "unset".into()), (Level::Low, "low".into())]);
    let cases = [
        ("item", mmcodec::encode_bytes(&changed)),
        ("item-defaults", mmcodec::encode_bytes(&item)),
        ("str-enum-root", mmcodec::encode_bytes(&Modality::Video)),
        ("int-enum-root", mmcodec::encode_bytes(&Level::Unset)),
        ("bound-enum-root", mmcodec::encode_bytes(&Priority::Low)),
        (
            "setting-level",
            mmcodec::encode_bytes(&Setting::Level(Level::High)),
        ),
        ("setting-int", mmcodec::encode_bytes(&Setting::Int(10))),
        (
            "setting-modality",
            mmcodec::encode_bytes(&Setting::Modality(Modality::Image)),
        ),
        ("mapping", mmcodec::encode_bytes(&LevelNames(names))),
    ];
    for (case, encoded) in cases {
        let path = format!("{folder}/{case}.mmcb");
        fs::write(&path, encoded.map_err(|e| e.to_string())?)
            .map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

fn run(args: &[String]) -> Result<(), String> {
    let read = |path: &str| fs::read(path).map_err(|e| format!("{path}: {e}"));
    match args {
        [command, type_name, file] if command == "describe" => {
            println!("{}", describe(type_name, &read(file)?)?);
        }
        [command, type_name, input, output] if command == "reencode" => {
            let bytes = read(input)?;
            let frames = frames_of(&bytes)?;
            match with_type!(type_name.as_str(), T => Ok(reencode::<T<'_>>(&frames)))? {
                Ok(again) => {
                    fs::write(output, again).map_err(|e| format!("{output}: {e}"))?;
                    println!("{{\"ok\":true}}");
                }
                Err(error) => println!("{error}"),
            }
        }
        [command, input, output] if command == "build" => {
            fs::write(output, build(&read(input)?)?).map_err(|e| format!("{output}: {e}"))?;
        }
        [command, manifest] if command == "replay" => replay(manifest)?,
        [command, folder] if command == "enums" => enum_cases(folder)?,
        [command] if command == "dtypes" => {
            for dtype in Dtype::ALL {
                println!("{} {}", dtype.name(), dtype.itemsize());
            }
        }
        _ => return Err("usage: see the module's documentation".into()),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mmcodec-conformance: {message}");
            ExitCode::from(2)
        }
    }
}
