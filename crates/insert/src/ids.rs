//! Series ids by the bytes a client sends for a series, so a series seen before costs one hash
//! of those bytes instead of printing, hashing and comparing its canonical key.
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
//! A key is kept as its 128-bit SipHash-1-3 under a key drawn per process, not as its bytes:
//! 24 bytes an entry, where the bytes of a TSBS-like label set cost 134 more (a million series
//! took 128 MiB and overflowed the byte bound). Two keys are taken for one only if their
//! hashes are equal: by chance about once in 2^128 / n² pairs (n = 2^30 keys: 2^-68), and a
//! client cannot make it happen on purpose without the per-process key (SipHash is a keyed
//! function made for inputs chosen by an adversary).
//!
//! Bounded in entries and namespaces; a full cache keeps what it holds and caches nothing new
//! until the keys it refused outnumber those it holds a few times over, then is emptied
//! (clients resend, so what is still in use is learned again on its next miss). A body reads
//! under a shared lock it lets go every few thousand lookups ([`SeriesCache::reader`]), so a
//! hit takes no lock of its own and a long body does not hold back a writer; misses are learned
//! under the exclusive lock after the write that created their series ([`Misses::learn`]),
//! never before, so a body rejected whole creates nothing. Entries are kept in the order first
//! seen, which is the order clients resend them in: the entry after the one found last is
//! compared first.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, RwLock, RwLockReadGuard};

use ingest::RawSeries;
use siphasher::sip128::{Hasher128, SipHasher13};
use store::key::Tag;
use store::{KeyRef, Kind, SeriesId, Store};

/// Series the cache holds by default (Influx: one per series and field): 2^21 entries take
/// at most 80 MiB (24 bytes an entry, two 8-byte slots).
pub const ENTRIES_MAX_DEFAULT: usize = 1 << 21;
/// A full cache is emptied once it refused this many keys per key it holds.
const REFUSED_PER_ENTRY_MAX: usize = 4;
/// Slots a lookup probes before giving up (the tables are at most half full, so chains are
/// short; a bound keeps collisions of the slot index from costing more than a miss).
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
    /// The SipHash key, drawn per process.
    keys: (u64, u64),
    entries_max: usize,
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
    /// for the write right after it (`Misses::add`), which need not hash the bytes again. The
    /// parsers hand the same parts, unchanged, to both.
    last_miss: Option<(RawSeriesAt, CacheKey)>,
    /// The hash state after the namespace and `prefix_of`, the first part of the last lookup
    /// that had a second: an Influx line's fields share its series section, which is then
    /// hashed once a line instead of once a field. Compared by content: a parser may build a
    /// part in a buffer it reuses (httptrap's metric path).
    prefix: Option<SipHasher13>,
    prefix_of: Vec<u8>,
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

/// A key: its namespace and the 128-bit hash of its namespace and bytes (in two parts:
/// Influx's series section and field key; remote write's labels and nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheKey {
    low: u64,
    high: u64,
    namespace: u32,
}

/// A slot of the hash table: which entry, and bits of its hash to skip most others unread.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// The high half of the entry's low hash word with the low bit set; 0 = empty.
    tag: u32,
    /// Index into `Table::entries`.
    entry: u32,
}

/// A cached key, in insertion order (24 bytes).
#[derive(Clone, Copy)]
struct Entry {
    low: u64,
    high: u64,
    namespace: u32,
    id: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 24);

impl Entry {
    #[inline]
    fn is(&self, key: &CacheKey) -> bool {
        self.low == key.low && self.high == key.high && self.namespace == key.namespace
    }
}

#[derive(Default)]
struct Table {
    /// Open addressing, linear probing, length a power of two (or 0 before first use); small
    /// (8 bytes a slot) because it is the one part read at random.
    slots: Vec<Slot>,
    /// Keys in the order first seen: the order requests look them up in again.
    entries: Vec<Entry>,
    /// Keys not cached because the table was full, since it last filled.
    refused_since_full: usize,
}

fn tag_of(key: &CacheKey) -> u32 {
    (key.low >> 32) as u32 | 1
}

/// The first slot a key probes.
fn home(low: u64, mask: usize) -> usize {
    low as usize & mask
}

/// 64 random bits (std's per-process SipHash keys, drawn from the OS).
fn random_u64(salt: u64) -> u64 {
    RandomState::new().hash_one(salt)
}

