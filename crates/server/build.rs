//! Builds the web UI (`ui/`, TypeScript + Vite) and generates the table that embeds `ui/dist`
//! into the `strata` binary, so `cargo build` / `cargo run -- serve` is the only step.
//!
//! `npm install --no-save && npm run build` runs only when the UI sources changed: a hash of
//! `ui/src`, `ui/public`, `ui/index.html` and the package/tool files is kept in
//! `ui/dist/.strata-src-hash` (and of the lock file in `ui/node_modules/.strata-lock-hash`), so
//! other target dirs and rebuilds reuse it.
//! Builds from several target dirs at once take turns through a lock directory.
//!
//! `STRATA_UI_SKIP_BUILD=1` embeds whatever `ui/dist` holds (a placeholder page when empty), for
//! machines without Node; without it a missing `npm` fails the build with the reason.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// Most files embedded from `ui/dist` (a Vite build makes a handful).
const UI_FILES_MAX: usize = 500;
/// Deepest directory nesting walked under `ui/`.
const WALK_DEPTH_MAX: usize = 8;
/// How long to wait for another build holding the lock before taking it over.
const LOCK_WAIT_S_MAX: u64 = 900;

/// Files (besides `src/**`) whose change means the UI must be rebuilt.
const TOOL_FILES: [&str; 5] = [
    "index.html",
    "package.json",
    "package-lock.json",
    "vite.config.ts",
    "tsconfig.json",
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let ui = manifest.join("../../ui");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    println!("cargo:rerun-if-env-changed=STRATA_UI_SKIP_BUILD");
    println!("cargo:rerun-if-changed={}", ui.join("src").display());
    println!("cargo:rerun-if-changed={}", ui.join("public").display());
    for f in TOOL_FILES {
        println!("cargo:rerun-if-changed={}", ui.join(f).display());
    }
    let skip = std::env::var("STRATA_UI_SKIP_BUILD").is_ok_and(|v| v == "1");
    if ui.join("package.json").exists() && !skip {
        build_ui(&ui);
    }
    let dist = ui.join("dist");
    println!(
        "cargo:rerun-if-changed={}",
        dist.join(".strata-src-hash").display()
    );
    let mut files = Vec::new();
    if dist.is_dir() {
        walk(&dist, &dist, 0, &mut files);
    }
    files.sort();
    let mut code = String::from("/// `ui/dist`, embedded by build.rs: (path, bytes).\n");
    code.push_str("pub static ASSETS: &[(&str, &[u8])] = &[\n");
    if files.iter().all(|(rel, _)| rel != "index.html") {
        let placeholder = out.join("placeholder.html");
        let text = "<!doctype html><title>Strata</title><p>The web UI was not built \
                    (STRATA_UI_SKIP_BUILD=1 and no ui/dist). Build with npm installed.</p>";
        if let Err(e) = fs::write(&placeholder, text) {
            panic!("writing {}: {e}", placeholder.display());
        }
        files.push(("index.html".into(), placeholder));
    }
    for (rel, abs) in &files {
        println!("cargo:rerun-if-changed={}", abs.display());
        let _ = writeln!(
            code,
            "    ({rel:?}, include_bytes!({:?})),",
            abs.display().to_string()
        );
    }
    code.push_str("];\n");
    if let Err(e) = fs::write(out.join("ui_assets.rs"), code) {
        panic!("writing {}: {e}", out.join("ui_assets.rs").display());
    }
}

/// Files under `dir` as (path relative to `root` with `/`, absolute path); dot files skipped.
fn walk(root: &Path, dir: &Path, depth: usize, files: &mut Vec<(String, PathBuf)>) {
    assert!(
        depth <= WALK_DEPTH_MAX,
        "ui/dist nests deeper than {WALK_DEPTH_MAX} levels"
    );
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => panic!("reading {}: {e}", dir.display()),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, depth + 1, files);
        } else {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let rel = rel.to_string_lossy().replace('\\', "/");
            let abs = fs::canonicalize(&path).unwrap_or(path);
            files.push((rel, abs));
            assert!(
                files.len() <= UI_FILES_MAX,
                "ui/dist holds more than {UI_FILES_MAX} files"
            );
        }
    }
}

