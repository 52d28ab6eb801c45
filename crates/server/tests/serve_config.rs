//! Configuration: precedence flag > env > file > default, `off`, print-defaults parses back,
//! bad files named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use serve_common::{strata, Server};

fn show(args: &[&str], env: &[(&str, &str)]) -> toml::Table {
    let mut cmd = strata();
    cmd.arg("config").arg("show").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    toml::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap()
}

fn listener(table: &toml::Table, name: &str) -> String {
    table["listeners"][name].as_str().unwrap().to_owned()
}

#[test]
fn print_defaults_parses_back_with_every_section() {
    let out = strata()
        .args(["config", "print-defaults"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    for section in [
        "listeners",
        "store",
        "limits",
        "cardinality",
        "statsd",
        "collectd",
        "graphite",
        "auth",
        "http",
        "tls",
        "httptrap",
        "log",
    ] {
        assert!(table.contains_key(section), "section {section} missing");
    }
    assert_eq!(listener(&table, "http"), "127.0.0.1:8112");
    assert_eq!(listener(&table, "statsd"), "127.0.0.1:8125");
    assert_eq!(listener(&table, "graphite"), "127.0.0.1:2003");
    // collectd's port is taken only when asked for.
    assert_eq!(listener(&table, "collectd"), "off");
    assert_eq!(
        table["collectd"]["receive_buffer_bytes"].as_integer(),
        Some(8 << 20)
    );
    assert_eq!(table["store"]["data_dir"].as_str(), Some("./strata-data"));
    assert_eq!(
        table["limits"]["body_size_bytes_max"].as_integer(),
        Some(64 << 20)
    );
    // The commented keys are documented in the text.
    for key in ["token", "cert", "key", "secret"] {
        assert!(
            text.contains(&format!("# {key} = ")),
            "{key} not documented"
        );
    }
    // And the printed defaults, used as a config file, are what `show` prints with no file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("defaults.toml");
    std::fs::write(&path, &text).unwrap();
    assert_eq!(
        show(&["--config", path.to_str().unwrap()], &[]),
        show(&[], &[])
    );
}

#[test]
fn flags_beat_env_beat_file_beat_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strata.toml");
    std::fs::write(
        &path,
        "[listeners]\nhttp = \"127.0.0.1:1001\"\nstatsd = \"127.0.0.1:1002\"\ngraphite = \"127.0.0.1:1003\"\n\
         [store]\ndata_dir = \"/from/file\"\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    // File alone beats the defaults.
    let t = show(&["--config", file], &[]);
    assert_eq!(listener(&t, "http"), "127.0.0.1:1001");
    assert_eq!(t["store"]["data_dir"].as_str(), Some("/from/file"));
    // Env beats the file.
    let env = [
        ("STRATA_HTTP", "127.0.0.1:2001"),
        ("STRATA_STATSD", "127.0.0.1:2002"),
        ("STRATA_DATA_DIR", "/from/env"),
    ];
    let t = show(&["--config", file], &env);
    assert_eq!(listener(&t, "http"), "127.0.0.1:2001");
    assert_eq!(listener(&t, "statsd"), "127.0.0.1:2002");
    assert_eq!(listener(&t, "graphite"), "127.0.0.1:1003");
    assert_eq!(t["store"]["data_dir"].as_str(), Some("/from/env"));
    // Flags beat env.
    let t = show(
        &[
            "--config",
            file,
            "--http",
            "127.0.0.1:3001",
            "--data-dir",
            "/from/flag",
        ],
        &env,
    );
    assert_eq!(listener(&t, "http"), "127.0.0.1:3001");
    assert_eq!(listener(&t, "statsd"), "127.0.0.1:2002");
    assert_eq!(t["store"]["data_dir"].as_str(), Some("/from/flag"));
    // The config file itself may come from the environment.
    let t = show(&[], &[("STRATA_CONFIG", file)]);
    assert_eq!(listener(&t, "graphite"), "127.0.0.1:1003");
}

#[test]
fn bad_config_is_named_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[limits]\nbody_bytes = 5\n").unwrap();
    let out = strata()
        .args(["serve", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("body_bytes"), "{stderr}");
    let out = strata()
        .args(["serve", "--http", "localhost"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("listeners.http"));
}

#[test]
fn off_disables_a_listener_and_the_server_uses_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strata.toml");
    // The environment turns Graphite off over the file; a flag turns statsd off.
    std::fs::write(
        &path,
        "[listeners]\ngraphite = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with(
        &data,
        &[
            "--config",
            path.to_str().unwrap(),
            "--statsd",
            "off",
            "--http",
            "127.0.0.1:0",
        ],
        &[("STRATA_GRAPHITE", "off")],
    );
    assert!(server.line.contains("statsd=off"), "{}", server.line);
    assert!(server.line.contains("graphite=off"), "{}", server.line);
    assert!(server.http.is_some());
    let health = serve_common::get_json(&server.url("/health"));
    assert_eq!(health["status"], "ok");
    assert!(server.stop().success());
}
