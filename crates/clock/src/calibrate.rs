//! Calibration of the TSC against `CLOCK_MONOTONIC`, the recalibration thread, and the fallback
//! to the OS clock.
//!
//! The thread is the only writer of a clock's parameters. Every `RECALIBRATE_INTERVAL_NS` it
//! samples (TSC, `CLOCK_MONOTONIC`, `CLOCK_REALTIME`), checks the TSC, and publishes a record
//! whose new line starts `STEERING.switch_delay_ns` in the future and continues the current one
//! exactly there (see `line::next_line`). A reader that finds the previous record took its TSC
//! sample before the new record became visible (plus an out-of-order slack), so before the
//! switch point, where both records agree; a reader that finds the new record with a sample from
//! before the record's old line took over samples again (`Published::tsc_read`). So every reader
//! evaluates the same global function.

use std::sync::atomic::{fence, Ordering};
use std::thread;
use std::time::Duration;

use crate::arch;
use crate::line::{mult_between, next_line, Line, Steering, Switch};
use crate::os;
use crate::published::{Params, MODE_OS, MODE_TSC};
use crate::reason::{Fault, Reason};
use crate::State;

/// How often the TSC is recalibrated and checked; also the longest a fault can go unnoticed.
pub const RECALIBRATE_INTERVAL_NS: u64 = 5_000_000_000;

/// The TSC clock must stay this close to `CLOCK_MONOTONIC`, or it is a fault. Far above what the
/// steering leaves (microseconds) and below anything an operator would accept.
pub const TRACKING_ERROR_NS_MAX: u64 = 1_000_000;

/// The first calibration's baseline, and the widest TSC bracket around each end's
/// `CLOCK_MONOTONIC` read, in ticks (at most as many ns on a TSC of at least 1 GHz; typically
/// ~100 ticks here). So the first slope is within 2 × 250 ns / 5 ms = 100 ppm, which leaves at
/// most 50 µs of error by the first recalibration, `FIRST_RECALIBRATION_NS` later.
const CALIBRATION_NS: u64 = 5_000_000;
const CALIBRATION_BRACKET_TICKS_MAX: u64 = 500;

/// The first recalibration comes early, to correct the short first calibration.
const FIRST_RECALIBRATION_NS: u64 = 500_000_000;

/// The switch delay bounds how long this thread may be descheduled between sampling and
/// publishing (else: `Fault::PublishLate`), and readers pay an out-of-line call between a
/// publication and its switch point (here 2% of the time). 100 ms balances the two.
const STEERING: Steering = Steering {
    switch_delay_ns: 100_000_000,
    correction_ns: RECALIBRATE_INTERVAL_NS,
    slew_ppm_max: 200,
};

/// How far apart a reader's TSC sample and its loads of the record may execute: the reorder
/// window of an out-of-order core, which is bounded by the instructions in flight (hundreds of
/// cycles); an interrupt or preemption squashes them. 100 µs is far beyond that.
const READER_SLACK_NS: u64 = 100_000;

/// On a fallback the OS clock is offset to cover every value the TSC clock could still hand out
/// this long after the fallback was decided (a forward step of at most this much).
const FALLBACK_HORIZON_NS: u64 = 10_000_000;

/// Attempts per sample to get a tight bracket, and the widest bracket accepted when
/// recalibrating (it adds at most half of it to the measured error).
const SAMPLE_ATTEMPTS_MAX: u32 = 16;
const SAMPLE_BRACKET_NS_MAX: u64 = 50_000;

/// Recalibration rounds in a row without a usable sample before it counts as a fault.
const SAMPLE_FAILURES_MAX: u32 = 3;

/// One simultaneous reading of the TSC and the OS clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    /// TSC at the moment `mono_ns` was read (middle of its bracket).
    pub ticks: u64,
    pub mono_ns: u64,
    /// TSC at the moment `real_ns` was read.
    pub real_ticks: u64,
    pub real_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SampleError {
    /// A later TSC read was lower than an earlier one on this thread.
    Backwards { ticks_back: u64 },
    /// Every attempt was interrupted for longer than the bracket bound.
    Wide,
}

