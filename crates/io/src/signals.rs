//! SIGINT/SIGTERM → a stop flag the data-path loop polls; SIGHUP → a reload flag. The
//! handlers are installed without SA_RESTART so a sleeping `ppoll` returns at once with
//! EINTR.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Install the handlers (idempotent) and return the flag they set.
pub fn install() -> &'static AtomicBool {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    &STOP
}

/// The flag without installing anything (for tests that stop the loop themselves).
pub fn flag() -> &'static AtomicBool {
    &STOP
}

static HUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hup(_: libc::c_int) {
    HUP.store(true, Ordering::SeqCst);
}

/// Install the SIGHUP handler (idempotent) and return the flag it sets: `weir run`
/// re-reads its policy file when it finds the flag set (and clears it).
pub fn install_hup() -> &'static AtomicBool {
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_hup as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(libc::SIGHUP, &sa, std::ptr::null_mut());
    }
    &HUP
}
