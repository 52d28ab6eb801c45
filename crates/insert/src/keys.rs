//! Canonical keys printed from what a parser lends: a name and its tags in whichever form they
//! come (a list checked and printed once per id, a suffix's text merged with the extra tags in
//! one pass, Prometheus labels through the label view), plus the tags every key of the body
//! gets (httptrap's `__check`).

use ingest::{Series, TagsRef};
use store::key::{self, CanonicalTags, KeyError, Tag, TagSet};

/// Tag-list ids below this are kept per document in a vector (flatbuffers' tag sets); others
/// one at a time, the last one seen (JSON's ids never come back once another followed).
const DENSE_IDS_MAX: u64 = 1 << 16;

/// Prints the keys of one body.
pub(crate) struct Keys<'a> {
    extra: &'a [Tag],
    /// `extra` as text (an httptrap check name comes from the URL, so it is): a lent suffix's
    /// key is printed with them without checking their bytes as UTF-8 per key.
    extra_text: Option<Vec<(&'a str, &'a str)>>,
    /// `extra` sorted, when every part is literal: a lent suffix already in canonical order is
    /// merged with them in one pass (`key::write_key_with_canonical_tags`).
    extra_canonical: Option<CanonicalTags<'a>>,
    sets: TagSets,
    /// Scratch for a name lent in two parts.
    name: String,
}

impl<'a> Keys<'a> {
    pub(crate) fn new(extra: &'a [Tag]) -> Keys<'a> {
        let as_text = |t: &'a Tag| {
            let category = std::str::from_utf8(t.category()).ok()?;
            Some((category, std::str::from_utf8(t.value()).ok()?))
        };
        let extra_text: Option<Vec<(&str, &str)>> = extra.iter().map(as_text).collect();
        Keys {
            extra,
            extra_canonical: extra_text
                .as_ref()
                .and_then(|tags| CanonicalTags::new(tags.iter().copied())),
            extra_text,
            sets: TagSets::default(),
            name: String::new(),
        }
    }

    /// A new document: tag-list ids start again.
    pub(crate) fn document(&mut self) {
        self.sets.clear();
    }

    /// Appends the canonical key of `series` (with the extra tags) to `out`, or says why the
    /// store would refuse it (`out` unchanged then).
    pub(crate) fn write(&mut self, series: &Series<'_>, out: &mut String) -> Result<(), KeyError> {
        let Keys {
            extra,
            extra_text,
            extra_canonical,
            sets,
            name,
        } = self;
        let name = series.name.text(name);
        match series.tags {
            TagsRef::Suffix(text) => {
                // Tags already in canonical order: merged with the extra tags in one pass.
                if let Some(canonical) = extra_canonical {
                    if key::write_key_with_canonical_tags(name, text, canonical, out) {
                        return Ok(());
                    }
                }
                // A stream's own tag list, used once: printed straight into its key.
                let suffix = key::suffix::suffix_tags(text);
                match extra_text {
                    Some(extra) => {
                        key::write_key_with_tags(name, suffix.chain(extra.iter().copied()), out)
                    }
                    None => {
                        let pairs = suffix
                            .map(|(c, v)| (c.as_bytes(), v.as_bytes()))
                            .chain(extra.iter().map(|t| (t.category(), t.value())));
                        key::write_key_with_tags(name, pairs, out)
                    }
                }
            }
            TagsRef::List { id, tags } => match sets.get(id, tags, extra) {
                Ok(set) => set.write_key(name, out),
                Err(e) => Err(e.clone()),
            },
            // The label view's key (the inverse of what remote read and PromQL show); labels
            // carry their own name. Extra tags are not added to a label set.
            TagsRef::Labels(labels) => {
                debug_assert!(extra.is_empty(), "no extra tags on labels");
                let (name, set) = TagSet::from_labels(labels.iter().copied())?;
                set.write_key(name, out)
            }
            TagsRef::Unread => {
                debug_assert!(
                    false,
                    "a series' tags are unread only when the sink knows it"
                );
                Err(KeyError::Syntax {
                    position: 0,
                    expected: "the series' tags (the parser lent none)",
                })
            }
        }
    }
}

/// The tag sets of one document by tag-list id, each with the extra tags, built on first use.
#[derive(Default)]
struct TagSets {
    dense: Vec<Option<Result<TagSet, KeyError>>>,
    /// The last set with an id from `DENSE_IDS_MAX` up.
    other: Option<(u64, Result<TagSet, KeyError>)>,
}

impl TagSets {
    fn clear(&mut self) {
        self.dense.clear();
        self.other = None;
    }

    fn get(&mut self, id: u64, tags: &ingest::Tags, extra: &[Tag]) -> &Result<TagSet, KeyError> {
        let build = || {
            let pairs = tags
                .iter()
                .map(|(c, v)| (c.as_bytes(), v.as_bytes()))
                .chain(extra.iter().map(|t| (t.category(), t.value())));
            TagSet::new(pairs)
        };
        if id < DENSE_IDS_MAX {
            // Bounded by DENSE_IDS_MAX entries.
            let at = id as usize;
            if self.dense.len() <= at {
                self.dense.resize(at + 1, None);
            }
            return self.dense[at].get_or_insert_with(build);
        }
        if self.other.as_ref().is_some_and(|(seen, _)| *seen != id) {
            self.other = None;
        }
        &self.other.get_or_insert_with(|| (id, build())).1
    }
}
