//! The cost of application awareness (issue 13: "a benchmark of the inspection cost").
//!
//! * **Parsers**, per call: `detect::tcp` on a curl-like request, `detect::udp` on a DNS
//!   query, `http::head` on that request, `tls::client_hello_sni` on a 517-byte
//!   ClientHello (what curl sends, padded), a QUIC client Initial opened and its hello's
//!   name read (RFC 9001 A.2's 1,200-byte packet: keys, header protection, AES-GCM,
//!   frames), and `L7Set::request` judging a request against 16 host/path conditions.
//! * **Through a device** (`Device::observe`: parse, connection tracking, application
//!   tracking and discovery; no queueing), per packet or per connection:
//!   - `steady`: a data packet of one of 1,000 recognised HTTP connections (round-robin):
//!     what every packet pays once its connection's first bytes were read;
//!   - `new_http_l7`: a new connection's SYN and its request, with a policy of 16 layer-7
//!     conditions: recognition, the head read, the conditions judged;
//!   - `new_http`: the same with a policy without layer-7 conditions (recognition only);
//!   - `new_opaque`: the same with a first payload no signature matches.
//!
//!   The differences between the `new_*` lines are what reading the head and judging the
//!   conditions add per connection. Each batch of 10,000 connections runs on a fresh
//!   device (made untimed), so the table never evicts.
//!
//! Run with `cargo bench -p weir-core --bench apps`.
#![allow(clippy::disallowed_methods)] // the benchmark reads the wall clock on purpose

mod common;

use criterion::{Criterion, Throughput};
use std::hint::black_box;
use std::net::Ipv4Addr;
use weir_core::app::l7::{L7Cond, L7Kind, L7Set};
use weir_core::app::{detect, http, quic, tls};
use weir_core::policy::Policy;
use weir_core::{Duration, Instant};
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
use weir_wire::tcp::TcpFlags;

const REQUEST: &[u8] = b"GET /video/2026/clip-0042.mp4?quality=hd HTTP/1.1\r\nHost: media.example.com\r\nUser-Agent: curl/8.14.1\r\nAccept: */*\r\n\r\n";

