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
