//! Every series' canonical key text, kept as a list of interned parts: the name, then each
//! `cat:val` of its tags as the canonical text prints it. Series share most of their text (a
//! host's ten tags are in each of its metrics' keys; a metric's name is in each host's), so each
//! distinct part is kept once and a key costs 4 bytes a part: a TSBS-like key of 173 bytes takes
//! 44 (11 parts), where the text itself was kept before.
//!
//! A key splits at its tag marker and at every `,` between the marker and the closing `]`, and
//! joins back with the same separators, so the text read back is the text stored byte for byte
//! whatever its parts hold. A text without that shape (no marker, or no closing `]`) is one part.
//!
//! Invariants: parts and lists are append-only and never move (pages of fixed capacity); a
//! list has at least one part; part ids index `parts`.

use std::hash::BuildHasher;

use crate::key::TAG_MARKER;

/// Elements of one page: a page holds whole items, so an item is one slice; an item longer
/// than a page gets a page its size.
const PAGE_BYTES: usize = 1 << 20;

/// Where an item is in its [`Pages`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct At {
    page: u32,
    offset: u32,
    len: u32,
}

/// Items back to back in pages that are never reallocated: an allocation per megabyte, where
/// one per item cost the allocator's header and rounding, and one growing vector would copy
/// everything at each doubling and keep up to half its capacity unused.
struct Pages<T> {
    pages: Vec<Vec<T>>,
}

impl<T> Default for Pages<T> {
    fn default() -> Self {
        Pages { pages: Vec::new() }
    }
}

impl<T: Copy> Pages<T> {
    fn page_len() -> usize {
        PAGE_BYTES / std::mem::size_of::<T>().max(1)
    }

    fn push(&mut self, items: &[T]) -> At {
        let room = self
            .pages
            .last()
            .is_some_and(|p| p.len() + items.len() <= p.capacity());
        if !room {
            let capacity = Self::page_len().max(items.len());
            self.pages.push(Vec::with_capacity(capacity));
        }
        let page_index = self.pages.len() - 1;
        let page = &mut self.pages[page_index];
        let at = At {
            page: u32::try_from(page_index).unwrap_or(u32::MAX),
            offset: page.len() as u32,
            len: items.len() as u32,
        };
        assert!(at.page < u32::MAX, "pages fit a u32");
        let capacity = page.capacity();
        page.extend_from_slice(items);
        debug_assert_eq!(page.capacity(), capacity, "a page never moves");
        at
    }

    fn get(&self, at: At) -> &[T] {
        let start = at.offset as usize;
        &self.pages[at.page as usize][start..start + at.len as usize]
    }

    /// Bytes the pages hold (their capacity).
    #[cfg(test)]
    fn size_bytes(&self) -> usize {
        let item = std::mem::size_of::<T>();
        self.pages.iter().map(|p| p.capacity() * item).sum()
    }
}

/// Canonical key texts as lists of interned parts.
#[derive(Default)]
pub(crate) struct KeyParts {
    /// Distinct parts' bytes, back to back.
    part_bytes: Pages<u8>,
    /// Where each part's bytes are, by part id.
    parts: Vec<At>,
    /// Part bytes → part id.
    part_ids: hashbrown::HashTable<u32>,
    /// Each key's part ids.
    lists: Pages<u32>,
    hasher: foldhash::quality::RandomState,
}

/// The parts of `text`: the name, then (if it has tags) each tag's text.
fn split(text: &str) -> impl Iterator<Item = &str> {
    let tags = text
        .find(TAG_MARKER)
        .filter(|_| text.ends_with(']'))
        .map(|m| (m, &text[m + TAG_MARKER.len()..text.len() - 1]));
    let (name, body) = match tags {
        Some((m, body)) => (&text[..m], Some(body)),
        None => (text, None),
    };
    std::iter::once(name).chain(body.into_iter().flat_map(|b| b.split(',')))
}

impl KeyParts {
    /// Stores `text`; where it is.
    pub(crate) fn push(&mut self, text: &str) -> At {
        let mut ids = Vec::with_capacity(16);
        for part in split(text) {
            ids.push(self.intern(part.as_bytes()));
        }
        let at = self.lists.push(&ids);
        debug_assert!(self.eq(at, text), "a key reads back as stored");
        at
    }

    fn intern(&mut self, part: &[u8]) -> u32 {
        let hash = self.hasher.hash_one(part);
        let (bytes, parts) = (&self.part_bytes, &self.parts);
        if let Some(&id) = self
            .part_ids
            .find(hash, |&id| bytes.get(parts[id as usize]) == part)
        {
            return id;
        }
        let id = u32::try_from(self.parts.len()).unwrap_or(u32::MAX);
        assert!(id < u32::MAX, "part ids fit a u32");
        self.parts.push(self.part_bytes.push(part));
        let (bytes, parts, hasher) = (&self.part_bytes, &self.parts, &self.hasher);
        self.part_ids.insert_unique(hash, id, |&other| {
            hasher.hash_one(bytes.get(parts[other as usize]))
        });
        id
    }

