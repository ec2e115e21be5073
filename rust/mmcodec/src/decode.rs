//! Decoding a message body into typed values, straight from the header's bytes.
//!
//! Generated code implements [`Decode`] for every schema type, mostly by calling the
//! helpers here: [`Decoder::read_struct`] for a struct (its fields through [`Fields`]), a
//! union's [`Union::read_variant`] for the value its tag selects, [`Shared`] for the values
//! that travel once and come back as the same [`Arc`]. The built-in types (numbers,
//! strings, containers, tensors, nested tensors, slices) are implemented here.
//!
//! Every error names the value it is about: each step adds its segment of the path (a
//! field, a list index, a mapping key) as the error passes through it.

use std::borrow::Cow;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::constraints::{Bounds, Checked};
use crate::enums::{read_int_enum, read_str_enum, IntEnum, StrEnum};
use crate::error::{python_bytes_repr, python_float_repr, python_repr, DecodeError, Segment};
use crate::limits::Limits;
use crate::msgpack::{expected, Kind, Reader};
use crate::runs::TensorTable;
use crate::tensor::{NestedTensors, Slice, Tensor};

/// The state of one decode: the header being read, the message's tensors, the caller's
/// limits, and per shared type the values read so far (`C`, the root module's `Context`).
pub struct Decoder<'a, 'm, C> {
    pub(crate) reader: Reader<'a>,
    tensors: &'m TensorTable<'a>,
    pub(crate) limits: &'m Limits,
    pub(crate) tables: C,
}

/// A value of the schema that can be read from a message.
pub trait Decode<'a, C>: Sized {
    /// msgspec's name of the wire type (`int`, `array`, `int | array`, ...), for errors.
    const EXPECTED: &'static str;
    /// [`Decode::EXPECTED`] of a `list[Self]`: an array, or for an item type whose lists
    /// can travel as column lists ([`crate::columns`]) an array or a map.
    const LIST_EXPECTED: &'static str = "array";
    /// [`Decode::LIST_EXPECTED`] of a `list[optional[Self]]`.
    const OPTIONAL_LIST_EXPECTED: &'static str = "array";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError>;

    /// A `list[Self]`: its items in an array (rows), unless the type says otherwise.
    fn read_list(d: &mut Decoder<'a, '_, C>) -> Result<Vec<Self>, DecodeError> {
        read_rows(d)
    }

    /// A `list[optional[Self]]`: its items in an array (rows), unless the type says
    /// otherwise.
    fn read_optional_list(d: &mut Decoder<'a, '_, C>) -> Result<Vec<Option<Self>>, DecodeError> {
        read_rows(d)
    }
}

/// A struct of the schema: an array of its fields, in order, defaults last. Fields travel
/// by position; their names are looked up only to name a bad one.
pub trait StructFields {
    /// How many fields have no default (the array's least length).
    const REQUIRED: usize;
    /// How many fields the struct has.
    const COUNT: usize;

    /// The struct's tag when it is a variant of a union: it then travels first, wherever
    /// the struct does (`[tag, fields...]`).
    const TAG: Option<Tag<'static>> = None;

    /// The schema's name of field `index`.
    fn field_name(index: usize) -> &'static str;
}

/// A struct of the schema, read field by field.
pub trait Struct<'a, C>: StructFields + Sized {
    fn read_fields(s: &mut Fields<'_, 'a, '_, C>) -> Result<Self, DecodeError>;
}

/// A union tag as the wire holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag<'t> {
    Int(i64),
    Str(&'t str),
}

/// A union of the schema: an array whose first entry is the tag of a variant; a struct
/// variant's fields follow, any other variant's value is the one entry that follows.
pub trait Union<'a, C>: Sized {
    /// Whether the tags are strings (else ints).
    const STR_TAGS: bool;

    /// The value of the variant `tag` selects (an unknown tag is an error).
    fn read_variant(tag: Tag<'a>, v: &mut Variant<'_, 'a, '_, C>) -> Result<Self, DecodeError>;
}

