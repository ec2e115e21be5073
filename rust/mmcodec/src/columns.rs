//! Column lists (wire version 3): a list of mappings that share their keys, laid out key
//! by key, as the Python runtime writes and reads them (`mmcodec.runtime.columns`).
//!
//! A list of a mapping type `M` whose values are a shared struct `S` (`list[M]` or
//! `list[optional[M]]`) travels as a msgpack map `{count, keys, columns, absent}` when
//! at least [`MIN_ITEMS`] items are present and hold the same keys in the same order (the
//! decoder takes any number): per key one column with one value per present item, either
//! `[0, values]` (each `S` value as rows write it: in full, or a back-reference) or, when
//! every value is a distinct `S` not sent before, `[1, field column, ...]` (one array per
//! field of `S`). Rows (an array) otherwise. The
//! generated code says which types take part ([`Columnar`], [`FieldColumns`],
//! [`FieldColumnsEncode`]); this module holds what does not depend on the schema.
//!
//! Decoding checks what the Python decoder checks, with the same messages; every value of
//! a column stands for one item, so work and memory stay proportional to the header.

use std::collections::HashSet;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use indexmap::IndexMap;

use crate::constraints::{Bounds, Checked, Violation};
use crate::decode::{bad_back_reference, read_index, read_rows, Decode, Decoder, Shared, Struct};
use crate::encode::{write_rows, Encode, Encoder, SharedEncode, StructEncode};
use crate::error::{DecodeError, EncodeError, Segment};
use crate::msgpack::{expected, write, Kind};

/// `[0, values]`: a column of `S` values as rows write them.
const VALUES: i128 = 0;
/// `[1, field column, ...]`: a column per field of `S`.
const FIELDS: i128 = 1;
/// The wire type of a list whose items can travel as a column list.
pub const EXPECTED: &str = "object | array";
/// How many bytes of key copies a column list's items may take per byte of the header (a
/// Rust bound: realistic keys take a few per value, and each value takes a byte at least).
pub const KEY_BYTES_PER_BYTE: usize = 64;
/// The present items a list needs to travel as columns (the encoder's decision; a decoder
/// takes a column list with any number). As `mmcodec.runtime.columns.MIN_ITEMS`: columns
/// cost a fixed few microseconds per key and list and save about one per item, so a
/// request's few images are cheaper as rows (docs/wire-format.md, "Column lists").
pub const MIN_ITEMS: usize = 16;

/// A mapping type of the schema with `str` keys whose values are a shared struct: its
/// lists can travel as column lists.
pub trait Columnar<'a>: Sized {
    /// The struct the mapping's values are (`S`).
    type Value;

    /// The item's entries.
    fn entries(&self) -> &IndexMap<String, Arc<Self::Value>>;

    /// An item of these entries.
    fn from_entries(entries: IndexMap<String, Arc<Self::Value>>) -> Self;
}

/// A struct read from a fields column: one column per field, each read through the
/// [`ColumnReader`] in schema order.
pub trait FieldColumns<'a, C>: Struct<'a, C> + Shared<'a, C> {
    /// The values of `c`'s present items, in item order.
    fn read_columns(c: &mut ColumnReader<'_, '_, 'a, '_, C>) -> Result<Vec<Self>, DecodeError>;
}

/// A struct written as a fields column: one column per field, each written through the
/// [`ColumnWriter`] in schema order.
pub trait FieldColumnsEncode<'a>: StructEncode<'a> + SharedEncode<'a> + Sized {
    fn write_columns(w: &mut ColumnWriter<'_, '_, 'a, Self>) -> Result<(), EncodeError>;
}

/// Schema `tuple[M, ...]` (or `tuple[optional[M], ...]`) of a mapping `M` whose lists may
/// be column lists: a tuple is rows, always (only a list travels as columns), as on the
/// Python side. It derefs to its `Vec`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows<T>(pub Vec<T>);

impl<T> Deref for Rows<T> {
    type Target = Vec<T>;

    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> DerefMut for Rows<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T> From<Vec<T>> for Rows<T> {
    fn from(items: Vec<T>) -> Self {
        Rows(items)
    }
}

impl<'a, C, T: Decode<'a, C>> Decode<'a, C> for Rows<T> {
    const EXPECTED: &'static str = "array";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        read_rows(d).map(Rows)
    }
}

