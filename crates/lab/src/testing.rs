//! For test binaries that hold several files' tests (weir's, weir-io's, weir-lab's
//! integration tests: one binary each, linked once): the tests of one file run side by
//! side, as they would in a binary of their own, and never beside another file's (a timing
//! check needs the machine to itself). Each test starts with
//! `let _group = weir_lab::testing::group(module_path!());`.

use std::sync::{Condvar, Mutex};

/// Which file's tests are running, and how many.
static GROUP: Mutex<(Option<&'static str>, usize)> = Mutex::new((None, 0));
static GROUP_FREE: Condvar = Condvar::new();

/// A test's place in its file's group (see [`group`]); released when dropped, also when
/// the test panics.
pub struct Group;

/// Waits until no other file's tests run, then joins `file`'s group (`module_path!()`).
pub fn group(file: &'static str) -> Group {
    let mut g = GROUP.lock().unwrap_or_else(|e| e.into_inner());
    while g.0.is_some_and(|f| f != file) {
        g = GROUP_FREE.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    *g = (Some(file), g.1 + 1);
    Group
}

impl Drop for Group {
    fn drop(&mut self) {
        let mut g = GROUP.lock().unwrap_or_else(|e| e.into_inner());
        g.1 -= 1;
        if g.1 == 0 {
            g.0 = None;
            GROUP_FREE.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Two files' tests on four threads: never both files' at once.
    #[test]
    fn one_file_at_a_time() {
        let (a, b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let overlap = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let (a, b, overlap) = (a.clone(), b.clone(), overlap.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let (mine, other, file) = if i % 2 == 0 {
                            (&a, &b, "file_a")
                        } else {
                            (&b, &a, "file_b")
                        };
                        let _g = group(file);
                        mine.fetch_add(1, Ordering::SeqCst);
                        if other.load(Ordering::SeqCst) > 0 {
                            overlap.fetch_add(1, Ordering::SeqCst);
                        }
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        mine.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(overlap.load(Ordering::SeqCst), 0);
    }
}
