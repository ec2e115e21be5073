//! Building items the way engines build them: a processor's batch (`key -> nested
//! tensors`) split into per-item elements by each key's field config, exactly as
//! `MultiModalFieldConfig` and `MultiModalKwargsItems.from_hf_inputs` do on the Python
//! side (`mmcodec.domain.multimodal`, vLLM's `vllm.multimodal.inputs`).
//!
//! Elements are views of the batch's memory, never copies: a batched field's items are
//! rows of the batch tensor, a flat field's are slices along dim 0. The field of a key is
//! one `Arc` that every element shares, and a shared field's element is one `Arc` that
//! every item holds, so both travel once, and the message is byte for byte the one the
//! Python side encodes from the same batch.

use std::fmt;
use std::sync::Arc;

use mmcodec::{IndexMap, NestedTensors, Slice, Tensor};

use crate::{
    BaseMultiModalField, BatchedField, FlatField, FlatSlice, MultiModalFieldElem,
    MultiModalKwargsItem, MultiModalKwargsItems, SharedField,
};

/// Why a batch cannot be split into items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

fn error<T>(message: impl Into<String>) -> Result<T, BuildError> {
    Err(BuildError(message.into()))
}

/// A processor's declaration of one key: its field variant and its modality.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiModalFieldConfig {
    pub field: Arc<BaseMultiModalField>,
    pub modality: String,
}

impl MultiModalFieldConfig {
    /// Item `i` is `batch[i]`.
    pub fn batched(modality: &str) -> Self {
        let field = BaseMultiModalField::BatchedField(BatchedField { keep_on_cpu: false });
        Self::new(field, modality)
    }

    /// Item `i` is `batch[slices[i]]`.
    pub fn flat(modality: &str, slices: Vec<FlatSlice>, dim: u64) -> Self {
        let slices = slices.into_iter().map(Arc::new).collect();
        let field = FlatField {
            slices,
            dim,
            keep_on_cpu: false,
        };
        Self::new(BaseMultiModalField::FlatField(field), modality)
    }

    /// Item `i` spans `sizes[i]` consecutive indices of `dim`: `slice(start, stop)` for
    /// dim 0, else `(slice(None),) * dim + (slice(start, stop),)`, as Python builds them.
    pub fn flat_from_sizes(modality: &str, sizes: &[u64], dim: u64) -> Self {
        let mut start: i64 = 0;
        let mut slices = Vec::with_capacity(sizes.len());
        for &size in sizes {
            let stop = start + size as i64;
            let slice = Slice::new(start, stop);
            slices.push(if dim == 0 {
                FlatSlice::Slice(slice)
            } else {
                let mut parts = vec![Slice::full(); dim as usize];
                parts.push(slice);
                FlatSlice::TupleSliceEtc(parts)
            });
            start = stop;
        }
        Self::flat(modality, slices, dim)
    }

    /// Each of the `batch_size` items holds the whole batch value.
    pub fn shared(modality: &str, batch_size: u64) -> Self {
        let field = SharedField {
            batch_size,
            keep_on_cpu: false,
        };
        Self::new(BaseMultiModalField::SharedField(field), modality)
    }

    /// The same config with the field's `keep_on_cpu` set.
    pub fn keep_on_cpu(self, keep: bool) -> Self {
        let mut field = (*self.field).clone();
        match &mut field {
            BaseMultiModalField::BatchedField(f) => f.keep_on_cpu = keep,
            BaseMultiModalField::FlatField(f) => f.keep_on_cpu = keep,
            BaseMultiModalField::SharedField(f) => f.keep_on_cpu = keep,
        }
        Self::new(field, &self.modality)
    }

    fn new(field: BaseMultiModalField, modality: &str) -> Self {
        MultiModalFieldConfig {
            field: Arc::new(field),
            modality: modality.to_string(),
        }
    }

    /// One element per item of a batch value, each carrying this config's field.
    pub fn build_elems<'a>(
        &self,
        data: &NestedTensors<'a>,
    ) -> Result<Vec<Arc<MultiModalFieldElem<'a>>>, BuildError> {
        let elem = |data| {
            Arc::new(MultiModalFieldElem {
                data: Some(data),
                field: self.field.clone(),
            })
        };
        Ok(match &*self.field {
            BaseMultiModalField::BatchedField(_) => {
                batched_pieces(data)?.into_iter().map(elem).collect()
            }
            BaseMultiModalField::FlatField(field) => {
                let mut out = Vec::with_capacity(field.slices.len());
                for slice in &field.slices {
                    out.push(elem(flat_piece(data, slice)?));
                }
                out
            }
            // One element object in every item, as vLLM's shared field builds them: it
            // travels once.
            BaseMultiModalField::SharedField(field) => {
                vec![elem(data.clone()); field.batch_size as usize]
            }
        })
    }
}

fn batched_pieces<'a>(data: &NestedTensors<'a>) -> Result<Vec<NestedTensors<'a>>, BuildError> {
    match data {
        NestedTensors::Tensor(t) if t.ndim() == 0 => {
            error("a batched field needs a tensor with at least one dimension")
        }
        NestedTensors::Tensor(t) => Ok(t.unbind().into_iter().map(NestedTensors::Tensor).collect()),
        NestedTensors::List(items) | NestedTensors::Tuple(items) => Ok(items.clone()),
        _ => error("a batched field needs a tensor, list or tuple"),
    }
}

