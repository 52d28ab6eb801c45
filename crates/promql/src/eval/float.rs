//! Prometheus's float arithmetic for sums, means and variances (Kahan–Neumaier compensated
//! sums, a mean that turns incremental on overflow, Welford's variance), so results agree with
//! Prometheus to the last bits, not only within rounding: a variance of equal values is
//! exactly 0 here as there.

/// One compensated addition: the new sum and compensation.
pub fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.is_infinite() {
        0.0
    } else if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

/// The compensated sum (`sum`, `sum_over_time`).
pub fn sum(values: impl Iterator<Item = f64>) -> f64 {
    let (mut s, mut c) = (0.0, 0.0);
    for v in values {
        (s, c) = kahan_inc(v, s, c);
    }
    if s.is_infinite() {
        s
    } else {
        s + c
    }
}

/// The mean (`avg`, `avg_over_time`): a compensated sum divided at the end, or, once the sum
/// overflows, an incremental mean. `None` for no values.
pub fn mean(mut values: impl Iterator<Item = f64>) -> Option<f64> {
    let first = values.next()?;
    let (mut s, mut count) = (first, 1.0);
    let (mut mean, mut c) = (0.0, 0.0);
    let mut incremental = false;
    for v in values {
        count += 1.0;
        if !incremental {
            let (ns, nc) = kahan_inc(v, s, c);
            if !ns.is_infinite() {
                (s, c) = (ns, nc);
                continue;
            }
            incremental = true;
            mean = s / (count - 1.0);
            c /= count - 1.0;
        }
        let q = (count - 1.0) / count;
        (mean, c) = kahan_inc(v / count, q * mean, q * c);
    }
    Some(if incremental {
        mean + c
    } else {
        s / count + c / count
    })
}

/// The population variance of an aggregation group (`stddev`, `stdvar`): Welford's update; a
/// first value that is NaN or infinite makes it NaN. `None` for no values.
pub fn group_variance(mut values: impl Iterator<Item = f64>) -> Option<f64> {
    let first = values.next()?;
    let (mut count, mut mean) = (1.0, first);
    let mut acc = if first.is_finite() { 0.0 } else { f64::NAN };
    for v in values {
        count += 1.0;
        let delta = v - mean;
        mean += delta / count;
        acc += delta * (v - mean);
    }
    Some(acc / count)
}

/// The population variance over a window (`stddev_over_time`, `stdvar_over_time`): Welford's
/// update with compensated sums. `None` for no values.
pub fn window_variance(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut count, mut mean, mut c_mean, mut aux, mut c_aux) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for v in values {
        count += 1.0;
        let delta = v - (mean + c_mean);
        (mean, c_mean) = kahan_inc(delta / count, mean, c_mean);
        (aux, c_aux) = kahan_inc(delta * (v - (mean + c_mean)), aux, c_aux);
    }
    (count > 0.0).then(|| (aux + c_aux) / count)
}
