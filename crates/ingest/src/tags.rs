//! Stream tags written in the Circonus forms: the `name|ST[cat:val,cat2:val2]` name suffix and
//! `"cat:val"` strings (httptrap `_tags`), where either part may be `b"<base64>"`.

use std::sync::Arc;

use crate::batch::{check_tag, check_tag_count, Reason, TAGS_PER_SAMPLE_MAX, TAG_BYTES_MAX};

/// Where a `name|ST[…]` suffix starts.
pub(crate) const SUFFIX_OPEN: &str = "|ST[";

/// Splits `name|ST[a:b,c:d]` into the name and appends its tags. A name without the suffix is
/// returned whole.
pub(crate) fn split_stream_tags<'a>(
    full: &'a str,
    tags: &mut Vec<(String, String)>,
) -> Result<&'a str, Reason> {
    let Some(open) = suffix_open(full) else {
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

/// Where the first `|ST[` of `full` starts: a scan for its `|`, where `str::find` would set up
/// a substring searcher for every key.
fn suffix_open(full: &str) -> Option<usize> {
    let bytes = full.as_bytes();
    (0..bytes.len()).find(|&i| bytes[i] == b'|' && bytes[i..].starts_with(SUFFIX_OPEN.as_bytes()))
}

/// A name's `|ST[…]` suffix that needs no decoding: the name before it, and the `cat:val,…`
/// text inside it with its tag count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlainSuffix<'a> {
    pub name: &'a str,
    pub text: &'a str,
    pub count: usize,
}

/// `full` split as `split_stream_tags` splits it, when that would succeed with at least one
/// tag and none of its parts written as `b"…"`: its tags are then exactly
/// [`suffix_tags`]`(text)`, and nothing needs to be copied. `None` otherwise (no suffix, or one
/// `split_stream_tags` decodes or rejects).
pub(crate) fn plain_suffix(full: &str) -> Option<PlainSuffix<'_>> {
    let open = suffix_open(full)?;
    let text = full[open + SUFFIX_OPEN.len()..].strip_suffix(']')?;
    let count = plain_tag_count(text)?;
    Some(PlainSuffix {
        name: &full[..open],
        text,
        count,
    })
}

/// [`plain_suffix`] remembered by key text, for a reader that sees the same keys body after
/// body (clients resend their series in the same order): the key after the one found last is
/// compared first, then looked up by hash, so a key seen before costs a compare, not the scan
/// of its suffix. Bounded in keys and bytes; emptied when full.
#[derive(Default)]
pub(crate) struct SuffixMemo {
    /// Key text → its entry in `entries`.
    index: std::collections::HashMap<Arc<str>, u32, foldhash::fast::RandomState>,
    /// In the order first seen: key text (the index's, shared), the name's length and the tag
    /// count (0: no plain suffix).
    entries: Vec<(Arc<str>, u32, u32)>,
    /// The entry after the one found last.
    next: usize,
    key_bytes: usize,
    /// Off for a reader of one body (`SuffixMemo::off`): remembering costs more than it saves.
    off: bool,
}

/// Keys a [`SuffixMemo`] holds at most, and their bytes.
const MEMO_KEYS_MAX: usize = 1 << 16;
const MEMO_KEY_BYTES_MAX: usize = 4 << 20;

impl SuffixMemo {
    /// A memo that remembers nothing: [`SuffixMemo::plain_suffix`] is [`plain_suffix`].
    pub(crate) fn off() -> SuffixMemo {
        SuffixMemo {
            off: true,
            ..SuffixMemo::default()
        }
    }

    /// [`plain_suffix`]`(full)`, remembered.
    pub(crate) fn plain_suffix<'k>(&mut self, full: &'k str) -> Option<PlainSuffix<'k>> {
        if self.off {
            return plain_suffix(full);
        }
        let (name_len, count) = self.split(full);
        if count == 0 {
            return None;
        }
        let plain = PlainSuffix {
            name: full.get(..name_len)?,
            text: full.get(name_len + SUFFIX_OPEN.len()..full.len().checked_sub(1)?)?,
            count,
        };
        debug_assert_eq!(Some(plain), plain_suffix(full), "a remembered split");
        Some(plain)
    }

    /// The name's length and tag count of `full` (a count of 0: no plain suffix).
    fn split(&mut self, full: &str) -> (usize, usize) {
        let found = match self.entries.get(self.next) {
            Some((key, ..)) if **key == *full => Some(self.next),
            _ => self.index.get(full).map(|&at| at as usize),
        };
        if let Some((_, name_len, count)) = found.and_then(|at| self.entries.get(at)) {
            self.next = found.map_or(0, |at| at + 1);
            return (*name_len as usize, *count as usize);
        }
        let split = plain_suffix(full).map_or((0, 0), |plain| (plain.name.len(), plain.count));
        self.remember(full, split);
        split
    }

    fn remember(&mut self, full: &str, (name_len, count): (usize, usize)) {
        let (Ok(name_len), Ok(count)) = (u32::try_from(name_len), u32::try_from(count)) else {
            return;
        };
        if self.entries.len() >= MEMO_KEYS_MAX || self.key_bytes + full.len() > MEMO_KEY_BYTES_MAX {
            self.index.clear();
            self.entries.clear();
            self.key_bytes = 0;
        }
        self.key_bytes += full.len();
        let text: Arc<str> = full.into();
        self.index
            .insert(Arc::clone(&text), self.entries.len() as u32);
        self.entries.push((text, name_len, count));
        self.next = self.entries.len();
    }

    /// Memory held, for a caller bounding what it keeps between bodies.
    pub(crate) fn capacity_bytes(&self) -> usize {
        // Each text once, after its two reference counts.
        self.key_bytes
            + self.entries.len() * 2 * std::mem::size_of::<usize>()
            + self.index.capacity() * std::mem::size_of::<(Arc<str>, u32)>()
            + self.entries.capacity() * std::mem::size_of::<(Arc<str>, u32, u32)>()
    }
}

