//! Rust type names as a user writes them, for messages.
//!
//! [`std::any::type_name`] spells out every module path
//! (`alloc::vec::Vec<my_app::Order>`), which is noise in a message about a
//! type the user wrote as `Vec<Order>`.

/// The name of `T` as a user writes it: [`std::any::type_name`] with the
/// module path of every path segment dropped, generics, references,
/// tuples, arrays, slices, `dyn` bounds and lifetimes kept.
///
/// For messages only: two types of the same name in different modules get
/// the same short name, so never use it as a key.
///
/// ```
/// use harness::short_type_name;
/// use std::collections::HashMap;
///
/// assert_eq!(short_type_name::<String>(), "String");
/// assert_eq!(short_type_name::<Vec<Option<(u32, &str)>>>(), "Vec<Option<(u32, &str)>>");
/// assert_eq!(
///     short_type_name::<HashMap<String, serde_json::Value>>(),
///     "HashMap<String, Value>"
/// );
/// assert_eq!(short_type_name::<dyn std::error::Error + Send>(), "dyn Error + Send");
/// ```
pub fn short_type_name<T: ?Sized>() -> String {
    shorten_type_name(std::any::type_name::<T>())
}

/// `name`, a Rust type name such as [`std::any::type_name`] gives, with the
/// module path of every path segment dropped: `alloc::vec::Vec<my::Order>`
/// is `Vec<Order>`, `[my::T; 3]` is `[T; 3]`. A closure keeps the item it
/// is in (`main::{{closure}}`). Anything else is kept as it is, so any text,
/// even one that is not a type name, gives an answer.
///
/// ```
/// use harness::shorten_type_name;
///
/// assert_eq!(shorten_type_name("alloc::vec::Vec<my_app::Order>"), "Vec<Order>");
/// assert_eq!(shorten_type_name("&'static [my::T; 3]"), "&'static [T; 3]");
/// assert_eq!(shorten_type_name("my_app::main::{{closure}}"), "main::{{closure}}");
/// ```
pub fn shorten_type_name(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < chars.len() {
        if starts_segment(&chars, i) {
            let (segments, end) = read_path(&chars, i);
            out.push_str(&short_path(&segments));
            i = end;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// Whether a path segment starts at `i`: an identifier, or a compiler-made
/// segment in braces (`{{closure}}`).
fn starts_segment(chars: &[char], i: usize) -> bool {
    chars.get(i).is_some_and(|&c| is_ident(c) || c == '{')
}

/// Characters of an identifier; `#` for raw identifiers (`r#type`).
fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '#'
}

/// The segments of the path `a::b::{{closure}}` that starts at `start`, and
/// where it ends.
fn read_path(chars: &[char], start: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    let mut i = start;
    loop {
        let end = if chars[i] == '{' {
            braces_end(chars, i)
        } else {
            chars[i..]
                .iter()
                .position(|&c| !is_ident(c))
                .map_or(chars.len(), |n| i + n)
        };
        segments.push(chars[i..end].iter().collect());
        let more = chars.get(end) == Some(&':')
            && chars.get(end + 1) == Some(&':')
            && starts_segment(chars, end + 2);
        if !more {
            return (segments, end);
        }
        i = end + 2;
    }
}

/// The end of the braced segment that starts at `start` (just past its
/// closing brace), or the end of the text when it never closes.
fn braces_end(chars: &[char], start: usize) -> usize {
    let mut depth = 0usize;
    for (n, &c) in chars[start..].iter().enumerate() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return start + n + 1;
                }
            }
            _ => {}
        }
    }
    chars.len()
}

