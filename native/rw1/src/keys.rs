//! Maps and sets of a profile's short names (slot keys, enum codes, agents), looked up once per token of a line.
//!
//! A line's keys and most of its coded values are a few bytes long (every slot key of the shipped profiles has at
//! most five). A hash map of byte strings hashes them a word at a time and compares a match through `memcmp`, a
//! call for a handful of bytes; here a name of up to seven bytes is packed with its length into one `u64`, so a
//! lookup is one multiply and one integer comparison. A longer name is kept, and looked up, by its bytes.
//! Written here rather than taken from a crate: the small-string crates (`smol_str`, `compact_str`) store a string
//! inline but still hash and compare it as bytes, and `tinystr`, which packs a name into integers as this does,
//! takes ASCII only, where a line's keys are any bytes (a name it refuses would need this fallback all the same);
//! the packing itself is a few lines.

use rustc_hash::FxHashMap;

/// A name of at most seven bytes as one integer: its bytes (little-endian) and its length in the top byte, so no
/// two names pack alike.
#[inline]
fn packed(name: &[u8]) -> Option<u64> {
    if name.len() > 7 {
        return None;
    }
    let mut v = (name.len() as u64) << 56;
    for (i, &b) in name.iter().enumerate() {
        v |= u64::from(b) << (8 * i);
    }
    Some(v)
}

/// A map from names to values (see the module).
#[derive(Debug, Clone)]
pub struct KeyMap<V> {
    short: FxHashMap<u64, V>,
    long: FxHashMap<Box<[u8]>, V>,
}

impl<V> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap {
            short: FxHashMap::default(),
            long: FxHashMap::default(),
        }
    }
}

impl<V> KeyMap<V> {
    #[inline]
    pub fn get(&self, name: &[u8]) -> Option<&V> {
        match packed(name) {
            Some(k) => self.short.get(&k),
            None => self.long.get(name),
        }
    }

    /// Insert a value, returning the one the name had.
    pub fn insert(&mut self, name: &[u8], value: V) -> Option<V> {
        match packed(name) {
            Some(k) => self.short.insert(k, value),
            None => self.long.insert(name.into(), value),
        }
    }

    pub fn len(&self) -> usize {
        self.short.len() + self.long.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: AsRef<[u8]>, V> FromIterator<(K, V)> for KeyMap<V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = KeyMap::default();
        for (k, v) in iter {
            map.insert(k.as_ref(), v);
        }
        map
    }
}

/// A set of names (see the module).
#[derive(Debug, Clone, Default)]
pub struct KeySet(KeyMap<()>);

impl KeySet {
    #[inline]
    pub fn contains(&self, name: &[u8]) -> bool {
        self.0.get(name).is_some()
    }
}

impl<K: AsRef<[u8]>> FromIterator<K> for KeySet {
    fn from_iter<I: IntoIterator<Item = K>>(iter: I) -> Self {
        KeySet(iter.into_iter().map(|k| (k, ())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn names_that_differ_only_in_trailing_zero_bytes_or_length_are_apart() {
        let names: [&[u8]; 6] = [b"", b"\0", b"a", b"a\0", b"abcdefg", b"abcdefgh"];
        let map: KeyMap<usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        assert_eq!(map.len(), names.len());
        for (i, n) in names.iter().enumerate() {
            assert_eq!(map.get(n), Some(&i), "{n:?}");
        }
        assert_eq!(map.get(b"abcdefgh\0"), None);
    }

    proptest! {
        /// The map answers as a map of byte strings does, for names short and long, present or not.
        #[test]
        fn it_answers_as_a_map_of_byte_strings(
            entries in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..12), any::<u32>()), 0..40),
            probes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 0..40),
        ) {
            let mut want: HashMap<Vec<u8>, u32> = HashMap::new();
            let mut got: KeyMap<u32> = KeyMap::default();
            for (k, v) in &entries {
                prop_assert_eq!(got.insert(k, *v), want.insert(k.clone(), *v));
            }
            prop_assert_eq!(got.len(), want.len());
            for k in entries.iter().map(|(k, _)| k).chain(&probes) {
                prop_assert_eq!(got.get(k), want.get(k));
            }
            let set: KeySet = probes.iter().collect();
            for k in entries.iter().map(|(k, _)| k).chain(&probes) {
                prop_assert_eq!(set.contains(k), probes.contains(k));
            }
        }
    }
}
