use super::*;
use crate::app::tls::{handshake_sni, tests as tls, Sni};
use aes_gcm::aead::AeadInPlace;

pub(crate) fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A varint in its 1-, 2-, 4- or 8-byte form (RFC 9000 §16), the shortest that fits.
pub(crate) fn put_varint(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=63 => out.push(v as u8),
        64..=16383 => out.extend_from_slice(&(0x4000 | v as u16).to_be_bytes()),
        16384..=0x3fff_ffff => out.extend_from_slice(&(0x8000_0000 | v as u32).to_be_bytes()),
        _ => out.extend_from_slice(&(0xc000_0000_0000_0000 | v).to_be_bytes()),
    }
}

/// A CRYPTO frame carrying `data` at `offset`.
pub(crate) fn crypto_frame(offset: u64, data: &[u8]) -> Vec<u8> {
    let mut f = vec![0x06];
    put_varint(&mut f, offset);
    put_varint(&mut f, data.len() as u64);
    f.extend_from_slice(data);
    f
}

/// A client Initial packet of `size` bytes (the frames, then PADDING) protected as RFC
/// 9001 §5 says: what a client sends, built the other way round from [`client_initial`].
pub(crate) fn seal(version: u32, dcid: &[u8], pn: u32, frames: &[u8], size: usize) -> Vec<u8> {
    seal_as(version, (dcid, dcid), pn, frames, size)
}

/// As [`seal`], with the keys of the first DCID and the second in the header: a client's
/// Initial after it switched to the server's connection id (RFC 9001 §5.2).
pub(crate) fn seal_as(
    version: u32,
    (keys_of, dcid): (&[u8], &[u8]),
    pn: u32,
    frames: &[u8],
    size: usize,
) -> Vec<u8> {
    let keys = client_keys(version, keys_of).unwrap();
    let ty: u8 = if version == V2 { 1 } else { 0 };
    let mut h = vec![0xc0 | (ty << 4) | 3]; // 4-byte packet number
    h.extend_from_slice(&version.to_be_bytes());
    h.push(dcid.len() as u8);
    h.extend_from_slice(dcid);
    h.push(0); // SCID
    h.push(0); // token
    let payload_len = size - (h.len() + 2 + 4) - TAG_LEN;
    assert!(frames.len() <= payload_len, "frames do not fit");
    h.extend_from_slice(&(0x4000 | (4 + payload_len + TAG_LEN) as u16).to_be_bytes());
    let pn_at = h.len();
    h.extend_from_slice(&pn.to_be_bytes());
    let mut payload = frames.to_vec();
    payload.resize(payload_len, 0);
    let mut nonce = keys.iv;
    for (i, b) in u64::from(pn).to_be_bytes().iter().enumerate() {
        nonce[4 + i] ^= b;
    }
    let aead = Aes128Gcm::new_from_slice(&keys.key).unwrap();
    let tag = aead
        .encrypt_in_place_detached(GenericArray::from_slice(&nonce), &h, &mut payload)
        .unwrap();
    let mut p = h;
    p.extend_from_slice(&payload);
    p.extend_from_slice(&tag);
    let hp = Aes128::new_from_slice(&keys.hp).unwrap();
    let mut mask = GenericArray::clone_from_slice(&p[pn_at + 4..pn_at + 4 + SAMPLE_LEN]);
    hp.encrypt_block(&mut mask);
    p[0] ^= mask[0] & 0x0f;
    for i in 0..4 {
        p[pn_at + i] ^= mask[1 + i];
    }
    assert_eq!(p.len(), size);
    p
}

/// The CRYPTO fragments of a datagram, and what was read.
fn fragments(d: &[u8]) -> (Vec<(u64, Vec<u8>)>, Read) {
    let mut out = Vec::new();
    let r = client_initial(d, &mut Scratch::default(), &mut None, |o, b| {
        out.push((o, b.to_vec()))
    });
    (out, r)
}

const DCID: &str = "8394c8f03e515708";