impl<'a, T: Encode<'a>> Encode<'a> for Rows<T> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write_rows(&self.0, e)
    }
}

impl<T> Checked for Rows<T> {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        self.0.check(bounds)
    }
}

/// The position in the list of the `index`-th present item (`absent` increasing).
fn position(absent: &[usize], index: usize) -> usize {
    let mut position = index;
    for &gap in absent {
        if gap > position {
            break;
        }
        position += 1;
    }
    position
}

// -- decoding --------------------------------------------------------------------------

/// The fields columns of one key being read: each holds one value per present item.
pub struct ColumnReader<'r, 'k, 'a, 'm, C> {
    d: &'r mut Decoder<'a, 'm, C>,
    present: usize,
    key: &'k str,
    absent: &'k [usize],
    /// Field columns the fields column holds that are not read yet.
    left: usize,
    /// The next field's position, and the struct's field names.
    index: usize,
    names: fn(usize) -> &'static str,
}

impl<'a, C> ColumnReader<'_, '_, 'a, '_, C> {
    /// The number of present items: the length of every column.
    pub fn present(&self) -> usize {
        self.present
    }

    /// An error of the `index`-th present item's value of the field being read.
    fn item_error(&self, index: usize, error: DecodeError) -> DecodeError {
        error
            .at(Segment::Field((self.names)(self.index)))
            .at(Segment::str_key(self.key))
            .at(Segment::Index(position(self.absent, index)))
    }

    /// An error of the field column being read: at its field of the key.
    fn column_error(&self, error: DecodeError) -> DecodeError {
        error
            .at(Segment::Field((self.names)(self.index)))
            .at(Segment::str_key(self.key))
    }

    /// The next field's column: its length, one value per present item.
    fn open(&mut self) -> Result<usize, DecodeError> {
        if self.left == 0 {
            return Err(self.column_error(DecodeError::new("missing field")));
        }
        self.left -= 1;
        let n = self.d.reader.array().map_err(|e| self.column_error(e))?;
        if n != self.present {
            return Err(self.column_error(DecodeError::new(format!(
                "a column holds {n} values for {} present items",
                self.present
            ))));
        }
        Ok(n)
    }

    /// For a field column an older sender left off, its default for every item.
    fn defaulted<T: Clone>(
        &mut self,
        default: impl FnOnce() -> T,
    ) -> Option<std::vec::IntoIter<T>> {
        if self.left > 0 {
            return None;
        }
        self.index += 1;
        Some(vec![default(); self.present].into_iter())
    }

    /// The next value of a column (each holds one per present item).
    pub fn value<T>(&self, column: &mut std::vec::IntoIter<T>) -> Result<T, DecodeError> {
        column
            .next()
            .ok_or_else(|| self.column_error(DecodeError::new("a column ended early")))
    }

    fn values<T>(
        &mut self,
        mut read: impl FnMut(&mut Decoder<'a, '_, C>) -> Result<T, DecodeError>,
    ) -> Result<std::vec::IntoIter<T>, DecodeError> {
        let n = self.open()?;
        let mut out = Vec::with_capacity(n); // one value per byte of the header at least
        for index in 0..n {
            match read(self.d) {
                Ok(value) => out.push(value),
                Err(e) => return Err(self.item_error(index, e)),
            }
        }
        self.index += 1;
        Ok(out.into_iter())
    }

    /// The next field's column: each value as rows write it.
    pub fn column<T: Decode<'a, C>>(&mut self) -> Result<std::vec::IntoIter<T>, DecodeError> {
        self.values(T::read)
    }

    /// [`ColumnReader::column`] of a field with constraints.
    pub fn column_in<T: Decode<'a, C> + Checked>(
        &mut self,
        bounds: &Bounds,
    ) -> Result<std::vec::IntoIter<T>, DecodeError> {
        self.values(|d| {
            let value = T::read(d)?;
            match value.check(bounds) {
                Ok(()) => Ok(value),
                Err(violation) => Err(DecodeError::new(violation.decode)),
            }
        })
    }

    /// The next field's column, which an older sender may have left off (each item then
    /// takes the field's default).
    pub fn column_or<T: Decode<'a, C> + Clone>(
        &mut self,
        default: T,
    ) -> Result<std::vec::IntoIter<T>, DecodeError> {
        match self.defaulted(|| default) {
            Some(column) => Ok(column),
            None => self.column(),
        }
    }

    /// [`ColumnReader::column_or`] with a default of another type (a `&'static str` for
    /// a `String` field).
    pub fn column_or_into<T: Decode<'a, C> + Clone, D: Into<T>>(
        &mut self,
        default: D,
    ) -> Result<std::vec::IntoIter<T>, DecodeError> {
        match self.defaulted(|| default.into()) {
            Some(column) => Ok(column),
            None => self.column(),
        }
    }

    /// [`ColumnReader::column_or`] of a field with constraints.
    pub fn column_or_in<T: Decode<'a, C> + Checked + Clone>(
        &mut self,
        default: T,
        bounds: &Bounds,
    ) -> Result<std::vec::IntoIter<T>, DecodeError> {
        match self.defaulted(|| default) {
            Some(column) => Ok(column),
            None => self.column_in(bounds),
        }
    }

    /// [`ColumnReader::column_or_into`] of a field with constraints.
    pub fn column_or_into_in<T: Decode<'a, C> + Checked + Clone, D: Into<T>>(
        &mut self,
        default: D,
        bounds: &Bounds,
    ) -> Result<std::vec::IntoIter<T>, DecodeError> {
        match self.defaulted(|| default.into()) {
            Some(column) => Ok(column),
            None => self.column_in(bounds),
        }
    }

    /// The next field's column, of a type that travels once per object: a bare int
    /// refers to a value sent before, anything else is a value as rows write it.
    pub fn once_column<T: Shared<'a, C>>(
        &mut self,
    ) -> Result<std::vec::IntoIter<Arc<T>>, DecodeError> {
        self.values(|d| {
            match d.reader.peek_kind()? {
                Kind::Int => {}
                Kind::Array => return Arc::<T>::read(d),
                kind => return Err(expected("int | array", kind)),
            }
            let index = read_index(&mut d.reader)?;
            let table = T::table(&mut d.tables);
            let found = usize::try_from(index).ok().and_then(|i| table.get(i));
            found
                .cloned()
                .ok_or_else(|| bad_back_reference(T::NAME, index, table.len()))
        })
    }
}

