//! The Internet checksum: full computation (RFC 1071), the TCP/UDP/ICMPv6
//! pseudo-headers (RFC 768, RFC 9293 §3.1, RFC 8200 §8.1), and incremental
//! update after a field edit (RFC 1624, equation 3).
//!
//! Partial sums are carried as `u32` values already folded to at most
//! `0xFFFF`, so a handful of them can be added with `+` (or [`combine`]) and
//! then turned into a checksum with [`finish`].
//!
//! ```
//! use weir_wire::checksum;
//! // RFC 1071 §3 example data: the folded sum is 0xDDF2.
//! let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
//! assert_eq!(checksum::fold(checksum::sum16(&data)), 0xddf2);
//! assert_eq!(checksum::checksum(&data), !0xddf2);
//! ```

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[inline]
fn fold64(mut sum: u64) -> u32 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u32
}

/// One's complement sum of `data` taken as big-endian 16-bit words; an odd
/// trailing byte is padded with a zero byte on the right (RFC 1071 §4.1).
///
/// The result is folded to at most `0xFFFF` (it is not complemented), so it
/// can be added to other partial sums.
pub fn sum16(data: &[u8]) -> u32 {
    // Summing big-endian 32-bit words into a wide accumulator gives the same
    // value modulo 0xFFFF as summing 16-bit words (2^16 == 1 mod 0xFFFF).
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        acc += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    acc += u64::from(u32::from_be_bytes(tail));
    fold64(acc)
}

/// Folds the carries of a 32-bit accumulator back into 16 bits
/// (end-around carry). Does not complement.
#[inline]
pub fn fold(sum: u32) -> u16 {
    fold64(u64::from(sum)) as u16
}

/// Adds two partial sums with end-around carry; the result is `<= 0xFFFF`.
#[inline]
pub fn combine(a: u32, b: u32) -> u32 {
    fold64(u64::from(a) + u64::from(b))
}

/// Turns a partial sum into the checksum field value: `!fold(sum)`.
#[inline]
pub fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// The Internet checksum of `data` (`finish(sum16(data))`).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum16(data))
}

/// Partial sum of the IPv4 pseudo-header: source, destination, zero,
/// protocol, and the upper-layer length (RFC 768, RFC 9293 §3.1).
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u32 {
    let s = src.octets();
    let d = dst.octets();
    let words = [
        u16::from_be_bytes([s[0], s[1]]),
        u16::from_be_bytes([s[2], s[3]]),
        u16::from_be_bytes([d[0], d[1]]),
        u16::from_be_bytes([d[2], d[3]]),
        u16::from(protocol),
        length,
    ];
    fold64(words.iter().map(|&w| u64::from(w)).sum())
}

/// Partial sum of the IPv6 pseudo-header: source, destination, 32-bit
/// upper-layer length, zero, next header (RFC 8200 §8.1).
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, length: u32) -> u32 {
    let acc = u64::from(sum16(&src.octets()))
        + u64::from(sum16(&dst.octets()))
        + u64::from(length >> 16)
        + u64::from(length & 0xffff)
        + u64::from(next_header);
    fold64(acc)
}

/// Pseudo-header partial sum for either family.
///
/// If both addresses are IPv4 the IPv4 pseudo-header is used (with `length`
/// truncated to 16 bits, as IPv4 cannot carry more); otherwise any IPv4
/// address is mapped to `::ffff:a.b.c.d` and the IPv6 pseudo-header is used.
pub fn pseudo_header(src: IpAddr, dst: IpAddr, protocol: u8, length: u32) -> u32 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_header_v4(s, d, protocol, length as u16),
        _ => pseudo_header_v6(&to_v6(src), &to_v6(dst), protocol, length),
    }
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Incrementally updates checksum `old_csum` after a 16-bit word of the
/// covered data changed from `old_word` to `new_word` (RFC 1624 eqn. 3):
/// `HC' = ~(~HC + ~m + m')`.
///
/// The result equals a full recomputation whenever the covered data (with
/// any pseudo-header) is not entirely zero, which always holds for real
/// headers; in particular, unlike RFC 1141's eqn. 2, it never produces
/// `0xFFFF` where a full recomputation produces `0x0000`. The word must sit at an even offset
/// of the checksummed data; see [`incremental_update16_at`] otherwise.
#[inline]
pub fn incremental_update16(old_csum: u16, old_word: u16, new_word: u16) -> u16 {
    let sum = u32::from(!old_csum) + u32::from(!old_word) + u32::from(new_word);
    !fold(sum)
}

/// [`incremental_update16`] for a 32-bit field (two adjacent words at an
/// even offset), e.g. a sequence number or an IPv4 address.
#[inline]
pub fn incremental_update32(old_csum: u16, old: u32, new: u32) -> u16 {
    let sum = u32::from(!old_csum)
        + u32::from(!((old >> 16) as u16))
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    !fold(sum)
}