/// RFC 9001 A.2 / RFC 9369 A.2: the ClientHello in the CRYPTO frame of the sample packet.
const RFC_HELLO: &str =
    "010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c
    00000413011302010000c000000010000e00000b6578616d706c652e636f6dff01000100000a
    00080006001d0017001800100007000504616c706e000500050100000000003300260024001d
    00209370b2c9caa47fbabaf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b0003
    020304000d0010000e0403050306030203080408050806002d00020101001c00024001003900
    320408ffffffffffffffff05048000ffff07048000ffff0801100104800075300901100f0883
    94c8f03e51570806048000ffff";

#[test]
fn initial_keys_of_rfc9001_a1_and_rfc9369_a1() {
    let k = client_keys(V1, &unhex(DCID)).unwrap();
    assert_eq!(k.key.to_vec(), unhex("1f369613dd76d5467730efcbe3b1a22d"));
    assert_eq!(k.iv.to_vec(), unhex("fa044b2f42a3fd3b46fb255c"));
    assert_eq!(k.hp.to_vec(), unhex("9f50449e04a0e810283a1e9933adedd2"));
    let k = client_keys(V2, &unhex(DCID)).unwrap();
    assert_eq!(k.key.to_vec(), unhex("8b1a0bc121284290a29e0971b5cd045d"));
    assert_eq!(k.iv.to_vec(), unhex("91f73e2351d8fa91660e909f"));
    assert_eq!(k.hp.to_vec(), unhex("45b95e15235d6f45a6b19cbcb0294ba9"));
    assert_eq!(client_keys(2, &unhex(DCID)), None);
}

#[test]
fn the_rfc_sample_packets_open_to_their_client_hello() {
    for (name, hex) in [
        (
            "RFC 9001 A.2",
            include_str!("../testdata/rfc9001-a2-client-initial.hex"),
        ),
        (
            "RFC 9369 A.2",
            include_str!("../testdata/rfc9369-a2-client-initial.hex"),
        ),
    ] {
        let d = unhex(hex);
        assert_eq!(d.len(), 1200, "{name}");
        let (frags, r) = fragments(&d);
        assert_eq!(
            r,
            Read {
                opened: 1,
                failed: 0
            },
            "{name}"
        );
        assert_eq!(frags, vec![(0, unhex(RFC_HELLO))], "{name}");
        assert_eq!(
            handshake_sni(&frags[0].1),
            Sni::Name("example.com"),
            "{name}"
        );
        // one bit changed anywhere after the header: the packet does not authenticate
        for at in [30, 600, 1199] {
            let mut bad = d.clone();
            bad[at] ^= 0x10;
            let (frags, r) = fragments(&bad);
            assert_eq!(
                (frags.len(), r.opened, r.failed),
                (0, 0, 1),
                "{name} byte {at}"
            );
        }
    }
}

#[test]
fn varints_of_rfc9000_a1() {
    // RFC 9000 A.1's examples
    assert_eq!(
        varint(&unhex("c2197c5eff14e88c")),
        Some((151_288_809_941_952_652, 8))
    );
    assert_eq!(varint(&unhex("9d7f3e7d")), Some((494_878_333, 4)));
    assert_eq!(varint(&unhex("7bbd")), Some((15_293, 2)));
    assert_eq!(varint(&unhex("25")), Some((37, 1)));
    assert_eq!(varint(&unhex("4025")), Some((37, 2)));
    assert_eq!(varint(&unhex("9d7f3e")), None);
}

