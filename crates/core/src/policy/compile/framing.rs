//! The framing keys of `[link]` and `[[emulate]]`: `framing` (CAKE's keywords), then
//! `overhead`, `mpu`, `atm` and `ptm` over what the keywords set ([`crate::framing`]).

use super::super::raw::Src;
use crate::framing::{Framing, FramingError, FramingSpec};
use std::ops::RangeInclusive;
use toml::Spanned;

/// The keys as written.
pub(super) struct FramingKeys<'a> {
    pub(super) framing: Option<&'a Spanned<String>>,
    pub(super) overhead: Option<&'a Spanned<i64>>,
    pub(super) mpu: Option<&'a Spanned<i64>>,
    pub(super) atm: Option<&'a Spanned<bool>>,
    pub(super) ptm: Option<&'a Spanned<bool>>,
}

/// The framing the keys describe, `overhead` and the resulting overhead within
/// `overheads`, `mpu` within `0..=max_mpu`. Errors go to the key at fault; the framing is
/// then the default (the frame as it is).
pub(super) fn compile_framing(
    src: &mut Src<'_>,
    k: FramingKeys<'_>,
    overheads: RangeInclusive<i32>,
    max_mpu: u32,
) -> Framing {
    let errors = src.errors.len();
    let overhead = k.overhead.and_then(|o| match i32::try_from(*o.get_ref()) {
        Ok(x) if overheads.contains(&x) => Some(x),
        _ => {
            src.err(
                o.span(),
                format!(
                    "`overhead`: {} is outside {}..={} bytes per frame",
                    o.get_ref(),
                    overheads.start(),
                    overheads.end()
                ),
            );
            None
        }
    });
    let mpu = k.mpu.and_then(|m| match u32::try_from(*m.get_ref()) {
        Ok(x) if x <= max_mpu => Some(x),
        _ => {
            src.err(
                m.span(),
                format!("`mpu`: {} is outside 0..={max_mpu} bytes", m.get_ref()),
            );
            None
        }
    });
    if let (Some(a), Some(p)) = (k.atm, k.ptm) {
        if *a.get_ref() && *p.get_ref() {
            src.err(
                p.span(),
                "`atm` and `ptm` are both true: a link codes its frames one way",
            );
        }
    }
    if src.errors.len() > errors {
        return Framing::default();
    }
    let spec = FramingSpec {
        keywords: k.framing.map(|f| f.get_ref().as_str()),
        overhead,
        mpu,
        atm: k.atm.map(|a| *a.get_ref()),
        ptm: k.ptm.map(|p| *p.get_ref()),
    };
    let at_framing = k.framing.map(Spanned::span);
    match spec.resolve() {
        Ok(f) if overheads.contains(&f.overhead()) => f,
        Ok(f) => {
            // only keywords can get here: an `overhead` key was checked above
            let span = at_framing.unwrap_or_default();
            src.err(
                span,
                format!(
                    "`framing`: the keywords add up to an overhead of {} bytes per frame, \
                     outside {}..={}",
                    f.overhead(),
                    overheads.start(),
                    overheads.end()
                ),
            );
            Framing::default()
        }
        Err(e) => {
            let (key, span) = match e {
                FramingError::UnknownKeyword(_) => ("framing", at_framing),
                _ => match (k.overhead, k.framing, k.mpu) {
                    (Some(o), _, _) => ("overhead", Some(o.span())),
                    (None, Some(f), _) => ("framing", Some(f.span())),
                    (None, None, m) => ("mpu", m.map(Spanned::span)),
                },
            };
            src.err(span.unwrap_or_default(), format!("`{key}`: {e}"));
            Framing::default()
        }
    }
}
