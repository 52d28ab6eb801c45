//! Shared by the alert crate's integration tests: a store on a temporary directory, a virtual
//! clock, data writers and an engine over them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use alert::engine::{Engine, EngineOptions};
use alert::record::Record;
use hist::Histogram;
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

pub const MIN: i64 = 60_000;

pub fn store(dir: &Path, base_ms: i64) -> Arc<Store> {
    Arc::new(
        Store::open(
            dir,
            StoreOptions {
                base_period_ms: base_ms,
                partition_ms: base_ms * 120,
                background_flush: false,
                background_maintenance: false,
                durability: journal::Durability::Buffered,
                wal_segment_size_bytes: 4 << 20,
                ..StoreOptions::default()
            },
        )
        .unwrap(),
    )
}

pub fn key(t: &str) -> StreamKey {
    StreamKey::parse(t).unwrap()
}

pub fn hist(pairs: &[(f64, u64)]) -> Histogram {
    let mut h = Histogram::new();
    for &(v, n) in pairs {
        h.insert_n(v, n);
    }
    h
}

pub fn write_hist(s: &Store, k: &str, ts: i64, pairs: &[(f64, u64)]) {
    let mut b = WriteBatch::new();
    b.histogram(&key(k), ts, &hist(pairs)).unwrap();
    s.write(&b).unwrap();
}

pub fn write_num(s: &Store, k: &str, ts: i64, v: f64) {
    let mut b = WriteBatch::new();
    b.numeric(&key(k), ts, v).unwrap();
    s.write(&b).unwrap();
}

pub fn write_text(s: &Store, k: &str, ts: i64, v: &str) {
    let mut b = WriteBatch::new();
    b.text(&key(k), ts, v).unwrap();
    s.write(&b).unwrap();
}

/// A clock tests move by hand.
#[derive(Clone, Default)]
pub struct VClock(pub Arc<AtomicI64>);

impl VClock {
    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub fn options(dir: &Path, clock: &VClock) -> EngineOptions {
    let c = clock.clone();
    let mut o = EngineOptions::new(dir);
    o.clock = Arc::new(move || c.get());
    o.grace_ms = 5_000;
    o.push_sources = None;
    o.durability = journal::Durability::Buffered;
    o
}

/// Writes `text` as the only rules file in `dir/rules.d` and returns that directory.
pub fn rules_dir(dir: &Path, text: &str) -> std::path::PathBuf {
    let d = dir.join("rules.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("rules.toml"), text).unwrap();
    d
}

pub fn engine(store: &Arc<Store>, dir: &Path, rules: &Path, clock: &VClock) -> Arc<Engine> {
    let mut o = options(dir, clock);
    o.rules_dirs = vec![rules.to_path_buf()];
    Engine::open(store.clone(), o).unwrap()
}

/// Every record in the engine's journal, in order.
pub fn journal_records(e: &Engine) -> Vec<(u64, Record)> {
    let mut r = e
        .journal()
        .reader(e.journal().earliest_offset().unwrap())
        .unwrap();
    let mut b = journal::Batch::new();
    let mut out = Vec::new();
    while r.next_batch(&mut b).unwrap() > 0 {
        for (o, p) in b.iter() {
            out.push((o, Record::decode(p).unwrap()));
        }
    }
    out
}

/// (t, stream, from, to, severity) of every update, in order.
pub fn transitions(records: &[Record]) -> Vec<(i64, String, String, String, u8)> {
    let mut out = Vec::new();
    for r in records {
        if let Record::Eval(e) = r {
            for u in &e.updates {
                out.push((
                    e.t_ms,
                    u.instance.stream.clone(),
                    u.from_state.name().to_string(),
                    u.instance.state.name().to_string(),
                    u.instance.severity,
                ));
            }
        }
    }
    out
}

/// Opens the store a crashed child left, waiting while the killed process's lock is released.
pub fn open_store_retry(dir: &Path) -> Arc<store::Store> {
    for _ in 0..500 {
        match store::Store::open(
            dir,
            store::StoreOptions {
                base_period_ms: MIN,
                partition_ms: MIN * 120,
                background_flush: false,
                background_maintenance: false,
                ..store::StoreOptions::default()
            },
        ) {
            Err(store::StoreError::Journal(journal::Error::Locked)) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => return Arc::new(other.unwrap()),
        }
    }
    panic!("store stayed locked");
}
