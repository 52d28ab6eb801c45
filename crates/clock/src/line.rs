//! Fixed-point conversion from TSC ticks to nanoseconds, and how the recalibration thread picks
//! the next conversion line without ever stepping the clock backwards.
//!
//! A line is `ns(ticks) = hi64(ticks · mult) + intercept_ns`, with the slope `mult / 2^64`
//! nanoseconds per tick. Taking the high half of a 64×64-bit product is a single `MUL` with no
//! shift, which keeps the work after the (serialising) TSC read short. The price: the TSC must
//! tick at more than 1 GHz (slope below 1 ns per tick), as every invariant-TSC x86_64 CPU does.

/// Slopes below this (a TSC above 20 GHz) mean calibration went wrong.
pub(crate) const MULT_MIN: u64 = u64::MAX / 20;

/// `ns(ticks) = hi64(ticks · mult) + intercept_ns`: non-decreasing in `ticks` because
/// `hi64(ticks · mult)` is, for any `mult`. Exact where it was anchored (see [`Line::through`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Line {
    pub mult: u64,
    pub intercept_ns: u64,
}

#[inline(always)]
fn hi64(a: u64, b: u64) -> u64 {
    ((u128::from(a) * u128::from(b)) >> 64) as u64
}

impl Line {
    /// The line with slope `mult` that passes exactly through `(ticks, ns)`.
    pub(crate) fn through(ticks: u64, ns: u64, mult: u64) -> Line {
        assert!(mult >= MULT_MIN, "mult {mult} out of range");
        // hi64(ticks · mult) < ticks, so for any realistic `ns` (≥ the time since boot, which
        // exceeds the TSC reading divided by its GHz) this does not wrap; if it did, the
        // wrapping add in `eval` would undo it exactly.
        let intercept_ns = ns.wrapping_sub(hi64(ticks, mult));
        let line = Line { mult, intercept_ns };
        assert_eq!(line.eval(ticks), ns);
        line
    }

    /// Nanoseconds at `ticks`.
    #[inline(always)]
    pub(crate) fn eval(self, ticks: u64) -> u64 {
        hi64(ticks, self.mult).wrapping_add(self.intercept_ns)
    }

    /// Converts a tick interval to nanoseconds with this line's slope.
    #[inline(always)]
    pub(crate) fn interval_ns(self, ticks: u64) -> u64 {
        hi64(ticks, self.mult)
    }

    /// How many ticks make `ns` nanoseconds at this slope (saturating).
    pub(crate) fn ticks_for_ns(self, ns: u64) -> u64 {
        let ticks = (u128::from(ns) << 64) / u128::from(self.mult.max(1));
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }
}

/// The slope through two (ticks, ns) points, if both coordinates increase and the implied TSC
/// frequency is between 1 and 20 GHz.
pub(crate) fn mult_between(a: (u64, u64), b: (u64, u64)) -> Option<u64> {
    let (a_ticks, a_ns) = a;
    let (b_ticks, b_ns) = b;
    if b_ticks <= a_ticks || b_ns <= a_ns {
        return None;
    }
    let mult = (u128::from(b_ns - a_ns) << 64) / u128::from(b_ticks - a_ticks);
    let mult = u64::try_from(mult).ok()?;
    (mult >= MULT_MIN).then_some(mult)
}

/// How the next line is chosen; see `next_line`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Steering {
    /// The new slope takes effect this long after the sample it was computed from, so that the
    /// new parameters are published well before any reader needs them.
    pub switch_delay_ns: u64,
    /// The new slope aims to cancel the tracking error over this long.
    pub correction_ns: u64,
    /// The slope never departs from the long-run average by more than this.
    pub slew_ppm_max: u64,
}

/// The next line and the TSC reading from which it applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Switch {
    pub ticks: u64,
    pub line: Line,
}

