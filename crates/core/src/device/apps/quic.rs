//! The ClientHello of a QUIC connection, for the policy's `tls.sni` conditions (see
//! [`crate::app::quic`]): each datagram the client sends while its hello is wanted is
//! opened, its CRYPTO fragments put together per connection, and the hello judged as a
//! TLS ClientHello over TCP is. At most [`MAX_QUIC_PACKETS`] datagrams a connection and
//! [`MAX_BUFFERED`] hellos being put together at once (when full, a sweep drops those of
//! connections that are gone, at most once per 64 refusals); the packets are forwarded
//! and classified as usual whatever happens here.

use std::collections::HashMap;

use super::heads::{earned, sni_bits, What};
use super::{Apps, Room, Tag, MAX_BUFFERED};
use crate::app::quic::{self, Assembly, Keys, Progress, Scratch};
use crate::app::tls;
use crate::conn::{ConnId, ConnTable};
use crate::time::Instant;

/// Client datagrams of a QUIC connection read before its hello is given up on, whatever
/// they hold (a first flight is one to three Initial datagrams, more with
/// retransmissions; once the handshake moves on the client's datagrams are Handshake and
/// short-header packets, which count too).
pub const MAX_QUIC_PACKETS: u8 = 8;

/// A hello being put together: its connection's stamp, Initial keys and fragments.
struct Open {
    stamp: Instant,
    keys: Option<Keys>,
    asm: Assembly,
}

/// Hellos being put together, and what they reuse.
#[derive(Default)]
pub(super) struct Hellos {
    /// By connection slot.
    open: HashMap<u32, Open>,
    spare: Vec<Assembly>,
    scratch: Scratch,
    room: Room,
}

/// A finished assembly back to the spares (at most 16 kept).
fn recycle(spare: &mut Vec<Assembly>, mut a: Assembly) {
    if spare.len() < 16 {
        a.clear();
        spare.push(a);
    }
}

impl Apps {
    /// A datagram `payload` the client of QUIC connection `id` sent while its hello is
    /// wanted. Returns the tag as updated (the caller stores it).
    ///
    /// A hello that one datagram completes (the usual case) never takes an entry; one
    /// that needs more datagrams takes one only once a packet has opened (a datagram that
    /// opens nothing reserves nothing). An entry of an older connection in the same slot
    /// is dropped first.
    pub(super) fn read_quic(
        &mut self,
        t: &ConnTable,
        id: ConnId,
        mut tag: Tag,
        payload: &[u8],
    ) -> Tag {
        tag.tries = tag.tries.saturating_add(1);
        let Hellos {
            open,
            spare,
            scratch,
            room,
        } = &mut self.hellos;
        let (mut e, kept) = match open.remove(&id.0) {
            Some(e) if e.stamp == tag.stamp => (e, true),
            stale => {
                if let Some(s) = stale {
                    recycle(spare, s.asm);
                }
                let asm = spare.pop().unwrap_or_default();
                let e = Open {
                    stamp: tag.stamp,
                    keys: None,
                    asm,
                };
                (e, false)
            }
        };
        let mut progress = Progress::More;
        let read = quic::client_initial(payload, scratch, &mut e.keys, |offset, bytes| {
            if progress == Progress::More {
                progress = e.asm.add(offset, bytes);
            }
        });
        self.stats.quic_unopened += u64::from(read.failed);
        let done = match progress {
            Progress::Complete(n) => {
                match sni_bits(&self.l7, tls::handshake_sni(&e.asm.bytes()[..n])) {
                    Some(bits) => {
                        tag.l7 = earned(&self.l7, What::Hello, tag.l7, bits);
                        self.stats.quic_hellos += 1;
                    }
                    None => self.stats.heads_unread += 1,
                }
                true
            }
            Progress::TooBig => {
                self.stats.heads_unread += 1;
                true
            }
            Progress::More if tag.tries >= MAX_QUIC_PACKETS => {
                self.stats.heads_unread += 1;
                true
            }
            Progress::More => false,
        };
        if done {
            tag.want = 0;
            recycle(spare, e.asm);
            return tag;
        }
        if !kept && e.keys.is_none() {
            recycle(spare, e.asm); // nothing opened: nothing to keep
            return tag;
        }
        let live = |k: u32, o: &Open| t.is_same(ConnId(k), o.stamp);
        if !kept && !room.make_room(open, MAX_BUFFERED, live, |o| recycle(spare, o.asm)) {
            recycle(spare, e.asm);
            self.stats.heads_unread += 1;
            tag.want = 0;
            return tag;
        }
        open.insert(id.0, e);
        tag
    }
}