/// FNV-1a over bytes: a stable hash (std's hasher may change between Rust versions).
fn fnv(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash ^= u64::from(b);
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

fn hash_sources(ui: &Path) -> String {
    let mut files = Vec::new();
    walk(&ui.join("src"), &ui.join("src"), 0, &mut files);
    if ui.join("public").is_dir() {
        walk(&ui.join("public"), &ui.join("public"), 0, &mut files);
    }
    for f in TOOL_FILES {
        if ui.join(f).exists() {
            files.push((f.to_string(), ui.join(f)));
        }
    }
    files.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for (rel, abs) in &files {
        fnv(&mut hash, rel.as_bytes());
        fnv(&mut hash, &fs::read(abs).unwrap_or_default());
    }
    format!("{hash:016x}")
}

fn build_ui(ui: &Path) {
    let wanted = hash_sources(ui);
    let stamp = ui.join("dist/.strata-src-hash");
    let fresh = |stamp: &Path| {
        fs::read_to_string(stamp).is_ok_and(|h| h.trim() == wanted)
            && ui.join("dist/index.html").exists()
    };
    if fresh(&stamp) {
        return;
    }
    let lock = ui.join(".build-lock");
    take_lock(&lock);
    // Another build may have finished while this one waited.
    let result = if fresh(&stamp) {
        Ok(())
    } else {
        run_npm(ui, &wanted, &stamp)
    };
    let _ = fs::remove_dir(&lock);
    if let Err(message) = result {
        panic!("{message}");
    }
}

fn take_lock(lock: &Path) {
    let start = SystemTime::now();
    loop {
        if fs::create_dir(lock).is_ok() {
            return;
        }
        let age_s = fs::metadata(lock)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .map_or(0, |d| d.as_secs());
        let waited_s = start.elapsed().map_or(0, |d| d.as_secs());
        if age_s > LOCK_WAIT_S_MAX || waited_s > LOCK_WAIT_S_MAX {
            // A build that died left its lock behind.
            let _ = fs::remove_dir(lock);
            continue;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn npm(ui: &Path, args: &[&str]) -> Result<(), String> {
    let status = Command::new("npm").args(args).current_dir(ui).status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!(
            "building the web UI: `npm {}` in {} failed ({s}); see its output above",
            args.join(" "),
            ui.display()
        )),
        Err(e) => Err(format!(
            "building the web UI needs Node.js 20+ and npm on PATH (`npm` could not be run: {e}). \
             Install them, or set STRATA_UI_SKIP_BUILD=1 to embed a placeholder page instead."
        )),
    }
}

fn run_npm(ui: &Path, wanted: &str, stamp: &Path) -> Result<(), String> {
    let lock_hash = {
        let mut h = 0xcbf2_9ce4_8422_2325_u64;
        fnv(
            &mut h,
            &fs::read(ui.join("package-lock.json")).unwrap_or_default(),
        );
        format!("{h:016x}")
    };
    let installed = ui.join("node_modules/.strata-lock-hash");
    let up_to_date = fs::read_to_string(&installed).is_ok_and(|h| h.trim() == lock_hash);
    if !up_to_date {
        // `npm install` rather than `npm ci`: the npm 11 here writes lock files without the
        // other platforms' optional packages (rollup's native binaries), which `npm ci` rejects
        // as "out of sync"; `install` follows the lock where it is complete. `--no-save`: it
        // would otherwise rewrite the lock file for this platform, leaving a fresh clone with a
        // change the user never made.
        npm(ui, &["install", "--no-save", "--no-audit", "--no-fund"])?;
        fs::write(&installed, &lock_hash).map_err(|e| format!("{}: {e}", installed.display()))?;
    }
    npm(ui, &["run", "build"])?;
    fs::write(stamp, wanted).map_err(|e| format!("{}: {e}", stamp.display()))
}
