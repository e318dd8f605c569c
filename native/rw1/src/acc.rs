//! Tier 4, the comprehension check: the sender's withheld criteria against the ones the receiver derived.
//!
//! A criterion is `key:value`. Values are compared after normalisation (lowercase, the alias table, punctuation
//! stripped, a crude singular), by key. A single-valued key must match strictly; a set-valued key (`must no scope
//! src` in the core) also accepts a loose match on a shared distinctive word, and says so in a note.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::grammar::Group;
use crate::problem::{cat, Problem};
use crate::pytext;

/// The set-valued match's loose words: too common to mean anything.
const STOP: [&[u8]; 16] = [
    b"the", b"and", b"with", b"for", b"from", b"that", b"this", b"must", b"not", b"no", b"of",
    b"to", b"in", b"on", b"a", b"an",
];

/// The readback levels an HO's `rb=` may name.
pub const RB_LEVELS: [&[u8]; 5] = [b"echo", b"all", b"acc", b"plan", b"exec"];

/// A profile's constraint keys, set-valued keys and alias table, compiled.
#[derive(Debug, Default)]
pub struct AccTables {
    pub known: HashSet<Box<[u8]>>,
    pub set_keys: HashSet<Box<[u8]>>,
    /// each alias (and each canonical value) to its canonical value; the first group to name one wins
    pub alias: HashMap<Box<[u8]>, Box<[u8]>>,
    /// the known keys, sorted, joined by `, `
    pub known_text: Vec<u8>,
}

impl AccTables {
    pub fn new(known: Vec<Box<[u8]>>, set_keys: Vec<Box<[u8]>>, aliases: Vec<Group>) -> AccTables {
        let mut alias: HashMap<Box<[u8]>, Box<[u8]>> = HashMap::default();
        for (canon, alts) in aliases {
            alias.entry(canon.clone()).or_insert_with(|| canon.clone());
            for alt in alts {
                alias.entry(alt).or_insert_with(|| canon.clone());
            }
        }
        let mut sorted: Vec<&[u8]> = known.iter().map(|k| &k[..]).collect();
        sorted.sort();
        sorted.dedup();
        let known_text = sorted.join(&b", "[..]);
        AccTables {
            known: known.into_iter().collect(),
            set_keys: set_keys.into_iter().collect(),
            alias,
            known_text,
        }
    }

    /// A value normalised: its words joined, and its words.
    fn norm(&self, v: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let lowered = pytext::lower(v);
        let w = pytext::strip(&lowered);
        let w: &[u8] = self.alias.get(w).map_or(w, |c| c);
        let mut words: Vec<Vec<u8>> = Vec::new();
        for x in w
            .split(|b| !(b.is_ascii_lowercase() || b.is_ascii_digit()))
            .filter(|x| !x.is_empty())
        {
            let singular = x.len() >= 5 && x.ends_with(b"s") && !x.ends_with(b"ss");
            words.push(if singular {
                x[..x.len() - 1].to_vec()
            } else {
                x.to_vec()
            });
        }
        let joined = words.concat();
        words.sort();
        words.dedup();
        (joined, words)
    }

    /// 0 no match; 1 strict (equal, a 4+ character prefix, or one word set inside the other); 2 loose (a shared
    /// distinctive word of 5+ characters).
    pub fn same_value(&self, a: &[u8], b: &[u8]) -> u8 {
        if a == b {
            return 1;
        }
        let (ja, wa) = self.norm(a);
        let (jb, wb) = self.norm(b);
        if ja == jb {
            return 1;
        }
        if ja.len() >= 4 && jb.len() >= 4 && (ja.starts_with(&jb) || jb.starts_with(&ja)) {
            return 1;
        }
        let inside = |x: &[Vec<u8>], y: &[Vec<u8>]| x.iter().all(|w| y.binary_search(w).is_ok());
        if !wa.is_empty() && !wb.is_empty() && (inside(&wa, &wb) || inside(&wb, &wa)) {
            return 1;
        }
        let loose = wa
            .iter()
            .any(|w| wb.binary_search(w).is_ok() && w.len() >= 5 && !STOP.contains(&&w[..]));
        if loose {
            2
        } else {
            0
        }
    }
}

/// `'len:120w'` -> (`len`, `120w`); a bare token is its own key with an empty value. Both stripped and lowered.
pub fn split_constraint(tok: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (k, v) = match tok.iter().position(|&b| b == b':') {
        Some(at) => (&tok[..at], &tok[at + 1..]),
        None => (tok, &b""[..]),
    };
    (
        pytext::lower(pytext::strip(k)),
        pytext::lower(pytext::strip(v)),
    )
}

/// Criteria grouped by key, keys in first-seen order.
type Groups = Vec<(Vec<u8>, Vec<Vec<u8>>)>;

fn group(groups: &mut Groups, k: Vec<u8>, v: Vec<u8>) {
    match groups.iter_mut().find(|(g, _)| *g == k) {
        Some((_, vs)) => vs.push(v),
        None => groups.push((k, vec![v])),
    }
}

fn get<'g>(groups: &'g Groups, k: &[u8]) -> Option<&'g Vec<Vec<u8>>> {
    groups.iter().find(|(g, _)| g == k).map(|(_, vs)| vs)
}

fn note(
    out: &mut Vec<Problem>,
    code: &'static str,
    message: Vec<u8>,
    slot: &[u8],
    expected: Option<&[u8]>,
    got: Option<&[u8]>,
) {
    out.push(Problem::new(
        code,
        "comprehension",
        message,
        Some(slot),
        expected,
        got,
    ));
}

