//! Who may say what in a thread: one table, as data (the pattern of h11's state machine).
//!
//! A line that replies (`re=`) names its target: a handoff, a readback, a question, a cancel. For each line type
//! and kind of target the table says which role the line's sender must hold in the target's thread, whom it must
//! address, what it does, and how it is refused when it comes from anyone else. The decision resolves the target
//! and its parties from the conversation's state, asks [`authorize`], and only then checks the content: no handler
//! states who may send a line. A line refused here changes nothing in the target's thread.

/// A role in a target's thread, with the words the documentation and the problems use for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Anyone,
    /// `from=` of the handoff (of the handoff a readback reads back or a cancel cancels)
    Sender,
    /// `to=` of the handoff
    Receiver,
    /// the handoff's sender or its receiver
    Party,
    /// `from=` of the question
    Asker,
    /// `to=` of the question
    Asked,
    /// `to=human`
    Human,
}

impl Role {
    pub const ALL: [Role; 7] = [
        Role::Anyone,
        Role::Sender,
        Role::Receiver,
        Role::Party,
        Role::Asker,
        Role::Asked,
        Role::Human,
    ];

    pub fn text(self) -> &'static str {
        match self {
            Role::Anyone => "anyone",
            Role::Sender => "the handoff's sender",
            Role::Receiver => "the handoff's receiver",
            Role::Party => "a party of the handoff",
            Role::Asker => "the asker",
            Role::Asked => "the one asked",
            Role::Human => "human",
        }
    }
}

/// What a reply's `re=` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Handoff,
    Readback,
    Question,
    Cancel,
}

impl Target {
    pub const ALL: [Target; 4] = [
        Target::Handoff,
        Target::Readback,
        Target::Question,
        Target::Cancel,
    ];

    pub fn text(self) -> &'static str {
        match self {
            Target::Handoff => "a handoff",
            Target::Readback => "a readback",
            Target::Question => "a question",
            Target::Cancel => "a cancel",
        }
    }

    pub fn from_text(text: &[u8]) -> Option<Target> {
        Target::ALL
            .into_iter()
            .find(|t| t.text().as_bytes() == text)
    }
}

/// A sender and an addressee the line may have, and what the line does then.
#[derive(Debug)]
pub struct Permit {
    pub sender: Role,
    pub to: Role,
    pub effect: &'static str,
}

/// What happens to a line from anyone the rule does not permit: its verdict (`dead-letter`, or `alert`: still
/// delivered, flagged, changing nothing in the thread), reason and problem code, and whether a dead letter is
/// alerted as well.
#[derive(Debug)]
pub struct Refusal {
    pub verdict: &'static str,
    pub reason: &'static str,
    pub code: &'static str,
    pub alert: bool,
}

#[derive(Debug)]
pub struct Rule {
    pub line: &'static str,
    pub target: Target,
    pub permits: &'static [Permit],
    pub refusal: Refusal,
}

/// The parties of a target's thread, as far as it has them (a handoff's sender and receiver, or a question's asker
/// and the one asked).
#[derive(Debug, Default, Clone, Copy)]
pub struct Parties<'a> {
    pub sender: Option<&'a [u8]>,
    pub receiver: Option<&'a [u8]>,
    pub asker: Option<&'a [u8]>,
    pub asked: Option<&'a [u8]>,
}

impl Parties<'_> {
    fn of(&self, role: Role) -> Option<&[u8]> {
        match role {
            Role::Sender => self.sender,
            Role::Receiver => self.receiver,
            Role::Asker => self.asker,
            Role::Asked => self.asked,
            Role::Anyone | Role::Party | Role::Human => None,
        }
    }

    fn holds(&self, role: Role, agent: &[u8]) -> bool {
        match role {
            Role::Anyone => true,
            Role::Human => agent == b"human",
            Role::Party => self.sender == Some(agent) || self.receiver == Some(agent),
            _ => self.of(role) == Some(agent),
        }
    }

    /// Who holds `role`, as a problem's `expected` says it.
    fn who(&self, role: Role) -> Vec<u8> {
        let none: &[u8] = b"None";
        match role {
            Role::Anyone => b"*".to_vec(),
            Role::Human => b"human".to_vec(),
            Role::Party => [
                self.sender.unwrap_or(none),
                b"|",
                self.receiver.unwrap_or(none),
            ]
            .concat(),
            _ => self.of(role).unwrap_or(b"?").to_vec(),
        }
    }
}

