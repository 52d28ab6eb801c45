//! The clock's promises, checked on the real machine: `now()` never steps back across threads
//! on different CPUs, `wall()` stays within its documented bound, and every source can be forced
//! by configuration (`Config` and the `STRATA_CLOCK` environment variable).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clock::{check, Choice, Clock, Config, Reason, Source, WALL_ERROR_NS_MAX};

/// The bar the clock must clear: 10 M reads across two threads, which swap CPUs every 100 k reads.
const READS_TOTAL: u64 = 10_000_000;
const BOUNCE_EVERY: u64 = 100_000;

/// Set in the child processes of `strata_clock_env_forces_the_global_source`.
const EXPECT_VAR: &str = "STRATA_CLOCK_TEST_EXPECT_REASON";

fn forced(choice: Choice) -> Clock {
    Clock::new(Config { source: choice })
}

fn assert_monotonic_across_cpus(clock: Clock, reads_total: u64) {
    let result = check::cross_thread(|| clock.now(), reads_total, BOUNCE_EVERY);
    assert_eq!(result.reads, reads_total);
    assert_eq!(
        result.backwards, 0,
        "now() stepped back: {result:?} ({clock:?})"
    );
    let cpu_count = check::allowed_cpus().map_or(0, |cpus| cpus.len());
    if cpu_count >= 2 {
        // Each thread pins itself once per BOUNCE_EVERY reads.
        assert_eq!(result.bounces, reads_total / BOUNCE_EVERY, "{result:?}");
        assert!(result.cpus.len() >= 2);
    }
}

#[test]
fn now_never_steps_back_across_threads_bouncing_between_cpus() {
    assert_monotonic_across_cpus(Clock::global(), READS_TOTAL);
}

#[test]
fn forced_tsc_never_steps_back_across_cpus() {
    assert_monotonic_across_cpus(forced(Choice::Tsc), READS_TOTAL / 5);
}

#[test]
fn forced_os_never_steps_back_across_cpus() {
    assert_monotonic_across_cpus(forced(Choice::Os), READS_TOTAL / 5);
}

#[test]
fn forced_os_uses_the_os_clock() {
    let clock = forced(Choice::Os);
    assert_eq!(clock.source(), Source::Os);
    assert_eq!(clock.reason(), Reason::OsForced);
    let start = clock.raw();
    let end = clock.raw();
    assert!(clock.delta_ns(start, end) < 1_000_000_000);
}

#[test]
fn forced_tsc_uses_the_tsc_whenever_the_cpu_has_an_invariant_one() {
    let clock = forced(Choice::Tsc);
    match clock.reason() {
        Reason::TscForced { .. } => assert_eq!(clock.source(), Source::Tsc),
        Reason::NoInvariantTsc | Reason::NotX86_64 => assert_eq!(clock.source(), Source::Os),
        other => panic!("forced tsc gave {other:?}"),
    }
}

#[test]
fn auto_uses_the_tsc_only_when_the_kernel_does() {
    let clock = forced(Choice::Auto);
    let kernel =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    let kernel_uses_tsc = kernel.map(|name| name.trim() == "tsc").unwrap_or(false);
    if clock.source() == Source::Tsc {
        assert!(kernel_uses_tsc);
        assert_eq!(clock.reason(), Reason::TscSafe);
    } else {
        assert_ne!(clock.reason(), Reason::TscSafe);
    }
}

fn system_time_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn assert_wall_within_bound(clock: Clock) {
    for _ in 0..10_000 {
        let before_ns = system_time_ns();
        let wall_ns = clock.wall();
        let after_ns = system_time_ns();
        assert!(
            wall_ns + WALL_ERROR_NS_MAX >= before_ns && wall_ns <= after_ns + WALL_ERROR_NS_MAX,
            "wall {wall_ns} outside [{before_ns}, {after_ns}] ± {WALL_ERROR_NS_MAX} ({clock:?})"
        );
    }
}

