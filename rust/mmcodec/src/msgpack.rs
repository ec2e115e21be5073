//! The subset of MessagePack the wire uses, read from a borrowed buffer and written to a
//! `Vec<u8>`.
//!
//! Reading never panics and never allocates: every length is checked against the bytes
//! that remain before anything is taken, strings and binaries are borrowed from the input,
//! and [`Reader::skip`] walks nested values with a counter instead of recursion. Errors
//! are worded as msgspec words them (`` Expected `int`, got `str` ``), so that a message
//! rejected on either side reads the same.
//!
//! Writing chooses the smallest encoding of every value, as msgspec does; floats are
//! always 64-bit. The wire is therefore byte-identical to what the Python runtime writes
//! for the same values.

use crate::error::DecodeError;

/// What a msgpack value is, by its first byte; named as msgspec names types in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Nil,
    Bool,
    Int,
    Float,
    Str,
    Bin,
    Array,
    Map,
    Ext,
}

impl Kind {
    /// msgspec's name of the kind as its msgpack decoder words it (a map is an `object`,
    /// nil is `None`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nil => "None",
            Kind::Bool => "bool",
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::Str => "str",
            Kind::Bin => "bytes",
            Kind::Array => "array",
            Kind::Map => "object",
            Kind::Ext => "ext",
        }
    }
}

/// The kind a marker byte starts, or None for the one byte msgpack reserves (0xc1).
fn kind_of(marker: u8) -> Option<Kind> {
    Some(match marker {
        0x00..=0x7f | 0xcc..=0xd3 | 0xe0..=0xff => Kind::Int,
        0x80..=0x8f | 0xde | 0xdf => Kind::Map,
        0x90..=0x9f | 0xdc | 0xdd => Kind::Array,
        0xa0..=0xbf | 0xd9..=0xdb => Kind::Str,
        0xc0 => Kind::Nil,
        0xc2 | 0xc3 => Kind::Bool,
        0xc4..=0xc6 => Kind::Bin,
        0xc7..=0xc9 | 0xd4..=0xd8 => Kind::Ext,
        0xca | 0xcb => Kind::Float,
        0xc1 => return None,
    })
}

/// "Expected `what`, got `kind`", msgspec's type error.
pub fn expected(what: &str, found: Kind) -> DecodeError {
    DecodeError::new(format!("Expected `{what}`, got `{}`", found.name()))
}

/// msgspec's error for input that ends inside a value.
pub fn truncated() -> DecodeError {
    DecodeError::new("Input data was truncated")
}

