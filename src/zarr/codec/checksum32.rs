//! numcodecs' 32-bit checksums, and the spec's `crc32c` (bytes→bytes): the data with a little-endian checksum of it at
//! the start (`crc32`, `adler32` by default) or at the end (`crc32c`, `fletcher32`,
//! `jenkins_lookup3`). A mismatch on read fails the chunk (EIO, logged with its key).
//! v2 `{"id": "crc32", "location": "start"}`; v3 `{"name": "numcodecs.crc32", ...}`.
//! `fletcher32` is HDF5's (what kerchunk maps an HDF5 file's fletcher32 filter to) and
//! `jenkins_lookup3` is HDF5's lookup3 hash with numcodecs' `initval` and `prefix`.

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt};
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Adler32,
    Fletcher32,
    JenkinsLookup3 { initval: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checksum32Codec {
    algorithm: Algorithm,
    at_start: bool,
    /// `jenkins_lookup3`'s bytes hashed before the data.
    prefix: Vec<u8>,
}

impl Checksum32Codec {
    pub fn parse(id: &str, config: &Value) -> Result<Checksum32Codec> {
        let algorithm = match id {
            "crc32" => Algorithm::Crc32,
            "crc32c" => Algorithm::Crc32c,
            "adler32" => Algorithm::Adler32,
            "fletcher32" => Algorithm::Fletcher32,
            "jenkins_lookup3" => {
                let initval = match config.get("initval") {
                    None | Some(Value::Null) => 0,
                    Some(v) => v
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| Error::metadata(format!("jenkins_lookup3 initval {v} must fit 32 bits")))?,
                };
                Algorithm::JenkinsLookup3 { initval }
            }
            other => return Err(Error::metadata(format!("unknown checksum {other:?}"))),
        };
        let prefix = match config.get("prefix") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) if matches!(algorithm, Algorithm::JenkinsLookup3 { .. }) => v
                .as_array()
                .and_then(|a| a.iter().map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok())).collect::<Option<Vec<u8>>>())
                .ok_or_else(|| Error::metadata(format!("jenkins_lookup3 prefix {v} must be a list of bytes")))?,
            Some(v) => return Err(Error::metadata(format!("{id} has no prefix, got {v}"))),
        };
        let default_start = matches!(algorithm, Algorithm::Crc32 | Algorithm::Adler32);
        let at_start = match config.get("location").and_then(Value::as_str) {
            None => default_start,
            Some("start") if matches!(algorithm, Algorithm::Crc32 | Algorithm::Adler32 | Algorithm::Crc32c) => true,
            Some("end") => false,
            Some(other) => return Err(Error::metadata(format!("{id} location {other:?} must be \"start\" or \"end\""))),
        };
        Ok(Checksum32Codec { algorithm, at_start, prefix })
    }

    fn checksum(&self, data: &[u8]) -> u32 {
        match self.algorithm {
            Algorithm::Crc32 => crc32fast::hash(data),
            Algorithm::Crc32c => crc32c::crc32c(data),
            Algorithm::Adler32 => adler32(data),
            Algorithm::Fletcher32 => fletcher32(data),
            Algorithm::JenkinsLookup3 { initval } => {
                if self.prefix.is_empty() {
                    lookup3(data, initval)
                } else {
                    lookup3(&[&self.prefix[..], data].concat(), initval)
                }
            }
        }
    }

    fn id(&self) -> &'static str {
        match self.algorithm {
            Algorithm::Crc32 => "crc32",
            Algorithm::Crc32c => "crc32c",
            Algorithm::Adler32 => "adler32",
            Algorithm::Fletcher32 => "fletcher32",
            Algorithm::JenkinsLookup3 { .. } => "jenkins_lookup3",
        }
    }
}

fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that can be summed before `b` could overflow.
    for block in data.chunks(5552) {
        for &x in block {
            a += u32::from(x);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// HDF5's `H5_checksum_fletcher32`: big-endian 16-bit words, an odd last byte as the high byte.
fn fletcher32(data: &[u8]) -> u32 {
    let (mut sum1, mut sum2) = (0u32, 0u32);
    let fold = |s: u32| (s & 0xffff) + (s >> 16);
    for block in data.chunks(720) {
        for word in block.chunks(2) {
            sum1 += (u32::from(word[0]) << 8) | word.get(1).map_or(0, |&b| u32::from(b));
            sum2 += sum1;
        }
        sum1 = fold(sum1);
        sum2 = fold(sum2);
    }
    sum1 = fold(sum1);
    sum2 = fold(sum2);
    (sum2 << 16) | sum1
}

/// Bob Jenkins' lookup3 `hashlittle`, as HDF5's `H5_checksum_lookup3`.
fn lookup3(data: &[u8], initval: u32) -> u32 {
    let mut a = 0xdeadbeefu32.wrapping_add(data.len() as u32).wrapping_add(initval);
    let (mut b, mut c) = (a, a);
    let word = |k: &[u8]| -> u32 { k.iter().enumerate().fold(0u32, |w, (i, &x)| w | (u32::from(x) << (8 * i))) };
    let mut rest = data;
    while rest.len() > 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        // mix(a, b, c)
        a = a.wrapping_sub(c);
        a ^= c.rotate_left(4);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a);
        b ^= a.rotate_left(6);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b);
        c ^= b.rotate_left(8);
        b = b.wrapping_add(a);
        a = a.wrapping_sub(c);
        a ^= c.rotate_left(16);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a);
        b ^= a.rotate_left(19);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b);
        c ^= b.rotate_left(4);
        b = b.wrapping_add(a);
        rest = &rest[12..];
    }
    if rest.is_empty() {
        return c;
    }
    a = a.wrapping_add(word(&rest[..rest.len().min(4)]));
    if rest.len() > 4 {
        b = b.wrapping_add(word(&rest[4..rest.len().min(8)]));
    }
    if rest.len() > 8 {
        c = c.wrapping_add(word(&rest[8..]));
    }
    // final(a, b, c)
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(14));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(11));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(25));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(16));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(4));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(14));
    c ^= b;
    c.wrapping_sub(b.rotate_left(24))
}

