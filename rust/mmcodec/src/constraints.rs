//! A field's schema constraints (`ge`, `lt`, `min_length`, `pattern`, ...), checked by the
//! decoder (with msgspec's wording) and by the encoder (with the Python encoder's), so that a
//! bad value fails at the sender, with its path, instead of at the receiver.

use indexmap::IndexMap;
use std::borrow::Cow;

/// A numeric bound as the schema wrote it: an int or a float.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    fn text(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => python_float(f),
        }
    }
}

/// A float as Python's `repr` writes it, for the common cases (`0.0`, `1.5`, `inf`).
pub fn python_float(value: f64) -> String {
    if value.is_nan() {
        "nan".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "inf" } else { "-inf" }.to_string()
    } else if value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value:.1}")
    } else {
        format!("{value:?}")
    }
}

/// The constraints of one field; a schema field without constraints has none of these.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    pub ge: Option<Num>,
    pub gt: Option<Num>,
    pub le: Option<Num>,
    pub lt: Option<Num>,
    pub min_length: Option<usize>,
    pub max_length: Option<usize>,
    /// A regular expression a string must contain a match of, as with Python's
    /// `re.search` (checked with the regex crate, whose syntax is close to Python's for
    /// common patterns: the `patterns` feature).
    #[cfg(feature = "patterns")]
    pub pattern: Option<&'static str>,
}

impl Bounds {
    /// No constraint: what `..Bounds::NONE` fills in.
    pub const NONE: Bounds = Bounds {
        ge: None,
        gt: None,
        le: None,
        lt: None,
        min_length: None,
        max_length: None,
        #[cfg(feature = "patterns")]
        pattern: None,
    };
}

/// A broken constraint: what the decoder and the encoder each say about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// msgspec's wording (`` Expected `int` >= 0 ``).
    pub decode: String,
    /// The Python encoder's wording (`expected a value >= 0, got -1`).
    pub encode: String,
}

/// A value that schema constraints can apply to.
pub trait Checked {
    /// Check `bounds`; the first broken one, in the Python encoder's order.
    fn check(&self, bounds: &Bounds) -> Result<(), Violation>;
}

/// A bound, its operator as written in messages, and whether a value satisfies it.
type Rule<T> = (Option<Num>, &'static str, fn(T, T) -> bool);

fn numeric(kind: &str, value: f64, shown: String, bounds: &Bounds) -> Result<(), Violation> {
    let rules: [Rule<f64>; 4] = [
        (bounds.ge, ">=", |v, b| v >= b),
        (bounds.gt, ">", |v, b| v > b),
        (bounds.le, "<=", |v, b| v <= b),
        (bounds.lt, "<", |v, b| v < b),
    ];
    for (bound, op, holds) in rules {
        if let Some(bound) = bound {
            if !holds(value, bound.as_f64()) {
                return Err(Violation {
                    decode: format!("Expected `{kind}` {op} {}", bound.text()),
                    encode: format!("expected a value {op} {}, got {shown}", bound.text()),
                });
            }
        }
    }
    Ok(())
}

fn length(kind: &str, len: usize, bounds: &Bounds) -> Result<(), Violation> {
    if let Some(min) = bounds.min_length {
        if len < min {
            return Err(Violation {
                decode: format!("Expected `{kind}` of length >= {min}"),
                encode: format!("expected a length >= {min}, got {len}"),
            });
        }
    }
    if let Some(max) = bounds.max_length {
        if len > max {
            return Err(Violation {
                decode: format!("Expected `{kind}` of length <= {max}"),
                encode: format!("expected a length <= {max}, got {len}"),
            });
        }
    }
    Ok(())
}

impl Checked for i64 {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        // Exact for ints: compare as i128 when the bound is an int.
        let rules: [Rule<i128>; 4] = [
            (bounds.ge, ">=", |v, b| v >= b),
            (bounds.gt, ">", |v, b| v > b),
            (bounds.le, "<=", |v, b| v <= b),
            (bounds.lt, "<", |v, b| v < b),
        ];
        if rules
            .iter()
            .any(|(b, _, _)| matches!(b, Some(Num::Float(_))))
        {
            return numeric("int", *self as f64, self.to_string(), bounds);
        }
        for (bound, op, holds) in rules {
            if let Some(Num::Int(bound)) = bound {
                if !holds(i128::from(*self), bound) {
                    return Err(Violation {
                        decode: format!("Expected `int` {op} {bound}"),
                        encode: format!("expected a value {op} {bound}, got {self}"),
                    });
                }
            }
        }
        Ok(())
    }
}

