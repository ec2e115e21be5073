//! Untrusted bytes in Rust: mutations of the shared corpus (`rust/corpus`, messages the
//! Python side encodes) decode to a value or a `DecodeError`, never a panic, with memory
//! bounded by the input.
//!
//! Each case takes a corpus message and mutates it: bytes flipped or overwritten with
//! msgpack markers, truncations, splices of another message's bytes, forged counts (the
//! length of an array, map, string or binary in the header set to an edge value), frames
//! dropped, duplicated, swapped or added, and the single buffer's frame table rewritten.
//! `MMCODEC_MUTATIONS` cases in all (100,000 by default, a second or two; `make test` and
//! CI run the default).
//!
//! A decoded value must encode again and decode to an equal value. Every decode runs
//! under a counting allocator: its peak allocation stays under a fixed multiple of the
//! input's size (the one `unsafe` block of the project's Rust, test-only: a global
//! allocator that forwards to the system's and counts).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fs;
use std::path::PathBuf;

use mmcodec::{framing, DecodeError, Limits, Message};
use mmcodec_tools::with_type;

// -- a counting allocator ------------------------------------------------------------

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // try_with: the thread-local may be gone while a thread exits (then nothing counts).
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY (audited): every method forwards its arguments unchanged to `System`, the
// allocator Rust uses by default, and only adds bookkeeping in thread-local counters,
// which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated at the peak of `f`, above what was live before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, isize) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let out = f();
    (out, PEAK.with(Cell::get) - before)
}

// -- the corpus and the mutations -------------------------------------------------------

/// splitmix64: small, fast, and the same cases on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn pick<'s, T>(&mut self, items: &'s [T]) -> &'s T {
        &items[self.below(items.len())]
    }
}

struct Message_ {
    type_name: String,
    frames: Vec<Vec<u8>>,
    buffer: Vec<u8>,
}

fn corpus() -> Vec<Message_> {
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../corpus");
    let manifest =
        fs::read_to_string(folder.join("manifest.txt")).expect("rust/corpus/manifest.txt");
    manifest
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (file, type_name) = line.split_once(' ').expect("`file type` lines");
            let buffer = fs::read(folder.join(file)).expect("a corpus file");
            let frames = framing::split(&buffer, &Limits::DEFAULT)
                .expect("a valid capture")
                .into_iter()
                .map(<[u8]>::to_vec)
                .collect();
            Message_ {
                type_name: type_name.to_string(),
                frames,
                buffer,
            }
        })
        .collect()
}

/// Bytes that mean something to a msgpack reader: markers of every kind, lengths at the
/// edges of each width, the reserved byte.
const MARKERS: &[u8] = &[
    0x00, 0x01, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6,
    0xc7, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd3, 0xd4, 0xd9, 0xdb, 0xdc, 0xdd, 0xde, 0xdf,
    0xe0, 0xff,
];

/// Positions in a header where a length or a count is written, with its width in bytes.
fn length_fields(header: &[u8]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (at, &byte) in header.iter().enumerate() {
        let width = match byte {
            0xc4 | 0xd9 => 1,
            0xc5 | 0xda | 0xdc | 0xde | 0xcd => 2,
            0xc6 | 0xdb | 0xdd | 0xdf | 0xce => 4,
            0xcf => 8,
            _ => continue,
        };
        if at + 1 + width <= header.len() {
            found.push((at + 1, width));
        }
    }
    found
}

/// One mutated message: its frames, or a single buffer.
enum Input {
    Frames(Vec<Vec<u8>>),
    Buffer(Vec<u8>),
}