/// Reads TSC, `CLOCK_MONOTONIC`, TSC, `CLOCK_REALTIME`, TSC and keeps the attempt with the
/// tightest bracket around `CLOCK_MONOTONIC`, if that is at most `bracket_ticks_max`.
pub(crate) fn take_sample(bracket_ticks_max: u64) -> Result<Sample, SampleError> {
    let mut best: Option<(u64, Sample)> = None;
    for _ in 0..SAMPLE_ATTEMPTS_MAX {
        let ticks_0 = arch::ticks_ordered();
        let mono_ns = os::monotonic_ns();
        let ticks_1 = arch::ticks_ordered();
        let real_ns = os::realtime_ns();
        let ticks_2 = arch::ticks_ordered();
        if ticks_1 < ticks_0 || ticks_2 < ticks_1 {
            let ticks_back = (ticks_0 - ticks_1.min(ticks_0)).max(ticks_1 - ticks_2.min(ticks_1));
            return Err(SampleError::Backwards { ticks_back });
        }
        let bracket_ticks = ticks_1 - ticks_0;
        let sample = Sample {
            ticks: ticks_0 + (ticks_1 - ticks_0) / 2,
            mono_ns,
            real_ticks: ticks_1 + (ticks_2 - ticks_1) / 2,
            real_ns,
        };
        if best.is_none_or(|(best_ticks, _)| bracket_ticks < best_ticks) {
            best = Some((bracket_ticks, sample));
        }
    }
    match best {
        Some((bracket_ticks, sample)) if bracket_ticks <= bracket_ticks_max => Ok(sample),
        _ => Err(SampleError::Wide),
    }
}

/// What a recalibration round did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// New parameters published (or this round skipped); the TSC stays in use.
    Continue,
    /// The clock fell back to the OS clock for good; the thread ends.
    FellBack,
}

/// The single writer of one clock's parameters while it uses the TSC.
#[derive(Clone)]
pub(crate) struct Calibrator {
    state: &'static State,
    /// Whether a kernel clocksource other than `tsc` is a fault (yes unless forced).
    check_clocksource: bool,
    /// The first calibration sample: the long-run slope is measured from here.
    origin: Sample,
    last: Sample,
    params: Params,
    samples_failed: u32,
    /// `STEERING`; tests shorten the switch delay to publish in a tight loop.
    steering: Steering,
}

fn calibration_sample() -> Option<Sample> {
    (0..SAMPLE_ATTEMPTS_MAX).find_map(|_| take_sample(CALIBRATION_BRACKET_TICKS_MAX).ok())
}

impl Calibrator {
    /// Measures the TSC against `CLOCK_MONOTONIC` over `CALIBRATION_NS`. Publishes nothing.
    pub(crate) fn calibrate(state: &'static State, check_clocksource: bool) -> Option<Calibrator> {
        let origin = calibration_sample()?;
        thread::sleep(Duration::from_nanos(CALIBRATION_NS));
        let end = calibration_sample()?;
        let mult = mult_between((origin.ticks, origin.mono_ns), (end.ticks, end.mono_ns))?;
        let line = Line::through(end.ticks, end.mono_ns, mult);
        let params = Params {
            mode: MODE_TSC,
            switch_ticks: end.ticks,
            old: line,
            new: line,
            // Readers evaluate this first line for any sample, however early: it is where the
            // clock starts.
            old_from_ticks: 0,
            os_offset_ns: 0,
            real_offset_ns: real_offset_ns(end, line.eval(end.real_ticks)),
        };
        Some(Calibrator {
            state,
            check_clocksource,
            origin,
            last: end,
            params,
            samples_failed: 0,
            steering: STEERING,
        })
    }

    pub(crate) fn publish_initial(&self, reason: Reason) {
        self.state.publish(&self.params, reason);
    }

    /// Sleeps and recalibrates until a fault makes the clock fall back.
    pub(crate) fn run(mut self) {
        let mut interval_ns = FIRST_RECALIBRATION_NS;
        loop {
            thread::sleep(Duration::from_nanos(interval_ns));
            if self.step() == Step::FellBack {
                return;
            }
            interval_ns = RECALIBRATE_INTERVAL_NS;
        }
    }

    /// One recalibration round against the real clocks.
    pub(crate) fn step(&mut self) -> Step {
        // The file read comes first: between the sample and the publication this thread must
        // not dawdle (see `check_published_in_time`).
        let clocksource = self.check_clocksource.then(os::kernel_clocksource);
        let sample = take_sample(self.sample_bracket_ticks_max());
        self.step_with(sample, clocksource)
    }

