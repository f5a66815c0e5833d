//! What the sled and Redis memory backends share: keys whose byte order is
//! the core's namespace-then-key order, and checksummed records.
//!
//! # Keys
//!
//! A namespace is its labels, each followed by the byte `0x01`; a record's
//! key is its namespace, the byte `0x00`, then its key's UTF-8 bytes.
//! Labels and keys have no control characters, so neither byte occurs in
//! them, and every byte of a label is above both. Hence:
//!
//! - the keys of the records under a prefix are exactly the keys starting
//!   with the prefix's encoding (`a\x01` does not start `ab\x01`);
//! - byte order is the core's order: labels compared as strings, a
//!   namespace before its children (its `0x00` sorts before any label
//!   byte), and a label before its extensions (`0x01` before any byte of a
//!   longer label), then keys as strings.
//!
//! # Records (sled)
//!
//! A record is stored as the byte `0xC6`, a format byte `1`, the CRC32 of
//! the rest (4 bytes, little-endian), its expiry (8 bytes, big-endian, ms
//! since the epoch; `u64::MAX` for none), then the
//! [`Record`](harness::memory::Record) as JSON. The expiry is outside the
//! JSON so that liveness is judged without reading the value.

use harness::memory::{MemoryError, Namespace, Record};

/// Ends each label of an encoded namespace.
const LABEL_END: u8 = 0x01;
/// Ends an encoded namespace, before the key.
const NAMESPACE_END: u8 = 0x00;

/// The encoding of `prefix`: every record key under it starts with it.
pub(crate) fn prefix_bytes(prefix: &Namespace) -> Vec<u8> {
    let mut out = Vec::new();
    for label in prefix.labels() {
        out.extend_from_slice(label.as_bytes());
        out.push(LABEL_END);
    }
    out
}

/// The stored key of `namespace`/`key`. Refuses the empty namespace and a
/// key or label with a control character (the encoding relies on their
/// absence; the core refuses them before they get here).
pub(crate) fn record_key(namespace: &Namespace, key: &str) -> Result<Vec<u8>, MemoryError> {
    if namespace.is_root() {
        return Err(MemoryError::Namespace {
            namespace: Vec::new(),
            why: "an item's namespace has at least one label".into(),
        });
    }
    if let Some(i) = namespace
        .labels()
        .iter()
        .position(|l| l.is_empty() || l.chars().any(char::is_control))
    {
        return Err(MemoryError::Namespace {
            namespace: namespace.labels().to_vec(),
            why: format!("label {i} is empty or has a control character"),
        });
    }
    if key.is_empty() || key.chars().any(char::is_control) {
        return Err(MemoryError::Key {
            namespace: namespace.to_string(),
            key: key.chars().take(64).collect(),
            why: "it is empty or has a control character".into(),
        });
    }
    let mut out = prefix_bytes(namespace);
    out.push(NAMESPACE_END);
    out.extend_from_slice(key.as_bytes());
    Ok(out)
}

/// The namespace and key of a stored key, or why it is not one.
pub(crate) fn parse_key(bytes: &[u8]) -> Result<(Namespace, String), String> {
    let end = bytes
        .iter()
        .position(|&b| b == NAMESPACE_END)
        .ok_or("no end of namespace")?;
    let (ns, key) = (&bytes[..end], &bytes[end + 1..]);
    let labels: Vec<String> = match ns.split_last() {
        Some((&LABEL_END, labels)) => labels
            .split(|&b| b == LABEL_END)
            .map(|l| String::from_utf8(l.to_vec()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?,
        _ => return Err("a namespace without labels".into()),
    };
    let namespace = Namespace::new(labels).map_err(|e| e.to_string())?;
    let key = String::from_utf8(key.to_vec()).map_err(|e| e.to_string())?;
    Ok((namespace, key))
}

/// The encoding of the namespace a stored key is in (up to and with its
/// `0x00`).
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn namespace_of(key: &[u8]) -> Option<&[u8]> {
    let end = key.iter().position(|&b| b == NAMESPACE_END)?;
    Some(&key[..=end])
}

/// A stored namespace's first key past every record of that namespace
/// (but not past its children's): its `0x00` made `0x01`, which is below
/// any label byte.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn after_namespace(namespace_end: &[u8]) -> Vec<u8> {
    let mut out = namespace_end.to_vec();
    if let Some(last) = out.last_mut() {
        *last = LABEL_END;
    }
    out
}

/// The first byte of a stored record.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
const MAGIC: u8 = 0xC6;
/// The format of a stored record.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
const VERSION: u8 = 1;
/// Magic, format, CRC32, expiry.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
const HEADER: usize = 14;

/// `record` as stored (see the module docs).
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn encode_record(record: &Record) -> Result<Vec<u8>, MemoryError> {
    let mut out = Vec::with_capacity(HEADER + 256);
    out.extend_from_slice(&[MAGIC, VERSION, 0, 0, 0, 0]);
    out.extend_from_slice(&record.item.expires_at.unwrap_or(u64::MAX).to_be_bytes());
    serde_json::to_writer(&mut out, record).map_err(|e| MemoryError::Value {
        namespace: record.item.namespace.to_string(),
        key: record.item.key.clone(),
        why: format!("it cannot be encoded: {e}"),
    })?;
    let crc = crc32fast::hash(&out[6..]);
    out[2..6].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The expiry in a stored record's header, without checking the record:
/// `Err` if it is too short or not a record.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn expiry_of(bytes: &[u8]) -> Result<Option<u64>, String> {
    if bytes.len() < HEADER || bytes[0] != MAGIC {
        return Err(format!(
            "{} bytes that are not a stored record",
            bytes.len()
        ));
    }
    let mut at = [0u8; 8];
    at.copy_from_slice(&bytes[6..HEADER]);
    let at = u64::from_be_bytes(at);
    Ok((at != u64::MAX).then_some(at))
}

/// Whether the stored record `bytes` is live at `now`.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn live(bytes: &[u8], now: u64) -> Result<bool, String> {
    Ok(expiry_of(bytes)?.is_none_or(|at| now < at))
}

