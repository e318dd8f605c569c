//! Refusal notices: the `UN` the gatekeeper writes to the sender of a line it dead-lettered, in the protocol's own
//! words (`gatekeeper.notices` says when one is due and what each reason's row says; this writes its line).
//!
//! The line answers the refused one: `re=` its id, `from=` its addressee, `to=` its sender, its `item=` when the
//! line has room for it, `why=` the reason's row, `p=` the route's profile when it declares one, and a tail that
//! says the reason, why (the line's first problem masked, or the row's words) and that nothing was delivered. Its
//! id is the addressee's name and a number in the notices' part of the gatekeeper's range, from a SHA-256 of the
//! refused line and the notice's own words: the same refusal is the same notice, and the clock is never involved.

use sha2::{Digest, Sha256};

use crate::decide::Finding;
use crate::masking::Masker;
use crate::rules::{is_reserved_id, RESERVED_ID_MAX};
use rw1::pytext;
use rw1::Grammar;

/// The first number of the notices' part of the gatekeeper's range (the cancels' part ends just below it).
pub const NOTICE_ID_MIN: u64 = 950_000_000;
/// How many numbers the notices' part holds.
pub const NOTICE_SPAN: u64 = RESERVED_ID_MAX - NOTICE_ID_MIN + 1;
/// What a tail says after its explanation: whoever reads only the line knows it is not the addressee's word.
pub const REFUSED_BY: &str = " (refused by the gatekeeper, not delivered)";
const DOMAIN: &[u8] = b"rw1-refusal-notice v1\x00";
/// An explanation cut shorter than this says nothing: the tail keeps only the reason.
const SHORTEST_DETAIL: usize = 8;

/// What a notice says for one dead-letter reason (a row of `gatekeeper.notices.RULES` that has a `why`).
pub struct Rule<'a> {
    /// the dead-letter reason's code (`check-ho`...)
    pub reason: &'a [u8],
    pub why: &'a [u8],
    /// the tail's words when the line's own problem is not quoted (or masks to nothing)
    pub says: &'a [u8],
    /// whether the tail quotes the line's first problem
    pub quote: bool,
}

/// The refused line's envelope, as parsed.
pub struct Refused<'a> {
    pub id: &'a [u8],
    pub from: &'a [u8],
    pub to: &'a [u8],
    pub item: Option<&'a [u8]>,
}

/// The route a notice is written for.
pub struct Route<'a> {
    pub grammar: &'a Grammar,
    /// the profile's name (`p=`, and part of the id's words)
    pub profile: &'a [u8],
    pub senders: Option<&'a [Vec<u8>]>,
    pub sender_auth: bool,
    pub max_line_bytes: u64,
}

/// A notice's line and id.
#[derive(Debug, PartialEq, Eq)]
pub struct Notice {
    pub line: Vec<u8>,
    pub id: Vec<u8>,
}

/// Whether the refused line's sender may be told: it names a sender and an addressee, its id is not the
/// gatekeeper's, its sender is one of the route's `senders` (when it lists them) and, on a route with sender
/// authentication, the one its signature proves (`proven`).
pub fn told(refused: &Refused<'_>, route: &Route<'_>, proven: Option<&[u8]>) -> bool {
    !refused.from.is_empty()
        && !refused.to.is_empty()
        && !is_reserved_id(refused.id)
        && route
            .senders
            .is_none_or(|s| s.iter().any(|x| x[..] == *refused.from))
        && (!route.sender_auth || proven == Some(refused.from))
}