/// A cursor over msgpack bytes borrowed for `'a`.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The buffer being read (all of it).
    pub fn buffer(&self) -> &'a [u8] {
        self.buf
    }

    fn marker(&self) -> Result<u8, DecodeError> {
        self.buf.get(self.pos).copied().ok_or_else(truncated)
    }

    /// The kind of the next value, without reading it.
    pub fn peek_kind(&self) -> Result<Kind, DecodeError> {
        let marker = self.marker()?;
        kind_of(marker).ok_or_else(|| invalid_opcode(marker, self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(truncated());
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    /// A length prefix that cannot ask for more items than bytes remain (each item takes
    /// at least one byte): a forged count fails here, before anything is allocated.
    fn count(&mut self, n: usize, per_item: usize) -> Result<usize, DecodeError> {
        let count = self.be(n)? as usize;
        if count.saturating_mul(per_item) > self.remaining() {
            return Err(truncated());
        }
        Ok(count)
    }

    /// Consumes a nil and returns true; anything else is left unread and gives false.
    pub fn nil(&mut self) -> Result<bool, DecodeError> {
        if self.marker()? == 0xc0 {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.marker()? {
            0xc2 => {
                self.pos += 1;
                Ok(false)
            }
            0xc3 => {
                self.pos += 1;
                Ok(true)
            }
            _ => Err(expected("bool", self.peek_kind()?)),
        }
    }

    /// An int of any width: msgpack ints span int64 and uint64, so the value is an i128.
    pub fn int(&mut self) -> Result<i128, DecodeError> {
        let marker = self.marker()?;
        let value = match marker {
            0x00..=0x7f => i128::from(marker),
            0xe0..=0xff => i128::from(marker as i8),
            0xcc..=0xcf => {
                self.pos += 1;
                return Ok(i128::from(self.be(1 << (marker - 0xcc))?));
            }
            0xd0..=0xd3 => {
                self.pos += 1;
                let width = 1usize << (marker - 0xd0);
                let raw = self.be(width)?;
                let shift = 64 - 8 * width as u32;
                return Ok(i128::from(((raw << shift) as i64) >> shift));
            }
            _ => return Err(expected("int", self.peek_kind()?)),
        };
        self.pos += 1;
        Ok(value)
    }

    /// A float; an int is accepted too and converted, as msgspec accepts it for `float`.
    pub fn float(&mut self) -> Result<f64, DecodeError> {
        match self.marker()? {
            0xca => {
                self.pos += 1;
                Ok(f64::from(f32::from_bits(self.be(4)? as u32)))
            }
            0xcb => {
                self.pos += 1;
                Ok(f64::from_bits(self.be(8)?))
            }
            _ if self.peek_kind()? == Kind::Int => Ok(self.int()? as f64),
            _ => Err(expected("float", self.peek_kind()?)),
        }
    }

    /// A string, borrowed from the input; it must be UTF-8.
    pub fn str(&mut self) -> Result<&'a str, DecodeError> {
        let marker = self.marker()?;
        let len = match marker {
            0xa0..=0xbf => {
                self.pos += 1;
                usize::from(marker & 0x1f)
            }
            0xd9..=0xdb => {
                self.pos += 1;
                self.count(1 << (marker - 0xd9), 1)?
            }
            _ => return Err(expected("str", self.peek_kind()?)),
        };
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| DecodeError::new("Expected `str` of valid UTF-8"))
    }

    /// A binary, borrowed from the input.
    pub fn bin(&mut self) -> Result<&'a [u8], DecodeError> {
        let marker = self.marker()?;
        let len = match marker {
            0xc4..=0xc6 => {
                self.pos += 1;
                self.count(1 << (marker - 0xc4), 1)?
            }
            _ => return Err(expected("bytes", self.peek_kind()?)),
        };
        self.take(len)
    }

    /// The length of an array (its items follow).
    pub fn array(&mut self) -> Result<usize, DecodeError> {
        let marker = self.marker()?;
        match marker {
            0x90..=0x9f => {
                self.pos += 1;
                Ok(usize::from(marker & 0x0f))
            }
            0xdc | 0xdd => {
                self.pos += 1;
                self.count(2 << (marker - 0xdc), 1)
            }
            _ => Err(expected("array", self.peek_kind()?)),
        }
    }

    /// The number of entries of a map (keys and values follow, alternating).
    pub fn map(&mut self) -> Result<usize, DecodeError> {
        let marker = self.marker()?;
        match marker {
            0x80..=0x8f => {
                self.pos += 1;
                Ok(usize::from(marker & 0x0f))
            }
            0xde | 0xdf => {
                self.pos += 1;
                self.count(2 << (marker - 0xde), 2)
            }
            _ => Err(expected("object", self.peek_kind()?)),
        }
    }

    /// Skip one value, however deeply nested, without recursion.
    pub fn skip(&mut self) -> Result<(), DecodeError> {
        let mut pending: usize = 1;
        while pending > 0 {
            pending -= 1;
            pending = pending.saturating_add(self.skip_head()?.unwrap_or(0));
            if pending > self.remaining() {
                return Err(truncated());
            }
        }
        Ok(())
    }

    /// Skip one value's head (and its payload, for scalars); for a container, return how
    /// many values it holds (the items of an array, twice the entries of a map).
    fn skip_head(&mut self) -> Result<Option<usize>, DecodeError> {
        let marker = self.marker()?;
        self.pos += 1;
        let payload = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
            0x80..=0x8f => return Ok(Some(2 * usize::from(marker & 0x0f))),
            0x90..=0x9f => return Ok(Some(usize::from(marker & 0x0f))),
            0xa0..=0xbf => usize::from(marker & 0x1f),
            0xc1 => return Err(invalid_opcode(marker, self.pos - 1)),
            0xc4..=0xc6 => self.be(1 << (marker - 0xc4))? as usize,
            0xc7..=0xc9 => (self.be(1 << (marker - 0xc7))? as usize).saturating_add(1),
            0xca => 4,
            0xcb => 8,
            0xcc..=0xcf => 1 << (marker - 0xcc),
            0xd0..=0xd3 => 1 << (marker - 0xd0),
            0xd4..=0xd8 => 1 + (1 << (marker - 0xd4)),
            0xd9..=0xdb => self.be(1 << (marker - 0xd9))? as usize,
            0xdc | 0xdd => return Ok(Some(self.be(2 << (marker - 0xdc))? as usize)),
            0xde | 0xdf => {
                let entries = self.be(2 << (marker - 0xde))? as usize;
                return Ok(Some(entries.saturating_mul(2)));
            }
        };
        self.take(payload)?;
        Ok(None)
    }
}

