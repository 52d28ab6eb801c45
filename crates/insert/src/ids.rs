//! Series ids by the bytes a client sends for a series, so a series seen before costs one hash
//! of those bytes and one compare instead of printing, hashing and comparing its canonical key.
//!
//! Clients resend the same series every scrape or flush byte for byte (remote write: a
//! `TimeSeries`' labels; Influx: a line's measurement and tag section, then the field key;
//! httptrap: a metric's name, then its `|ST[…]` text). Within one protocol, and for httptrap
//! one check (whose tag every key gets), the bytes determine the canonical key: one cache holds
//! every protocol's series, each key in a [`Namespace`] of its own, so bytes of different
//! protocols or checks never meet. A store never removes a series nor reuses an id, so an id
//! learned from one successful write stays right for as long as the `Store` lives: each store
//! has its own cache. A kind clash needs no care here: a sample pushed by id to a series of
//! another kind is refused by `Store::write_partial` exactly as by key (the rejection names the
//! series' canonical key).
//!
//! Bounded in entries, key bytes and namespaces; a full cache keeps what it holds and caches
//! nothing new until the keys it refused outnumber those it holds a few times over, then is
//! emptied (clients resend, so what is still in use is learned again on its next miss). A body
//! reads under a shared lock it lets go every few thousand lookups ([`SeriesCache::reader`]),
//! so a hit takes no lock of its own and a long body does not hold back a writer; misses are
//! learned under the exclusive lock after the write that created their series
//! ([`Misses::learn`]), never before, so a body rejected whole creates nothing. Keys are kept
//! back to back in the order first seen, which is the order clients resend them in: a body's
//! lookups read the key bytes nearly sequentially (they are not in the CPU's caches any more by
//! the time the series comes again; the store's work in between evicts them).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, RwLock, RwLockReadGuard};

use ingest::RawSeries;
use store::key::Tag;
use store::{KeyRef, Kind, SeriesId, Store};

/// Series the cache holds by default (Influx: one per series and field).
pub const ENTRIES_MAX_DEFAULT: usize = 1 << 20;
/// Raw key bytes one cache holds by default.
pub const KEY_BYTES_MAX_DEFAULT: usize = 128 << 20;
/// A key longer than this is not cached.
pub const KEY_BYTES_ONE_MAX: usize = 16 << 10;
/// A full cache is emptied once it refused this many keys per key it holds.
const REFUSED_PER_ENTRY_MAX: usize = 4;
/// Slots a lookup probes before giving up (the tables are at most half full, so chains are
/// short; a bound keeps crafted collisions from costing more than a miss).
const PROBES_MAX: usize = 16;
/// First slot table size; it doubles up to twice the entry bound.
const SLOTS_INITIAL: usize = 64;
/// Lookups one body makes under one hold of the shared lock: a body of 10^6 series read for
/// seconds, and a writer waiting behind it held every other body's reader.
const READS_PER_HOLD_MAX: usize = 4096;
/// Namespaces remembered by name at once; past it the names are forgotten (their ids are never
/// given again, so entries under them are simply never found and age out).
pub const NAMESPACES_MAX: usize = 4096;

/// Raw series bytes → series id, for every protocol.
pub struct SeriesCache {
    table: RwLock<Table>,
    hasher: foldhash::quality::RandomState,
    entries_max: usize,
    bytes_max: usize,
    namespaces: Mutex<Namespaces>,
}

/// Where a body's series bytes mean one thing: a protocol, and for httptrap its check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Namespace(u32);

/// Namespaces by name; ids only grow.
#[derive(Default)]
struct Namespaces {
    by_name: HashMap<Vec<u8>, u32>,
    next: u32,
}

/// A body's read access to the cache in one namespace (the shared lock, held until dropped:
/// drop it before [`Misses::learn`] on the same thread).
pub struct Reader<'c> {
    cache: &'c SeriesCache,
    namespace: Namespace,
    /// `None` when the lock is poisoned: every lookup misses.
    table: Option<RwLockReadGuard<'c, Table>>,
    /// The entry after the one found last (the first guess for the next lookup).
    next: usize,
    /// Lookups left before the lock is let go and taken again (`READS_PER_HOLD_MAX`).
    reads_left: usize,
    /// The key of the last lookup that missed, by where its parts are: the miss is remembered
    /// for the write right after it (`Misses::add`), which need not hash the bytes again. A
    /// stale hash (parts rewritten in place between the two) cannot name a wrong series: an
    /// entry is found only if its bytes are equal.
    last_miss: Option<(RawSeriesAt, u64)>,
}