/// A ClientHello of 517 bytes naming `www.example.org` (after RFC 8446 §4.1.2; padded
/// with the padding extension as curl's is).
fn client_hello() -> Vec<u8> {
    let name = b"www.example.org";
    let mut sni = vec![0, 0];
    let list_len = (name.len() + 3) as u16;
    sni.extend_from_slice(&(list_len + 2).to_be_bytes());
    sni.extend_from_slice(&list_len.to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(32);
    body.extend_from_slice(&[9; 32]);
    body.extend_from_slice(&[0, 6, 0x13, 1, 0x13, 2, 0x13, 3, 1, 0]);
    let pad = 517 - 5 - 4 - body.len() - 2 - sni.len() - 4;
    let mut ext = sni;
    ext.extend_from_slice(&[0, 21]);
    ext.extend_from_slice(&(pad as u16).to_be_bytes());
    ext.resize(ext.len() + pad, 0);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

fn sixteen_conditions() -> L7Set {
    let mut s = L7Set::default();
    for i in 0..8 {
        let c = |kind, p: String| L7Cond {
            kind,
            patterns: vec![p],
        };
        s.intern(c(L7Kind::HttpHost, format!("*.site{i}.example.com")));
        s.intern(c(L7Kind::HttpPath, format!("/app{i}/*")));
    }
    s
}

/// A policy with 16 layer-7 rules (or none), shaping both directions.
fn policy(l7: bool) -> Policy {
    let mut text = String::from(
        "[link]\nrate = \"10Gbit\"\ndirection = \"both\"\ndefault = \"bulk\"\n\
         [[class]]\nname = \"web\"\nrate = \"1Gbit\"\n[[class]]\nname = \"bulk\"\nrate = \"8Gbit\"\n",
    );
    if l7 {
        for i in 0..8 {
            text.push_str(&format!(
                "[[rule]]\nclass = \"web\"\nhttp.host = \"*.site{i}.example.com\"\n\
                 [[rule]]\nclass = \"web\"\nhttp.path = \"/app{i}/*\"\n"
            ));
        }
    } else {
        text.push_str("[[rule]]\nclass = \"web\"\nport = 80\n");
    }
    Policy::parse("bench.toml", &text).unwrap()
}

/// A frame of connection `i` (client 10.x.y.z:40000 → 192.168.1.1:80).
fn frame(i: u32, flags: TcpFlags, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 2048];
    let ip = Ipv4Spec {
        src: Ipv4Addr::from(0x0a00_0000 | i),
        dst: Ipv4Addr::new(192, 168, 1, 1),
        ..Default::default()
    };
    let tcp = TcpSpec {
        src_port: 40000,
        dst_port: 80,
        seq,
        ack: 1,
        flags,
        window: 65535,
        ..Default::default()
    };
    let n = build::tcp_v4_frame(&mut buf, &EthSpec::default(), &ip, &tcp, payload).unwrap();
    buf.truncate(n);
    buf
}

fn parsers(c: &mut Criterion) {
    let mut g = c.benchmark_group("apps/parsers");
    g.throughput(Throughput::Elements(1));
    let mut dns = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in ["www", "example", "com"] {
        dns.push(l.len() as u8);
        dns.extend_from_slice(l.as_bytes());
    }
    dns.extend_from_slice(&[0, 0, 1, 0, 1]);
    let hello = client_hello();
    assert_eq!(hello.len(), 517);
    assert_eq!(
        tls::client_hello_sni(&hello),
        tls::Sni::Name("www.example.org")
    );
    let set = sixteen_conditions();
    assert_eq!(
        set.request("GET", "/app3/x", Some("a.site5.example.com")),
        1 << 10 | 1 << 7
    );
    g.bench_function("detect_tcp_http", |b| {
        b.iter(|| detect::tcp(black_box(REQUEST), true))
    });
    g.bench_function("detect_udp_dns", |b| {
        b.iter(|| detect::udp(black_box(&dns)))
    });
    g.bench_function("http_head", |b| b.iter(|| http::head(black_box(REQUEST))));
    g.bench_function("tls_sni_517B", |b| {
        b.iter(|| tls::client_hello_sni(black_box(&hello)))
    });
    // RFC 9001 A.2's client Initial: keys from its DCID, header protection, AES-GCM over
    // 1,162 bytes, the frames, the hello's name
    let hex = include_str!("../src/app/testdata/rfc9001-a2-client-initial.hex").trim();
    let initial: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let mut scratch = quic::Scratch::default();
    let mut open_initial = |d: &[u8]| {
        let mut n = 0;
        let mut asm = quic::Assembly::default();
        quic::client_initial(d, &mut scratch, &mut None, |o, b| {
            if let quic::Progress::Complete(k) = asm.add(o, b) {
                n = k;
            }
        });
        matches!(tls::handshake_sni(&asm.bytes()[..n]), tls::Sni::Name(_))
    };
    assert!(open_initial(&initial));
    g.bench_function("quic_initial_sni_1200B", |b| {
        b.iter(|| open_initial(black_box(&initial)))
    });
    g.bench_function("l7_request_16_conditions", |b| {
        b.iter(|| {
            set.request(
                black_box("GET"),
                black_box("/video/2026/clip-0042.mp4?quality=hd"),
                black_box(Some("media.example.com")),
            )
        })
    });
    g.finish();
}

fn device(c: &mut Criterion) {
    let mut g = c.benchmark_group("apps/device");
    g.throughput(Throughput::Elements(1));
    // steady state: 1,000 recognised HTTP connections, one data packet each in turn
    let mut d = policy(true).build_device(Instant::ZERO).unwrap();
    let n = 1000u32;
    let now = Instant::ZERO + Duration::from_millis(1);
    for i in 0..n {
        d.observe(&frame(i, TcpFlags::SYN, 0, b""), now);
        d.observe(&frame(i, TcpFlags::ACK, 1, REQUEST), now);
    }
    let data: Vec<Vec<u8>> = (0..n)
        .map(|i| frame(i, TcpFlags::ACK, 1 + REQUEST.len() as u32, &[0x5a; 1448]))
        .collect();
    let mut k = 0usize;
    g.bench_function("steady", |b| {
        b.iter(|| {
            k = (k + 1) % data.len();
            d.observe(black_box(&data[k]), now);
        })
    });
    let r = d.discovery(4, 4).unwrap();
    assert_eq!(
        r.apps[0].name, "http",
        "the benchmark must time recognised connections"
    );
    // new connections: SYN + first payload, per connection, on fresh devices
    const BATCH: u32 = 10_000;
    let syns: Vec<Vec<u8>> = (0..BATCH)
        .map(|i| frame(i, TcpFlags::SYN, 0, b""))
        .collect();
    let reqs: Vec<Vec<u8>> = (0..BATCH)
        .map(|i| frame(i, TcpFlags::ACK, 1, REQUEST))
        .collect();
    let opaque: Vec<Vec<u8>> = (0..BATCH)
        .map(|i| frame(i, TcpFlags::ACK, 1, &[0xa7; REQUEST.len()]))
        .collect();
    for (name, l7, first) in [
        ("new_http_l7", true, &reqs),
        ("new_http", false, &reqs),
        ("new_opaque", true, &opaque),
    ] {
        let pol = policy(l7);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = std::time::Duration::ZERO;
                let mut done = 0u64;
                while done < iters {
                    let mut d = pol.build_device(Instant::ZERO).unwrap();
                    let m = (iters - done).min(u64::from(BATCH)) as usize;
                    let t = std::time::Instant::now();
                    for j in 0..m {
                        d.observe(black_box(&syns[j]), now);
                        d.observe(black_box(&first[j]), now);
                    }
                    total += t.elapsed();
                    done += m as u64;
                }
                total
            })
        });
    }
    g.finish();
}

fn main() {
    let mut c = common::criterion();
    parsers(&mut c);
    device(&mut c);
    c.final_summary();
}
