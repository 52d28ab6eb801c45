//! `postgres`: what a one-step Postgres plugin collects — connections and their limit,
//! transactions, scans, tuples, locks by mode, replication lag, database sizes — read in one
//! round trip, and a timed query (default `SELECT 1`) recorded as a latency histogram.

use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;
use tokio_postgres::{NoTls, SimpleQueryMessage, SimpleQueryRow};

use crate::error::CheckError;
use crate::measure::{Out, Value};
use crate::spec::{self, CheckSpec};

/// Databases reported per run (`pg_stat_database` rows); the statement says `LIMIT` so a
/// server with thousands cannot make a run unbounded.
pub const DATABASES_MAX: usize = 256;
/// Replicas reported per run.
pub const REPLICAS_MAX: usize = 64;
/// Rows the timed query may return before the rest are read and dropped uncounted.
pub const QUERY_ROWS_MAX: usize = 10_000;
/// Longest `query` option.
pub const QUERY_BYTES_MAX: usize = 16 << 10;

/// The statistics, in one simple-query message: one round trip, one implicit transaction.
/// Every statement's row shape is fixed; `report` reads them in this order.
const STATS: &str = "\
SELECT count(*), count(*) FILTER (WHERE state = 'active'), \
 current_setting('max_connections')::bigint, current_setting('server_version'), \
 pg_is_in_recovery()::int, current_database() \
 FROM pg_stat_activity WHERE backend_type = 'client backend';
SELECT datname, numbackends, xact_commit, xact_rollback, blks_read, blks_hit, tup_returned, \
 tup_fetched, tup_inserted, tup_updated, tup_deleted, deadlocks, \
 CASE WHEN has_database_privilege(datname, 'CONNECT') THEN pg_database_size(datid) END \
 FROM pg_stat_database WHERE datname IS NOT NULL ORDER BY datname LIMIT 256;
SELECT coalesce(sum(seq_scan), 0), coalesce(sum(idx_scan), 0), coalesce(sum(seq_tup_read), 0), \
 coalesce(sum(idx_tup_fetch), 0) FROM pg_stat_user_tables;
SELECT mode, count(*) FROM pg_locks GROUP BY mode ORDER BY mode LIMIT 32;
SELECT extract(epoch FROM now() - pg_last_xact_replay_timestamp()), \
 pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn());
SELECT coalesce(application_name, ''), extract(epoch FROM replay_lag), \
 CASE WHEN pg_is_in_recovery() THEN NULL \
 ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) END \
 FROM pg_stat_replication ORDER BY 1 LIMIT 64";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    user: Option<String>,
    password: Option<String>,
    dbname: Option<String>,
    /// The timed query (default `SELECT 1`).
    query: Option<String>,
}

pub(crate) struct Config {
    pg: tokio_postgres::Config,
    query: String,
}

pub(crate) fn config(spec: &CheckSpec) -> Result<Config, CheckError> {
    let o: Options = spec::options(spec)?;
    let mut pg = tokio_postgres::Config::new();
    // A socket directory (`/run/postgresql`) or host:port.
    if spec.target.starts_with('/') {
        pg.host(&spec.target);
    } else {
        let (host, port) = spec::host_port(&spec.target, Some(5432))?;
        pg.host(&host).port(port);
    }
    pg.user(o.user.as_deref().unwrap_or("postgres"))
        .dbname(o.dbname.as_deref().unwrap_or("postgres"))
        .application_name("strata-check");
    if let Some(p) = &o.password {
        pg.password(p);
    }
    let query = o.query.unwrap_or_else(|| "SELECT 1".to_owned());
    if query.trim().is_empty() || query.len() > QUERY_BYTES_MAX {
        return Err(CheckError::field(
            "config.query",
            format!("a statement of 1 to {QUERY_BYTES_MAX} bytes"),
        ));
    }
    Ok(Config { pg, query })
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let started = Instant::now();
    let (client, connection) = match c.pg.connect(NoTls).await {
        Ok(pair) => pair,
        Err(e) => {
            out.fail(reason(&e));
            return Ok(());
        }
    };
    out.seconds("connect_time", started.elapsed());
    // The connection task moves the protocol's bytes; it ends when the client is dropped.
    let task = tokio::spawn(connection);
    let result = session(c, &client, out).await;
    drop(client);
    task.abort();
    match result {
        Ok(()) => out.ok(),
        Err(status) => out.fail(status),
    }
    Ok(())
}

