//! The schema language's built-in values: tensors (raw bytes with a dtype and a shape),
//! nested tensors and slices.
//!
//! A [`Tensor`] borrows its bytes. A decoded tensor views the frame (or the header) it
//! arrived in; a tensor to encode views the caller's memory, and the encoder's payload
//! frames point at that memory. Tensors that view one *storage* (the buffer a batch was
//! laid out in) at back-to-back offsets travel as one run in one frame, exactly as views of
//! one torch storage do on the Python side.

use std::fmt;
use std::sync::Arc;

use crate::dtype::Dtype;

/// Why a tensor cannot be made from the bytes given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeError(String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

/// A dense, C-contiguous tensor: `shape`'s product elements of `dtype`, little-endian,
/// at `offset` in `storage`.
#[derive(Clone)]
pub struct Tensor<'a> {
    dtype: Dtype,
    shape: Arc<[u64]>,
    storage: &'a [u8],
    offset: usize,
    nbytes: usize,
}

/// Bytes of `count` tensors of `dtype` and `shape`, or None past `usize`.
pub(crate) fn nbytes_of(dtype: Dtype, shape: &[u64], count: usize) -> Option<usize> {
    let mut n = dtype.itemsize().checked_mul(count)?;
    for &dim in shape {
        n = n.checked_mul(usize::try_from(dim).ok()?)?;
    }
    Some(n)
}

impl<'a> Tensor<'a> {
    /// A tensor whose bytes are all of `data`.
    pub fn new(dtype: Dtype, shape: &[u64], data: &'a [u8]) -> Result<Self, ShapeError> {
        Self::view(dtype, shape, data, 0)
    }

    /// A tensor whose bytes lie at `offset` in `storage`, such as one item of a batch laid
    /// out in one buffer. Views of one storage that sit back to back travel as one payload.
    pub fn view(
        dtype: Dtype,
        shape: &[u64],
        storage: &'a [u8],
        offset: usize,
    ) -> Result<Self, ShapeError> {
        Self::view_shared(dtype, shape.into(), storage, offset)
    }

    pub(crate) fn view_shared(
        dtype: Dtype,
        shape: Arc<[u64]>,
        storage: &'a [u8],
        offset: usize,
    ) -> Result<Self, ShapeError> {
        let nbytes = nbytes_of(dtype, &shape, 1).ok_or_else(|| {
            ShapeError(format!(
                "shape {:?} of {dtype} spans more bytes than memory holds",
                shape
            ))
        })?;
        match offset.checked_add(nbytes) {
            Some(end) if end <= storage.len() => {}
            _ => {
                return Err(ShapeError(format!(
                    "shape {:?} of {dtype} needs {nbytes} bytes at offset {offset}, but the \
                     storage holds {}",
                    shape,
                    storage.len()
                )))
            }
        }
        Ok(Tensor {
            dtype,
            shape,
            storage,
            offset,
            nbytes,
        })
    }

