//! An `[[emulate]]` profile's netem knobs (docs/emulator.md has netem's name for each):
//! correlations of jitter, duplication and corruption, a distribution table (iproute2's
//! `.dist` format, read beside the policy), netem's `reorder P C gap N`, slotted delivery,
//! `ecn`, a limit on the packets held (netem's `limit`) and cell framing
//! (`cell_size`/`cell_overhead`, netem's `rate … packetoverhead cellsize celloverhead`).
//! Values are checked here for their form and by [`EmuConfig::validate`] for their range.

use super::super::raw::{parse_with, RawEmulate, Src};
use super::super::PolicyError;
use super::emulators::read_named;
use crate::emulate::dist::Jitter;
use crate::emulate::slot::{Slot, SlotGap};
use crate::emulate::table::DistTable;
use crate::emulate::{spec, EmuConfig, Reorder};
use crate::framing::Framing;
use crate::units;
use toml::Spanned;

/// A probability key (`"25%"` or a fraction), 0 when absent or wrong (reported).
fn prob(src: &mut Src<'_>, key: &str, v: &Option<Spanned<toml::Value>>) -> f64 {
    v.as_ref()
        .and_then(|v| parse_with(src, key, v, spec::parse_prob))
        .unwrap_or(0.0)
}

/// A count key that must be at least 1.
fn count(src: &mut Src<'_>, key: &str, v: &Option<Spanned<i64>>) -> Option<u32> {
    let v = v.as_ref()?;
    match u32::try_from(*v.get_ref()) {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            src.err(
                v.span(),
                format!(
                    "`{key}`: expected a whole number from 1, found {}",
                    v.get_ref()
                ),
            );
            None
        }
    }
}

/// The netem keys of `e` into `cfg`; `jitter_ns`: the profile's `jitter`, if any.
pub(super) fn netem_keys(
    src: &mut Src<'_>,
    e: &RawEmulate,
    jitter_ns: Option<u64>,
    cfg: &mut EmuConfig,
) {
    cfg.jitter_correlation = prob(src, "jitter_correlation", &e.jitter_correlation);
    cfg.duplicate_correlation = prob(src, "duplicate_correlation", &e.duplicate_correlation);
    cfg.corrupt_correlation = prob(src, "corrupt_correlation", &e.corrupt_correlation);
    if let Some(t) = &e.distribution_table {
        match (jitter_ns, &e.distribution) {
            (_, Some(d)) => src.err(
                d.span(),
                "`distribution` and `distribution_table` both shape the jitter: give one",
            ),
            (None, _) => src.err(
                t.span(),
                "`distribution_table`: needs a `jitter` width to shape",
            ),
            (Some(sigma), None) => {
                if let Some((path, text)) = read_named(src, "distribution_table", t) {
                    match DistTable::parse(&path, &text) {
                        Ok(table) => cfg.jitter = Jitter::Table { sigma, table },
                        Err(err) => src.errors.push(PolicyError {
                            file: err.file,
                            line: err.line,
                            col: 1,
                            msg: err.what,
                        }),
                    }
                }
            }
        }
    }
    if let Some(p) = &e.reorder_probability {
        cfg.reorder_early = Reorder {
            probability: parse_with(src, "reorder_probability", p, spec::parse_prob).unwrap_or(0.0),
            correlation: prob(src, "reorder_correlation", &e.reorder_correlation),
            gap: count(src, "reorder_gap", &e.reorder_gap).unwrap_or(1),
        };
    } else if let Some(k) = e
        .reorder_correlation
        .as_ref()
        .map(|v| v.span())
        .or(e.reorder_gap.as_ref().map(|v| v.span()))
    {
        src.err(
            k,
            "`reorder_correlation` and `reorder_gap` need `reorder_probability`",
        );
    }
    match &e.slot {
        Some(s) => {
            let bounds: Vec<Option<u64>> = s
                .get_ref()
                .iter()
                .map(|v| parse_with(src, "slot", v, units::parse_duration))
                .collect();
            match bounds[..] {
                [Some(min), Some(max)] => {
                    cfg.slot = Some(Slot {
                        gap: SlotGap::Uniform { min, max },
                        packets: count(src, "slot_packets", &e.slot_packets),
                        bytes: e
                            .slot_bytes
                            .as_ref()
                            .and_then(|v| parse_with(src, "slot_bytes", v, units::parse_size)),
                    })
                }
                [_, _] => {}
                _ => src.err(
                    s.span(),
                    "`slot`: expected [\"MIN\", \"MAX\"]: the time between slots, drawn uniformly between two durations",
                ),
            }
        }
        None => {
            for (key, span) in [
                ("slot_packets", e.slot_packets.as_ref().map(|v| v.span())),
                ("slot_bytes", e.slot_bytes.as_ref().map(|v| v.span())),
            ] {
                if let Some(span) = span {
                    src.err(span, format!("`{key}` needs `slot`"));
                }
            }
        }
    }
    cfg.ecn = e.ecn.as_ref().is_some_and(|v| *v.get_ref());
    cfg.limit_held = count(src, "limit_held", &e.limit_held);
    if let Some(size) = &e.cell_size {
        let written = [
            e.framing.as_ref().map(|v| v.span()),
            e.atm.as_ref().map(|v| v.span()),
            e.ptm.as_ref().map(|v| v.span()),
        ];
        if let Some(span) = written.into_iter().flatten().next() {
            src.err(
                span,
                "`cell_size` sets the cells: not with `framing`, `atm` or `ptm`",
            );
            return;
        }
        let cell_overhead = e.cell_overhead.as_ref().map_or(0, |v| *v.get_ref());
        let (Ok(cells), Ok(oh)) = (u32::try_from(*size.get_ref()), i32::try_from(cell_overhead))
        else {
            src.err(size.span(), "`cell_size`, `cell_overhead`: out of range");
            return;
        };
        match Framing::netem(cfg.framing.overhead(), cells, oh) {
            Ok(f) => cfg.framing = f,
            Err(err) => src.err(size.span(), format!("`cell_size`: {err}")),
        }
    } else if let Some(v) = &e.cell_overhead {
        src.err(v.span(), "`cell_overhead` needs `cell_size`");
    }
}
