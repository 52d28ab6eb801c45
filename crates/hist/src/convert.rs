//! Conversions from other histogram families (Prometheus native, OTel exponential, classic).