impl CodecTraits for Checksum32Codec {
    fn name(&self) -> &'static str {
        self.id()
    }
    fn configuration(&self) -> Value {
        match self.algorithm {
            Algorithm::JenkinsLookup3 { initval } => json!({"initval": initval, "prefix": self.prefix}),
            Algorithm::Fletcher32 => json!({}),
            // The default place is left unsaid (the spec's `crc32c` has no configuration).
            Algorithm::Crc32c if !self.at_start => json!({}),
            _ => json!({"location": if self.at_start { "start" } else { "end" }}),
        }
    }
}

impl BytesToBytesCodec for Checksum32Codec {
    fn decode(&self, mut bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        if bytes.len() < 4 {
            return Err(corrupt(format!("{}: shorter than its checksum", self.id())));
        }
        let (sum_at, data) = if self.at_start { (0, 4..bytes.len()) } else { (bytes.len() - 4, 0..bytes.len() - 4) };
        let stored = u32::from_le_bytes([bytes[sum_at], bytes[sum_at + 1], bytes[sum_at + 2], bytes[sum_at + 3]]);
        let actual = self.checksum(&bytes[data.clone()]);
        if stored != actual {
            return Err(corrupt(format!("{} mismatch: stored {stored:08x}, computed {actual:08x}", self.id())));
        }
        if self.at_start {
            bytes.drain(..4);
        } else {
            bytes.truncate(data.end);
        }
        Ok(bytes)
    }

    fn encode(&self, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
        let sum = self.checksum(&bytes).to_le_bytes();
        if self.at_start {
            bytes.splice(0..0, sum);
        } else {
            bytes.extend_from_slice(&sum);
        }
        Ok(bytes)
    }

    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        Some(decoded + 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What numcodecs 0.17 writes for b"zarrfs checks" (checksums printed by numcodecs).
    #[test]
    fn numcodecs_layouts() {
        let data = b"zarrfs checks".to_vec();
        let cases: [(&str, Value, &str); 6] = [
            ("crc32", json!({}), "CRC32"),
            ("adler32", json!({}), "ADLER"),
            ("crc32c", json!({}), "CRC32C"),
            ("fletcher32", json!({}), "FLETCHER"),
            ("jenkins_lookup3", json!({}), "JENKINS"),
            ("jenkins_lookup3", json!({"initval": 7, "prefix": [1, 2, 3]}), "JENKINS_P"),
        ];
        for (id, config, which) in cases {
            let c = Checksum32Codec::parse(id, &config).unwrap();
            let enc = c.encode(data.clone()).unwrap();
            assert_eq!(hex(&enc), expected(which), "{id} {config}");
            assert_eq!(c.decode(enc.clone(), 100).unwrap(), data);
            let mut bad = enc;
            bad[5] ^= 1;
            assert!(c.decode(bad, 100).unwrap_err().to_string().contains("mismatch"), "{id}");
        }
        assert!(Checksum32Codec::parse("fletcher32", &json!({"location": "start"})).is_err());
        assert!(Checksum32Codec::parse("crc32", &json!({"location": "middle"})).is_err());
        assert!(Checksum32Codec::parse("crc32", &json!({})).unwrap().decode(vec![1, 2], 9).is_err());
        // RFC 3720's vector: the CRC-32C of 32 zero bytes.
        let c = Checksum32Codec::parse("crc32c", &json!({})).unwrap();
        assert_eq!(&c.encode(vec![0; 32]).unwrap()[32..], &0x8a9136aau32.to_le_bytes());
        let long: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for (id, which) in [("fletcher32", "FLETCHER_LONG"), ("jenkins_lookup3", "JENKINS_LONG"), ("adler32", "ADLER_LONG")] {
            let enc = Checksum32Codec::parse(id, &json!({})).unwrap().encode(long.clone()).unwrap();
            let sum = if id == "adler32" { &enc[..4] } else { &enc[enc.len() - 4..] };
            assert_eq!(hex(sum), expected(which), "{id}");
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn expected(which: &str) -> &'static str {
        match which {
            "CRC32" => "cb348f847a617272667320636865636b73",
            "ADLER" => "2a0593247a617272667320636865636b73",
            "CRC32C" => "7a617272667320636865636b733ca673c5",
            "FLETCHER" => "7a617272667320636865636b737bb22dfc",
            "JENKINS" => "7a617272667320636865636b73d1b6af2c",
            "JENKINS_P" => "7a617272667320636865636b7336890159",
            "FLETCHER_LONG" => "1bad0950",
            "JENKINS_LONG" => "ed74288e",
            "ADLER_LONG" => "c311aca3",
            _ => "",
        }
    }
}