/// [`incremental_update16`] for a 16-bit big-endian value stored at byte
/// `offset` of the checksummed data, which may be odd (e.g. a TCP option
/// after a single NOP). A value at an odd offset straddles two words; by
/// RFC 1071 §2(B) its contribution equals the byte-swapped value.
#[inline]
pub fn incremental_update16_at(old_csum: u16, offset: usize, old: u16, new: u16) -> u16 {
    if offset & 1 == 0 {
        incremental_update16(old_csum, old, new)
    } else {
        incremental_update16(old_csum, old.swap_bytes(), new.swap_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Straightforward RFC 1071 reference: 16-bit words into a u64.
    fn reference(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for pair in data.chunks(2) {
            let hi = u64::from(pair[0]) << 8;
            let lo = pair.get(1).map_or(0, |&b| u64::from(b));
            acc += hi | lo;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xDDF2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum16(&data)), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
        // Byte-order independence (RFC 1071 §2(B)): swapped data, swapped sum.
        let swapped = [0x01, 0x00, 0x03, 0xf2, 0xf5, 0xf4, 0xf7, 0xf6];
        assert_eq!(fold(sum16(&swapped)), 0xf2dd);
    }

    #[test]
    fn odd_length_pads_right() {
        assert_eq!(fold(sum16(&[0xab])), 0xab00);
        assert_eq!(fold(sum16(&[0x01, 0x02, 0x03])), 0x0402);
        assert_eq!(fold(sum16(&[])), 0);
        assert_eq!(checksum(&[]), 0xffff);
    }

    #[test]
    fn well_known_ipv4_header() {
        // The classic worked example: 4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7.
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
        hdr[10] = 0xb8;
        hdr[11] = 0x61;
        assert_eq!(fold(sum16(&hdr)), 0xffff);
    }

    #[test]
    fn rfc1624_section4_example() {
        // HC = 0xDD2F, m = 0x5555, m' = 0x3285. Eqn. 3, HC' = ~(~HC + ~m + m'),
        // gives 0x0000, as a recomputation from scratch does.
        assert_eq!(incremental_update16(0xdd2f, 0x5555, 0x3285), 0x0000);
        // RFC 1141's eqn. 2, HC' = HC + m + ~m', gives the "negative zero" 0xFFFF.
        let eqn2 = fold(0xdd2f + 0x5555 + u32::from(!0x3285u16));
        assert_eq!(eqn2, 0xffff);
        // Erratum 4782's case (HC = 0, m unchanged): with end-around carry
        // the sum 0xFFFF + 0xAAAA + 0x5555 folds to 0xFFFF, so HC' stays 0.
        assert_eq!(incremental_update16(0x0000, 0x5555, 0x5555), 0x0000);
        assert_eq!(incremental_update16_at(0xdd2f, 1, 0x5555, 0x8532), 0x0000);
    }

    #[test]
    fn pseudo_headers() {
        let s = Ipv4Addr::new(192, 168, 0, 1);
        let d = Ipv4Addr::new(192, 168, 0, 199);
        let mut bytes = [0u8; 12];
        bytes[..4].copy_from_slice(&s.octets());
        bytes[4..8].copy_from_slice(&d.octets());
        bytes[9] = 17;
        bytes[10..12].copy_from_slice(&20u16.to_be_bytes());
        assert_eq!(pseudo_header_v4(s, d, 17, 20), sum16(&bytes));
        assert_eq!(pseudo_header(s.into(), d.into(), 17, 20), sum16(&bytes));

        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "fe80::1:2:3:4".parse().unwrap();
        let mut b6 = [0u8; 40];
        b6[..16].copy_from_slice(&s6.octets());
        b6[16..32].copy_from_slice(&d6.octets());
        b6[32..36].copy_from_slice(&70000u32.to_be_bytes());
        b6[39] = 58;
        assert_eq!(pseudo_header_v6(&s6, &d6, 58, 70000), sum16(&b6));
        assert_eq!(pseudo_header(s6.into(), d6.into(), 58, 70000), sum16(&b6));
    }

    proptest! {
        #[test]
        fn sum16_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(checksum(&data), reference(&data));
        }

        #[test]
        fn incremental_matches_full(
            mut data in proptest::collection::vec(any::<u8>(), 2..64),
            at in any::<prop::sample::Index>(),
            new in any::<u16>(),
        ) {
            let before = checksum(&data);
            let off = at.index(data.len() - 1);
            let old = u16::from_be_bytes([data[off], data[off + 1]]);
            data[off..off + 2].copy_from_slice(&new.to_be_bytes());
            // All-zero data is the one case where the two zeros differ.
            prop_assume!(data.iter().any(|&b| b != 0));
            let full = checksum(&data);
            prop_assert_eq!(incremental_update16_at(before, off, old, new), full);
            if off % 2 == 0 {
                prop_assert_eq!(incremental_update16(before, old, new), full);
            }
        }

        #[test]
        fn incremental32_matches_full(
            mut data in proptest::collection::vec(any::<u8>(), 4..64),
            at in any::<prop::sample::Index>(),
            new in any::<u32>(),
        ) {
            let before = checksum(&data);
            let off = at.index((data.len() - 2) / 2) * 2;
            prop_assume!(off + 4 <= data.len());
            let old = u32::from_be_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]]);
            data[off..off + 4].copy_from_slice(&new.to_be_bytes());
            prop_assume!(data.iter().any(|&b| b != 0));
            prop_assert_eq!(incremental_update32(before, old, new), checksum(&data));
        }
    }
}
