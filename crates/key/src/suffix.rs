//! Stream tags as clients write them: the `name|ST[cat:val,cat2:val2]` name suffix and
//! `"cat:val"` strings (httptrap `_tags`), where either part may be `b"<base64>"` (padding
//! optional). This is the lenient input form: parts are split at `,` and the first `:`, a value
//! may hold `:` and may be empty, and any byte but `[`, `]` and `,` is taken as it is (the
//! canonical form, [`crate::StreamKey`], encodes what is outside its charset). Size bounds are
//! the caller's ([`Limits`]): a parser applies its own before the store applies the key's.

use std::sync::Arc;

use crate::TAG_MARKER;

/// Why a tag or suffix cannot be read: what is wrong and the text it was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputError<'a> {
    pub detail: &'static str,
    pub found: &'a str,
}

/// The bounds a reader of tags applies (its own, not the key's: a parser refuses earlier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes in one category or one value (after `b"…"` decoding).
    pub part_bytes_max: usize,
    /// Tags on one name.
    pub tags_max: usize,
}

/// Where the first `|ST[` of `full` starts: a scan for its `|`, where `str::find` would set up
/// a substring searcher for every key.
pub fn suffix_open(full: &str) -> Option<usize> {
    crate::find_tag_marker(full)
}

/// `full` split into the name before its `|ST[…]` suffix and the text inside the suffix
/// (`None`: no suffix). A suffix must end the name and hold no `[` or `]` (brackets cannot be
/// told apart from the block's own, `a|ST[x:y]|ST[z:w]`; such text must come as
/// `b"<base64>"`).
pub fn split(full: &str) -> Result<Option<(&str, &str)>, InputError<'_>> {
    let Some(open) = suffix_open(full) else {
        return Ok(None);
    };
    let found = &full[open..];
    let inner = full[open + TAG_MARKER.len()..]
        .strip_suffix(']')
        .ok_or(InputError {
            detail: "`|ST[…]` must end the name",
            found,
        })?;
    if inner.contains(['[', ']']) {
        let detail = "`[` or `]` inside `|ST[…]` (write such text as b\"<base64>\")";
        return Err(InputError { detail, found });
    }
    Ok(Some((&full[..open], inner)))
}

/// The tags of a suffix's inner text (what [`split`] returns), each read by [`parse_tag`];
/// none for empty text (`name|ST[]`).
pub fn parse_tags(
    inner: &str,
) -> impl Iterator<Item = Result<(String, String), InputError<'_>>> + '_ {
    let parts = (!inner.is_empty()).then(|| inner.split(','));
    parts.into_iter().flatten().map(parse_tag)
}

/// A name's `|ST[…]` suffix that needs no decoding: the name before it, and the `cat:val,…`
/// text inside it with its tag count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainSuffix<'a> {
    pub name: &'a str,
    pub text: &'a str,
    pub count: usize,
}

/// `full` split as [`split`] then [`parse_tags`] split it, when that would succeed with at
/// least one tag, every tag within `limits` with a category, and none of its parts written as
/// `b"…"`: its tags are then exactly [`suffix_tags`]`(text)`, and nothing needs to be copied.
/// `None` otherwise (no suffix, or one the general path decodes or rejects).
pub fn plain_suffix(full: &str, limits: Limits) -> Option<PlainSuffix<'_>> {
    let open = suffix_open(full)?;
    let text = full[open + TAG_MARKER.len()..].strip_suffix(']')?;
    let count = plain_tag_count(text, limits)?;
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
pub struct SuffixMemo {
    limits: Limits,
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
pub const MEMO_KEYS_MAX: usize = 1 << 16;
pub const MEMO_KEY_BYTES_MAX: usize = 4 << 20;

impl SuffixMemo {
    /// A memo of splits within `limits`.
    pub fn new(limits: Limits) -> SuffixMemo {
        SuffixMemo {
            limits,
            index: Default::default(),
            entries: Vec::new(),
            next: 0,
            key_bytes: 0,
            off: false,
        }
    }

    /// A memo that remembers nothing: [`SuffixMemo::plain_suffix`] is [`plain_suffix`].
    pub fn off(limits: Limits) -> SuffixMemo {
        SuffixMemo {
            off: true,
            ..SuffixMemo::new(limits)
        }
    }

    /// [`plain_suffix`]`(full)`, remembered.
    pub fn plain_suffix<'k>(&mut self, full: &'k str) -> Option<PlainSuffix<'k>> {
        if self.off {
            return plain_suffix(full, self.limits);
        }
        let (name_len, count) = self.split(full);
        if count == 0 {
            return None;
        }
        let plain = PlainSuffix {
            name: full.get(..name_len)?,
            text: full.get(name_len + TAG_MARKER.len()..full.len().checked_sub(1)?)?,
            count,
        };
        debug_assert_eq!(
            Some(plain),
            plain_suffix(full, self.limits),
            "a remembered split"
        );
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
        let split =
            plain_suffix(full, self.limits).map_or((0, 0), |plain| (plain.name.len(), plain.count));
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
    pub fn capacity_bytes(&self) -> usize {
        // Each text once, after its two reference counts.
        self.key_bytes
            + self.entries.len() * 2 * std::mem::size_of::<usize>()
            + self.index.capacity() * std::mem::size_of::<(Arc<str>, u32)>()
            + self.entries.capacity() * std::mem::size_of::<(Arc<str>, u32, u32)>()
    }
}