/// The sender's criteria (`expected`) against the receiver's (`derived`, its `not=` values counted under `no`),
/// with the dimensions the sender asked for in `keys=`: (problems, notes).
pub fn compare(
    expected: &[&[u8]],
    derived: &[&[u8]],
    keys: &[&[u8]],
    derived_not: &[&[u8]],
    t: &AccTables,
) -> (Vec<Problem>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut exp: Groups = Vec::new();
    let mut der: Groups = Vec::new();
    for tok in expected {
        let (k, v) = split_constraint(tok);
        group(&mut exp, k, v);
    }
    for tok in derived {
        let (k, v) = split_constraint(tok);
        group(&mut der, k, v);
    }
    for v in derived_not {
        group(&mut der, b"no".to_vec(), v.to_vec());
    }
    let known = |k: &[u8]| t.known.contains(k);
    for (k, _) in exp.iter().chain(&der) {
        if !known(k) {
            let msg = cat(&[
                b"key ",
                k,
                b" is not in the closed constraint set; not compared (use one of ",
                &t.known_text,
                b")",
            ]);
            note(&mut notes, "acc-unknown-key", msg, k, None, None);
        }
    }
    for (k, vs) in &exp {
        if !known(k) {
            continue;
        }
        let Some(dvs) = get(&der, k) else {
            let joined = vs.join(&b'/');
            let msg = cat(&[
                b"tier4 comprehension: gap, receiver did not derive ",
                k,
                b":",
                &joined,
            ]);
            note(&mut problems, "acc-gap", msg, k, Some(&joined), None);
            continue;
        };
        if t.set_keys.contains(&k[..]) {
            for v in vs {
                let mut best: (u8, &[u8]) = (t.same_value(v, &dvs[0]), &dvs[0]);
                for d in &dvs[1..] {
                    let s = (t.same_value(v, d), &d[..]);
                    if s > best {
                        best = s;
                    }
                }
                if best.0 == 0 {
                    let msg = cat(&[
                        b"tier4 comprehension: gap, receiver did not derive ",
                        k,
                        b":",
                        v,
                    ]);
                    note(&mut problems, "acc-gap", msg, k, Some(v), None);
                } else if best.0 == 2 {
                    let msg = cat(&[
                        b"loose match: sender ",
                        k,
                        b":",
                        v,
                        b" taken as receiver ",
                        k,
                        b":",
                        best.1,
                    ]);
                    note(&mut notes, "acc-loose", msg, k, Some(v), Some(best.1));
                }
            }
            for d in dvs {
                if !vs.iter().any(|v| t.same_value(v, d) != 0) {
                    let msg = cat(&[
                        b"assumption: receiver added ",
                        k,
                        b":",
                        d,
                        b"; confirm or correct",
                    ]);
                    note(&mut notes, "acc-assumption", msg, k, None, Some(d));
                }
            }
        } else if !dvs.iter().any(|d| t.same_value(&vs[0], d) == 1) {
            let (want, got) = (vs.join(&b'/'), dvs.join(&b'/'));
            let msg = cat(&[
                b"tier4 comprehension: contradiction on ",
                k,
                b": sender ",
                &want,
                b" vs receiver ",
                &got,
            ]);
            note(
                &mut problems,
                "acc-contradiction",
                msg,
                k,
                Some(&want),
                Some(&got),
            );
        }
    }
    for k in keys {
        let k = pytext::lower(k);
        if known(&k) && get(&der, &k).is_none() && get(&exp, &k).is_none() {
            let msg = cat(&[
                b"tier4 comprehension: gap, sender asked for ",
                &k,
                b" in keys= and receiver did not report it",
            ]);
            note(&mut problems, "acc-gap", msg, &k, None, None);
        }
    }
    for (k, vs) in &der {
        if known(k) && get(&exp, k).is_none() && !t.set_keys.contains(&k[..]) {
            let joined = vs.join(&b'/');
            let msg = cat(&[
                b"assumption: receiver added ",
                k,
                b":",
                &joined,
                b"; confirm or correct",
            ]);
            note(&mut notes, "acc-assumption", msg, k, None, Some(&joined));
        }
    }
    (problems, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> AccTables {
        let b = |s: &str| -> Box<[u8]> { s.as_bytes().into() };
        AccTables::new(
            ["must", "no", "scope", "src", "len", "fmt"]
                .iter()
                .map(|s| b(s))
                .collect(),
            ["must", "no", "scope", "src"]
                .iter()
                .map(|s| b(s))
                .collect(),
            vec![(b("markdown"), vec![b("md")])],
        )
    }

    #[test]
    fn values_match_as_the_reference_matches_them() {
        let t = tables();
        assert_eq!(t.same_value(b"md", b"Markdown"), 1);
        assert_eq!(t.same_value(b"invoices", b"invoice"), 1);
        assert_eq!(t.same_value(b"supplier-records", b"records"), 1);
        assert_eq!(
            t.same_value(b"uk supplier invoices", b"eu supplier data"),
            2
        );
        assert_eq!(t.same_value(b"apple", b"pear"), 0);
    }

    #[test]
    fn findings_in_order() {
        let t = tables();
        let (p, n) = compare(
            &[b"len:120w", b"must:cite", b"zz:1"],
            &[b"LEN:200w ", b"must:cites", b"fmt:md"],
            &[b"Scope"],
            &[],
            &t,
        );
        let codes: Vec<&str> = p.iter().chain(&n).map(|x| x.code).collect();
        assert_eq!(
            codes,
            [
                "acc-contradiction",
                "acc-gap",
                "acc-unknown-key",
                "acc-assumption"
            ]
        );
        assert_eq!(
            p[0].message,
            b"tier4 comprehension: contradiction on len: sender 120w vs receiver 200w"
        );
    }
}