#[test]
fn wall_is_within_its_bound_of_system_time() {
    assert_wall_within_bound(Clock::global());
    assert_wall_within_bound(forced(Choice::Tsc));
    assert_wall_within_bound(forced(Choice::Os));
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) },
        0
    );
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn now_tracks_clock_monotonic() {
    for clock in [Clock::global(), forced(Choice::Tsc), forced(Choice::Os)] {
        for _ in 0..1_000 {
            let before_ns = monotonic_ns();
            let now_ns = clock.now();
            let after_ns = monotonic_ns();
            let bound_ns = clock::TRACKING_ERROR_NS_MAX;
            assert!(
                now_ns + bound_ns >= before_ns && now_ns <= after_ns + bound_ns,
                "now {now_ns} outside [{before_ns}, {after_ns}] ± {bound_ns} ({clock:?})"
            );
        }
    }
}

#[test]
fn raw_intervals_agree_with_the_os_clock() {
    for clock in [Clock::global(), forced(Choice::Os)] {
        let os_start = Instant::now();
        let start = clock.raw();
        std::thread::sleep(Duration::from_millis(20));
        let end = clock.raw();
        let os_ns = os_start.elapsed().as_nanos() as u64;
        let raw_ns = clock.delta_ns(start, end);
        // The raw interval lies inside the OS one; calibration error is ppm, so 1% is loose.
        assert!(raw_ns >= 20_000_000 * 99 / 100, "{raw_ns} ns ({clock:?})");
        assert!(
            raw_ns <= os_ns + os_ns / 100,
            "{raw_ns} ns > {os_ns} ns ({clock:?})"
        );
        assert_eq!(clock.delta_ns(end, start), 0);
    }
}

#[test]
fn stopwatch_measures_at_least_the_time_slept() {
    let stopwatch = clock::Stopwatch::start();
    std::thread::sleep(Duration::from_millis(5));
    // Calibration error is ppm: 1% is loose.
    assert!(stopwatch.elapsed_ns() >= 5_000_000 * 99 / 100);
}

#[test]
fn free_functions_use_the_global_clock() {
    let start = clock::raw();
    let first_ns = clock::now();
    let second_ns = clock::now();
    let end = clock::raw();
    assert!(second_ns >= first_ns);
    assert!(clock::delta_ns(start, end) < 1_000_000_000);
    assert!(
        clock::wall() > 1_600_000_000_000_000_000,
        "after September 2020"
    );
    assert_eq!(clock::init(Config::default()), Err(clock::AlreadyStarted));
}

/// The first words of a reason's Debug form: its variant name.
fn variant(reason: &Reason) -> String {
    let debug = format!("{reason:?}");
    debug
        .split([' ', '(', '{'])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Checks the global clock's source against its reason; in the child processes started by
/// `strata_clock_env_forces_the_global_source`, also that the reason is the expected one.
#[test]
fn global_source_matches_its_reason() {
    let clock = Clock::global();
    let reason = clock.reason();
    let tsc = matches!(reason, Reason::TscSafe | Reason::TscForced { .. });
    assert_eq!(clock.source() == Source::Tsc, tsc, "{reason:?}");
    if let Ok(expected) = std::env::var(EXPECT_VAR) {
        assert_eq!(variant(&reason), expected);
    }
}

#[test]
fn strata_clock_env_forces_the_global_source() {
    let forced_tsc = variant(&forced(Choice::Tsc).reason());
    let cases = [
        ("os", "OsForced"),
        ("OS", "OsForced"),
        ("tsc", &forced_tsc),
        ("fast", "InvalidConfig"),
    ];
    for (value, expected) in cases {
        let output = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "global_source_matches_its_reason",
                "--test-threads=1",
            ])
            .env(clock::ENV_VAR, value)
            .env(EXPECT_VAR, expected)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{}={value}: {stdout}",
            clock::ENV_VAR
        );
        assert!(
            stdout.contains("1 passed"),
            "{}={value}: {stdout}",
            clock::ENV_VAR
        );
    }
}