/// A value read in full, or a back-reference to one read before.
pub enum Fresh<T> {
    Value(T),
    Ref(u64),
}

/// A type whose values travel once per message: later occurrences of the same value are
/// back-references (to its index among the values of its type sent so far), and come back
/// as clones of the same [`Arc`].
pub trait Shared<'a, C>: Sized {
    /// The schema's name of the type, for errors.
    const NAME: &'static str;
    /// [`Decode::EXPECTED`] of a reference to the type.
    const EXPECTED: &'static str;

    /// One value, or the index of a back-reference.
    fn read_fresh(d: &mut Decoder<'a, '_, C>) -> Result<Fresh<Self>, DecodeError>;

    /// This message's values of the type, in the order they were read.
    fn table<'t>(tables: &'t mut C) -> &'t mut Vec<Arc<Self>>
    where
        'a: 't;
}

/// msgspec's error for a tag that selects nothing.
fn invalid_tag(tag: Tag<'_>) -> DecodeError {
    let shown = match tag {
        Tag::Int(i) => i.to_string(),
        Tag::Str(s) => crate::error::python_repr(s),
    };
    DecodeError::new(format!("Invalid value {shown}"))
}

fn accepts(expected: &str, kind: Kind) -> bool {
    expected
        .split(" | ")
        .any(|name| name == kind.name() || (name == "float" && kind == Kind::Int))
}

pub(crate) fn bad_back_reference(name: &str, index: u64, sent: usize) -> DecodeError {
    DecodeError::new(format!(
        "back-reference to {name} value {index}, but {sent} were sent"
    ))
}

/// A back-reference's index: a non-negative int.
pub(crate) fn read_index(r: &mut Reader<'_>) -> Result<u64, DecodeError> {
    let value = r.int()?;
    u64::try_from(value).map_err(|_| DecodeError::new("Expected `int` >= 0"))
}

impl<'a, 'm, C> Decoder<'a, 'm, C> {
    pub(crate) fn new(
        reader: Reader<'a>,
        tensors: &'m TensorTable<'a>,
        limits: &'m Limits,
        tables: C,
    ) -> Self {
        Decoder {
            reader,
            tensors,
            limits,
            tables,
        }
    }

    pub(crate) fn reader_position(&self) -> (usize, usize) {
        (self.reader.position(), self.reader.remaining())
    }