/// A column list's entries as the decoder found them (the columns not read yet).
struct Head<'a> {
    count: usize,
    keys: Vec<&'a str>,
    columns: crate::msgpack::Reader<'a>,
    absent: Vec<usize>,
}

impl<'a, C> Decoder<'a, '_, C> {
    /// A `list[M]`: rows (an array) or a column list (a map).
    pub fn read_items<M>(&mut self) -> Result<Vec<M>, DecodeError>
    where
        M: Columnar<'a> + Decode<'a, C>,
        M::Value: FieldColumns<'a, C>,
    {
        match self.reader.peek_kind()? {
            Kind::Map => Ok(self
                .read_column_list::<M>(false)?
                .into_iter()
                .flatten()
                .collect()),
            Kind::Array => read_rows(self),
            kind => Err(expected(EXPECTED, kind)),
        }
    }

    /// A `list[optional[M]]`: rows (an array) or a column list (a map).
    pub fn read_optional_items<M>(&mut self) -> Result<Vec<Option<M>>, DecodeError>
    where
        M: Columnar<'a> + Decode<'a, C>,
        M::Value: FieldColumns<'a, C>,
    {
        match self.reader.peek_kind()? {
            Kind::Map => self.read_column_list::<M>(true),
            Kind::Array => read_rows(self),
            kind => Err(expected(EXPECTED, kind)),
        }
    }

    /// The map's entries, as msgspec reads a struct from an object: by name, in any
    /// order, the last of a repeated name winning; an unknown name is refused.
    fn read_head(&mut self) -> Result<Head<'a>, DecodeError> {
        let n = self.reader.map()?;
        let (mut count, mut keys, mut columns, mut absent) = (None, None, None, None);
        for _ in 0..n {
            let name = self.reader.str()?;
            let field = |e: DecodeError| e.at(Segment::Field(field_name(name)));
            match name {
                "count" => count = Some(read_index(&mut self.reader).map_err(field)?),
                "keys" => keys = Some(self.read_strs().map_err(field)?),
                "columns" => {
                    columns = Some(self.reader.clone());
                    self.reader.skip()?;
                }
                "absent" => absent = Some(self.read_positions().map_err(field)?),
                other => {
                    return Err(DecodeError::new(format!(
                        "Object contains unknown field `{other}`"
                    )))
                }
            }
        }
        let missing = |name| DecodeError::new(format!("Object missing required field `{name}`"));
        Ok(Head {
            count: usize::try_from(count.ok_or_else(|| missing("count"))?).unwrap_or(usize::MAX),
            keys: keys.ok_or_else(|| missing("keys"))?,
            columns: columns.ok_or_else(|| missing("columns"))?,
            absent: absent.ok_or_else(|| missing("absent"))?,
        })
    }

    fn read_strs(&mut self) -> Result<Vec<&'a str>, DecodeError> {
        let n = self.reader.array()?;
        let mut out = Vec::with_capacity(n);
        for index in 0..n {
            out.push(self.reader.str().map_err(|e| e.at(Segment::Index(index)))?);
        }
        Ok(out)
    }

    fn read_positions(&mut self) -> Result<Vec<usize>, DecodeError> {
        let n = self.reader.array()?;
        let mut out = Vec::with_capacity(n);
        for index in 0..n {
            let value = read_index(&mut self.reader).map_err(|e| e.at(Segment::Index(index)))?;
            out.push(usize::try_from(value).unwrap_or(usize::MAX));
        }
        Ok(out)
    }

    /// A column list, checked as the Python decoder checks it (`columns.check`).
    fn read_column_list<M>(&mut self, optional: bool) -> Result<Vec<Option<M>>, DecodeError>
    where
        M: Columnar<'a> + Decode<'a, C>,
        M::Value: FieldColumns<'a, C>,
    {
        let head = self.read_head()?;
        let limit = self.limits.max_elements;
        let (count, keys, absent) = (head.count, &head.keys, &head.absent[..]);
        if count > limit {
            return Err(DecodeError::new(format!(
                "{count} elements exceed the limit of {limit}"
            )));
        }
        if keys.is_empty() {
            return Err(DecodeError::new("a column list has no keys"));
        }
        if keys.len() > limit {
            return Err(DecodeError::new(format!(
                "{} elements exceed the limit of {limit}",
                keys.len()
            )));
        }
        let mut columns = head.columns;
        let n_columns = columns.array()?;
        if n_columns != keys.len() {
            return Err(DecodeError::new(format!(
                "a column list of {} keys holds {n_columns} columns",
                keys.len()
            )));
        }
        let mut distinct = HashSet::with_capacity(keys.len());
        if !keys.iter().all(|key| distinct.insert(*key)) {
            return Err(DecodeError::new("a column list names a key twice"));
        }
        if !absent.is_empty() {
            if !optional {
                return Err(DecodeError::new(
                    "a column list of values that cannot be None has absent items",
                ));
            }
            let increasing = absent.windows(2).all(|pair| pair[0] < pair[1]);
            if !increasing || absent.last().is_some_and(|&last| last >= count) {
                return Err(DecodeError::new(format!(
                    "absent item positions must increase and lie below the count ({count})"
                )));
            }
        }
        let present = count - absent.len();
        if present < 1 {
            return Err(DecodeError::new("a column list has no present item"));
        }
        // Read the columns where they are, then carry on after the map.
        let after = std::mem::replace(&mut self.reader, columns);
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            values.push(
                self.read_column::<M::Value>(key, absent, present)?
                    .into_iter(),
            );
        }
        self.reader = after;
        // Every item owns a copy of the keys (Python's items share the key objects): the
        // copies stay proportional to the header, as the decoder's memory must.
        let key_bytes: usize = keys.iter().map(|key| key.len()).sum();
        let header = self.reader.buffer().len();
        if present.saturating_mul(key_bytes) > KEY_BYTES_PER_BYTE.saturating_mul(header) {
            return Err(DecodeError::new(format!(
                "the keys of a column list ({key_bytes} bytes) copied into its {present} \
                 items take more than {KEY_BYTES_PER_BYTE} bytes per byte of the header \
                 ({header})"
            )));
        }
        let mut items = Vec::with_capacity(count);
        let mut gaps = absent.iter().peekable();
        for position in 0..count {
            if gaps.next_if_eq(&&position).is_some() {
                items.push(None);
                continue;
            }
            let mut entries = IndexMap::with_capacity(keys.len());
            for (key, column) in keys.iter().zip(values.iter_mut()) {
                if let Some(value) = column.next() {
                    entries.insert((*key).to_owned(), value);
                }
            }
            items.push(Some(M::from_entries(entries)));
        }
        Ok(items)
    }

    /// One key's column: `present` values of `S`. An error of a value is at the item's
    /// position and key (the path rows give), any other at the key.
    fn read_column<S: FieldColumns<'a, C>>(
        &mut self,
        key: &str,
        absent: &[usize],
        present: usize,
    ) -> Result<Vec<Arc<S>>, DecodeError> {
        self.read_column_at::<S>(key, absent, present)
            .map_err(|located| match located {
                Located::Done(e) => e,
                Located::Column(e) => e.at(Segment::str_key(key)),
            })
    }

    fn read_column_at<S: FieldColumns<'a, C>>(
        &mut self,
        key: &str,
        absent: &[usize],
        present: usize,
    ) -> Result<Vec<Arc<S>>, Located> {
        let n = self.reader.array()?;
        if n == 0 {
            return Err(DecodeError::new("Expected `array` of at least length 1, got 0").into());
        }
        let tag = self.reader.int().map_err(|e| e.at(Segment::Tag))?;
        match tag {
            VALUES => {
                if n < 2 {
                    return Err(
                        DecodeError::new("Expected `array` of at least length 2, got 1").into(),
                    );
                }
                let len = self.reader.array()?;
                if len != present {
                    return Err(DecodeError::new(format!(
                        "a column holds {len} values for {present} present items"
                    ))
                    .into());
                }
                let mut out = Vec::with_capacity(len);
                for index in 0..len {
                    let value = Arc::<S>::read(self).map_err(|e| {
                        Located::Done(
                            e.at(Segment::str_key(key))
                                .at(Segment::Index(position(absent, index))),
                        )
                    })?;
                    out.push(value);
                }
                for _ in 2..n {
                    self.reader.skip()?;
                }
                Ok(out)
            }
            FIELDS => {
                // As rows read a struct: the fields without a default at least, those
                // of a newer schema skipped.
                if n < 1 + S::REQUIRED {
                    return Err(DecodeError::new(format!(
                        "Expected `array` of at least length {}, got {n}",
                        1 + S::REQUIRED
                    ))
                    .into());
                }
                let held = (n - 1).min(S::COUNT);
                if held == 0 && present > self.reader.buffer().len() {
                    // Nothing bounds the items but the count (a struct without fields, or
                    // whose columns were all left off): as many as the header has bytes.
                    return Err(DecodeError::new(format!(
                        "a fields column without columns stands for {present} items, more \
                         than the header's {} bytes",
                        self.reader.buffer().len()
                    ))
                    .into());
                }
                let mut reader = ColumnReader {
                    d: self,
                    present,
                    key,
                    absent,
                    left: held,
                    index: 0,
                    names: S::field_name,
                };
                let values = S::read_columns(&mut reader).map_err(Located::Done)?;
                for _ in 1 + held..n {
                    self.reader.skip()?;
                }
                let table = S::table(&mut self.tables);
                let mut out = Vec::with_capacity(values.len());
                for value in values {
                    let value = Arc::new(value);
                    table.push(value.clone());
                    out.push(value);
                }
                Ok(out)
            }
            other => Err(DecodeError::new(format!("Invalid value {other}"))
                .at(Segment::Tag)
                .into()),
        }
    }
}

