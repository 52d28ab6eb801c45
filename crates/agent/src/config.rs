//! The agent's config file (TOML), as the installer writes it. Unknown keys are refused naming
//! the key, so a typo never silently changes what the agent does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Longest config file read.
pub const CONFIG_BYTES_MAX: u64 = 1 << 20;
/// Longest host id (it becomes a tag value and part of the check name).
pub const HOST_ID_BYTES_MAX: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Push,
    Pull,
    Reverse,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Push {
    pub url: String,
    pub token_file: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reverse {
    pub broker: String,
}

/// One plugin's own schedule (`[plugin.<name>]`, the name being the file's name less its
/// extension): how often it runs and how long a run may take.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginFile {
    interval_s: Option<u64>,
    timeout_s: Option<u64>,
}

/// A plugin's checked schedule; `None` fields take the defaults (every period; half a period,
/// at most `plugins::PLUGIN_TIMEOUT_MS_MAX`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PluginSettings {
    pub interval: Option<Duration>,
    pub timeout: Option<Duration>,
}

/// Longest interval a plugin may be given.
pub const PLUGIN_INTERVAL_S_MAX: u64 = 86_400;
/// Longest timeout a plugin may be given (its interval bounds it too).
pub const PLUGIN_TIMEOUT_S_MAX: u64 = 300;
/// Plugins with their own schedule, at most.
pub const PLUGIN_SETTINGS_MAX: usize = 64;

fn plugin_settings(
    file: BTreeMap<String, PluginFile>,
) -> Result<BTreeMap<String, PluginSettings>, String> {
    if file.len() > PLUGIN_SETTINGS_MAX {
        return Err(format!(
            "at most {PLUGIN_SETTINGS_MAX} [plugin.<name>] tables"
        ));
    }
    let mut out = BTreeMap::new();
    for (name, p) in file {
        let interval_s = p.interval_s;
        if interval_s.is_some_and(|s| s == 0 || s > PLUGIN_INTERVAL_S_MAX) {
            return Err(format!(
                "`plugin.{name}.interval_s`: must be 1 to {PLUGIN_INTERVAL_S_MAX}"
            ));
        }
        let timeout_max_s = interval_s
            .unwrap_or(PLUGIN_TIMEOUT_S_MAX)
            .min(PLUGIN_TIMEOUT_S_MAX);
        if p.timeout_s.is_some_and(|s| s == 0 || s > timeout_max_s) {
            return Err(format!(
                "`plugin.{name}.timeout_s`: must be 1 to {timeout_max_s} (at most its interval \
                 and {PLUGIN_TIMEOUT_S_MAX})"
            ));
        }
        let settings = PluginSettings {
            interval: interval_s.map(Duration::from_secs),
            timeout: p.timeout_s.map(Duration::from_secs),
        };
        out.insert(name, settings);
    }
    Ok(out)
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    host_id: String,
    state_dir: PathBuf,
    mode: Mode,
    listen: Option<String>,
    statsd: Option<String>,
    plugins_dir: Option<PathBuf>,
    #[serde(default)]
    plugin: BTreeMap<String, PluginFile>,
    push: Option<Push>,
    reverse: Option<Reverse>,
}

/// A checked config.
#[derive(Clone, Debug)]
pub struct Config {
    pub host_id: String,
    pub state_dir: PathBuf,
    pub mode: Mode,
    /// `None`: no HTTP listener.
    pub listen: Option<SocketAddr>,
    /// `None`: statsd disabled.
    pub statsd: Option<SocketAddr>,
    pub plugins_dir: Option<PathBuf>,
    /// Plugins with their own interval or timeout, by plugin name.
    pub plugins: BTreeMap<String, PluginSettings>,
    pub push: Option<Push>,
    pub reverse: Option<Reverse>,
}

pub const LISTEN_DEFAULT: &str = "127.0.0.1:2609";
pub const STATSD_DEFAULT: &str = "127.0.0.1:8125";

fn address(what: &str, text: &str) -> Result<Option<SocketAddr>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| format!("`{what}`: `{text}` is not an address like 127.0.0.1:2609"))
}