impl SeriesCache {
    /// A cache of at most `entries_max` series.
    pub fn new(entries_max: usize) -> SeriesCache {
        SeriesCache {
            table: RwLock::default(),
            keys: (random_u64(0), random_u64(1)),
            entries_max: entries_max.clamp(1, u32::MAX as usize / 4),
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
            prefix: None,
            prefix_of: Vec::new(),
        }
    }

    /// The key of `raw` in `namespace`.
    pub fn key(&self, namespace: Namespace, raw: RawSeries<'_>) -> CacheKey {
        finish(self.prefix(namespace, raw.first), namespace, raw.second)
    }

    /// The hash state after the namespace and a key's first part.
    fn prefix(&self, namespace: Namespace, first: &[u8]) -> SipHasher13 {
        let mut h = SipHasher13::new_with_keys(self.keys.0, self.keys.1);
        h.write_u32(namespace.0);
        // The split matters (`cpu,a=b` + `cx` is not `cpu,a=bc` + `x`): the length goes in.
        h.write_u64(first.len() as u64);
        h.write(first);
        h
    }

    /// Caches each `key` → `id` (replacing what a key had), under one exclusive lock; a full
    /// cache refuses new keys until it refused enough to be emptied.
    fn insert_all(&self, keys: impl Iterator<Item = (CacheKey, SeriesId)>) {
        let Ok(mut table) = self.table.write() else {
            return;
        };
        for (key, id) in keys {
            if let Some(at) = table.find(&key) {
                table.entries[at].id = id.0;
                continue;
            }
            if table.entries.len() >= self.entries_max {
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
    pub(crate) fn get(&self, key: &CacheKey) -> Option<SeriesId> {
        let table = self.table.read().ok()?;
        let at = table.find(key)?;
        Some(SeriesId(table.entries[at].id))
    }

    /// Caches `key` → `id`.
    #[cfg(test)]
    pub(crate) fn insert(&self, key: &CacheKey, id: SeriesId) {
        self.insert_all(std::iter::once((*key, id)));
    }

    /// Series cached now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.read().map(|t| t.entries.len()).unwrap_or(0)
    }
}

/// The key whose first part `prefix` holds, with its second part.
fn finish(mut prefix: SipHasher13, namespace: Namespace, second: &[u8]) -> CacheKey {
    prefix.write(second);
    let hash = prefix.finish128();
    CacheKey {
        low: hash.h1,
        high: hash.h2,
        namespace: namespace.0,
    }
}

impl Reader<'_> {
    /// The namespace this reader looks up in.
    pub fn namespace(&self) -> Namespace {
        self.namespace
    }

    /// [`SeriesCache::key`] in this reader's namespace (the last miss's hash reused).
    pub fn key(&self, raw: RawSeries<'_>) -> CacheKey {
        match self.last_miss {
            Some((at, key)) if at == raw_at(&raw) => key,
            _ => self.cache.key(self.namespace, raw),
        }
    }

    /// The series id cached for `raw`. Clients resend their series in the same order, so the
    /// entry after the one found last is compared first; only when it is another key is the
    /// table probed. Inlined into the parsers' loops.
    #[inline(always)]
    pub fn get(&mut self, raw: RawSeries<'_>) -> Option<SeriesId> {
        if self.reads_left == 0 {
            self.take_turn();
        }
        self.reads_left -= 1;
        let key = self.hash(raw);
        let table = self.table.as_ref()?;
        if let Some(entry) = table.entries.get(self.next) {
            if entry.is(&key) {
                self.next += 1;
                return Some(SeriesId(entry.id));
            }
        }
        let Some(at) = table.find(&key) else {
            self.last_miss = Some((raw_at(&raw), key));
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
    /// position is only a guess, checked against the key.
    /// The key of `raw`, its first part's hash state reused when it is the last one's.
    #[inline]
    fn hash(&mut self, raw: RawSeries<'_>) -> CacheKey {
        if raw.second.is_empty() {
            return self.cache.key(self.namespace, raw);
        }
        let state = match self.prefix {
            Some(state) if self.prefix_of == raw.first => state,
            _ => {
                let state = self.cache.prefix(self.namespace, raw.first);
                self.prefix = Some(state);
                self.prefix_of.clear();
                self.prefix_of.extend_from_slice(raw.first);
                state
            }
        };
        finish(state, self.namespace, raw.second)
    }

    #[cold]
    fn take_turn(&mut self) {
        self.table = None;
        self.table = self.cache.table.read().ok();
        self.reads_left = READS_PER_HOLD_MAX;
    }
}

impl Table {
    /// The entry of `key`.
    fn find(&self, key: &CacheKey) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let tag = tag_of(key);
        let mask = self.slots.len() - 1;
        let mut at = home(key.low, mask);
        for _ in 0..PROBES_MAX.min(self.slots.len()) {
            let slot = self.slots[at];
            if slot.tag == 0 {
                return None;
            }
            if slot.tag == tag && self.entries[slot.entry as usize].is(key) {
                return Some(slot.entry as usize);
            }
            at = (at + 1) & mask;
        }
        None
    }

    fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = Slot::default());
        self.entries.clear();
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
            let mut at = home(entry.low, mask);
            // A doubled table is at most a quarter full: a free slot is never far.
            while self.slots[at].tag != 0 {
                at = (at + 1) & mask;
            }
            self.slots[at] = Slot {
                tag: (entry.low >> 32) as u32 | 1,
                entry: i as u32,
            };
        }
    }

    /// Adds a key that is not in the table. Past `PROBES_MAX` occupied slots the key takes
    /// its home slot (the entry there is no longer found by hash; chains never get an empty
    /// slot inside).
    fn add(&mut self, key: &CacheKey, id: SeriesId) {
        assert!(!self.slots.is_empty() && self.slots.len().is_power_of_two());
        let mask = self.slots.len() - 1;
        let home = home(key.low, mask);
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
        // The entry bound (checked by the caller) keeps indices within u32.
        self.entries.push(Entry {
            low: key.low,
            high: key.high,
            namespace: key.namespace,
            id: id.0,
        });
        self.slots[at] = Slot {
            tag: tag_of(key),
            entry: (self.entries.len() - 1) as u32,
        };
    }
}