/// Where a series' raw parts are in memory.
type RawSeriesAt = (usize, usize, usize, usize);

fn raw_at(raw: &RawSeries<'_>) -> RawSeriesAt {
    (
        raw.first.as_ptr() as usize,
        raw.first.len(),
        raw.second.as_ptr() as usize,
        raw.second.len(),
    )
}

/// A key: its namespace, hash and bytes, in two parts (Influx: series section, field key;
/// remote write: the labels, nothing). Keys are equal when all three are.
#[derive(Clone, Copy, Debug)]
pub struct CacheKey<'a> {
    hash: u64,
    namespace: u32,
    first: &'a [u8],
    second: &'a [u8],
}

impl CacheKey<'_> {
    fn len(&self) -> usize {
        self.first.len() + self.second.len()
    }
}

/// A slot of the hash table: which entry, and bits of its hash to skip most others unread.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// The high half of the entry's hash with the low bit set; 0 = empty.
    tag: u32,
    /// Index into `Table::entries`.
    entry: u32,
}

/// A cached key, in insertion order (24 bytes: keys are at most `KEY_BYTES_ONE_MAX` long).
#[derive(Clone, Copy)]
struct Entry {
    hash: u64,
    /// The key's bytes: `arena[at..at + len]`, its first part `first_len` long.
    at: u32,
    len: u16,
    first_len: u16,
    namespace: u32,
    id: u32,
}

const _: () = assert!(KEY_BYTES_ONE_MAX <= u16::MAX as usize);

#[derive(Default)]
struct Table {
    /// Open addressing, linear probing, length a power of two (or 0 before first use); small
    /// (8 bytes a slot) because it is the one part read at random.
    slots: Vec<Slot>,
    /// Keys in the order first seen, their bytes back to back in `arena`: the order requests
    /// look them up in again.
    entries: Vec<Entry>,
    arena: Vec<u8>,
    /// Keys not cached because the table was full, since it last filled.
    refused_since_full: usize,
}

fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32 | 1
}

/// The first slot a hash probes.
fn home(hash: u64, mask: usize) -> usize {
    hash as usize & mask
}

impl SeriesCache {
    /// A cache of at most `entries_max` series and `bytes_max` key bytes.
    pub fn new(entries_max: usize, bytes_max: usize) -> SeriesCache {
        SeriesCache {
            table: RwLock::default(),
            hasher: foldhash::quality::RandomState::default(),
            entries_max: entries_max.clamp(1, u32::MAX as usize / 4),
            bytes_max: bytes_max.clamp(1, u32::MAX as usize / 2),
            namespaces: Mutex::default(),
        }
    }

    /// The namespace of `protocol` with `extra_tags` (the tags a sink adds to every key, which
    /// change what the bytes mean: httptrap's check). `None` (nothing cached) only once 2^32
    /// namespaces were given, or if a thread panicked holding the registry.
    pub fn namespace(&self, protocol: &str, extra_tags: &[Tag]) -> Option<Namespace> {
        // Length-prefixed parts, so no two lists read alike.
        let mut name = Vec::with_capacity(protocol.len() + 16);
        let parts = std::iter::once(protocol.as_bytes())
            .chain(extra_tags.iter().flat_map(|t| [t.category(), t.value()]));
        for part in parts {
            name.extend_from_slice(&(part.len() as u64).to_le_bytes());
            name.extend_from_slice(part);
        }
        let mut namespaces = self.namespaces.lock().ok()?;
        if let Some(&id) = namespaces.by_name.get(&name) {
            return Some(Namespace(id));
        }
        if namespaces.by_name.len() >= NAMESPACES_MAX {
            namespaces.by_name.clear();
        }
        let id = namespaces.next;
        namespaces.next = id.checked_add(1)?;
        namespaces.by_name.insert(name, id);
        Some(Namespace(id))
    }