/// The notice of a refused line (`raw`, dead-lettered by `rule`'s reason with `problems`) whose sender the caller
/// found told ([`told`]), or None when no line fits the route's limits even without the item. `check` is the parser's word
/// on each line written (an error is a bug, returned as it is: the dead letter then goes without a notice).
pub fn write<E>(
    refused: &Refused<'_>,
    rule: &Rule<'_>,
    raw: &[u8],
    problems: &[Finding],
    route: &Route<'_>,
    sensitive: &[&[u8]],
    mut check: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<Option<Notice>, E> {
    let line_text = String::from_utf8_lossy(raw); // a line that parsed passed the gate: UTF-8, nothing replaced
    let masker =
        Masker::for_slots(sensitive.iter().copied()).knowing(Some(line_text.as_bytes()), problems);
    let quoted = match problems.first() {
        Some(p) if rule.quote => masker.problem(p).message,
        _ => rule.says.to_vec(),
    };
    let mut detail = printable(&masker.text(&quoted));
    if detail.is_empty() {
        detail = rule.says.to_vec();
    }
    let mut slots: Vec<(&[u8], &[u8])> = vec![(b"why", rule.why)];
    if route.grammar.declared.is_some() {
        slots.push((b"p", route.profile));
    }
    let (addressee, sender) = (refused.to, refused.from);
    let items: &[Option<&[u8]>] = match refused.item {
        Some(item) => &[Some(item), None],
        None => &[None],
    };
    for &item in items {
        let line = |id: &[u8], tail: Option<&[u8]>| {
            let envelope = [Some(refused.id), Some(addressee), Some(sender), item];
            rw1::encode::line(b"UN", id, envelope, &slots, tail, route.grammar)
        };
        // a head as long as the real line's but its tail: what is left of the line for the tail
        let head = line(&numbered(addressee, NOTICE_ID_MIN), None);
        check(&head)?;
        let left = i128::from(route.max_line_bytes) - head.len() as i128 - " // ".len() as i128;
        let room = left.min(route.grammar.tail_max as i128);
        let Some(tail) = tail_of(rule.reason, &detail, room) else {
            continue;
        };
        let words = [rule.reason, rule.why, route.profile, &tail[..]].join(&0u8);
        let id = numbered(addressee, NOTICE_ID_MIN + number(raw, &words) % NOTICE_SPAN);
        let written = line(&id, Some(&tail));
        check(&written)?;
        if crate::gate::screen(&written, route.max_line_bytes).is_err() {
            continue;
        }
        return Ok(Some(Notice { line: written, id }));
    }
    Ok(None)
}

fn numbered(name: &[u8], n: u64) -> Vec<u8> {
    let mut out = name.to_vec();
    out.push(b'-');
    out.extend_from_slice(n.to_string().as_bytes());
    out
}

/// The first 8 bytes of the SHA-256 of the notices' domain, the refused line and the notice's words, big-endian.
fn number(raw: &[u8], words: &[u8]) -> u64 {
    let digest = Sha256::new()
        .chain_update(DOMAIN)
        .chain_update(raw)
        .chain_update([0u8])
        .chain_update(words)
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// `text` as one line of printable ASCII: its whitespace (Python's `str.isspace`) separates words by one space,
/// none at either end; any other character outside printable ASCII is `?`.
pub fn printable(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut gap = false;
    for c in pytext::chars(text) {
        if pytext::is_space(c) {
            gap = !out.is_empty();
            continue;
        }
        if gap {
            out.push(b' ');
            gap = false;
        }
        out.push(
            u8::try_from(c)
                .ok()
                .filter(|b| (0x20..=0x7e).contains(b))
                .unwrap_or(b'?'),
        );
    }
    out
}

/// `<reason>: <detail> (refused by the gatekeeper, not delivered)` in at most `room` bytes (the detail is ASCII),
/// the detail cut (`...`) to fit; the reason and the attribution alone when the cut would leave fewer than
/// `SHORTEST_DETAIL` characters of it; None when not even those fit.
pub fn tail_of(reason: &[u8], detail: &[u8], room: i128) -> Option<Vec<u8>> {
    let by = REFUSED_BY.as_bytes();
    let full = [reason, b": ", detail, by].concat();
    if full.len() as i128 <= room {
        return Some(full);
    }
    let keep = room - reason.len() as i128 - ": ...".len() as i128 - by.len() as i128;
    if keep >= SHORTEST_DETAIL as i128 {
        let cut = &detail[..usize::try_from(keep).map_or(detail.len(), |k| k.min(detail.len()))];
        return Some([reason, b": ", rstrip(cut), b"...", by].concat());
    }
    let bare = [reason, by].concat();
    (bare.len() as i128 <= room).then_some(bare)
}

fn rstrip(s: &[u8]) -> &[u8] {
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_notices_part_ends_the_gatekeepers_range() {
        assert_eq!(NOTICE_ID_MIN + NOTICE_SPAN - 1, RESERVED_ID_MAX);
    }

    #[test]
    fn a_tail_is_cut_to_its_room_and_keeps_its_attribution() {
        let full = tail_of(b"check-ho", b"amt differs", 300).unwrap();
        assert_eq!(
            full,
            [&b"check-ho: amt differs"[..], REFUSED_BY.as_bytes()].concat()
        );
        let cut = tail_of(b"check-ho", &[b'x'; 100], 80).unwrap();
        assert_eq!(cut.len(), 80);
        assert!(cut.ends_with([&b"x..."[..], REFUSED_BY.as_bytes()].concat().as_slice()));
        let bare = tail_of(b"check-ho", &[b'x'; 100], 55).unwrap();
        assert_eq!(bare, [&b"check-ho"[..], REFUSED_BY.as_bytes()].concat());
        assert_eq!(tail_of(b"check-ho", &[b'x'; 100], 20), None);
        assert_eq!(tail_of(b"check-ho", b"x", -5), None);
    }

    #[test]
    fn printable_collapses_whitespace_and_marks_the_rest() {
        assert_eq!(
            printable(" a\t\u{1c}b \u{3000} caf\u{e9}\u{202e} ".as_bytes()),
            b"a b caf??"
        );
        assert_eq!(printable(b"   "), b"");
    }

    fn bare_grammar() -> Grammar {
        Grammar::new(rw1::Vocabulary {
            tail_max: 300,
            ..Default::default()
        })
        .unwrap()
    }

    fn finding(message: &str) -> Finding {
        Finding {
            code: "amt-mismatch".into(),
            tier: None,
            message: message.as_bytes().to_vec(),
            slot: Some(b"acct".to_vec()),
            expected: Some(b"40-12-88/61102938".to_vec()),
            got: Some(b"40-12-88/61102983".to_vec()),
        }
    }

    proptest! {
        #[test]
        fn any_notice_written_fits_its_route_and_never_shows_the_account(
            message in any::<String>(),
            item in proptest::option::of("[a-z:0-9-]{0,300}"),
            limit in 0u64..1200,
            quote in any::<bool>(),
        ) {
            let grammar = bare_grammar();
            let route = Route { grammar: &grammar, profile: b"pay", senders: None, sender_auth: false, max_line_bytes: limit };
            let refused = Refused { id: b"scheduler-1", from: b"scheduler", to: b"payer", item: item.as_deref().map(str::as_bytes) };
            let rule = Rule { reason: b"check-ho", why: b"PERM", says: b"the handoff differs", quote };
            let raw = format!("RW1 HO scheduler-1 from=scheduler to=payer acct=40-12-88/61102938 // {message}");
            let problems = [finding(&format!("{message} 40-12-88/61102938"))];
            let written = write(&refused, &rule, raw.as_bytes(), &problems, &route, &[], |_| Ok::<(), ()>(()));
            if limit >= 600 {  // room for any notice without its item: one is always written
                prop_assert!(matches!(written, Ok(Some(_))));
            }
            if let Ok(Some(n)) = written {
                prop_assert!(n.line.len() as u64 <= limit);
                prop_assert!(n.line.ends_with(REFUSED_BY.as_bytes()) && n.id.starts_with(b"payer-"));
                let tail = &n.line[n.line.windows(4).position(|w| w == b" // ").unwrap() + 4..];
                prop_assert!(tail.iter().all(|b| (0x20..=0x7e).contains(b)));
                prop_assert!(!n.line.windows(8).any(|w| w == b"61102938"));
            }
        }

        #[test]
        fn printable_is_printable_ascii_without_runs_of_spaces(s in any::<String>()) {
            let out = printable(s.as_bytes());
            prop_assert!(out.iter().all(|b| (0x20..=0x7e).contains(b)));
            prop_assert!(!out.windows(2).any(|w| w == b"  "));
            prop_assert!(out.first() != Some(&b' ') && out.last() != Some(&b' '));
        }

        #[test]
        fn a_tail_fits_its_room_whenever_one_is_given(detail in "[ -~]{0,200}", room in -10i128..400) {
            let detail = printable(detail.as_bytes());
            if let Some(t) = tail_of(b"check-rb", &detail, room) {
                prop_assert!(t.len() as i128 <= room);
                prop_assert!(t.ends_with(REFUSED_BY.as_bytes()) && t.starts_with(b"check-rb"));
            }
        }
    }
}
