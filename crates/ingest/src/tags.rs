//! Stream tags written in the Circonus forms: the `name|ST[cat:val,cat2:val2]` name suffix and
//! `"cat:val"` strings (httptrap `_tags`), where either part may be `b"<base64>"`.

use crate::batch::{check_tag, check_tag_count, Reason};

/// Where a `name|ST[…]` suffix starts.
pub(crate) const SUFFIX_OPEN: &str = "|ST[";

/// Splits `name|ST[a:b,c:d]` into the name and appends its tags. A name without the suffix is
/// returned whole.
pub(crate) fn split_stream_tags<'a>(
    full: &'a str,
    tags: &mut Vec<(String, String)>,
) -> Result<&'a str, Reason> {
    let Some(open) = full.find(SUFFIX_OPEN) else {
        return Ok(full);
    };
    let inner = full[open + SUFFIX_OPEN.len()..]
        .strip_suffix(']')
        .ok_or_else(|| Reason::bad_tag("`|ST[…]` must end the name", &full[open..]))?;
    // Brackets cannot be told apart from the block's own (`a|ST[x:y]|ST[z:w]`); such text
    // must come as b"<base64>".
    if inner.contains(['[', ']']) {
        let detail = "`[` or `]` inside `|ST[…]` (write such text as b\"<base64>\")";
        return Err(Reason::bad_tag(detail, &full[open..]));
    }
    if !inner.is_empty() {
        for part in inner.split(',') {
            tags.push(parse_tag(part)?);
            check_tag_count(tags.len())?;
        }
    }
    Ok(&full[..open])
}

/// Parses one `cat:val` tag (value optional, either part may be `b"<base64>"`), checked against
/// the tag bounds.
pub(crate) fn parse_tag(text: &str) -> Result<(String, String), Reason> {
    let (category, rest) = take_part(text)?;
    let value = match rest {
        None => String::new(),
        Some(rest) => match take_part(rest)? {
            (value, None) => value,
            // A second ':' in a plain value is part of the value (values may hold ':').
            (_, Some(_)) if !rest.starts_with("b\"") => rest.to_owned(),
            (_, Some(_)) => return Err(Reason::bad_tag("text after a b\"…\" value", text)),
        },
    };
    check_tag(&category, &value)?;
    Ok((category, value))
}

/// Reads one tag part up to an unquoted ':' and returns it with the text after the ':'.
fn take_part(text: &str) -> Result<(String, Option<&str>), Reason> {
    if let Some(quoted) = text.strip_prefix("b\"") {
        let close = quoted
            .find('"')
            .ok_or_else(|| Reason::bad_tag("unterminated b\"…\"", text))?;
        let decoded = decode_base64_part(&quoted[..close], text)?;
        let after = &quoted[close + 1..];
        return match after.strip_prefix(':') {
            Some(rest) => Ok((decoded, Some(rest))),
            None if after.is_empty() => Ok((decoded, None)),
            None => Err(Reason::bad_tag("expected ':' after b\"…\"", text)),
        };
    }
    Ok(match text.split_once(':') {
        Some((part, rest)) => (part.to_owned(), Some(rest)),
        None => (text.to_owned(), None),
    })
}

/// Decodes the inside of `b"…"` (standard alphabet, padding optional) into UTF-8 text.
fn decode_base64_part(encoded: &str, whole: &str) -> Result<String, Reason> {
    let bytes = base64_simd::forgiving_decode_to_vec(encoded.as_bytes())
        .map_err(|_| Reason::bad_tag("b\"…\" is not base64", whole))?;
    String::from_utf8(bytes).map_err(|_| Reason::bad_tag("b\"…\" does not decode to UTF-8", whole))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(c: &str, v: &str) -> (String, String) {
        (c.to_owned(), v.to_owned())
    }

    #[test]
    fn suffix_forms() {
        let mut tags = Vec::new();
        let name = split_stream_tags("db`latency|ST[db:orders,host:a:b]", &mut tags).unwrap();
        assert_eq!(name, "db`latency");
        assert_eq!(tags, [pair("db", "orders"), pair("host", "a:b")]);

        let mut tags = Vec::new();
        assert_eq!(split_stream_tags("plain", &mut tags).unwrap(), "plain");
        assert_eq!(split_stream_tags("x|ST[]", &mut tags).unwrap(), "x");
        assert!(tags.is_empty());
        assert!(split_stream_tags("x|ST[a:b]y", &mut tags).is_err());
        assert!(split_stream_tags("x|ST[a:b]|ST[c:d]", &mut tags).is_err());
    }

    #[test]
    fn base64_parts() {
        // "a b" and "c,d" are outside the tag charset, hence encoded.
        assert_eq!(
            parse_tag("b\"YSBi\":b\"YyxkCg==\"").unwrap(),
            pair("a b", "c,d\n")
        );
        assert_eq!(parse_tag("cat:b\"YyxkCg\"").unwrap(), pair("cat", "c,d\n"));
        assert_eq!(parse_tag("b\"YSBi\"").unwrap(), pair("a b", ""));
        assert!(parse_tag("b\"!!\":x").is_err());
        assert!(parse_tag("b\"YSBi").is_err());
        assert!(parse_tag("b\"/w==\":x").is_err(), "0xff is not UTF-8");
        assert!(parse_tag(":x").is_err(), "empty category");
    }
}
