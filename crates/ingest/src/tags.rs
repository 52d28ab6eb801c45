//! Stream tags written in the Circonus forms: the `name|ST[cat:val,cat2:val2]` name suffix and
//! `"cat:val"` strings (httptrap `_tags`), where either part may be `b"<base64>"`. The syntax is
//! `key::suffix`'s (the one reader of it, shared with the store's canonical form); this module
//! applies the parsers' bounds and turns its errors into rejection reasons.

pub(crate) use key::suffix::{suffix_tags_owned, PlainSuffix};
use key::suffix::{InputError, Limits};

use crate::batch::{check_tag, check_tag_count, Reason, TAGS_PER_SAMPLE_MAX, TAG_BYTES_MAX};

/// The parsers' bounds on tags (a plain suffix is lent only within them).
pub(crate) const LIMITS: Limits = Limits {
    part_bytes_max: TAG_BYTES_MAX,
    tags_max: TAGS_PER_SAMPLE_MAX,
};

/// [`key::suffix::SuffixMemo`] within the parsers' bounds.
pub(crate) type SuffixMemo = key::suffix::SuffixMemo;

/// A memo that remembers splits from body to body.
pub(crate) fn suffix_memo() -> SuffixMemo {
    SuffixMemo::new(LIMITS)
}

fn bad_tag(error: InputError<'_>) -> Reason {
    Reason::bad_tag(error.detail, error.found)
}

/// Splits `name|ST[a:b,c:d]` into the name and appends its tags. A name without the suffix is
/// returned whole.
pub(crate) fn split_stream_tags<'a>(
    full: &'a str,
    tags: &mut Vec<(String, String)>,
) -> Result<&'a str, Reason> {
    let Some((name, inner)) = key::suffix::split(full).map_err(bad_tag)? else {
        return Ok(full);
    };
    for tag in key::suffix::parse_tags(inner) {
        let (category, value) = tag.map_err(bad_tag)?;
        check_tag(&category, &value)?;
        tags.push((category, value));
        check_tag_count(tags.len())?;
    }
    Ok(name)
}

/// `full` split as `split_stream_tags` splits it, when that would succeed with at least one
/// tag and none of its parts written as `b"…"` (see `key::suffix::plain_suffix`).
pub(crate) fn plain_suffix(full: &str) -> Option<PlainSuffix<'_>> {
    key::suffix::plain_suffix(full, LIMITS)
}

/// Parses one `cat:val` tag (value optional, either part may be `b"<base64>"`), checked against
/// the tag bounds.
pub(crate) fn parse_tag(text: &str) -> Result<(String, String), Reason> {
    let (category, value) = key::suffix::parse_tag(text).map_err(bad_tag)?;
    check_tag(&category, &value)?;
    Ok((category, value))
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

    /// [`plain_suffixes_are_what_the_split_makes`] for any name: what `plain_suffix` lends is
    /// what `split_stream_tags` makes, and it leaves to the split only what the split refuses,
    /// decodes or finds no tags in.
    fn check_plain_against_split(full: &str) -> Result<(), String> {
        let mut tags = Vec::new();
        let split = split_stream_tags(full, &mut tags);
        match plain_suffix(full) {
            Some(plain) => {
                let pairs: Vec<(String, String)> = suffix_tags_owned(plain.text).collect();
                if split != Ok(plain.name) || pairs != tags || plain.count != tags.len() {
                    return Err(format!(
                        "{full:?}: lent {plain:?}, split {split:?} {tags:?}"
                    ));
                }
            }
            None if split.is_err() || tags.is_empty() || full.contains('"') => {}
            None => return Err(format!("{full:?}: declined, split {split:?} {tags:?}")),
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn plain_suffixes_of_any_name_are_what_the_split_makes(
            name in "[ab|]{0,3}",
            parts in proptest::collection::vec("[ab:,\\[\\]\"]{0,4}", 0..4),
            long in proptest::option::of((0usize..3, 1020usize..1030)),
            many in proptest::option::of(60usize..70),
        ) {
            let mut inner = parts.concat();
            if let Some((at, len)) = long {
                // A part near `TAG_BYTES_MAX`, as a category or a value.
                inner = match at {
                    0 => format!("{}:v,{inner}", "c".repeat(len)),
                    1 => format!("c:{},{inner}", "v".repeat(len)),
                    _ => format!("{inner}{}", "x".repeat(len)),
                };
            }
            if let Some(n) = many {
                // Near `TAGS_PER_SAMPLE_MAX` tags.
                inner = format!("{inner}{}", ",t:v".repeat(n));
            }
            let full = format!("{name}|ST[{inner}]");
            proptest::prop_assert_eq!(check_plain_against_split(&full), Ok(()));
        }
    }

    #[test]
    fn plain_suffixes_are_what_the_split_makes() {
        let bound = |n: usize| format!("x|ST[{}]", vec!["a:b"; n].join(","));
        let (long, max) = ("c".repeat(TAG_BYTES_MAX + 1), TAG_BYTES_MAX);
        for full in [
            "db`latency|ST[db:orders,host:a:b]".to_owned(),
            "x|ST[b:2,a:1,a:1]".to_owned(),
            "x|ST[flag,c:]".to_owned(),
            "x|ST[a:z,a0:c]".to_owned(),
            "plain".to_owned(),
            "x|ST[]".to_owned(),
            "x|ST[a:b]y".to_owned(),
            "x|ST[a:b]|ST[c:d]".to_owned(),
            "x|ST[b\"YSBi\":v]".to_owned(),
            "x|ST[c:b\"YSBi\"]".to_owned(),
            "x|ST[:v]".to_owned(),
            "x|ST[:a:b]".to_owned(),
            "x|ST[a::b,c:d:]".to_owned(),
            // The bounds, at and one past.
            bound(TAGS_PER_SAMPLE_MAX),
            bound(TAGS_PER_SAMPLE_MAX + 1),
            format!("x|ST[{}:v]", &long[..max]),
            format!("x|ST[{long}:v]"),
            format!("x|ST[c:{}]", &long[..max]),
            format!("x|ST[c:{long}]"),
            format!("x|ST[c:a:{}]", &long[..max - 2]),
            format!("x|ST[c:a:{}]", &long[..max - 1]),
        ] {
            assert_eq!(check_plain_against_split(&full), Ok(()));
        }
        assert!(plain_suffix(&bound(TAGS_PER_SAMPLE_MAX)).is_some());
        assert!(plain_suffix(&bound(TAGS_PER_SAMPLE_MAX + 1)).is_none());
        assert!(split_stream_tags(&bound(TAGS_PER_SAMPLE_MAX + 1), &mut Vec::new()).is_err());
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
