//! Whole messages: the envelope around a body, the payload frames, the single buffer.
//!
//! Frame 0 is the header, a msgpack array `[magic, wire version, schema, major version,
//! root type, tensor runs, reference table, body]`; payload frames follow. Decoding checks
//! the frames against the limits, the header's msgpack as a whole, the message's identity,
//! every tensor run, and only then reads the body, making tensors as views of the frames.

use std::io::{self, IoSlice, Write};

use crate::decode::{Decode, Decoder};
use crate::encode::{Encode, Encoder};
use crate::error::{python_repr, DecodeError, EncodeError};
use crate::framing;
use crate::limits::Limits;
use crate::msgpack::{check_well_formed, write, Reader};
use crate::plan::{plan, RunData, DEFAULT_INLINE_THRESHOLD};
use crate::runs::TensorTable;

/// The envelope's first entry.
pub const MAGIC: &str = "mmc";
/// The newest version of the wire format, the Python runtime's: version 2 and column
/// lists ([`crate::columns`]). An encoder writes the oldest version that holds its
/// message: 3 when it wrote a column list, else [`ROWS_WIRE_VERSION`], which decoders of
/// version 2 read too. A decoder reads both.
pub const WIRE_VERSION: u64 = 3;
/// The version of messages without column lists.
pub const ROWS_WIRE_VERSION: u64 = 2;

/// A named type of a schema: a value that can be the root of a message.
pub trait Message<'a>: Decode<'a, Self::Context> + Encode<'a> {
    /// The schema's name (its identity on the wire).
    const SCHEMA: &'static str;
    /// The schema's major version.
    const MAJOR: u64;
    /// The type's name in the schema.
    const NAME: &'static str;
    /// Per shared type, the values of one message (the root module's `Context`).
    type Context: Default;
}

/// An encoded message: the header and payload frames that view the encoded value's
/// tensor memory (nothing is copied; the value's tensors must outlive the frames, which
/// the borrow checker enforces).
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    header: Vec<u8>,
    payloads: Vec<&'a [u8]>,
}

impl<'a> Frames<'a> {
    /// Frame 0, the msgpack header.
    pub fn header(&self) -> &[u8] {
        &self.header
    }

    /// Frames 1..: tensor payloads, slices of the encoded tensors' memory.
    pub fn payloads(&self) -> &[&'a [u8]] {
        &self.payloads
    }

    /// The number of frames, the header included.
    pub fn len(&self) -> usize {
        1 + self.payloads.len()
    }

    /// Never true: a message has its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Every frame, the header first (an iovec for `write_vectored`, a ZMQ multipart).
    pub fn slices(&self) -> Vec<&[u8]> {
        let mut out = Vec::with_capacity(self.len());
        out.push(&self.header[..]);
        out.extend(self.payloads.iter().copied());
        out
    }

    /// Every frame as an [`IoSlice`], for vectored writes.
    pub fn io_slices(&self) -> Vec<IoSlice<'_>> {
        self.slices().into_iter().map(IoSlice::new).collect()
    }

    /// The message as one buffer: a frame table, then payloads at 64-byte aligned offsets
    /// (what the Python runtime's `encode_bytes` returns and `decode_bytes` reads).
    pub fn to_bytes(&self) -> Vec<u8> {
        framing::join(&self.slices())
    }

    /// Write [`Frames::to_bytes`]'s bytes to `out` without building the buffer.
    pub fn write_bytes<W: Write>(&self, out: &mut W) -> io::Result<()> {
        framing::write_joined(&self.slices(), out)
    }
}

/// How to encode: the receiver's limits (checked at the sender) and the inline threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Payloads (per storage region) below this many bytes travel inside the header.
    pub inline_threshold: usize,
    /// The receiver's limits: what it would reject fails here instead.
    pub limits: Limits,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            inline_threshold: DEFAULT_INLINE_THRESHOLD,
            limits: Limits::DEFAULT,
        }
    }
}

/// Encode `value` into frames: the header, then payloads that view its tensors' memory.
pub fn encode<'a, T: Message<'a>>(value: &T) -> Result<Frames<'a>, EncodeError> {
    encode_with(value, &EncodeOptions::default())
}

/// [`encode`] with options.
pub fn encode_with<'a, T: Message<'a>>(
    value: &T,
    options: &EncodeOptions,
) -> Result<Frames<'a>, EncodeError> {
    let mut encoder = Encoder::new(&options.limits);
    value.write(&mut encoder)?;
    let (body, tensors, columns) = encoder.finish();
    let version = if columns {
        WIRE_VERSION
    } else {
        ROWS_WIRE_VERSION
    };
    let plan = plan(&tensors, options.inline_threshold);
    let mut header = Vec::with_capacity(64 + 32 * plan.runs.len() + body.len());
    write::array(&mut header, 8);
    write::str(&mut header, MAGIC);
    write::uint(&mut header, version);
    write::str(&mut header, T::SCHEMA);
    write::uint(&mut header, T::MAJOR);
    write::str(&mut header, T::NAME);
    write::array(&mut header, plan.runs.len());
    for run in &plan.runs {
        write::array(&mut header, 5);
        write::str(&mut header, run.dtype.name());
        write::array(&mut header, run.shape.len());
        for &dim in run.shape.iter() {
            write::uint(&mut header, dim);
        }
        match run.data {
            RunData::Frame(index) => write::uint(&mut header, index as u64),
            RunData::Inline(bytes) => write::bin(&mut header, bytes),
        }
        write::uint(&mut header, run.offset as u64);
        write::uint(&mut header, run.count as u64);
    }
    write::array(&mut header, plan.refs.len());
    for &position in &plan.refs {
        write::uint(&mut header, position as u64);
    }
    header.extend_from_slice(&body);
    let frames = Frames {
        header,
        payloads: plan.frames,
    };
    framing::check_sending(&frames.slices(), &options.limits)?;
    Ok(frames)
}