    /// Read access for one body's lookups in `namespace`.
    pub fn reader(&self, namespace: Namespace) -> Reader<'_> {
        Reader {
            cache: self,
            namespace,
            table: self.table.read().ok(),
            reads_left: READS_PER_HOLD_MAX,
            next: usize::MAX,
            last_miss: None,
        }
    }

    /// The key of `raw` in `namespace`.
    pub fn key<'a>(&self, namespace: Namespace, raw: RawSeries<'a>) -> CacheKey<'a> {
        let mut h = self.hasher.build_hasher();
        h.write_u32(namespace.0);
        h.write(raw.first);
        // The split matters (`cpu,a=b` + `cx` is not `cpu,a=bc` + `x`): the length goes in.
        h.write_usize(raw.first.len());
        h.write(raw.second);
        CacheKey {
            hash: h.finish(),
            namespace: namespace.0,
            first: raw.first,
            second: raw.second,
        }
    }

    /// Caches each `key` → `id` (replacing what a key had), under one exclusive lock; a full
    /// cache refuses new keys until it refused enough to be emptied.
    fn insert_all<'k>(&self, keys: impl Iterator<Item = (CacheKey<'k>, SeriesId)>) {
        let Ok(mut table) = self.table.write() else {
            return;
        };
        for (key, id) in keys {
            if key.len() > KEY_BYTES_ONE_MAX {
                continue;
            }
            if let Some(at) = table.find(&key) {
                table.entries[at].id = id.0;
                continue;
            }
            if table.entries.len() >= self.entries_max
                || table.arena.len() + key.len() > self.bytes_max
            {
                // Full: keep what is cached. Emptying it at once made a working set larger
                // than the cache miss always (a million series sent in turn cycled through a
                // cache of 600,000 and cost 13× the CPU per sample); it is emptied only when
                // the series refused outnumber those cached REFUSED_PER_ENTRY_MAX times over
                // (the senders' series have mostly changed).
                table.refused_since_full += 1;
                if table.refused_since_full <= table.entries.len() * REFUSED_PER_ENTRY_MAX {
                    continue;
                }
                table.clear();
            }
            table.grow(self.entries_max);
            table.add(&key, id);
        }
    }

    /// The series id cached for `key` (a lookup under its own shared lock).
    #[cfg(test)]
    pub(crate) fn get(&self, key: &CacheKey<'_>) -> Option<SeriesId> {
        let mut reader = self.reader(Namespace(key.namespace));
        let raw = RawSeries {
            first: key.first,
            second: key.second,
        };
        reader.get(raw)
    }

    /// Caches `key` → `id`.
    #[cfg(test)]
    pub(crate) fn insert(&self, key: &CacheKey<'_>, id: SeriesId) {
        self.insert_all(std::iter::once((*key, id)));
    }

    /// Series cached now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.read().map(|t| t.entries.len()).unwrap_or(0)
    }
}

impl Reader<'_> {
    /// The namespace this reader looks up in.
    pub fn namespace(&self) -> Namespace {
        self.namespace
    }

    /// [`SeriesCache::key`] in this reader's namespace (the last miss's hash reused).
    pub fn key<'a>(&self, raw: RawSeries<'a>) -> CacheKey<'a> {
        match self.last_miss {
            Some((at, hash)) if at == raw_at(&raw) => CacheKey {
                hash,
                namespace: self.namespace.0,
                first: raw.first,
                second: raw.second,
            },
            _ => self.cache.key(self.namespace, raw),
        }
    }

    /// The series id cached for `raw`. Clients resend their series in the same order, so the
    /// entry after the one found last is compared first; only when it is another key is the
    /// key hashed and looked up. Inlined into the parsers' loops (the next entry's compare is
    /// the whole cost of a hit).
    #[inline(always)]
    pub fn get(&mut self, raw: RawSeries<'_>) -> Option<SeriesId> {
        if self.reads_left == 0 {
            self.take_turn();
        }
        self.reads_left -= 1;
        let table = self.table.as_ref()?;
        if let Some(entry) = table.entries.get(self.next) {
            if table.holds(entry, self.namespace.0, raw.first, raw.second) {
                self.next += 1;
                return Some(SeriesId(entry.id));
            }
        }
        let key = self.cache.key(self.namespace, raw);
        let Some(at) = table.find(&key) else {
            self.last_miss = Some((raw_at(&raw), key.hash));
            return None;
        };
        self.next = at + 1;
        Some(SeriesId(table.entries[at].id))
    }
}

