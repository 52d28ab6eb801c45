//! The web UI at `/`: the files of `ui/dist`, embedded into the binary by build.rs, and the APIs
//! only it uses: worksheets, dashboards and the landing page's overview.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::{overview, saved, Shared};

mod assets {
    include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));
}

/// The UI's routes (static files, worksheets, dashboards, the overview), merged into the main
/// router.
pub fn router(app: Shared) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/favicon.ico", get(|| async { file("favicon.ico") }))
        .route("/favicon.svg", get(|| async { file("favicon.svg") }))
        .route("/assets/{*path}", get(asset))
        .route("/api/strata/v1/overview", get(overview::overview))
        .with_state(app.clone())
        .merge(saved::router(&app, &saved::WORKSHEETS))
        .merge(saved::router(&app, &saved::DASHBOARDS))
        .merge(saved::router(&app, &saved::CHECKS))
}

/// The UI's static files, served without a token (they hold no data).
pub fn is_public(path: &str) -> bool {
    matches!(path, "/" | "/index.html" | "/favicon.ico" | "/favicon.svg")
        || path.starts_with("/assets/")
}

async fn index() -> Response {
    file("index.html")
}

async fn asset(Path(path): Path<String>) -> Response {
    file(&format!("assets/{path}"))
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map_or("", |(_, ext)| ext) {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" | "map" => "application/json",
        "woff2" => "font/woff2",
        "ico" => "image/x-icon",
        _ => "application/octet-stream",
    }
}

/// Scripts, connections and images from this server only; styles may be set inline by the
/// charts; no framing by any page.
const UI_CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src \
     'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'self'";

fn file(path: &str) -> Response {
    let Some((_, bytes)) = assets::ASSETS.iter().find(|(p, _)| *p == path) else {
        return super::reply::error(StatusCode::NOT_FOUND, format!("no UI file `{path}`"));
    };
    // Asset names are stable (see ui/vite.config.ts), so browsers revalidate everything; the
    // files are small (≈ 85 kB) and served from memory.
    let cache = "no-cache";
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(content_type(path)),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
            // The UI loads only its own files and talks only to this server; no other site may
            // frame it (clickjacking) or have its responses sniffed as another type.
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(UI_CONTENT_SECURITY_POLICY),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        *bytes,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_embedded_and_types_follow_extensions() {
        assert!(assets::ASSETS
            .iter()
            .any(|(p, b)| *p == "index.html" && !b.is_empty()));
        assert_eq!(
            content_type("assets/x-1a2b.js"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type("assets/x.css"), "text/css; charset=utf-8");
        assert_eq!(content_type("noext"), "application/octet-stream");
        assert_eq!(file("assets/none.js").status(), StatusCode::NOT_FOUND);
    }
}
