//! The topology file: which real hosts a lab runs on, how to reach them, their test
//! interfaces, and where the DUT is.
//!
//! ```toml
//! [hosts.sender]
//! ssh = "root@192.0.2.10"     # [user@]host, as ssh takes it (your keys, known_hosts, ~/.ssh/config)
//! interface = "eth1"          # its interface towards the DUT
//! # ssh_options = ["-p", "2222"]
//! # weir = "/usr/local/bin/weir"
//!
//! [hosts.receiver]
//! ssh = "root@192.0.2.11"
//! interface = "eth1"
//!
//! [dut]
//! lan = "eth1"                # this machine's interface towards the sender
//! wan = "eth2"                # and towards the receiver
//! # external = true           # instead: a device the lab does not configure (--dut external)
//!
//! # [wan]                     # optional: the lab's WAN stage on this machine, after the DUT
//! # lan = "eth3"              # from the DUT
//! # wan = "eth4"              # towards the receiver
//! ```
//!
//! Each lab names the hosts it needs (the seed 000 testbed: `sender`, `receiver`; rrul:
//! `client`, `server`). A host the lab does not know, a missing key, a key of the wrong type, or a `[dut]` with both or
//! neither form are errors at `FILE:LINE:COL`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::ssh::SshTarget;
use crate::{Error, Result};

/// A parsed topology file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// The file it was read from.
    pub file: String,
    /// By the lab's role name.
    pub hosts: BTreeMap<String, TopoHost>,
    /// Where the DUT is.
    pub dut: TopoDut,
    /// Where the lab's WAN stage runs (emulated delays, loss, a serial line, a second
    /// router), if anywhere: two interfaces of this machine between the DUT and the
    /// receiver.
    #[serde(default)]
    pub wan: Option<TopoWan>,
}

/// The WAN stage's two interfaces on this machine (`[wan]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopoWan {
    /// Towards the DUT.
    pub lan: String,
    /// Towards the receiver.
    pub wan: String,
}

/// One host of a topology.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopoHost {
    /// How to reach it.
    #[serde(flatten)]
    pub target: SshTarget,
    /// Its test interface (towards the DUT).
    pub interface: String,
    /// `FILE:LINE:COL` of its `interface` key, for errors found when the lab runs.
    #[serde(skip)]
    pub interface_at: String,
}