impl Reader<'_> {
    /// Lets the lock go and takes it again, so that a writer waiting to learn another body's
    /// misses goes first (readers queue behind a waiting writer: one body's long read would
    /// hold every other body's first lookup). The table may change meanwhile; a remembered
    /// position is only a guess, checked against the key's bytes.
    #[cold]
    fn take_turn(&mut self) {
        self.table = None;
        self.table = self.cache.table.read().ok();
        self.reads_left = READS_PER_HOLD_MAX;
    }
}

/// Equality of short slices (an Influx field key, remote write's empty second part) without a
/// call to `memcmp`, whose short-length path measured slow here (a call per lookup cost remote
/// write 1/3 of its throughput for an empty slice); long ones are compared by `memcmp`.
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    const SHORT_BYTES_MAX: usize = 32;
    if a.len() != b.len() {
        return false;
    }
    if a.len() > SHORT_BYTES_MAX {
        return a == b;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

impl Table {
    /// Whether `entry` is the key `first`, `second` in `namespace`.
    #[inline]
    fn holds(&self, entry: &Entry, namespace: u32, first: &[u8], second: &[u8]) -> bool {
        if entry.first_len as usize != first.len()
            || entry.len as usize != first.len() + second.len()
            || entry.namespace != namespace
        {
            return false;
        }
        let start = entry.at as usize;
        let bytes = &self.arena[start..start + entry.len as usize];
        let (a, b) = bytes.split_at(first.len());
        a == first && short_eq(b, second)
    }

    /// The entry of `key`.
    fn find(&self, key: &CacheKey<'_>) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let tag = tag_of(key.hash);
        let mask = self.slots.len() - 1;
        let mut at = home(key.hash, mask);
        for _ in 0..PROBES_MAX.min(self.slots.len()) {
            let slot = self.slots[at];
            if slot.tag == 0 {
                return None;
            }
            if slot.tag == tag {
                let entry = &self.entries[slot.entry as usize];
                if entry.hash == key.hash && self.holds(entry, key.namespace, key.first, key.second)
                {
                    return Some(slot.entry as usize);
                }
            }
            at = (at + 1) & mask;
        }
        None
    }

    fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = Slot::default());
        self.entries.clear();
        self.arena.clear();
        self.refused_since_full = 0;
    }

    /// Keeps the table at most half full, up to twice `entries_max` slots.
    fn grow(&mut self, entries_max: usize) {
        let slots_max = (entries_max * 2).next_power_of_two();
        if self.slots.is_empty() {
            self.slots = vec![Slot::default(); SLOTS_INITIAL.min(slots_max)];
        }
        if (self.entries.len() + 1) * 2 <= self.slots.len() || self.slots.len() >= slots_max {
            return;
        }
        self.slots = vec![Slot::default(); self.slots.len() * 2];
        let mask = self.slots.len() - 1;
        for (i, entry) in self.entries.iter().enumerate() {
            let mut at = home(entry.hash, mask);
            // A doubled table is at most a quarter full: a free slot is never far.
            while self.slots[at].tag != 0 {
                at = (at + 1) & mask;
            }
            self.slots[at] = Slot {
                tag: tag_of(entry.hash),
                entry: i as u32,
            };
        }
    }

    /// Adds a key that is not in the table. Past `PROBES_MAX` occupied slots the key takes
    /// its home slot (the entry there is no longer found by hash; chains never get an empty
    /// slot inside).
    fn add(&mut self, key: &CacheKey<'_>, id: SeriesId) {
        assert!(!self.slots.is_empty() && self.slots.len().is_power_of_two());
        let mask = self.slots.len() - 1;
        let home = home(key.hash, mask);
        let mut at = home;
        for _ in 0..PROBES_MAX.min(self.slots.len()) {
            if self.slots[at].tag == 0 {
                break;
            }
            at = (at + 1) & mask;
        }
        if self.slots[at].tag != 0 {
            at = home;
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(key.first);
        self.arena.extend_from_slice(key.second);
        // The bounds (checked by the caller) keep offsets and indices within u32.
        self.entries.push(Entry {
            hash: key.hash,
            at: start as u32,
            len: key.len() as u16,
            first_len: key.first.len() as u16,
            namespace: key.namespace,
            id: id.0,
        });
        self.slots[at] = Slot {
            tag: tag_of(key.hash),
            entry: (self.entries.len() - 1) as u32,
        };
    }
}

