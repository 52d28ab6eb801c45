//! Stream keys: a metric name plus stream tags, with the canonical text form
//! `name|ST[cat:val,cat2:val2]` and the one-to-one Prometheus label view. The one place that
//! syntax is read and written: the store keeps series by it, and the parsers read the forms
//! clients write (a name's `|ST[…]` suffix, `"cat:val"` strings: [`suffix`]) with it.
//!
//! Tag categories and values are byte strings. In text, a category is written literally when
//! every byte is in ``[`+A-Za-z0-9!@#$%^&"'/?._-]`` (values may also hold `:` and `=`) and it
//! does not start with `b"`; otherwise it is written `b"<base64>"` (standard alphabet, padded).
#![forbid(unsafe_code)]

use std::cmp::Ordering;
use std::fmt;

pub mod suffix;

/// Longest metric name, in bytes.
pub const NAME_SIZE_MAX: usize = 4096;
/// Longest tag category or value, in bytes (before base64).
pub const TAG_PART_SIZE_MAX: usize = 4096;
/// Most tags on one stream.
pub const TAGS_MAX: usize = 256;
/// Longest canonical text accepted by [`StreamKey::parse`], in bytes.
pub const KEY_TEXT_SIZE_MAX: usize = NAME_SIZE_MAX + TAGS_MAX * 2 * (TAG_PART_SIZE_MAX * 4 / 3 + 8);

/// The separator between the metric name and its stream tags.
pub const TAG_MARKER: &str = "|ST[";

/// The Prometheus label that carries the metric name.
pub const PROM_NAME_LABEL: &str = "__name__";
/// Prefix of a Prometheus label name that escapes a category outside the label-name charset.
pub const PROM_ESCAPE_PREFIX: &str = "U__";

/// Why a key, tag or label set was rejected. `position` is a byte offset into the parsed text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    NameEmpty,
    NameTooLong {
        size_bytes: usize,
    },
    /// The name holds `|ST[`, which would make the canonical form ambiguous.
    NameHasTagMarker {
        position: usize,
    },
    CategoryEmpty,
    ValueEmpty,
    TagPartTooLong {
        size_bytes: usize,
    },
    TooManyTags {
        count: usize,
    },
    TextTooLong {
        size_bytes: usize,
    },
    /// Parsing stopped at `position`, where `expected` was expected.
    Syntax {
        position: usize,
        expected: &'static str,
    },
    /// A `b"…"` literal at `position` is not valid padded standard base64.
    Base64 {
        position: usize,
    },
    /// The Prometheus view needs distinct categories; this one repeats.
    RepeatedCategory {
        category: Vec<u8>,
    },
    /// A label set has no `__name__`.
    LabelNameMissing,
    /// A label name starts with `__` (reserved) or is not a valid label name.
    LabelNameInvalid {
        label: String,
    },
    /// Two labels share a name.
    LabelDuplicate {
        label: String,
    },
    /// A label (name or value) decodes, but is not the form Strata writes for that tag, so the
    /// mapping would not be one-to-one.
    LabelNotCanonical {
        label: String,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stream key: ")?;
        match self {
            KeyError::NameEmpty => write!(f, "empty metric name"),
            KeyError::NameTooLong { size_bytes } => write!(
                f,
                "metric name is {size_bytes} bytes, over the max {NAME_SIZE_MAX}"
            ),
            KeyError::NameHasTagMarker { position } => write!(
                f,
                "metric name holds `{TAG_MARKER}` at byte {position} (it starts the stream tags)"
            ),
            KeyError::CategoryEmpty => write!(f, "empty tag category"),
            KeyError::ValueEmpty => write!(f, "empty tag value"),
            KeyError::TagPartTooLong { size_bytes } => write!(
                f,
                "tag category or value is {size_bytes} bytes, over the max {TAG_PART_SIZE_MAX}"
            ),
            KeyError::TooManyTags { count } => {
                write!(f, "{count} tags, over the max {TAGS_MAX}")
            }
            KeyError::TextTooLong { size_bytes } => write!(
                f,
                "key text is {size_bytes} bytes, over the max {KEY_TEXT_SIZE_MAX}"
            ),
            KeyError::Syntax { position, expected } => {
                write!(f, "expected {expected} at byte {position}")
            }
            KeyError::Base64 { position } => {
                write!(f, "invalid base64 literal at byte {position}")
            }
            KeyError::RepeatedCategory { category } => {
                let mut text = String::new();
                write_part(&mut text, category, Part::Category);
                write!(
                    f,
                    "tag category `{text}` repeats (Prometheus labels hold one value per name)"
                )
            }
            KeyError::LabelNameMissing => write!(f, "no `{PROM_NAME_LABEL}` label"),
            KeyError::LabelNameInvalid { label } => write!(
                f,
                "label name `{label}` is not a label name Strata reads (`[a-zA-Z_][a-zA-Z0-9_]*`, \
                 not starting with `__` unless `{PROM_ESCAPE_PREFIX}`-escaped)"
            ),
            KeyError::LabelDuplicate { label } => write!(f, "label `{label}` is repeated"),
            KeyError::LabelNotCanonical { label } => write!(
                f,
                "label `{label}` is not written the way Strata writes that tag, so it would \
                 not map back to the same label"
            ),
        }
    }
}

impl std::error::Error for KeyError {}

/// One stream tag. Ordering is by category, then value (the canonical order).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag {
    category: Vec<u8>,
    value: Vec<u8>,
}

impl Tag {
    pub fn new(category: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<Tag, KeyError> {
        let tag = Tag {
            category: category.into(),
            value: value.into(),
        };
        check_part(&tag.category, KeyError::CategoryEmpty)?;
        check_part(&tag.value, KeyError::ValueEmpty)?;
        Ok(tag)
    }

    pub fn category(&self) -> &[u8] {
        &self.category
    }

    pub fn value(&self) -> &[u8] {
        &self.value
    }
}

fn check_part(part: &[u8], empty: KeyError) -> Result<(), KeyError> {
    if part.is_empty() {
        return Err(empty);
    }
    if part.len() > TAG_PART_SIZE_MAX {
        return Err(KeyError::TagPartTooLong {
            size_bytes: part.len(),
        });
    }
    Ok(())
}

/// A stream: metric name plus its stream tags, sorted and without duplicates.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    name: String,
    tags: Vec<Tag>,
    /// The canonical text, printed once when the key is made: the write path copies it for
    /// every sample, and printing (a charset check per byte) cost more than the rest of a write.
    text: Box<str>,
}

