//! The decoder's view of a header's tensor runs and reference table: every run checked
//! against the dtype table, the limits and the frames before any tensor is made, then
//! tensors made on demand as slices of the frames (or of the header, for inline payloads).
//!
//! A run is `[dtype, shape, data, offset, count]`: `count` tensors of one dtype and shape
//! laid back to back at `offset` in frame `data` (or inline, `data` being the bytes). The
//! body refers to tensors by number; the reference table maps numbers to positions among
//! the runs' tensors, and is empty when they coincide.

use std::sync::Arc;

use crate::dtype::Dtype;
use crate::error::DecodeError;
use crate::limits::Limits;
use crate::msgpack::{expected, Kind, Reader};
use crate::tensor::Tensor;

/// Offsets and sizes on the wire are signed 64-bit: nothing may reach 2**63.
const MAX_DIM: u128 = (1 << 63) - 1;

/// A run that passed every check: what making its tensors needs.
#[derive(Clone, Debug)]
struct Layout<'a> {
    dtype: Dtype,
    shape: Arc<[u64]>,
    count: usize,
    /// Bytes of one tensor.
    nbytes: usize,
    buffer: &'a [u8],
    offset: usize,
}

/// The first run that failed its checks, and the positions of the tensors it would hold.
#[derive(Clone, Debug)]
struct RunFailure {
    message: String,
    first: usize,
    last: usize,
}

/// A header's tensors: checked runs and the reference table.
#[derive(Debug)]
pub struct TensorTable<'a> {
    layouts: Vec<Layout<'a>>,
    /// Per run, the position of its first tensor.
    starts: Vec<usize>,
    total: usize,
    refs: Vec<usize>,
    failure: Option<RunFailure>,
}

/// An envelope entry's type error, worded as msgspec words it with the wire path.
fn malformed(error: DecodeError, path: &str) -> DecodeError {
    DecodeError::new(format!(
        "malformed envelope: {} - at `{path}`",
        error.message()
    ))
}

/// Read an array of at least `min` and at most `max` entries at `path`.
fn array_between(
    r: &mut Reader<'_>,
    min: usize,
    max: usize,
    path: &str,
) -> Result<usize, DecodeError> {
    let n = r.array().map_err(|e| malformed(e, path))?;
    if n < min {
        let text = format!("Expected `array` of at least length {min}, got {n}");
        return Err(malformed(DecodeError::new(text), path));
    }
    if n > max {
        let text = format!("Expected `array` of at most length {max}, got {n}");
        return Err(malformed(DecodeError::new(text), path));
    }
    Ok(n)
}

fn int_at(r: &mut Reader<'_>, path: impl FnOnce() -> String) -> Result<i128, DecodeError> {
    r.int().map_err(|e| malformed(e, &path()))
}

/// A run's entries as the wire holds them (types checked, values not yet).
struct RawRun<'a> {
    dtype: &'a str,
    ndim: usize,
    /// The shape, when it has at most `max_ndim` entries (the others are never looked at).
    dims: Vec<i128>,
    data: Data<'a>,
    offset: i128,
    count: i128,
}

enum Data<'a> {
    Frame(i128),
    Inline(&'a [u8]),
}

fn read_raw_run<'a>(
    r: &mut Reader<'a>,
    index: usize,
    max_ndim: usize,
) -> Result<RawRun<'a>, DecodeError> {
    let at = |suffix: &str| format!("$[5][{index}]{suffix}");
    let n = array_between(r, 3, 5, &at(""))?;
    let dtype = r.str().map_err(|e| malformed(e, &at("[0]")))?;
    let ndim = r.array().map_err(|e| malformed(e, &at("[1]")))?;
    let mut dims = Vec::new();
    for position in 0..ndim {
        let dim = int_at(r, || at(&format!("[1][{position}]")))?;
        if ndim <= max_ndim {
            dims.push(dim);
        }
    }
    let data = match r.peek_kind()? {
        Kind::Int => Data::Frame(r.int()?),
        Kind::Bin => Data::Inline(r.bin()?),
        kind => return Err(malformed(expected("int | bytes", kind), &at("[2]"))),
    };
    let offset = if n > 3 { int_at(r, || at("[3]"))? } else { 0 };
    let count = if n > 4 { int_at(r, || at("[4]"))? } else { 1 };
    Ok(RawRun {
        dtype,
        ndim,
        dims,
        data,
        offset,
        count,
    })
}

