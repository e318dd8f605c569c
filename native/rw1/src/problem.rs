//! A finding of the parser or a check, as data: a stable code, where it was found (the tier), the reference's
//! wording, and the slot, what was expected and what was got.

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub code: &'static str,
    /// `form`, `receipt`, `integrity`, `echo`, `comprehension`, `execution`, `expiry`, `record`, `executed`
    pub tier: &'static str,
    pub message: Vec<u8>,
    pub slot: Option<Vec<u8>>,
    pub expected: Option<Vec<u8>>,
    pub got: Option<Vec<u8>>,
}

impl Problem {
    /// A finding; the optional parts are copied.
    pub fn new(
        code: &'static str,
        tier: &'static str,
        message: Vec<u8>,
        slot: Option<&[u8]>,
        expected: Option<&[u8]>,
        got: Option<&[u8]>,
    ) -> Problem {
        Problem {
            code,
            tier,
            message,
            slot: slot.map(<[u8]>::to_vec),
            expected: expected.map(<[u8]>::to_vec),
            got: got.map(<[u8]>::to_vec),
        }
    }
}

/// The parts of a message's wording, joined.
pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}
