//! QUIC Initial packets: the TLS ClientHello a QUIC client's first packets carry, read as
//! any on-path observer can (the `tls.sni` rules for HTTP/3 and other QUIC traffic).
//!
//! Initial packets are encrypted, but with keys anyone can derive: RFC 9001 §5.2 takes
//! them from the client's Destination Connection ID and a published salt (they protect
//! against off-path tampering, not against a middlebox). [`client_initial`] reads one UDP
//! datagram:
//! * every Initial packet in it (RFC 9000 §12.2 coalesced packets; another long-header
//!   packet is skipped by its Length, a short header ends the datagram), QUIC v1 (RFC
//!   9000) and v2 (RFC 9369: version 0x6b3343cf, Initial type 1, its own salt and
//!   labels);
//! * the long header (§17.2.2): first byte, version, DCID and SCID (≤ 20 bytes each),
//!   token, Length, packet number;
//! * the keys (RFC 9001 §5.2, §5.1): `initial_secret = HKDF-Extract(salt, DCID)`,
//!   `client_secret = HKDF-Expand-Label(initial_secret, "client in", "", 32)`, then key
//!   (16 bytes), iv (12) and hp (16) by the labels "quic key", "quic iv", "quic hp"
//!   ("quicv2 …" in v2); HKDF-Expand-Label is RFC 8446 §7.1's, hash SHA-256;
//! * header protection removed (§5.4): `mask = AES-128(hp, sample)`, the sample being the
//!   16 bytes 4 after the packet number's start; the first byte's low 4 bits and the
//!   packet number's bytes are XORed with the mask;
//! * the payload opened with AEAD_AES_128_GCM (§5.3): nonce = iv XOR the packet number,
//!   associated data = the unprotected header; a packet that does not authenticate
//!   (under keys of another DCID than the ones tried, corrupted, or not QUIC) is skipped;
//! * the frames (RFC 9000 §19; an Initial carries PADDING, PING, ACK, CRYPTO and
//!   CONNECTION_CLOSE): each CRYPTO frame's offset and bytes go to the caller.
//!
//! Packet numbers are taken as sent (truncated): right for a client's first flight,
//! which numbers from 0. The datagram is never written (it is forwarded as it came); the
//! plaintext goes to a caller's reusable buffer ([`Scratch`]), so nothing is allocated
//! once that has grown. Cost per datagram: the keys once (5 HMAC-SHA256: one extract,
//! four expands), then per Initial packet (at most [`MAX_INITIALS`]) one AES block and
//! AES-GCM over the packet (about 1,200 bytes); the header is checked to hold the
//! protection sample before anything is derived.
//!
//! [`Assembly`] puts the ClientHello together from CRYPTO fragments in any order and
//! across packets: Chromium's ClientHello (post-quantum key share) spans two Initial
//! packets, cut into fragments it sends out of order ("chaos protection"). At most
//! [`MAX_HELLO`] bytes and [`MAX_PIECES`] disjoint pieces; more is given up on.

use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::aes::cipher::BlockEncrypt;
use aes_gcm::aes::Aes128;
use aes_gcm::{Aes128Gcm, KeyInit};
use hkdf::Hkdf;
use sha2::Sha256;

pub use super::tls::MAX_HELLO;

/// QUIC version 1 (RFC 9000).
pub const V1: u32 = 1;
/// QUIC version 2 (RFC 9369).
pub const V2: u32 = 0x6b33_43cf;
/// Disjoint pieces an [`Assembly`] keeps before it gives up.
pub const MAX_PIECES: usize = 32;

const SALT_V1: [u8; 20] = [
    0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad,
    0xcc, 0xbb, 0x7f, 0x0a,
];
const SALT_V2: [u8; 20] = [
    0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb,
    0xf9, 0xbd, 0x2e, 0xd9,
];
const TAG_LEN: usize = 16;
const SAMPLE_LEN: usize = 16;

/// The client's Initial keys of one connection (RFC 9001 §5.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    pub key: [u8; 16],
    pub iv: [u8; 12],
    pub hp: [u8; 16],
}