/// The last named segment of a path, and the compiler-made ones after it:
/// `main::{{closure}}` says more than `{{closure}}` alone.
fn short_path(segments: &[String]) -> String {
    let named = segments
        .iter()
        .rposition(|s| !s.starts_with('{'))
        .unwrap_or(0);
    segments[named..].join("::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_are_dropped_and_the_shape_of_the_type_kept() {
        for (full, short) in [
            ("alloc::string::String", "String"),
            ("alloc::vec::Vec<my_app::Order>", "Vec<Order>"),
            ("core::option::Option<(u32, &str)>", "Option<(u32, &str)>"),
            (
                "std::collections::hash::map::HashMap<alloc::string::String, serde_json::value::Value>",
                "HashMap<String, Value>",
            ),
            ("[my::T; 3]", "[T; 3]"),
            ("&[my::T]", "&[T]"),
            ("&mut [my::a::T]", "&mut [T]"),
            ("dyn my::Trait + core::marker::Send", "dyn Trait + Send"),
            (
                "alloc::boxed::Box<dyn core::ops::function::Fn(u8) -> u8 + core::marker::Send>",
                "Box<dyn Fn(u8) -> u8 + Send>",
            ),
            (
                "fn(&'_ str) -> core::option::Option<alloc::string::String>",
                "fn(&'_ str) -> Option<String>",
            ),
            ("&'static my::T<'a, u8>", "&'static T<'a, u8>"),
            ("*const [u8]", "*const [u8]"),
            ("*mut my::T", "*mut T"),
            ("(u8,)", "(u8,)"),
            ("()", "()"),
            ("!", "!"),
            ("impl my::Trait", "impl Trait"),
            ("<my::A as my::Tr>::Out", "<A as Tr>::Out"),
            (
                "&dyn for<'a> core::ops::function::Fn(&'a str)",
                "&dyn for<'a> Fn(&'a str)",
            ),
            ("my::f<alloc::string::String>", "f<String>"),
            ("::std::string::String", "::String"),
            ("my::r#type::r#Match", "r#Match"),
            ("u32", "u32"),
            ("String", "String"),
            ("Vec<Order>", "Vec<Order>"),
            ("my_app::Ünïcödé", "Ünïcödé"),
        ] {
            assert_eq!(shorten_type_name(full), short, "{full}");
        }
    }

    #[test]
    fn a_closure_keeps_the_item_it_is_in() {
        for (full, short) in [
            ("my_app::main::{{closure}}", "main::{{closure}}"),
            ("my_app::main::g::{{closure}}", "g::{{closure}}"),
            (
                "my_app::main::{{closure}}::{{closure}}",
                "main::{{closure}}::{{closure}}",
            ),
            (
                "alloc::boxed::Box<my_app::run::{{closure}}>",
                "Box<run::{{closure}}>",
            ),
            ("{{closure}}", "{{closure}}"),
            ("{{closure}}::{{closure}}", "{{closure}}::{{closure}}"),
        ] {
            assert_eq!(shorten_type_name(full), short, "{full}");
        }
    }

    #[test]
    fn any_text_gives_an_answer_without_panicking() {
        for (odd, short) in [
            ("", ""),
            ("::", "::"),
            (":", ":"),
            ("a::", "a::"),
            ("a::b::", "b::"),
            ("::a", "::a"),
            ("a:::b", "a:::b"),
            ("<", "<"),
            (">>", ">>"),
            ("my::Vec<my::T", "Vec<T"),
            ("my::T>>", "T>>"),
            ("[my::T", "[T"),
            ("my::T]]", "T]]"),
            ("((a::B", "((B"),
            ("{", "{"),
            ("}", "}"),
            ("my::{{closure", "my::{{closure"),
            ("my::{{closure}", "my::{{closure}"),
            ("a::}}", "a::}}"),
            ("a::{", "a::{"),
            ("   ", "   "),
            ("a :: b", "a :: b"),
            ("é::ü", "ü"),
        ] {
            assert_eq!(shorten_type_name(odd), short, "{odd:?}");
        }
        // Long and deep inputs too.
        let deep = "a::Vec<".repeat(10_000) + &">".repeat(10_000);
        assert_eq!(
            shorten_type_name(&deep),
            "Vec<".repeat(10_000) + &">".repeat(10_000)
        );
        let braces = "{".repeat(1000);
        assert_eq!(shorten_type_name(&braces), braces);
    }

    #[test]
    fn the_generic_form_names_real_types() {
        mod shop {
            pub(super) struct Order;
            pub(super) trait Priced {}
        }
        assert_eq!(short_type_name::<Vec<shop::Order>>(), "Vec<Order>");
        assert_eq!(
            short_type_name::<Option<[shop::Order; 2]>>(),
            "Option<[Order; 2]>"
        );
        assert_eq!(
            short_type_name::<dyn shop::Priced + Send + Sync>(),
            "dyn Priced + Send + Sync"
        );
        assert_eq!(short_type_name::<str>(), "str");
        let closure = || ();
        assert_eq!(
            shorten_type_name(std::any::type_name_of_val(&closure)),
            "the_generic_form_names_real_types::{{closure}}"
        );
    }
}
