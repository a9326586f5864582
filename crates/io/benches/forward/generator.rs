//! The generator: a thread with an AF_PACKET TX ring sending paced or unlimited trials
//! (`Gen`, `gen_trial`).

use crate::frame::{OFF_SEQ, OFF_TRIAL};
use crate::sys::{gettid, pin_to, task_cpu};
use serde::Serialize;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use weir_io::afpacket::{RingConfig, TxRing};
use weir_io::clock::{set_timer_slack_1ns, thread_cpu_ns, Clock};
use weir_lab::topo::Netns;

/// Frames per `send()` at most.
const GEN_BATCH: u64 = 64;
/// Pacing quantum: a paced generator sends the frames due every ~50 µs in one `send()`.
const PACE_NS: u64 = 50_000;

pub(crate) struct GenCmd {
    pub(crate) trial: u32,
    /// Frames per second; `None` = as fast as possible.
    pub(crate) rate: Option<f64>,
    pub(crate) dur: Duration,
    /// Sent in turn: frame `k` of the trial is `frames[k % len]` (a power of two divides
    /// the ring, so each slot keeps its headers).
    pub(crate) frames: Arc<Vec<Vec<u8>>>,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct GenOut {
    pub(crate) sent: u64,
    pub(crate) elapsed_ns: u64,
    /// The TX ring had no free slot when a frame was due.
    ring_full: u64,
    send_errors: u64,
    rejected: u64,
    /// The generator thread's CPU time (includes softirq work done in its context).
    pub(crate) cpu_ns: u64,
    /// Time the generator thread waited for a CPU while runnable.
    pub(crate) run_delay_ns: u64,
}

pub(crate) struct Gen {
    cmd: Option<Sender<GenCmd>>,
    out: Receiver<GenOut>,
    handle: Option<JoinHandle<()>>,
}

impl Gen {
    pub(crate) fn start(ns: &Netns, ifname: &str, cpu: Option<usize>) -> Result<Gen, String> {
        let (cmd_tx, cmd_rx) = channel::<GenCmd>();
        let (out_tx, out_rx) = channel::<GenOut>();
        let (ready_tx, ready_rx) = channel::<Result<(), String>>();
        let ifname = ifname.to_string();
        let handle = ns
            .spawn(move || {
                pin_to(cpu);
                let _ = set_timer_slack_1ns();
                let cfg = RingConfig {
                    frame_size: 2048,
                    frames: 4096,
                };
                let mut tx = match TxRing::open(&ifname, cfg) {
                    Ok(t) => {
                        // open loop: without this the socket's send buffer (212 KB) throttles
                        // the generator whenever the DUT holds its skbs (they keep their
                        // socket reference across veth and the bridge, e.g. in an RPS
                        // backlog), which would turn the DUT's drops into back-pressure
                        let big: libc::c_int = 1 << 28;
                        // SAFETY: setsockopt with an int option on our socket.
                        unsafe {
                            libc::setsockopt(
                                t.fd(),
                                libc::SOL_SOCKET,
                                libc::SO_SNDBUFFORCE,
                                &big as *const libc::c_int as *const libc::c_void,
                                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                            );
                        }
                        let _ = ready_tx.send(Ok(()));
                        t
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let clock = Clock::new();
                while let Ok(c) = cmd_rx.recv() {
                    let r = gen_trial(&mut tx, &ifname, &clock, &c);
                    if out_tx.send(r).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "generator did not start".to_string())??;
        Ok(Gen {
            cmd: Some(cmd_tx),
            out: out_rx,
            handle: Some(handle),
        })
    }

    pub(crate) fn run(&self, cmd: GenCmd) -> GenOut {
        self.cmd
            .as_ref()
            .unwrap()
            .send(cmd)
            .expect("generator alive");
        self.out.recv().expect("generator result")
    }
}

impl Drop for Gen {
    fn drop(&mut self) {
        self.cmd = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// send(2) on the TX ring whatever TxRing's own bookkeeping says.
fn kick(tx: &TxRing) {
    // SAFETY: send(2) with an empty buffer kicks the TX ring.
    unsafe { libc::send(tx.fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
}

/// Frames the kernel has taken from `ifname` for transmission (in the calling thread's
/// namespace).
fn if_tx_taken(ifname: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    let want = format!("{ifname}:");
    s.lines()
        .find_map(|l| {
            l.trim_start()
                .strip_prefix(want.as_str())
                .map(str::to_string)
        })
        .map(|rest| {
            let v: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            // tx_packets: on veth it counts the frames the peer's backlog dropped as well
            v.get(9).copied().unwrap_or(0)
        })
        .unwrap_or(0)
}

fn gen_trial(tx: &mut TxRing, ifname: &str, clock: &Clock, c: &GenCmd) -> GenOut {
    let frames = &c.frames[..];
    let trial = c.trial.to_be_bytes();
    let dur_ns = c.dur.as_nanos() as u64;
    let total = match c.rate {
        Some(r) => ((r * c.dur.as_secs_f64()).round() as u64).max(1),
        None => u64::MAX,
    };
    // frames per send when paced: those due in PACE_NS (at least 1, at most GEN_BATCH)
    let min_batch = match c.rate {
        Some(r) => ((r * PACE_NS as f64 / 1e9) as u64).clamp(1, GEN_BATCH),
        None => 1,
    };
    // a generator that cannot keep up still stops in bounded time
    let deadline_ns = dur_ns * 2;
    let mut o = GenOut::default();
    let rejected0 = tx.rejected;
    let taken0 = if_tx_taken(ifname);
    let cpu0 = thread_cpu_ns();
    let delay0 = task_cpu(gettid()).run_delay_ns;
    let start = clock.now();
    let mut el;
    loop {
        el = clock.now().0 - start.0;
        if o.sent >= total || el >= deadline_ns || (c.rate.is_none() && el >= dur_ns) {
            break;
        }
        let due = match c.rate {
            Some(r) => ((el as f64 * r / 1e9) as u64 + 1).min(total),
            None => u64::MAX,
        };
        let want = due.saturating_sub(o.sent).min(GEN_BATCH);
        if want < min_batch && due < total {
            // sleep until `min_batch` frames are due (no spinning: the generator's core also
            // does the kernel's receive work, and the machine's busy time is measured)
            let r = c.rate.unwrap_or(f64::INFINITY);
            let next = ((o.sent + min_batch - 1) as f64 * 1e9 / r) as u64;
            let gap = next.saturating_sub(el);
            if gap > 5_000 {
                std::thread::sleep(Duration::from_nanos(gap));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let mut n = 0;
        while n < want {
            let k = o.sent + n;
            let seq = k.to_be_bytes();
            let frame = &frames[(k % frames.len() as u64) as usize][..];
            let ok = tx.push_with(|buf| {
                // the slot keeps what it held last time: copy the whole frame only when the
                // headers differ (first use, or another frame size)
                if buf[..OFF_SEQ] != frame[..OFF_SEQ] {
                    buf[..frame.len()].copy_from_slice(frame);
                }
                buf[OFF_SEQ..OFF_SEQ + 8].copy_from_slice(&seq);
                buf[OFF_TRIAL..OFF_TRIAL + 4].copy_from_slice(&trial);
                frame.len()
            });
            if !ok {
                break;
            }
            n += 1;
        }
        o.sent += n;
        if tx.flush().is_err() {
            o.send_errors += 1;
        }
        if n < want {
            // ring full: frames the kernel left queued (EAGAIN) are only sent by another
            // send(), and TxRing::flush does nothing without new frames; kick it directly
            o.ring_full += 1;
            kick(tx);
            std::thread::yield_now();
        }
    }
    // send whatever is still queued in the ring: a send() stops at the first frame the
    // device drops (veth returns NET_XMIT_DROP when the peer's backlog is full, and the
    // kernel ends the call with ENOBUFS), leaving the rest queued; kick until the interface
    // has taken every frame (the host's own ARP/ICMP frames only make this end sooner)
    for _ in 0..500 {
        kick(tx);
        if if_tx_taken(ifname).wrapping_sub(taken0) >= o.sent {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    o.elapsed_ns = el.max(1);
    o.rejected = tx.rejected - rejected0;
    o.cpu_ns = thread_cpu_ns() - cpu0;
    o.run_delay_ns = task_cpu(gettid()).run_delay_ns - delay0;
    o
}
