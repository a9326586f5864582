//! [`DeviceConfig`]: everything a [`super::Device`] is made of, as plain data the policy
//! compiler fills in (`Policy::device_config`). [`super::Device::new`] builds a device
//! from one; [`super::Device::replace_policy`] moves a running device onto another. The
//! device knows nothing of policies: this struct is the whole contract between them.

use crate::adapt::AdaptConfig;
use crate::admission::AdmissionTable;
use crate::app::l7::L7Set;
use crate::classify::Classifier;
use crate::conn::ConnConfig;
use crate::diffserv::Conditioner;
use crate::sched::linkshare::LinkShare;
use crate::stage::EmuStage;
use crate::tcp::mss::MssTable;
use crate::tcp::tcr::TcrTable;

/// One direction's own parts. A direction with no classifier is forwarded untouched by
/// the policy (connection-level stages — MSS clamping, TCP rate control — still act on
/// it).
#[derive(Default)]
pub struct LaneConfig {
    /// The rules, if the policy shapes or emulates this direction.
    pub classifier: Option<Classifier>,
    /// DiffServ meters and markers, between the classifier and the shaper.
    pub conditioner: Option<Conditioner>,
    /// The link-sharing scheduler with its leaf queues.
    pub shaper: Option<LinkShare>,
    /// The WAN link emulator, after the shaper.
    pub emulator: Option<EmuStage>,
}

impl LaneConfig {
    /// The direction's own stages, in rank order, after `stages` (the device-wide ones
    /// that come first); the classifier.
    pub(crate) fn into_parts(
        self,
        mut stages: Vec<Box<dyn crate::stage::Stage>>,
    ) -> (Option<Classifier>, Vec<Box<dyn crate::stage::Stage>>) {
        if let Some(c) = self.conditioner {
            stages.push(Box::new(c));
        }
        if let Some(s) = self.shaper {
            stages.push(Box::new(s));
        }
        if let Some(e) = self.emulator {
            stages.push(Box::new(e));
        }
        (self.classifier, stages)
    }

    /// Whether the policy does anything to this direction.
    pub fn is_empty(&self) -> bool {
        self.classifier.is_none()
    }
}

/// What a device is made of (see the module comment).
#[derive(Default)]
pub struct DeviceConfig {
    /// Where it came from (the policy's file name), for reports.
    pub source: String,
    /// How the policy's rates count a frame (overhead, mpu, ATM/PTM cells), for run-time
    /// rate changes.
    pub framing: crate::framing::Framing,
    /// Outbound, inbound (indexed by [`crate::pool::Direction::index`]).
    pub lanes: [LaneConfig; 2],
    /// The connection table shared by both directions; `None`: the device keeps none.
    /// It survives reloads: a reload's setting only says whether one is needed.
    pub conns: Option<ConnConfig>,
    /// MSS caps (both directions: a SYN-ACK is clamped in a direction that is not shaped).
    pub mss: Option<MssTable>,
    /// TCP rate control of the `tcr` classes (needs the connection table).
    pub tcr: Option<TcrTable>,
    /// Admission control of the `max_sessions` classes (needs the connection table).
    pub admission: Option<AdmissionTable>,
    /// The rules' layer-7 conditions (application tracking).
    pub l7: L7Set,
    /// The adaptive controller (`[adapt]`).
    pub adapt: Option<AdaptConfig>,
    /// Which TSO/GSO super-packets may cross whole (`[link] super_packets`).
    pub super_packets: crate::whole::SuperPackets,
}

impl DeviceConfig {
    /// What cannot work together, before anything is built.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.tcr.is_some() && self.conns.is_none() {
            return Err("TCP rate control needs the connection table".into());
        }
        if self.admission.is_some() && self.conns.is_none() {
            return Err("admission control needs the connection table".into());
        }
        Ok(())
    }
}

/// What a device can be built from at a time: a ready [`DeviceConfig`], or a policy
/// (`&Policy`, whose `device_config` builds one). [`super::Device::replace_policy`] takes
/// either.
pub trait Configure {
    fn configure(self, now: crate::time::Instant) -> Result<DeviceConfig, String>;
}

impl Configure for DeviceConfig {
    fn configure(self, _now: crate::time::Instant) -> Result<DeviceConfig, String> {
        Ok(self)
    }
}
