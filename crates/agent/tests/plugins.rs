//! The NAD plugin protocol with real shell and Python plugins: good tab-separated and JSON
//! output (histograms included), a hung plugin (killed at its timeout), a crashing one, garbage
//! lines, and a long-running plugin printing sets separated by blank lines. None of them stops
//! the others; each failure is a counted `plugin_*` sample.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use agent::collect::Out;
use agent::plugins::Plugins;
use broker::record::{Sample, Value};

fn script(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn get<'a>(samples: &'a [Sample], name: &str, plugin: &str) -> Option<&'a Value> {
    samples
        .iter()
        .find(|s| s.name == name && s.tags.iter().any(|(c, v)| c == "plugin" && v == plugin))
        .map(|s| &s.value)
}

fn num(samples: &[Sample], name: &str, plugin: &str) -> f64 {
    match get(samples, name, plugin) {
        Some(Value::Numeric(v)) => *v,
        other => panic!("{name} of {plugin}: {other:?}"),
    }
}

fn period(plugins: &Plugins, rt: &tokio::runtime::Runtime) -> Vec<Sample> {
    rt.block_on(async {
        plugins.start_runs();
        // The plugins' timeout is half the period (2 s): every one-shot run is over by then.
        tokio::time::sleep(Duration::from_millis(2_800)).await;
    });
    let mut out = Out {
        ts_ms: 1_000,
        samples: Vec::new(),
    };
    plugins.emit("h1", &mut out);
    out.samples
}

#[test]
fn good_hung_crashing_garbage_and_long_running_plugins() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    script(
        d,
        "good.sh",
        "#!/bin/sh\nprintf 'requests\\tL\\t42\\nversion\\ts\\tv1.2\\nratio\\tn\\t0.25\\n'\n",
    );
    script(
        d,
        "goodjson.py",
        "#!/usr/bin/python3\nimport json\nprint(json.dumps({\"lat\": {\"_type\": \"h\", \
         \"_value\": [\"H[1.0e-02]=3\", \"H[2.0e-02]=1\"]}, \"queue|ST[q:a]\": 7}))\n",
    );
    script(
        d,
        "hung.sh",
        "#!/bin/sh\necho 'early\tL\t1'\nexec sleep 60\n",
    );
    script(
        d,
        "crash.py",
        "#!/usr/bin/python3\nprint('before\\tL\\t1')\nraise SystemExit(3)\n",
    );
    script(d, "killed.sh", "#!/bin/sh\nkill -SEGV $$\n");
    script(
        d,
        "garbage.sh",
        "#!/bin/sh\necho 'this is not a metric'\necho 'x\\tq\\t1'\n\
         head -c 100000 /dev/zero | tr '\\0' a; echo\nprintf '\\377\\376\\n'\n\
         printf 'fine\\tL\\t5\\n'\n",
    );
    script(
        d,
        "stream.py",
        "#!/usr/bin/python3\nimport sys, time\nn = 0\nwhile True:\n    n += 1\n    \
         print('ticks\\tL\\t%d' % n)\n    print()\n    sys.stdout.flush()\n    time.sleep(0.2)\n",
    );
    std::fs::write(d.join("notes.txt"), "not executable").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let plugins = Plugins::new(
        Some(d.to_path_buf()),
        Duration::from_secs(4),
        Default::default(),
    );
    let first = period(&plugins, &rt);

    assert_eq!(get(&first, "requests", "good"), Some(&Value::Numeric(42.0)));
    assert_eq!(
        get(&first, "version", "good"),
        Some(&Value::Text("v1.2".into()))
    );
    assert_eq!(num(&first, "plugin_ok", "good"), 1.0);
    let Some(Value::Histogram(h)) = get(&first, "lat", "goodjson") else {
        panic!("no histogram")
    };
    assert_eq!(h.sample_count(), 4);
    let queue = first.iter().find(|s| s.name == "queue").unwrap();
    assert!(queue.tags.contains(&("q".into(), "a".into())));
    assert!(queue.tags.contains(&("host".into(), "h1".into())));

    assert_eq!(num(&first, "plugin_timeouts_total", "hung"), 1.0);
    assert_eq!(num(&first, "plugin_ok", "hung"), 0.0);
    assert!(
        get(&first, "early", "hung").is_none(),
        "a killed run's partial output is not kept"
    );

    assert_eq!(num(&first, "plugin_failures_total", "crash"), 1.0);
    assert_eq!(num(&first, "plugin_ok", "crash"), 0.0);
    assert_eq!(num(&first, "plugin_failures_total", "killed"), 1.0);

    // Two lines that are not metrics, one of 100,000 bytes, one not UTF-8.
    assert_eq!(num(&first, "plugin_garbage_lines_total", "garbage"), 4.0);
    assert_eq!(get(&first, "fine", "garbage"), Some(&Value::Numeric(5.0)));

    assert_eq!(num(&first, "plugin_long_running", "stream"), 1.0);
    let ticks = num(&first, "ticks", "stream");
    assert!(ticks >= 1.0);
    assert!(first
        .iter()
        .all(|s| !s.tags.iter().any(|(_, v)| v == "notes")));

    // The next period: one-shot plugins run again, the long-running one is not started twice
    // and its newest set replaced the old.
    let second = period(&plugins, &rt);
    assert_eq!(num(&second, "plugin_runs_total", "good"), 2.0);
    assert_eq!(num(&second, "plugin_timeouts_total", "hung"), 2.0);
    assert_eq!(num(&second, "plugin_failures_total", "crash"), 2.0);
    assert!(num(&second, "ticks", "stream") > ticks);
    assert_eq!(num(&second, "plugin_failures_total", "stream"), 0.0);
    let ps = std::process::Command::new("pgrep")
        .args(["-fc", &d.join("stream.py").display().to_string()])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ps.stdout).trim(),
        "1",
        "one long-running process"
    );
    drop(_guard);
    drop(rt);
}

