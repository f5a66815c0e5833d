//! The rule for the names the recipes put into session ids, commit
//! trailers, events and prompts: a project's name, a plan's task ids.

/// What is wrong with `id` as such a name, and where; `None` when it is
/// one or more ASCII letters, digits, `-` and `_` (the rule of a ledger's
/// feature ids).
pub(crate) fn problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("it is empty".to_owned());
    }
    id.char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        .map(|(at, c)| format!("it holds {c:?} at byte {at}"))
}

#[cfg(test)]
mod tests {
    use super::problem;

    #[test]
    fn an_id_is_letters_digits_dashes_and_underscores() {
        for good in ["a", "A-1", "task_2", "0"] {
            assert_eq!(problem(good), None, "{good:?}");
        }
        for (bad, said) in [
            ("", "it is empty"),
            ("a/b", "it holds '/' at byte 1"),
            ("x\ny", r"it holds '\n' at byte 1"),
            ("a b", "it holds ' ' at byte 1"),
            ("é", "it holds 'é' at byte 0"),
        ] {
            assert_eq!(problem(bad).as_deref(), Some(said), "{bad:?}");
        }
    }
}