    fn sample_bracket_ticks_max(&self) -> u64 {
        self.params.new.ticks_for_ns(SAMPLE_BRACKET_NS_MAX)
    }

    /// One recalibration round with the given sample and kernel clocksource (`None`: not
    /// checked).
    pub(crate) fn step_with(
        &mut self,
        sample: Result<Sample, SampleError>,
        clocksource: Option<Result<String, String>>,
    ) -> Step {
        match self.checked(sample, clocksource) {
            Ok(Some(sample)) => self.recalibrate(sample),
            Ok(None) => Step::Continue,
            Err(fault) => self.fall_back(Reason::Fault(fault)),
        }
    }

    /// The sample if the TSC passed every check, `None` to skip this round, or the fault.
    fn checked(
        &mut self,
        sample: Result<Sample, SampleError>,
        clocksource: Option<Result<String, String>>,
    ) -> Result<Option<Sample>, Fault> {
        let sample = match sample {
            Ok(sample) => sample,
            Err(SampleError::Backwards { ticks_back }) => {
                return Err(Fault::TicksBackwards { ticks_back })
            }
            Err(SampleError::Wide) => {
                self.samples_failed += 1;
                if self.samples_failed >= SAMPLE_FAILURES_MAX {
                    return Err(Fault::Sample);
                }
                return Ok(None);
            }
        };
        self.samples_failed = 0;
        match clocksource {
            None => {}
            Some(Ok(name)) if name == "tsc" => {}
            Some(Ok(name)) | Some(Err(name)) => return Err(Fault::ClocksourceChanged { name }),
        }
        if sample.ticks < self.last.ticks {
            let ticks_back = self.last.ticks - sample.ticks;
            return Err(Fault::TicksBackwards { ticks_back });
        }
        let error_ns = i128::from(self.params.tsc_ns(sample.ticks)) - i128::from(sample.mono_ns);
        if error_ns.unsigned_abs() > u128::from(TRACKING_ERROR_NS_MAX) {
            let error_ns = i64::try_from(error_ns).unwrap_or(i64::MAX);
            return Err(Fault::Drift { error_ns });
        }
        if sample.ticks < self.params.switch_ticks {
            // Woken before the last switch point (only if the interval were shorter than the
            // switch delay): the next line must start after the current one; try next round.
            return Ok(None);
        }
        Ok(Some(sample))
    }

    /// Publishes the next line, steered toward `CLOCK_MONOTONIC` as of `sample`.
    fn recalibrate(&mut self, sample: Sample) -> Step {
        let origin = (self.origin.ticks, self.origin.mono_ns);
        let Some(average_mult) = mult_between(origin, (sample.ticks, sample.mono_ns)) else {
            return self.fall_back(Reason::Fault(Fault::Sample));
        };
        let current = self.params.new;
        let switch = next_line(
            current,
            sample.ticks,
            sample.mono_ns,
            average_mult,
            self.steering,
        );
        assert!(switch.ticks > sample.ticks && switch.ticks >= self.params.switch_ticks);
        assert_eq!(switch.line.eval(switch.ticks), current.eval(switch.ticks));
        let params = Params {
            mode: MODE_TSC,
            switch_ticks: switch.ticks,
            old: current,
            new: switch.line,
            // `checked` made sure the sample, and so this record, comes after it.
            old_from_ticks: self.params.switch_ticks,
            os_offset_ns: 0,
            real_offset_ns: real_offset_ns(sample, self.params.tsc_ns(sample.real_ticks)),
        };
        let reason = self.state.reason();
        self.state.publish(&params, reason);
        self.params = params;
        self.last = sample;
        self.check_published_in_time(switch)
    }

    /// Every reader of the previous record sampled the TSC before the new record was visible
    /// (plus `READER_SLACK_NS`); that must be before the new line's switch point, where the two
    /// records start to differ. If this thread was descheduled for about the switch delay
    /// between sampling and publishing, that is no longer certain: fall back.
    fn check_published_in_time(&mut self, switch: Switch) -> Step {
        // The publication store is globally visible before the fence completes (MFENCE), and
        // the TSC is read after the fence (LFENCE).
        fence(Ordering::SeqCst);
        let published_ticks = arch::ticks_ordered();
        let slack_ticks = switch.line.ticks_for_ns(READER_SLACK_NS);
        let outrun_ticks = published_ticks.saturating_add(slack_ticks);
        if outrun_ticks < switch.ticks {
            return Step::Continue;
        }
        let late_ns = switch.line.interval_ns(outrun_ticks - switch.ticks);
        self.fall_back(Reason::Fault(Fault::PublishLate { late_ns }))
    }

