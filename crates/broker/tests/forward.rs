//! The forwarder against a real HTTP server that keeps the core's exactly-once contract and
//! misbehaves on purpose: it answers some requests 503 without applying them, applies some and
//! then fails the answer (500, as if the answer were lost), and counts how many requests of the
//! source are in flight. The forwarder is stopped mid-way and started again on the same journal.
//! Every record must be applied, each once, with never more than 64 in flight, and the journal
//! checkpoint must reach the end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use broker::forward::{forward_loop, ForwardConfig, ForwardStats, IN_FLIGHT_MAX};
use broker::record::{Encoder, Mode, Origin, Value};
use broker::spool::{Spool, SpoolOptions};

const RECORDS: u64 = 600;
const WAIT_MS_MAX: u64 = 120_000;

#[derive(Default)]
struct Core {
    /// (epoch, seq) → times applied.
    applied: Mutex<HashMap<(u64, u64), u32>>,
    /// Samples applied, over every record.
    samples: AtomicU64,
    requests: AtomicU64,
    in_flight: AtomicU64,
    in_flight_most: AtomicU64,
    duplicates: AtomicU64,
}

/// Counts a request in flight until its handler ends or is dropped (the client went away).
struct InFlight(Arc<Core>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn write(State(core): State<Arc<Core>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let now = core.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    core.in_flight_most.fetch_max(now, Ordering::SeqCst);
    let _counted = InFlight(core.clone());
    let n = core.requests.fetch_add(1, Ordering::SeqCst);
    // Hold the request a moment so that many are in flight at once.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let header = |name: &str| -> u64 {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    assert_eq!(headers.get("strata-source").unwrap(), "edge-1");
    let key = (header("strata-epoch"), header("strata-sequence"));
    let status = if n % 7 == 3 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        let batch = ingest::flat::parse(&body, &ingest::Options::at(1_700_000_000_000));
        assert!(batch.rejected.is_empty(), "{:?}", batch.rejected);
        let mut applied = core.applied.lock().unwrap();
        let times = applied.entry(key).or_insert(0);
        if *times == 0 {
            core.samples
                .fetch_add(batch.samples.len() as u64, Ordering::SeqCst);
            *times = 1;
        } else {
            core.duplicates.fetch_add(1, Ordering::SeqCst);
        }
        if n % 11 == 5 {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        }
    };
    status
}

fn record(i: u64) -> Vec<u8> {
    let mut enc = Encoder::new(Origin::Checks, 1);
    let tags = vec![("check".to_owned(), format!("c{}", i % 10))];
    let mut h = hist::Histogram::new();
    h.insert(i as f64);
    enc.push(
        "lat",
        &tags,
        1_700_000_000_000 + i as i64,
        &Value::Histogram(h),
        Mode::Set,
    );
    enc.push(
        "up",
        &tags,
        1_700_000_000_000 + i as i64,
        &Value::Numeric(1.0),
        Mode::Set,
    );
    enc.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_once_through_refusals_lost_answers_and_a_restart() {
    let core = Arc::new(Core::default());
    let app = Router::new()
        .route("/write/{check}", post(write))
        .with_state(core.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let cores = vec!["core".to_owned()];
    let config = ForwardConfig {
        url: format!("http://{addr}"),
        core: "core".into(),
        source: "edge-1".into(),
        check: "edge-1".into(),
        secret: None,
        bearer: None,
    };
    let spool = Arc::new(Spool::open(dir.path(), &cores, SpoolOptions::default()).unwrap());
    let epoch = spool.epoch();
    for i in 0..RECORDS / 2 {
        spool.append(record(i)).await.unwrap();
    }
    let stats = Arc::new(ForwardStats::default());
    let task = tokio::spawn(forward_loop(spool.clone(), config.clone(), stats.clone()));
    // Stop it mid-way (some records at the core, some not), as a killed broker would.
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while core.requests.load(Ordering::SeqCst) < 100 {
        assert!(Instant::now() < deadline, "nothing forwarded");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    task.abort();
    let _ = task.await;
    // Requests of the stopped forwarder still being answered are its, not the next one's: the
    // bound is per sender life (a new life's window starts where the old one's checkpoint was).
    while core.in_flight.load(Ordering::SeqCst) > 0 {
        assert!(Instant::now() < deadline, "requests never ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    core.in_flight_most.store(0, Ordering::SeqCst);
    let checkpoint = spool.checkpoint("core").unwrap();
    assert!(checkpoint < RECORDS / 2, "stopped mid-way ({checkpoint})");
    drop(spool);

    // Again on the same journal: more records, and the rest of the old ones.
    let spool = Arc::new(Spool::open(dir.path(), &cores, SpoolOptions::default()).unwrap());
    assert_eq!(spool.epoch(), epoch, "the journal's life goes on");
    assert_eq!(spool.checkpoint("core"), Some(checkpoint));
    let stats = Arc::new(ForwardStats::default());
    let task = tokio::spawn(forward_loop(spool.clone(), config, stats.clone()));
    for i in RECORDS / 2..RECORDS {
        spool.append(record(i)).await.unwrap();
    }
    while spool.checkpoint("core") != Some(RECORDS) {
        assert!(
            Instant::now() < deadline,
            "checkpoint stuck at {:?}",
            spool.checkpoint("core")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();

    let applied = core.applied.lock().unwrap();
    for seq in 0..RECORDS {
        assert_eq!(applied.get(&(epoch, seq)), Some(&1), "record {seq}");
    }
    assert_eq!(applied.len() as u64, RECORDS);
    assert_eq!(core.samples.load(Ordering::SeqCst), 2 * RECORDS);
    let most = core.in_flight_most.load(Ordering::SeqCst);
    assert!(most <= IN_FLIGHT_MAX, "{most} in flight");
    assert!(most > 1, "sends overlap ({most})");
    assert!(
        core.duplicates.load(Ordering::SeqCst) > 0,
        "lost answers were resent"
    );
    assert!(stats.retries.load(Ordering::SeqCst) > 0);
    println!(
        "requests {}, duplicates {}, most in flight {most}",
        core.requests.load(Ordering::SeqCst),
        core.duplicates.load(Ordering::SeqCst)
    );
}
