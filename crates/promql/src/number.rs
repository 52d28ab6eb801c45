//! How numbers are written back: shared by evaluation (labels made from values) and the HTTP
//! API, kept in a leaf module so neither depends on the other.

/// A sample value as Prometheus writes it (Go's `'f'` format, `+Inf`, `-Inf`, `NaN`).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{v}")
    }
}