impl Checked for u64 {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        match i64::try_from(*self) {
            Ok(value) => value.check(bounds),
            // Above i64::MAX: only an upper bound can fail, and an int bound is below it.
            Err(_) => numeric("int", *self as f64, self.to_string(), bounds),
        }
    }
}

impl Checked for f64 {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        numeric("float", *self, python_float(*self), bounds)
    }
}

impl Checked for String {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        length("str", self.chars().count(), bounds)?;
        #[cfg(feature = "patterns")]
        if let Some(pattern) = bounds.pattern {
            patterns::check(pattern, self)?;
        }
        Ok(())
    }
}

impl Checked for Cow<'_, [u8]> {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        length("bytes", self.len(), bounds)
    }
}

impl<T> Checked for Vec<T> {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        length("array", self.len(), bounds)
    }
}

impl<K, V> Checked for IndexMap<K, V> {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        length("object", self.len(), bounds)
    }
}

/// An optional value's constraints apply to the value, when there is one.
impl<T: Checked> Checked for Option<T> {
    fn check(&self, bounds: &Bounds) -> Result<(), Violation> {
        match self {
            Some(value) => value.check(bounds),
            None => Ok(()),
        }
    }
}

#[cfg(feature = "patterns")]
mod patterns {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    use regex::Regex;

    use super::Violation;
    use crate::error::python_repr;

    /// Compiled patterns, one per pattern of the schemas in use (a handful per process).
    fn cache() -> &'static Mutex<HashMap<&'static str, Result<Regex, String>>> {
        static CACHE: OnceLock<Mutex<HashMap<&'static str, Result<Regex, String>>>> =
            OnceLock::new();
        CACHE.get_or_init(Default::default)
    }

    pub(super) fn check(pattern: &'static str, value: &str) -> Result<(), Violation> {
        let mut cache = cache()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let compiled = cache
            .entry(pattern)
            .or_insert_with(|| Regex::new(pattern).map_err(|e| e.to_string()));
        let found = match compiled {
            Ok(regex) => regex.is_match(value),
            Err(error) => {
                let text = format!(
                    "pattern {} is not supported here: {error}",
                    python_repr(pattern)
                );
                return Err(Violation {
                    decode: text.clone(),
                    encode: text,
                });
            }
        };
        if found {
            return Ok(());
        }
        Err(Violation {
            decode: format!("Expected `str` matching regex {}", python_repr(pattern)),
            encode: format!(
                "expected a string matching {}, got {}",
                python_repr(pattern),
                python_repr(value)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_checked_with_both_wordings() {
        let bounds = Bounds {
            ge: Some(Num::Int(0)),
            lt: Some(Num::Int(150)),
            ..Bounds::NONE
        };
        assert!(5i64.check(&bounds).is_ok());
        let v = (-1i64).check(&bounds).unwrap_err();
        assert_eq!(v.decode, "Expected `int` >= 0");
        assert_eq!(v.encode, "expected a value >= 0, got -1");
        let v = 150i64.check(&bounds).unwrap_err();
        assert_eq!(v.decode, "Expected `int` < 150");
        let bounds = Bounds {
            gt: Some(Num::Float(0.0)),
            ..Bounds::NONE
        };
        assert_eq!(
            0.0f64.check(&bounds).unwrap_err().decode,
            "Expected `float` > 0.0"
        );
        assert_eq!(python_float(1.5), "1.5");
        assert_eq!(python_float(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn lengths_count_characters_for_strings() {
        let bounds = Bounds {
            min_length: Some(2),
            max_length: Some(3),
            ..Bounds::NONE
        };
        assert!("éé".to_string().check(&bounds).is_ok());
        assert_eq!(
            "a".to_string().check(&bounds).unwrap_err().decode,
            "Expected `str` of length >= 2"
        );
        assert_eq!(
            vec![1, 2, 3, 4].check(&bounds).unwrap_err().encode,
            "expected a length <= 3, got 4"
        );
        assert!(None::<String>.check(&bounds).is_ok());
    }
}
