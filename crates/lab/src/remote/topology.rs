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
//!
//! `weir lab diffserv`'s chain of routers ([`Topology::read_chain`]) has no `[dut]` and
//! no `[wan]` but one `[[router]]` per router, ingress first, each on this machine:
//!
//! ```toml
//! [[router]]
//! lan = "eth1"                # from host A (from the previous router)
//! background = "eth2"         # from its background host; the lab bridges it with lan
//! wan = "eth3"                # towards the next router (host B)
//! ```

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
    /// A chain of routers on this machine, ingress first (`[[router]]`, only for the labs
    /// that read one: [`Topology::read_chain`]).
    Chain { routers: Vec<TopoRouter> },
}

/// One router of a chain (`[[router]]`): it forwards from `lan` to `wan`; with
/// `background`, what arrives there joins `lan`'s traffic (the lab bridges the two).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopoRouter {
    pub lan: String,
    pub wan: String,
    #[serde(default)]
    pub background: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    hosts: BTreeMap<String, Spanned<RawHost>>,
    #[serde(default)]
    dut: Option<Spanned<RawDut>>,
    #[serde(default)]
    wan: Option<Spanned<RawWan>>,
    #[serde(default)]
    router: Vec<Spanned<RawRouter>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouter {
    lan: String,
    wan: String,
    #[serde(default)]
    background: Option<String>,
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
        Self::parse_with(file, text, roles, None)
    }

    /// Reads a chain's topology file `file` (`weir lab diffserv`): hosts `roles` and
    /// exactly `routers` `[[router]]` tables, no `[dut]` or `[wan]`.
    pub fn read_chain(file: &str, roles: &[&str], routers: usize) -> Result<Topology> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::io(format!("topology file {file}"), e))?;
        Self::parse_with(file, &text, roles, Some(routers))
    }

    /// The routers of a chain (empty for any other topology).
    pub fn routers(&self) -> &[TopoRouter] {
        match &self.dut {
            TopoDut::Chain { routers } => routers,
            _ => &[],
        }
    }

    /// [`Topology::parse`], or with `chain` = `Some(n)` a chain's topology of `n` routers.
    pub fn parse_with(
        file: &str,
        text: &str,
        roles: &[&str],
        chain: Option<usize>,
    ) -> Result<Topology> {
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
        if let Some(n) = chain {
            return Self::chain(file, text, raw, hosts, n);
        }
        if let Some(r) = raw.router.first() {
            return Err(bad(
                r.span().start,
                "[[router]]: a chain of routers is for weir lab diffserv; this lab wants one \
                 [dut]"
                    .into(),
            ));
        }
        let Some(raw_dut) = &raw.dut else {
            return Err(bad(
                0,
                "no [dut]: want `lan` and `wan` (the DUT runs on this machine between them) \
                 or `external = true`"
                    .into(),
            ));
        };
        let d = raw_dut.get_ref();
        let dut = match (&d.lan, &d.wan, d.external) {
            (Some(lan), Some(wan), false) => {
                for i in [lan, wan] {
                    if let Err(e) = crate::topo::check_ifname(i) {
                        return Err(bad(raw_dut.span().start, format!("[dut]: {e}")));
                    }
                }
                if lan == wan {
                    return Err(bad(
                        raw_dut.span().start,
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
                    raw_dut.span().start,
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
                    _ => Vec::new(),
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

    /// The rest of [`Topology::parse_with`] for a chain of `n` routers.
    fn chain(
        file: &str,
        text: &str,
        raw: RawTopology,
        hosts: BTreeMap<String, TopoHost>,
        n: usize,
    ) -> Result<Topology> {
        let bad = |offset: usize, msg: String| {
            Error::Invalid(format!("{}: {msg}", at(file, text, offset)))
        };
        let want = format!(
            "this lab runs a chain of {n} routers on this machine: one [[router]] each \
             (lan, wan, background), ingress first"
        );
        if let Some(d) = &raw.dut {
            return Err(bad(d.span().start, format!("[dut]: {want}, and no [dut]")));
        }
        if let Some(w) = &raw.wan {
            return Err(bad(w.span().start, format!("[wan]: {want}, and no [wan]")));
        }
        if raw.router.len() != n {
            let at_ = raw.router.get(n).map_or(0, |r| r.span().start);
            return Err(bad(
                at_,
                format!("{} [[router]] tables: {want}", raw.router.len()),
            ));
        }
        let mut seen: Vec<&str> = Vec::new();
        let mut routers = Vec::new();
        for (i, r) in raw.router.iter().enumerate() {
            let g = r.get_ref();
            for name in [Some(&g.lan), Some(&g.wan), g.background.as_ref()]
                .into_iter()
                .flatten()
            {
                if let Err(e) = crate::topo::check_ifname(name) {
                    return Err(bad(r.span().start, format!("[[router]] {i}: {e}")));
                }
                if seen.contains(&name.as_str()) {
                    return Err(bad(
                        r.span().start,
                        format!(
                            "[[router]] {i}: {name} is named twice; every router's lan, wan \
                             and background are interfaces of their own"
                        ),
                    ));
                }
                seen.push(name);
            }
            routers.push(TopoRouter {
                lan: g.lan.clone(),
                wan: g.wan.clone(),
                background: g.background.clone(),
            });
        }
        Ok(Topology {
            file: file.to_string(),
            hosts,
            dut: TopoDut::Chain { routers },
            wan: None,
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
        let no_dut = GOOD.replace("[dut]\nlan = \"l0\"\nwan = \"w0\"\n", "");
        assert!(err(&no_dut).contains("no [dut]"), "{}", err(&no_dut));
        let e = err(&format!("{no_dut}[[router]]\nlan = \"a\"\nwan = \"b\"\n"));
        assert!(
            e.contains("lab.toml:11:1") && e.contains("weir lab diffserv"),
            "{e}"
        );
    }

    const CHAIN: &str = "[hosts.sender]\nssh = \"h1\"\ninterface = \"eth1\"\n\
        [hosts.receiver]\nssh = \"h2\"\ninterface = \"eth1\"\n\
        [[router]]\nlan = \"r0l\"\nbackground = \"r0b\"\nwan = \"r0w\"\n\
        [[router]]\nlan = \"r1l\"\nwan = \"r1w\"\n";

    #[test]
    fn reads_a_chain_of_routers_and_refuses_a_bad_one() {
        let chain = |text: &str, n| Topology::parse_with("c.toml", text, &ROLES, Some(n));
        let t = chain(CHAIN, 2).unwrap();
        assert_eq!(t.routers().len(), 2);
        assert_eq!(t.routers()[0].background.as_deref(), Some("r0b"));
        assert_eq!(t.routers()[1].background, None);
        assert_eq!(t.routers()[1].wan, "r1w");
        let e = chain(CHAIN, 3).unwrap_err().to_string();
        assert!(
            e.contains("2 [[router]] tables") && e.contains("chain of 3"),
            "{e}"
        );
        let e = chain(&CHAIN.replace("r1w", "r0b"), 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("c.toml:11:1") && e.contains("r0b is named twice"),
            "{e}"
        );
        let e = chain(&format!("{CHAIN}[dut]\nexternal = true\n"), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[dut]: this lab runs a chain"), "{e}");
        let e = chain(&CHAIN.replace("lan = \"r1l\"", "lan = \"r1l\"\nmtu = 1"), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml:") && e.contains("mtu"), "{e}");
        // and a one-DUT lab refuses the chain
        let e = Topology::parse("c.toml", CHAIN, &ROLES)
            .unwrap_err()
            .to_string();
        assert!(e.contains("weir lab diffserv"), "{e}");
    }
}
