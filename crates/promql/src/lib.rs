//! `promql`: a PromQL subset evaluated over the store, and the Prometheus HTTP API Grafana uses.
//!
//! - [`parser::parse`]: text → [`ast::Expr`] (errors with byte position and expectation).
//! - [`eval`]: evaluation over a [`store::Store`], bounded by [`eval::Limits`].
//! - [`http::router`]: `/api/v1/query`, `/query_range`, `/series`, `/labels`,
//!   `/label/{name}/values`, `/metadata`, `/status/buildinfo`.
//!
//! `README.md` documents what our histogram streams mean in PromQL.
#![forbid(unsafe_code)]

pub mod ast;
pub mod eval;
pub mod http;
mod number;
pub mod parser;
pub mod range_cache;

pub use ast::Expr;
pub use parser::{parse, ParseError};
