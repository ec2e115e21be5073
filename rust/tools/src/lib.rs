//! Shared by the tools the Python side drives: a canonical JSON description of decoded
//! values (what `tests/rust/describe.py` writes for Python's values), a checksum of tensor
//! bytes both sides compute fast, and a table of every root type the tools know.
#![forbid(unsafe_code)]

use std::fmt::Write;

use mmcodec::{NestedTensors, Slice, Tensor};
use mmcodec_multimodal as mm;

/// A position-sensitive checksum of bytes: the wrapping sum of each little-endian u64
/// word times an odd weight (2i + 1), the last word zero-padded. numpy computes the same
/// in one pass (`tests/rust/describe.py`).
pub fn digest(bytes: &[u8]) -> u64 {
    let mut sum: u64 = 0;
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        let weight = (2 * i as u64).wrapping_add(1);
        sum = sum.wrapping_add(u64::from_le_bytes(word).wrapping_mul(weight));
    }
    sum
}

/// A JSON string literal.
pub fn json_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn list<T>(items: impl IntoIterator<Item = T>, f: impl Fn(T) -> String) -> String {
    let parts: Vec<String> = items.into_iter().map(f).collect();
    format!("[{}]", parts.join(","))
}

fn opt<T>(value: Option<T>, f: impl Fn(T) -> String) -> String {
    value.map_or_else(|| "null".to_string(), f)
}

/// Describes values; tensors say where their bytes lie relative to `base` (the input
/// buffer), so the caller can check that nothing was copied.
pub struct Describer<'b> {
    pub base: &'b [u8],
}

impl Describer<'_> {
    pub fn tensor(&self, t: &Tensor<'_>) -> String {
        let start = self.base.as_ptr() as usize;
        let address = t.data().as_ptr() as usize;
        let inside = address >= start && address + t.nbytes() <= start + self.base.len();
        let offset = if inside && t.nbytes() > 0 {
            (address - start).to_string()
        } else {
            "null".into()
        };
        format!(
            "{{\"dtype\":{},\"shape\":{},\"nbytes\":{},\"digest\":\"{:016x}\",\"offset\":{}}}",
            json_str(t.dtype().name()),
            list(t.shape(), |d| d.to_string()),
            t.nbytes(),
            digest(t.data()),
            offset
        )
    }

    pub fn nested(&self, n: &NestedTensors<'_>) -> String {
        match n {
            NestedTensors::Tensor(t) => format!("{{\"tensor\":{}}}", self.tensor(t)),
            NestedTensors::Int(i) => format!("{{\"int\":{i}}}"),
            NestedTensors::Float(f) => format!("{{\"float\":\"{:016x}\"}}", f.to_bits()),
            NestedTensors::List(items) => {
                format!("{{\"list\":{}}}", list(items, |i| self.nested(i)))
            }
            NestedTensors::Tuple(items) => {
                format!("{{\"tuple\":{}}}", list(items, |i| self.nested(i)))
            }
        }
    }

    fn slice(s: &Slice) -> String {
        list([s.start, s.stop, s.step], |b| opt(b, |v| v.to_string()))
    }

    pub fn field(&self, f: &mm::BaseMultiModalField) -> String {
        match f {
            mm::BaseMultiModalField::BatchedField(b) => {
                format!("{{\"batched\":{{\"keep_on_cpu\":{}}}}}", b.keep_on_cpu)
            }
            mm::BaseMultiModalField::FlatField(flat) => {
                let slices = list(&flat.slices, |s| match &**s {
                    mm::FlatSlice::Slice(s) => format!("{{\"slice\":{}}}", Self::slice(s)),
                    mm::FlatSlice::TupleSliceEtc(p) => {
                        format!("{{\"tuple\":{}}}", list(p, Self::slice))
                    }
                    mm::FlatSlice::ListSlice(p) => format!("{{\"list\":{}}}", list(p, Self::slice)),
                });
                format!(
                    "{{\"flat\":{{\"slices\":{slices},\"dim\":{},\"keep_on_cpu\":{}}}}}",
                    flat.dim, flat.keep_on_cpu
                )
            }
            mm::BaseMultiModalField::SharedField(s) => format!(
                "{{\"shared\":{{\"batch_size\":{},\"keep_on_cpu\":{}}}}}",
                s.batch_size, s.keep_on_cpu
            ),
        }
    }

    pub fn elem(&self, e: &mm::MultiModalFieldElem<'_>) -> String {
        format!(
            "{{\"data\":{},\"field\":{}}}",
            opt(e.data.as_ref(), |d| self.nested(d)),
            self.field(&e.field)
        )
    }

    pub fn item(&self, item: &mm::MultiModalKwargsItem<'_>) -> String {
        list(item.iter(), |(k, e)| {
            format!("[{},{}]", json_str(k), self.elem(e))
        })
    }

    pub fn items(&self, items: &mm::MultiModalKwargsItems<'_>) -> String {
        list(items.iter(), |(m, list_)| {
            format!(
                "[{},{}]",
                json_str(m),
                list(list_, |i| opt(i.as_ref(), |i| self.item(i)))
            )
        })
    }

    pub fn range(&self, r: &mm::PlaceholderRange<'_>) -> String {
        format!(
            "{{\"offset\":{},\"length\":{},\"is_embed\":{}}}",
            r.offset,
            r.length,
            opt(r.is_embed.as_ref(), |t| self.tensor(t))
        )
    }

    pub fn spec(&self, s: &mm::MultiModalFeatureSpec<'_>) -> String {
        format!(
            "{{\"data\":{},\"modality\":{},\"identifier\":{},\"mm_position\":{},\"mm_hash\":{}}}",
            opt(s.data.as_ref(), |i| self.item(i)),
            json_str(&s.modality),
            json_str(&s.identifier),
            self.range(&s.mm_position),
            opt(s.mm_hash.as_ref(), |h| json_str(h))
        )
    }
}

