//! The receiver: a thread with an AF_PACKET RX ring counting a trial's frames by sequence
//! number (`Recv`, `on_frame`).

use crate::frame::{DST_PORT, MAGIC, OFF_MAGIC, OFF_SEQ, OFF_TRIAL};
use crate::sys::{gettid, pin_to};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use weir_io::afpacket::{RingConfig, RxRing};
use weir_io::clock::set_timer_slack_1ns;
use weir_lab::topo::Netns;

#[derive(Default)]
struct RecvState {
    trial: u32,
    bits: Vec<u64>,
    unique: u64,
    dup: u64,
    reordered: u64,
    out_of_range: u64,
    /// Benchmark frames of another trial.
    stale: u64,
    /// Other frames (ARP, ...).
    foreign: u64,
    next_seq: u64,
    ring_drops: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct RecvOut {
    pub(crate) unique: u64,
    dup: u64,
    reordered: u64,
    out_of_range: u64,
    stale: u64,
    foreign: u64,
    pub(crate) ring_drops: u64,
}

pub(crate) struct Recv {
    state: Arc<Mutex<RecvState>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    tid: i32,
}

impl Recv {
    pub(crate) fn start(ns: &Netns, ifname: &str, cpu: Option<usize>) -> Result<Recv, String> {
        let state = Arc::new(Mutex::new(RecvState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = channel::<Result<i32, String>>();
        let (st, sp, ifname) = (state.clone(), stop.clone(), ifname.to_string());
        let handle = ns
            .spawn(move || {
                pin_to(cpu);
                let _ = set_timer_slack_1ns();
                let cfg = RingConfig {
                    frame_size: 256,
                    frames: 65_536,
                };
                let mut rx = match RxRing::open(&ifname, cfg) {
                    Ok(r) => {
                        let _ = ready_tx.send(Ok(gettid()));
                        r
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                while !sp.load(Ordering::Relaxed) {
                    let mut n = 0;
                    {
                        let mut s = st.lock().unwrap();
                        while n < 8192 {
                            let Some(f) = rx.peek() else { break };
                            on_frame(f.data, &mut s);
                            rx.release();
                            n += 1;
                        }
                        if n == 0 {
                            s.ring_drops += rx.kernel_drops();
                        }
                    }
                    if n == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let tid = ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "receiver did not start".to_string())??;
        Ok(Recv {
            state,
            stop,
            handle: Some(handle),
            tid,
        })
    }

    /// Move the receiver thread to `cpu`.
    pub(crate) fn pin(&self, cpu: Option<usize>) {
        let Some(cpu) = cpu else { return };
        // SAFETY: as in pin_to, for the receiver's thread id.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(self.tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }

    pub(crate) fn begin(&self, trial: u32, cap: u64) {
        let mut s = self.state.lock().unwrap();
        *s = RecvState {
            trial,
            bits: vec![0; cap.div_ceil(64) as usize],
            ring_drops: s.ring_drops,
            ..RecvState::default()
        };
        s.ring_drops = 0;
    }

    /// Wait until the ring has been seen empty (after `settle`), then read the counts.
    pub(crate) fn end(&self, settle: Duration) -> RecvOut {
        std::thread::sleep(settle);
        // the receiver reads its ring drops whenever it finds the ring empty
        std::thread::sleep(Duration::from_millis(2));
        let s = self.state.lock().unwrap();
        RecvOut {
            unique: s.unique,
            dup: s.dup,
            reordered: s.reordered,
            out_of_range: s.out_of_range,
            stale: s.stale,
            foreign: s.foreign,
            ring_drops: s.ring_drops,
        }
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[inline]
fn on_frame(d: &[u8], s: &mut RecvState) {
    let ours = d.len() >= OFF_MAGIC + 4
        && d[12..14] == [0x08, 0x00]
        && d[23] == 17
        && d[36..38] == DST_PORT.to_be_bytes()
        && d[OFF_MAGIC..OFF_MAGIC + 4] == MAGIC.to_be_bytes();
    if !ours {
        s.foreign += 1;
        return;
    }
    let trial = u32::from_be_bytes(d[OFF_TRIAL..OFF_TRIAL + 4].try_into().unwrap());
    if trial != s.trial {
        s.stale += 1;
        return;
    }
    let seq = u64::from_be_bytes(d[OFF_SEQ..OFF_SEQ + 8].try_into().unwrap());
    let (w, b) = ((seq / 64) as usize, seq % 64);
    let Some(word) = s.bits.get_mut(w) else {
        s.out_of_range += 1;
        return;
    };
    if *word >> b & 1 == 1 {
        s.dup += 1;
    } else {
        *word |= 1 << b;
        s.unique += 1;
    }
    if seq < s.next_seq {
        s.reordered += 1;
    } else {
        s.next_seq = seq + 1;
    }
}
