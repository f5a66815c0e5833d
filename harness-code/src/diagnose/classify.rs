//! Error classes and the parsing of CPython's exception messages and
//! tracebacks.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The kind of a cell failure, from the exception type.
///
/// Subclasses map to their family: `ModuleNotFoundError` is
/// [`Import`](Self::Import), `UnboundLocalError` is [`Name`](Self::Name),
/// `IndexError` and `KeyError` are [`KeyIndex`](Self::KeyIndex),
/// `IndentationError` and `TabError` are [`Syntax`](Self::Syntax). Bad
/// values that are not `ValueError`s count as [`Value`](Self::Value) too:
/// `ZeroDivisionError`, `OverflowError` and the other `ArithmeticError`s,
/// the `Unicode*Error`s, and well-known library subclasses of `ValueError`
/// (`JSONDecodeError`, pandas' `ParserError`, NumPy's `LinAlgError`).
///
/// ```
/// use harness_code::diagnose::ErrorClass;
///
/// assert_eq!(ErrorClass::of_exception("ModuleNotFoundError"), ErrorClass::Import);
/// assert_eq!(ErrorClass::of_exception("json.decoder.JSONDecodeError"), ErrorClass::Value);
/// assert_eq!(ErrorClass::of_exception("FileNotFoundError"), ErrorClass::Other);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// `SyntaxError` and its subclasses: the cell did not compile.
    Syntax,
    /// `NameError`, `UnboundLocalError`: a name is not bound.
    Name,
    /// `AttributeError`: a value lacks an attribute.
    Attribute,
    /// `TypeError`: a value of the wrong type.
    Type,
    /// `ValueError`, `ArithmeticError` (incl. `ZeroDivisionError`),
    /// `UnicodeError`: a value of the right type but wrong content.
    Value,
    /// `KeyError`, `IndexError`, `LookupError`: a missing key or index.
    KeyIndex,
    /// `ImportError`, `ModuleNotFoundError`.
    Import,
    /// `AssertionError`.
    Assertion,
    /// The cell ran longer than allowed and was interrupted.
    Timeout,
    /// The kernel died while running the cell.
    Crash,
    /// Any other exception (`OSError`, `RuntimeError`, library errors, ...).
    Other,
}

impl ErrorClass {
    /// The class of an exception, given its type name (qualified or not).
    pub fn of_exception(exception: &str) -> Self {
        let name = exception.rsplit('.').next().unwrap_or(exception).trim();
        match name {
            "SyntaxError" | "IndentationError" | "TabError" => Self::Syntax,
            "NameError" | "UnboundLocalError" => Self::Name,
            "AttributeError" => Self::Attribute,
            "TypeError" => Self::Type,
            "ValueError"
            | "ArithmeticError"
            | "ZeroDivisionError"
            | "OverflowError"
            | "FloatingPointError"
            | "UnicodeError"
            | "UnicodeDecodeError"
            | "UnicodeEncodeError"
            | "UnicodeTranslateError"
            | "JSONDecodeError"
            | "ParserError"
            | "EmptyDataError"
            | "LinAlgError"
            | "IntCastingNaNError"
            | "OutOfBoundsDatetime"
            | "DateParseError"
            | "MergeError" => Self::Value,
            "KeyError" | "IndexError" | "LookupError" => Self::KeyIndex,
            "ImportError" | "ModuleNotFoundError" => Self::Import,
            "AssertionError" => Self::Assertion,
            _ => Self::Other,
        }
    }

    /// The class's name in snake case, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Syntax => "syntax",
            Self::Name => "name",
            Self::Attribute => "attribute",
            Self::Type => "type",
            Self::Value => "value",
            Self::KeyIndex => "key_index",
            Self::Import => "import",
            Self::Assertion => "assertion",
            Self::Timeout => "timeout",
            Self::Crash => "crash",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The single-quoted substrings of `text`, in order.
pub(crate) fn quoted(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('\'') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('\'') else { break };
        out.push(&after[..end]);
        rest = &after[end + 1..];
    }
    out
}

/// The `Did you mean: 'x'?` hint CPython's traceback adds to name and
/// attribute errors, and the message without it.
pub(crate) fn split_hint(message: &str) -> (&str, Option<&str>) {
    match message.find(". Did you mean: ") {
        Some(index) => {
            let hint = quoted(&message[index..]).into_iter().next();
            (&message[..index], hint)
        }
        None => (message, None),
    }
}

