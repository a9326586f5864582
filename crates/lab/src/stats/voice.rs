//! Statistics of a voice stream: what the receiver of a constant-rate RTP stream (one packet
//! every `period`, sequence numbers 0, 1, 2, …) saw, judged the way a phone would.
//!
//! Input: the received packets in **arrival order**, each with its sequence number, its
//! send time and its kernel receive time (ns, one clock: sender and receiver share the
//! machine's `CLOCK_REALTIME`), and the number of packets sent.
//!
//! * **One-way delay** of a packet: `rx − tx`. Percentiles by [`percentile`] (numpy's
//!   linear rule), over the first copy of each packet.
//! * **Network loss**: packets sent that never arrived (duplicates count once).
//! * **Interarrival jitter** (RFC 3550 §6.4.1, appendix A.8): for consecutive packets i, j
//!   in arrival order, `D(i,j) = (Rj − Ri) − (Sj − Si)`, with `S` the RTP timestamp (here
//!   `seq × period`, the sampling instant, in ns) and `R` the arrival time;
//!   `J ← J + (|D| − J)/16` ([`rfc3550_jitter`]). The estimator is a running value (what an
//!   RTCP receiver report carries at a given moment); [`VoiceStats::jitter_ms`] is its mean
//!   over the stream's packets, `jitter_last_ms` its last value.
//! * **Fixed jitter buffer** of depth `B` ([`late_in_buffer`]): packet `i` is played at
//!   `tx_i + d_min + B`, `d_min` being the smallest one-way delay of the stream — the
//!   schedule of a fixed buffer that started on the fastest packet, the best a buffer of
//!   that depth can do. A packet that arrives after its playout time is discarded: it counts
//!   as lost for the listener ("late"). Every played packet then reaches the ear
//!   `d_min + B` after it was sent.
//! * **E-model** ([`super::emodel`]): mouth-to-ear delay = codec delay (packetisation +
//!   look-ahead) + `d_min` + `B`; `Ppl` = (network loss + late) / sent; `BurstR` from the
//!   pattern of lost-or-late packets in send order; R and MOS.

use serde::{Deserialize, Serialize};

use super::dist::percentile;
use super::emodel::{burst_ratio, rate_call, Codec, Rating};

/// One received voice packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoicePacket {
    /// Sequence number (0 for the stream's first packet).
    pub seq: u64,
    /// Send time, ns since the Unix epoch (`CLOCK_REALTIME`).
    pub tx_ns: u64,
    /// Kernel receive time, ns since the Unix epoch (`CLOCK_REALTIME`).
    pub rx_ns: u64,
}

impl VoicePacket {
    /// One-way delay, ns (negative only if the clock stepped).
    pub fn delay_ns(&self) -> i64 {
        self.rx_ns.wrapping_sub(self.tx_ns) as i64
    }
}

/// The first copy of each sequence number below `sent`, in arrival order.
pub fn first_copies(packets: &[VoicePacket], sent: u64) -> Vec<VoicePacket> {
    let mut seen = vec![false; sent as usize];
    packets
        .iter()
        .filter(|p| {
            let i = p.seq as usize;
            i < seen.len() && !std::mem::replace(&mut seen[i], true)
        })
        .copied()
        .collect()
}

/// RFC 3550's interarrival jitter estimate after each packet (ns), packets in arrival
/// order, RTP timestamps `seq × period_ns`. The first packet has no predecessor: 0.
pub fn rfc3550_jitter(packets: &[VoicePacket], period_ns: f64) -> Vec<f64> {
    let mut j = 0.0f64;
    let mut out = Vec::with_capacity(packets.len());
    let mut prev: Option<&VoicePacket> = None;
    for p in packets {
        if let Some(q) = prev {
            let d = (p.rx_ns as f64 - q.rx_ns as f64) - (p.seq as f64 - q.seq as f64) * period_ns;
            j += (d.abs() - j) / 16.0;
        }
        out.push(j);
        prev = Some(p);
    }
    out
}

