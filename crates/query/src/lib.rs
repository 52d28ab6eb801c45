//! `query`: the analytics language (a CAQL-compatible core) evaluated over the store.
//!
//! - [`parser::parse`]: text → [`ast::Query`] (errors name the byte offset, line, column and
//!   what was expected).
//! - [`eval::run`] / [`eval::evaluate`]: evaluation over a [`store::Store`], bounded by
//!   [`eval::Limits`] and cancellable through an `AtomicBool`.
//! - [`http::router`]: `GET|POST /api/strata/v1/caql`.
//!
//! `README.md` documents every function and where our meanings are chosen.
#![forbid(unsafe_code)]

pub mod ast;
pub mod eval;
pub mod http;
pub mod output;
pub mod parser;

pub use ast::{Expr, Query};
pub use eval::{run, EvalError, Limits, Output, Stream};
pub use parser::{parse, ParseError};
