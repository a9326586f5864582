//! The ClientHello of a QUIC connection, for the policy's `tls.sni` conditions (see
//! [`crate::app::quic`]): each datagram the client sends while its hello is wanted is
//! opened, its CRYPTO fragments put together per connection, and the hello judged as a
//! TLS ClientHello over TCP is. At most [`MAX_QUIC_PACKETS`] datagrams a connection and
//! [`MAX_BUFFERED`] hellos being put together at once (when full, a sweep drops those of
//! connections that are gone, at most once per 64 refusals); the packets are forwarded
//! and classified as usual whatever happens here.

use std::collections::HashMap;

use super::heads::{earned, What};
use super::{Apps, Room, Tag, MAX_BUFFERED};
use crate::app::quic::{self, Assembly, Progress, Scratch};
use crate::app::tls::{self, Sni};
use crate::conn::{ConnId, ConnTable};
use crate::time::Instant;

/// Client datagrams of a QUIC connection read before its hello is given up on (a first
/// flight is one to three Initial datagrams, more with retransmissions).
pub const MAX_QUIC_PACKETS: u8 = 8;

/// Hellos being put together, and what they reuse.
#[derive(Default)]
pub(super) struct Hellos {
    /// By connection slot: the connection's first-seen stamp and its assembly.
    open: HashMap<u32, (Instant, Assembly)>,
    spare: Vec<Assembly>,
    scratch: Scratch,
    room: Room,
}

impl Hellos {
    fn finish(&mut self, id: u32) {
        if let Some((_, mut a)) = self.open.remove(&id) {
            if self.spare.len() < 16 {
                a.clear();
                self.spare.push(a);
            }
        }
    }
}

impl Apps {
    /// A datagram `payload` the client of QUIC connection `id` sent while its hello is
    /// wanted. Returns the tag as updated (the caller stores it).
    pub(super) fn read_quic(
        &mut self,
        t: &ConnTable,
        id: ConnId,
        mut tag: Tag,
        payload: &[u8],
    ) -> Tag {
        tag.tries = tag.tries.saturating_add(1);
        let h = &mut self.hellos;
        let known = h.open.get(&id.0).is_some_and(|(s, _)| *s == tag.stamp);
        if !known {
            if h.open.len() >= MAX_BUFFERED && h.room.sweep_due(MAX_BUFFERED) {
                h.open.retain(|&k, (s, _)| t.is_same(ConnId(k), *s));
            }
            if h.open.len() >= MAX_BUFFERED {
                h.room.refused();
                self.stats.heads_unread += 1;
                tag.want = 0;
                return tag;
            }
            let a = h.spare.pop().unwrap_or_default();
            if let Some((_, mut old)) = h.open.insert(id.0, (tag.stamp, a)) {
                old.clear(); // an older connection in the same slot
            }
        }
        let Hellos { open, scratch, .. } = h;
        let Some((_, asm)) = open.get_mut(&id.0) else {
            return tag;
        };
        let mut progress = Progress::More;
        let read = quic::client_initial(payload, scratch, |offset, bytes| {
            if progress == Progress::More {
                progress = asm.add(offset, bytes);
            }
        });
        self.stats.quic_unopened += u64::from(read.failed);
        let done = match progress {
            Progress::Complete(n) => {
                let bits = match tls::handshake_sni(&asm.bytes()[..n]) {
                    Sni::Name(name) => Some(self.l7.sni(Some(name))),
                    Sni::NoName => Some(0),
                    Sni::Incomplete | Sni::NotTls => None,
                };
                match bits {
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
            self.hellos.finish(id.0);
        }
        tag
    }
}
