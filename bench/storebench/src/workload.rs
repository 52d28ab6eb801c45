//! Deterministic, seeded workloads for the store benchmark (the shapes of its targets).
//!
//! - [`Shape::NumericInt`] / [`Shape::NumericFloat`]: the TSBS `cpu-only` shape — hosts with 10
//!   `cpu` metrics each (`usage_user`, …) and the TSBS host tags, one sample per series every
//!   10 s. Each series is a random walk with N(0, 1) steps clamped to 0–100; the integer shape
//!   submits the walk truncated to an integer, the float shape at full precision.
//! - [`Shape::Histogram`]: one sample per series every 10 s, each 100 lognormal observations
//!   (μ = −3, σ = 1.6: ≈75 populated bins).
//! - [`Shape::Churn`]: series that live for 6 samples each; every generation of
//!   [`CHURN_GENERATION_SERIES`] series is new (new hosts).
//!
//! Samples come out time-major (every series' sample for one timestamp, then the next
//! timestamp), the order a scraper or an agent fleet produces them; `run_samples` > 1 gives
//! each series that many consecutive timestamps at a time instead. A workload is streamed in
//! chunks so that it never has to be held in memory; the benchmark times chunk generation
//! separately and leaves it out of the store's figures.

use hist::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, StandardNormal};
use store::key::{StreamKey, Tag};

/// Sample interval of every shape.
pub const INTERVAL_MS: i64 = 10_000;
/// First timestamp of [`Config::issue`] (a multiple of two hours, the store's default
/// partition); the benchmark uses [`recent_start_ms`] instead.
pub const START_MS: i64 = 1_699_999_200_000;
/// Start times are multiples of this (the store's default block partition).
pub const START_ALIGN_MS: i64 = 2 * 3600 * 1000;
/// Metrics per host (TSBS `cpu-only`).
pub const METRICS_PER_HOST: u64 = 10;
/// TSBS `cpu-only` field names, one series each per host.
pub const CPU_METRICS: [&str; METRICS_PER_HOST as usize] = [
    "cpu_usage_user",
    "cpu_usage_system",
    "cpu_usage_idle",
    "cpu_usage_nice",
    "cpu_usage_iowait",
    "cpu_usage_irq",
    "cpu_usage_softirq",
    "cpu_usage_steal",
    "cpu_usage_guest",
    "cpu_usage_guest_nice",
];
/// Observations per histogram sample.
pub const HISTOGRAM_OBSERVATIONS: usize = 100;
/// Lognormal parameters of the histogram observations (seconds): ≈75 bins per 100 observations.
pub const HISTOGRAM_MU: f64 = -3.0;
pub const HISTOGRAM_SIGMA: f64 = 1.6;
/// Samples per series in the churn shape.
pub const CHURN_SAMPLES_PER_SERIES: u64 = 6;
/// Series created together in the churn shape; each generation is replaced by the next.
pub const CHURN_GENERATION_SERIES: u64 = 10_000;
/// Bounds on a workload's size, so a mistyped option fails instead of running for days.
pub const SERIES_MAX: u64 = 100_000_000;
pub const STEPS_MAX: u64 = 10_000_000;
/// Largest chunk one call may ask for.
pub const CHUNK_SAMPLES_MAX: usize = 1 << 20;

const REGIONS: [&str; 9] = [
    "us-east-1",
    "us-west-1",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-northeast-1",
    "sa-east-1",
];
const OSES: [&str; 3] = ["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"];
const ARCHES: [&str; 2] = ["x64", "x86"];
const TEAMS: [&str; 4] = ["SF", "NYC", "LON", "CHI"];
const ENVIRONMENTS: [&str; 3] = ["production", "staging", "test"];

/// The workload shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    NumericInt,
    NumericFloat,
    Histogram,
    Churn,
}

impl Shape {
    pub const ALL: [Shape; 4] = [
        Shape::NumericInt,
        Shape::NumericFloat,
        Shape::Histogram,
        Shape::Churn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::NumericInt => "numeric-int",
            Shape::NumericFloat => "numeric-float",
            Shape::Histogram => "histogram",
            Shape::Churn => "churn",
        }
    }

    pub fn parse(text: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|s| s.name() == text)
    }

    /// Series per shape: 1,000 hosts × 10 metrics; 1,000 histograms; 1 M churned series.
    pub fn default_series(self) -> u64 {
        match self {
            Shape::NumericInt | Shape::NumericFloat => 10_000,
            Shape::Histogram => 1_000,
            Shape::Churn => 1_000_000,
        }
    }
}

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub shape: Shape,
    pub series: u64,
    /// Samples per series (the churn shape always uses [`CHURN_SAMPLES_PER_SERIES`]).
    pub steps: u64,
    pub seed: u64,
    /// Consecutive samples of one series before the next series: 1 (the default) is strictly
    /// time-major — one sample per series per timestamp — as a scraper delivers them; larger
    /// runs model agents that buffer, and show how much of the write cost is per series per
    /// batch rather than per sample.
    pub run_samples: u64,
    /// Timestamp of the first sample (churn generations follow each other from it).
    pub start_ms: i64,
}

