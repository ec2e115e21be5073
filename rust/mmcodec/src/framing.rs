//! Frames: the limits on what the caller hands the decoder, and the single-buffer layout.
//!
//! Single-buffer layout (all integers little-endian), the Python runtime's `encode_bytes`
//! format and its capture files:
//!
//! ```text
//! b"MMCB" | u32 layout version | u64 frame count N | N x (u64 offset, u64 length)
//! | payloads, each starting at a multiple of 64 bytes from the buffer's start
//! ```

use std::io::{self, Write};

use crate::error::{DecodeError, EncodeError};
use crate::limits::Limits;

/// Payloads start at multiples of this many bytes from the buffer's start.
pub const ALIGNMENT: usize = 64;
const MAGIC: &[u8; 4] = b"MMCB";
const LAYOUT_VERSION: u32 = 1;
const PREFIX: usize = 16;
const ENTRY: usize = 16;

fn align(n: usize) -> usize {
    n.div_ceil(ALIGNMENT) * ALIGNMENT
}

/// Frame count and sizes against `limits`, before anything is read.
pub fn check_frames(frames: &[&[u8]], limits: &Limits) -> Result<(), DecodeError> {
    let Some(header) = frames.first() else {
        return Err(DecodeError::new(
            "no frames: a message has at least its header frame",
        ));
    };
    if frames.len() > limits.max_frames {
        return Err(DecodeError::new(format!(
            "{} frames exceed the limit of {}",
            frames.len(),
            limits.max_frames
        )));
    }
    if header.len() > limits.max_header_bytes {
        return Err(DecodeError::new(format!(
            "header of {} bytes exceeds the limit of {}",
            header.len(),
            limits.max_header_bytes
        )));
    }
    let total: u64 = frames.iter().map(|f| f.len() as u64).sum();
    if total > limits.max_total_bytes {
        return Err(DecodeError::new(format!(
            "{total} bytes exceed the limit of {}",
            limits.max_total_bytes
        )));
    }
    Ok(())
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}

/// The frames of a single buffer, as slices of it (no copy), bounds-checked.
pub fn split<'a>(buffer: &'a [u8], limits: &Limits) -> Result<Vec<&'a [u8]>, DecodeError> {
    let size = buffer.len();
    if size as u64 > limits.max_total_bytes {
        return Err(DecodeError::new(format!(
            "{size} bytes exceed the limit of {}",
            limits.max_total_bytes
        )));
    }
    if size < PREFIX {
        return Err(DecodeError::new(format!(
            "buffer of {size} bytes is too short for a frame table"
        )));
    }
    if &buffer[..4] != MAGIC {
        return Err(DecodeError::new(format!(
            "buffer does not start with b'MMCB' (found {})",
            python_bytes(&buffer[..4])
        )));
    }
    let version = u32::from_le_bytes([buffer[4], buffer[5], buffer[6], buffer[7]]);
    if version != LAYOUT_VERSION {
        return Err(DecodeError::new(format!(
            "single-buffer layout version {version} is not supported"
        )));
    }
    let count = u64_at(buffer, 8);
    if count < 1 || count > limits.max_frames as u64 {
        return Err(DecodeError::new(format!(
            "frame count {count} outside 1..{}",
            limits.max_frames
        )));
    }
    let count = count as usize; // at most max_frames
    let table_end = PREFIX + ENTRY * count;
    if table_end > size {
        return Err(DecodeError::new(format!(
            "frame table of {count} entries overruns the {size}-byte buffer"
        )));
    }
    let mut frames = Vec::with_capacity(count);
    for index in 0..count {
        let at = PREFIX + ENTRY * index;
        let (offset, length) = (u64_at(buffer, at), u64_at(buffer, at + 8));
        let end = offset.checked_add(length);
        match end {
            Some(end) if offset >= table_end as u64 && end <= size as u64 => {
                frames.push(&buffer[offset as usize..end as usize]);
            }
            _ => {
                return Err(DecodeError::new(format!(
                    "frame {index} ({length} bytes at offset {offset}) lies outside the \
                     buffer's payload area ({table_end}..{size})"
                )))
            }
        }
    }
    Ok(frames)
}

/// Where each frame goes in the single buffer, and the buffer's length.
fn layout<'f>(frames: impl ExactSizeIterator<Item = &'f [u8]>) -> (Vec<usize>, usize) {
    let mut position = align(PREFIX + ENTRY * frames.len());
    let mut offsets = Vec::with_capacity(frames.len());
    for frame in frames {
        offsets.push(position);
        position = align(position + frame.len());
    }
    (offsets, position)
}