impl StreamKey {
    /// A key from a name and tags in any order; duplicate tags collapse into one.
    pub fn new(
        name: impl Into<String>,
        tags: impl IntoIterator<Item = Tag>,
    ) -> Result<StreamKey, KeyError> {
        let name = name.into();
        check_name(&name)?;
        let mut tags: Vec<Tag> = tags.into_iter().take(TAGS_MAX + 1).collect();
        if tags.len() > TAGS_MAX {
            return Err(KeyError::TooManyTags { count: tags.len() });
        }
        tags.sort_unstable();
        tags.dedup();
        let text = print_canonical(&name, &tags).into_boxed_str();
        let key = StreamKey { name, tags, text };
        key.assert_invariants();
        Ok(key)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tags in canonical order (category, then value), unique.
    pub fn tags(&self) -> &[Tag] {
        &self.tags
    }

    pub fn assert_invariants(&self) {
        assert!(!self.name.is_empty() && self.name.len() <= NAME_SIZE_MAX);
        assert!(!self.name.contains(TAG_MARKER));
        assert!(self.tags.len() <= TAGS_MAX);
        assert!(
            self.tags.windows(2).all(|w| w[0] < w[1]),
            "tags sorted and unique"
        );
        for tag in &self.tags {
            assert!(!tag.category.is_empty() && tag.category.len() <= TAG_PART_SIZE_MAX);
            assert!(!tag.value.is_empty() && tag.value.len() <= TAG_PART_SIZE_MAX);
        }
        debug_assert_eq!(*self.text, print_canonical(&self.name, &self.tags));
    }

    /// The canonical text form: `name` or `name|ST[cat:val,…]`.
    pub fn canonical(&self) -> String {
        self.text.to_string()
    }

    /// The canonical text form, borrowed.
    pub fn canonical_str(&self) -> &str {
        &self.text
    }

    /// Appends the canonical text form to `out` (the write path reuses one buffer per batch).
    pub fn write_canonical(&self, out: &mut String) {
        out.push_str(&self.text);
    }

    /// Parses the canonical form; also accepts base64 where a literal would do and `name|ST[]`.
    pub fn parse(text: &str) -> Result<StreamKey, KeyError> {
        if text.len() > KEY_TEXT_SIZE_MAX {
            return Err(KeyError::TextTooLong {
                size_bytes: text.len(),
            });
        }
        let Some(marker) = text.find(TAG_MARKER) else {
            return StreamKey::new(text, []);
        };
        let name = &text[..marker];
        check_name(name)?;
        let body_start = marker + TAG_MARKER.len();
        let bytes = text.as_bytes();
        if bytes.last() != Some(&b']') || bytes.len() <= body_start {
            return Err(KeyError::Syntax {
                position: text.len(),
                expected: "']' closing the stream tags",
            });
        }
        let body_end = bytes.len() - 1;
        let tags = parse_tags(bytes, body_start, body_end)?;
        StreamKey::new(name, tags)
    }

    /// The Prometheus label view, sorted by label name: `__name__` plus one label per tag.
    /// Fails only for keys that repeat a category (Prometheus labels are a map).
    pub fn to_labels(&self) -> Result<Vec<(String, String)>, KeyError> {
        let mut labels = Vec::with_capacity(self.tags.len() + 1);
        labels.push((PROM_NAME_LABEL.to_string(), self.name.clone()));
        for (i, tag) in self.tags.iter().enumerate() {
            if i > 0 && self.tags[i - 1].category == tag.category {
                return Err(KeyError::RepeatedCategory {
                    category: tag.category.clone(),
                });
            }
            labels.push((label_name(&tag.category), label_value(&tag.value)));
        }
        labels.sort_unstable();
        Ok(labels)
    }

    /// The key of a Prometheus label set (any order). Labels with an empty value are absent,
    /// as in Prometheus. Inverse of [`StreamKey::to_labels`].
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<StreamKey, KeyError> {
        let mut name = None;
        let mut tags = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (label, value) in labels.into_iter().take(TAGS_MAX + 2) {
            if !seen.insert(label) {
                return Err(KeyError::LabelDuplicate {
                    label: label.to_string(),
                });
            }
            if label == PROM_NAME_LABEL {
                name = Some(value);
                continue;
            }
            if value.is_empty() {
                continue;
            }
            let category = category_from_label(label)?;
            let value = value_from_label(value)?;
            tags.push(Tag::new(category, value)?);
        }
        let name = name.ok_or(KeyError::LabelNameMissing)?;
        StreamKey::new(name, tags)
    }
}

/// One set of stream tags, checked, sorted, deduplicated and printed once, for writing the
/// canonical keys of many metric names that share it (an Influx line's fields, a statsd
/// packet's tags) without building a [`StreamKey`] per sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagSet {
    /// `cat:val,…` — the canonical text between `|ST[` and `]`; empty for no tags.
    body: String,
}

impl TagSet {
    /// The tag set of `tags` (any order; duplicates collapse into one), or the first problem.
    pub fn new<'a>(
        tags: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<TagSet, KeyError> {
        let sorted = sorted_tags(tags)?;
        // Sized once for literal parts (nearly all): growing it byte by byte reallocated it
        // several times per key.
        let literal_bytes: usize = sorted.iter().map(|(c, v)| c.len() + v.len() + 2).sum();
        let mut body = String::with_capacity(literal_bytes);
        write_sorted_tags(sorted.iter().copied(), &mut body);
        Ok(TagSet { body })
    }