/// What an `AttributeError` message says about the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttrOwner {
    /// `'T' object has no attribute 'a'`.
    Object(String),
    /// `module 'm' has no attribute 'a'`.
    Module(String),
    /// `type object 'T' has no attribute 'a'`.
    Type(String),
}

/// Parses `'T' object has no attribute 'a'` and its module and type forms.
pub(crate) fn attribute_error(message: &str) -> Option<(AttrOwner, String)> {
    let (message, _) = split_hint(message);
    let index = message.find(" has no attribute '")?;
    let attr = quoted(&message[index..]).into_iter().next()?.to_owned();
    let head = &message[..index];
    let owner_name = quoted(head).into_iter().next()?.to_owned();
    let owner = if head.starts_with("module ") {
        AttrOwner::Module(owner_name)
    } else if head.starts_with("type object ") {
        AttrOwner::Type(owner_name)
    } else {
        AttrOwner::Object(owner_name)
    };
    Some((owner, attr))
}

/// The module of `No module named 'm'` or `cannot import name 'n' from 'm'`,
/// and the member for the latter.
pub(crate) fn import_error(message: &str) -> Option<(String, Option<String>)> {
    if let Some(rest) = message.strip_prefix("No module named ") {
        let module = quoted(rest).into_iter().next().unwrap_or(rest.trim());
        return Some((module.to_owned(), None));
    }
    if message.starts_with("cannot import name ") {
        let names = quoted(message);
        let member = names.first()?;
        let module = names.get(1)?;
        return Some(((*module).to_owned(), Some((*member).to_owned())));
    }
    None
}

/// A key as `KeyError` prints it: the repr of the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyRepr {
    /// A string key.
    Str(String),
    /// An integer key.
    Int(String),
}

/// The key of a `KeyError` message (`'region'`, `"it's"`, `3`), or the
/// first quoted name in pandas' longer messages (`"['region'] not in index"`).
pub(crate) fn key_error(message: &str) -> Option<KeyRepr> {
    let trimmed = message.trim();
    if trimmed.parse::<i64>().is_ok() {
        return Some(KeyRepr::Int(trimmed.to_owned()));
    }
    for quote in ['\'', '"'] {
        if trimmed.len() >= 2 && trimmed.starts_with(quote) && trimmed.ends_with(quote) {
            let inner = &trimmed[1..trimmed.len() - 1];
            if !inner.contains(quote) {
                return Some(KeyRepr::Str(inner.to_owned()));
            }
        }
    }
    quoted(trimmed)
        .into_iter()
        .next()
        .map(|key| KeyRepr::Str(key.to_owned()))
}

/// What a `TypeError` message points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TypeShape {
    /// An operator applied to operands of these types (left, right).
    Operator {
        /// The operator as written (`+`, `<`).
        op: String,
        /// The left operand's type.
        left: String,
        /// The right operand's type.
        right: String,
    },
    /// A value of this type was subscripted (or indexed with a wrong type).
    Subscript(Option<String>),
    /// A value of this type was called.
    Call(String),
    /// A value of this type was iterated or unpacked.
    Iterate(String),
    /// `len()` of a value of this type.
    Len(String),
    /// A call of this function did not match its signature.
    Signature(String),
    /// Something else; these types are mentioned.
    Unknown(Vec<String>),
}

