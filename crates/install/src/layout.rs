//! Where the installer puts things, and the text of the files it writes (the agent's config,
//! the systemd unit). With `--root DIR` every path is under DIR and the files name the paths
//! under DIR, so an agent installed into a scratch directory runs from there.

use std::path::{Path, PathBuf};

/// The unit's name.
pub const UNIT_NAME: &str = "strata-agent.service";
/// The observer's unit (installed with the postgres, redis and http plugins).
pub const OBSERVE_UNIT_NAME: &str = "strata-observe.service";

/// The agent's connectivity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The agent sends to the core (or a broker) itself.
    Push,
    /// A broker scrapes the agent's `/metrics`.
    Pull,
    /// The agent connects out to a broker, which then pulls through that connection.
    Reverse,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "push" => Ok(Mode::Push),
            "pull" => Ok(Mode::Pull),
            "reverse" => Ok(Mode::Reverse),
            _ => Err(format!("--mode {s}: must be push, pull or reverse")),
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Mode::Push => "push",
            Mode::Pull => "pull",
            Mode::Reverse => "reverse",
        }
    }
}

/// Every path the installer writes.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
    pub binary: PathBuf,
    pub etc: PathBuf,
    pub config: PathBuf,
    pub host_id: PathBuf,
    pub agent_etc: PathBuf,
    pub token: PathBuf,
    pub plugins: PathBuf,
    pub state: PathBuf,
    pub unit: PathBuf,
    pub observe_config: PathBuf,
    pub observe_unit: PathBuf,
}

impl Layout {
    pub fn new(root: &Path) -> Layout {
        let at = |p: &str| root.join(p);
        Layout {
            root: root.to_path_buf(),
            binary: at("usr/local/bin/strata"),
            etc: at("etc/strata"),
            config: at("etc/strata/agent.toml"),
            host_id: at("etc/strata/host-id"),
            agent_etc: at("etc/strata/agent"),
            token: at("etc/strata/agent/token"),
            plugins: at("etc/strata/agent/plugins"),
            state: at("var/lib/strata/agent"),
            unit: at(&format!("etc/systemd/system/{UNIT_NAME}")),
            observe_config: at("etc/strata/observe.toml"),
            observe_unit: at(&format!("etc/systemd/system/{OBSERVE_UNIT_NAME}")),
        }
    }
}

/// What goes into the agent's config.
pub struct AgentConfig<'a> {
    pub host_id: &'a str,
    pub mode: Mode,
    pub listen: &'a str,
    pub statsd: &'a str,
    pub core: &'a str,
    /// `host:port` of the link listener the agent dials (reverse mode).
    pub broker: Option<&'a str>,
    /// The core's link certificate SHA-256 the agent pins (reverse mode).
    pub core_sha256: Option<&'a str>,
    pub token: bool,
}

/// A TOML basic string.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn path_text(p: &Path) -> String {
    quoted(&p.to_string_lossy())
}

/// The config file `strata agent --config` reads (`crates/agent/FORMAT.md`).
pub fn config_text(layout: &Layout, c: &AgentConfig) -> Result<String, String> {
    let mut t = String::from(
        "# Written by `strata install agent`; a re-run keeps this file unless --force-config.\n",
    );
    t.push_str(&format!("host_id = {}\n", quoted(c.host_id)));
    t.push_str(&format!("state_dir = {}\n", path_text(&layout.state)));
    t.push_str(&format!("mode = {}\n", quoted(c.mode.word())));
    t.push_str(&format!("listen = {}\n", quoted(c.listen)));
    t.push_str(&format!("statsd = {}\n", quoted(c.statsd)));
    t.push_str(&format!("plugins_dir = {}\n", path_text(&layout.plugins)));
    match c.mode {
        Mode::Push => {
            t.push_str(&format!("\n[push]\nurl = {}\n", quoted(c.core)));
            if c.token {
                t.push_str(&format!("token_file = {}\n", path_text(&layout.token)));
            }
        }
        Mode::Pull => {}
        Mode::Reverse => {
            let (Some(broker), Some(core_sha256)) = (c.broker, c.core_sha256) else {
                return Err("--mode reverse needs the core's link address and certificate".into());
            };
            t.push_str(&format!(
                "\n[reverse]\nbroker = {}\ncore_sha256 = {}\n",
                quoted(broker),
                quoted(core_sha256)
            ));
        }
    }
    Ok(t)
}

/// The hardened systemd unit. The agent runs as root (it reads the 0600 token file and every
/// mounted filesystem's usage) but with no capabilities, a read-only view of the system but its
/// state directory, no new privileges, and only the system calls and socket families it uses.
pub fn unit_text(layout: &Layout) -> String {
    let bin = layout.binary.to_string_lossy();
    let config = layout.config.to_string_lossy();
    let state = layout.state.to_string_lossy();
    format!(
        "# Written by `strata install agent`.\n\
         [Unit]\n\
         Description=Strata agent: host metrics, statsd and plugins sent to a Strata core\n\
         Documentation=https://github.com/strata/strata\n\
         After=network-online.target\n\
         Wants=network-online.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={bin} agent --config {config}\n\
         Restart=always\n\
         RestartSec=5s\n\
         User=root\n\
         ReadWritePaths={state}\n\
         UMask=0077\n\
         CapabilityBoundingSet=\n\
         AmbientCapabilities=\n\
         NoNewPrivileges=yes\n\
         ProtectSystem=strict\n\
         ProtectHome=yes\n\
         PrivateTmp=yes\n\
         PrivateDevices=yes\n\
         PrivateUsers=yes\n\
         ProtectKernelTunables=yes\n\
         ProtectKernelModules=yes\n\
         ProtectKernelLogs=yes\n\
         ProtectControlGroups=yes\n\
         ProtectClock=yes\n\
         ProtectHostname=yes\n\
         ProtectProc=invisible\n\
         ProcSubset=all\n\
         RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\n\
         RestrictNamespaces=yes\n\
         RestrictRealtime=yes\n\
         RestrictSUIDSGID=yes\n\
         LockPersonality=yes\n\
         MemoryDenyWriteExecute=yes\n\
         RemoveIPC=yes\n\
         KeyringMode=private\n\
         DevicePolicy=closed\n\
         SystemCallArchitectures=native\n\
         SystemCallFilter=@system-service\n\
         SystemCallFilter=~@privileged @resources\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n"
    )
}

