//! Query strings read strictly: a parameter the call does not take, one
//! given twice, or a value that does not read (nor percent-decode) is
//! refused with [`ApiError::BadParameter`], which names the parameter and says why
//! (`{"error": …, "kind": "parameter", "parameter": NAME}`, status 400),
//! rather than ignored or answered with a plain-text rejection.

use crate::error::ApiError;
use harness::TaskPath;
use std::num::IntErrorKind;

/// The most bytes of a bad value an error quotes.
const QUOTED: usize = 200;

/// A query string's parameters, percent-decoded.
#[derive(Debug)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    /// Reads `raw`: `name=value` pairs joined by `&`, `+` for a space,
    /// percent-encoded. Only `allowed` names are taken (and `token`, which
    /// the token check reads); only those in `repeated` may come more than
    /// once.
    pub(crate) fn parse(
        raw: Option<&str>,
        allowed: &[&str],
        repeated: &[&str],
    ) -> Result<Self, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let name = decode(&name.replace('+', " "), "a parameter's name")?;
            let value = decoded(&value.replace('+', " ")).map_err(|why| bad(&name, value, why))?;
            if name == "token" {
                continue;
            }
            if !allowed.contains(&name.as_str()) {
                let why = if allowed.is_empty() {
                    "this call takes no parameter".to_owned()
                } else {
                    let takes = allowed
                        .iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    format!("this call takes no such parameter; it takes {takes}")
                };
                return Err(bad(&name, &value, why));
            }
            if !repeated.contains(&name.as_str()) && pairs.iter().any(|(n, _)| *n == name) {
                return Err(bad(&name, &value, "it is given more than once".into()));
            }
            pairs.push((name, value));
        }
        Ok(Query(pairs))
    }

    /// The value of `name`, if given.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A whole number from `min` to `max`, if given.
    pub(crate) fn whole(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        let range = if max == u64::MAX {
            format!("a whole number from {min}")
        } else {
            format!("a whole number from {min} to {max}")
        };
        let n = match text.parse::<u64>() {
            Ok(n) => n,
            Err(e) if *e.kind() == IntErrorKind::PosOverflow => {
                return Err(bad(name, text, format!("too large: {range} is expected")));
            }
            Err(_) if text.starts_with('-') => {
                return Err(bad(name, text, format!("negative: {range} is expected")));
            }
            Err(_) if text.is_empty() => {
                return Err(bad(name, text, format!("empty: {range} is expected")));
            }
            Err(_) => {
                return Err(bad(
                    name,
                    text,
                    format!("not a number: {range} (digits only) is expected"),
                ));
            }
        };
        if n < min || n > max {
            return Err(bad(
                name,
                text,
                format!("out of range: {range} is expected"),
            ));
        }
        Ok(Some(n))
    }

    /// A page's size: `default` when absent, else from 1 to `max`.
    pub(crate) fn limit(&self, (default, max): (usize, usize)) -> Result<usize, ApiError> {
        let max64 = u64::try_from(max).unwrap_or(u64::MAX);
        Ok(match self.whole("limit", 1, max64)? {
            // At most `max`, a `usize`.
            Some(n) => usize::try_from(n).unwrap_or(max),
            None => default,
        })
    }
}

/// A task's path given as parameter `name`: empty for the run's own loop,
/// else segments joined by `/`, each a step's name and, for a fan-out's
/// branch, `#` and its index (`review`, `square#1`, `review/check#0`). A
/// step's name may itself hold `#` (`fix#bug#0` is a branch of step
/// `fix#bug`), so only an empty or blank segment, which no task's path
/// has, is refused, naming the parameter and the segment; any other path no task
/// has is a filter that keeps nothing.
pub(crate) fn task_path(name: &str, text: &str) -> Result<TaskPath, ApiError> {
    if text.is_empty() {
        return Ok(TaskPath::root());
    }
    if let Some(i) = text.split('/').position(|s| s.trim().is_empty()) {
        return Err(bad(
            name,
            text,
            format!(
                "segment {} is empty or blank: a task's path is step names joined with `/` (a \
                 fan-out's branch with `#` and its index: `review/check#0`), or empty for the \
                 run's own loop",
                i + 1
            ),
        ));
    }
    Ok(TaskPath::from(text))
}

/// A [`ApiError::BadParameter`] quoting at most [`QUOTED`] bytes of
/// `value`.
pub(crate) fn bad(parameter: &str, value: &str, why: String) -> ApiError {
    let mut end = value.len().min(QUOTED);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let quoted = if end < value.len() {
        format!("{}…", &value[..end])
    } else {
        value.to_owned()
    };
    ApiError::BadParameter {
        parameter: parameter.chars().take(QUOTED).collect(),
        value: quoted,
        why,
    }
}