fn invalid_opcode(marker: u8, position: usize) -> DecodeError {
    DecodeError::new(format!(
        "MessagePack data is malformed: invalid opcode '\\x{marker:02x}' (byte {position})"
    ))
}

/// Check that `buf` holds exactly one well-formed msgpack value nested at most
/// `max_nesting` deep, in one pass and without recursion.
///
/// The decoder runs this over the header first, as msgspec's first pass over a header
/// fails: a truncated value, a reserved byte or trailing bytes anywhere in frame 0 are
/// reported the same way wherever they are, and nothing later can meet them.
pub fn check_well_formed(buf: &[u8], max_nesting: usize) -> Result<(), DecodeError> {
    let mut reader = Reader::new(buf);
    // Per open container, the values it still holds; the bottom entry is the top level.
    let mut open: Vec<usize> = vec![1];
    while let Some(left) = open.last_mut() {
        if *left == 0 {
            open.pop();
            continue;
        }
        *left -= 1;
        if let Some(inner) = reader.skip_head()? {
            if inner > reader.remaining() {
                return Err(truncated());
            }
            if open.len() > max_nesting {
                return Err(DecodeError::new("message nested too deeply"));
            }
            open.push(inner);
        }
    }
    if reader.remaining() > 0 {
        return Err(DecodeError::new(format!(
            "MessagePack data is malformed: trailing characters (byte {})",
            reader.position()
        )));
    }
    Ok(())
}

// -- writing -----------------------------------------------------------------------

/// Appends msgpack values to a buffer, each in its smallest encoding.
pub mod write {
    /// nil.
    pub fn nil(out: &mut Vec<u8>) {
        out.push(0xc0);
    }

    pub fn bool(out: &mut Vec<u8>, value: bool) {
        out.push(if value { 0xc3 } else { 0xc2 });
    }