/// What goes into the observer's config.
pub struct ObserveConfig<'a> {
    pub iface: &'a str,
    /// `proto:port` entries.
    pub wires: &'a [String],
    pub core: &'a str,
    /// The httptrap check its documents are written as.
    pub check: &'a str,
    pub token: bool,
}

/// The config file `strata observe --config` reads (`crates/observe/src/config.rs`).
pub fn observe_config_text(layout: &Layout, c: &ObserveConfig) -> String {
    let mut t = String::from("# Written by `strata install agent` for its plugins.\n");
    t.push_str(&format!("iface = {}\n", quoted(c.iface)));
    let wires: Vec<String> = c.wires.iter().map(|w| quoted(w)).collect();
    t.push_str(&format!("wire = [{}]\n", wires.join(", ")));
    t.push_str(&format!("core = {}\n", quoted(c.core)));
    t.push_str(&format!("check = {}\n", quoted(c.check)));
    if c.token {
        t.push_str(&format!("core_token_file = {}\n", path_text(&layout.token)));
    }
    t
}

/// The observer's hardened unit: like the agent's, but it holds `CAP_NET_RAW` (a packet socket
/// on the observed interface) in the host's user namespace, and may open packet sockets.
pub fn observe_unit_text(layout: &Layout) -> String {
    let bin = layout.binary.to_string_lossy();
    let config = layout.observe_config.to_string_lossy();
    format!(
        "# Written by `strata install agent`.\n\
         [Unit]\n\
         Description=Strata observer: request latency seen on the wire, sent to a Strata core\n\
         Documentation=https://github.com/strata/strata\n\
         After=network-online.target\n\
         Wants=network-online.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={bin} observe --config {config}\n\
         Restart=always\n\
         RestartSec=5s\n\
         User=root\n\
         UMask=0077\n\
         CapabilityBoundingSet=CAP_NET_RAW\n\
         AmbientCapabilities=CAP_NET_RAW\n\
         NoNewPrivileges=yes\n\
         ProtectSystem=strict\n\
         ProtectHome=yes\n\
         PrivateTmp=yes\n\
         PrivateDevices=yes\n\
         ProtectKernelTunables=yes\n\
         ProtectKernelModules=yes\n\
         ProtectKernelLogs=yes\n\
         ProtectControlGroups=yes\n\
         ProtectClock=yes\n\
         ProtectHostname=yes\n\
         ProtectProc=invisible\n\
         RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_PACKET AF_NETLINK\n\
         RestrictNamespaces=yes\n\
         RestrictRealtime=yes\n\
         RestrictSUIDSGID=yes\n\
         LockPersonality=yes\n\
         MemoryDenyWriteExecute=yes\n\
         RemoveIPC=yes\n\
         KeyringMode=private\n\
         DevicePolicy=closed\n\
         SystemCallArchitectures=native\n\
         SystemCallFilter=@system-service\n\
         SystemCallFilter=~@privileged @resources\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn config_follows_the_contract() {
        let l = Layout::new(Path::new("/"));
        let c = AgentConfig {
            host_id: "ab",
            mode: Mode::Push,
            listen: "127.0.0.1:2609",
            statsd: "",
            core: "http://core:8112",
            broker: None,
            core_sha256: None,
            token: true,
        };
        let t = config_text(&l, &c).unwrap();
        let v: toml::Table = toml::from_str(&t).unwrap();
        assert_eq!(v["host_id"].as_str(), Some("ab"));
        assert_eq!(v["state_dir"].as_str(), Some("/var/lib/strata/agent"));
        assert_eq!(v["statsd"].as_str(), Some(""));
        assert_eq!(v["push"]["url"].as_str(), Some("http://core:8112"));
        assert_eq!(
            v["push"]["token_file"].as_str(),
            Some("/etc/strata/agent/token")
        );
        let r = AgentConfig {
            mode: Mode::Reverse,
            broker: None,
            ..c
        };
        assert!(config_text(&l, &r).unwrap_err().contains("link address"));
        let fp = "ab".repeat(32);
        let r = AgentConfig {
            broker: Some("core:8443"),
            core_sha256: Some(&fp),
            ..r
        };
        let v: toml::Table = toml::from_str(&config_text(&l, &r).unwrap()).unwrap();
        assert_eq!(v["reverse"]["broker"].as_str(), Some("core:8443"));
        assert_eq!(v["reverse"]["core_sha256"].as_str(), Some(fp.as_str()));
        assert_eq!(quoted("a\"b\\c"), r#""a\"b\\c""#);
    }
}
