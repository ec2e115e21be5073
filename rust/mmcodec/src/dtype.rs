//! The fixed table of dtypes that may travel: torch's names, each with its item size.
//!
//! Tensors are raw little-endian bytes with a dtype tag; nothing here interprets them, so
//! bfloat16, the float8 variants and complex32 travel exactly like float32.

use std::fmt;

macro_rules! dtypes {
    ($($variant:ident = $name:literal, $size:literal;)*) => {
        /// A tensor's element type, as named on the wire (torch's names).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Dtype {
            $(
                #[doc = concat!("`", $name, "`, ", stringify!($size), " byte(s) per element.")]
                $variant,
            )*
        }

        impl Dtype {
            /// Every dtype, in the Python runtime's table order.
            pub const ALL: &'static [Dtype] = &[$(Dtype::$variant),*];

            /// The wire name (torch's name without `torch.`).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Dtype::$variant => $name,)*
                }
            }

            /// Bytes per element.
            pub const fn itemsize(self) -> usize {
                match self {
                    $(Dtype::$variant => $size,)*
                }
            }

            /// The dtype a wire name stands for; None for a name outside the table.
            pub fn from_name(name: &str) -> Option<Dtype> {
                match name {
                    $($name => Some(Dtype::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

dtypes! {
    Float64 = "float64", 8;
    Float32 = "float32", 4;
    Float16 = "float16", 2;
    Int8 = "int8", 1;
    Int16 = "int16", 2;
    Int32 = "int32", 4;
    Int64 = "int64", 8;
    Uint8 = "uint8", 1;
    Uint16 = "uint16", 2;
    Uint32 = "uint32", 4;
    Uint64 = "uint64", 8;
    Bool = "bool", 1;
    Complex64 = "complex64", 8;
    Complex128 = "complex128", 16;
    Bfloat16 = "bfloat16", 2;
    Complex32 = "complex32", 4;
    Float8E4m3fn = "float8_e4m3fn", 1;
    Float8E4m3fnuz = "float8_e4m3fnuz", 1;
    Float8E5m2 = "float8_e5m2", 1;
    Float8E5m2fnuz = "float8_e5m2fnuz", 1;
    Float8E8m0fnu = "float8_e8m0fnu", 1;
}

/// Whether `bytes` hold a byte other than 0 and 1 (torch assumes a bool tensor's bytes
/// are one or the other). The bytes of a chunk are OR-ed together, which the compiler
/// vectorises: about as fast as numpy's maximum, where a byte-by-byte `any` is several
/// times slower; chunks keep an early exit.
pub fn non_boolean(bytes: &[u8]) -> bool {
    bytes
        .chunks(4096)
        .any(|chunk| chunk.iter().fold(0u8, |acc, &b| acc | b) > 1)
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &dtype in Dtype::ALL {
            assert_eq!(Dtype::from_name(dtype.name()), Some(dtype));
        }
        assert_eq!(Dtype::ALL.len(), 21);
        assert_eq!(Dtype::from_name("float128"), None);
        assert_eq!(Dtype::Bfloat16.itemsize(), 2);
    }

    #[test]
    fn only_zeros_and_ones_are_boolean() {
        let mut bytes = vec![1u8; 10_000];
        assert!(!non_boolean(&bytes));
        bytes[9_999] = 2;
        assert!(non_boolean(&bytes));
        assert!(non_boolean(&[0x80]));
        assert!(!non_boolean(&[]));
    }
}