    /// The header being read.
    pub fn reader(&mut self) -> &mut Reader<'a> {
        &mut self.reader
    }

    /// The caller's limits.
    pub fn limits(&self) -> &Limits {
        self.limits
    }

    /// Per shared type, the values read so far.
    pub fn tables(&mut self) -> &mut C {
        &mut self.tables
    }

    /// Tensor `reference` of the message: a view of its frame.
    pub fn tensor(&self, reference: u64) -> Result<Tensor<'a>, DecodeError> {
        self.tensors.tensor(reference)
    }

    /// Any value of the schema.
    pub fn read<T: Decode<'a, C>>(&mut self) -> Result<T, DecodeError> {
        T::read(self)
    }

    /// A container of `n` elements, against `max_elements`.
    pub(crate) fn check_count(&self, n: usize) -> Result<(), DecodeError> {
        if n > self.limits.max_elements {
            return Err(DecodeError::new(format!(
                "{n} elements exceed the limit of {}",
                self.limits.max_elements
            )));
        }
        Ok(())
    }

    /// A struct: its fields in order, a field the sender's (newer) schema added skipped.
    pub fn read_struct<T: Struct<'a, C>>(&mut self) -> Result<T, DecodeError> {
        let n = self.reader.array()?;
        let tagged = usize::from(T::TAG.is_some());
        if n < T::REQUIRED + tagged {
            return Err(DecodeError::new(format!(
                "Expected `array` of at least length {}, got {n}",
                T::REQUIRED + tagged
            )));
        }
        if let Some(expected) = T::TAG {
            let tag = self.read_tag_of(expected).map_err(|e| e.at(Segment::Tag))?;
            if tag != expected {
                return Err(invalid_tag(tag).at(Segment::Tag));
            }
        }
        let mut fields = Fields::new::<T>(self, n - tagged);
        let value = T::read_fields(&mut fields)?;
        fields.end()?;
        Ok(value)
    }

    /// A struct that is shared: the struct, or a bare int that refers back to one.
    pub fn read_struct_or_ref<T: Struct<'a, C>>(&mut self) -> Result<Fresh<T>, DecodeError> {
        match self.reader.peek_kind()? {
            Kind::Int => Ok(Fresh::Ref(read_index(&mut self.reader)?)),
            Kind::Array => Ok(Fresh::Value(self.read_struct()?)),
            kind => Err(expected("int | array", kind)),
        }
    }

    /// A union value, or a back-reference (a reference tag, `-1` or `"@ref"`, and an index).
    pub fn read_tagged<T: Union<'a, C>>(&mut self) -> Result<Fresh<T>, DecodeError> {
        let n = self.reader.array()?;
        if n == 0 {
            return Err(DecodeError::new(
                "Expected `array` of at least length 1, got 0",
            ));
        }
        let tag = self.read_tag::<T>().map_err(|e| e.at(Segment::Tag))?;
        if tag == Tag::Int(-1) || tag == Tag::Str("@ref") {
            if n < 2 {
                return Err(DecodeError::new(
                    "Expected `array` of at least length 2, got 1",
                ));
            }
            let index = read_index(&mut self.reader).map_err(|e| e.at(Segment::Field("index")))?;
            for _ in 2..n {
                self.reader.skip()?;
            }
            return Ok(Fresh::Ref(index));
        }
        let mut variant = Variant {
            d: self,
            len: n - 1,
        };
        T::read_variant(tag, &mut variant).map(Fresh::Value)
    }

    fn read_tag<T: Union<'a, C>>(&mut self) -> Result<Tag<'a>, DecodeError> {
        self.read_tag_kind(T::STR_TAGS)
    }

    fn read_tag_of(&mut self, like: Tag<'_>) -> Result<Tag<'a>, DecodeError> {
        self.read_tag_kind(matches!(like, Tag::Str(_)))
    }

    fn read_tag_kind(&mut self, str_tags: bool) -> Result<Tag<'a>, DecodeError> {
        if str_tags {
            return Ok(Tag::Str(self.reader.str()?));
        }
        let tag = self.reader.int()?;
        i64::try_from(tag)
            .map(Tag::Int)
            .map_err(|_| DecodeError::new(format!("Invalid value {tag}")))
    }

    /// A member of an int enum of the schema.
    pub fn read_int_enum<T: IntEnum>(&mut self) -> Result<T, DecodeError> {
        read_int_enum(&mut self.reader)
    }

    /// A member of a str enum of the schema.
    pub fn read_str_enum<T: StrEnum>(&mut self) -> Result<T, DecodeError> {
        read_str_enum(&mut self.reader)
    }

    /// A union at the root of a message, where nothing came before to refer back to.
    pub fn read_union<T: Union<'a, C> + Shared<'a, C>>(&mut self) -> Result<T, DecodeError> {
        match self.read_tagged::<T>()? {
            Fresh::Value(value) => Ok(value),
            Fresh::Ref(index) => Err(bad_back_reference(T::NAME, index, 0)),
        }
    }
}

/// The fields of a struct being read, in order.
pub struct Fields<'r, 'a, 'm, C> {
    d: &'r mut Decoder<'a, 'm, C>,
    /// Fields the array holds that are not read yet.
    left: usize,
    /// The next field's position.
    index: usize,
    names: fn(usize) -> &'static str,
}

