//! Record framing: `[length: u32 LE][crc32 of the payload: u32 LE][payload]`, so a torn tail
//! is recognised and dropped, and damage in the middle of a file is found and reported.

use std::io::{self, Write};

/// Largest payload accepted when reading (a corrupt length beyond it is damage).
pub(crate) const MAX_RECORD: usize = 256 * 1024 * 1024;
const HEADER: usize = 8;

/// CRC-32 (IEEE 802.3), computed with a table built at compile time.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut crc = i as u32;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
                bit += 1;
            }
            table[i] = crc;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &byte in bytes {
        crc = TABLE[((crc ^ byte as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// Appends one framed record.
pub(crate) fn write_frame(out: &mut impl Write, payload: &[u8]) -> io::Result<usize> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record larger than 4 GiB"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&crc32(payload).to_le_bytes())?;
    out.write_all(payload)?;
    Ok(HEADER + payload.len())
}

/// How a file's sequence of frames ends.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Every byte belongs to a valid frame.
    Clean,
    /// The last frame is incomplete or fails its checksum: a write torn by a crash. Valid
    /// data ends at `offset`.
    TornTail { offset: u64 },
}

/// A frame whose checksum fails while valid data follows it: real damage, not a torn write.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Damaged {
    pub(crate) offset: u64,
    pub(crate) reason: String,
}

/// Splits `bytes` into frame payloads.
pub(crate) fn read_frames(bytes: &[u8]) -> Result<(Vec<&[u8]>, Ending), Damaged> {
    let mut frames = Vec::new();
    let mut offset = 0usize;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        if rest.len() < HEADER {
            return Ok((
                frames,
                Ending::TornTail {
                    offset: offset as u64,
                },
            ));
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len > MAX_RECORD {
            return Err(Damaged {
                offset: offset as u64,
                reason: format!("record length {len} is beyond any record this store writes"),
            });
        }
        if rest.len() < HEADER + len {
            return Ok((
                frames,
                Ending::TornTail {
                    offset: offset as u64,
                },
            ));
        }
        let payload = &rest[HEADER..HEADER + len];
        if crc32(payload) != crc {
            let end = offset + HEADER + len;
            if end == bytes.len() {
                return Ok((
                    frames,
                    Ending::TornTail {
                        offset: offset as u64,
                    },
                ));
            }
            return Err(Damaged {
                offset: offset as u64,
                reason: "checksum mismatch".into(),
            });
        }
        frames.push(payload);
        offset += HEADER + len;
    }
    Ok((frames, Ending::Clean))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            write_frame(&mut out, p).unwrap();
        }
        out
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn frames_round_trip() {
        let bytes = file(&[b"one", b"", b"three"]);
        let (frames, ending) = read_frames(&bytes).unwrap();
        assert_eq!(frames, vec![&b"one"[..], b"", b"three"]);
        assert_eq!(ending, Ending::Clean);
    }

    #[test]
    fn every_truncation_is_a_torn_tail_at_the_last_whole_frame() {
        let bytes = file(&[b"alpha", b"beta"]);
        let first_end = 8 + 5;
        for cut in 0..bytes.len() {
            let (frames, ending) = read_frames(&bytes[..cut]).unwrap();
            let expected_frames = usize::from(cut >= first_end);
            assert_eq!(frames.len(), expected_frames, "cut at {cut}");
            let torn_at = if cut >= first_end { first_end } else { 0 } as u64;
            if cut == 0 || cut == first_end {
                assert_eq!(ending, Ending::Clean, "cut at {cut}");
            } else {
                assert_eq!(ending, Ending::TornTail { offset: torn_at }, "cut at {cut}");
            }
        }
    }

    #[test]
    fn a_bad_checksum_in_the_middle_is_damage_at_the_end_a_torn_tail() {
        let mut bytes = file(&[b"alpha", b"beta", b"gamma"]);
        bytes[8 + 5 + 8] ^= 0x01; // first byte of "beta"
        assert_eq!(
            read_frames(&bytes).unwrap_err(),
            Damaged {
                offset: 13,
                reason: "checksum mismatch".into()
            }
        );
        let mut tail = file(&[b"alpha", b"beta"]);
        let last = tail.len() - 1;
        tail[last] ^= 0x01;
        assert_eq!(
            read_frames(&tail).unwrap().1,
            Ending::TornTail { offset: 13 }
        );
    }

    #[test]
    fn an_absurd_length_is_damage() {
        let mut bytes = file(&[b"alpha"]);
        bytes[3] = 0x7f;
        assert!(read_frames(&bytes).is_err());
    }
}
