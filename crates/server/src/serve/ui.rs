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