impl Config {
    /// The benchmark's workload for `shape`: 4 hours at 10 s (1,440 steps), or 6 samples for churn.
    pub fn issue(shape: Shape) -> Config {
        Config {
            shape,
            series: shape.default_series(),
            steps: steps_for_hours(4.0).unwrap_or(1440),
            seed: 1,
            run_samples: 1,
            start_ms: START_MS,
        }
    }

    fn check(&self) -> Result<(), String> {
        if self.series == 0 || self.series > SERIES_MAX {
            return Err(format!(
                "series must be 1..={SERIES_MAX}, got {}",
                self.series
            ));
        }
        if self.steps == 0 || self.steps > STEPS_MAX {
            return Err(format!("steps must be 1..={STEPS_MAX}, got {}", self.steps));
        }
        if self.run_samples == 0 || self.run_samples > STEPS_MAX {
            return Err(format!(
                "run samples must be 1..={STEPS_MAX}, got {}",
                self.run_samples
            ));
        }
        Ok(())
    }
}

/// A start that puts `steps` samples per series (or a churn's) in the recent past, aligned to
/// [`START_ALIGN_MS`]: the store applies retention (7 days for raw numerics by default) against
/// the wall clock, and would delete data timestamped years ago in the middle of a run.
pub fn recent_start_ms(now_ms: i64, config: &Config) -> i64 {
    let steps = match config.shape {
        Shape::Churn => config.series.div_ceil(CHURN_GENERATION_SERIES) * CHURN_SAMPLES_PER_SERIES,
        _ => config.steps,
    };
    let span_ms = i64::try_from(steps).unwrap_or(i64::MAX / 2) * INTERVAL_MS;
    (now_ms - span_ms).div_euclid(START_ALIGN_MS) * START_ALIGN_MS
}

/// 10 s steps in `hours` (at least one); `None` for a negative, non-finite or huge value.
pub fn steps_for_hours(hours: f64) -> Option<u64> {
    if !hours.is_finite() || hours <= 0.0 {
        return None;
    }
    let steps = (hours * 3_600_000.0 / INTERVAL_MS as f64).round();
    if steps > STEPS_MAX as f64 {
        return None;
    }
    Some((steps as u64).max(1))
}

/// One generated value.
#[derive(Clone, Debug, PartialEq)]
pub enum GenValue {
    Numeric(f64),
    Histogram(Histogram),
}

/// One generated sample; `series` is the workload's series number (see [`Workload::key`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub series: u64,
    pub ts_ms: i64,
    pub value: GenValue,
}

/// A stream of samples in time-major order.
pub struct Workload {
    config: Config,
    rng: StdRng,
    /// Keys of the series that the current chunk may name, starting at `keys_base`.
    keys: Vec<StreamKey>,
    keys_base: u64,
    /// Per-series random walk state (numeric and churn).
    walks: Vec<f64>,
    lognormal: LogNormal<f64>,
    /// Next sample: position within the current generation (all series for the non-churn shapes).
    generation: u64,
    step: u64,
    series_in_step: u64,
    /// Position within the current series' run of `run_samples` steps.
    step_in_run: u64,
    samples_done: u64,
}