#[test]
fn plugins_keep_their_own_interval_and_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    script(d, "every.sh", "#!/bin/sh\nprintf 'x\\tL\\t1\\n'\n");
    script(d, "sparse.sh", "#!/bin/sh\nprintf 'y\\tL\\t2\\n'\n");
    // Slower than the default timeout (half the 1 s period), inside its own 3 s.
    script(
        d,
        "patient.sh",
        "#!/bin/sh\nsleep 1.2\nprintf 'z\\tL\\t3\\n'\n",
    );
    let config = agent::config::Config::parse(
        "host_id = \"h1\"\nstate_dir = \"/tmp\"\nmode = \"pull\"\n\
         [plugin.sparse]\ninterval_s = 3\n\
         [plugin.patient]\ninterval_s = 4\ntimeout_s = 3\n",
    )
    .unwrap();
    let plugins = Plugins::new(
        Some(d.to_path_buf()),
        Duration::from_secs(1),
        config.plugins,
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for _ in 0..6 {
            plugins.start_runs();
            tokio::time::sleep(Duration::from_millis(1_000)).await;
        }
        // The last patient run (started at the fifth tick) ends within its timeout.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    });
    let mut out = Out {
        ts_ms: 1_000,
        samples: Vec::new(),
    };
    plugins.emit("h1", &mut out);
    let s = out.samples;
    // Ticks are sleeps: on a loaded machine one may come late, so the counts allow one run
    // more or less than the ideal (every tick; ticks 0 and 3), never the default schedule.
    assert!(num(&s, "plugin_runs_total", "every") >= 5.0);
    let sparse = num(&s, "plugin_runs_total", "sparse");
    assert!(
        (2.0..=3.0).contains(&sparse),
        "sparse ran {sparse} times in 6 ticks"
    );
    assert_eq!(
        num(&s, "plugin_runs_total", "patient"),
        2.0,
        "ticks 0 and 4"
    );
    assert_eq!(num(&s, "plugin_timeouts_total", "patient"), 0.0);
    assert_eq!(num(&s, "z", "patient"), 3.0);
    // Samples of a plugin that did not run this period are its latest set's.
    assert_eq!(num(&s, "y", "sparse"), 2.0);
}

#[test]
fn plugin_schedules_are_checked() {
    let base = "host_id = \"h1\"\nstate_dir = \"/tmp\"\nmode = \"pull\"\n";
    let parse = |extra: &str| agent::config::Config::parse(&format!("{base}{extra}"));
    let err = parse("[plugin.a]\ninterval_s = 0\n").unwrap_err();
    assert!(err.contains("plugin.a.interval_s"), "{err}");
    let err = parse("[plugin.a]\ninterval_s = 10\ntimeout_s = 11\n").unwrap_err();
    assert!(
        err.contains("plugin.a.timeout_s") && err.contains("1 to 10"),
        "{err}"
    );
    let err = parse("[plugin.a]\nevery = 10\n").unwrap_err();
    assert!(err.contains("every"), "{err}");
}
