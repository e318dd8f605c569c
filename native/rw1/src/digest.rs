//! The tier-2 integrity digest (`h=`): the first 12 hex digits of the SHA-256 of a message's canonical JSON.
//!
//! The canonical JSON is written by the caller (rwcore's codec); this is the hash of its UTF-8 bytes. A Python
//! string may hold a lone surrogate, which UTF-8 cannot: the bindings encode such a string as Python's
//! `surrogatepass` does (three bytes, as if it were a scalar value) and hand over the bytes.

use sha2::{Digest, Sha256};

/// The number of hex digits of a digest.
pub const DIGEST_LEN: usize = 12;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The digest of `bytes`: 12 lowercase hex digits.
pub fn digest(bytes: &[u8]) -> String {
    sha256_hex(bytes, DIGEST_LEN)
}

/// The first `digits` lowercase hex digits (an even number, at most 64) of the SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8], digits: usize) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(digits);
    for b in hash.iter().take(digits / 2) {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_answers() {
        // sha256("") and sha256("abc"), the first 12 hex digits
        assert_eq!(digest(b""), "e3b0c44298fc");
        assert_eq!(digest(b"abc"), "ba7816bf8f01");
        assert_eq!(
            digest(br#"{"from":"a","id":"a-1","type":"HO","v":"RW1"}"#).len(),
            DIGEST_LEN
        );
    }

    proptest! {
        #[test]
        fn any_bytes_give_twelve_lowercase_hex_digits(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let d = digest(&bytes);
            prop_assert_eq!(d.len(), DIGEST_LEN);
            prop_assert!(d.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        }

        #[test]
        fn one_byte_changed_changes_the_digest(bytes in proptest::collection::vec(any::<u8>(), 1..512), at in any::<usize>()) {
            let mut other = bytes.clone();
            let i = at % other.len();
            other[i] = other[i].wrapping_add(1);
            prop_assert_ne!(digest(&bytes), digest(&other));
        }
    }
}