/// Run `$body` with `$T` bound to the root type named `$name` (`schema.Type`); a name no
/// schema has is an `Err`.
#[macro_export]
macro_rules! with_type {
    ($name:expr, $T:ident => $body:expr) => {{
        use mmcodec_golden::{bound, common, enums, features};
        use mmcodec_multimodal as mm;
        match $name {
            "multimodal.BatchedField" => {
                type $T<'a> = mm::BatchedField;
                $body
            }
            "multimodal.FlatSlice" => {
                type $T<'a> = mm::FlatSlice;
                $body
            }
            "multimodal.FlatField" => {
                type $T<'a> = mm::FlatField;
                $body
            }
            "multimodal.SharedField" => {
                type $T<'a> = mm::SharedField;
                $body
            }
            "multimodal.BaseMultiModalField" => {
                type $T<'a> = mm::BaseMultiModalField;
                $body
            }
            "multimodal.MultiModalFieldElem" => {
                type $T<'a> = mm::MultiModalFieldElem<'a>;
                $body
            }
            "multimodal.MultiModalKwargsItem" => {
                type $T<'a> = mm::MultiModalKwargsItem<'a>;
                $body
            }
            "multimodal.MultiModalKwargsItems" => {
                type $T<'a> = mm::MultiModalKwargsItems<'a>;
                $body
            }
            "multimodal.PlaceholderRange" => {
                type $T<'a> = mm::PlaceholderRange<'a>;
                $body
            }
            "multimodal.MultiModalFeatureSpec" => {
                type $T<'a> = mm::MultiModalFeatureSpec<'a>;
                $body
            }
            "common.Point" => {
                type $T<'a> = common::Point;
                $body
            }
            "common.Labels" => {
                type $T<'a> = common::Labels;
                $body
            }
            "common.Shape" => {
                type $T<'a> = common::Shape;
                $body
            }
            "common.Circle" => {
                type $T<'a> = common::Circle;
                $body
            }
            "bound.Point" => {
                type $T<'a> = bound::Point;
                $body
            }
            "bound.Circle" => {
                type $T<'a> = bound::Circle;
                $body
            }
            "bound.Polygon" => {
                type $T<'a> = bound::Polygon<'a>;
                $body
            }
            "bound.Shape" => {
                type $T<'a> = bound::Shape<'a>;
                $body
            }
            "bound.Catalog" => {
                type $T<'a> = bound::Catalog<'a>;
                $body
            }
            "bound.Scene" => {
                type $T<'a> = bound::Scene<'a>;
                $body
            }
            "features.Defaults" => {
                type $T<'a> = features::Defaults<'a>;
                $body
            }
            "features.Constrained" => {
                type $T<'a> = features::Constrained<'a>;
                $body
            }
            "features.Containers" => {
                type $T<'a> = features::Containers;
                $body
            }
            "features.Point2" => {
                type $T<'a> = features::Point2;
                $body
            }
            "features.Builtins" => {
                type $T<'a> = features::Builtins<'a>;
                $body
            }
            "features.Empty" => {
                type $T<'a> = features::Empty;
                $body
            }
            "features.Sample" => {
                type $T<'a> = features::Sample;
                $body
            }
            "features.Value" => {
                type $T<'a> = features::Value<'a>;
                $body
            }
            "features.Reading" => {
                type $T<'a> = features::Reading;
                $body
            }
            "features.Event" => {
                type $T<'a> = features::Event;
                $body
            }
            "features.Click" => {
                type $T<'a> = features::Click;
                $body
            }
            "features.Key" => {
                type $T<'a> = features::Key;
                $body
            }
            "features.Registry" => {
                type $T<'a> = features::Registry<'a>;
                $body
            }
            "features.IntIndex" => {
                type $T<'a> = features::IntIndex;
                $body
            }
            "features.Node" => {
                type $T<'a> = features::Node;
                $body
            }
            "features.Expr" => {
                type $T<'a> = features::Expr;
                $body
            }
            "features.Lit" => {
                type $T<'a> = features::Lit;
                $body
            }
            "features.Add" => {
                type $T<'a> = features::Add;
                $body
            }
            "features.Neg" => {
                type $T<'a> = features::Neg;
                $body
            }
            "features.Drawing" => {
                type $T<'a> = features::Drawing;
                $body
            }
            "features.Cell" => {
                type $T<'a> = features::Cell<'a>;
                $body
            }
            "features.CellRow" => {
                type $T<'a> = features::CellRow<'a>;
                $body
            }
            "features.CellTable" => {
                type $T<'a> = features::CellTable<'a>;
                $body
            }
            "common.Unit" => {
                type $T<'a> = common::Unit;
                $body
            }
            "enums.Modality" => {
                type $T<'a> = enums::Modality;
                $body
            }
            "enums.Level" => {
                type $T<'a> = enums::Level;
                $body
            }
            "enums.Priority" => {
                type $T<'a> = enums::Priority;
                $body
            }
            "enums.Item" => {
                type $T<'a> = enums::Item;
                $body
            }
            "enums.Setting" => {
                type $T<'a> = enums::Setting;
                $body
            }
            "enums.LevelNames" => {
                type $T<'a> = enums::LevelNames;
                $body
            }
            other => Err(format!("no root type {other}")),
        }
    }};
}
