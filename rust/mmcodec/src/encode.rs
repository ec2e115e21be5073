//! Encoding typed values into a message body, collecting the tensors it references.
//!
//! Generated code implements [`Encode`] for every schema type through the helpers here
//! ([`Encoder::write_struct`], [`Encoder::struct_variant`], ...); the built-in types are
//! implemented here. A value the schema shares (an [`Arc`] of a struct or union) is written
//! once per message: a later occurrence of the same `Arc` is a back-reference, numbered as
//! the Python encoder numbers them, so that both sides write the same bytes. A tensor is
//! written as a reference number; the same tensor (the same bytes in the same layout)
//! referenced twice has one number and travels once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::constraints::{Bounds, Checked};
use crate::decode::{MapKey, StructFields, Tag};
use crate::dtype::Dtype;
use crate::enums::{write_int_enum, write_str_enum, IntEnum, StrEnum};
use crate::error::{EncodeError, Segment};
use crate::limits::Limits;
use crate::msgpack::write;
use crate::tensor::{NestedTensors, Slice, Tensor};

/// A value of the schema that can be written to a message.
pub trait Encode<'a> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError>;

    /// A `list[Self]`: its items in an array (rows), unless the type says otherwise.
    fn write_list(items: &[Self], e: &mut Encoder<'a>) -> Result<(), EncodeError>
    where
        Self: Sized,
    {
        write_rows(items, e)
    }

    /// A `list[optional[Self]]`: its items in an array (rows), unless the type says
    /// otherwise.
    fn write_optional_list(items: &[Option<Self>], e: &mut Encoder<'a>) -> Result<(), EncodeError>
    where
        Self: Sized,
    {
        write_rows(items, e)
    }
}

/// A list as an array of its items (rows).
pub fn write_rows<'a, T: Encode<'a>>(items: &[T], e: &mut Encoder<'a>) -> Result<(), EncodeError> {
    e.check_count(items.len())?;
    write::array(&mut e.out, items.len());
    for (index, item) in items.iter().enumerate() {
        item.write(e).map_err(|err| err.at(Segment::Index(index)))?;
    }
    Ok(())
}

/// A struct of the schema, written as an array of its fields.
pub trait StructEncode<'a>: StructFields {
    fn write_fields(&self, w: &mut FieldWriter<'_, 'a>) -> Result<(), EncodeError>;
}

/// The fields of a struct being written, in order.
pub struct FieldWriter<'r, 'a> {
    e: &'r mut Encoder<'a>,
    index: usize,
    names: fn(usize) -> &'static str,
}

impl<'a> FieldWriter<'_, 'a> {
    fn segment(&self) -> Segment {
        Segment::Field((self.names)(self.index))
    }

    /// The next field.
    pub fn field<T: Encode<'a>>(&mut self, value: &T) -> Result<(), EncodeError> {
        let result = value.write(self.e).map_err(|err| err.at(self.segment()));
        self.index += 1;
        result
    }

    /// The next field, checked against its constraints first.
    pub fn field_in<T: Encode<'a> + Checked>(
        &mut self,
        value: &T,
        bounds: &Bounds,
    ) -> Result<(), EncodeError> {
        if let Err(violation) = value.check(bounds) {
            return Err(EncodeError::new(violation.encode).at(self.segment()));
        }
        self.field(value)
    }
}

/// How a later occurrence of a shared value refers back to the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefForm {
    /// A struct's: a bare int.
    Index,
    /// An int-tagged union's: `[-1, index]`.
    IntTag,
    /// A str-tagged union's: `["@ref", index]`.
    StrTag,
}

/// A type whose values travel once per message (see [`crate::decode::Shared`]).
pub trait SharedEncode<'a>: Encode<'a> {
    /// Unique across schemas: `"schema.Type"`. Each type numbers its own values.
    const KEY: &'static str;
    const REF: RefForm;
}

/// Identity of a tensor for deduplication: where its bytes are and how they are read.
#[derive(Clone, PartialEq, Eq, Hash)]
struct TensorKey {
    address: usize,
    nbytes: usize,
    dtype: Dtype,
    shape: Arc<[u64]>,
}

/// The state of one encode: the body written so far, the tensors it references, and per
/// shared type the values written so far.
pub struct Encoder<'a> {
    pub(crate) out: Vec<u8>,
    tensors: Vec<Tensor<'a>>,
    tensor_refs: HashMap<TensorKey, u64>,
    pub(crate) shared: HashMap<(&'static str, usize), u64>,
    pub(crate) counts: HashMap<&'static str, u64>,
    pub(crate) limits: Limits,
    /// Whether a list was written as a column list (the message is then wire version 3).
    pub(crate) columns_used: bool,
    /// Whether a tensor was refused (the Python encoder finds those in the order tensors
    /// are met, column lists included; any other refusal in the order rows meet values).
    pub(crate) tensor_refused: bool,
}

