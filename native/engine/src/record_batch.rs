//! Kafka record batches (the protocol's v2 `RecordBatch`, uncompressed): the outcomes' records as the producer
//! sends them. Written here because the producer the gatekeeper uses (aiokafka) builds them a record at a time in
//! Python; the bytes are its C builder's for the same records (`tests/unit/test_record_batch.py`). Wrapped for
//! aiokafka's `send_batch` by the Python extension (`native/python/src/record_batch.rs`).

/// The batch header's size, and where its fields sit.
const HEADER: usize = 61;
/// `batchLength` counts the bytes after it.
const AFTER_LENGTH: usize = 12;
const CRC_AT: usize = 17;
/// The CRC-32C covers the batch from its attributes to its end.
const ATTRIBUTES_AT: usize = 21;
const MAGIC: u8 = 2;

/// `n` as Kafka writes a signed varint: zig-zag, then seven bits a byte, the lowest first.
fn varint(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn varint_len(n: i64) -> usize {
    let z = ((n << 1) ^ (n >> 63)) as u64;
    (64 - z.max(1).leading_zeros() as usize).div_ceil(7)
}

/// Bytes as a record holds them (key, value, a header's value): their length and themselves, None as length -1.
fn bytes_len(b: Option<&[u8]>) -> usize {
    b.map_or(1, |b| varint_len(b.len() as i64) + b.len())
}

fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
        None => varint(out, -1),
    }
}

/// One record: its key, value and headers (name, value).
pub struct Record<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a [u8], Option<&'a [u8]>)],
}

/// A batch being written: the header's room, then the records (each with timestamp delta 0: a batch's records
/// are stamped alike).
pub struct Builder {
    buf: Vec<u8>,
    count: i32,
    max_size: usize,
}

impl Builder {
    pub fn new(max_size: usize) -> Self {
        Builder {
            buf: vec![0; HEADER],
            count: 0,
            max_size,
        }
    }

    /// Add a record unless the batch would reach its size (the first record always goes in): a batch stays under
    /// its size, as aiokafka's C builder fills them (its pure-Python one lets a batch reach it).
    pub fn append(&mut self, r: &Record<'_>) -> bool {
        let offset = i64::from(self.count);
        let body = 1
            + varint_len(0)
            + varint_len(offset)
            + bytes_len(r.key)
            + bytes_len(r.value)
            + varint_len(r.headers.len() as i64)
            + r.headers
                .iter()
                .map(|(k, v)| varint_len(k.len() as i64) + k.len() + bytes_len(*v))
                .sum::<usize>();
        let needed = varint_len(body as i64) + body;
        if self.count > 0 && self.buf.len() + needed >= self.max_size {
            return false;
        }
        let out = &mut self.buf;
        out.reserve(needed);
        varint(out, body as i64);
        out.push(0); // attributes
        varint(out, 0); // timestamp delta
        varint(out, offset);
        put_bytes(out, r.key);
        put_bytes(out, r.value);
        varint(out, r.headers.len() as i64);
        for (k, v) in r.headers {
            put_bytes(out, Some(k));
            put_bytes(out, *v);
        }
        self.count += 1;
        true
    }

    pub fn count(&self) -> i32 {
        self.count
    }

    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// The whole batch: its header written (the producer's id, epoch and first sequence number), its CRC. Not
    /// transactional (an idempotent producer's batch: attributes 0, no compression).
    pub fn finish(&mut self, timestamp: i64, producer: Producer) -> &[u8] {
        let length = (self.buf.len() - AFTER_LENGTH) as i32;
        let attributes: i16 = 0;
        let last_offset = (self.count - 1).max(0);
        let mut head = Vec::with_capacity(HEADER);
        head.extend_from_slice(&0i64.to_be_bytes()); // base offset: the broker's to set
        head.extend_from_slice(&length.to_be_bytes());
        head.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        head.push(MAGIC);
        head.extend_from_slice(&0u32.to_be_bytes()); // the CRC, below
        head.extend_from_slice(&attributes.to_be_bytes());
        head.extend_from_slice(&last_offset.to_be_bytes());
        head.extend_from_slice(&timestamp.to_be_bytes()); // first
        head.extend_from_slice(&timestamp.to_be_bytes()); // max
        head.extend_from_slice(&producer.id.to_be_bytes());
        head.extend_from_slice(&producer.epoch.to_be_bytes());
        head.extend_from_slice(&producer.sequence.to_be_bytes());
        head.extend_from_slice(&self.count.to_be_bytes());
        self.buf[..HEADER].copy_from_slice(&head);
        let crc = crc32c::crc32c(&self.buf[ATTRIBUTES_AT..]);
        self.buf[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        &self.buf
    }
}

/// What the producer writes into a batch's header when it sends it (idempotence: its id, epoch and the batch's
/// first sequence number); a batch not yet given one has aiokafka's -1, -1, 0.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Producer {
    id: i64,
    epoch: i16,
    sequence: i32,
}