/// HKDF-Expand-Label(secret, label, "", out.len()) (RFC 8446 §7.1) with SHA-256.
fn expand_label(secret: &Hkdf<Sha256>, label: &str, out: &mut [u8]) {
    let mut info = [0u8; 2 + 1 + 6 + 32 + 1];
    let full = 6 + label.len();
    info[..2].copy_from_slice(&(out.len() as u16).to_be_bytes());
    info[2] = full as u8;
    info[3..9].copy_from_slice(b"tls13 ");
    info[9..9 + label.len()].copy_from_slice(label.as_bytes());
    info[9 + label.len()] = 0; // empty context
                               // the lengths here (≤ 32 bytes out) are far below HKDF's limit of 255 × 32
    secret
        .expand(&info[..3 + full + 1], out)
        .expect("HKDF output within limits");
}

/// The client's Initial keys for `dcid` under `version` (`None`: not v1 or v2).
pub fn client_keys(version: u32, dcid: &[u8]) -> Option<Keys> {
    // the labels of key, iv and hp
    let (salt, labels) = match version {
        V1 => (&SALT_V1, ["quic key", "quic iv", "quic hp"]),
        V2 => (&SALT_V2, ["quicv2 key", "quicv2 iv", "quicv2 hp"]),
        _ => return None,
    };
    let (_, initial) = Hkdf::<Sha256>::extract(Some(salt), dcid);
    let mut client = [0u8; 32];
    expand_label(&initial, "client in", &mut client);
    let secret = Hkdf::<Sha256>::from_prk(&client).expect("a 32-byte PRK");
    let mut k = Keys {
        key: [0; 16],
        iv: [0; 12],
        hp: [0; 16],
    };
    expand_label(&secret, labels[0], &mut k.key);
    expand_label(&secret, labels[1], &mut k.iv);
    expand_label(&secret, labels[2], &mut k.hp);
    Some(k)
}

/// A QUIC variable-length integer (RFC 9000 §16) at the start of `b`: value and length.
pub fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let n = 1usize << (first >> 6);
    let bytes = b.get(..n)?;
    let mut v = u64::from(first & 0x3f);
    for &x in &bytes[1..] {
        v = (v << 8) | u64::from(x);
    }
    Some((v, n))
}

/// Buffers [`client_initial`] reuses between calls.
#[derive(Default)]
pub struct Scratch {
    header: Vec<u8>,
    plain: Vec<u8>,
}

/// What one datagram held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Read {
    /// Initial packets opened.
    pub opened: u32,
    /// Initial packets that did not open (not authentic under the keys tried, or too
    /// short), or opened to malformed frames.
    pub failed: u32,
}

/// Initial packets of one datagram tried at most (a client coalesces one or two; more
/// only multiplies the work a forged datagram costs).
pub const MAX_INITIALS: u32 = 4;

/// The Initial packets of `datagram` (see the module comment): `crypto(offset, bytes)` for
/// each CRYPTO frame of each packet that opens, in the order they come.
///
/// `keys` are the connection's Initial keys if known: a client keeps the keys of its
/// first Destination Connection ID when it switches to the server's (RFC 9001 §5.2), so a
/// retransmitted part of its hello after the server's first reply opens only with them.
/// They are tried first; then the keys of the packet's own DCID (derived once per
/// datagram: coalesced packets share the DCID, RFC 9000 §12.2, and a packet with another
/// one is skipped). When `keys` is `None`, it gets the keys of the first packet that
/// opens.
pub fn client_initial(
    datagram: &[u8],
    scratch: &mut Scratch,
    keys: &mut Option<Keys>,
    mut crypto: impl FnMut(u64, &[u8]),
) -> Read {
    let mut read = Read::default();
    let mut rest = datagram;
    let mut dcid_seen: Option<&[u8]> = None;
    let mut derived: Option<Option<Keys>> = None;
    // the loop ends at a short header, padding (zeros), or anything unreadable; 7 bytes
    // is the least a long header's version and connection id lengths take
    while rest.len() > 7 && rest[0] & 0x80 != 0 && read.opened + read.failed < MAX_INITIALS {
        let Some((end, header)) = packet_span(rest) else {
            break;
        };
        let p = &rest[..end];
        rest = &rest[end..];
        let Some(h) = header else {
            continue;
        };
        // the header protection sample must be there: checked before any key is derived
        if p.len() < h.pn_at + 4 + SAMPLE_LEN {
            read.failed += 1;
            continue;
        }
        if dcid_seen.is_some_and(|d| d != h.dcid) {
            continue;
        }
        dcid_seen = Some(h.dcid);
        let mut opened = keys.as_ref().is_some_and(|k| open(p, &h, k, scratch));
        if !opened {
            let own = derived.get_or_insert_with(|| client_keys(h.version, h.dcid));
            if let Some(k) = own.as_ref().filter(|k| keys.as_ref() != Some(*k)) {
                opened = open(p, &h, k, scratch);
                if opened && keys.is_none() {
                    *keys = Some(k.clone());
                }
            }
        }
        if !opened {
            read.failed += 1;
            continue;
        }
        read.opened += 1;
        if frames(&scratch.plain, &mut crypto).is_none() {
            read.failed += 1;
        }
    }
    read
}