/// A column's error, and whether its path is complete.
enum Located {
    /// Already at its place (an item's value, a field column's own error).
    Done(DecodeError),
    /// The column's: at the key.
    Column(DecodeError),
}

impl From<DecodeError> for Located {
    fn from(error: DecodeError) -> Self {
        Located::Column(error)
    }
}

/// The name of an entry of a column list, as a `'static` path segment.
fn field_name(name: &str) -> &'static str {
    match name {
        "count" => "count",
        "keys" => "keys",
        "columns" => "columns",
        _ => "absent",
    }
}

// -- encoding --------------------------------------------------------------------------

/// The fields columns of one key being written: the key's present values, in item order.
pub struct ColumnWriter<'r, 'v, 'a, S> {
    e: &'r mut Encoder<'a>,
    values: &'v [&'v Arc<S>],
    key: &'v str,
    positions: &'v [usize],
    /// The next field's position, and the struct's field names.
    index: usize,
    names: fn(usize) -> &'static str,
}

impl<'a, S> ColumnWriter<'_, '_, 'a, S> {
    fn item_error(&self, index: usize, error: EncodeError) -> EncodeError {
        error
            .at(Segment::Field((self.names)(self.index)))
            .at(Segment::str_key(self.key))
            .at(Segment::Index(self.positions[index]))
    }