#[test]
fn a_hello_split_over_packets_and_shuffled_is_assembled() {
    let rec = tls::hello(&tls::sni_ext(b"video.example.net"));
    let msg = &rec[5..]; // the bare handshake message, as QUIC carries it
    let dcid = [0x11; 8];
    // Chromium-like: the message cut in four, sent over two packets out of order, with
    // PING and PADDING between the fragments
    let cut = [0, 20, msg.len() / 2, msg.len() - 7, msg.len()];
    let piece = |i: usize| crypto_frame(cut[i] as u64, &msg[cut[i]..cut[i + 1]]);
    let mut f1 = piece(2);
    f1.push(0x01);
    f1.extend(piece(0));
    let mut f2 = vec![0, 0, 0];
    f2.extend(piece(3));
    f2.extend(piece(1));
    f2.extend(piece(0)); // a retransmitted piece
    let mut asm = Assembly::default();
    let mut said = Vec::new();
    for (pn, frames) in [(0, &f1), (1, &f2)] {
        let d = seal(V1, &dcid, pn, frames, 1200);
        let (frags, r) = fragments(&d);
        assert_eq!(
            r,
            Read {
                opened: 1,
                failed: 0
            }
        );
        said.extend(frags.iter().map(|(o, b)| asm.add(*o, b)));
    }
    // complete once the last missing piece (piece 1) came; the retransmission after it
    // changes nothing
    let done = Progress::Complete(msg.len());
    let m = Progress::More;
    assert_eq!(said, vec![m, m, m, done, done]);
    assert_eq!(
        handshake_sni(&asm.bytes()[..msg.len()]),
        Sni::Name("video.example.net")
    );
}

#[test]
fn coalesced_packets_and_other_bytes() {
    let hello = crypto_frame(0, &tls::hello(&tls::sni_ext(b"a.example"))[5..]);
    let init = seal(V2, &[7; 20], 0, &hello, 700);
    // a v2 0-RTT packet (type 2) after it, skipped by its length; then padding zeros
    let mut d = init.clone();
    let mut zero_rtt = vec![0xe0, 0x6b, 0x33, 0x43, 0xcf, 1, 9, 0];
    put_varint(&mut zero_rtt, 30);
    zero_rtt.extend_from_slice(&[0xab; 30]);
    d.extend_from_slice(&zero_rtt);
    d.extend(init.iter().map(|_| 0)); // padding to past 1200
    let (frags, r) = fragments(&d);
    assert_eq!(
        r,
        Read {
            opened: 1,
            failed: 0
        }
    );
    assert_eq!(frags.len(), 1);
    // a short header, a v1 Handshake-type packet alone, an unknown version: nothing
    for d in [
        vec![0x40; 1200],
        seal(V1, &[1; 8], 0, &hello, 1200)
            .iter()
            .enumerate()
            .map(|(i, &b)| if i == 0 { b | 0x20 } else { b })
            .collect(),
        {
            let mut x = init.clone();
            x[1..5].copy_from_slice(&0xff00_001du32.to_be_bytes());
            x
        },
    ] {
        let (frags, r) = fragments(&d);
        assert!(frags.is_empty() && r.opened == 0, "{r:?}");
    }
}

/// After the server's first reply the client sends to the server's connection id but
/// keeps the keys of its first one: such a packet opens with the keys the first one
/// gave, not with its own DCID's.
#[test]
fn a_later_initial_opens_with_the_first_packets_keys() {
    let (first, server) = ([5u8; 8], [6u8; 4]);
    let hello = crypto_frame(0, b"\x01\x00\x00\x05hello");
    let later = seal_as(V1, (&first, &server), 4, &hello, 1200);
    let mut sc = Scratch::default();
    let mut keys = None;
    let r = client_initial(&later, &mut sc, &mut keys, |_, _| {});
    assert_eq!(
        (r, keys.is_none()),
        (
            Read {
                opened: 0,
                failed: 1
            },
            true
        )
    );
    let r = client_initial(
        &seal(V1, &first, 0, &[1], 1200),
        &mut sc,
        &mut keys,
        |_, _| {},
    );
    assert_eq!(
        r,
        Read {
            opened: 1,
            failed: 0
        }
    );
    assert_eq!(keys, client_keys(V1, &first));
    let mut got = Vec::new();
    let r = client_initial(&later, &mut sc, &mut keys, |o, b| got.push((o, b.to_vec())));
    assert_eq!(
        r,
        Read {
            opened: 1,
            failed: 0
        }
    );
    assert_eq!(got, vec![(0, b"\x01\x00\x00\x05hello".to_vec())]);
}