/// The frames copied into one buffer with a frame table and 64-byte aligned payloads.
pub fn join(frames: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(joined_len(frames));
    emit(frames, |bytes| {
        out.extend_from_slice(bytes);
        Ok(())
    })
    .unwrap_or(()); // extending a Vec cannot fail
    out
}

/// The single buffer's bytes written to `out` in order, without building the buffer:
/// a file or socket receives exactly what [`join`] returns.
pub fn write_joined<W: Write>(frames: &[&[u8]], out: &mut W) -> io::Result<()> {
    emit(frames, |bytes| out.write_all(bytes))
}

/// Hand the single buffer's bytes to `put`, piece by piece: the table, then each frame
/// after the padding that aligns it. Every byte is written once.
fn emit(frames: &[&[u8]], mut put: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
    let (offsets, size) = layout(frames.iter().copied());
    let mut table = Vec::with_capacity(PREFIX + ENTRY * frames.len());
    table.extend_from_slice(MAGIC);
    table.extend_from_slice(&LAYOUT_VERSION.to_le_bytes());
    table.extend_from_slice(&(frames.len() as u64).to_le_bytes());
    for (frame, &offset) in frames.iter().zip(&offsets) {
        table.extend_from_slice(&(offset as u64).to_le_bytes());
        table.extend_from_slice(&(frame.len() as u64).to_le_bytes());
    }
    put(&table)?;
    let padding = [0u8; ALIGNMENT];
    let mut position = table.len();
    for (frame, &offset) in frames.iter().zip(&offsets) {
        put(&padding[..offset - position])?;
        put(frame)?;
        position = offset + frame.len();
    }
    put(&padding[..size - position])
}

/// The length [`join`] would return.
pub fn joined_len(frames: &[&[u8]]) -> usize {
    layout(frames.iter().copied()).1
}

/// The limits a receiver applies to frames, applied before sending.
pub fn check_sending(frames: &[&[u8]], limits: &Limits) -> Result<(), EncodeError> {
    let header = frames.first().map_or(0, |f| f.len());
    if header > limits.max_header_bytes {
        return Err(EncodeError::new(format!(
            "header of {header} bytes exceeds the receiver's limit of {} (max_header_bytes)",
            limits.max_header_bytes
        )));
    }
    if frames.len() > limits.max_frames {
        return Err(EncodeError::new(format!(
            "{} frames exceed the receiver's limit of {} (max_frames)",
            frames.len(),
            limits.max_frames
        )));
    }
    let total: u64 = frames.iter().map(|f| f.len() as u64).sum();
    if total > limits.max_total_bytes {
        return Err(EncodeError::new(format!(
            "{total} bytes exceed the receiver's limit of {} (max_total_bytes)",
            limits.max_total_bytes
        )));
    }
    Ok(())
}

/// Bytes as Python's `repr(bytes)` writes them (for the magic in an error message).
fn python_bytes(bytes: &[u8]) -> String {
    let quote = if bytes.contains(&b'\'') && !bytes.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut out = format!("b{quote}");
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b if char::from(b) == quote => {
                out.push('\\');
                out.push(quote);
            }
            0x20..=0x7e => out.push(char::from(b)),
            b => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_and_split_round_trip_with_aligned_payloads() {
        let frames: [&[u8]; 3] = [b"header", b"", &[7u8; 100]];
        let buffer = join(&frames);
        assert_eq!(buffer.len(), joined_len(&frames));
        let back = split(&buffer, &Limits::DEFAULT).unwrap();
        assert_eq!(back, frames);
        for frame in &back[1..] {
            let offset = frame.as_ptr() as usize - buffer.as_ptr() as usize;
            assert_eq!(offset % ALIGNMENT, 0);
        }
        let mut written = Vec::new();
        write_joined(&frames, &mut written).unwrap();
        assert_eq!(written, buffer);
    }

    #[test]
    fn bad_buffers_are_rejected() {
        let limits = Limits::DEFAULT;
        let message = |b: &[u8]| split(b, &limits).unwrap_err().to_string();
        assert_eq!(
            message(b"MMCB"),
            "$: buffer of 4 bytes is too short for a frame table"
        );
        assert_eq!(
            message(b"XXXX\x01\0\0\0\x01\0\0\0\0\0\0\0"),
            "$: buffer does not start with b'MMCB' (found b'XXXX')"
        );
        let mut buffer = join(&[b"x"]);
        buffer[8] = 0;
        assert_eq!(message(&buffer), "$: frame count 0 outside 1..4096");
        let mut buffer = join(&[b"x"]);
        buffer[24] = 0xff; // the length of frame 0
        assert!(message(&buffer).contains("lies outside the buffer's payload area (32..128)"));
    }
}