    fn part(&self, id: u32) -> &[u8] {
        self.part_bytes.get(self.parts[id as usize])
    }

    /// Whether the key at `at` is `text`, compared part by part (no copy).
    pub(crate) fn eq(&self, at: At, text: &str) -> bool {
        let list = self.lists.get(at);
        let mut rest = text.as_bytes();
        let mut take = |expected: &[u8]| match rest.strip_prefix(expected) {
            Some(after) => {
                rest = after;
                true
            }
            None => false,
        };
        let Some((&name, tags)) = list.split_first() else {
            return false;
        };
        if !take(self.part(name)) {
            return false;
        }
        if !tags.is_empty() {
            if !take(TAG_MARKER.as_bytes()) {
                return false;
            }
            for (i, &tag) in tags.iter().enumerate() {
                if (i > 0 && !take(b",")) || !take(self.part(tag)) {
                    return false;
                }
            }
            if !take(b"]") {
                return false;
            }
        }
        rest.is_empty()
    }

    /// Appends the key at `at`'s bytes to `out`.
    pub(crate) fn write(&self, at: At, out: &mut Vec<u8>) {
        let list = self.lists.get(at);
        for (i, &id) in list.iter().enumerate() {
            match i {
                0 => {}
                1 => out.extend_from_slice(TAG_MARKER.as_bytes()),
                _ => out.push(b','),
            }
            out.extend_from_slice(self.part(id));
        }
        if list.len() > 1 {
            out.push(b']');
        }
    }

    /// The key at `at`.
    pub(crate) fn text(&self, at: At) -> String {
        let mut bytes = Vec::with_capacity(self.lists.get(at).len() * 16);
        self.write(at, &mut bytes);
        // Parts are whole pieces of a `str` cut at ASCII separators: valid UTF-8 joined.
        String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }

    /// Bytes held: pages, the part table and its hash table.
    #[cfg(test)]
    pub(crate) fn size_bytes(&self) -> usize {
        self.part_bytes.size_bytes()
            + self.lists.size_bytes()
            + self.parts.capacity() * std::mem::size_of::<At>()
            + self.part_ids.capacity() * (std::mem::size_of::<u32>() + 1)
    }

    /// Pages of key lists (for tests of the page bound).
    #[cfg(test)]
    pub(crate) fn list_pages(&self) -> usize {
        self.lists.pages.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shared_parts_are_kept_once() {
        let mut keys = KeyParts::default();
        let texts: Vec<String> = (0..1000)
            .map(|i| {
                format!(
                    "metric_{}|ST[host:h{},region:{},team:{}]",
                    i % 10,
                    i / 10,
                    "us-west-2".repeat(3),
                    "SF".repeat(20)
                )
            })
            .collect();
        let ats: Vec<At> = texts.iter().map(|t| keys.push(t)).collect();
        for (t, &at) in texts.iter().zip(&ats) {
            assert_eq!(keys.text(at), *t);
            assert!(keys.eq(at, t));
        }
        // 10 names, 100 hosts, one region, one team.
        assert_eq!(keys.parts.len(), 112);
        assert_eq!(keys.list_pages(), 1);
    }

    #[test]
    fn texts_that_differ_anywhere_are_not_equal() {
        let mut keys = KeyParts::default();
        let at = keys.push("m|ST[a:1,b:2]");
        for other in [
            "m|ST[a:1,b:2",
            "m|ST[a:1,b:2]]",
            "m|ST[a:1b:2]",
            "m|ST[a:1,b:3]",
            "m",
            "m|ST[a:1]",
            "mm|ST[a:1,b:2]",
            "m|ST[a:1,b:2,]",
            "",
        ] {
            assert!(!keys.eq(at, other), "{other}");
        }
        assert!(keys.eq(at, "m|ST[a:1,b:2]"));
    }

    proptest! {
        /// Any text (separators anywhere, a marker without its `]`, empty parts) reads back
        /// byte for byte and equals only itself.
        #[test]
        fn every_text_reads_back_exactly(
            texts in proptest::collection::vec("[ab,:\\]|ST\\[é]{0,12}", 1..40)
        ) {
            let mut keys = KeyParts::default();
            let ats: Vec<At> = texts.iter().map(|t| keys.push(t)).collect();
            for (i, (t, &at)) in texts.iter().zip(&ats).enumerate() {
                prop_assert_eq!(&keys.text(at), t);
                for (j, other) in texts.iter().enumerate() {
                    prop_assert_eq!(keys.eq(at, other), t == other, "{} {}", i, j);
                }
            }
        }
    }
}