    /// Switches the clock to the OS for good, offset so that it continues at or above every
    /// value the TSC clock may have handed out: the TSC clock `FALLBACK_HORIZON_NS` from now,
    /// and (in case the TSC jumped back) the last good reading plus the time elapsed since.
    pub(crate) fn fall_back(&mut self, reason: Reason) -> Step {
        let ticks = arch::ticks_ordered();
        let mono_ns = os::monotonic_ns();
        let horizon_ticks = self.params.new.ticks_for_ns(FALLBACK_HORIZON_NS);
        let tsc_horizon_ns = self.params.tsc_ns(ticks.saturating_add(horizon_ticks));
        let elapsed_ns = mono_ns.saturating_sub(self.last.mono_ns);
        let last_ns = self.params.tsc_ns(self.last.ticks);
        let since_last_ns = elapsed_ns.saturating_add(FALLBACK_HORIZON_NS);
        let floor_ns = tsc_horizon_ns.max(last_ns.saturating_add(since_last_ns));
        assert!(floor_ns >= tsc_horizon_ns && floor_ns >= last_ns);
        let params = Params {
            mode: MODE_OS,
            os_offset_ns: floor_ns.saturating_sub(mono_ns),
            real_offset_ns: 0,
            ..self.params
        };
        self.state.publish(&params, reason);
        self.params = params;
        Step::FellBack
    }

    #[cfg(test)]
    pub(crate) fn params(&self) -> Params {
        self.params
    }
}

