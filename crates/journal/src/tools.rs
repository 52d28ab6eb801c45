//! Operator tools: inspect, verify, repair.