impl<'r, 'a, 'm, C> Fields<'r, 'a, 'm, C> {
    fn new<T: StructFields>(d: &'r mut Decoder<'a, 'm, C>, len: usize) -> Self {
        Fields {
            d,
            left: len,
            index: 0,
            names: T::field_name,
        }
    }

    /// The path segment of the field being read.
    fn segment(&self) -> Segment {
        Segment::Field((self.names)(self.index))
    }

    /// Read the next field, which the array holds.
    fn present<T: Decode<'a, C>>(&mut self) -> Result<T, DecodeError> {
        self.left -= 1;
        let value = T::read(self.d).map_err(|e| e.at(self.segment()));
        self.index += 1;
        value
    }

    /// A field without a default (the array holds it: [`StructFields::REQUIRED`] was
    /// checked).
    pub fn field<T: Decode<'a, C>>(&mut self) -> Result<T, DecodeError> {
        if self.left == 0 {
            return Err(DecodeError::new("missing field").at(self.segment()));
        }
        self.present()
    }

    /// A field with a default, which an older sender may have left off.
    pub fn field_or<T: Decode<'a, C>>(&mut self, default: T) -> Result<T, DecodeError> {
        if self.left == 0 {
            self.index += 1;
            return Ok(default);
        }
        self.present()
    }

    /// A field with a default the schema writes as a constant of another type (a `str`
    /// default is a `&'static str` for a `String` field).
    pub fn field_or_into<T: Decode<'a, C>, D: Into<T>>(
        &mut self,
        default: D,
    ) -> Result<T, DecodeError> {
        if self.left == 0 {
            self.index += 1;
            return Ok(default.into());
        }
        self.present()
    }

    /// [`Fields::field_or_into`] with the field's constraints.
    pub fn field_or_into_in<T: Decode<'a, C> + Checked, D: Into<T>>(
        &mut self,
        default: D,
        bounds: &Bounds,
    ) -> Result<T, DecodeError> {
        if self.left == 0 {
            self.index += 1;
            return Ok(default.into());
        }
        let segment = self.segment();
        checked(self.present()?, bounds, segment)
    }

    /// A field without a default, and its constraints.
    pub fn field_in<T: Decode<'a, C> + Checked>(
        &mut self,
        bounds: &Bounds,
    ) -> Result<T, DecodeError> {
        let segment = self.segment();
        checked(self.field()?, bounds, segment)
    }

    /// A field with a default, and its constraints (a default satisfies them: the
    /// compiler checked it).
    pub fn field_or_in<T: Decode<'a, C> + Checked>(
        &mut self,
        default: T,
        bounds: &Bounds,
    ) -> Result<T, DecodeError> {
        if self.left == 0 {
            self.index += 1;
            return Ok(default);
        }
        let segment = self.segment();
        checked(self.present()?, bounds, segment)
    }

    /// Skip the fields this (older) schema does not know.
    fn end(&mut self) -> Result<(), DecodeError> {
        while self.left > 0 {
            self.left -= 1;
            self.d.reader.skip()?;
        }
        Ok(())
    }
}

fn checked<T: Checked>(value: T, bounds: &Bounds, at: Segment) -> Result<T, DecodeError> {
    match value.check(bounds) {
        Ok(()) => Ok(value),
        Err(violation) => Err(DecodeError::new(violation.decode).at(at)),
    }
}

/// The entries of a union value after its tag.
pub struct Variant<'r, 'a, 'm, C> {
    d: &'r mut Decoder<'a, 'm, C>,
    len: usize,
}

