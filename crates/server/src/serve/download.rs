//! What a host needs to install the agent from this core: `GET /install.sh` (the POSIX script,
//! `crates/install/src/install.sh`), `GET /download/strata` (the binary this server runs, with
//! its SHA-256 in `x-strata-sha256`) and `GET /download/strata.sha256` (`<hex>  strata`, the
//! format `sha256sum -c` reads). They need no token: they hold nothing secret, and the host
//! fetching them has no token on its command line to send.

use std::io::Read;
use std::sync::OnceLock;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::reply::error;

/// Paths served without a token.
pub const PUBLIC_PATHS: [&str; 3] = ["/install.sh", "/download/strata", "/download/strata.sha256"];
/// The running binary, even when the file it was started from has been replaced since.
const SELF_EXE: &str = "/proc/self/exe";
/// Largest binary served, in bytes.
const BINARY_BYTES_MAX: u64 = 1 << 30;
/// Downloads of the binary at once (each holds the whole binary in memory while it is sent).
const DOWNLOADS_MAX: usize = 2;

static DOWNLOADS: Semaphore = Semaphore::const_new(DOWNLOADS_MAX);
/// The binary's SHA-256 in hex, computed once.
static DIGEST: OnceLock<String> = OnceLock::new();

pub fn router() -> Router {
    Router::new()
        .route("/install.sh", get(install_sh))
        .route("/download/strata", get(binary))
        .route("/download/strata.sha256", get(digest))
}

async fn install_sh() -> Response {
    (
        [(header::CONTENT_TYPE, "text/x-shellscript; charset=utf-8")],
        install::INSTALL_SH,
    )
        .into_response()
}

fn read_self() -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(SELF_EXE).map_err(|e| format!("reading the binary: {e}"))?;
    let mut bytes = Vec::new();
    f.take(BINARY_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the binary: {e}"))?;
    if bytes.len() as u64 > BINARY_BYTES_MAX {
        return Err(format!(
            "the binary is larger than {BINARY_BYTES_MAX} bytes"
        ));
    }
    Ok(bytes)
}

fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The binary and its digest (the digest cached after the first read).
async fn load() -> Result<(Vec<u8>, String), Response> {
    let read = tokio::task::spawn_blocking(|| {
        let bytes = read_self()?;
        let digest = DIGEST.get_or_init(|| hex_digest(&bytes)).clone();
        Ok::<_, String>((bytes, digest))
    })
    .await;
    match read {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e)),
        Err(e) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("task: {e}"),
        )),
    }
}

async fn binary() -> Response {
    let Ok(_permit) = DOWNLOADS.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    let (bytes, digest) = match load().await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let mut r = Body::from(Bytes::from(bytes)).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(&digest) {
        h.insert("x-strata-sha256", v);
    }
    r
}

async fn digest() -> Response {
    let digest = match DIGEST.get() {
        Some(d) => d.clone(),
        None => {
            let Ok(_permit) = DOWNLOADS.acquire().await else {
                return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
            };
            match load().await {
                Ok((_, d)) => d,
                Err(r) => return r,
            }
        }
    };
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{digest}  strata\n"),
    )
        .into_response()
}