/// Encode `value` into one buffer (see [`Frames::to_bytes`]): one copy of every payload.
pub fn encode_bytes<'a, T: Message<'a>>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let frames = encode(value)?;
    let limits = Limits::DEFAULT;
    let size = framing::joined_len(&frames.slices());
    if size as u64 > limits.max_total_bytes {
        return Err(EncodeError::new(format!(
            "buffer of {size} bytes exceeds the receiver's limit of {} (max_total_bytes)",
            limits.max_total_bytes
        )));
    }
    Ok(frames.to_bytes())
}

/// Decode a `T` from frames (the header first). Tensors are views of the frames.
///
/// Any input gives a value or a [`DecodeError`]; nothing panics, and work and memory are
/// proportional to the input.
pub fn decode<'a, T: Message<'a>>(frames: &[&'a [u8]]) -> Result<T, DecodeError> {
    decode_with(frames, &Limits::DEFAULT)
}

/// [`decode`] with the caller's limits.
pub fn decode_with<'a, T: Message<'a>>(
    frames: &[&'a [u8]],
    limits: &Limits,
) -> Result<T, DecodeError> {
    framing::check_frames(frames, limits)?;
    let header = frames[0];
    check_well_formed(header, limits.max_nesting).map_err(|e| {
        if e.message() == "message nested too deeply" {
            e
        } else {
            not_a_header(&e, "")
        }
    })?;
    let mut reader = Reader::new(header);
    read_identity::<T>(&mut reader)?;
    let tensors = TensorTable::read(&mut reader, frames, limits)?;
    let mut decoder = Decoder::new(reader, &tensors, limits, T::Context::default());
    let result = T::read(&mut decoder);
    if let Some(failure) = tensors.failure() {
        // The body was read only to name the first value that uses the bad run.
        return Err(match result {
            Ok(_) => DecodeError::new(format!("{failure}, used by no value")),
            Err(error) => error,
        });
    }
    let value = result?;
    if decoder.reader_position().1 != 0 {
        // The envelope was checked to be the whole header and the body is its last entry.
        return Err(DecodeError::new("malformed header"));
    }
    Ok(value)
}

/// Decode a `T` from one buffer (see [`Frames::to_bytes`]): frames are slices of it.
pub fn decode_bytes<'a, T: Message<'a>>(buffer: &'a [u8]) -> Result<T, DecodeError> {
    decode_bytes_with(buffer, &Limits::DEFAULT)
}

/// [`decode_bytes`] with the caller's limits.
pub fn decode_bytes_with<'a, T: Message<'a>>(
    buffer: &'a [u8],
    limits: &Limits,
) -> Result<T, DecodeError> {
    let frames = framing::split(buffer, limits)?;
    decode_with(&frames, limits)
}

fn not_a_header(error: &DecodeError, at: &str) -> DecodeError {
    let location = if at.is_empty() {
        String::new()
    } else {
        format!(" - at `{at}`")
    };
    DecodeError::new(format!(
        "frame 0 is not an mmcodec header ({}{location})",
        error.message()
    ))
}

/// The envelope's first five entries: this format, this schema and version, this type.
fn read_identity<'a, T: Message<'a>>(r: &mut Reader<'a>) -> Result<(), DecodeError> {
    let n = r.array().map_err(|e| not_a_header(&e, ""))?;
    if n < 5 {
        let e = DecodeError::new(format!("Expected `array` of at least length 5, got {n}"));
        return Err(not_a_header(&e, ""));
    }
    let magic = r.str().map_err(|e| not_a_header(&e, "$[0]"))?;
    let version = r.int().map_err(|e| not_a_header(&e, "$[1]"))?;
    let schema = r.str().map_err(|e| not_a_header(&e, "$[2]"))?;
    let major = r.int().map_err(|e| not_a_header(&e, "$[3]"))?;
    let root = r.str().map_err(|e| not_a_header(&e, "$[4]"))?;
    if magic != MAGIC {
        return Err(DecodeError::new(format!(
            "frame 0 is not an mmcodec header (magic {})",
            python_repr(magic)
        )));
    }
    if !(i128::from(ROWS_WIRE_VERSION)..=i128::from(WIRE_VERSION)).contains(&version) {
        return Err(DecodeError::new(format!(
            "wire format version {version} is not supported (this decoder reads versions \
             {ROWS_WIRE_VERSION} to {WIRE_VERSION})"
        )));
    }
    if schema != T::SCHEMA || major != i128::from(T::MAJOR) {
        return Err(DecodeError::new(format!(
            "message is from schema {} major version {major}; this decoder reads schema {} \
             major version {}",
            python_repr(schema),
            python_repr(T::SCHEMA),
            T::MAJOR
        )));
    }
    if root != T::NAME {
        return Err(DecodeError::new(format!(
            "message holds a {root}, not a {}",
            T::NAME
        )));
    }
    if n != 8 {
        let bound = if n > 8 { "at most" } else { "at least" };
        return Err(DecodeError::new(format!(
            "malformed envelope: Expected `array` of {bound} length 8, got {n}"
        )));
    }
    Ok(())
}