    /// The metric name and tag set of a Prometheus label set — the same key
    /// `StreamKey::from_labels` makes, and the same refusals — without copying labels that
    /// need no unescaping (nearly all of them).
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(&'a str, TagSet), KeyError> {
        use std::borrow::Cow;
        let mut name = None;
        let mut labels_seen: Vec<&'a str> = Vec::new();
        // (category, value), borrowed from the labels unless unescaped.
        type Part<'p> = (Cow<'p, [u8]>, Cow<'p, [u8]>);
        let mut parts: Vec<Part<'a>> = Vec::new();
        for (label, value) in labels.into_iter().take(TAGS_MAX + 2) {
            labels_seen.push(label);
            if label == PROM_NAME_LABEL {
                name = Some(value);
                continue;
            }
            // As `StreamKey::from_labels`: an empty value means no tag, whatever the label.
            if value.is_empty() {
                continue;
            }
            let plain_label = !label.starts_with("__")
                && !label.starts_with(PROM_ESCAPE_PREFIX)
                && is_prom_label_name(label.as_bytes());
            let category = if plain_label {
                Cow::Borrowed(label.as_bytes())
            } else {
                Cow::Owned(category_from_label(label)?)
            };
            let value = if value.starts_with("b\"") {
                Cow::Owned(value_from_label(value)?)
            } else {
                Cow::Borrowed(value.as_bytes())
            };
            parts.push((category, value));
        }
        labels_seen.sort_unstable();
        if let Some(w) = labels_seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(KeyError::LabelDuplicate {
                label: w[0].to_string(),
            });
        }
        let name = name.ok_or(KeyError::LabelNameMissing)?;
        let set = TagSet::new(parts.iter().map(|(c, v)| (c.as_ref(), v.as_ref())))?;
        Ok((name, set))
    }

    /// Appends the canonical key of `name` with these tags to `out` — exactly
    /// `StreamKey::new(name, tags)?.canonical()` — or says why `name` is not a valid name
    /// (`out` unchanged then).
    pub fn write_key(&self, name: &str, out: &mut String) -> Result<(), KeyError> {
        check_name(name)?;
        out.push_str(name);
        if !self.body.is_empty() {
            out.push_str(TAG_MARKER);
            out.push_str(&self.body);
            out.push(']');
        }
        Ok(())
    }
}

/// Appends the canonical key of `name` with `tags` (any order; duplicates collapse into one)
/// to `out`: exactly `TagSet::new(tags)?.write_key(name, out)`, without keeping the tag set —
/// for a tag list that one key uses. Parts come as text (`&str`, pushed as they are when
/// literal) or as bytes. `out` is unchanged on an error.
pub fn write_key_with_tags<T: TagPart>(
    name: &str,
    tags: impl IntoIterator<Item = (T, T)>,
    out: &mut String,
) -> Result<(), KeyError> {
    // The tags first, as `TagSet::new` then `write_key` find the problems.
    let sorted = sorted_tags(tags)?;
    check_name(name)?;
    write_sorted_key(name, sorted.iter().copied(), out);
    Ok(())
}

/// Tags to add to every key a writer prints (httptrap's `__check`), in canonical order:
/// sorted, unique, every part literal and within bounds — checked once, so that
/// [`write_key_with_canonical_tags`] can merge them into many keys without sorting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CanonicalTags<'a> {
    sorted: Vec<(&'a str, &'a str)>,
    /// How many tags were given, duplicates included (`TAGS_MAX` counts them all).
    given: usize,
}

impl<'a> CanonicalTags<'a> {
    /// `tags` sorted and deduplicated; `None` if a part is empty, too long or not literal
    /// (such tags go through [`write_key_with_tags`], which encodes or refuses them).
    pub fn new(tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        let mut sorted: Vec<(&str, &str)> = tags.into_iter().take(TAGS_MAX + 1).collect();
        let fits = |(c, v): &(&str, &str)| {
            is_literal(c.as_bytes(), Part::Category)
                && is_literal(v.as_bytes(), Part::Value)
                && c.len().max(v.len()) <= TAG_PART_SIZE_MAX
        };
        if sorted.len() > TAGS_MAX || !sorted.iter().all(fits) {
            return None;
        }
        let given = sorted.len();
        sorted.sort_unstable();
        sorted.dedup();
        Some(CanonicalTags { sorted, given })
    }
}

/// [`write_key_with_tags`] for tags given as text in the canonical key's own syntax (what a
/// key holds between `|ST[` and `]`: `cat:val` joined by `,`, the value after the first `:`),
/// when that text is already canonical — pairs strictly ascending, every part literal and
/// within bounds — merged with `extra`. Appends exactly what `write_key_with_tags` appends for
/// the same tags and returns `true`; otherwise leaves `out` unchanged and returns `false`, for
/// the caller to take the general path (which sorts, encodes or names the problem).
///
/// One pass over the text, with no allocation: a stream's tags mostly come sorted (clients
/// print them so, and Strata's own keys are), and sorting them into a new list per sample was
/// ≈ 9 % of a histogram's write instructions.
pub fn write_key_with_canonical_tags(
    name: &str,
    tags_text: &str,
    extra: &CanonicalTags<'_>,
    out: &mut String,
) -> bool {
    let start = out.len();
    if check_name(name).is_err() {
        return false;
    }
    out.push_str(name);
    out.push_str(TAG_MARKER);
    if write_canonical_tags(tags_text, extra, out) {
        out.push(']');
        return true;
    }
    out.truncate(start);
    false
}