    /// A tensor of shape `[0]`: no bytes, no storage.
    pub fn empty(dtype: Dtype) -> Tensor<'static> {
        Tensor {
            dtype,
            shape: Arc::from([0u64]),
            storage: &[],
            offset: 0,
            nbytes: 0,
        }
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.nbytes / self.dtype.itemsize()
    }

    /// The number of bytes of the tensor's data.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The tensor's bytes: a slice of the storage, never a copy.
    pub fn data(&self) -> &'a [u8] {
        &self.storage[self.offset..self.offset + self.nbytes]
    }

    /// The memory the tensor views (a decoded tensor's frame, a batch's buffer).
    pub fn storage(&self) -> &'a [u8] {
        self.storage
    }

    /// Where the tensor's bytes start in its storage.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The tensors along dim 0: `self[0]`, `self[1]`, ..., views of the same storage
    /// (what a batched field splits a batch into). Empty for a 0-d tensor's lack of a dim 0.
    pub fn unbind(&self) -> Vec<Tensor<'a>> {
        let Some((&rows, inner)) = self.shape.split_first() else {
            return Vec::new();
        };
        let inner: Arc<[u64]> = inner.into();
        let row_bytes = if rows == 0 {
            0
        } else {
            self.nbytes / rows as usize
        };
        (0..rows as usize)
            .map(|i| Tensor {
                dtype: self.dtype,
                shape: inner.clone(),
                storage: self.storage,
                offset: self.offset + i * row_bytes,
                nbytes: row_bytes,
            })
            .collect()
    }

    /// Rows `start..stop` of dim 0: a view of the same storage (what a flat field's slice
    /// along dim 0 selects). None when the range is out of bounds or the tensor is 0-d.
    pub fn narrow(&self, start: u64, stop: u64) -> Option<Tensor<'a>> {
        let (&rows, inner) = self.shape.split_first()?;
        if start > stop || stop > rows {
            return None;
        }
        let row_bytes = if rows == 0 {
            0
        } else {
            self.nbytes / rows as usize
        };
        let mut shape = Vec::with_capacity(self.shape.len());
        shape.push(stop - start);
        shape.extend_from_slice(inner);
        Some(Tensor {
            dtype: self.dtype,
            shape: shape.into(),
            storage: self.storage,
            offset: self.offset + start as usize * row_bytes,
            nbytes: (stop - start) as usize * row_bytes,
        })
    }

    /// Whether two tensors are the same bytes with the same layout (the encoder sends such
    /// tensors once).
    pub fn same_placement(&self, other: &Tensor<'_>) -> bool {
        self.dtype == other.dtype
            && self.shape == other.shape
            && self.data().as_ptr() == other.data().as_ptr()
    }
}

/// Equal dtype, shape and bytes (wherever the bytes are).
impl PartialEq for Tensor<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.dtype == other.dtype && self.shape == other.shape && self.data() == other.data()
    }
}

impl fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}{:?})", self.dtype, &self.shape[..])
    }
}

/// A tensor, an int or float leaf, or a (possibly ragged) list or tuple of nested tensors.
/// Lists and tuples are told apart, as the Python side keeps them apart.
#[derive(Clone, Debug, PartialEq)]
pub enum NestedTensors<'a> {
    Tensor(Tensor<'a>),
    Int(i64),
    Float(f64),
    List(Vec<NestedTensors<'a>>),
    Tuple(Vec<NestedTensors<'a>>),
}

impl<'a> From<Tensor<'a>> for NestedTensors<'a> {
    fn from(tensor: Tensor<'a>) -> Self {
        NestedTensors::Tensor(tensor)
    }
}

/// Python's `slice(start, stop, step)`, each bound an int or absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Slice {
    pub start: Option<i64>,
    pub stop: Option<i64>,
    pub step: Option<i64>,
}

impl Slice {
    /// `slice(start, stop)`.
    pub fn new(start: i64, stop: i64) -> Self {
        Slice {
            start: Some(start),
            stop: Some(stop),
            step: None,
        }
    }

    /// `slice(None)`: everything.
    pub fn full() -> Self {
        Slice::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_check_their_bounds() {
        let storage = [0u8; 24];
        let t = Tensor::view(Dtype::Int64, &[2], &storage, 8).unwrap();
        assert_eq!((t.nbytes(), t.numel(), t.data().len()), (16, 2, 16));
        assert!(Tensor::view(Dtype::Int64, &[2], &storage, 9).is_err());
        assert!(Tensor::new(Dtype::Int64, &[u64::MAX, 2], &storage).is_err());
        assert!(Tensor::view(Dtype::Int64, &[0], &storage, usize::MAX).is_err());
    }

    #[test]
    fn unbind_and_narrow_view_the_same_storage() {
        let storage: Vec<u8> = (0..24).collect();
        let t = Tensor::new(Dtype::Uint8, &[4, 6], &storage).unwrap();
        let rows = t.unbind();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[2].data(), &storage[12..18]);
        assert_eq!(rows[2].shape(), &[6]);
        let part = t.narrow(1, 3).unwrap();
        assert_eq!((part.shape(), part.offset()), (&[2u64, 6][..], 6));
        assert!(t.narrow(3, 5).is_none());
        assert!(Tensor::new(Dtype::Uint8, &[], &storage[..1])
            .unwrap()
            .unbind()
            .is_empty());
    }
}
