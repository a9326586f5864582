//! A rule's layer-7 conditions (`http.host`, `http.path`, `http.method`, `http.mime`,
//! `tls.sni`): each key's patterns become one condition of the policy's
//! [`L7Set`], the rule requires their bits ([`crate::classify::Match::l7`]).

use super::super::raw::{parse_list, RawRule, Src};
use crate::app::l7::{L7Cond, L7Set, MAX_CONDS};

/// The bits rule `r` requires, its conditions added to `set`; errors at `file:line:col`.
pub(super) fn rule_l7(src: &mut Src<'_>, r: &RawRule, set: &mut L7Set) -> u64 {
    let mut bits = 0;
    for (kind, v) in r.l7_values() {
        let Some(patterns) = parse_list(src, kind.key(), v, |p| kind.check(p)) else {
            continue;
        };
        match set.intern(L7Cond { kind, patterns }) {
            Some(b) => bits |= b,
            None => src.err(
                v.span(),
                format!(
                    "`{}`: a policy may have at most {MAX_CONDS} distinct layer-7 conditions",
                    kind.key()
                ),
            ),
        }
    }
    bits
}