impl Default for Producer {
    fn default() -> Self {
        Producer {
            id: -1,
            epoch: -1,
            sequence: 0,
        }
    }
}

impl Producer {
    pub fn new(id: i64, epoch: i16, sequence: i32) -> Self {
        Producer {
            id,
            epoch,
            sequence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Kafka's reading of a varint (the client's `ByteUtils.readVarlong`).
    fn read_varint(b: &[u8], at: &mut usize) -> i64 {
        let (mut z, mut shift) = (0u64, 0);
        loop {
            let byte = b[*at];
            *at += 1;
            z |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return (z >> 1) as i64 ^ -((z & 1) as i64);
            }
            shift += 7;
        }
    }

    proptest! {
        #[test]
        fn a_varint_reads_back_and_is_as_long_as_said(n in any::<i64>()) {
            let mut out = Vec::new();
            varint(&mut out, n);
            prop_assert_eq!(out.len(), varint_len(n));
            let mut at = 0;
            prop_assert_eq!(read_varint(&out, &mut at), n);
            prop_assert_eq!(at, out.len());
        }

        #[test]
        fn a_batch_reads_back_as_its_records(
            records in proptest::collection::vec(
                (
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
                    proptest::collection::vec(any::<u8>(), 0..300),
                    proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..10), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..10))), 0..4),
                ),
                1..20,
            ),
            max_size in 64usize..4096,
        ) {
            let mut b = Builder::new(max_size);
            let mut taken = 0;
            for (key, value, headers) in &records {
                let hs: Vec<(&[u8], Option<&[u8]>)> = headers.iter().map(|(k, v)| (&k[..], v.as_deref())).collect();
                if !b.append(&Record { key: key.as_deref(), value: Some(value), headers: &hs }) {
                    prop_assert!(taken > 0);
                    break;
                }
                taken += 1;
                prop_assert!(taken == 1 || b.size() < max_size);
            }
            let bytes = b.finish(7, Producer::default()).to_vec();
            let length = i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
            prop_assert_eq!(length + AFTER_LENGTH, bytes.len());
            let crc = u32::from_be_bytes(bytes[CRC_AT..CRC_AT + 4].try_into().unwrap());
            prop_assert_eq!(crc, crc32c::crc32c(&bytes[ATTRIBUTES_AT..]));
            prop_assert_eq!(i32::from_be_bytes(bytes[57..61].try_into().unwrap()), taken);
            let mut at = HEADER;
            for (n, (key, value, headers)) in records.iter().take(taken as usize).enumerate() {
                let len = read_varint(&bytes, &mut at) as usize;
                let end = at + len;
                prop_assert_eq!(bytes[at], 0);
                at += 1;
                prop_assert_eq!(read_varint(&bytes, &mut at), 0);
                prop_assert_eq!(read_varint(&bytes, &mut at), n as i64);
                let field = |at: &mut usize| -> Option<Vec<u8>> {
                    let l = read_varint(&bytes, at);
                    if l < 0 { return None; }
                    let v = bytes[*at..*at + l as usize].to_vec();
                    *at += l as usize;
                    Some(v)
                };
                prop_assert_eq!(field(&mut at), key.clone());
                prop_assert_eq!(field(&mut at), Some(value.clone()));
                prop_assert_eq!(read_varint(&bytes, &mut at), headers.len() as i64);
                for (k, v) in headers {
                    prop_assert_eq!(field(&mut at), Some(k.clone()));
                    prop_assert_eq!(field(&mut at), v.clone());
                }
                prop_assert_eq!(at, end);
            }
            prop_assert_eq!(at, bytes.len());
        }
    }
}
