//! `promql`: a PromQL subset evaluated over the store, and the Prometheus HTTP API Grafana uses.
#![forbid(unsafe_code)]