const DEAD: &str = "dead-letter";
const THREAD: &str = "check-thread";
const WRONG_CLOSE: Refusal = Refusal {
    verdict: DEAD,
    reason: THREAD,
    code: "thread-close-wrong-agent",
    alert: false,
};

const fn refusal(verdict: &'static str, reason: &'static str, code: &'static str) -> Refusal {
    Refusal {
        verdict,
        reason,
        code,
        alert: false,
    }
}

/// The table. One row per line type and kind of target; a pair not listed has no rule here (an HO with no `re=` is
/// a new handoff; an ST or an AN to a handoff changes no thread).
pub static TABLE: [Rule; 11] = [
    Rule {
        line: "HO",
        target: Target::Handoff,
        permits: &[
            Permit {
                sender: Role::Sender,
                to: Role::Anyone,
                effect: "a re-issue (its item and ask): replaces the handoff (superseded)",
            },
            Permit {
                sender: Role::Receiver,
                to: Role::Anyone,
                effect: "a relay: carries the handoff's slots unchanged (they stand as its record), once, after the \
                         handoff's readback passed (and was cleared, for an exec ask)",
            },
        ],
        refusal: refusal(DEAD, THREAD, "thread-reissue-wrong-agent"),
    },
    Rule {
        line: "RB",
        target: Target::Handoff,
        permits: &[Permit {
            sender: Role::Receiver,
            to: Role::Sender,
            effect: "reads the handoff back: its plan when it passes",
        }],
        refusal: refusal(DEAD, "check-rb", "receipt-route"),
    },
    Rule {
        line: "AN",
        target: Target::Readback,
        permits: &[Permit {
            sender: Role::Sender,
            to: Role::Receiver,
            effect: "clears the act (affirmative) or refuses the readback (negative)",
        }],
        refusal: refusal(DEAD, "clearance", "clearance-route"),
    },
    Rule {
        line: "AN",
        target: Target::Cancel,
        permits: &[Permit {
            sender: Role::Receiver,
            to: Role::Sender,
            effect: "acknowledges the cancel (val=Y): closes the handoff, frees its record",
        }],
        refusal: refusal(DEAD, THREAD, "thread-ack-wrong-agent"),
    },
    Rule {
        line: "AN",
        target: Target::Question,
        permits: &[Permit {
            sender: Role::Asked,
            to: Role::Asker,
            effect: "answers the question, once, within its need and opts",
        }],
        refusal: refusal(DEAD, THREAD, "thread-answer-wrong-agent"),
    },
    Rule {
        line: "DN",
        target: Target::Handoff,
        permits: &[Permit {
            sender: Role::Receiver,
            to: Role::Sender,
            effect: "reports the act: closes the handoff",
        }],
        refusal: refusal("alert", "check-dn", "thread-done-wrong-agent"),
    },
    Rule {
        line: "UN",
        target: Target::Handoff,
        permits: &[Permit {
            sender: Role::Receiver,
            to: Role::Sender,
            effect: "refuses the handoff: closes it, frees its record",
        }],
        refusal: WRONG_CLOSE,
    },
    Rule {
        line: "UN",
        target: Target::Question,
        permits: &[Permit {
            sender: Role::Asked,
            to: Role::Asker,
            effect: "refuses the question: answers it",
        }],
        refusal: refusal(DEAD, THREAD, "thread-answer-wrong-agent"),
    },
    Rule {
        line: "FL",
        target: Target::Handoff,
        permits: &[Permit {
            sender: Role::Receiver,
            to: Role::Sender,
            effect: "reports the act failed: closes the handoff, frees its record",
        }],
        refusal: WRONG_CLOSE,
    },
    Rule {
        line: "CX",
        target: Target::Handoff,
        permits: &[Permit {
            sender: Role::Sender,
            to: Role::Receiver,
            effect: "withdraws the handoff (closed once its receiver acknowledges)",
        }],
        refusal: Refusal {
            verdict: DEAD,
            reason: THREAD,
            code: "thread-cancel-wrong-agent",
            alert: true,
        },
    },
    Rule {
        line: "AQ",
        target: Target::Handoff,
        permits: &[
            Permit {
                sender: Role::Party,
                to: Role::Anyone,
                effect: "asks about the handoff",
            },
            Permit {
                sender: Role::Anyone,
                to: Role::Human,
                effect: "escalates the handoff to a human",
            },
        ],
        refusal: refusal(DEAD, THREAD, "thread-question-wrong-agent"),
    },
];