impl Workload {
    pub fn new(config: Config) -> Result<Workload, String> {
        config.check()?;
        let lognormal = LogNormal::new(HISTOGRAM_MU, HISTOGRAM_SIGMA)
            .map_err(|e| format!("lognormal parameters: {e}"))?;
        let mut workload = Workload {
            config,
            rng: StdRng::seed_from_u64(config.seed),
            keys: Vec::new(),
            keys_base: 0,
            walks: Vec::new(),
            lognormal,
            generation: 0,
            step: 0,
            series_in_step: 0,
            step_in_run: 0,
            samples_done: 0,
        };
        workload.start_generation(0)?;
        Ok(workload)
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// Series in the whole workload.
    pub fn series_total(&self) -> u64 {
        self.config.series
    }

    /// Samples per series.
    pub fn steps(&self) -> u64 {
        match self.config.shape {
            Shape::Churn => CHURN_SAMPLES_PER_SERIES,
            _ => self.config.steps,
        }
    }

    pub fn samples_total(&self) -> u64 {
        self.config.series * self.steps()
    }

    pub fn samples_done(&self) -> u64 {
        self.samples_done
    }

    /// Series live at the same time: all of them, or one churn generation.
    fn generation_series(&self) -> u64 {
        match self.config.shape {
            Shape::Churn => CHURN_GENERATION_SERIES.min(self.config.series),
            _ => self.config.series,
        }
    }

    /// The key of series `series`, which must be named by the last chunk.
    pub fn key(&self, series: u64) -> &StreamKey {
        let slot = series.wrapping_sub(self.keys_base);
        assert!(
            slot < self.keys.len() as u64,
            "series {series} is not in the current generation"
        );
        &self.keys[slot as usize]
    }

    fn start_generation(&mut self, generation: u64) -> Result<(), String> {
        let base = generation * self.generation_series();
        let count = self.generation_series().min(self.config.series - base);
        self.keys.clear();
        self.keys.reserve(count as usize);
        for series in base..base + count {
            self.keys.push(series_key(self.config.shape, series)?);
        }
        self.keys_base = base;
        self.walks.clear();
        if self.config.shape != Shape::Histogram {
            for _ in 0..count {
                self.walks.push(self.rng.random_range(0.0..100.0));
            }
        }
        self.generation = generation;
        self.step = 0;
        self.series_in_step = 0;
        self.step_in_run = 0;
        Ok(())
    }

    /// Replaces `out` with up to `samples_max` next samples; returns how many (0 at the end).
    /// A churn chunk never spans two generations, so [`Workload::key`] answers for all of it.
    pub fn next_chunk(
        &mut self,
        samples_max: usize,
        out: &mut Vec<Sample>,
    ) -> Result<usize, String> {
        assert!(
            samples_max <= CHUNK_SAMPLES_MAX,
            "chunk of {samples_max} samples"
        );
        out.clear();
        if self.samples_done == self.samples_total() {
            return Ok(0);
        }
        if self.step == self.steps() {
            self.start_generation(self.generation + 1)?;
        }
        let steps = self.steps();
        let time_base = match self.config.shape {
            Shape::Churn => self.generation * CHURN_SAMPLES_PER_SERIES,
            _ => 0,
        };
        while out.len() < samples_max && self.step < steps {
            let live_now = self.keys.len() as u64;
            let slot = self.series_in_step;
            let run = self.config.run_samples.min(steps - self.step);
            let ts_ms = self.config.start_ms
                + (time_base + self.step + self.step_in_run) as i64 * INTERVAL_MS;
            let value = match self.config.shape {
                Shape::Histogram => {
                    let mut h = Histogram::with_capacity(96);
                    for _ in 0..HISTOGRAM_OBSERVATIONS {
                        h.insert(self.lognormal.sample(&mut self.rng));
                    }
                    GenValue::Histogram(h)
                }
                shape => {
                    let walk = &mut self.walks[slot as usize];
                    let step: f64 = self.rng.sample(StandardNormal);
                    *walk = (*walk + step).clamp(0.0, 100.0);
                    GenValue::Numeric(if shape == Shape::NumericFloat {
                        *walk
                    } else {
                        walk.trunc()
                    })
                }
            };
            out.push(Sample {
                series: self.keys_base + slot,
                ts_ms,
                value,
            });
            self.step_in_run += 1;
            if self.step_in_run == run {
                self.step_in_run = 0;
                self.series_in_step += 1;
                if self.series_in_step == live_now {
                    self.series_in_step = 0;
                    self.step += run;
                }
            }
        }
        self.samples_done += out.len() as u64;
        assert!(self.samples_done <= self.samples_total());
        Ok(out.len())
    }
}

/// A 64-bit mix (splitmix64's finaliser), so host attributes look random but depend on the
/// host number alone.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn pick<'a>(options: &[&'a str], host: u64, salt: u64) -> &'a str {
    options[(mix(host ^ salt.rotate_left(32)) % options.len() as u64) as usize]
}

/// The TSBS host tags of host `host`.
pub fn host_tags(host: u64) -> Result<Vec<Tag>, String> {
    let region = pick(&REGIONS, host, 1);
    let zone = ["a", "b", "c"][(mix(host ^ 2) % 3) as usize];
    let tags = [
        ("hostname", format!("host_{host}")),
        ("region", region.to_string()),
        ("datacenter", format!("{region}{zone}")),
        ("rack", (mix(host ^ 3) % 100).to_string()),
        ("os", pick(&OSES, host, 4).to_string()),
        ("arch", pick(&ARCHES, host, 5).to_string()),
        ("team", pick(&TEAMS, host, 6).to_string()),
        ("service", (mix(host ^ 7) % 20).to_string()),
        ("service_version", (mix(host ^ 8) % 2).to_string()),
        (
            "service_environment",
            pick(&ENVIRONMENTS, host, 9).to_string(),
        ),
    ];
    tags.into_iter()
        .map(|(c, v)| Tag::new(c, v.as_bytes()).map_err(|e| format!("tag {c}:{v}: {e}")))
        .collect()
}

/// The key of series number `series` of `shape`: host `series / 10`, metric `series % 10` for
/// the numeric shapes and churn; one latency histogram per host for the histogram shape.
pub fn series_key(shape: Shape, series: u64) -> Result<StreamKey, String> {
    let (name, host) = match shape {
        Shape::Histogram => ("http_request_duration_seconds", series),
        _ => (
            CPU_METRICS[(series % METRICS_PER_HOST) as usize],
            series / METRICS_PER_HOST,
        ),
    };
    StreamKey::new(name, host_tags(host)?).map_err(|e| format!("key of series {series}: {e}"))
}
