//! Which source the clock may use, from the environment or from code.

use std::fmt;

/// The environment variable that forces a source: `os`, `tsc` or `auto` (the default).
pub const ENV_VAR: &str = "STRATA_CLOCK";

/// Which source to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Choice {
    /// The TSC if it is safe (invariant TSC and kernel clocksource `tsc`), else the OS clock.
    #[default]
    Auto,
    /// Always the OS clock (`clock_gettime`).
    Os,
    /// The TSC whenever the CPU has an invariant one, without consulting the kernel's
    /// clocksource (for machines whose kernel distrusts a TSC the operator knows is good).
    /// Without an invariant TSC this is still the OS clock: there is nothing else to use.
    Tsc,
}

impl Choice {
    /// Parses `os`, `tsc` or `auto` (any case, surrounding spaces ignored; empty = `auto`).
    pub fn parse(text: &str) -> Result<Choice, ConfigError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Choice::Auto),
            "os" => Ok(Choice::Os),
            "tsc" => Ok(Choice::Tsc),
            _ => Err(ConfigError {
                value: text.to_string(),
            }),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Choice::Auto => "auto",
            Choice::Os => "os",
            Choice::Tsc => "tsc",
        }
    }
}

/// How a clock is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub source: Choice,
}

impl Config {
    /// The configuration `STRATA_CLOCK` asks for (`auto` when unset).
    pub fn from_env() -> Result<Config, ConfigError> {
        match std::env::var(ENV_VAR) {
            Ok(value) => Config::from_env_value(Some(&value)),
            Err(std::env::VarError::NotPresent) => Config::from_env_value(None),
            Err(std::env::VarError::NotUnicode(value)) => Err(ConfigError {
                value: value.to_string_lossy().into_owned(),
            }),
        }
    }

    /// The configuration for a given value of `STRATA_CLOCK` (`None` = unset).
    pub fn from_env_value(value: Option<&str>) -> Result<Config, ConfigError> {
        let source = match value {
            Some(text) => Choice::parse(text)?,
            None => Choice::Auto,
        };
        Ok(Config { source })
    }
}

/// A `STRATA_CLOCK` value that is not `os`, `tsc` or `auto`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub value: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ENV_VAR}={:?} is not one of os, tsc, auto", self.value)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_choice_and_rejects_the_rest() {
        assert_eq!(Choice::parse("os"), Ok(Choice::Os));
        assert_eq!(Choice::parse(" TSC "), Ok(Choice::Tsc));
        assert_eq!(Choice::parse("Auto"), Ok(Choice::Auto));
        assert_eq!(Choice::parse(""), Ok(Choice::Auto));
        assert!(Choice::parse("hpet").is_err());
        assert_eq!(
            Config::from_env_value(None),
            Ok(Config {
                source: Choice::Auto
            })
        );
        assert_eq!(
            Config::from_env_value(Some("os")),
            Ok(Config { source: Choice::Os })
        );
        let error = Config::from_env_value(Some("fast")).err();
        assert_eq!(
            error.map(|e| e.to_string()),
            Some(format!("{ENV_VAR}=\"fast\" is not one of os, tsc, auto"))
        );
    }
}