/// Per packet (same order as `packets`): whether a fixed jitter buffer of `depth_ns`
/// discards it as late, i.e. its delay exceeds the smallest delay among `packets` by more
/// than the depth; and that smallest delay (ns; `None` without packets).
pub fn late_in_buffer(packets: &[VoicePacket], depth_ns: i64) -> (Vec<bool>, Option<i64>) {
    let dmin = packets.iter().map(|p| p.delay_ns()).min();
    let late = match dmin {
        Some(m) => packets
            .iter()
            .map(|p| p.delay_ns() - m > depth_ns)
            .collect(),
        None => Vec::new(),
    };
    (late, dmin)
}

/// The voice stream's figures (see the module documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoiceStats {
    pub sent: u64,
    /// Distinct packets received.
    pub received: u64,
    pub lost: u64,
    /// Received but after their playout time.
    pub late: u64,
    /// lost / sent.
    pub net_loss: f64,
    /// late / sent.
    pub buffer_loss: f64,
    /// One-way delay, ms.
    pub delay_min_ms: Option<f64>,
    pub delay_p50_ms: Option<f64>,
    pub delay_p95_ms: Option<f64>,
    pub delay_max_ms: Option<f64>,
    /// Mean of RFC 3550's running jitter estimate over the packets, ms.
    pub jitter_ms: Option<f64>,
    /// Its last value, ms.
    pub jitter_last_ms: Option<f64>,
    /// The E-model's inputs and result; `None` when nothing arrived.
    pub rating: Option<Rating>,
}

/// How the stream is judged: its period, the jitter buffer and the codec.
#[derive(Clone, Copy, Debug)]
pub struct VoiceJudge {
    pub period_ns: f64,
    pub buffer_ns: i64,
    pub codec: Codec,
}

impl VoiceJudge {
    /// Mouth-to-ear delay of every played packet when the fastest took `dmin_ns`, ms.
    pub fn mouth_to_ear_ms(&self, dmin_ns: i64) -> f64 {
        self.codec.delay_ms(self.period_ns / 1e6) + (dmin_ns + self.buffer_ns) as f64 / 1e6
    }

    /// The figures of a stream of `sent` packets of which `packets` arrived.
    pub fn stats(&self, packets: &[VoicePacket], sent: u64) -> VoiceStats {
        let first = first_copies(packets, sent);
        let received = first.len() as u64;
        let (late, dmin) = late_in_buffer(&first, self.buffer_ns);
        let n_late = late.iter().filter(|&&l| l).count() as u64;
        let mut d: Vec<f64> = first.iter().map(|p| p.delay_ns() as f64 / 1e6).collect();
        d.sort_unstable_by(f64::total_cmp);
        let pct = |q: f64| (!d.is_empty()).then(|| percentile(&d, q));
        let j = rfc3550_jitter(&first, self.period_ns);
        let jitter_ms = (!j.is_empty()).then(|| j.iter().sum::<f64>() / j.len() as f64 / 1e6);
        // lost or late, in send order
        let mut bad = vec![true; sent as usize];
        for (p, &l) in first.iter().zip(&late) {
            bad[p.seq as usize] = l;
        }
        let rating = dmin.map(|m| {
            let ppl = 100.0 * (sent - received + n_late) as f64 / sent.max(1) as f64;
            rate_call(&self.codec, self.mouth_to_ear_ms(m), ppl, burst_ratio(&bad))
        });
        VoiceStats {
            sent,
            received,
            lost: sent - received,
            late: n_late,
            net_loss: ratio(sent - received, sent),
            buffer_loss: ratio(n_late, sent),
            delay_min_ms: pct(0.0),
            delay_p50_ms: pct(50.0),
            delay_p95_ms: pct(95.0),
            delay_max_ms: pct(100.0),
            jitter_ms,
            jitter_last_ms: j.last().map(|v| v / 1e6),
            rating,
        }
    }

