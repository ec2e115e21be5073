//! Bounds a decoder enforces on untrusted input before it allocates anything: the same
//! fields and defaults as the Python runtime's `Limits`, and one of Rust's own.

/// Per-decode limits. Every field bounds work or memory a peer could ask for.
///
/// The defaults fit the largest realistic multimodal requests (a 16-image video request
/// is ~200 MB and a few hundred tensors) with a wide margin; they are Python's defaults,
/// and the encoder checks them too, so that a message a receiver would reject fails at
/// the sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Frames per message, frame 0 (the header) included.
    pub max_frames: usize,
    /// Sum of all frame lengths (4 GiB).
    pub max_total_bytes: u64,
    /// Length of frame 0, the msgpack header (64 MiB).
    pub max_header_bytes: usize,
    /// Nesting depth of nested tensors (lists and tuples of lists ...).
    pub max_depth: usize,
    /// Elements in any one container, and tensors per message (empty ones included).
    pub max_elements: usize,
    /// Tensors per message, empty ones included (65,536).
    pub max_tensors: usize,
    /// Dimensions of one tensor.
    pub max_ndim: usize,
    /// Nesting of msgpack arrays and maps in the header (Rust only: Python's bound is its
    /// interpreter's recursion limit, about 1,000). It bounds the decoder's stack.
    pub max_nesting: usize,
}

impl Limits {
    /// The defaults (Python's `DEFAULT_LIMITS`), usable in a `const`.
    pub const DEFAULT: Limits = Limits {
        max_frames: 4096,
        max_total_bytes: 4 << 30,
        max_header_bytes: 64 << 20,
        max_depth: 32,
        max_elements: 1 << 20,
        max_tensors: 1 << 16,
        max_ndim: 16,
        max_nesting: 512,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}
