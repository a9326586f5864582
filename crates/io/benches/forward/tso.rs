//! The TSO-sender case: one bulk TCP flow from a host that keeps its segmentation offloads
//! on, through each DUT (`TsoCell`, `tcp_bulk`, `Bench::tso_trial`).

use crate::bench::{Bench, Dut};
use crate::sys::pin_to;
use crate::weir::{n, tasks_cpu};
use serde::Serialize;
use std::time::Duration;
use weir_lab::topo::BridgeTopo;

/// One DUT's TSO-sender trial.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TsoCell {
    pub(crate) dut: String,
    /// Receiver's goodput after the first second (slow start excluded), bit/s.
    pub(crate) goodput_bps: f64,
    /// Seconds measured.
    seconds: f64,
    /// weir: super-packets cut, and the segments they made.
    pub(crate) weir_super_packets: Option<u64>,
    pub(crate) weir_segments: Option<u64>,
    /// weir: super-packets forwarded whole, and the segments they stood for.
    pub(crate) weir_kept_whole: Option<u64>,
    weir_whole_segments: Option<u64>,
    /// weir: frames it forwarded towards the receiver.
    weir_tx: Option<u64>,
    /// weir: its thread's CPU time per frame forwarded towards the receiver (ns).
    pub(crate) weir_thread_ns_per_frame: Option<f64>,
    /// weir: frames it could not read whole (must be 0).
    pub(crate) weir_truncated: Option<u64>,
}

/// A bulk TCP flow (cubic, the host's default offloads on the sender's veth) from `snd`
/// to `rcv` for `dur`; the receiver's goodput after the first second, with the seconds
/// measured. Sender and receiver threads on `cpu`.
fn tcp_bulk(t: &BridgeTopo, dur: Duration, cpu: Option<usize>) -> Result<(f64, f64), String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from((BridgeTopo::RCV_ADDR, 5999));
    let listener = t
        .rcv
        .run(move || std::net::TcpListener::bind(addr))
        .map_err(|e| format!("tcp listen: {e}"))?;
    let receiver = std::thread::spawn(move || -> Result<(f64, f64), String> {
        pin_to(cpu);
        let (mut c, _) = listener.accept().map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 1 << 18];
        let mut total = 0u64;
        let start = std::time::Instant::now();
        let mut mark: Option<(u64, std::time::Instant)> = None;
        loop {
            let n = c.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if mark.is_none() && start.elapsed() >= Duration::from_secs(1) {
                mark = Some((total, std::time::Instant::now()));
            }
        }
        let (b0, t0) = mark.ok_or("the flow lasted less than a second")?;
        let secs = t0.elapsed().as_secs_f64();
        Ok(((total - b0) as f64 * 8.0 / secs, secs))
    });
    let sender = t
        .snd
        .spawn(move || -> Result<(), String> {
            pin_to(cpu);
            let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .map_err(|e| format!("tcp connect: {e}"))?;
            let cc = b"cubic";
            // SAFETY: setsockopt with a valid buffer of the given length.
            let r = unsafe {
                use std::os::fd::AsRawFd;
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_CONGESTION,
                    cc.as_ptr() as *const libc::c_void,
                    cc.len() as libc::socklen_t,
                )
            };
            if r != 0 {
                return Err(format!(
                    "TCP_CONGESTION cubic: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let chunk = vec![0x5au8; 1 << 16];
            let end = std::time::Instant::now() + dur;
            while std::time::Instant::now() < end {
                s.write_all(&chunk).map_err(|e| e.to_string())?;
            }
            s.shutdown(std::net::Shutdown::Write)
                .map_err(|e| e.to_string())
        })
        .map_err(|e| e.to_string())?;
    sender.join().map_err(|_| "sender panicked")??;
    receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())?
}

impl Bench {
    /// The TSO-sender trial through `dut` (already in place; weir is started here).
    pub(crate) fn tso_trial(&mut self, dut: Dut, dur: Duration) -> Result<TsoCell, String> {
        self.check_interrupt()?;
        let weir = self.start_weir(dut)?;
        let c0 = weir.as_ref().map(|w| tasks_cpu(&w.tids));
        let flow = tcp_bulk(&self.topo, dur, self.gen_cpu);
        let c1 = weir.as_ref().map(|w| tasks_cpu(&w.tids));
        let report = match weir {
            Some(w) => Some(w.stop()?),
            None => None,
        };
        let (goodput_bps, seconds) = flow?;
        let out = report.as_ref().map(|r| &r["outbound"]);
        let gso = |k: &str| out.map(|l| n(&l["gso"][k]));
        // wire frames: a super-packet sent whole counts once in `tx`, as its segments here
        let tx = out.map(|l| {
            n(&l["tx"]["packets"]) - n(&l["gso"]["kept_whole"]) + n(&l["gso"]["whole_segments"])
        });
        Ok(TsoCell {
            dut: dut.name().into(),
            goodput_bps,
            seconds,
            weir_super_packets: gso("super_packets"),
            weir_segments: gso("segments"),
            weir_kept_whole: gso("kept_whole"),
            weir_whole_segments: gso("whole_segments"),
            weir_tx: tx,
            weir_thread_ns_per_frame: c0
                .zip(c1)
                .zip(tx)
                .map(|((a, b), n)| (b.exec_ns - a.exec_ns) as f64 / n.max(1) as f64),
            weir_truncated: out.map(|l| n(&l["truncated"]["packets"])),
        })
    }
}