/// Percent-decodes `text` (UTF-8); `what` names it in the error.
pub(crate) fn decode(text: &str, what: &str) -> Result<String, ApiError> {
    decoded(text).map_err(|why| ApiError::BadRequest(format!("{what}: {why}")))
}

/// Percent-decodes `text` (UTF-8); the error says why it does not.
fn decoded(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else {
                return Err(format!("`%` at byte {i} is not followed by two hex digits"));
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once percent-decoded".to_owned())
}

/// `text` percent-encoded for a query string: every byte but the
/// unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(e: ApiError) -> (String, String) {
        match e {
            ApiError::BadParameter { parameter, why, .. } => (parameter, why),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn numbers_are_whole_in_range_and_each_bad_one_says_why() {
        let q = Query::parse(
            Some("a=-1&b=x&c=99999999999999999999999&d=&e=7&f=0"),
            &["a", "b", "c", "d", "e", "f"],
            &[],
        )
        .unwrap();
        assert!(
            why(q.whole("a", 0, 9).unwrap_err())
                .1
                .starts_with("negative")
        );
        assert!(
            why(q.whole("b", 0, 9).unwrap_err())
                .1
                .starts_with("not a number")
        );
        assert!(
            why(q.whole("c", 0, u64::MAX).unwrap_err())
                .1
                .starts_with("too large")
        );
        assert!(why(q.whole("d", 0, 9).unwrap_err()).1.starts_with("empty"));
        assert!(
            why(q.whole("e", 0, 5).unwrap_err())
                .1
                .starts_with("out of range")
        );
        assert!(
            why(q.whole("f", 1, 5).unwrap_err())
                .1
                .starts_with("out of range")
        );
        assert_eq!(q.whole("e", 0, 9).unwrap(), Some(7));
        assert_eq!(q.whole("missing", 0, 9).unwrap(), None);
    }

    #[test]
    fn unknown_and_repeated_parameters_are_refused_by_name() {
        let e = Query::parse(Some("limt=5"), &["limit"], &[]).unwrap_err();
        assert_eq!(why(e).0, "limt");
        let e = Query::parse(Some("limit=5&limit=6"), &["limit"], &[]).unwrap_err();
        assert_eq!(why(e).0, "limit");
        let q = Query::parse(Some("w=a&w=b%2Cc&token=t"), &["w"], &["w"]).unwrap();
        assert_eq!(q.all("w").collect::<Vec<_>>(), ["a", "b,c"]);
        assert_eq!(q.get("token"), None);
    }

    #[test]
    fn a_value_that_does_not_decode_is_refused_by_its_parameter_s_name() {
        for raw in ["path=%zz", "path=a%2", "path=%FF"] {
            let (parameter, why) = why(Query::parse(Some(raw), &["path"], &[]).unwrap_err());
            assert_eq!(parameter, "path", "{raw}");
            assert!(why.contains("%") || why.contains("UTF-8"), "{raw}: {why}");
        }
        // A name that does not decode has no name to give.
        assert!(matches!(
            Query::parse(Some("%zz=1"), &["path"], &[]),
            Err(ApiError::BadRequest(_))
        ));
    }

    #[test]
    fn a_task_path_is_names_with_a_branch_s_index_and_a_bad_segment_is_named() {
        // A step's name may hold `#`: `fix#bug#0` is a branch of `fix#bug`.
        for good in [
            "",
            "review",
            "square#1",
            "review/check#0",
            "a#0/b/c#12",
            "fix#bug",
            "fix#bug#0",
            "#1",
        ] {
            assert_eq!(task_path("path", good).unwrap().as_str(), good);
        }
        for (bad, segment) in [
            ("review/", "segment 2 is empty"),
            ("/review", "segment 1 is empty"),
            ("a//b", "segment 2 is empty"),
            ("/", "segment 1 is empty"),
            ("a/ /b", "segment 2 is empty or blank"),
        ] {
            let (parameter, why) = why(task_path("path", bad).unwrap_err());
            assert_eq!(parameter, "path", "{bad}");
            assert!(why.starts_with(segment), "{bad}: {why}");
            assert!(!why.contains("  "), "{bad}: {why}");
        }
    }

    #[test]
    fn encoding_then_decoding_gives_the_text_back() {
        for text in ["plain-id_1.2~", "a b/c?d=e&f", "é\u{202e}%"] {
            assert_eq!(decode(&encode(text), "t").unwrap(), text);
        }
        assert_eq!(encode("a b"), "a%20b");
    }
}