    /// A non-negative int.
    pub fn uint(out: &mut Vec<u8>, value: u64) {
        if value < 0x80 {
            out.push(value as u8);
        } else if value <= u64::from(u8::MAX) {
            out.extend_from_slice(&[0xcc, value as u8]);
        } else if value <= u64::from(u16::MAX) {
            out.push(0xcd);
            out.extend_from_slice(&(value as u16).to_be_bytes());
        } else if value <= u64::from(u32::MAX) {
            out.push(0xce);
            out.extend_from_slice(&(value as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }

    /// Any int: negative values in the signed forms, the others as [`uint`].
    pub fn int(out: &mut Vec<u8>, value: i64) {
        if value >= 0 {
            uint(out, value as u64);
        } else if value >= -32 {
            out.push(value as u8);
        } else if value >= i64::from(i8::MIN) {
            out.extend_from_slice(&[0xd0, value as u8]);
        } else if value >= i64::from(i16::MIN) {
            out.push(0xd1);
            out.extend_from_slice(&(value as i16).to_be_bytes());
        } else if value >= i64::from(i32::MIN) {
            out.push(0xd2);
            out.extend_from_slice(&(value as i32).to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }

    /// A float, always 64-bit (as msgspec writes Python floats).
    pub fn float(out: &mut Vec<u8>, value: f64) {
        out.push(0xcb);
        out.extend_from_slice(&value.to_bits().to_be_bytes());
    }

    pub fn str(out: &mut Vec<u8>, value: &str) {
        let len = value.len();
        if len < 32 {
            out.push(0xa0 | len as u8);
        } else {
            length(out, len, [0xd9, 0xda, 0xdb]);
        }
        out.extend_from_slice(value.as_bytes());
    }

    pub fn bin(out: &mut Vec<u8>, value: &[u8]) {
        length(out, value.len(), [0xc4, 0xc5, 0xc6]);
        out.extend_from_slice(value);
    }

    /// The head of an array of `len` items.
    pub fn array(out: &mut Vec<u8>, len: usize) {
        if len < 16 {
            out.push(0x90 | len as u8);
        } else {
            length(out, len, [0, 0xdc, 0xdd]);
        }
    }

    /// The head of a map of `len` entries.
    pub fn map(out: &mut Vec<u8>, len: usize) {
        if len < 16 {
            out.push(0x80 | len as u8);
        } else {
            length(out, len, [0, 0xde, 0xdf]);
        }
    }

    /// A length in the 8-, 16- or 32-bit form (`markers`; 0 where there is no such form).
    /// Callers bound lengths far below 2**32 (the receiver's limits); a longer one is
    /// written in the 32-bit form truncated, which the receiver then rejects.
    fn length(out: &mut Vec<u8>, len: usize, markers: [u8; 3]) {
        if len <= usize::from(u8::MAX) && markers[0] != 0 {
            out.extend_from_slice(&[markers[0], len as u8]);
        } else if len <= usize::from(u16::MAX) {
            out.push(markers[1]);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            out.push(markers[2]);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }

    #[test]
    fn ints_take_their_smallest_form_as_msgspec_writes_them() {
        // msgspec.msgpack.encode([1, -1, 200, -200, 1.0, 2**63, "x" * 40, b"ab"])
        let mut out = Vec::new();
        write::array(&mut out, 8);
        write::int(&mut out, 1);
        write::int(&mut out, -1);
        write::int(&mut out, 200);
        write::int(&mut out, -200);
        write::float(&mut out, 1.0);
        write::uint(&mut out, 1 << 63);
        write::str(&mut out, &"x".repeat(40));
        write::bin(&mut out, b"ab");
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "9801ffccc8d1ff38cb3ff0000000000000cf8000000000000000d928\
             78787878787878787878787878787878787878787878787878787878787878787878787878787878\
             c4026162"
        );
    }

    #[test]
    fn ints_read_back_across_the_int64_and_uint64_range() {
        for value in [
            0i64,
            1,
            127,
            128,
            255,
            256,
            65535,
            65536,
            -1,
            -32,
            -33,
            -128,
            -129,
            i64::MIN,
            i64::MAX,
        ] {
            let bytes = encoded(|o| write::int(o, value));
            assert_eq!(Reader::new(&bytes).int().unwrap(), i128::from(value));
        }
        let bytes = encoded(|o| write::uint(o, u64::MAX));
        assert_eq!(Reader::new(&bytes).int().unwrap(), i128::from(u64::MAX));
    }

    #[test]
    fn forged_lengths_fail_before_anything_is_taken() {
        // An array claiming 2**32 - 1 items in five bytes.
        let mut reader = Reader::new(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            reader.array().unwrap_err().message(),
            "Input data was truncated"
        );
        let mut reader = Reader::new(&[0xc6, 0xff, 0xff, 0xff, 0xff, 0]);
        assert_eq!(
            reader.bin().unwrap_err().message(),
            "Input data was truncated"
        );
    }

    #[test]
    fn well_formedness_is_checked_without_recursion() {
        let mut deep = vec![0x91u8; 5_000_000];
        deep.push(0xc0);
        let error = check_well_formed(&deep, 512).unwrap_err();
        assert_eq!(error.message(), "message nested too deeply");
        let mut ok = vec![0x91u8; 512];
        ok.push(0xc0);
        check_well_formed(&ok, 512).unwrap();
        assert_eq!(
            check_well_formed(&[0x92, 0x01], 512).unwrap_err().message(),
            "Input data was truncated"
        );
        assert_eq!(
            check_well_formed(&[0x91, 0x01, 0x02], 512)
                .unwrap_err()
                .message(),
            "MessagePack data is malformed: trailing characters (byte 2)"
        );
        assert_eq!(
            check_well_formed(&[0xc1], 512).unwrap_err().message(),
            "MessagePack data is malformed: invalid opcode '\\xc1' (byte 0)"
        );
        // Skipping walks any depth with a counter, not the stack.
        let mut reader = Reader::new(&deep[..]);
        reader.skip().unwrap();
        assert_eq!(reader.remaining(), 0);
    }
}