/// The record stored at `key` as `bytes`, checked: its checksum, its
/// format, and that it is the record of that key.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn decode_record(key: &[u8], bytes: &[u8]) -> Result<Record, MemoryError> {
    let corrupt = |why: String| {
        let (namespace, key) = match parse_key(key) {
            Ok((ns, k)) => (ns.to_string(), k),
            Err(_) => (String::from_utf8_lossy(key).into_owned(), String::new()),
        };
        MemoryError::Corrupt {
            namespace,
            key,
            why,
        }
    };
    expiry_of(bytes).map_err(corrupt)?;
    if bytes[1] != VERSION {
        return Err(corrupt(format!(
            "record format {}, this build reads format {VERSION}",
            bytes[1]
        )));
    }
    let stored = u32::from_le_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
    let computed = crc32fast::hash(&bytes[6..]);
    if stored != computed {
        return Err(corrupt(format!(
            "the record is damaged: its checksum is {stored:08x}, its bytes have {computed:08x}"
        )));
    }
    let record: Record = serde_json::from_slice(&bytes[HEADER..])
        .map_err(|e| corrupt(format!("invalid record JSON: {e}")))?;
    let expected =
        record_key(&record.item.namespace, &record.item.key).map_err(|e| corrupt(e.to_string()))?;
    if expected != key {
        return Err(corrupt(format!(
            "the record is {}/{}'s",
            record.item.namespace, record.item.key
        )));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(labels: &[&str]) -> Namespace {
        Namespace::new(labels.iter().copied()).unwrap()
    }

    /// Byte order of the stored keys is the core's order of (namespace,
    /// key), on pairs where a naive encoding gets it wrong.
    #[test]
    fn key_order_is_the_core_order() {
        let pairs = [
            (ns(&["a"]), "z"),
            (ns(&["a", "b"]), "a"),
            (ns(&["ab"]), "a"),
            (ns(&["a b"]), "a"),
            (ns(&["aa"]), "a"),
            (ns(&["b"]), "a"),
            (ns(&["users", "u1"]), "k"),
            (ns(&["users", "u10"]), "k"),
            (ns(&["users", "u2"]), "k"),
            (ns(&["users", "u1", "x"]), "a"),
            (ns(&["é"]), "a"),
            (ns(&["a"]), "a"),
            (ns(&["a"]), "a0"),
        ];
        for (n1, k1) in &pairs {
            for (n2, k2) in &pairs {
                let core = (n1, k1).cmp(&(n2, k2));
                let bytes = record_key(n1, k1)
                    .unwrap()
                    .cmp(&record_key(n2, k2).unwrap());
                assert_eq!(core, bytes, "{n1:?}/{k1} vs {n2:?}/{k2}");
                let starts = record_key(n2, k2).unwrap().starts_with(&prefix_bytes(n1));
                assert_eq!(starts, n2.starts_with(n1), "prefix {n1:?} of {n2:?}");
            }
        }
    }

    #[test]
    fn keys_parse_back_and_bad_ones_are_refused() {
        let key = record_key(&ns(&["a", "日本"]), "k:1").unwrap();
        assert_eq!(parse_key(&key).unwrap(), (ns(&["a", "日本"]), "k:1".into()));
        assert!(record_key(&Namespace::root(), "k").is_err());
        for bad in ["", "a\u{0}b", "a\u{1}", "\n"] {
            assert!(record_key(&ns(&["a"]), bad).is_err(), "{bad:?}");
        }
        for bad in [&b"no end"[..], b"\x00k", b"a\x00k", b"a\x01\xff\x01\x00k"] {
            assert!(parse_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn damaged_records_are_refused() {
        let record = Record {
            item: harness::memory::Item {
                namespace: ns(&["a", "b"]),
                key: "k".into(),
                value: serde_json::json!({"text": "hello", "n": 1.5}),
                created_at: 1,
                updated_at: 2,
                expires_at: Some(3),
            },
            ttl_ms: Some(2),
            vector: Some(vec![0.25, -1.0]),
        };
        let key = record_key(&record.item.namespace, &record.item.key).unwrap();
        let bytes = encode_record(&record).unwrap();
        assert_eq!(decode_record(&key, &bytes).unwrap(), record);
        let mut flipped = bytes.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x01;
        let mut expiry = bytes.clone();
        expiry[9] ^= 0x10;
        let other_key = record_key(&ns(&["other"]), "k").unwrap();
        let cases: Vec<(&[u8], &[u8], &str)> = vec![
            (&key, &flipped, "checksum"),
            (&key, &expiry, "checksum"),
            (&key, &bytes[..10], "not a stored record"),
            (&key, b"{\"item\": 1}", "not a stored record"),
            (&other_key, &bytes, "the record is"),
        ];
        for (k, v, expected) in cases {
            let err = decode_record(k, v).unwrap_err();
            assert!(
                matches!(err, MemoryError::Corrupt { .. }) && err.to_string().contains(expected),
                "{err}"
            );
        }
    }
}