impl<'a, C> Variant<'_, 'a, '_, C> {
    /// A struct variant: its fields follow the tag.
    pub fn fields<T: Struct<'a, C>>(&mut self) -> Result<T, DecodeError> {
        if self.len < T::REQUIRED {
            return Err(DecodeError::new(format!(
                "Expected `array` of at least length {}, got {}",
                T::REQUIRED + 1,
                self.len + 1
            )));
        }
        let mut fields = Fields::new::<T>(self.d, self.len);
        let value = T::read_fields(&mut fields)?;
        fields.end()?;
        Ok(value)
    }

    /// Any other variant: its value follows the tag (path segment `.value`).
    pub fn value<T: Decode<'a, C>>(&mut self) -> Result<T, DecodeError> {
        if self.len < 1 {
            return Err(DecodeError::new(
                "Expected `array` of at least length 2, got 1",
            ));
        }
        let value = T::read(self.d).map_err(|e| e.at(Segment::Field("value")))?;
        for _ in 1..self.len {
            self.d.reader.skip()?;
        }
        Ok(value)
    }

    /// The error for a tag no variant has.
    pub fn unknown(&self, tag: Tag<'_>) -> DecodeError {
        invalid_tag(tag).at(Segment::Tag)
    }
}

// -- shared values ---------------------------------------------------------------------

impl<'a, C, T: Shared<'a, C>> Decode<'a, C> for Arc<T> {
    const EXPECTED: &'static str = T::EXPECTED;

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        match T::read_fresh(d)? {
            Fresh::Value(value) => {
                let value = Arc::new(value);
                T::table(&mut d.tables).push(value.clone());
                Ok(value)
            }
            Fresh::Ref(index) => {
                let table = T::table(&mut d.tables);
                let found = usize::try_from(index).ok().and_then(|i| table.get(i));
                found
                    .cloned()
                    .ok_or_else(|| bad_back_reference(T::NAME, index, table.len()))
            }
        }
    }
}

// -- built-in types --------------------------------------------------------------------

impl<'a, C> Decode<'a, C> for bool {
    const EXPECTED: &'static str = "bool";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        d.reader.bool()
    }
}

impl<'a, C> Decode<'a, C> for i64 {
    const EXPECTED: &'static str = "int";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        let value = d.reader.int()?;
        i64::try_from(value)
            .map_err(|_| DecodeError::new(format!("Expected `int` <= {}", i64::MAX)))
    }
}

/// A schema `int` constrained to `ge: 0`.
impl<'a, C> Decode<'a, C> for u64 {
    const EXPECTED: &'static str = "int";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        read_index(&mut d.reader)
    }
}

impl<'a, C> Decode<'a, C> for f64 {
    const EXPECTED: &'static str = "float";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        d.reader.float()
    }
}

impl<'a, C> Decode<'a, C> for String {
    const EXPECTED: &'static str = "str";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        d.reader.str().map(str::to_owned)
    }
}

/// Schema `bytes`: borrowed from the header.
impl<'a, C> Decode<'a, C> for Cow<'a, [u8]> {
    const EXPECTED: &'static str = "bytes";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        d.reader.bin().map(Cow::Borrowed)
    }
}

impl<'a, C, T: Decode<'a, C>> Decode<'a, C> for Option<T> {
    const EXPECTED: &'static str = T::EXPECTED;
    const LIST_EXPECTED: &'static str = T::OPTIONAL_LIST_EXPECTED;

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        if d.reader.nil()? {
            return Ok(None);
        }
        let kind = d.reader.peek_kind()?;
        if !accepts(T::EXPECTED, kind) {
            return Err(expected(&format!("{} | null", T::EXPECTED), kind));
        }
        T::read(d).map(Some)
    }

    fn read_list(d: &mut Decoder<'a, '_, C>) -> Result<Vec<Self>, DecodeError> {
        T::read_optional_list(d)
    }
}

/// Schema `list[T]` and `tuple[T, ...]`: rows, or what the item type reads instead
/// ([`Decode::read_list`]).
impl<'a, C, T: Decode<'a, C>> Decode<'a, C> for Vec<T> {
    const EXPECTED: &'static str = T::LIST_EXPECTED;

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        T::read_list(d)
    }
}