impl<'a> Encoder<'a> {
    pub(crate) fn new(limits: &Limits) -> Self {
        Encoder {
            out: Vec::with_capacity(256),
            tensors: Vec::new(),
            tensor_refs: HashMap::new(),
            shared: HashMap::new(),
            counts: HashMap::new(),
            limits: limits.clone(),
            columns_used: false,
            tensor_refused: false,
        }
    }

    /// The body, the tensors it references, and whether it holds a column list.
    pub(crate) fn finish(self) -> (Vec<u8>, Vec<Tensor<'a>>, bool) {
        (self.out, self.tensors, self.columns_used)
    }

    /// The body's bytes so far (built-in types write themselves here).
    pub fn out(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// A struct: the array of its fields.
    pub fn write_struct<T: StructEncode<'a>>(&mut self, value: &T) -> Result<(), EncodeError> {
        match T::TAG {
            Some(tag) => self.struct_variant(tag, value),
            None => {
                write::array(&mut self.out, T::COUNT);
                self.fields(value)
            }
        }
    }

    fn fields<T: StructEncode<'a>>(&mut self, value: &T) -> Result<(), EncodeError> {
        let mut writer = FieldWriter {
            e: self,
            index: 0,
            names: T::field_name,
        };
        value.write_fields(&mut writer)
    }

    fn tag(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Int(i) => write::int(&mut self.out, i),
            Tag::Str(s) => write::str(&mut self.out, s),
        }
    }

    /// A union's struct variant: the tag, then the struct's fields.
    pub fn struct_variant<T: StructEncode<'a>>(
        &mut self,
        tag: Tag<'_>,
        value: &T,
    ) -> Result<(), EncodeError> {
        write::array(&mut self.out, T::COUNT + 1);
        self.tag(tag);
        self.fields(value)
    }

    /// A union's other variants: the tag, then the value.
    pub fn value_variant<T: Encode<'a>>(
        &mut self,
        tag: Tag<'_>,
        value: &T,
    ) -> Result<(), EncodeError> {
        write::array(&mut self.out, 2);
        self.tag(tag);
        value.write(self)
    }

    /// A member of an int enum of the schema, written as its value.
    pub fn write_int_enum<T: IntEnum>(&mut self, member: T) -> Result<(), EncodeError> {
        write_int_enum(&mut self.out, member);
        Ok(())
    }

    /// A member of a str enum of the schema, written as its value.
    pub fn write_str_enum<T: StrEnum>(&mut self, member: T) -> Result<(), EncodeError> {
        write_str_enum(&mut self.out, member);
        Ok(())
    }

    /// The reference number of `tensor` in this message (the same for the same tensor),
    /// failing as the receiver's decoder would.
    pub fn tensor(&mut self, tensor: &Tensor<'a>) -> Result<u64, EncodeError> {
        let key = TensorKey {
            address: tensor.data().as_ptr() as usize,
            nbytes: tensor.nbytes(),
            dtype: tensor.dtype(),
            shape: tensor.shape().into(),
        };
        if let Some(&reference) = self.tensor_refs.get(&key) {
            return Ok(reference);
        }
        if let Err(error) = self.check_tensor(tensor) {
            self.tensor_refused = true;
            return Err(error);
        }
        let reference = self.tensors.len() as u64;
        self.tensor_refs.insert(key, reference);
        self.tensors.push(tensor.clone());
        Ok(reference)
    }

    /// What the receiver's decoder would refuse of a tensor new to the message.
    fn check_tensor(&self, tensor: &Tensor<'a>) -> Result<(), EncodeError> {
        let (most, name) = if self.limits.max_elements < self.limits.max_tensors {
            (self.limits.max_elements, "max_elements")
        } else {
            (self.limits.max_tensors, "max_tensors")
        };
        if self.tensors.len() >= most {
            return Err(EncodeError::new(format!(
                "a message of more than {most} tensors exceeds the receiver's limit ({name})"
            )));
        }
        if tensor.ndim() > self.limits.max_ndim {
            return Err(EncodeError::new(format!(
                "{} dimensions exceed the receiver's limit of {} (max_ndim)",
                tensor.ndim(),
                self.limits.max_ndim
            )));
        }
        if tensor.dtype() == Dtype::Bool && crate::dtype::non_boolean(tensor.data()) {
            return Err(EncodeError::new(
                "bool tensor holds a byte other than 0 and 1",
            ));
        }
        Ok(())
    }

    pub(crate) fn check_count(&self, n: usize) -> Result<(), EncodeError> {
        if n > self.limits.max_elements {
            return Err(EncodeError::new(format!(
                "{n} elements exceed the receiver's limit of {} (max_elements)",
                self.limits.max_elements
            )));
        }
        Ok(())
    }
}