/// The version and the DCID of a long-header packet, and the offset of its token length.
fn long_header(p: &[u8]) -> Option<(u32, &[u8], usize)> {
    let version = u32::from_be_bytes(p.get(1..5)?.try_into().ok()?);
    let dlen = usize::from(*p.get(5)?);
    if dlen > 20 {
        return None;
    }
    let dcid = p.get(6..6 + dlen)?;
    let slen = usize::from(*p.get(6 + dlen)?);
    if slen > 20 {
        return None;
    }
    Some((version, dcid, 7 + dlen + slen))
}

fn is_initial(first: u8, version: u32) -> bool {
    let ty = (first >> 4) & 3;
    matches!((version, ty), (V1, 0) | (V2, 1))
}

/// What opening an Initial packet needs of its header.
struct Header<'a> {
    version: u32,
    dcid: &'a [u8],
    /// Where the (protected) packet number starts.
    pn_at: usize,
}

/// The length of the long-header packet at the start of `p` and, for an Initial of v1
/// or v2, its header (`None`: unreadable, or a version whose lengths are unknown).
fn packet_span(p: &[u8]) -> Option<(usize, Option<Header<'_>>)> {
    let (version, dcid, mut pos) = long_header(p)?;
    if version != V1 && version != V2 {
        return None;
    }
    let initial = is_initial(p[0], version);
    let retry = matches!((version, (p[0] >> 4) & 3), (V1, 3) | (V2, 0));
    if retry {
        return Some((p.len(), None)); // a Retry fills the rest of its datagram
    }
    if initial {
        let (token, n) = varint(p.get(pos..)?)?;
        pos = pos
            .checked_add(n)?
            .checked_add(usize::try_from(token).ok()?)?;
    }
    let (len, n) = varint(p.get(pos..)?)?;
    let pn_at = pos + n;
    let end = pn_at.checked_add(usize::try_from(len).ok()?)?;
    let header = initial.then_some(Header {
        version,
        dcid,
        pn_at,
    });
    (end <= p.len()).then_some((end, header))
}

/// Remove the header protection of the Initial packet `p` (its header `h`, the sample
/// checked to be there) with `keys` and open its payload into `scratch.plain`: whether it
/// authenticated.
fn open(p: &[u8], h: &Header<'_>, keys: &Keys, scratch: &mut Scratch) -> bool {
    let pn_at = h.pn_at;
    let sample = &p[pn_at + 4..pn_at + 4 + SAMPLE_LEN];
    let Ok(hp) = Aes128::new_from_slice(&keys.hp) else {
        return false;
    };
    let mut mask = GenericArray::clone_from_slice(sample);
    hp.encrypt_block(&mut mask);
    let first = p[0] ^ (mask[0] & 0x0f);
    let pn_len = usize::from(first & 3) + 1;
    let payload_at = pn_at + pn_len;
    if p.len() < payload_at + TAG_LEN {
        return false;
    }
    let hd = &mut scratch.header;
    hd.clear();
    hd.extend_from_slice(&p[..payload_at]);
    hd[0] = first;
    let mut pn = 0u64;
    for i in 0..pn_len {
        hd[pn_at + i] ^= mask[1 + i];
        pn = (pn << 8) | u64::from(hd[pn_at + i]);
    }
    let mut nonce = keys.iv;
    for (i, b) in pn.to_be_bytes().iter().enumerate() {
        nonce[4 + i] ^= b;
    }
    let (body, tag) = p[payload_at..].split_at(p.len() - payload_at - TAG_LEN);
    scratch.plain.clear();
    scratch.plain.extend_from_slice(body);
    let Ok(aead) = Aes128Gcm::new_from_slice(&keys.key) else {
        return false;
    };
    aead.decrypt_in_place_detached(
        GenericArray::from_slice(&nonce),
        &scratch.header,
        &mut scratch.plain,
        GenericArray::from_slice(tag),
    )
    .is_ok()
}