    /// MOS per window of `window` packets in send order (t = the window's start in seconds
    /// since the first packet's nominal send time): each window's own loss (lost or late)
    /// and burst ratio, the whole stream's mouth-to-ear delay. `None` where nothing arrived.
    pub fn mos_windows(&self, packets: &[VoicePacket], sent: u64, window: u64) -> Vec<(f64, f64)> {
        let first = first_copies(packets, sent);
        let (late, dmin) = late_in_buffer(&first, self.buffer_ns);
        let Some(dmin) = dmin else {
            return Vec::new();
        };
        let mut bad = vec![true; sent as usize];
        for (p, &l) in first.iter().zip(&late) {
            bad[p.seq as usize] = l;
        }
        let delay = self.mouth_to_ear_ms(dmin);
        bad.chunks(window.max(1) as usize)
            .enumerate()
            .map(|(k, w)| {
                let ppl = 100.0 * w.iter().filter(|&&b| b).count() as f64 / w.len() as f64;
                let t = (k as u64 * window) as f64 * self.period_ns / 1e9;
                (t, rate_call(&self.codec, delay, ppl, burst_ratio(w)).mos)
            })
            .collect()
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Bytes received per `bin_ns` since `start_ns` (by arrival time), `bytes` per packet —
/// the stream's received rate over time, as a byte series for [`super::series`].
pub fn arrival_series(packets: &[VoicePacket], start_ns: u64, bin_ns: u64, bytes: u64) -> Vec<u64> {
    let mut s: Vec<u64> = Vec::new();
    for p in packets {
        let Some(dt) = p.rx_ns.checked_sub(start_ns) else {
            continue;
        };
        let i = (dt / bin_ns.max(1)) as usize;
        if s.len() <= i {
            s.resize(i + 1, 0);
        }
        s[i] += bytes;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn pkt(seq: u64, delay_ms: u64) -> VoicePacket {
        let tx = 1_000 * MS + seq * 20 * MS;
        VoicePacket {
            seq,
            tx_ns: tx,
            rx_ns: tx + delay_ms * MS,
        }
    }

    #[test]
    fn rfc3550_jitter_by_hand() {
        // constant delay: D = 0 every time, J stays 0
        let flat: Vec<_> = (0..5).map(|i| pkt(i, 30)).collect();
        assert!(rfc3550_jitter(&flat, 20e6).iter().all(|&j| j == 0.0));
        // delays 30, 40, 30, 30 ms: D = +10, -10, 0 ms
        // J1 = 10/16 = 0.625; J2 = 0.625 + (10 - 0.625)/16 = 1.2109375;
        // J3 = 1.2109375 - 1.2109375/16 = 1.135253906 ms
        let p = [pkt(0, 30), pkt(1, 40), pkt(2, 30), pkt(3, 30)];
        let j = rfc3550_jitter(&p, 20e6);
        let want = [0.0, 0.625, 1.2109375, 1.2109375 * 15.0 / 16.0];
        for (a, b) in j.iter().zip(want) {
            assert!((a / 1e6 - b).abs() < 1e-9, "{j:?}");
        }
        // a lost packet in between: S differs by two periods, so D is still the delay change
        let p = [pkt(0, 30), pkt(2, 40)];
        assert!((rfc3550_jitter(&p, 20e6)[1] / 1e6 - 0.625).abs() < 1e-9);
        // reordered arrival (seq 2 before seq 1): D measured in arrival order, RFC's rule
        // arrival: seq0 @ 1030, seq2 @ 1070, seq1 @ 1075 (delay 55):
        // D(0,2) = 40 - 40 = 0; D(2,1) = 5 - (-20) = 25 -> J = 25/16
        let p = [pkt(0, 30), pkt(2, 30), pkt(1, 55)];
        assert!((rfc3550_jitter(&p, 20e6)[2] / 1e6 - 25.0 / 16.0).abs() < 1e-9);
    }

    #[test]
    fn fixed_buffer_drops_what_comes_too_late() {
        // delays 10, 70, 71, 40 ms, buffer 60 ms: playout at tx + 10 + 60; 71 is late
        let p = [pkt(0, 10), pkt(1, 70), pkt(2, 71), pkt(3, 40)];
        let (late, dmin) = late_in_buffer(&p, 60 * MS as i64);
        assert_eq!(dmin, Some(10 * MS as i64));
        assert_eq!(late, [false, false, true, false]);
        assert_eq!(late_in_buffer(&[], 1), (vec![], None));
    }

    fn judge() -> VoiceJudge {
        VoiceJudge {
            period_ns: 20e6,
            buffer_ns: 60 * MS as i64,
            codec: Codec::G729A,
        }
    }

    #[test]
    fn stream_stats_by_hand() {
        // 10 sent; seq 3 and 7 lost; seq 5 arrives twice; seq 8 is late (delay 100 > 10 + 60)
        let mut p: Vec<VoicePacket> = (0..10)
            .filter(|&i| i != 3 && i != 7)
            .map(|i| pkt(i, if i == 8 { 100 } else { 10 + i }))
            .collect();
        p.push(pkt(5, 15));
        let s = judge().stats(&p, 10);
        assert_eq!((s.sent, s.received, s.lost, s.late), (10, 8, 2, 1));
        assert!((s.net_loss - 0.2).abs() < 1e-12);
        assert!((s.buffer_loss - 0.1).abs() < 1e-12);
        // delays of the first copies: 10 11 12 14 15 16 18 100
        assert_eq!(s.delay_min_ms, Some(10.0));
        assert_eq!(s.delay_max_ms, Some(100.0));
        // p50 of 8 values: between the 4th and 5th, 14 and 15
        assert_eq!(s.delay_p50_ms, Some(14.5));
        let r = s.rating.unwrap();
        // mouth-to-ear = 20 + 5 (codec) + 10 (fastest) + 60 (buffer) = 95 ms
        assert!((r.delay_ms - 95.0).abs() < 1e-9);
        assert!((r.ppl_percent - 30.0).abs() < 1e-9);
        // lost-or-late pattern r r r L r r r L L r: p = 2/6, q = 2/3 -> BurstR 1
        assert!((r.burst_r - 1.0).abs() < 1e-9);
        assert!(r.mos >= 1.0 && r.mos < 2.5, "{r:?}");
        // nothing received
        let none = judge().stats(&[], 10);
        assert_eq!((none.lost, none.net_loss), (10, 1.0));
        assert!(none.rating.is_none() && none.delay_p50_ms.is_none());
    }

    #[test]
    fn perfect_stream_rates_like_the_codec() {
        let p: Vec<_> = (0..100).map(|i| pkt(i, 5)).collect();
        let s = judge().stats(&p, 100);
        assert_eq!((s.lost, s.late), (0, 0));
        assert_eq!(s.jitter_ms, Some(0.0));
        let r = s.rating.unwrap();
        // 90 ms mouth to ear: Idd = 0, a little talker/listener echo; R just below 82.2
        assert!((r.delay_ms - 90.0).abs() < 1e-9);
        assert!(r.r > 79.0 && r.r < 82.2, "{r:?}");
        // windows of 50 packets: two, both at the same MOS
        let w = judge().mos_windows(&p, 100, 50);
        assert_eq!(w.len(), 2);
        assert_eq!(w[1].0, 1.0);
        assert!((w[0].1 - r.mos).abs() < 1e-12 && w[0].1 == w[1].1);
    }

    #[test]
    fn arrival_series_bins() {
        let p = [pkt(0, 10), pkt(1, 10), pkt(10, 10)];
        // start at seq 0's send time, 100 ms bins: 1010, 1030 -> bin 0; 1210 -> bin 2
        let s = arrival_series(&p, 1_000 * MS, 100 * MS, 74);
        assert_eq!(s, [148, 0, 74]);
    }
}