/// A shared value: in full the first time this `Arc` is met, as a back-reference after.
impl<'a, T: SharedEncode<'a>> Encode<'a> for Arc<T> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        let identity = (T::KEY, Arc::as_ptr(self) as usize);
        if let Some(&index) = e.shared.get(&identity) {
            match T::REF {
                RefForm::Index => write::uint(&mut e.out, index),
                RefForm::IntTag => {
                    write::array(&mut e.out, 2);
                    write::int(&mut e.out, -1);
                    write::uint(&mut e.out, index);
                }
                RefForm::StrTag => {
                    write::array(&mut e.out, 2);
                    write::str(&mut e.out, "@ref");
                    write::uint(&mut e.out, index);
                }
            }
            return Ok(());
        }
        (**self).write(e)?;
        // Numbered after its fields, in the order the decoder meets values.
        let count = e.counts.entry(T::KEY).or_insert(0);
        e.shared.insert(identity, *count);
        *count += 1;
        Ok(())
    }
}

// -- built-in types --------------------------------------------------------------------

impl<'a> Encode<'a> for bool {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write::bool(&mut e.out, *self);
        Ok(())
    }
}

impl<'a> Encode<'a> for i64 {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write::int(&mut e.out, *self);
        Ok(())
    }
}

impl<'a> Encode<'a> for u64 {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write::uint(&mut e.out, *self);
        Ok(())
    }
}

impl<'a> Encode<'a> for f64 {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write::float(&mut e.out, *self);
        Ok(())
    }
}

impl<'a> Encode<'a> for String {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write::str(&mut e.out, self);
        Ok(())
    }
}

impl<'a> Encode<'a> for Cow<'_, [u8]> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write::bin(&mut e.out, self);
        Ok(())
    }
}

impl<'a, T: Encode<'a>> Encode<'a> for Option<T> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        match self {
            Some(value) => value.write(e),
            None => {
                write::nil(&mut e.out);
                Ok(())
            }
        }
    }

    fn write_list(items: &[Self], e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        T::write_optional_list(items, e)
    }
}

/// Schema `list[T]` and `tuple[T, ...]`: rows, or what the item type writes instead
/// ([`Encode::write_list`]).
impl<'a, T: Encode<'a>> Encode<'a> for Vec<T> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        T::write_list(self, e)
    }
}

/// Schema `dict[K, V]` and mapping types, in the map's order.
impl<'a, K: MapKey + Encode<'a>, V: Encode<'a>> Encode<'a> for IndexMap<K, V> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        e.check_count(self.len())?;
        write::map(&mut e.out, self.len());
        for (key, value) in self {
            key.write(e)?; // a str, an int or an enum member: nothing to refuse
            value.write(e).map_err(|err| err.at(key.segment()))?;
        }
        Ok(())
    }
}

macro_rules! tuple_encode {
    ($len:literal: $($name:ident $index:tt),+) => {
        impl<'a, $($name: Encode<'a>),+> Encode<'a> for ($($name,)+) {
            fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
                write::array(&mut e.out, $len);
                $(self.$index.write(e).map_err(|err| err.at(Segment::Index($index)))?;)+
                Ok(())
            }
        }
    };
}

tuple_encode!(1: A 0);
tuple_encode!(2: A 0, B 1);
tuple_encode!(3: A 0, B 1, D 2);
tuple_encode!(4: A 0, B 1, D 2, E 3);
tuple_encode!(5: A 0, B 1, D 2, E 3, F 4);
tuple_encode!(6: A 0, B 1, D 2, E 3, F 4, G 5);
tuple_encode!(7: A 0, B 1, D 2, E 3, F 4, G 5, H 6);
tuple_encode!(8: A 0, B 1, D 2, E 3, F 4, G 5, H 6, I 7);

impl<'a> Encode<'a> for Tensor<'a> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        let reference = e.tensor(self)?;
        write::uint(&mut e.out, reference);
        Ok(())
    }
}

impl<'a> Encode<'a> for NestedTensors<'a> {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write_nested(self, e, 0)
    }
}

fn write_nested<'a>(
    value: &NestedTensors<'a>,
    e: &mut Encoder<'a>,
    depth: usize,
) -> Result<(), EncodeError> {
    let (tag, items) = match value {
        NestedTensors::Tensor(tensor) => return tensor.write(e),
        NestedTensors::Float(f) => return f.write(e),
        NestedTensors::Int(i) => {
            write::array(&mut e.out, 2);
            write::uint(&mut e.out, 0);
            return i.write(e);
        }
        NestedTensors::List(items) => (1, items),
        NestedTensors::Tuple(items) => (2, items),
    };
    if depth >= e.limits.max_depth {
        return Err(EncodeError::new(format!(
            "nested tensors deeper than {} levels",
            e.limits.max_depth
        )));
    }
    e.check_count(items.len())?;
    write::array(&mut e.out, 2);
    write::uint(&mut e.out, tag);
    write::array(&mut e.out, items.len());
    for (index, item) in items.iter().enumerate() {
        write_nested(item, e, depth + 1).map_err(|err| err.at(Segment::Index(index)))?;
    }
    Ok(())
}

impl<'a> Encode<'a> for Slice {
    fn write(&self, e: &mut Encoder<'a>) -> Result<(), EncodeError> {
        write::array(&mut e.out, 3);
        for bound in [self.start, self.stop, self.step] {
            match bound {
                Some(value) => write::int(&mut e.out, value),
                None => write::nil(&mut e.out),
            }
        }
        Ok(())
    }
}