/// The tags of [`write_key_with_canonical_tags`] merged in order into `out`, `,`-separated;
/// `false` (with `out` partly written) where the text is not canonical. The text is copied in
/// runs, split only where an extra tag goes in (a copy per part cost more than the checks).
fn write_canonical_tags(text: &str, extra: &CanonicalTags<'_>, out: &mut String) -> bool {
    let bytes = text.as_bytes();
    // Every pair is above ("", ""): parts are not empty.
    let mut previous = ("", "");
    let (mut extra_at, mut count) = (0, extra.given);
    let extra = &extra.sorted;
    // The text before `written` is in `out`.
    let (mut i, mut written) = (0, 0);
    // Bounded: each step consumes a pair of the text.
    loop {
        let pair_start = i;
        while i < bytes.len() && is_literal_byte(bytes[i], Part::Category) {
            i += 1;
        }
        if bytes.get(i) != Some(&b':') {
            return false;
        }
        let category = &text[pair_start..i];
        i += 1;
        let value_start = i;
        while i < bytes.len() && is_literal_byte(bytes[i], Part::Value) {
            i += 1;
        }
        let value = &text[value_start..i];
        let pair = (category, value);
        count += 1;
        // Every byte was checked by the scans above.
        if !(literal_shape(category.as_bytes()) && literal_shape(value.as_bytes()))
            || category.len().max(value.len()) > TAG_PART_SIZE_MAX
            || tag_order(pair, previous) != Ordering::Greater
            || count > TAGS_MAX
        {
            return false;
        }
        previous = pair;
        // Extra tags below this pair go in before it (one equal to it is the same tag).
        // Bounded by `extra`'s length.
        while let Some(&tag) = extra
            .get(extra_at)
            .filter(|&&tag| tag_order(tag, pair) != Ordering::Greater)
        {
            extra_at += 1;
            if tag != pair {
                out.push_str(&text[written..pair_start]);
                written = pair_start;
                push_tag(out, tag);
                out.push(',');
            }
        }
        match bytes.get(i) {
            None => break,
            Some(b',') => i += 1,
            Some(_) => return false,
        }
    }
    out.push_str(&text[written..]);
    for &tag in &extra[extra_at..] {
        out.push(',');
        push_tag(out, tag);
    }
    true
}

/// How two tags order (as `(&str, &str)` tuples do), by a byte loop: a tag's parts are a few
/// bytes, and the library compare's call to `memcmp` cost more than the compare.
fn tag_order((c0, v0): (&str, &str), (c1, v1): (&str, &str)) -> Ordering {
    let bytes_order = |a: &str, b: &str| {
        // Bounded by the shorter part.
        for (x, y) in a.bytes().zip(b.bytes()) {
            if x != y {
                return x.cmp(&y);
            }
        }
        a.len().cmp(&b.len())
    };
    bytes_order(c0, c1).then_with(|| bytes_order(v0, v1))
}

/// `cat:val` of a literal tag.
fn push_tag(out: &mut String, (category, value): (&str, &str)) {
    out.push_str(category);
    out.push(':');
    out.push_str(value);
}

/// A tag's category or value as a caller holds it: bytes, or text, whose literal form is the
/// text itself (so printing it needs no second UTF-8 check). Both order as their bytes do.
pub trait TagPart: Copy + Ord {
    fn as_bytes(&self) -> &[u8];

    /// Appends the part's text form (see [`write_part`]).
    fn write(&self, out: &mut String, part: Part);
}

impl TagPart for &[u8] {
    fn as_bytes(&self) -> &[u8] {
        self
    }

    fn write(&self, out: &mut String, part: Part) {
        write_part(out, self, part);
    }
}

impl TagPart for &str {
    fn as_bytes(&self) -> &[u8] {
        str::as_bytes(self)
    }

    fn write(&self, out: &mut String, part: Part) {
        if is_literal(str::as_bytes(self), part) {
            out.push_str(self);
        } else {
            write_part(out, str::as_bytes(self), part);
        }
    }
}

/// `tags` checked (each part non-empty and within `TAG_PART_SIZE_MAX`, at most `TAGS_MAX`
/// counted before duplicates collapse, as `StreamKey::new` counts), sorted and deduplicated.
fn sorted_tags<T: TagPart>(
    tags: impl IntoIterator<Item = (T, T)>,
) -> Result<Vec<(T, T)>, KeyError> {
    let mut sorted: Vec<(T, T)> = Vec::new();
    for (category, value) in tags {
        check_part(category.as_bytes(), KeyError::CategoryEmpty)?;
        check_part(value.as_bytes(), KeyError::ValueEmpty)?;
        if sorted.len() >= TAGS_MAX {
            return Err(KeyError::TooManyTags {
                count: sorted.len() + 1,
            });
        }
        sorted.push((category, value));
    }
    sorted.sort_unstable();
    sorted.dedup();
    debug_assert!(sorted.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
    Ok(sorted)
}

/// `name` or `name|ST[cat:val,…]` for sorted, unique tags, appended to `out`.
fn write_sorted_key<T: TagPart>(
    name: &str,
    sorted: impl ExactSizeIterator<Item = (T, T)>,
    out: &mut String,
) {
    out.push_str(name);
    if sorted.len() > 0 {
        out.push_str(TAG_MARKER);
        write_sorted_tags(sorted, out);
        out.push(']');
    }
}

/// `cat:val,…` of sorted, unique tags (the text between `|ST[` and `]`).
fn write_sorted_tags<T: TagPart>(sorted: impl IntoIterator<Item = (T, T)>, out: &mut String) {
    for (i, (category, value)) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        category.write(out, Part::Category);
        out.push(':');
        value.write(out, Part::Value);
    }
}

/// `name` or `name|ST[cat:val,…]` for sorted, unique tags.
fn print_canonical(name: &str, tags: &[Tag]) -> String {
    let mut out = String::with_capacity(name.len() + 16 * tags.len());
    let pairs = tags
        .iter()
        .map(|t| (t.category.as_slice(), t.value.as_slice()));
    write_sorted_key(name, pairs, &mut out);
    out
}

impl fmt::Display for StreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for StreamKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<StreamKey, KeyError> {
        StreamKey::parse(s)
    }
}

fn check_name(name: &str) -> Result<(), KeyError> {
    if name.is_empty() {
        return Err(KeyError::NameEmpty);
    }
    if name.len() > NAME_SIZE_MAX {
        return Err(KeyError::NameTooLong {
            size_bytes: name.len(),
        });
    }
    if let Some(position) = find_tag_marker(name) {
        return Err(KeyError::NameHasTagMarker { position });
    }
    Ok(())
}

/// Where `TAG_MARKER` first occurs in `text`: a scan for its `|`, where `str::find` would set
/// up a substring searcher for every key written.
pub(crate) fn find_tag_marker(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len()).find(|&i| bytes[i] == b'|' && bytes[i..].starts_with(TAG_MARKER.as_bytes()))
}