/// `CLOCK_REALTIME − clock` at the sample, for `wall() = now() + offset`.
fn real_offset_ns(sample: Sample, clock_ns_at_real: u64) -> i64 {
    let offset = i128::from(sample.real_ns) - i128::from(clock_ns_at_real);
    i64::try_from(offset).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::published::RAW_OS_TAG;
    use crate::{Clock, Source};
    use std::sync::atomic::AtomicBool;

    /// A clock calibrated on the real TSC but without its thread, so the test drives the
    /// recalibration rounds. `None` where the TSC is unusable (the fallback tests cover that).
    fn calibrated() -> Option<(Clock, Calibrator)> {
        if !(arch::TSC_ARCH && arch::invariant_tsc()) {
            return None;
        }
        let state: &'static State = Box::leak(Box::new(State::new()));
        let calibrator = Calibrator::calibrate(state, false)?;
        calibrator.publish_initial(Reason::TscForced {
            kernel_clocksource: "test".into(),
        });
        Some((Clock::from_state(state), calibrator))
    }

    #[test]
    fn recalibration_rounds_keep_the_tsc_and_never_step_back() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        let mut previous_ns = clock.now();
        for _ in 0..3 {
            let sample = take_sample(calibrator.sample_bracket_ticks_max());
            // Wide samples (a loaded machine) skip the round; that is allowed too.
            assert_eq!(calibrator.step_with(sample, None), Step::Continue);
            let now_ns = clock.now();
            assert!(now_ns >= previous_ns);
            previous_ns = now_ns;
        }
        assert_eq!(clock.source(), Source::Tsc);
    }

    #[test]
    fn now_never_steps_back_across_cpus_while_recalibrating() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        let rounds = 6;
        let mut published = 0;
        let done = AtomicBool::new(false);
        let (reads, backwards) = thread::scope(|scope| {
            // Cross-CPU readers run until the last round, so they straddle every publication.
            let readers = scope.spawn(|| {
                let (mut reads, mut backwards) = (0, 0);
                while !done.load(Ordering::Acquire) {
                    let result = crate::check::cross_thread(|| clock.now(), 200_000, 20_000);
                    reads += result.reads;
                    backwards += result.backwards;
                }
                (reads, backwards)
            });
            for _ in 0..rounds {
                // Past the previous switch point, so each round publishes a new line.
                thread::sleep(Duration::from_nanos(STEERING.switch_delay_ns + 10_000_000));
                let before = calibrator.params();
                let sample = take_sample(calibrator.sample_bracket_ticks_max());
                assert_eq!(calibrator.step_with(sample, None), Step::Continue);
                published += usize::from(calibrator.params() != before);
            }
            done.store(true, Ordering::Release);
            readers.join().unwrap_or((0, 1))
        });
        assert_eq!(backwards, 0, "{backwards} of {reads} reads stepped back");
        assert!(reads > 0);
        assert_eq!(clock.source(), Source::Tsc);
        assert!(published > 0, "no round published (all samples wide?)");
    }

    /// Publications as fast as the writer's rules allow (one per switch delay of 2 ms instead of
    /// one per 5 s), each steering toward a reference that jumps ±20 µs, so consecutive lines
    /// differ in slope by about 1%: a reading evaluated with the wrong line is off by
    /// microseconds, enough for the bouncing readers to see it step back.
    #[test]
    fn now_never_steps_back_while_recalibrating_in_a_tight_loop() {
        // A busy machine can deschedule the writer for the whole 2 ms between a sample and its
        // publication; the clock then falls back to the OS (checked too). Further episodes,
        // each on a fresh clock, make sure enough publications were checked.
        let episodes_max = 3;
        let published_wanted = 200;
        let mut published_total = 0;
        for _ in 0..episodes_max {
            let Some(published) = tight_loop_episode() else {
                return;
            };
            published_total += published;
            if published_total >= published_wanted {
                break;
            }
        }
        assert!(
            published_total >= 10,
            "only {published_total} publications in {episodes_max} episodes"
        );
    }

    /// One clock recalibrated up to 1,000 times while two threads bounce between CPUs reading
    /// it; the number of publications, `None` where the TSC is unusable.
    fn tight_loop_episode() -> Option<u64> {
        let (clock, mut calibrator) = calibrated()?;
        calibrator.steering = Steering {
            switch_delay_ns: 2_000_000,
            correction_ns: 2_000_000,
            slew_ppm_max: 20_000,
        };
        let rounds_max = 1_000u64;
        let jump_ns = 20_000u64;
        let done = AtomicBool::new(false);
        let mut published = 0u64;
        let mut fell_back = false;
        let (reads, backwards, backwards_ns_max) = thread::scope(|scope| {
            let readers = scope.spawn(|| {
                let (mut reads, mut backwards, mut backwards_ns_max) = (0, 0, 0);
                while !done.load(Ordering::Acquire) {
                    let result = crate::check::cross_thread(|| clock.now(), 100_000, 5_000);
                    reads += result.reads;
                    backwards += result.backwards;
                    backwards_ns_max = backwards_ns_max.max(result.backwards_ns_max);
                }
                (reads, backwards, backwards_ns_max)
            });
            for round in 0..rounds_max {
                // Sleep to just past the current switch point (the writer may not sample
                // before it), so the readers keep both CPUs.
                let params = calibrator.params();
                let ticks = arch::ticks_ordered();
                let until_switch_ns = params
                    .new
                    .interval_ns(params.switch_ticks.saturating_sub(ticks));
                thread::sleep(Duration::from_nanos(until_switch_ns + 50_000));
                let sample = take_sample(calibrator.sample_bracket_ticks_max()).map(|sample| {
                    let mono_ns = if round % 2 == 0 {
                        sample.mono_ns + jump_ns
                    } else {
                        sample.mono_ns - jump_ns
                    };
                    Sample { mono_ns, ..sample }
                });
                let step = calibrator.step_with(sample, None);
                published += u64::from(calibrator.params() != params);
                if step == Step::FellBack {
                    // The readers keep checking across the switch to the OS clock for one more
                    // round of theirs.
                    fell_back = true;
                    break;
                }
            }
            done.store(true, Ordering::Release);
            readers.join().unwrap_or((0, 1, 0))
        });
        eprintln!(
            "{reads} reads, {published} publications, fell back: {fell_back} ({})",
            clock.reason()
        );
        assert_eq!(
            backwards, 0,
            "{backwards} of {reads} reads stepped back, by up to {backwards_ns_max} ns \
             ({published} publications, fell back: {fell_back})"
        );
        assert!(reads > 0);
        assert_eq!(clock.source() == Source::Tsc, !fell_back);
        Some(published)
    }

    #[test]
    fn publishing_after_the_switch_point_falls_back() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        let line = calibrator.params().new;
        // A switch point already passed: readers may have outrun the publication.
        let switch = Switch {
            ticks: arch::ticks_ordered(),
            line,
        };
        assert_eq!(calibrator.check_published_in_time(switch), Step::FellBack);
        assert!(matches!(
            clock.reason(),
            Reason::Fault(Fault::PublishLate { .. })
        ));
        assert_eq!(clock.source(), Source::Os);
    }

    #[test]
    fn drift_beyond_the_bound_falls_back_without_stepping_back() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        let raw_before = clock.raw();
        let Ok(mut sample) = take_sample(calibrator.sample_bracket_ticks_max()) else {
            return;
        };
        let before_ns = clock.now();
        sample.mono_ns -= 2 * TRACKING_ERROR_NS_MAX;
        assert_eq!(calibrator.step_with(Ok(sample), None), Step::FellBack);
        let after_ns = clock.now();
        assert!(after_ns >= before_ns, "{after_ns} < {before_ns}");
        assert_eq!(clock.source(), Source::Os);
        let error_ns = match clock.reason() {
            Reason::Fault(Fault::Drift { error_ns }) => error_ns,
            other => panic!("unexpected reason {other:?}"),
        };
        assert!(
            error_ns >= 2 * TRACKING_ERROR_NS_MAX as i64 - 1_000_000,
            "{error_ns}"
        );
        // A raw interval that spans the fallback is unknown, not garbage.
        let raw_after = clock.raw();
        assert_ne!(raw_after & RAW_OS_TAG, 0);
        assert_eq!(clock.delta_ns(raw_before, raw_after), 0);
    }

    #[test]
    fn tsc_stepping_back_falls_back() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        let before_ns = clock.now();
        let error = Err(SampleError::Backwards { ticks_back: 1_000 });
        assert_eq!(calibrator.step_with(error, None), Step::FellBack);
        assert!(clock.now() >= before_ns);
        let reason = Reason::Fault(Fault::TicksBackwards { ticks_back: 1_000 });
        assert_eq!(clock.reason(), reason);
    }

    #[test]
    fn a_sample_behind_the_last_one_falls_back() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        let Ok(mut sample) = take_sample(calibrator.sample_bracket_ticks_max()) else {
            return;
        };
        sample.ticks = calibrator.last.ticks - 5;
        assert_eq!(calibrator.step_with(Ok(sample), None), Step::FellBack);
        let reason = Reason::Fault(Fault::TicksBackwards { ticks_back: 5 });
        assert_eq!(clock.reason(), reason);
    }

    #[test]
    fn kernel_leaving_tsc_falls_back() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        let Ok(sample) = take_sample(calibrator.sample_bracket_ticks_max()) else {
            return;
        };
        let clocksource = Some(Ok("hpet".to_string()));
        assert_eq!(
            calibrator.step_with(Ok(sample), clocksource),
            Step::FellBack
        );
        let name = "hpet".to_string();
        assert_eq!(
            clock.reason(),
            Reason::Fault(Fault::ClocksourceChanged { name })
        );
        assert_eq!(clock.source(), Source::Os);
    }

    #[test]
    fn repeated_wide_samples_fall_back() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        for _ in 1..SAMPLE_FAILURES_MAX {
            assert_eq!(
                calibrator.step_with(Err(SampleError::Wide), None),
                Step::Continue
            );
        }
        assert_eq!(
            calibrator.step_with(Err(SampleError::Wide), None),
            Step::FellBack
        );
        assert_eq!(clock.reason(), Reason::Fault(Fault::Sample));
    }

    #[test]
    fn fallback_covers_a_tsc_that_jumped_back() {
        let Some((clock, mut calibrator)) = calibrated() else {
            return;
        };
        // Pretend the last good reading was 1 s ahead of what the TSC says now.
        calibrator.last.ticks += calibrator.params().new.ticks_for_ns(1_000_000_000);
        let last_ns = calibrator.params().tsc_ns(calibrator.last.ticks);
        calibrator.fall_back(Reason::Fault(Fault::Sample));
        assert!(clock.now() >= last_ns);
    }
}
