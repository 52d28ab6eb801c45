//! `strata rules receivers test NAME`: a running core sends one test notification to one of
//! its receivers and says whether it was delivered, or the receiver's error in plain words.
//!
//! Exit codes: 0 delivered, 1 not delivered or the core could not be reached, 2 bad usage.

use clap::Subcommand;

use crate::cli_rules::{encode, http, Failure, ServerArgs};

#[derive(Subcommand)]
pub enum ReceiversCommand {
    /// Send a test notification to receiver NAME of a running core.
    Test {
        name: String,
        /// The core (`strata serve`), e.g. http://core:8112.
        #[arg(
            long,
            visible_alias = "server",
            env = "STRATA_SERVER",
            default_value = "http://127.0.0.1:8112"
        )]
        core: String,
        /// Bearer token, when the core requires one.
        #[arg(long, env = "STRATA_TOKEN")]
        token: Option<String>,
    },
}

pub fn run(command: &ReceiversCommand) -> Result<(), Failure> {
    let ReceiversCommand::Test { name, core, token } = command;
    let server = ServerArgs {
        server: core.clone(),
        token: token.clone(),
    };
    let path = format!("/api/strata/v1/receivers/{}/test", encode(name));
    let a = http(&server, "POST", &path, "", &[])?;
    let v: serde_json::Value = serde_json::from_str(&a.body)
        .map_err(|_| (1, format!("HTTP {}: {}", a.status, a.body.trim())))?;
    if a.status == 200 && v["delivered"] == true {
        println!("receiver '{name}': test notification delivered");
        return Ok(());
    }
    let why = v["error"].as_str().unwrap_or("error");
    Err((1, why.to_string()))
}