fn mutate(rng: &mut Rng, message: &Message_, other: &Message_) -> Input {
    let mut frames = message.frames.clone();
    let target = if rng.below(4) == 0 {
        rng.below(frames.len())
    } else {
        0
    };
    let frame = &mut frames[target];
    match rng.below(12) {
        0 if !frame.is_empty() => {
            let at = rng.below(frame.len());
            frame[at] ^= 1 << rng.below(8);
        }
        1 if !frame.is_empty() => {
            let at = rng.below(frame.len());
            frame[at] = *rng.pick(MARKERS);
        }
        2 => {
            let keep = rng.below(frame.len() + 1);
            frame.truncate(keep);
        }
        3 => {
            // Splice: a slice of another message's header in place of a slice of this one.
            let source = &other.frames[0];
            let (from, len) = (rng.below(source.len()), rng.below(64));
            let piece = &source[from..(from + len).min(source.len())];
            let at = rng.below(frame.len() + 1);
            let cut = (at + rng.below(16)).min(frame.len());
            frame.splice(at..cut, piece.iter().copied());
        }
        4 => {
            // A forged count: a length field set to an edge of its width.
            let fields = length_fields(frame);
            if !fields.is_empty() {
                let &(at, width) = rng.pick(&fields);
                let value: u64 = *rng.pick(&[0, 1, 2, 0x7f, 0xff, 0xffff, u64::MAX]);
                let bytes = value.to_be_bytes();
                frame[at..at + width].copy_from_slice(&bytes[8 - width..]);
            }
        }
        5 => {
            let at = rng.below(frame.len() + 1);
            let n = 1 + rng.below(8);
            for _ in 0..n {
                frame.insert(at, *rng.pick(MARKERS));
            }
        }
        6 if !frame.is_empty() => {
            let at = rng.below(frame.len());
            let n = (1 + rng.below(8)).min(frame.len() - at);
            frame.drain(at..at + n);
        }
        7 => {
            // Deep nesting spliced in: many one-element arrays.
            let at = rng.below(frame.len() + 1);
            let depth = *rng.pick(&[33, 600, 5_000]);
            frame.splice(at..at, std::iter::repeat(0x91).take(depth));
        }
        8 if frames.len() > 1 => {
            let index = 1 + rng.below(frames.len() - 1);
            match rng.below(3) {
                0 => {
                    frames.remove(index);
                }
                1 => {
                    let copy = frames[index].clone();
                    frames.insert(index, copy);
                }
                _ => {
                    let other = rng.below(frames.len());
                    frames.swap(index, other);
                }
            }
        }
        9 => frames.push(vec![0u8; rng.below(100)]),
        10 => {
            // The single buffer, its frame table rewritten.
            let mut buffer = message.buffer.clone();
            let at = rng.below(buffer.len().min(64));
            let value: u64 = *rng.pick(&[0, 1, 63, 64, 4096, 4097, u64::MAX, u64::MAX / 2]);
            let end = (at + 8).min(buffer.len());
            buffer[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
            return Input::Buffer(buffer);
        }
        _ => {
            // Two mutations at once.
            let once = mutate(rng, message, other);
            if let Input::Frames(mutated) = once {
                let again = Message_ {
                    type_name: message.type_name.clone(),
                    frames: mutated,
                    buffer: Vec::new(),
                };
                return mutate(rng, &again, other);
            }
            return once;
        }
    }
    Input::Frames(frames)
}

/// Decode; for a value, encode it again into one buffer.
fn reencoded<'a, M: Message<'a>>(
    frames: &[&'a [u8]],
    limits: &Limits,
) -> Result<Vec<u8>, DecodeError> {
    let value: M = mmcodec::decode_with(frames, limits)?;
    Ok(mmcodec::encode(&value)
        .expect("a decoded value encodes")
        .to_bytes())
}

/// `decode` then `encode` (by `reencode`), then both again: a decoded value must encode,
/// and what it encodes to must decode. (Not always to the same bytes: like the Python
/// encoder, the Rust encoder lays out tensors whose bytes touch in memory differently
/// from tensors apart, and the second decode's tensors lie elsewhere.)
fn check(
    reencode: impl Fn(&[&[u8]]) -> Result<Vec<u8>, DecodeError>,
    frames: &[&[u8]],
) -> Result<Vec<u8>, DecodeError> {
    let first = reencode(frames)?;
    let frames = framing::split(&first, &Limits::DEFAULT).expect("a buffer the encoder wrote");
    reencode(&frames).unwrap_or_else(|e| panic!("a re-encoded value fails to decode: {e}"));
    Ok(first)
}

/// Bytes a decode may allocate per input byte (and a fixed allowance): the Rust side's
/// bound on "memory proportional to the message". The widest case is a column list whose
/// items each take one byte, a back-reference: an item (an `Option<MultiModalKwargsItem>`
/// of 72 bytes and its one-entry map, about 100) and its copy of the key (at most 64 bytes
/// per header byte: the decoder refuses more). Rows of `None`s take 72 per byte.
const BYTES_PER_BYTE: isize = 256;
const FIXED_BYTES: isize = 64 << 10;

#[test]
fn mutated_messages_decode_or_fail_cleanly() {
    let corpus = corpus();
    assert!(
        corpus.len() >= 30,
        "rust/corpus holds the Python-encoded messages"
    );
    let cases: usize = std::env::var("MMCODEC_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let limits = Limits::DEFAULT;
    let mut rng = Rng(0x6d6d_636f_6465_6321);
    let (mut decoded, mut rejected) = (0usize, 0usize);
    for _ in 0..cases {
        let message = rng.pick(&corpus);
        let other = rng.pick(&corpus);
        let input = mutate(&mut rng, message, other);
        let size: usize;
        let (result, peak) = match &input {
            Input::Frames(frames) => {
                size = frames.iter().map(Vec::len).sum();
                let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
                peak_of(
                    || with_type!(message.type_name.as_str(), T => Ok::<_, String>(check(|f| reencoded::<T<'_>>(f, &limits), &views))),
                )
            }
            Input::Buffer(buffer) => {
                size = buffer.len();
                peak_of(|| {
                    with_type!(message.type_name.as_str(), T => Ok::<_, String>(
                        framing::split(buffer, &limits).and_then(|f| check(|f| reencoded::<T<'_>>(f, &limits), &f))
                    ))
                })
            }
        };
        match result.expect("a corpus type") {
            Ok(_) => decoded += 1,
            Err(error) => {
                assert!(!error.message().is_empty());
                rejected += 1;
            }
        }
        // A decoded value is re-encoded inside `check`: its frames count too (the header
        // again, and the value), so the bound covers that work as well.
        assert!(
            peak <= BYTES_PER_BYTE * size as isize + FIXED_BYTES,
            "{peak} bytes allocated for a {size}-byte {} input",
            message.type_name
        );
    }
    eprintln!("{cases} mutations: {decoded} decoded, {rejected} rejected");
    assert_eq!(decoded + rejected, cases);
    assert!(rejected > cases / 4 && decoded > cases / 100);
}

#[test]
fn the_corpus_decodes_and_encodes_back_to_its_bytes() {
    for message in corpus() {
        let frames: Vec<&[u8]> = message.frames.iter().map(Vec::as_slice).collect();
        with_type!(message.type_name.as_str(), T => Ok::<_, String>(check(|f| reencoded::<T<'_>>(f, &Limits::DEFAULT), &frames)))
            .expect("a corpus type")
            .unwrap_or_else(|e| panic!("{}: {e}", message.type_name));
        let again = with_type!(message.type_name.as_str(), T => Ok::<_, String>(
            reencoded::<T<'_>>(&frames, &Limits::DEFAULT)
        ));
        assert_eq!(
            again.expect("a corpus type").expect("it decodes"),
            message.buffer
        );
    }
}

/// Messages built to cost the most memory per byte the decoder keeps: long lists of the
/// smallest values, wide mappings of back-references. Each decodes, within the bound.
#[test]
fn the_widest_messages_stay_within_the_memory_bound() {
    use mmcodec::msgpack::write;
    let envelope = |root: &str, body: &dyn Fn(&mut Vec<u8>)| {
        let mut out = Vec::new();
        write::array(&mut out, 8);
        write::str(&mut out, "mmc");
        write::uint(&mut out, 3);
        write::str(&mut out, "multimodal");
        write::uint(&mut out, 1);
        write::str(&mut out, root);
        write::array(&mut out, 0);
        write::array(&mut out, 0);
        body(&mut out);
        out
    };
    let n = 200_000;
    // {"image": [None] * n}: a list of absent items.
    let nones = envelope("MultiModalKwargsItems", &|out| {
        write::map(out, 1);
        write::str(out, "image");
        write::array(out, n);
        (0..n).for_each(|_| write::nil(out));
    });
    // One item of n keys, the first an element and the others back-references to it.
    let refs = envelope("MultiModalKwargsItem", &|out| {
        write::map(out, n);
        for i in 0..n {
            write::str(out, &format!("{i:x}"));
            if i == 0 {
                write::array(out, 2);
                write::nil(out);
                write::array(out, 2);
                write::uint(out, 0);
                write::bool(out, false);
            } else {
                write::uint(out, 0);
            }
        }
    });
    // {"image": n items of one key, a column list}: one byte per item, each a value
    // column's back-reference to the first item's element (the most items per byte).
    let key = "k".repeat(64);
    let column = |out: &mut Vec<u8>, key: &str, n: usize, absent: usize| {
        write::map(out, 1);
        write::str(out, "image");
        write::map(out, 4);
        write::str(out, "count");
        write::uint(out, (n + absent) as u64);
        write::str(out, "keys");
        write::array(out, 1);
        write::str(out, key);
        write::str(out, "columns");
        write::array(out, 1);
        write::array(out, 2);
        write::uint(out, 0);
        write::array(out, n);
        for i in 0..n {
            if i == 0 {
                write::array(out, 2);
                write::nil(out);
                write::array(out, 2);
                write::uint(out, 0);
                write::bool(out, false);
            } else {
                write::uint(out, 0);
            }
        }
        write::str(out, "absent");
        write::array(out, absent);
        (0..absent).for_each(|i| write::uint(out, (n + i) as u64));
    };
    let columns = envelope("MultiModalKwargsItems", &|out| column(out, "k", n, 0));
    // The same with the longest keys the decoder copies into items (64 bytes per byte).
    let long_keys = envelope("MultiModalKwargsItems", &|out| column(out, &key, n / 64, 0));
    // One present item and as many absent ones as a byte each can name.
    let absent = envelope("MultiModalKwargsItems", &|out| column(out, "k", 1, 127));
    for (header, root) in [
        (&nones, "multimodal.MultiModalKwargsItems"),
        (&refs, "multimodal.MultiModalKwargsItem"),
        (&columns, "multimodal.MultiModalKwargsItems"),
        (&long_keys, "multimodal.MultiModalKwargsItems"),
        (&absent, "multimodal.MultiModalKwargsItems"),
    ] {
        let frames = [header.as_slice()];
        let (result, peak) = peak_of(|| {
            with_type!(root, T => Ok::<_, String>(
                mmcodec::decode::<T<'_>>(&frames).map(drop)
            ))
        });
        result.expect("a corpus type").expect("it decodes");
        let per_byte = peak as f64 / header.len() as f64;
        eprintln!(
            "{root}: {peak} bytes for {} header bytes ({per_byte:.1} per byte)",
            header.len()
        );
        assert!(peak <= BYTES_PER_BYTE * header.len() as isize + FIXED_BYTES);
    }
}
