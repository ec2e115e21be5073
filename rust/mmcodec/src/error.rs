//! The two error types: [`DecodeError`] for bytes a peer sent, [`EncodeError`] for a value
//! that cannot travel. Each carries the path to the bad value, in the syntax the Python
//! runtime uses (`$['image'][0]['pixel_values'].data`).
//!
//! Paths are built from the inside out: the code that finds a problem makes the error with
//! its message, and every enclosing step adds its segment while the error propagates. The
//! path is formatted only when it is read, so valid messages pay nothing for it.

use std::fmt;

/// One step of a path to a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// A struct field: `.name`.
    Field(&'static str),
    /// A list or tuple position: `[3]`.
    Index(usize),
    /// A mapping entry, its key already written as the path shows it: `['key']`, `[7]`.
    Key(String),
    /// A mapping key itself (the encoder checks keys): `['key'] (key)`.
    KeyItself(String),
    /// The tag of a union value: `.<tag>`.
    Tag,
}

impl Segment {
    /// The segment of a mapping entry with a string key, written as Python's `repr` would.
    pub fn str_key(key: &str) -> Segment {
        Segment::Key(python_repr(key))
    }

    /// The segment of a mapping entry with an int key.
    pub fn int_key(key: i64) -> Segment {
        Segment::Key(key.to_string())
    }

    fn write(&self, out: &mut String) {
        match self {
            Segment::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Segment::Index(index) => {
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
            Segment::Key(key) => {
                out.push('[');
                out.push_str(key);
                out.push(']');
            }
            Segment::KeyItself(key) => {
                out.push('[');
                out.push_str(key);
                out.push_str("] (key)");
            }
            Segment::Tag => out.push_str(".<tag>"),
        }
    }
}

/// A message and the segments of its path, innermost first.
#[derive(Clone, PartialEq, Eq)]
struct Located {
    message: String,
    segments: Vec<Segment>,
}

impl Located {
    fn path(&self) -> String {
        let mut out = String::from("$");
        for segment in self.segments.iter().rev() {
            segment.write(&mut out);
        }
        out
    }
}

macro_rules! located_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq)]
        pub struct $name(Box<Located>);

        impl $name {
            /// An error at the value being read or written; enclosing steps add their segments.
            pub fn new(message: impl Into<String>) -> Self {
                $name(Box::new(Located { message: message.into(), segments: Vec::new() }))
            }

            /// What is wrong, without the path.
            pub fn message(&self) -> &str {
                &self.0.message
            }

            /// The path to the bad value: `$` and one segment per step, outermost first.
            pub fn path(&self) -> String {
                self.0.path()
            }

            /// The same error, one step further out: `segment` goes before the path so far.
            pub fn at(mut self, segment: Segment) -> Self {
                self.0.segments.push(segment);
                self
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}: {}", self.path(), self.0.message)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.to_string())
            }
        }

        impl std::error::Error for $name {}
    };
}

located_error!(
    /// Bytes from a peer were rejected. The only error decoding ever returns.
    DecodeError
);

located_error!(
    /// A value cannot be encoded (a limit of the receiver, a constraint of the schema).
    /// Nothing partial is returned.
    EncodeError
);

/// `text` as Python's `repr(str)` writes it, so that paths read as on the Python side.
///
/// Quotes and the escapes of ASCII characters are exactly Python's. Python also escapes
/// non-ASCII characters it does not consider printable; here only control characters and
/// separators are (a format character such as U+200B shows as itself).
pub fn python_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            ' ' => out.push(' '),
            c if c.is_control() || (c.is_whitespace() && !c.is_ascii()) || c == '\u{7f}' => {
                let code = c as u32;
                if code < 0x100 {
                    out.push_str(&format!("\\x{code:02x}"));
                } else if code < 0x10000 {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `value` as Python's `repr(float)` writes it: the shortest digits that read back as the
/// same float, positional for exponents -4 to 15 (`0.0001`, `1e+16`), `inf`, `nan`.
pub fn python_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    let scientific = format!("{value:e}"); // shortest round-trip digits: "-1.25e-7"
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1; // digits before the point
        let whole = usize::try_from(point).unwrap_or(0);
        if point <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
        } else if whole >= digits.len() {
            format!("{sign}{digits}{}.0", "0".repeat(whole - digits.len()))
        } else {
            format!("{sign}{}.{}", &digits[..whole], &digits[whole..])
        }
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let point = if rest.is_empty() { "" } else { "." };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{sign}{first}{point}{rest}e{exponent_sign}{:02}",
            exponent.unsigned_abs()
        )
    }
}

/// `data` as Python's `repr(bytes)` writes it (`b'a\x00'`).
pub fn python_bytes_repr(data: &[u8]) -> String {
    let quote = if data.contains(&b'\'') && !data.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(data.len() + 3);
    out.push('b');
    out.push(quote);
    for &byte in data {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b if char::from(b) == quote => {
                out.push('\\');
                out.push(quote);
            }
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_written_outermost_first() {
        let error = DecodeError::new("frame 7 out of range (3 frames)")
            .at(Segment::Field("data"))
            .at(Segment::str_key("pixel_values"))
            .at(Segment::Index(0))
            .at(Segment::str_key("image"));
        assert_eq!(error.path(), "$['image'][0]['pixel_values'].data");
        assert_eq!(
            error.to_string(),
            "$['image'][0]['pixel_values'].data: frame 7 out of range (3 frames)"
        );
        assert_eq!(DecodeError::new("x").path(), "$");
    }

    #[test]
    fn floats_and_bytes_are_written_as_python_writes_them() {
        let floats = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.5, "1.5"),
            (1.0, "1.0"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.25e-7, "1.25e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (-1.5e300, "-1.5e+300"),
            (123456.789, "123456.789"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for (value, python) in floats {
            assert_eq!(python_float_repr(value), python, "{value:e}");
        }
        assert_eq!(python_bytes_repr(b""), "b''");
        assert_eq!(python_bytes_repr(b"a\x00\xff\\\n"), "b'a\\x00\\xff\\\\\\n'");
        assert_eq!(python_bytes_repr(b"it's"), "b\"it's\"");
        assert_eq!(python_bytes_repr(b"'\""), "b'\\'\"'");
    }

    #[test]
    fn keys_are_quoted_as_python_quotes_them() {
        assert_eq!(python_repr("a"), "'a'");
        assert_eq!(python_repr("it's"), "\"it's\"");
        assert_eq!(python_repr("it's \"x\""), "'it\\'s \"x\"'");
        assert_eq!(
            python_repr("a\\b\n\t\u{1}\u{7f}"),
            "'a\\\\b\\n\\t\\x01\\x7f'"
        );
        assert_eq!(python_repr("é\u{2028}"), "'é\\u2028'");
        assert_eq!(
            EncodeError::new("m")
                .at(Segment::KeyItself("'k'".into()))
                .path(),
            "$['k'] (key)"
        );
    }
}
