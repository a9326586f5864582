//! Interfaces and addresses inside the testbed's namespaces: veth pairs, addresses, links
//! up and down, routes, MTU, sysctls (the per-namespace TCP options:
//! `remote::Host::set_tcp_options`).
//!
//! Veth pairs are created directly inside their target namespaces
//! (`ip link add A netns X type veth peer name B netns Y`), so the same short names (`eth0`,
//! `lan0`) can be used in every namespace. Interface names are at most 15 bytes
//! (`IFNAMSIZ - 1`); [`unique_ifname`] makes short names that are unique on the machine for
//! interfaces that must live in a shared namespace (such as the host's).

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use super::netns::{next_counter, Netns};
use crate::sys::{check_output, cmdline, run_cmd};
use crate::{Error, Result};

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;

/// A short interface name, unique on the machine for this process: `w{pid%10000:04}{n}{tag}`
/// (at most 15 bytes while the per-process counter stays below 10^9). Use it for interfaces
/// that live in a shared namespace; inside the testbed's own namespaces plain names do.
pub fn unique_ifname(tag: char) -> String {
    format!(
        "w{:04}{}{}",
        std::process::id() % 10_000,
        next_counter(),
        tag
    )
}

/// A pair of unique interface names for the two ends of one veth: `(…a, …b)`.
pub fn unique_veth_names() -> (String, String) {
    let n = next_counter();
    let p = std::process::id() % 10_000;
    (format!("w{p:04}{n}a"), format!("w{p:04}{n}b"))
}

/// Checks an interface name: 1..=15 bytes, no '/', ':' or whitespace, not "." or "..".
pub fn check_ifname(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > IFNAME_MAX
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace());
    if bad {
        Err(Error::Invalid(format!(
            "interface name {name:?} (1..={IFNAME_MAX} bytes, no '/', ':' or spaces)"
        )))
    } else {
        Ok(())
    }
}

/// Creates a veth pair with end `a_if` in namespace `a` and end `b_if` in `b` (both down).
pub fn link_veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> Result<()> {
    check_ifname(a_if)?;
    check_ifname(b_if)?;
    let a_path = a.path().to_string_lossy().into_owned();
    let b_path = b.path().to_string_lossy().into_owned();
    let args = [
        "link", "add", a_if, "netns", &a_path, "type", "veth", "peer", "name", b_if, "netns",
        &b_path,
    ];
    let out = run_cmd(Command::new("ip").args(args))?;
    check_output(&cmdline("ip", &args), &out)
}

/// Adds an address (`"10.1.1.2/24"`, `"fd00::2/64"`) to an interface. Call it many times for
/// IP aliasing.
pub fn add_addr(ns: &Netns, ifname: &str, cidr: &str) -> Result<()> {
    check_ifname(ifname)?;
    let (addr, _len) = parse_cidr(cidr)?;
    if addr.is_ipv6() {
        // No duplicate address detection: the address is usable at once.
        ns.ip(&["addr", "add", cidr, "dev", ifname, "nodad"])?;
    } else {
        ns.ip(&["addr", "add", cidr, "dev", ifname])?;
    }
    Ok(())
}

/// Brings an interface up.
pub fn set_up(ns: &Netns, ifname: &str) -> Result<()> {
    check_ifname(ifname)?;
    ns.ip(&["link", "set", "dev", ifname, "up"])?;
    Ok(())
}

/// Whether an interface is administratively and operationally up (flags `UP` and
/// `LOWER_UP`, operstate `UP` or `UNKNOWN`).
pub fn is_link_up(ns: &Netns, ifname: &str) -> Result<bool> {
    check_ifname(ifname)?;
    let out = ns.ip(&["-o", "link", "show", "dev", ifname])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let flags = text
        .split_once('<')
        .and_then(|(_, r)| r.split_once('>'))
        .map(|(f, _)| f);
    let Some(flags) = flags else { return Ok(false) };
    let has = |f: &str| flags.split(',').any(|x| x == f);
    let mut words = text.split_whitespace();
    let state = words
        .by_ref()
        .find(|w| *w == "state")
        .and_then(|_| words.next());
    Ok(has("UP") && has("LOWER_UP") && matches!(state, Some("UP") | Some("UNKNOWN")))
}