/// Check one run; on failure, the message and the tensor count the run claims.
fn check_run<'a>(
    run: &RawRun<'a>,
    frames: &[&'a [u8]],
    limits: &Limits,
    room: usize,
) -> Result<Layout<'a>, String> {
    let Some(dtype) = Dtype::from_name(run.dtype) else {
        return Err(format!(
            "unknown dtype {}",
            crate::error::python_repr(run.dtype)
        ));
    };
    let count = run.count;
    if count < 1 || count > room as i128 {
        return Err(format!(
            "tensor count {count} outside 1..{room} (a message holds at most max_tensors and \
             max_elements tensors, and one per byte of its header)"
        ));
    }
    if run.ndim > limits.max_ndim {
        return Err(format!(
            "{} dimensions exceed the limit of {}",
            run.ndim, limits.max_ndim
        ));
    }
    let mut nbytes = dtype.itemsize() as u128 * count as u128;
    let mut extent = nbytes; // the bytes without the zeros of the shape
    for &dim in &run.dims {
        if dim < 0 || dim as u128 > MAX_DIM {
            return Err(format!("shape entry {dim} is not a non-negative int64"));
        }
        nbytes = nbytes.saturating_mul(dim as u128);
        if dim != 0 {
            extent = extent.saturating_mul(dim as u128);
        }
    }
    if nbytes > MAX_DIM || (nbytes == 0 && extent > MAX_DIM) {
        return Err(format!(
            "shape {} of {dtype} spans 2**63 bytes or more",
            python_list(&run.dims)
        ));
    }
    let total_bytes = nbytes as usize; // below 2**63, and within a frame (checked below)
    let (buffer, offset) = match run.data {
        Data::Frame(index) => {
            if index < 1 || index >= frames.len() as i128 {
                return Err(format!(
                    "frame {index} out of range ({} frames)",
                    frames.len()
                ));
            }
            let buffer = frames[index as usize];
            let offset = run.offset;
            if offset < 0 || offset + nbytes as i128 > buffer.len() as i128 {
                return Err(format!(
                    "payload of {nbytes} bytes at offset {offset} overruns frame {index} ({} \
                     bytes)",
                    buffer.len()
                ));
            }
            (buffer, offset as usize)
        }
        Data::Inline(bytes) => {
            if run.offset != 0 || bytes.len() as u128 != nbytes {
                return Err(format!(
                    "inline payload holds {} bytes, shape {} of {dtype} needs {nbytes}",
                    bytes.len(),
                    python_list(&run.dims)
                ));
            }
            (bytes, 0)
        }
    };
    if dtype == Dtype::Bool && crate::dtype::non_boolean(&buffer[offset..offset + total_bytes]) {
        return Err("bool payload holds a byte other than 0 and 1".to_string());
    }
    let count = count as usize;
    let shape: Vec<u64> = run.dims.iter().map(|&d| d as u64).collect();
    Ok(Layout {
        dtype,
        shape: shape.into(),
        count,
        nbytes: total_bytes / count,
        buffer,
        offset,
    })
}

fn python_list(values: &[i128]) -> String {
    let items: Vec<String> = values.iter().map(i128::to_string).collect();
    format!("[{}]", items.join(", "))
}