/// The number of tags in a suffix's text if every one has a category and parts within
/// `limits` as [`suffix_tags`] splits them, at most `limits.tags_max` of them, with no `[`, `]`
/// or `"` (the split refuses brackets, and a `"` may be part of a `b"…"` to decode); `None`
/// otherwise. One pass over the bytes: the split and the checks in turn took three (a key is
/// read for every sample).
fn plain_tag_count(text: &str, limits: Limits) -> Option<usize> {
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
        category > 0 && category.max(value) <= limits.part_bytes_max
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
    (fits(start, colon, bytes.len()) && count <= limits.tags_max).then_some(count)
}

/// The tags of a plain suffix's text (see [`plain_suffix`]), as [`parse_tag`] reads them: the
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
pub fn suffix_tags_owned(text: &str) -> impl Iterator<Item = (String, String)> + '_ {
    suffix_tags(text).map(|(c, v)| (c.to_owned(), v.to_owned()))
}

/// Reads one `cat:val` tag (value optional, either part may be `b"<base64>"`). Bounds are the
/// caller's to check.
pub fn parse_tag(text: &str) -> Result<(String, String), InputError<'_>> {
    let bad = |detail| InputError {
        detail,
        found: text,
    };
    let (category, rest) = take_part(text).map_err(bad)?;
    let value = match rest {
        None => String::new(),
        Some(rest) => match take_part(rest).map_err(bad)? {
            (value, None) => value,
            // A second ':' in a plain value is part of the value (values may hold ':').
            (_, Some(_)) if !rest.starts_with("b\"") => rest.to_owned(),
            (_, Some(_)) => return Err(bad("text after a b\"…\" value")),
        },
    };
    Ok((category, value))
}

/// Reads one tag part up to an unquoted ':' and returns it with the text after the ':'.
fn take_part(text: &str) -> Result<(String, Option<&str>), &'static str> {
    if let Some(quoted) = text.strip_prefix("b\"") {
        let close = quoted.find('"').ok_or("unterminated b\"…\"")?;
        let decoded = decode_base64_part(&quoted[..close])?;
        let after = &quoted[close + 1..];
        return match after.strip_prefix(':') {
            Some(rest) => Ok((decoded, Some(rest))),
            None if after.is_empty() => Ok((decoded, None)),
            None => Err("expected ':' after b\"…\""),
        };
    }
    Ok(match text.split_once(':') {
        Some((part, rest)) => (part.to_owned(), Some(rest)),
        None => (text.to_owned(), None),
    })
}

/// Decodes the inside of `b"…"` (standard alphabet, padding optional) into UTF-8 text.
fn decode_base64_part(encoded: &str) -> Result<String, &'static str> {
    let bytes = base64_simd::forgiving_decode_to_vec(encoded.as_bytes())
        .map_err(|_| "b\"…\" is not base64")?;
    String::from_utf8(bytes).map_err(|_| "b\"…\" does not decode to UTF-8")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const LIMITS: Limits = Limits {
        part_bytes_max: 1024,
        tags_max: 64,
    };

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
            let (mut memo, mut off) = (SuffixMemo::new(LIMITS), SuffixMemo::off(LIMITS));
            let sequence = keys.iter().chain(keys.iter()).chain(order.iter().map(|&i| &keys[i % keys.len()]));
            for key in sequence {
                proptest::prop_assert_eq!(memo.plain_suffix(key), plain_suffix(key, LIMITS), "{}", key);
                proptest::prop_assert_eq!(off.plain_suffix(key), plain_suffix(key, LIMITS), "{}", key);
            }
            proptest::prop_assert!(off.entries.is_empty());
        }
    }

    #[test]
    fn a_full_memo_starts_again() {
        let mut memo = SuffixMemo::new(LIMITS);
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
        assert_eq!(
            split("db`latency|ST[db:orders,host:a:b]"),
            Ok(Some(("db`latency", "db:orders,host:a:b")))
        );
        let tags: Vec<_> = parse_tags("db:orders,host:a:b").collect();
        assert_eq!(tags, [Ok(pair("db", "orders")), Ok(pair("host", "a:b"))]);
        assert_eq!(split("plain"), Ok(None));
        assert_eq!(split("x|ST[]"), Ok(Some(("x", ""))));
        assert_eq!(parse_tags("").count(), 0);
        assert!(split("x|ST[a:b]y").is_err());
        assert!(split("x|ST[a:b]|ST[c:d]").is_err());
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
        assert_eq!(
            parse_tag(":x").unwrap(),
            pair("", "x"),
            "bounds are the caller's"
        );
    }
}