impl Config {
    /// Reads and checks the file; the error is one line naming the file and what is wrong.
    pub fn load(path: &Path) -> Result<Config, String> {
        let len = std::fs::metadata(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        if len > CONFIG_BYTES_MAX {
            return Err(format!(
                "{}: {len} bytes, more than {CONFIG_BYTES_MAX}",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Config, String> {
        let file: File = toml::from_str(text).map_err(|e| {
            let message = e.message().to_owned();
            match e.span() {
                Some(span) => {
                    let line = text[..span.start.min(text.len())].lines().count().max(1);
                    format!("line {line}: {message}")
                }
                None => message,
            }
        })?;
        let host_id = file.host_id.trim().to_owned();
        if host_id.is_empty() || host_id.len() > HOST_ID_BYTES_MAX {
            return Err(format!("`host_id`: must be 1 to {HOST_ID_BYTES_MAX} bytes"));
        }
        if !host_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(format!(
                "`host_id`: `{host_id}` may hold only letters, digits, `-`, `_` and `.`"
            ));
        }
        let listen = address("listen", file.listen.as_deref().unwrap_or(LISTEN_DEFAULT))?;
        let statsd = address("statsd", file.statsd.as_deref().unwrap_or(STATSD_DEFAULT))?;
        match file.mode {
            Mode::Push => {
                let push = file
                    .push
                    .as_ref()
                    .ok_or("mode = \"push\" needs a [push] table")?;
                if !(push.url.starts_with("http://") || push.url.starts_with("https://")) {
                    return Err(format!(
                        "`push.url`: `{}` is not an http:// or https:// URL",
                        push.url
                    ));
                }
            }
            Mode::Reverse => {
                file.reverse
                    .as_ref()
                    .ok_or("mode = \"reverse\" needs a [reverse] table")?;
            }
            Mode::Pull => {
                if listen.is_none() {
                    return Err("mode = \"pull\" needs a `listen` address".to_owned());
                }
            }
        }
        Ok(Config {
            host_id,
            state_dir: file.state_dir,
            mode: file.mode,
            listen,
            statsd,
            plugins_dir: file.plugins_dir,
            plugins: plugin_settings(file.plugin)?,
            push: file.push,
            reverse: file.reverse,
        })
    }

    /// The bearer token for the core, trimmed; `None` when no token file is configured.
    pub fn token(&self) -> Result<Option<String>, String> {
        let Some(path) = self.push.as_ref().and_then(|p| p.token_file.as_ref()) else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("token file {}: {e}", path.display()))?;
        Ok(Some(text.trim().to_owned()).filter(|t| !t.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
host_id = "web-1"
state_dir = "/tmp/x"
mode = "push"
listen = "127.0.0.1:2609"
statsd = ""
plugins_dir = "/etc/strata/agent/plugins"
[push]
url = "http://core:8112"
token_file = "/etc/strata/agent/token"
"#;

    #[test]
    fn the_contract_example_parses() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.host_id, "web-1");
        assert_eq!(c.mode, Mode::Push);
        assert!(c.statsd.is_none());
        assert_eq!(c.listen.unwrap().port(), 2609);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = Config::parse(&GOOD.replace("statsd = \"\"", "statsdd = \"\"")).unwrap_err();
        assert!(e.contains("statsdd"), "{e}");
        let e = Config::parse(&format!("{GOOD}urll = \"x\"\n")).unwrap_err();
        assert!(e.contains("urll"), "{e}");
    }

    #[test]
    fn push_needs_its_table_and_a_url() {
        let e =
            Config::parse("host_id = \"a\"\nstate_dir = \"/x\"\nmode = \"push\"\n").unwrap_err();
        assert!(e.contains("[push]"), "{e}");
        let e = Config::parse(&GOOD.replace("http://core:8112", "core:8112")).unwrap_err();
        assert!(e.contains("push.url"), "{e}");
        let e = Config::parse(&GOOD.replace("\"push\"", "\"sideways\"")).unwrap_err();
        assert!(e.contains("sideways"), "{e}");
    }
}