/// Where the DUT is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopoDut {
    /// On this machine, between two of its interfaces: every DUT spec runs here.
    Local { lan: String, wan: String },
    /// A device the lab does not configure (hardware, or another machine's shaper).
    External,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    hosts: BTreeMap<String, Spanned<RawHost>>,
    dut: Spanned<RawDut>,
    #[serde(default)]
    wan: Option<Spanned<RawWan>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWan {
    lan: String,
    wan: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    ssh: String,
    interface: Spanned<String>,
    #[serde(default)]
    ssh_options: Vec<String>,
    #[serde(default)]
    weir: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDut {
    lan: Option<String>,
    wan: Option<String>,
    #[serde(default)]
    external: bool,
}

/// `FILE:LINE:COL` of byte `offset` in `text` (1-based).
fn at(file: &str, text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{file}:{line}:{col}")
}

impl Topology {
    /// Reads the topology file `file`, for a lab whose hosts are `roles`.
    pub fn read(file: &str, roles: &[&str]) -> Result<Topology> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::io(format!("topology file {file}"), e))?;
        Self::parse(file, &text, roles)
    }

    /// Parses a topology's `text` (read from `file`), for a lab whose hosts are `roles`.
    pub fn parse(file: &str, text: &str, roles: &[&str]) -> Result<Topology> {
        let raw: RawTopology = toml::from_str(text).map_err(|e| {
            Error::Invalid(format!(
                "{}: {}",
                at(file, text, e.span().map_or(0, |s| s.start)),
                e.message().trim()
            ))
        })?;
        let bad = |offset: usize, msg: String| {
            Error::Invalid(format!("{}: {msg}", at(file, text, offset)))
        };
        let mut hosts = BTreeMap::new();
        for (name, h) in &raw.hosts {
            if !roles.contains(&name.as_str()) {
                return Err(bad(
                    h.span().start,
                    format!(
                        "unknown host `{name}`: this lab's hosts are {}",
                        roles.join(", ")
                    ),
                ));
            }
            let h_ref = h.get_ref();
            let ssh = h_ref.ssh.trim();
            if ssh.is_empty() || ssh.starts_with('-') {
                return Err(bad(
                    h.span().start,
                    format!("[hosts.{name}] ssh = {ssh:?}: want [user@]host"),
                ));
            }
            let interface = h_ref.interface.get_ref();
            if let Err(e) = crate::topo::check_ifname(interface) {
                return Err(bad(
                    h_ref.interface.span().start,
                    format!("[hosts.{name}] interface: {e}"),
                ));
            }
            hosts.insert(
                name.clone(),
                TopoHost {
                    target: SshTarget {
                        ssh: ssh.to_string(),
                        ssh_options: h_ref.ssh_options.clone(),
                        weir: h_ref.weir.clone().unwrap_or_else(|| "weir".into()),
                    },
                    interface: interface.clone(),
                    interface_at: at(file, text, h_ref.interface.span().start),
                },
            );
        }
        if let Some(missing) = roles.iter().find(|r| !hosts.contains_key(**r)) {
            return Err(bad(
                0,
                format!(
                    "no [hosts.{missing}]: this lab's hosts are {}",
                    roles.join(", ")
                ),
            ));
        }
        let d = raw.dut.get_ref();
        let dut = match (&d.lan, &d.wan, d.external) {
            (Some(lan), Some(wan), false) => {
                for i in [lan, wan] {
                    if let Err(e) = crate::topo::check_ifname(i) {
                        return Err(bad(raw.dut.span().start, format!("[dut]: {e}")));
                    }
                }
                if lan == wan {
                    return Err(bad(
                        raw.dut.span().start,
                        format!("[dut] lan and wan are both {lan}: want two interfaces"),
                    ));
                }
                TopoDut::Local {
                    lan: lan.clone(),
                    wan: wan.clone(),
                }
            }
            (None, None, true) => TopoDut::External,
            _ => {
                return Err(bad(
                    raw.dut.span().start,
                    "[dut]: want `lan` and `wan` (the DUT runs on this machine between them) \
                     or `external = true` (a device the lab does not configure), not both"
                        .into(),
                ))
            }
        };
        let wan = match &raw.wan {
            None => None,
            Some(w) => {
                let (lan, wan_if) = (&w.get_ref().lan, &w.get_ref().wan);
                let dut_ifs: Vec<&String> = match &dut {
                    TopoDut::Local { lan, wan } => vec![lan, wan],
                    TopoDut::External => Vec::new(),
                };
                for i in [lan, wan_if] {
                    if let Err(e) = crate::topo::check_ifname(i) {
                        return Err(bad(w.span().start, format!("[wan]: {e}")));
                    }
                    if dut_ifs.contains(&i) {
                        return Err(bad(
                            w.span().start,
                            format!("[wan]: {i} is the DUT's interface; want two others"),
                        ));
                    }
                }
                if lan == wan_if {
                    return Err(bad(
                        w.span().start,
                        format!("[wan] lan and wan are both {lan}: want two interfaces"),
                    ));
                }
                Some(TopoWan {
                    lan: lan.clone(),
                    wan: wan_if.clone(),
                })
            }
        };
        Ok(Topology {
            file: file.to_string(),
            hosts,
            dut,
            wan,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLES: [&str; 2] = ["sender", "receiver"];
    const GOOD: &str = "[hosts.sender]\nssh = \"root@h1\"\ninterface = \"eth1\"\n\
        ssh_options = [\"-p\", \"2222\"]\n\n[hosts.receiver]\nssh = \"h2\"\ninterface = \"eth2\"\n\
        weir = \"/opt/weir\"\n\n[dut]\nlan = \"l0\"\nwan = \"w0\"\n";

    #[test]
    fn reads_hosts_and_a_local_dut() {
        let t = Topology::parse("lab.toml", GOOD, &ROLES).unwrap();
        assert_eq!(t.hosts["sender"].target.ssh, "root@h1");
        assert_eq!(t.hosts["sender"].target.ssh_options, ["-p", "2222"]);
        assert_eq!(t.hosts["sender"].target.weir, "weir");
        assert_eq!(t.hosts["sender"].interface_at, "lab.toml:3:13");
        assert_eq!(t.hosts["receiver"].target.weir, "/opt/weir");
        assert_eq!(
            t.dut,
            TopoDut::Local {
                lan: "l0".into(),
                wan: "w0".into()
            }
        );
        let ext = GOOD.replace("lan = \"l0\"\nwan = \"w0\"\n", "external = true\n");
        assert_eq!(
            Topology::parse("lab.toml", &ext, &ROLES).unwrap().dut,
            TopoDut::External
        );
    }

    fn err(text: &str) -> String {
        Topology::parse("lab.toml", text, &ROLES)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn reads_a_wan_stage_and_refuses_a_bad_one() {
        let t = Topology::parse(
            "lab.toml",
            &format!("{GOOD}\n[wan]\nlan = \"w1\"\nwan = \"w2\"\n"),
            &ROLES,
        )
        .unwrap();
        assert_eq!(
            t.wan,
            Some(TopoWan {
                lan: "w1".into(),
                wan: "w2".into()
            })
        );
        assert_eq!(Topology::parse("lab.toml", GOOD, &ROLES).unwrap().wan, None);
        let e = err(&format!("{GOOD}\n[wan]\nlan = \"w0\"\nwan = \"w2\"\n"));
        assert!(
            e.contains("lab.toml:15:1") && e.contains("w0 is the DUT's interface"),
            "{e}"
        );
        let e = err(&format!("{GOOD}\n[wan]\nlan = \"w1\"\nwan = \"w1\"\n"));
        assert!(e.contains("both w1"), "{e}");
        let e = err(&format!("{GOOD}\n[wan]\nlan = \"w1\"\n"));
        assert!(e.contains("lab.toml:15:") && e.contains("wan"), "{e}");
    }

    #[test]
    fn bad_files_are_refused_at_their_line() {
        let e = err(&GOOD.replace("[hosts.receiver]", "[hosts.recv]"));
        assert!(
            e.contains("lab.toml:6:1") && e.contains("unknown host `recv`"),
            "{e}"
        );
        assert!(e.contains("sender, receiver"), "{e}");
        let e = err(&GOOD.replace("interface = \"eth1\"", "interfce = \"eth1\""));
        assert!(e.contains("lab.toml:3:") && e.contains("interfce"), "{e}");
        let e = err(&GOOD.replace("interface = \"eth2\"", "interface = 2"));
        assert!(e.contains("lab.toml:8:"), "{e}");
        let e = err(&GOOD.replace(
            "interface = \"eth1\"",
            "interface = \"an-interface-name-too-long\"",
        ));
        assert!(
            e.contains("lab.toml:3:13") && e.contains("interface"),
            "{e}"
        );
        let e = err(&GOOD.replace("wan = \"w0\"", "external = true"));
        assert!(e.contains("[dut]") && e.contains("not both"), "{e}");
        let e = err(&GOOD.replace("wan = \"w0\"", "wan = \"l0\""));
        assert!(e.contains("both l0"), "{e}");
        let e = err(&GOOD.replace("ssh = \"h2\"", "ssh = \"-oProxyCommand=x\""));
        assert!(e.contains("[user@]host"), "{e}");
        let only_sender = GOOD.replace(
            "[hosts.receiver]\nssh = \"h2\"\ninterface = \"eth2\"\nweir = \"/opt/weir\"\n",
            "",
        );
        let e = err(&only_sender);
        assert!(e.contains("no [hosts.receiver]"), "{e}");
        assert!(err("").contains("missing field"), "{}", err(""));
    }
}