/// Which side of a tag a byte string is on: values may also hold `:` and `=`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Part {
    Category,
    Value,
}

/// Bit 0: literal in a category; bit 1: literal in a value. Built at compile time, so the
/// check per byte is one load (it runs for every byte of every key the write path looks up).
const LITERAL: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0usize;
    while b < 256 {
        let byte = b as u8;
        let mut both = byte.is_ascii_alphanumeric();
        let specials = b"`+!@#$%^&\"'/?._-";
        let mut i = 0;
        while i < specials.len() {
            if specials[i] == byte {
                both = true;
            }
            i += 1;
        }
        if both {
            table[b] = 0b11;
        } else if byte == b':' || byte == b'=' {
            table[b] = 0b10;
        }
        b += 1;
    }
    table
};

/// Whether `byte` may appear in a literal (non-base64) category or value.
#[inline]
pub fn is_literal_byte(byte: u8, part: Part) -> bool {
    let bit = match part {
        Part::Category => 0b01,
        Part::Value => 0b10,
    };
    LITERAL[byte as usize] & bit != 0
}

/// Whether `bytes` is written literally (else `b"<base64>"`).
pub fn is_literal(bytes: &[u8], part: Part) -> bool {
    literal_shape(bytes) && bytes.iter().all(|&b| is_literal_byte(b, part))
}

/// What [`is_literal`] asks of a part besides its bytes: not empty, and not read as `b"…"`.
fn literal_shape(bytes: &[u8]) -> bool {
    !bytes.is_empty() && !bytes.starts_with(b"b\"")
}

/// Appends `bytes` in its text form: literal when possible, `b"<base64>"` otherwise.
pub fn write_part(out: &mut String, bytes: &[u8], part: Part) {
    if is_literal(bytes, part) {
        // Literal bytes are ASCII: pushed as they are, without checking them again as UTF-8
        // (which cost more than the rest of printing a key).
        out.extend(bytes.iter().map(|&b| char::from(b)));
    } else {
        out.push_str("b\"");
        out.push_str(&base64_simd::STANDARD.encode_to_string(bytes));
        out.push('"');
    }
}

/// Reads one category or value starting at `start` (never past `end`): a `b"<base64>"`
/// literal or a run of literal bytes. Returns the bytes and the offset after them.
pub fn parse_part(
    text: &[u8],
    start: usize,
    end: usize,
    part: Part,
) -> Result<(Vec<u8>, usize), KeyError> {
    let end = end.min(text.len());
    if text[start..end].starts_with(b"b\"") {
        return parse_base64(text, start, end);
    }
    let run = text[start..end]
        .iter()
        .take_while(|&&b| is_literal_byte(b, part))
        .count();
    if run == 0 {
        let expected = match part {
            Part::Category => "a tag category",
            Part::Value => "a tag value",
        };
        return Err(KeyError::Syntax {
            position: start,
            expected,
        });
    }
    Ok((text[start..start + run].to_vec(), start + run))
}

/// Reads `b"<base64>"` at `start`; the base64 alphabet holds no `"`, so the next `"` closes it.
fn parse_base64(text: &[u8], start: usize, end: usize) -> Result<(Vec<u8>, usize), KeyError> {
    let body_start = start + 2;
    let Some(close) = text[body_start..end].iter().position(|&b| b == b'"') else {
        return Err(KeyError::Syntax {
            position: end,
            expected: "'\"' closing a base64 literal",
        });
    };
    let body = &text[body_start..body_start + close];
    if body.len() > TAG_PART_SIZE_MAX * 4 / 3 + 4 {
        return Err(KeyError::TagPartTooLong {
            size_bytes: body.len(),
        });
    }
    let bytes = base64_simd::STANDARD
        .decode_to_vec(body)
        .map_err(|_| KeyError::Base64 { position: start })?;
    Ok((bytes, body_start + close + 1))
}

fn parse_tags(text: &[u8], start: usize, end: usize) -> Result<Vec<Tag>, KeyError> {
    let mut tags = Vec::new();
    let mut pos = start;
    while pos < end {
        if tags.len() >= TAGS_MAX {
            return Err(KeyError::TooManyTags {
                count: tags.len() + 1,
            });
        }
        let (category, after) = parse_part(text, pos, end, Part::Category)?;
        expect_byte(text, after, end, b':', "':' after a tag category")?;
        let (value, after) = parse_part(text, after + 1, end, Part::Value)?;
        tags.push(Tag::new(category, value)?);
        pos = after;
        if pos < end {
            expect_byte(text, pos, end, b',', "',' or ']' after a tag value")?;
            pos += 1;
            if pos == end {
                return Err(KeyError::Syntax {
                    position: pos,
                    expected: "a tag after ','",
                });
            }
        }
    }
    Ok(tags)
}

fn expect_byte(
    text: &[u8],
    pos: usize,
    end: usize,
    byte: u8,
    expected: &'static str,
) -> Result<(), KeyError> {
    if pos < end && text[pos] == byte {
        Ok(())
    } else {
        Err(KeyError::Syntax {
            position: pos,
            expected,
        })
    }
}

/// Prometheus's classic label-name charset `[a-zA-Z_][a-zA-Z0-9_]*`.
fn is_prom_label_name(bytes: &[u8]) -> bool {
    match bytes.split_first() {
        Some((first, rest)) => {
            (first.is_ascii_alphabetic() || *first == b'_')
                && rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        }
        None => false,
    }
}