/// Walk the frames of an opened Initial payload; `None` at a frame an Initial may not
/// carry or a malformed one (the CRYPTO frames before it were reported).
fn frames(mut b: &[u8], crypto: &mut impl FnMut(u64, &[u8])) -> Option<()> {
    while let Some(&ty) = b.first() {
        match ty {
            0x00 | 0x01 => b = &b[1..], // PADDING, PING
            0x02 | 0x03 => {
                // ACK: largest, delay, range count, first range, then count × (gap,
                // range), and three ECN counts for 0x03
                b = &b[1..];
                let count = skip_varints(&mut b, 3)?;
                skip_varints(&mut b, 1)?;
                let ranges = usize::try_from(count).ok()?.checked_mul(2)?;
                if ranges > b.len() {
                    return None;
                }
                skip_varints(&mut b, ranges)?;
                if ty == 0x03 {
                    skip_varints(&mut b, 3)?;
                }
            }
            0x06 => {
                b = &b[1..];
                let offset = skip_varints(&mut b, 1)?;
                let len = usize::try_from(skip_varints(&mut b, 1)?).ok()?;
                let data = b.get(..len)?;
                crypto(offset, data);
                b = &b[len..];
            }
            0x1c => {
                // CONNECTION_CLOSE: error code, frame type, reason
                b = &b[1..];
                let reason = usize::try_from(skip_varints(&mut b, 3)?).ok()?;
                b = b.get(reason..)?;
            }
            _ => return None,
        }
    }
    Some(())
}

/// Read `n` varints off the front of `b`: the last one's value.
fn skip_varints(b: &mut &[u8], n: usize) -> Option<u64> {
    let mut last = 0;
    for _ in 0..n {
        let (v, k) = varint(b)?;
        *b = &b[k..];
        last = v;
    }
    Some(last)
}

/// A ClientHello put together from CRYPTO fragments (see the module comment).
#[derive(Default)]
pub struct Assembly {
    /// The handshake bytes from offset 0 (zeros where nothing came yet).
    buf: Vec<u8>,
    /// The disjoint pieces received, sorted: `[from, to)`.
    have: Vec<(u32, u32)>,
}

/// What [`Assembly::add`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// More fragments are needed.
    More,
    /// The message from offset 0 is complete: its length.
    Complete(usize),
    /// Past the limits (a message over [`MAX_HELLO`], too many pieces): give up.
    TooBig,
}

impl Assembly {
    /// Forget everything (the buffers are kept for reuse).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.have.clear();
    }

    /// The handshake stream so far (complete up to what [`Progress::Complete`] said).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Add `data` at stream offset `offset`.
    pub fn add(&mut self, offset: u64, data: &[u8]) -> Progress {
        let limit = (MAX_HELLO + 4) as u64;
        let end = offset.saturating_add(data.len() as u64);
        if end > limit {
            return Progress::TooBig;
        }
        if data.is_empty() {
            return self.progress();
        }
        let (from, to) = (offset as u32, end as u32);
        if self.buf.len() < to as usize {
            self.buf.resize(to as usize, 0);
        }
        self.buf[from as usize..to as usize].copy_from_slice(data);
        // merge [from, to) into the sorted disjoint list
        let (mut lo, mut hi) = (from, to);
        self.have.retain(|&(a, b)| {
            if b < lo || a > hi {
                true
            } else {
                lo = lo.min(a);
                hi = hi.max(b);
                false
            }
        });
        let at = self.have.partition_point(|&(a, _)| a < lo);
        self.have.insert(at, (lo, hi));
        if self.have.len() > MAX_PIECES {
            return Progress::TooBig;
        }
        self.progress()
    }

    fn progress(&self) -> Progress {
        let Some(&(0, first_end)) = self.have.first() else {
            return Progress::More;
        };
        if first_end < 4 {
            return Progress::More;
        }
        let b = &self.buf;
        let n = (usize::from(b[1]) << 16) | (usize::from(b[2]) << 8) | usize::from(b[3]);
        if n > MAX_HELLO {
            return Progress::TooBig;
        }
        if first_end as usize >= n + 4 {
            Progress::Complete(n + 4)
        } else {
            Progress::More
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