/// `start..stop` of a dimension of `len` that `slice` selects (step 1 only).
fn range(slice: &Slice, len: u64) -> Result<(u64, u64), BuildError> {
    if slice.step.is_some_and(|step| step != 1) {
        return error("a flat field's slices must have step 1 to select a view");
    }
    let clamp = |bound: Option<i64>, default: u64| -> u64 {
        match bound {
            None => default,
            Some(b) if b < 0 => len.saturating_sub(b.unsigned_abs()),
            Some(b) => (b as u64).min(len),
        }
    };
    let (start, stop) = (clamp(slice.start, 0), clamp(slice.stop, len));
    Ok((start, stop.max(start)))
}

fn flat_piece<'a>(
    data: &NestedTensors<'a>,
    slice: &FlatSlice,
) -> Result<NestedTensors<'a>, BuildError> {
    match data {
        NestedTensors::Tensor(t) => flat_tensor(t, slice).map(NestedTensors::Tensor),
        NestedTensors::List(items) | NestedTensors::Tuple(items) => {
            let FlatSlice::Slice(slice) = slice else {
                return error("a flat field over a list or tuple needs plain slices");
            };
            let (start, stop) = range(slice, items.len() as u64)?;
            let part = items[start as usize..stop as usize].to_vec();
            Ok(match data {
                NestedTensors::Tuple(_) => NestedTensors::Tuple(part),
                _ => NestedTensors::List(part),
            })
        }
        _ => error("a flat field needs a tensor, list or tuple"),
    }
}

/// `t[slice]`: a view when the selected bytes are contiguous (a slice along dim 0, or one
/// along a later dim whose leading dims hold one index each).
fn flat_tensor<'a>(t: &Tensor<'a>, slice: &FlatSlice) -> Result<Tensor<'a>, BuildError> {
    let parts: &[Slice] = match slice {
        FlatSlice::Slice(s) => std::slice::from_ref(s),
        FlatSlice::TupleSliceEtc(parts) | FlatSlice::ListSlice(parts) => parts,
    };
    let Some((last, leading)) = parts.split_last() else {
        return Ok(t.clone());
    };
    let shape = t.shape();
    if parts.len() > shape.len() {
        return error(format!(
            "{} slices index a tensor of {} dimensions",
            parts.len(),
            shape.len()
        ));
    }
    for (index, part) in leading.iter().enumerate() {
        if range(part, shape[index])? != (0, shape[index]) || shape[index] != 1 {
            return error(format!(
                "slicing dim {} of a {:?} tensor selects bytes that are not contiguous: lay the \
                 batch out with the flat dim first, or build the elements yourself",
                leading.len(),
                shape
            ));
        }
    }
    let axis = leading.len();
    let (start, stop) = range(last, shape[axis])?;
    // Leading dims of size 1: selecting along `axis` is selecting rows of the view that
    // merges them with it.
    let merged: Vec<u64> = shape[axis..].to_vec();
    let view = Tensor::view(t.dtype(), &merged, t.storage(), t.offset())
        .map_err(|e| BuildError(e.to_string()))?;
    let rows = view
        .narrow(start, stop)
        .ok_or_else(|| BuildError("slice out of range".into()))?;
    let mut out_shape = shape[..axis].to_vec();
    out_shape.extend_from_slice(rows.shape());
    Tensor::view(t.dtype(), &out_shape, t.storage(), rows.offset())
        .map_err(|e| BuildError(e.to_string()))
}

impl<'a> MultiModalKwargsItems<'a> {
    /// Split a processor's batch into items, grouped by the modality of each key's config.
    ///
    /// As vLLM does: keys without a config and keys that yield no elements are skipped;
    /// modalities and each item's keys follow the batch's key order; the keys of one
    /// modality must yield the same number of items.
    pub fn from_hf_inputs(
        batch: &IndexMap<String, NestedTensors<'a>>,
        config: &IndexMap<String, MultiModalFieldConfig>,
    ) -> Result<Self, BuildError> {
        let mut by_modality: IndexMap<&str, IndexMap<&str, Vec<Arc<MultiModalFieldElem<'a>>>>> =
            IndexMap::new();
        for (key, value) in batch {
            let Some(field_config) = config.get(key) else {
                continue;
            };
            let elems = field_config.build_elems(value)?;
            if !elems.is_empty() {
                by_modality
                    .entry(&field_config.modality)
                    .or_default()
                    .insert(key, elems);
            }
        }
        let mut out = MultiModalKwargsItems::default();
        for (modality, elems_by_key) in by_modality {
            let n_items = elems_by_key.values().next().map_or(0, Vec::len);
            if elems_by_key.values().any(|elems| elems.len() != n_items) {
                let counts: Vec<String> = elems_by_key
                    .iter()
                    .map(|(k, e)| format!("{k}: {}", e.len()))
                    .collect();
                return error(format!(
                    "keys of modality {modality:?} yield different numbers of items: {}",
                    counts.join(", ")
                ));
            }
            let items = (0..n_items)
                .map(|i| {
                    let entries = elems_by_key
                        .iter()
                        .map(|(key, elems)| (key.to_string(), elems[i].clone()));
                    Some(MultiModalKwargsItem(entries.collect()))
                })
                .collect();
            out.insert(modality.to_string(), items);
        }
        Ok(out)
    }
}