/// The label name of a category: the category itself when it is a classic label name that
/// neither starts with `__` (reserved by Prometheus) nor with `U__` (our escape prefix);
/// otherwise `U__` followed by the bytes with `[A-Za-z0-9]` kept, `_` doubled and every other
/// byte written `_<two lowercase hex digits>_` (Prometheus's value-encoding escape, per byte).
pub fn label_name(category: &[u8]) -> String {
    let plain = is_prom_label_name(category)
        && !category.starts_with(b"__")
        && !category.starts_with(PROM_ESCAPE_PREFIX.as_bytes());
    if plain {
        return category.iter().map(|&b| char::from(b)).collect();
    }
    let mut out = String::with_capacity(PROM_ESCAPE_PREFIX.len() + category.len() * 2);
    out.push_str(PROM_ESCAPE_PREFIX);
    for &b in category {
        if b.is_ascii_alphanumeric() {
            out.push(char::from(b));
        } else if b == b'_' {
            out.push_str("__");
        } else {
            out.push_str(&format!("_{b:02x}_"));
        }
    }
    out
}

/// The label value of a tag value: itself when it is UTF-8 not starting with `b"`, otherwise
/// `b"<base64>"`.
pub fn label_value(value: &[u8]) -> String {
    match std::str::from_utf8(value) {
        Ok(text) if !text.starts_with("b\"") => text.to_string(),
        _ => format!("b\"{}\"", base64_simd::STANDARD.encode_to_string(value)),
    }
}

fn category_from_label(label: &str) -> Result<Vec<u8>, KeyError> {
    let invalid = || KeyError::LabelNameInvalid {
        label: label.to_string(),
    };
    let category = match label.strip_prefix(PROM_ESCAPE_PREFIX) {
        Some(escaped) => unescape_label(escaped.as_bytes()).ok_or_else(invalid)?,
        None if label.starts_with("__") || !is_prom_label_name(label.as_bytes()) => {
            return Err(invalid())
        }
        None => label.as_bytes().to_vec(),
    };
    if label_name(&category) != label {
        return Err(KeyError::LabelNotCanonical {
            label: label.to_string(),
        });
    }
    Ok(category)
}