    /// The next field's column: each value as rows write it.
    pub fn column<T: Encode<'a>>(&mut self, get: impl Fn(&S) -> &T) -> Result<(), EncodeError> {
        write::array(&mut self.e.out, self.values.len());
        for (index, value) in self.values.iter().enumerate() {
            if let Err(error) = get(value).write(self.e) {
                return Err(self.item_error(index, error));
            }
        }
        self.index += 1;
        Ok(())
    }

    /// [`ColumnWriter::column`] of a field with constraints.
    pub fn column_in<T: Encode<'a> + Checked>(
        &mut self,
        get: impl Fn(&S) -> &T,
        bounds: &Bounds,
    ) -> Result<(), EncodeError> {
        for (index, value) in self.values.iter().enumerate() {
            if let Err(violation) = get(value).check(bounds) {
                return Err(self.item_error(index, EncodeError::new(violation.encode)));
            }
        }
        self.column(get)
    }

    /// The next field's column, of a type that travels once per object: one object in
    /// every item is its value (or its index, when sent before) once, then its index as a
    /// bare int; otherwise each value as rows write it.
    pub fn once_column<T: SharedEncode<'a>>(
        &mut self,
        get: impl Fn(&S) -> &Arc<T>,
    ) -> Result<(), EncodeError> {
        write::array(&mut self.e.out, self.values.len());
        let first = get(self.values[0]);
        if self.values.iter().all(|v| Arc::ptr_eq(get(v), first)) {
            let identity = (T::KEY, Arc::as_ptr(first) as usize);
            match self.e.shared.get(&identity) {
                Some(&index) => write::uint(&mut self.e.out, index),
                None => {
                    if let Err(error) = first.write(self.e) {
                        return Err(self.item_error(0, error));
                    }
                }
            }
            let index = self.e.shared.get(&identity).copied().unwrap_or_default();
            for _ in 1..self.values.len() {
                write::uint(&mut self.e.out, index);
            }
        } else {
            for (index, value) in self.values.iter().enumerate() {
                if let Err(error) = get(value).write(self.e) {
                    return Err(self.item_error(index, error));
                }
            }
        }
        self.index += 1;
        Ok(())
    }
}

