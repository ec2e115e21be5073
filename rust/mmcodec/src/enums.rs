//! Enums of the schema: closed sets of named members, each travelling as its value, a
//! msgpack int or str (the Python side's `IntEnum` and `StrEnum`).
//!
//! A generated enum is a plain Rust enum of unit variants that implements [`IntEnum`] or
//! [`StrEnum`]: its members in schema order and the value of each. Reading one accepts the
//! schema's values only; anything else is a [`DecodeError`] worded as msgspec words it
//! (`` Invalid enum value 'music' ``, `` Expected `str`, got `int` ``), so that a message
//! rejected on either side reads the same. Writing cannot fail: a Rust value of the enum
//! is always one of its members.

use crate::error::{python_repr, DecodeError};
use crate::msgpack::{write, Reader};

/// An enum of the schema whose values are ints.
pub trait IntEnum: Copy + Eq + std::hash::Hash + 'static {
    /// Every member, in schema order.
    const MEMBERS: &'static [Self];

    /// The value that travels for this member.
    fn value(self) -> i64;

    /// The member whose value is `value`, if any.
    fn from_value(value: i64) -> Option<Self> {
        Self::MEMBERS.iter().copied().find(|m| m.value() == value)
    }
}

/// An enum of the schema whose values are strings.
pub trait StrEnum: Copy + Eq + std::hash::Hash + 'static {
    /// Every member, in schema order.
    const MEMBERS: &'static [Self];

    /// The value that travels for this member.
    fn value(self) -> &'static str;

    /// The member whose value is `value`, if any.
    fn from_value(value: &str) -> Option<Self> {
        Self::MEMBERS.iter().copied().find(|m| m.value() == value)
    }
}

/// A member of an int enum: an int that is one of its values (a value beyond int64 is
/// no member either, as in msgspec).
pub fn read_int_enum<T: IntEnum>(r: &mut Reader<'_>) -> Result<T, DecodeError> {
    let value = r.int()?;
    i64::try_from(value)
        .ok()
        .and_then(T::from_value)
        .ok_or_else(|| DecodeError::new(format!("Invalid enum value {value}")))
}

/// A member of a str enum: a string that is one of its values.
pub fn read_str_enum<T: StrEnum>(r: &mut Reader<'_>) -> Result<T, DecodeError> {
    let value = r.str()?;
    T::from_value(value)
        .ok_or_else(|| DecodeError::new(format!("Invalid enum value {}", python_repr(value))))
}

/// Write an int enum's member as its value.
pub fn write_int_enum<T: IntEnum>(out: &mut Vec<u8>, member: T) {
    write::int(out, member.value());
}

/// Write a str enum's member as its value.
pub fn write_str_enum<T: StrEnum>(out: &mut Vec<u8>, member: T) {
    write::str(out, member.value());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    enum Level {
        Low,
        High,
        Unset,
    }

    impl IntEnum for Level {
        const MEMBERS: &'static [Self] = &[Self::Low, Self::High, Self::Unset];

        fn value(self) -> i64 {
            match self {
                Self::Low => 0,
                Self::High => 10,
                Self::Unset => -1,
            }
        }
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    enum Modality {
        Image,
        Audio,
    }

    impl StrEnum for Modality {
        const MEMBERS: &'static [Self] = &[Self::Image, Self::Audio];

        fn value(self) -> &'static str {
            match self {
                Self::Image => "image",
                Self::Audio => "audio",
            }
        }
    }

    fn int(bytes: &[u8]) -> Result<Level, String> {
        read_int_enum(&mut Reader::new(bytes)).map_err(|e| e.message().to_string())
    }

    fn str_(bytes: &[u8]) -> Result<Modality, String> {
        read_str_enum(&mut Reader::new(bytes)).map_err(|e| e.message().to_string())
    }

    #[test]
    fn members_round_trip_as_their_values() {
        for &member in Level::MEMBERS {
            let mut out = Vec::new();
            write_int_enum(&mut out, member);
            assert_eq!(int(&out), Ok(member));
        }
        for &member in Modality::MEMBERS {
            let mut out = Vec::new();
            write_str_enum(&mut out, member);
            assert_eq!(str_(&out), Ok(member));
        }
        assert_eq!(Level::from_value(-1), Some(Level::Unset));
        assert_eq!(Modality::from_value("audio"), Some(Modality::Audio));
    }

    #[test]
    fn other_values_are_refused_as_msgspec_refuses_them() {
        assert_eq!(int(&[11]), Err("Invalid enum value 11".into()));
        assert_eq!(int(&[0xff]), Ok(Level::Unset));
        assert_eq!(int(&[0xfe]), Err("Invalid enum value -2".into()));
        let mut big = vec![0xcf];
        big.extend(u64::MAX.to_be_bytes());
        assert_eq!(
            int(&big),
            Err("Invalid enum value 18446744073709551615".into())
        );
        assert_eq!(int(&[0xc3]), Err("Expected `int`, got `bool`".into()));
        assert_eq!(int(&[0xa1, b'0']), Err("Expected `int`, got `str`".into()));
        assert_eq!(
            str_(&[0xa5, b'A', b'U', b'D', b'I', b'O']),
            Err("Invalid enum value 'AUDIO'".into())
        );
        assert_eq!(str_(&[0x01]), Err("Expected `str`, got `int`".into()));
        assert_eq!(str_(&[0xc0]), Err("Expected `str`, got `None`".into()));
    }
}