/// The number of tags in a suffix's text if every one passes `check_tag` and
/// `check_tag_count` as [`suffix_tags`] splits them, with no `[`, `]` or `"` (the split refuses
/// brackets, and a `"` may be part of a `b"…"` to decode); `None` otherwise. One pass over the
/// bytes: the split and the checks in turn took three (a key is read for every sample).
fn plain_tag_count(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return None;
    }
    // The tag being read: where it starts and where its first `:` is.
    let (mut start, mut colon) = (0, None);
    let mut count = 0;
    // A tag ending at `end` (exclusive) fits: a category, and parts within the bound.
    let fits = |start: usize, colon: Option<usize>, end: usize| {
        let (category, value) = match colon {
            Some(c) => (c - start, end - c - 1),
            None => (end - start, 0),
        };
        category > 0 && category.max(value) <= TAG_BYTES_MAX
    };
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' | b']' | b'"' => return None,
            b',' => {
                if !fits(start, colon, i) {
                    return None;
                }
                count += 1;
                (start, colon) = (i + 1, None);
            }
            b':' if colon.is_none() => colon = Some(i),
            _ => {}
        }
    }
    count += 1;
    (fits(start, colon, bytes.len()) && count <= TAGS_PER_SAMPLE_MAX).then_some(count)
}

/// The tags of a plain suffix's text (see [`plain_suffix`]), as `parse_tag` reads them: the
/// category up to the first `:`, the value the rest (which may hold `:`), empty without a `:`.
pub fn suffix_tags(text: &str) -> impl Iterator<Item = (&str, &str)> {
    // `split(',')` and `split_once(':')`, as byte scans: a key's parts are a few bytes each,
    // shorter than a searcher takes to set up. Bounded: each step consumes a part.
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let text = rest?;
        let part = match text.bytes().position(|b| b == b',') {
            Some(comma) => {
                rest = Some(&text[comma + 1..]);
                &text[..comma]
            }
            None => {
                rest = None;
                text
            }
        };
        Some(match part.bytes().position(|b| b == b':') {
            Some(colon) => (&part[..colon], &part[colon + 1..]),
            None => (part, ""),
        })
    })
}

/// [`suffix_tags`] as the owned pairs a tag list holds.
pub(crate) fn suffix_tags_owned(text: &str) -> impl Iterator<Item = (String, String)> + '_ {
    suffix_tags(text).map(|(c, v)| (c.to_owned(), v.to_owned()))
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

    proptest::proptest! {
        /// Keys seen again in the same order, in another order and for the first time: the
        /// memo's split is `plain_suffix`'s every time.
        #[test]
        fn remembered_splits_are_plain_suffix(
            keys in proptest::collection::vec(
                "[a-z|]{0,4}(\\|ST\\[[a-z:,\\[\"]{0,12}\\])?[a-z\\]]{0,2}", 1..20),
            order in proptest::collection::vec(0usize..40, 0..60),
        ) {
            let (mut memo, mut off) = (SuffixMemo::default(), SuffixMemo::off());
            let sequence = keys.iter().chain(keys.iter()).chain(order.iter().map(|&i| &keys[i % keys.len()]));
            for key in sequence {
                proptest::prop_assert_eq!(memo.plain_suffix(key), plain_suffix(key), "{}", key);
                proptest::prop_assert_eq!(off.plain_suffix(key), plain_suffix(key), "{}", key);
            }
            proptest::prop_assert!(off.entries.is_empty());
        }
    }

    #[test]
    fn a_full_memo_starts_again() {
        let mut memo = SuffixMemo::default();
        for round in 0..2 {
            for i in 0..MEMO_KEYS_MAX + 10 {
                let key = format!("m{i}|ST[host:h{round}]");
                let plain = memo.plain_suffix(&key).unwrap();
                assert_eq!(
                    (plain.name, plain.count),
                    (&key[..key.find('|').unwrap()], 1)
                );
            }
        }
        assert!(memo.entries.len() <= MEMO_KEYS_MAX);
        assert!(memo.key_bytes <= MEMO_KEY_BYTES_MAX);
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
    fn suffix_tags_split_as_split_and_split_once() {
        for text in [
            "",
            "a",
            "a:b",
            "a:b:c,d",
            ",",
            "a,,b:",
            ":x,y:",
            "a:b,c:d,e:f",
        ] {
            let expected: Vec<(&str, &str)> = text
                .split(',')
                .map(|part| part.split_once(':').unwrap_or((part, "")))
                .collect();
            assert_eq!(suffix_tags(text).collect::<Vec<_>>(), expected, "{text:?}");
        }
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