/// The line that continues `current` from a switch point `switch_delay_ns` after the sample,
/// with a slope that steers the clock toward `CLOCK_MONOTONIC`.
///
/// - `current` is the line in force at `sample_ticks`; `sample_ns` is `CLOCK_MONOTONIC` then.
/// - `average_mult` is the long-run slope (first calibration sample to this one).
///
/// The result passes exactly through `(switch, current.eval(switch))`, so the piecewise function
/// "current before the switch, result from it on" is continuous and, both pieces being
/// non-decreasing, non-decreasing: switching lines never steps the clock backwards.
pub(crate) fn next_line(
    current: Line,
    sample_ticks: u64,
    sample_ns: u64,
    average_mult: u64,
    steering: Steering,
) -> Switch {
    let average = Line {
        mult: average_mult,
        intercept_ns: 0,
    };
    let switch_ticks = sample_ticks.saturating_add(average.ticks_for_ns(steering.switch_delay_ns));
    let switch_ns = current.eval(switch_ticks);
    // Where CLOCK_MONOTONIC is expected to be `correction_ns` after the switch.
    let target_ns = sample_ns
        .saturating_add(steering.switch_delay_ns)
        .saturating_add(steering.correction_ns);
    let correction_ticks = average.ticks_for_ns(steering.correction_ns).max(1);
    let wanted_mult =
        ((i128::from(target_ns) - i128::from(switch_ns)) << 64) / i128::from(correction_ticks);
    let slew = i128::from(average_mult) * i128::from(steering.slew_ppm_max) / 1_000_000;
    let mult_low = i128::from(average_mult) - slew;
    let mult_high = i128::from(average_mult) + slew;
    let mult = wanted_mult.clamp(mult_low, mult_high);
    let mult = u64::try_from(mult).unwrap_or(average_mult).max(MULT_MIN);
    let line = Line::through(switch_ticks, switch_ns, mult);
    Switch {
        ticks: switch_ticks,
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2.6 GHz TSC: 1/2.6 ns per tick.
    const MULT_2_6_GHZ: u64 = ((1u128 << 64) * 10 / 26) as u64;

    const STEERING: Steering = Steering {
        switch_delay_ns: 1_000_000_000,
        correction_ns: 5_000_000_000,
        slew_ppm_max: 200,
    };

    #[test]
    fn eval_is_exact_at_the_anchor_and_monotone() {
        let line = Line::through(1_000_000, 5_000_000_000, MULT_2_6_GHZ);
        assert_eq!(line.eval(1_000_000), 5_000_000_000);
        let mut previous = 0;
        for ticks in (0..3_000_000u64).step_by(7) {
            let ns = line.eval(ticks);
            assert!(ns >= previous, "eval stepped back at {ticks}");
            previous = ns;
        }
        // 2.6e9 ticks are one second (within the slope's rounding).
        let second = line.eval(1_000_000 + 2_600_000_000) - 5_000_000_000;
        assert!(second.abs_diff(1_000_000_000) <= 1, "{second}");
        assert_eq!(line.interval_ns(2_600), 999);
        assert_eq!(line.ticks_for_ns(1_000), 2_600);
    }

    #[test]
    fn mult_between_rejects_implausible_pairs() {
        assert_eq!(mult_between((10, 10), (10, 20)), None);
        assert_eq!(mult_between((10, 10), (20, 10)), None);
        // 2 ns per tick is a 500 MHz counter; 1 ns per 100 ticks is 100 GHz.
        assert_eq!(mult_between((0, 0), (1_000, 2_000)), None);
        assert_eq!(mult_between((0, 0), (100_000, 1_000)), None);
        let mult = mult_between((0, 0), (2_600_000_000, 1_000_000_000));
        assert_eq!(mult, Some(MULT_2_6_GHZ));
    }

    #[test]
    fn next_line_is_continuous_and_steers_toward_the_reference() {
        let current = Line::through(0, 0, MULT_2_6_GHZ);
        // The clock runs 100 µs ahead of the reference at the sample.
        let sample_ticks = 13_000_000_000;
        let sample_ns = current.eval(sample_ticks) - 100_000;
        let next = next_line(current, sample_ticks, sample_ns, MULT_2_6_GHZ, STEERING);
        assert_eq!(next.line.eval(next.ticks), current.eval(next.ticks));
        assert_eq!(next.ticks, sample_ticks + 2_600_000_000);
        assert!(
            next.line.mult < MULT_2_6_GHZ,
            "ahead, so the slope must drop"
        );
        // After the correction period the error is gone (to within rounding).
        let later_ticks = next.ticks + 13_000_000_000;
        let reference_ns = sample_ns + 6_000_000_000;
        assert!(next.line.eval(later_ticks).abs_diff(reference_ns) < 1_000);
    }

    #[test]
    fn next_line_slews_no_faster_than_the_limit() {
        let current = Line::through(0, 0, MULT_2_6_GHZ);
        let sample_ticks = 13_000_000_000;
        // 50 ms behind: far more than 200 ppm can fix in 5 s.
        let sample_ns = current.eval(sample_ticks) + 50_000_000;
        let next = next_line(current, sample_ticks, sample_ns, MULT_2_6_GHZ, STEERING);
        let slew = MULT_2_6_GHZ / 1_000_000 * 200;
        assert!(next.line.mult.abs_diff(MULT_2_6_GHZ + slew) <= 200);
    }

    #[test]
    fn piecewise_function_never_decreases_across_a_switch() {
        let current = Line::through(1_000, 10_000_000_000, MULT_2_6_GHZ);
        for error_ns in [-900_000i64, -1, 0, 1, 900_000] {
            let sample_ticks = 13_000_000_000;
            let sample_ns = current.eval(sample_ticks).saturating_add_signed(error_ns);
            let next = next_line(current, sample_ticks, sample_ns, MULT_2_6_GHZ, STEERING);
            let f = |t: u64| {
                if t >= next.ticks {
                    next.line.eval(t)
                } else {
                    current.eval(t)
                }
            };
            let mut previous = 0;
            for ticks in next.ticks - 10_000..next.ticks + 10_000 {
                assert!(
                    f(ticks) >= previous,
                    "stepped back at {ticks} (error {error_ns})"
                );
                previous = f(ticks);
            }
        }
    }
}