/// Waits until [`is_link_up`] holds, polling every 5 ms, for at most `timeout`.
pub fn wait_link_up(ns: &Netns, ifname: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if is_link_up(ns, ifname)? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Invalid(format!(
                "{ifname} in {} not operationally up after {timeout:?}",
                ns.name()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Brings an interface down.
pub fn set_down(ns: &Netns, ifname: &str) -> Result<()> {
    check_ifname(ifname)?;
    ns.ip(&["link", "set", "dev", ifname, "down"])?;
    Ok(())
}

/// Sets TCP's minimum retransmission timeout on the route to `dst` through `ifname`
/// (`ip route replace DST dev IFNAME rto_min Nms`): for a prefix route an address made.
pub fn set_rto_min(ns: &Netns, dst: &str, ifname: &str, ms: u64) -> Result<()> {
    check_ifname(ifname)?;
    ns.ip(&[
        "route",
        "replace",
        dst,
        "dev",
        ifname,
        "rto_min",
        &format!("{ms}ms"),
    ])?;
    Ok(())
}

/// Adds a route, written as after `ip route add`: `"10.2.0.0/16 via 10.1.1.1"`,
/// `"default via 10.1.1.1 dev eth0"`.
pub fn add_route(ns: &Netns, route: &str) -> Result<()> {
    let mut args = vec!["route", "add"];
    args.extend(route.split_whitespace());
    if args.len() == 2 {
        return Err(Error::Invalid("empty route".into()));
    }
    ns.ip(&args)?;
    Ok(())
}

/// Sets a sysctl inside the namespace (see [`Netns::set_sysctl`]).
pub fn set_sysctl(ns: &Netns, key: &str, value: &str) -> Result<()> {
    ns.set_sysctl(key, value)
}

/// Sets an interface's MTU.
pub fn set_mtu(ns: &Netns, ifname: &str, mtu: u32) -> Result<()> {
    check_ifname(ifname)?;
    ns.ip(&["link", "set", "dev", ifname, "mtu", &mtu.to_string()])?;
    Ok(())
}

/// Parses `"10.1.1.2/24"` into the address and prefix length.
pub fn parse_cidr(cidr: &str) -> Result<(IpAddr, u8)> {
    let bad = || Error::Invalid(format!("address {cidr:?} (want ADDR/LEN)"));
    let (a, l) = cidr.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    let len: u8 = l.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(bad());
    }
    Ok((addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `set_rto_min` replaces the prefix route an address made with one that carries the
    /// minimum RTO (root only: a namespace of its own).
    #[test]
    fn set_rto_min_puts_the_timeout_on_the_prefix_route() {
        if super::super::skip_unless_root("set_rto_min_puts_the_timeout_on_the_prefix_route") {
            return;
        }
        let ns = Netns::new("rto").unwrap();
        ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
            .unwrap();
        add_addr(&ns, "d0", "10.77.0.1/24").unwrap();
        set_up(&ns, "d0").unwrap();
        set_rto_min(&ns, "10.77.0.0/24", "d0", 1000).unwrap();
        let out = ns.ip(&["route", "show", "dev", "d0"]).unwrap();
        let routes = String::from_utf8_lossy(&out.stdout);
        assert!(
            routes.contains("10.77.0.0/24") && routes.contains("rto_min lock 1s"),
            "{routes}"
        );
        assert!(set_rto_min(&ns, "10.77.0.0/24", "no/such", 1000).is_err());
    }

    #[test]
    fn ifnames_are_short_and_unique() {
        let (a, b) = unique_veth_names();
        assert!(a.len() <= IFNAME_MAX && b.len() <= IFNAME_MAX, "{a} {b}");
        assert_ne!(a, b);
        assert_ne!(unique_ifname('x'), unique_ifname('x'));
        check_ifname(&a).unwrap();
        assert!(check_ifname("0123456789abcdef").is_err());
        assert!(check_ifname("a/b").is_err());
        assert!(check_ifname("").is_err());
    }

    #[test]
    fn cidr_parsing() {
        assert_eq!(
            parse_cidr("10.1.1.2/24").unwrap(),
            ("10.1.1.2".parse().unwrap(), 24)
        );
        assert_eq!(parse_cidr("fd00::1/64").unwrap().1, 64);
        assert!(parse_cidr("10.1.1.2").is_err());
        assert!(parse_cidr("10.1.1.2/33").is_err());
    }
}