/// A list as an array of its items (rows).
pub fn read_rows<'a, C, T: Decode<'a, C>>(
    d: &mut Decoder<'a, '_, C>,
) -> Result<Vec<T>, DecodeError> {
    let n = d.reader.array()?;
    d.check_count(n)?;
    // Each item takes at least a byte of the header (the reader checked n against the
    // bytes left), so this reserves at most size_of::<T>() per header byte.
    let mut items = Vec::with_capacity(n);
    for index in 0..n {
        items.push(T::read(d).map_err(|e| e.at(Segment::Index(index)))?);
    }
    Ok(items)
}

/// A mapping key type (`str`, `int` or an enum): read and written as any value of its
/// type is, named in paths as Python's `repr` names the key.
pub trait MapKey: Sized + std::hash::Hash + Eq {
    /// The path segment of the entry this key names.
    fn segment(&self) -> Segment;
}

impl MapKey for String {
    fn segment(&self) -> Segment {
        Segment::str_key(self)
    }
}

impl MapKey for i64 {
    fn segment(&self) -> Segment {
        Segment::int_key(*self)
    }
}

/// A key as Python's `repr` shows the key a receiver refused (`'music'`, `7`, `None`),
/// when it is a value Python can key a dict with; the reader is left where it was.
fn key_shown(r: &Reader<'_>) -> Option<String> {
    let mut r = r.clone();
    match r.peek_kind().ok()? {
        Kind::Str => r.str().ok().map(python_repr),
        Kind::Int => r.int().ok().map(|i| i.to_string()),
        Kind::Bool => Some(if r.bool().ok()? { "True" } else { "False" }.to_string()),
        Kind::Nil => Some("None".to_string()),
        Kind::Float => r.float().ok().map(python_float_repr),
        Kind::Bin => r.bin().ok().map(python_bytes_repr),
        _ => None,
    }
}

/// A refused key's error: at the key itself when Python could name it, else at `key`.
fn key_error(e: DecodeError, shown: Option<String>) -> DecodeError {
    match shown {
        Some(shown) => DecodeError::new(e.message()).at(Segment::KeyItself(shown)),
        None => DecodeError::new(format!("{} - at `key`", e.message())),
    }
}

/// Schema `dict[K, V]` and mapping types: entries in the sender's order; a repeated key
/// keeps its first position and its last value, as a Python dict built from them does.
/// A refused key is named as the Python side names it: `$.table['music'] (key)`.
impl<'a, C, K: MapKey + Decode<'a, C>, V: Decode<'a, C>> Decode<'a, C> for IndexMap<K, V> {
    const EXPECTED: &'static str = "object";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        let n = d.reader.map()?;
        d.check_count(n)?;
        let mut entries = IndexMap::with_capacity(n); // two header bytes per entry at least
        for _ in 0..n {
            let shown = key_shown(&d.reader);
            let key = K::read(d).map_err(|e| key_error(e, shown))?;
            let value = V::read(d).map_err(|e| e.at(key.segment()))?;
            entries.insert(key, value);
        }
        Ok(entries)
    }
}

macro_rules! tuple_decode {
    ($len:literal: $($name:ident $index:tt),+) => {
        /// Schema `tuple[A, B, ...]`: exactly that many items.
        impl<'a, C, $($name: Decode<'a, C>),+> Decode<'a, C> for ($($name,)+) {
            const EXPECTED: &'static str = "array";

            fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
                let n = d.reader.array()?;
                if n != $len {
                    return Err(DecodeError::new(format!(
                        "Expected `array` of length {}, got {n}", $len
                    )));
                }
                Ok(($($name::read(d).map_err(|e| e.at(Segment::Index($index)))?,)+))
            }
        }
    };
}