impl<'a> Encoder<'a> {
    /// A `list[M]`: a column list when its items allow one, else rows.
    pub fn write_items<M>(&mut self, items: &[M]) -> Result<(), EncodeError>
    where
        M: Columnar<'a> + Encode<'a>,
        M::Value: FieldColumnsEncode<'a>,
    {
        let present: Vec<Option<&M>> = items.iter().map(Some).collect();
        let start = self.out.len();
        match self.write_column_list(&present) {
            Ok(true) => Ok(()),
            Ok(false) => write_rows(items, self),
            Err(error) => Err(self.refusal(start, error, |e| write_rows(items, e))),
        }
    }

    /// A `list[optional[M]]`: a column list when its items allow one, else rows.
    pub fn write_optional_items<M>(&mut self, items: &[Option<M>]) -> Result<(), EncodeError>
    where
        M: Columnar<'a> + Encode<'a>,
        M::Value: FieldColumnsEncode<'a>,
    {
        let present: Vec<Option<&M>> = items.iter().map(Option::as_ref).collect();
        let start = self.out.len();
        match self.write_column_list(&present) {
            Ok(true) => Ok(()),
            Ok(false) => write_rows(items, self),
            Err(error) => Err(self.refusal(start, error, |e| write_rows(items, e))),
        }
    }