fn unescape_label(escaped: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut i = 0;
    while i < escaped.len() {
        let b = escaped[i];
        if b != b'_' {
            out.push(b);
            i += 1;
        } else if escaped.get(i + 1) == Some(&b'_') {
            out.push(b'_');
            i += 2;
        } else {
            let hex = escaped.get(i + 1..i + 3)?;
            if escaped.get(i + 3) != Some(&b'_') {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 4;
        }
    }
    Some(out)
}

fn value_from_label(value: &str) -> Result<Vec<u8>, KeyError> {
    let bytes = match value.strip_prefix("b\"").and_then(|v| v.strip_suffix('"')) {
        Some(body) => base64_simd::STANDARD
            .decode_to_vec(body)
            .map_err(|_| KeyError::Base64 { position: 2 })?,
        None => value.as_bytes().to_vec(),
    };
    if label_value(&bytes) != value {
        return Err(KeyError::LabelNotCanonical {
            label: value.to_string(),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tag_part() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            3 => proptest::sample::select(b"ab:".to_vec()),
            1 => proptest::num::u8::ANY
        ];
        prop_oneof![
            30 => proptest::collection::vec(byte, 1..4),
            1 => Just(Vec::new())
        ]
    }

    proptest::proptest! {
        #[test]
        fn tag_sets_print_what_stream_keys_print(
            name in "[a-z|\\[ST]{0,12}",
            // Up to 18 tags, from few bytes (so that duplicates
            // happen) and any bytes, rarely empty (which refuses the whole list).
            tags in proptest::collection::vec((tag_part(), tag_part()), 0..18),
        ) {
            let pairs: Vec<(&[u8], &[u8])> =
                tags.iter().map(|(c, v)| (c.as_slice(), v.as_slice())).collect();
            let from_set = TagSet::new(pairs.iter().copied()).and_then(|set| {
                let mut out = String::new();
                set.write_key(&name, &mut out).map(|()| out)
            });
            let from_key = pairs
                .iter()
                .map(|&(c, v)| Tag::new(c, v))
                .collect::<Result<Vec<Tag>, KeyError>>()
                .and_then(|tags| StreamKey::new(name.clone(), tags))
                .map(|k| k.canonical());
            // Printing straight into the key: the same text, or the same first problem, and
            // nothing written then.
            let mut direct = String::from("kept");
            let written = write_key_with_tags(&name, pairs.iter().copied(), &mut direct);
            match (&from_set, written) {
                (Ok(key), Ok(())) => proptest::prop_assert_eq!(&direct, &format!("kept{key}")),
                (Err(a), Err(b)) => {
                    proptest::prop_assert_eq!(a, &b);
                    proptest::prop_assert_eq!(&direct, "kept");
                }
                (a, b) => proptest::prop_assert!(false, "{:?} against {:?}", a, b),
            }
            // Parts given as text print the same as their bytes.
            let text: Option<Vec<(&str, &str)>> = pairs
                .iter()
                .map(|(c, v)| Some((std::str::from_utf8(c).ok()?, std::str::from_utf8(v).ok()?)))
                .collect();
            if let Some(text) = text {
                let mut from_text = String::from("kept");
                let written = write_key_with_tags(&name, text.iter().copied(), &mut from_text);
                proptest::prop_assert_eq!(written.is_ok(), from_set.is_ok());
                proptest::prop_assert_eq!(&from_text, &direct);
            }
            // Both refuse the same inputs (possibly naming different first problems).
            proptest::prop_assert_eq!(from_set.is_ok(), from_key.is_ok());
            if let (Ok(a), Ok(b)) = (from_set, from_key) {
                proptest::prop_assert_eq!(a, b);
            }
        }
    }

    /// A tag part as text: mostly a few letters (so pairs repeat and order matters), sometimes
    /// a byte outside the literal charset, `:` (literal in a value only), `b"` or nothing.
    fn text_part() -> impl Strategy<Value = String> {
        prop_oneof![
            40 => "[ab]{1,2}",
            2 => "[ab]{0,2}[:,=\\[\\] é\"]{1,2}",
            1 => Just("b\"YQ==\"".to_owned()),
            1 => Just(String::new()),
        ]
    }

    proptest::proptest! {
        /// The one-pass path prints exactly what the general path prints, for tags as a
        /// client writes them (sorted or not, repeated, with bytes needing `b"…"`), and it
        /// declines only what is not already canonical.
        #[test]
        fn canonical_tags_print_what_the_general_path_prints(
            name in prop_oneof![9 => "[a-z]{1,6}", 1 => "[a-z|\\[ST]{0,8}"],
            tags in proptest::collection::vec((text_part(), text_part()), 1..8),
            extra in proptest::collection::vec((text_part(), text_part()), 0..3),
            // Whether an extra tag repeats one of the tags, and whether a tag comes twice in a
            // row in the text.
            repeat in proptest::option::of(proptest::num::usize::ANY),
            double in proptest::option::of(proptest::num::usize::ANY),
            sort in proptest::bool::ANY,
        ) {
            let (mut tags, mut extra) = (tags, extra);
            if let Some(i) = repeat {
                extra.push(tags[i % tags.len()].clone());
            }
            if sort {
                tags.sort();
                tags.dedup();
            }
            if let Some(i) = double {
                let i = i % tags.len();
                tags.insert(i, tags[i].clone());
            }
            let text = tags
                .iter()
                .map(|(c, v)| format!("{c}:{v}"))
                .collect::<Vec<_>>()
                .join(",");
            let extra_pairs: Vec<(&str, &str)> =
                extra.iter().map(|(c, v)| (c.as_str(), v.as_str())).collect();
            let Some(canonical) = CanonicalTags::new(extra_pairs.iter().copied()) else {
                // Extra tags that are not literal go the general way.
                let literal = |(c, v): &(&str, &str)| {
                    is_literal(c.as_bytes(), Part::Category) && is_literal(v.as_bytes(), Part::Value)
                };
                proptest::prop_assert!(!extra_pairs.iter().all(literal));
                return Ok(());
            };
            let mut fast = String::from("kept");
            let took = write_key_with_canonical_tags(&name, &text, &canonical, &mut fast);
            // The general path reads the text as `cat:val` pairs split at `,` and the first `:`.
            let split: Vec<(&str, &str)> = text
                .split(',')
                .map(|part| part.split_once(':').unwrap_or((part, "")))
                .collect();
            let mut general = String::from("kept");
            let written = write_key_with_tags(
                &name,
                split.iter().copied().chain(extra_pairs.iter().copied()),
                &mut general,
            );
            if took {
                proptest::prop_assert!(written.is_ok(), "{:?}", written);
                proptest::prop_assert_eq!(&fast, &general);
            } else {
                proptest::prop_assert_eq!(&fast, "kept");
                // Declined: the text was not canonical, or the key is refused.
                let literal = |(c, v): &(&str, &str)| {
                    is_literal(c.as_bytes(), Part::Category) && is_literal(v.as_bytes(), Part::Value)
                };
                let canonical_text = split.iter().all(literal)
                    && split.windows(2).all(|w| w[0] < w[1])
                    && tags.iter().all(|(c, _)| !c.contains(':'));
                proptest::prop_assert!(!canonical_text || written.is_err(), "declined {}", text);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn tag_order_is_the_tuple_order(
            a in ("[ab:]{0,3}", "[ab:]{0,3}"),
            b in ("[ab:]{0,3}", "[ab:]{0,3}"),
        ) {
            let (a, b) = ((a.0.as_str(), a.1.as_str()), (b.0.as_str(), b.1.as_str()));
            proptest::prop_assert_eq!(tag_order(a, b), a.cmp(&b));
        }
    }

    #[test]
    fn canonical_tags_count_tags_as_the_general_path_does() {
        let tags: Vec<String> = (0..TAGS_MAX).map(|i| format!("c{i:03}:v")).collect();
        let extra = CanonicalTags::new([("__check", "x")]).unwrap();
        for given in [TAGS_MAX - 1, TAGS_MAX] {
            let text = tags[..given].join(",");
            let pairs: Vec<(&str, &str)> = tags[..given]
                .iter()
                .map(|t| t.split_once(':').unwrap())
                .chain([("__check", "x")])
                .collect();
            let (mut fast, mut general) = (String::new(), String::new());
            let took = write_key_with_canonical_tags("m", &text, &extra, &mut fast);
            let written = write_key_with_tags("m", pairs, &mut general);
            assert_eq!(took, written.is_ok(), "{given} tags and one extra");
            assert_eq!(fast, general);
        }
    }

    proptest::proptest! {
        #[test]
        fn tag_sets_from_labels_agree_with_stream_keys(
            labels in proptest::collection::vec(
                ("(__name__|__x|U__[a-z_0-9]{0,4}|[a-zA-Z_][a-zA-Z0-9_]{0,4}|9a|a-b)",
                 "(|b\"[A-Za-z0-9+/=]{0,8}\"|[a-z:=\"]{0,5})"),
                0..7,
            ),
        ) {
            let pairs: Vec<(&str, &str)> =
                labels.iter().map(|(l, v)| (l.as_str(), v.as_str())).collect();
            let from_set = TagSet::from_labels(pairs.iter().copied()).and_then(|(name, set)| {
                let mut out = String::new();
                set.write_key(name, &mut out).map(|()| out)
            });
            let from_key = StreamKey::from_labels(pairs.iter().copied()).map(|k| k.canonical());
            proptest::prop_assert_eq!(from_set.is_ok(), from_key.is_ok(), "{:?} {:?}", from_set, from_key);
            if let (Ok(a), Ok(b)) = (from_set, from_key) {
                proptest::prop_assert_eq!(a, b);
            }
        }
    }

    fn key(name: &str, tags: &[(&[u8], &[u8])]) -> StreamKey {
        StreamKey::new(name, tags.iter().map(|(c, v)| Tag::new(*c, *v).unwrap())).unwrap()
    }

    /// The lookup table says exactly what FORMAT.md's tag charset says, for every byte.
    #[test]
    fn literal_table_matches_the_charset() {
        let specials = "`+!@#$%^&\"'/?._-";
        for byte in 0..=255u8 {
            let c = char::from(byte);
            let both = c.is_ascii_alphanumeric() || specials.contains(c);
            assert_eq!(is_literal_byte(byte, Part::Category), both, "{byte}");
            let value = both || c == ':' || c == '=';
            assert_eq!(is_literal_byte(byte, Part::Value), value, "{byte}");
        }
    }

    #[test]
    fn canonical_sorts_and_dedups() {
        let k = key(
            "cpu",
            &[
                (b"host", b"b"),
                (b"dc", b"x:y=z"),
                (b"host", b"a"),
                (b"dc", b"x:y=z"),
            ],
        );
        assert_eq!(k.canonical(), "cpu|ST[dc:x:y=z,host:a,host:b]");
        assert_eq!(StreamKey::parse(&k.canonical()).unwrap(), k);
        assert_eq!(key("cpu", &[]).canonical(), "cpu");
        assert_eq!(StreamKey::parse("cpu").unwrap(), key("cpu", &[]));
        assert_eq!(StreamKey::parse("cpu|ST[]").unwrap(), key("cpu", &[]));
    }

    #[test]
    fn base64_for_bytes_outside_the_charset() {
        let k = key("m", &[(b"a b", b"x,y"), (b"b\"q", b"ok")]);
        let text = k.canonical();
        assert_eq!(text, "m|ST[b\"YSBi\":b\"eCx5\",b\"YiJx\":ok]");
        assert_eq!(StreamKey::parse(&text).unwrap(), k);
        // Base64 where a literal would do is accepted and normalised.
        assert_eq!(
            StreamKey::parse("m|ST[b\"YQ==\":b]").unwrap(),
            key("m", &[(b"a", b"b")])
        );
    }

    #[test]
    fn errors_name_the_position() {
        let err = |t: &str| StreamKey::parse(t).unwrap_err();
        assert_eq!(
            err("m|ST[a:b"),
            KeyError::Syntax {
                position: 8,
                expected: "']' closing the stream tags"
            }
        );
        assert_eq!(
            err("m|ST[a b:c]"),
            KeyError::Syntax {
                position: 6,
                expected: "':' after a tag category"
            }
        );
        assert_eq!(
            err("m|ST[a:]"),
            KeyError::Syntax {
                position: 7,
                expected: "a tag value"
            }
        );
        assert_eq!(
            err("m|ST[a:b,]"),
            KeyError::Syntax {
                position: 9,
                expected: "a tag after ','"
            }
        );
        assert_eq!(
            err("m|ST[a:b c]"),
            KeyError::Syntax {
                position: 8,
                expected: "',' or ']' after a tag value"
            }
        );
        assert_eq!(err("m|ST[b\"!!\":c]"), KeyError::Base64 { position: 5 });
        assert_eq!(
            err("m|ST[b\"YQ==:c]"),
            KeyError::Syntax {
                position: 13,
                expected: "'\"' closing a base64 literal"
            }
        );
        assert_eq!(err("|ST[a:b]"), KeyError::NameEmpty);
        assert_eq!(err(""), KeyError::NameEmpty);
        assert!(matches!(err("m|ST[a:b]|ST[c:d]"), KeyError::Syntax { .. }));
    }

    #[test]
    fn prometheus_view() {
        let k = key(
            "http_requests",
            &[
                (b"method", b"GET"),
                (b"__x", b"1"),
                (b"a.b", b"\xff"),
                (b"U__q", b"b\""),
            ],
        );
        let labels = k.to_labels().unwrap();
        let want = vec![
            ("U__U____q".to_string(), "b\"YiI=\"".to_string()),
            ("U______x".to_string(), "1".to_string()),
            ("U__a_2e_b".to_string(), "b\"/w==\"".to_string()),
            ("__name__".to_string(), "http_requests".to_string()),
            ("method".to_string(), "GET".to_string()),
        ];
        assert_eq!(labels, want);
        let back = StreamKey::from_labels(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        assert_eq!(back.unwrap(), k);
        let repeated = key("m", &[(b"a", b"1"), (b"a", b"2")]);
        assert!(matches!(
            repeated.to_labels(),
            Err(KeyError::RepeatedCategory { .. })
        ));
        let from = |l: &[(&str, &str)]| StreamKey::from_labels(l.iter().copied());
        assert_eq!(from(&[("a", "1")]), Err(KeyError::LabelNameMissing));
        assert!(matches!(
            from(&[("__name__", "m"), ("__x", "1")]),
            Err(KeyError::LabelNameInvalid { .. })
        ));
        assert!(matches!(
            from(&[("__name__", "m"), ("U__a", "1")]),
            Err(KeyError::LabelNotCanonical { .. })
        ));
        assert!(matches!(
            from(&[("__name__", "m"), ("a", "b\"YQ==\"")]),
            Err(KeyError::LabelNotCanonical { .. })
        ));
        assert_eq!(
            from(&[("__name__", "m"), ("a", "")]).unwrap(),
            key("m", &[])
        );
    }

    fn part() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            "[a-zA-Z0-9._:=/\"-]{1,8}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 1..8),
            Just(b"b\"x".to_vec()),
        ]
    }

    fn stream_key() -> impl Strategy<Value = StreamKey> {
        let name = prop_oneof!["[a-z_.]{1,12}", "\\PC{1,12}"]
            .prop_filter("no tag marker", |n| !n.contains(TAG_MARKER));
        let tags = proptest::collection::vec((part(), part()), 0..6);
        (name, tags).prop_map(|(n, t)| {
            StreamKey::new(n, t.into_iter().map(|(c, v)| Tag::new(c, v).unwrap())).unwrap()
        })
    }

    proptest! {
        #[test]
        fn parse_inverts_canonical(k in stream_key()) {
            let text = k.canonical();
            prop_assert_eq!(StreamKey::parse(&text).unwrap(), k.clone());
            if let Ok(labels) = k.to_labels() {
                let back = StreamKey::from_labels(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
                prop_assert_eq!(back.unwrap(), k);
            }
        }

        #[test]
        fn parse_arbitrary_text_never_panics(text in "\\PC{0,40}|m\\|ST\\[[a-z:,b\"=\\]]{0,30}") {
            if let Ok(k) = StreamKey::parse(&text) {
                k.assert_invariants();
                prop_assert_eq!(StreamKey::parse(&k.canonical()).unwrap(), k);
            }
        }
    }
}