/// Classifies a `TypeError` message.
pub(crate) fn type_error(message: &str) -> TypeShape {
    let names = quoted(message);
    let first = || names.first().map(|s| (*s).to_owned()).unwrap_or_default();
    if let Some(rest) = message.strip_prefix("unsupported operand type(s) for ")
        && let Some((op, _)) = rest.split_once(':')
        && names.len() >= 2
    {
        return TypeShape::Operator {
            op: op.trim().to_owned(),
            left: names[0].to_owned(),
            right: names[1].to_owned(),
        };
    }
    if let Some(rest) = message.strip_prefix("can only concatenate ") {
        // can only concatenate str (not "int") to str
        let left = rest.split_whitespace().next().unwrap_or("").to_owned();
        let right = rest
            .split('"')
            .nth(1)
            .map_or_else(String::new, str::to_owned);
        return TypeShape::Operator {
            op: "+".to_owned(),
            left,
            right,
        };
    }
    if message.contains("not supported between instances of") && names.len() >= 3 {
        return TypeShape::Operator {
            op: names[0].to_owned(),
            left: names[1].to_owned(),
            right: names[2].to_owned(),
        };
    }
    if message.contains("object is not subscriptable")
        || message.contains("does not support item assignment")
        || message.contains("does not support item deletion")
    {
        return TypeShape::Subscript(Some(first()));
    }
    if message.contains("indices must be integers") || message.starts_with("unhashable type") {
        let container = message.split_whitespace().next().map(str::to_owned);
        return TypeShape::Subscript(container.filter(|c| !c.contains(':')));
    }
    if message.contains("object is not callable") {
        return TypeShape::Call(first());
    }
    if message.contains("object is not iterable") {
        return TypeShape::Iterate(first());
    }
    if let Some(rest) = message.strip_prefix("cannot unpack non-iterable ") {
        let ty = rest.split_whitespace().next().unwrap_or("").to_owned();
        return TypeShape::Iterate(ty);
    }
    if message.starts_with("object of type ") && message.ends_with("has no len()") {
        return TypeShape::Len(first());
    }
    if let Some(index) = message.find("() ") {
        let callee = &message[..index];
        let signature_words = [
            "takes ",
            "missing ",
            "got an unexpected keyword argument",
            "got multiple values",
            "got some positional-only",
            "takes no arguments",
        ];
        if !callee.is_empty()
            && callee
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
            && signature_words
                .iter()
                .any(|w| message[index + 3..].starts_with(w))
        {
            let name = callee.rsplit('.').next().unwrap_or(callee);
            return TypeShape::Signature(name.to_owned());
        }
    }
    TypeShape::Unknown(names.into_iter().map(str::to_owned).collect())
}

/// What a `ValueError`-class message points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ValueShape {
    /// Division or modulo by zero: the right operand of `/`, `//`, `%`.
    DivisionByZero,
    /// A conversion call failed, e.g. `int` or `float`.
    Conversion(String),
    /// A `math` function got a value outside its domain.
    MathDomain,
    /// Unpacking the wrong number of values.
    Unpack,
    /// Something else.
    Unknown,
}

/// Classifies the message of a value-class exception.
pub(crate) fn value_error(exception: &str, message: &str) -> ValueShape {
    if exception.ends_with("ZeroDivisionError") || message.contains("by zero") {
        return ValueShape::DivisionByZero;
    }
    if let Some(rest) = message.strip_prefix("invalid literal for ") {
        let function = rest.split("()").next().unwrap_or("int");
        return ValueShape::Conversion(function.to_owned());
    }
    if message.starts_with("could not convert string to float") {
        return ValueShape::Conversion("float".to_owned());
    }
    if message.starts_with("math domain error") {
        return ValueShape::MathDomain;
    }
    if message.contains("values to unpack") {
        return ValueShape::Unpack;
    }
    ValueShape::Unknown
}

/// One frame of a CPython traceback: `File "f", line N, in name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) file: String,
    pub(crate) line: u32,
    pub(crate) function: String,
}

/// The frames of a traceback, outermost first.
pub(crate) fn frames(traceback: &str) -> Vec<Frame> {
    traceback
        .lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("File \"")?;
            let (file, rest) = rest.split_once("\", line ")?;
            let (number, function) = match rest.split_once(", in ") {
                Some((number, function)) => (number, function.trim()),
                None => (rest, ""),
            };
            Some(Frame {
                file: file.to_owned(),
                line: number.trim().parse().ok()?,
                function: function.to_owned(),
            })
        })
        .collect()
}

/// The exception type and message of the last line of a traceback
/// (`KeyError: 'region'`); a bare type (`StopIteration`) has an empty
/// message.
pub(crate) fn exception_line(traceback: &str) -> Option<(String, String)> {
    let line = traceback.lines().rev().find(|l| !l.trim().is_empty())?;
    let line = line.trim_end();
    let (exception, message) = match line.split_once(": ") {
        Some((exception, message)) => (exception, message),
        None => (line.trim_end_matches(':'), ""),
    };
    let valid = !exception.is_empty()
        && !exception.starts_with(' ')
        && exception
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    valid.then(|| (exception.to_owned(), message.to_owned()))
}