/// A body's misses: the keys it pushed by canonical text, to cache once the write that creates
/// their series has succeeded. Bounded; what does not fit is learned on a later miss.
#[derive(Default)]
pub struct Misses {
    /// Canonical key texts, back to back.
    texts: String,
    entries: Vec<Miss>,
}

/// Misses kept per request (a request of new series is rare; its size is bounded by the body).
pub const MISSES_MAX: usize = 200_000;
/// Text bytes kept per request.
pub const MISS_BYTES_MAX: usize = 64 << 20;

struct Miss {
    key: CacheKey,
    /// End of this miss's text in `texts`.
    text_end: usize,
    kind: Kind,
}

impl Misses {
    /// Remembers that `key` was pushed as the canonical key `text` with a value of `kind`.
    pub fn add(&mut self, key: &CacheKey, text: &str, kind: Kind) {
        if self.entries.len() >= MISSES_MAX || self.texts.len() + text.len() > MISS_BYTES_MAX {
            return;
        }
        self.texts.push_str(text);
        self.entries.push(Miss {
            key: *key,
            text_end: self.texts.len(),
            kind,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn clear(&mut self) {
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
                let keys = self
                    .entries
                    .iter()
                    .zip(ids)
                    .filter_map(|(miss, found)| Some((miss.key, found?)));
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
        let cache = SeriesCache::new(1000);
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

    /// A parser may build a part in a buffer it reuses: the same place and length with other
    /// bytes is another key.
    #[test]
    fn a_part_rewritten_in_the_same_buffer_is_another_key() {
        let cache = SeriesCache::new(1000);
        let ns = cache.namespace("httptrap", &[]).unwrap();
        let mut path = b"cpu`a".to_vec();
        cache.insert(&cache.key(ns, raw(&path, b"|ST[x:1]")), SeriesId(1));
        path.copy_from_slice(b"cpu`b");
        cache.insert(&cache.key(ns, raw(&path, b"|ST[x:1]")), SeriesId(2));
        let mut reader = cache.reader(ns);
        for _ in 0..3 {
            path.copy_from_slice(b"cpu`a");
            assert_eq!(reader.get(raw(&path, b"|ST[x:1]")), Some(SeriesId(1)));
            path.copy_from_slice(b"cpu`b");
            assert_eq!(reader.get(raw(&path, b"|ST[x:1]")), Some(SeriesId(2)));
            path.copy_from_slice(b"cpu`c");
            assert_eq!(reader.get(raw(&path, b"|ST[x:1]")), None);
        }
    }

    #[test]
    fn a_long_body_lets_a_waiting_writer_learn() {
        let cache = SeriesCache::new(1000);
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
        let cache = SeriesCache::new(1000);
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
        let cache = SeriesCache::new(entries_max);
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
        let cache = SeriesCache::new(10_000);
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
}
