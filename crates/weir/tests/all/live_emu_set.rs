//! `weir emu set` on a running `weir emu` (root; namespaces `snd ─ [weir emu] ─ rcv`):
//! the delay changes under a stream of echoes without losing one — the echoes already in
//! the link keep their delay, the next ones get the new — and bad requests are refused
//! with what is wrong, the link left as it was.

use crate::common::{start_weir, weir, TempDir};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use std::time::Instant;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

/// The tests time echoes to a millisecond: one weir and one stream at a time on 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `n` UDP datagrams from snd to an echo on rcv, one every `every` (not waiting for the
/// replies: a stream, some in the link at any time); each one's round-trip time in ms, or
/// `None` if no reply came within a second of the last send.
fn echo_stream(t: &BridgeTopo, n: usize, every: Duration) -> Vec<Option<f64>> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let echo = sc.spawn(|| {
            t.rcv.run(|| {
                let s = UdpSocket::bind("0.0.0.0:7007").unwrap();
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                let mut buf = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((len, from)) = s.recv_from(&mut buf) {
                        let _ = s.send_to(&buf[..len], from);
                    }
                }
            })
        });
        std::thread::sleep(Duration::from_millis(200));
        let rtts = t.snd.run(|| {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.connect((BridgeTopo::RCV_ADDR, 7007)).unwrap();
            s.set_nonblocking(true).unwrap();
            let start = Instant::now();
            let mut sent: Vec<Instant> = Vec::new();
            let mut rtts = vec![None; n];
            let mut buf = [0u8; 64];
            loop {
                let now = Instant::now();
                if sent.len() < n && now >= start + every * sent.len() as u32 {
                    let seq = (sent.len() as u32).to_be_bytes();
                    s.send(&seq).unwrap();
                    sent.push(now);
                }
                while let Ok(len) = s.recv(&mut buf) {
                    if len == 4 {
                        let i = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
                        if let (Some(at), Some(r)) = (sent.get(i), rtts.get_mut(i)) {
                            *r = Some(at.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                }
                let done = sent.len() == n
                    && (rtts.iter().all(Option::is_some)
                        || now > *sent.last().unwrap() + Duration::from_secs(1));
                if done {
                    break rtts;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        stop.store(true, Ordering::Relaxed);
        echo.join().unwrap();
        rtts
    })
}

/// Every echo of [`echo_stream`] answered (none lost in a change), each with the old round
/// trip (20 ms: the link delays one way) or the new (80 ms), and once the new, always the
/// new; the change came 0.5 s into the stream.
fn assert_step_20_to_80(ms: &[Option<f64>]) {
    let ms: Vec<f64> = ms
        .iter()
        .map(|r| r.expect("every echo answered: none lost in the change"))
        .collect();
    println!("RTTs (ms): {ms:.1?}");
    let first_new = ms
        .iter()
        .position(|&r| r >= 79.0)
        .expect("the new delay shows");
    assert!(
        first_new >= 12,
        "the change came 0.5 s into the stream: {ms:?}"
    );
    // (the first waits for ARP, whose request crosses the delayed link too)
    for (i, &r) in ms.iter().enumerate().skip(1) {
        let want = if i < first_new { 20.0 } else { 80.0 };
        assert!(
            r >= want - 0.5 && r < want + 10.0,
            "echo {i}: {r} ms, {ms:?}"
        );
    }
}

#[test]
fn weir_emu_set_changes_the_delay_in_place() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("weir_emu_set_changes_the_delay_in_place") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir(std::env::temp_dir().join(format!("weir-live-set-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let t = BridgeTopo::new("set").unwrap();
    let sock = dir.0.join("weir.sock");
    let s = sock.to_str().unwrap().to_string();
    let g = start_weir(&t, &["emu", "--delay", "20ms"], &sock);
    // 60 echoes, one every 25 ms; the delay goes from 20 to 80 ms after 0.7 s
    // 60 UDP echoes, one every 25 ms from 0.2 s; the delay goes from 20 to 80 ms at 0.7 s
    let ms = std::thread::scope(|sc| {
        let echoes = sc.spawn(|| echo_stream(&t, 60, Duration::from_millis(25)));
        std::thread::sleep(Duration::from_millis(700));
        let (code, out, err) = weir(&["emu", "set", "--socket", &s, "--delay", "80ms"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("outbound: delay 80ms"), "{out}");
        echoes.join().unwrap()
    });
    assert_step_20_to_80(&ms);
    // the statistics show the new link
    let v = crate::common::stats(&sock);
    assert_eq!(
        v["outbound"]["pipeline"]["emulators"][0]["config"], "delay 80ms",
        "{v}"
    );
    // refused, the link unchanged: a direction weir emu does not emulate, a bad value,
    // nothing to change
    for (args, want) in [
        (
            &["--direction", "inbound", "--delay", "5ms"][..],
            "no emulated link in the direction asked",
        ),
        (&["--delay", "soon"][..], "--delay:"),
        (&["--loss", "often"][..], "--loss:"),
        (&[][..], "nothing to change"),
    ] {
        let mut argv = vec!["emu", "set", "--socket", &s];
        argv.extend_from_slice(args);
        let (code, _, err) = weir(&argv);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let v = crate::common::stats(&sock);
    assert_eq!(
        v["outbound"]["pipeline"]["emulators"][0]["config"], "delay 80ms",
        "{v}"
    );
    // a path that changes over time, set on the running link
    let (code, out, err) = weir(&[
        "emu",
        "set",
        "--socket",
        &s,
        "--delay-schedule",
        "0s=30ms,1s=40ms",
        "--outage",
        "5s-6s",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "outbound: delay schedule of 2 points (30ms to 40ms), 1 outage (1s down in all)"
        ),
        "{out}"
    );
    let out = g.terminate();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("weir emu set --delay 80ms"), "{log}");
}

/// SIGHUP on `weir emu --delay-trace FILE`: the file is read again and its delay applies
/// to the next packets, none lost; a broken file is refused with its line, the link left
/// as it was.
#[test]
fn weir_emu_reads_its_delay_trace_again_on_sighup() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("weir_emu_reads_its_delay_trace_again_on_sighup") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir(std::env::temp_dir().join(format!("weir-live-hup-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let trace = dir.0.join("rtt.txt");
    std::fs::write(&trace, "# time delay (ms)\n0 20\n").unwrap();
    let t = BridgeTopo::new("hup").unwrap();
    let sock = dir.0.join("weir.sock");
    let g = start_weir(
        &t,
        &["emu", "--delay-trace", trace.to_str().unwrap()],
        &sock,
    );
    let pid = g.0.as_ref().unwrap().id() as i32;
    let hup = || {
        // SAFETY: signalling our own child (ip netns exec runs weir in place).
        unsafe { libc::kill(pid, libc::SIGHUP) };
    };
    // 60 UDP echoes, one every 25 ms from 0.2 s; the file says 80 ms from 0.7 s on
    let ms = std::thread::scope(|sc| {
        let echoes = sc.spawn(|| echo_stream(&t, 60, Duration::from_millis(25)));
        std::thread::sleep(Duration::from_millis(700));
        std::fs::write(&trace, "0 80\n").unwrap();
        hup();
        echoes.join().unwrap()
    });
    assert_step_20_to_80(&ms);
    // a file that goes back in time: refused, the running link kept
    std::fs::write(&trace, "0 80\n1000 30\n500 10\n").unwrap();
    hup();
    std::thread::sleep(Duration::from_millis(600));
    let v = crate::common::stats(&sock);
    assert_eq!(v["policy"]["reloads"], 1, "{}", v["policy"]);
    assert_eq!(v["policy"]["reloads_refused"], 1, "{}", v["policy"]);
    let out = g.terminate();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("SIGHUP") && log.contains("line 3: field 1 (TIME): 500ms is not after"),
        "{log}"
    );
}