impl<'a> TensorTable<'a> {
    /// Read the runs (`$[5]`) and the reference table (`$[6]`) of a header, checking
    /// every entry's type, every run against `frames` and `limits`, and that every payload
    /// frame is used. A run that fails its checks does not fail this call: the caller
    /// decodes the body to find which value uses it ([`TensorTable::failure`]).
    pub fn read(
        r: &mut Reader<'a>,
        frames: &[&'a [u8]],
        limits: &Limits,
    ) -> Result<TensorTable<'a>, DecodeError> {
        // Every tensor is referenced from the header by at least one byte, so a header of
        // n bytes holds at most n tensors: a few bytes cannot ask for a million empty ones.
        let header_len = frames.first().map_or(0, |f| f.len());
        let max_tensors = limits.max_tensors.min(limits.max_elements).min(header_len);
        let n_runs = r.array().map_err(|e| malformed(e, "$[5]"))?;
        let mut table = TensorTable {
            layouts: Vec::new(),
            starts: Vec::new(),
            total: 0,
            refs: Vec::new(),
            failure: None,
        };
        let mut frame_used = vec![false; frames.len()];
        for index in 0..n_runs {
            let run = read_raw_run(r, index, limits.max_ndim)?;
            if table.failure.is_some() {
                continue; // only the types of the remaining runs still matter
            }
            let room = max_tensors - table.total;
            match check_run(&run, frames, limits, room) {
                Ok(layout) => {
                    if let Data::Frame(frame) = run.data {
                        frame_used[frame as usize] = true;
                    }
                    table.starts.push(table.total);
                    table.total += layout.count;
                    table.layouts.push(layout);
                }
                Err(message) => {
                    let claims = run.count >= 1 && run.count <= room as i128;
                    table.failure = Some(RunFailure {
                        message: format!("{message} (tensor run {index})"),
                        first: table.total,
                        last: if claims {
                            table.total + run.count as usize - 1
                        } else {
                            usize::MAX
                        },
                    });
                }
            }
        }
        let n_refs = r.array().map_err(|e| malformed(e, "$[6]"))?;
        let keep = n_refs <= limits.max_elements;
        for position in 0..n_refs {
            let value = int_at(r, || format!("$[6][{position}]"))?;
            if keep {
                // Out of range values are reported by check_refs; keep them out of range.
                table
                    .refs
                    .push(usize::try_from(value).unwrap_or(usize::MAX));
            }
        }
        if table.failure.is_some() {
            return Ok(table);
        }
        if let Some(unused) = frame_used.iter().skip(1).position(|used| !used) {
            return Err(DecodeError::new(format!(
                "frame {} is not referenced by any tensor",
                unused + 1
            )));
        }
        if !keep {
            return Err(DecodeError::new(format!(
                "tensor reference table of {n_refs} entries exceeds the limit of {}",
                limits.max_elements
            )));
        }
        table.check_refs()?;
        Ok(table)
    }

    fn check_refs(&self) -> Result<(), DecodeError> {
        if self.refs.is_empty() {
            return Ok(());
        }
        let total = self.total;
        if let Some(&bad) = self.refs.iter().find(|&&r| r >= total) {
            let shown = if bad == usize::MAX {
                "out of range".to_string()
            } else {
                bad.to_string()
            };
            return Err(DecodeError::new(format!(
                "tensor reference table points at tensor {shown} ({total} tensors)"
            )));
        }
        let mut covered = vec![false; total];
        for &position in &self.refs {
            covered[position] = true;
        }
        if let Some(missing) = covered.iter().position(|c| !c) {
            return Err(DecodeError::new(format!(
                "no entry of the tensor reference table points at tensor {missing} (tensor run \
                 {})",
                self.run_of(missing)
            )));
        }
        Ok(())
    }

    fn run_of(&self, position: usize) -> usize {
        self.starts
            .partition_point(|&start| start <= position)
            .saturating_sub(1)
    }

    /// The message of a run that failed its checks, if one did: the body is then decoded
    /// only to find the first value that uses it.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_ref().map(|f| f.message.as_str())
    }

    /// The number of tensor references the body may use.
    pub fn len(&self) -> usize {
        if self.refs.is_empty() {
            self.total
        } else {
            self.refs.len()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tensor `reference` of the body: a view of its frame.
    pub fn tensor(&self, reference: u64) -> Result<Tensor<'a>, DecodeError> {
        if let Some(failure) = &self.failure {
            let position = match usize::try_from(reference) {
                Ok(r) if !self.refs.is_empty() => self.refs.get(r).copied().unwrap_or(r),
                Ok(r) => r,
                Err(_) => usize::MAX - 1,
            };
            if failure.first <= position && position <= failure.last {
                return Err(DecodeError::new(failure.message.clone()));
            }
            return Ok(placeholder());
        }
        let out_of_range = || {
            DecodeError::new(format!(
                "tensor {reference} out of range ({} tensors)",
                self.len()
            ))
        };
        let reference = usize::try_from(reference).map_err(|_| out_of_range())?;
        let position = if self.refs.is_empty() {
            reference
        } else {
            *self.refs.get(reference).ok_or_else(out_of_range)?
        };
        if position >= self.total {
            return Err(out_of_range());
        }
        let run = self.run_of(position);
        let layout = &self.layouts[run];
        let offset = layout.offset + (position - self.starts[run]) * layout.nbytes;
        Tensor::view_shared(layout.dtype, layout.shape.clone(), layout.buffer, offset)
            .map_err(|e| DecodeError::new(format!("internal error: {e}")))
    }
}

/// What a tensor of a valid run stands for while the body is searched for the user of a
/// bad one.
fn placeholder<'a>() -> Tensor<'a> {
    Tensor::empty(Dtype::Float32)
}