/// A forged datagram of many tiny coalesced "Initials" costs at most MAX_INITIALS tries
/// (and packets too short for the protection sample cost no key derivation); a packet
/// with another DCID than the first is skipped.
#[test]
fn forged_datagrams_cost_little() {
    // the least an Initial with an 8-byte DCID can be and still hold a sample: 20 bytes
    // after the packet number's start
    let mut tiny = vec![0xc3, 0, 0, 0, 1, 8, 9, 9, 9, 9, 9, 9, 9, 9, 0, 0];
    put_varint(&mut tiny, 20);
    tiny.extend_from_slice(&[0x33; 20]);
    let d: Vec<u8> = tiny.iter().copied().cycle().take(tiny.len() * 10).collect();
    let (frags, r) = fragments(&d);
    assert!(frags.is_empty());
    assert_eq!(
        r,
        Read {
            opened: 0,
            failed: MAX_INITIALS
        }
    );
    // too short for a sample: refused before anything is derived
    let mut short = vec![0xc3, 0, 0, 0, 1, 8, 9, 9, 9, 9, 9, 9, 9, 9, 0, 0];
    put_varint(&mut short, 10);
    short.extend_from_slice(&[0x33; 10]);
    assert_eq!(
        fragments(&short).1,
        Read {
            opened: 0,
            failed: 1
        }
    );
    // two real Initials in one datagram: with the same DCID both open, with another the
    // second is skipped
    let h = crypto_frame(0, b"\x01");
    for (second, opened) in [([1; 8], 2), ([2; 8], 1)] {
        let mut d = seal(V1, &[1; 8], 0, &h, 600);
        d.extend(seal(V1, &second, 1, &h, 600));
        assert_eq!(fragments(&d).1, Read { opened, failed: 0 }, "{second:?}");
    }
}

#[test]
fn assembly_limits() {
    let mut a = Assembly::default();
    // a handshake header announcing more than MAX_HELLO
    assert_eq!(a.add(0, &[1, 0xff, 0xff, 0xff]), Progress::TooBig);
    a.clear();
    assert_eq!(a.add((MAX_HELLO as u64) + 1, &[0; 4]), Progress::TooBig);
    a.clear();
    // pieces that never touch: more than MAX_PIECES is given up on
    let mut last = Progress::More;
    for i in 0..=MAX_PIECES as u64 {
        last = a.add(10 + 3 * i, &[9]);
    }
    assert_eq!(last, Progress::TooBig);
    // overlapping and nested pieces merge
    a.clear();
    assert_eq!(a.add(4, &[5; 6]), Progress::More);
    assert_eq!(a.add(6, &[5; 2]), Progress::More);
    assert_eq!(a.add(0, &[1, 0, 0, 6]), Progress::Complete(10));
    assert_eq!(a.have, vec![(0, 10)]);
}

proptest::proptest! {
    #[test]
    fn arbitrary_datagrams_never_panic(
        data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1400),
        head in 0usize..3,
    ) {
        // random bytes, and random bytes behind a plausible v1 / v2 Initial header
        let mut d = match head {
            0 => vec![],
            1 => vec![0xc3, 0, 0, 0, 1, 8],
            _ => vec![0xd3, 0x6b, 0x33, 0x43, 0xcf, 4],
        };
        d.extend_from_slice(&data);
        let _ = fragments(&d);
    }

    #[test]
    fn sealed_fragments_come_back(
        sni in "[a-z]{1,20}\\.example",
        cut in 1usize..200,
        v2 in proptest::prelude::any::<bool>(),
        dcid in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=20),
    ) {
        let rec = tls::hello(&tls::sni_ext(sni.as_bytes()));
        let msg = &rec[5..];
        let cut = cut.min(msg.len() - 1);
        // the second half first
        let mut frames = crypto_frame(cut as u64, &msg[cut..]);
        frames.extend(crypto_frame(0, &msg[..cut]));
        let version = if v2 { V2 } else { V1 };
        let (frags, r) = fragments(&seal(version, &dcid, 3, &frames, 1200));
        proptest::prop_assert_eq!(r, Read { opened: 1, failed: 0 });
        let mut a = Assembly::default();
        let mut p = Progress::More;
        for (o, b) in frags {
            p = a.add(o, &b);
        }
        proptest::prop_assert_eq!(p, Progress::Complete(msg.len()));
        proptest::prop_assert_eq!(handshake_sni(a.bytes()), Sni::Name(&sni));
    }
}