    /// A column list's refusal as the Python encoder reports it: a refused tensor where
    /// columns met it first, any other refusal where rows would meet it first (the same
    /// items written as rows, from where the list starts, find it).
    fn refusal(
        &mut self,
        start: usize,
        error: EncodeError,
        rows: impl FnOnce(&mut Self) -> Result<(), EncodeError>,
    ) -> EncodeError {
        if self.tensor_refused {
            return error;
        }
        self.out.truncate(start);
        rows(self).err().unwrap_or(error)
    }

    /// Write `items` as a column list and return true, or write nothing and return false
    /// when they do not make one (`mmcodec.runtime.columns.transpose`): fewer than
    /// [`MIN_ITEMS`] present items, present items whose keys differ (in value or order), no
    /// key.
    fn write_column_list<M>(&mut self, items: &[Option<&M>]) -> Result<bool, EncodeError>
    where
        M: Columnar<'a>,
        M::Value: FieldColumnsEncode<'a>,
    {
        if items.len() < MIN_ITEMS {
            return Ok(false);
        }
        let positions: Vec<usize> = (0..items.len()).filter(|&i| items[i].is_some()).collect();
        if positions.len() < MIN_ITEMS {
            return Ok(false);
        }
        let present: Vec<&IndexMap<String, Arc<M::Value>>> =
            items.iter().flatten().map(|item| item.entries()).collect();
        let first = present[0];
        if first.is_empty() || !present.iter().all(|p| p.keys().eq(first.keys())) {
            return Ok(false);
        }
        // What rows would refuse first: the list's length, then an item's.
        self.check_count(items.len())?;
        self.check_count(first.len())
            .map_err(|e| e.at(Segment::Index(positions[0])))?;
        self.columns_used = true;
        write::map(&mut self.out, 4);
        write::str(&mut self.out, "count");
        write::uint(&mut self.out, items.len() as u64);
        write::str(&mut self.out, "keys");
        write::array(&mut self.out, first.len());
        for key in first.keys() {
            write::str(&mut self.out, key);
        }
        write::str(&mut self.out, "columns");
        write::array(&mut self.out, first.len());
        let mut values = Vec::with_capacity(present.len());
        for (k, key) in first.keys().enumerate() {
            values.clear();
            values.extend(
                present
                    .iter()
                    .filter_map(|p| p.get_index(k).map(|(_, v)| v)),
            );
            self.write_column(key, &values, &positions)?;
        }
        write::str(&mut self.out, "absent");
        write::array(&mut self.out, items.len() - positions.len());
        for (position, item) in items.iter().enumerate() {
            if item.is_none() {
                write::uint(&mut self.out, position as u64);
            }
        }
        Ok(true)
    }

    /// One key's column: a fields column when its values are distinct and none was sent
    /// before, else a values column.
    fn write_column<S: FieldColumnsEncode<'a>>(
        &mut self,
        key: &str,
        values: &[&Arc<S>],
        positions: &[usize],
    ) -> Result<(), EncodeError> {
        let identities: Vec<usize> = values.iter().map(|v| Arc::as_ptr(v) as usize).collect();
        let mut distinct = HashSet::with_capacity(identities.len());
        let fresh = identities
            .iter()
            .all(|&id| distinct.insert(id) && !self.shared.contains_key(&(S::KEY, id)));
        if !fresh {
            write::array(&mut self.out, 2);
            write::uint(&mut self.out, VALUES as u64);
            write::array(&mut self.out, values.len());
            for (index, value) in values.iter().enumerate() {
                value.write(self).map_err(|e| {
                    e.at(Segment::str_key(key))
                        .at(Segment::Index(positions[index]))
                })?;
            }
            return Ok(());
        }
        write::array(&mut self.out, 1 + S::COUNT);
        write::uint(&mut self.out, FIELDS as u64);
        let mut writer = ColumnWriter {
            e: self,
            values,
            key,
            positions,
            index: 0,
            names: S::field_name,
        };
        S::write_columns(&mut writer)?;
        // Numbered after their fields, in item order, as the decoder meets them.
        let count = self.counts.entry(S::KEY).or_insert(0);
        for id in identities {
            self.shared.insert((S::KEY, id), *count);
            *count += 1;
        }
        Ok(())
    }
}