/// The rule of a line type replying to a kind of target (None: nobody's role is checked).
pub fn rule(line: &[u8], target: Target) -> Option<&'static Rule> {
    TABLE
        .iter()
        .find(|r| r.line.as_bytes() == line && r.target == target)
}

impl Rule {
    /// The first permit a line from `sender` to `to` satisfies, given the target's parties.
    pub fn permit(
        &self,
        sender: &[u8],
        to: &[u8],
        parties: &Parties<'_>,
    ) -> Option<&'static Permit> {
        self.permits
            .iter()
            .find(|p| parties.holds(p.sender, sender) && parties.holds(p.to, to))
    }

    /// Who may send it, as a problem's `expected` says it (`payer->scheduler`, `payer|scheduler->*`).
    pub fn expected(&self, parties: &Parties<'_>) -> Vec<u8> {
        let each: Vec<Vec<u8>> = self
            .permits
            .iter()
            .map(|p| [parties.who(p.sender), b"->".to_vec(), parties.who(p.to)].concat())
            .collect();
        each.join(&b" or "[..])
    }
}

/// The table's word on a line of type `line` from `sender` to `to` replying to `target`: None when no rule is
/// about it or its sender holds a role that may send it, else the rule that refuses it.
pub fn authorize(
    line: &[u8],
    target: Target,
    sender: &[u8],
    to: &[u8],
    parties: &Parties<'_>,
) -> Option<&'static Rule> {
    let r = rule(line, target)?;
    match r.permit(sender, to, parties) {
        Some(_) => None,
        None => Some(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HO: Parties<'static> = Parties {
        sender: Some(b"payer"),
        receiver: Some(b"scheduler"),
        asker: None,
        asked: None,
    };

    #[test]
    fn one_rule_per_line_and_target() {
        for (i, a) in TABLE.iter().enumerate() {
            assert!(TABLE[i + 1..]
                .iter()
                .all(|b| (a.line, a.target) != (b.line, b.target)));
        }
    }

    #[test]
    fn roles_decide() {
        assert!(authorize(b"RB", Target::Handoff, b"scheduler", b"payer", &HO).is_none());
        let refused = authorize(b"RB", Target::Handoff, b"mallory", b"payer", &HO).unwrap();
        assert_eq!(refused.refusal.code, "receipt-route");
        assert_eq!(refused.expected(&HO), b"scheduler->payer");
        let aq = rule(b"AQ", Target::Handoff).unwrap();
        assert_eq!(aq.expected(&HO), b"payer|scheduler->* or *->human");
        assert!(authorize(b"AQ", Target::Handoff, b"mallory", b"human", &HO).is_none());
        assert!(authorize(b"ST", Target::Handoff, b"mallory", b"x", &HO).is_none());
    }
}