async fn session(c: &Config, client: &tokio_postgres::Client, out: &mut Out) -> Result<(), String> {
    let stats = client
        .simple_query(STATS)
        .await
        .map_err(|e| format!("statistics query failed: {}", reason(&e)))?;
    report(&statements(&stats), out);
    let started = Instant::now();
    let rows = client
        .simple_query(&c.query)
        .await
        .map_err(|e| format!("query failed: {}", reason(&e)))?;
    let elapsed: Duration = started.elapsed();
    out.seconds("query_time", elapsed);
    let returned = rows
        .iter()
        .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
        .count();
    out.numeric("query_rows", returned.min(QUERY_ROWS_MAX) as f64);
    Ok(())
}

/// The rows of each statement, in order.
fn statements(messages: &[SimpleQueryMessage]) -> Vec<Vec<&SimpleQueryRow>> {
    let mut all = vec![Vec::new()];
    for m in messages {
        match m {
            SimpleQueryMessage::Row(r) => {
                if let Some(last) = all.last_mut() {
                    last.push(r);
                }
            }
            SimpleQueryMessage::CommandComplete(_) => all.push(Vec::new()),
            _ => {}
        }
    }
    all
}

fn report(s: &[Vec<&SimpleQueryRow>], out: &mut Out) {
    let empty = Vec::new();
    let at = |i: usize| s.get(i).unwrap_or(&empty);
    let database = at(0)
        .first()
        .and_then(|r| r.get(5))
        .unwrap_or("")
        .to_owned();
    if let Some(r) = at(0).first() {
        numeric(out, "connections", r.get(0), &[]);
        numeric(out, "connections_active", r.get(1), &[]);
        numeric(out, "max_connections", r.get(2), &[]);
        if let Some(v) = r.get(3) {
            out.text("server_version", v);
        }
        numeric(out, "is_replica", r.get(4), &[]);
    }
    databases(at(1), out);
    if let Some(r) = at(2).first() {
        let tags = [("database", database.as_str())];
        for (i, name) in ["seq_scan", "idx_scan", "seq_tup_read", "idx_tup_fetch"]
            .iter()
            .enumerate()
        {
            numeric(out, name, r.get(i), &tags);
        }
    }
    for r in at(3) {
        numeric(out, "locks", r.get(1), &[("mode", r.get(0).unwrap_or(""))]);
    }
    if let Some(r) = at(4).first() {
        // NULL on a primary (nothing replayed): no lag to report.
        numeric(out, "replication_lag", r.get(0), &[]);
        numeric(out, "replication_lag_bytes", r.get(1), &[]);
    }
    out.numeric("replicas", at(5).len() as f64);
    for r in at(5).iter().take(REPLICAS_MAX) {
        let tags = [("replica", r.get(0).unwrap_or(""))];
        numeric(out, "replica_lag", r.get(1), &tags);
        numeric(out, "replica_lag_bytes", r.get(2), &tags);
    }
}

const DATABASE_COLUMNS: [&str; 12] = [
    "backends",
    "xact_commit",
    "xact_rollback",
    "blks_read",
    "blks_hit",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "deadlocks",
    "database_size",
];

fn databases(rows: &[&SimpleQueryRow], out: &mut Out) {
    for r in rows.iter().take(DATABASES_MAX) {
        let name = r.get(0).unwrap_or("");
        for (i, column) in DATABASE_COLUMNS.iter().enumerate() {
            numeric(out, column, r.get(i + 1), &[("database", name)]);
        }
    }
}

/// A text cell as a numeric, if it is a number (NULL and text are skipped).
fn numeric(out: &mut Out, name: &str, cell: Option<&str>, tags: &[(&str, &str)]) {
    let Some(v) = cell
        .and_then(|c| c.parse::<f64>().ok())
        .filter(|v| v.is_finite())
    else {
        return;
    };
    let tags = tags
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    out.push(name, tags, Value::Numeric(v));
}

/// A client error as a status: the server's own message, or the socket error.
fn reason(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return crate::error::io_reason(io);
        }
        source = cause.source();
    }
    e.to_string()
}