/// A body's misses: the keys it pushed by canonical text, to cache once the write that creates
/// their series has succeeded. Bounded; what does not fit is learned on a later miss.
#[derive(Default)]
pub struct Misses {
    /// Key bytes, back to back.
    keys: Vec<u8>,
    /// Canonical key texts, back to back.
    texts: String,
    entries: Vec<Miss>,
}

/// Misses kept per request (a request of new series is rare; its size is bounded by the body).
pub const MISSES_MAX: usize = 200_000;
/// Key and text bytes kept per request.
pub const MISS_BYTES_MAX: usize = 64 << 20;

struct Miss {
    hash: u64,
    namespace: u32,
    first_len: u32,
    /// Ends of this miss's key in `keys` and its text in `texts`.
    key_end: usize,
    text_end: usize,
    kind: Kind,
}

impl Misses {
    /// Remembers that `key` was pushed as the canonical key `text` with a value of `kind`.
    pub fn add(&mut self, key: &CacheKey<'_>, text: &str, kind: Kind) {
        if self.entries.len() >= MISSES_MAX
            || self.keys.len() + self.texts.len() + key.len() + text.len() > MISS_BYTES_MAX
            || key.len() > KEY_BYTES_ONE_MAX
        {
            return;
        }
        self.keys.extend_from_slice(key.first);
        self.keys.extend_from_slice(key.second);
        self.texts.push_str(text);
        self.entries.push(Miss {
            hash: key.hash,
            namespace: key.namespace,
            first_len: key.first.len() as u32,
            key_end: self.keys.len(),
            text_end: self.texts.len(),
            kind,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.texts.clear();
        self.entries.clear();
    }

    /// After a successful write of the batch the misses were pushed into: looks their series
    /// up (one read lock) and caches the ids of those that exist (all but the ones a
    /// cardinality limit refused). A series that exists with
    /// another kind is cached too (its samples are refused by id as by key). Empties `self`.
    pub fn learn(&mut self, store: &Store, cache: &SeriesCache) {
        if self.entries.is_empty() {
            return;
        }
        let mut refs = Vec::with_capacity(self.entries.len());
        let mut text_start = 0;
        for miss in &self.entries {
            refs.push((
                KeyRef::Text(&self.texts[text_start..miss.text_end]),
                miss.kind,
            ));
            text_start = miss.text_end;
        }
        // Looked up, never created: a key a cardinality limit refused stays uncached (and
        // uncreated), and is refused again on its next write.
        match store.index().lookup_partial(&refs) {
            Ok(ids) => {
                let mut key_start = 0;
                let keys = self.entries.iter().zip(ids).filter_map(|(miss, found)| {
                    let bytes = &self.keys[key_start..miss.key_end];
                    key_start = miss.key_end;
                    let id = found?;
                    let (first, second) = bytes.split_at(miss.first_len as usize);
                    let key = CacheKey {
                        hash: miss.hash,
                        namespace: miss.namespace,
                        first,
                        second,
                    };
                    Some((key, id))
                });
                cache.insert_all(keys);
            }
            Err(e) => tracing::debug!(error = %e, "series ids not cached"),
        }
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn raw<'a>(first: &'a [u8], second: &'a [u8]) -> RawSeries<'a> {
        RawSeries { first, second }
    }

    #[test]
    fn a_key_is_found_only_with_both_parts_and_the_namespace_equal() {
        let cache = SeriesCache::new(1000, 1 << 20);
        let influx = cache.namespace("influx", &[]).unwrap();
        cache.insert(&cache.key(influx, raw(b"cpu,a=b", b"cx")), SeriesId(7));
        assert_eq!(
            cache.get(&cache.key(influx, raw(b"cpu,a=b", b"cx"))),
            Some(SeriesId(7))
        );
        // The same bytes split elsewhere are another series (`cpu_x{a=bc}`).
        assert_eq!(cache.get(&cache.key(influx, raw(b"cpu,a=bc", b"x"))), None);
        assert_eq!(cache.get(&cache.key(influx, raw(b"cpu,a=b", b"cy"))), None);
        // The same bytes in another namespace (protocol, or check) are another series.
        let other = cache.namespace("remote_write", &[]).unwrap();
        let check = Tag::new("__check", "c").unwrap();
        let checked = cache.namespace("influx", &[check]).unwrap();
        assert_ne!(other, influx);
        assert_ne!(checked, influx);
        assert_eq!(cache.namespace("influx", &[]), Some(influx));
        assert_eq!(cache.get(&cache.key(other, raw(b"cpu,a=b", b"cx"))), None);
        assert_eq!(cache.get(&cache.key(checked, raw(b"cpu,a=b", b"cx"))), None);
        cache.insert(&cache.key(influx, raw(b"cpu,a=b", b"cx")), SeriesId(9));
        assert_eq!(
            cache.get(&cache.key(influx, raw(b"cpu,a=b", b"cx"))),
            Some(SeriesId(9))
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_long_body_lets_a_waiting_writer_learn() {
        let cache = SeriesCache::new(1000, 1 << 20);
        let influx = cache.namespace("influx", &[]).unwrap();
        cache.insert(&cache.key(influx, raw(b"cpu,a=b", b"x")), SeriesId(1));
        std::thread::scope(|scope| {
            // Declared in the scope: a failed assertion drops it before the writer is joined.
            let mut reader = cache.reader(influx);
            scope.spawn(|| cache.insert(&cache.key(influx, raw(b"cpu,a=c", b"x")), SeriesId(2)));
            // The writer waits for the reader's lock; the reader, still reading, lets it in.
            let learned = (0..1000 * READS_PER_HOLD_MAX).any(|_| {
                assert_eq!(reader.get(raw(b"cpu,a=b", b"x")), Some(SeriesId(1)));
                reader.get(raw(b"cpu,a=c", b"x")) == Some(SeriesId(2))
            });
            assert!(learned, "the writer waited for the whole body");
        });
    }

    #[test]
    fn namespaces_are_bounded_and_never_given_twice() {
        let cache = SeriesCache::new(1000, 1 << 20);
        let first = cache.namespace("httptrap", &[]).unwrap();
        let mut seen = std::collections::HashSet::new();
        for i in 0..NAMESPACES_MAX * 2 {
            let check = Tag::new("__check", format!("c{i}")).unwrap();
            assert!(seen.insert(cache.namespace("httptrap", &[check]).unwrap()));
            assert!(cache.namespaces.lock().unwrap().by_name.len() <= NAMESPACES_MAX);
        }
        // Forgotten, then given a new id: nothing cached under the old one is found with it.
        assert_ne!(cache.namespace("httptrap", &[]), Some(first));
    }

    /// A cache of `entries_max` entries (bytes unbounded in effect), its namespace, and the
    /// numbered keys the bound tests use.
    fn numbered(entries_max: usize) -> (SeriesCache, Namespace, impl Fn(usize) -> Vec<u8>) {
        let cache = SeriesCache::new(entries_max, 1 << 30);
        let ns = cache.namespace("test", &[]).unwrap();
        (cache, ns, |i: usize| format!("series {i}").into_bytes())
    }

    #[test]
    fn every_key_within_the_bound_is_kept_and_the_bound_holds() {
        let entries_max = 6400;
        let (cache, ns, key) = numbered(entries_max);
        let n = entries_max / 2;
        for i in 0..n {
            let k = key(i);
            cache.insert(&cache.key(ns, raw(&k, b"")), SeriesId(i as u32));
        }
        let found = (0..n)
            .filter(|&i| {
                let k = key(i);
                cache.get(&cache.key(ns, raw(&k, b""))) == Some(SeriesId(i as u32))
            })
            .count();
        // A key is forgotten only when its probe window is full (rare at half the bound).
        assert!(found as f64 >= n as f64 * 0.99, "{found} of {n}");
        for i in n..entries_max * 10 {
            let k = key(i);
            cache.insert(&cache.key(ns, raw(&k, b"")), SeriesId(i as u32));
            assert!(cache.len() <= entries_max);
        }
        // Whatever is still cached maps to its own id.
        let wrong = (0..entries_max * 10)
            .filter(|&i| {
                let k = key(i);
                let got = cache.get(&cache.key(ns, raw(&k, b"")));
                got.is_some_and(|id| id != SeriesId(i as u32))
            })
            .count();
        assert_eq!(wrong, 0);
    }

    #[test]
    fn a_working_set_larger_than_the_cache_keeps_hitting_on_what_it_holds() {
        let entries_max = 1000;
        let (cache, ns, key) = numbered(entries_max);
        let n = entries_max * 3 / 2;
        let mut hits_per_pass = Vec::new();
        for _pass in 0..3 {
            let mut hits = 0;
            for i in 0..n {
                let k = key(i);
                let ck = cache.key(ns, raw(&k, b""));
                match cache.get(&ck) {
                    Some(id) => {
                        assert_eq!(id, SeriesId(i as u32));
                        hits += 1;
                    }
                    None => cache.insert(&ck, SeriesId(i as u32)),
                }
                assert!(cache.len() <= entries_max);
            }
            hits_per_pass.push(hits);
        }
        // Emptied whenever full, every pass would miss everything.
        assert!(
            hits_per_pass[1] >= entries_max * 9 / 10,
            "{hits_per_pass:?}"
        );
        assert!(
            hits_per_pass[2] >= entries_max * 9 / 10,
            "{hits_per_pass:?}"
        );
    }

    #[test]
    fn lookups_in_the_order_inserted_or_any_other_find_each_key_s_own_id() {
        let cache = SeriesCache::new(10_000, 1 << 20);
        let ns = cache.namespace("influx", &[]).unwrap();
        let section = |i: usize| format!("cpu,host=h{}", i / 3).into_bytes();
        let field = |i: usize| format!("f{}", i % 3).into_bytes();
        let n = 300;
        let keys: Vec<_> = (0..n).map(|i| (section(i), field(i))).collect();
        for (i, (a, b)) in keys.iter().enumerate() {
            cache.insert(&cache.key(ns, raw(a, b)), SeriesId(1000 + i as u32));
        }
        let mut orders: Vec<Vec<usize>> = vec![(0..n).collect(), (0..n).rev().collect()];
        // Every other key, then each key twice in a row, then a stride.
        orders.push((0..n).step_by(2).collect());
        orders.push((0..n).flat_map(|i| [i, i]).collect());
        orders.push((0..n).map(|i| (i * 7) % n).collect());
        let other = cache.namespace("other", &[]).unwrap();
        for order in orders {
            let mut reader = cache.reader(ns);
            let mut elsewhere = cache.reader(other);
            for &i in &order {
                let (a, b) = &keys[i];
                let got = reader.get(raw(a, b));
                assert_eq!(got, Some(SeriesId(1000 + i as u32)), "key {i}");
                // A key that is not cached, between cached ones: the same first part with
                // another second, the next key's bytes split elsewhere, the same bytes in
                // another namespace.
                assert_eq!(reader.get(raw(a, b"zz")), None);
                let mut joined = a.clone();
                joined.extend_from_slice(&b[..1]);
                assert_eq!(reader.get(raw(&joined, &b[1..])), None);
                assert_eq!(elsewhere.get(raw(a, b)), None);
            }
        }
    }

    #[test]
    fn the_byte_bound_holds() {
        let cache = SeriesCache::new(1 << 20, 64_000);
        let ns = cache.namespace("test", &[]).unwrap();
        for i in 0..10_000u32 {
            let k = format!("{i:0>100}").into_bytes();
            cache.insert(&cache.key(ns, raw(&k, b"")), SeriesId(i));
        }
        assert!(cache.table.read().unwrap().arena.len() <= 64_000);
        assert!(cache.len() > 0);
    }
}