tuple_decode!(1: A 0);
tuple_decode!(2: A 0, B 1);
tuple_decode!(3: A 0, B 1, D 2);
tuple_decode!(4: A 0, B 1, D 2, E 3);
tuple_decode!(5: A 0, B 1, D 2, E 3, F 4);
tuple_decode!(6: A 0, B 1, D 2, E 3, F 4, G 5);
tuple_decode!(7: A 0, B 1, D 2, E 3, F 4, G 5, H 6);
tuple_decode!(8: A 0, B 1, D 2, E 3, F 4, G 5, H 6, I 7);

/// Schema `tensor`: a reference to one of the message's tensors.
impl<'a, C> Decode<'a, C> for Tensor<'a> {
    const EXPECTED: &'static str = "int";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        let reference = read_index(&mut d.reader)?;
        d.tensor(reference)
    }
}

/// Schema `nested_tensors`: a bare int is a tensor reference, a float a leaf; an int leaf
/// is `[0, value]`, a list `[1, items]`, a tuple `[2, items]`.
impl<'a, C> Decode<'a, C> for NestedTensors<'a> {
    const EXPECTED: &'static str = "int | float | array";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        read_nested(d, 0)
    }
}

fn read_nested<'a, C>(
    d: &mut Decoder<'a, '_, C>,
    depth: usize,
) -> Result<NestedTensors<'a>, DecodeError> {
    match d.reader.peek_kind()? {
        Kind::Int => return Tensor::read(d).map(NestedTensors::Tensor),
        Kind::Float => return d.reader.float().map(NestedTensors::Float),
        Kind::Array => {}
        kind => return Err(expected("int | float | array", kind)),
    }
    let n = d.reader.array()?;
    if n == 0 {
        return Err(DecodeError::new(
            "Expected `array` of at least length 1, got 0",
        ));
    }
    let tag = d.reader.int().map_err(|e| e.at(Segment::Tag))?;
    if !(0..=2).contains(&tag) {
        return Err(DecodeError::new(format!("Invalid value {tag}")).at(Segment::Tag));
    }
    if n < 2 {
        return Err(DecodeError::new(
            "Expected `array` of at least length 2, got 1",
        ));
    }
    let value = if tag == 0 {
        NestedTensors::Int(i64::read(d).map_err(|e| e.at(Segment::Field("value")))?)
    } else {
        if depth >= d.limits.max_depth {
            return Err(DecodeError::new(format!(
                "nested tensors deeper than {} levels",
                d.limits.max_depth
            )));
        }
        let count = d.reader.array()?;
        d.check_count(count)?;
        let mut items = Vec::with_capacity(count);
        for index in 0..count {
            items.push(read_nested(d, depth + 1).map_err(|e| e.at(Segment::Index(index)))?);
        }
        if tag == 1 {
            NestedTensors::List(items)
        } else {
            NestedTensors::Tuple(items)
        }
    };
    for _ in 2..n {
        d.reader.skip()?;
    }
    Ok(value)
}

/// Schema `slice`: `[start, stop, step]`, each an int or nil.
impl<'a, C> Decode<'a, C> for Slice {
    const EXPECTED: &'static str = "array";

    fn read(d: &mut Decoder<'a, '_, C>) -> Result<Self, DecodeError> {
        let n = d.reader.array()?;
        if n < 2 {
            return Err(DecodeError::new(format!(
                "Expected `array` of at least length 2, got {n}"
            )));
        }
        let mut bound = |name: &'static str| -> Result<Option<i64>, DecodeError> {
            if d.reader.nil()? {
                return Ok(None);
            }
            match d.reader.peek_kind()? {
                Kind::Int => i64::read(d).map(Some),
                kind => Err(expected("int | null", kind)),
            }
            .map_err(|e| e.at(Segment::Field(name)))
        };
        let start = bound("start")?;
        let stop = bound("stop")?;
        let step = if n > 2 { bound("step")? } else { None };
        for _ in 3..n {
            d.reader.skip()?;
        }
        Ok(Slice { start, stop, step })
    }
}
