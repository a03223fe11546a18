//! Record framing: `[length: u32 LE][crc32 of the payload: u32 LE][payload]`.
//!
//! The journal writes each group-commit batch as one frame (one over 4 GiB as several, each
//! synced under `Fsync` before the next), so a batch is read back whole or not at all (per
//! part), and the only frame a crash can leave broken is the last one. A broken frame
//! is told apart from damage by what follows it: a torn tail (a write cut short, or a file
//! whose size reached the disk before its data, which then reads back as zeros) has no valid
//! frame anywhere after the broken one, while damage in the middle of a file does. The
//! search for one checksums at most a bounded multiple of the bytes it searches; a file
//! that needs more is damage too (no torn write comes close).
//!
//! Frames carry no salt (a per-file value mixed into the checksum), because no stale but
//! valid frame can sit where the journal reads one: logs are created new (`create_new`, or
//! at start only when no log of that generation exists) and only ever appended to; a
//! generation's log is created again only after a salvage set the old one aside and its
//! removal was synced; a torn tail or a salvage's cut is truncated and synced before the
//! next append; the snapshot's temporary file is truncated on creation and synced before
//! its rename, never over an existing snapshot; nothing preallocates. What remains is a
//! file system that shows the old contents of reused blocks after a crash (ext4 with
//! `data=writeback`, say), which breaks the "zeros or a cut" premise of torn tails anyway,
//! and against which a salt per file would not guard frames of the same file.

use std::io::{self, Write};

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

/// Appends one framed record. The payload is a JSON object or array, never empty: a
/// zero-filled header (`len = 0`, and `crc32(b"") == 0`) must never read as a valid frame.
pub(crate) fn write_frame(out: &mut impl Write, payload: &[u8]) -> io::Result<usize> {
    if !is_json_container(payload) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a journal record must be a JSON object or array",
        ));
    }
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record larger than 4 GiB"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&crc32(payload).to_le_bytes())?;
    out.write_all(payload)?;
    Ok(HEADER + payload.len())
}

/// Whether `payload` starts and ends like a JSON object or array, as every payload written
/// does. Besides refusing empty payloads, this keeps the search for a valid frame after a
/// broken one cheap: candidates that fail it cost no checksum.
fn is_json_container(payload: &[u8]) -> bool {
    matches!(
        (payload.first(), payload.last()),
        (Some(b'{'), Some(b'}')) | (Some(b'['), Some(b']'))
    )
}

/// How a file's sequence of frames ends.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Every byte belongs to a valid frame.
    Clean,
    /// The last frame is incomplete, fails its checksum or was never written (zeros), and
    /// no valid frame follows it: a write torn by a crash. Valid data ends at `offset`.
    TornTail { offset: u64 },
}

/// A broken frame with a valid frame after it: real damage, not a torn write.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Damaged {
    pub(crate) offset: u64,
    pub(crate) reason: String,
}

/// The frame at the start of `rest`, unchecked: its payload and the checksum its header
/// claims, or why it cannot be a frame at all (tests that cost no checksum).
fn candidate(rest: &[u8]) -> Result<(&[u8], u32), &'static str> {
    if rest.len() < HEADER {
        return Err("the frame header is cut short");
    }
    let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    if len == 0 {
        return Err("the frame header is zero");
    }
    if rest.len() - HEADER < len {
        return Err("the frame runs past the end of the file");
    }
    let payload = &rest[HEADER..HEADER + len];
    // The cheap test first: most candidates in a search fail it, and cost no checksum.
    if !is_json_container(payload) {
        return Err("the payload is not a record");
    }
    Ok((payload, crc))
}

/// The frame at the start of `rest`: its payload, or why it is broken.
fn frame_at(rest: &[u8]) -> Result<&[u8], &'static str> {
    let (payload, crc) = candidate(rest)?;
    if crc32(payload) != crc {
        return Err("checksum mismatch");
    }
    Ok(payload)
}

/// Bytes the search after a broken frame may checksum: this many per byte it searches, plus
/// [`SEARCH_SLACK`]. What a torn write leaves (a cut, zeros, part of one payload) holds
/// next to no would-be frames that pass the cheap tests, so an honest search stays far
/// below this; a crafted file whose every offset claims the rest of the file as a frame
/// would otherwise cost time quadratic in its size (minutes for a few MiB).
const SEARCH_BYTES_PER_BYTE: u64 = 4;
/// See [`SEARCH_BYTES_PER_BYTE`].
const SEARCH_SLACK: u64 = 1024 * 1024;

/// What the search for a valid frame after a broken one found.
#[derive(Debug, PartialEq, Eq)]
enum Search {
    /// A valid frame starts at this offset.
    Found(usize),
    /// No valid frame starts anywhere after.
    Nothing,
    /// The search reached its bound before it could tell: more would-be frames than a
    /// torn write leaves, so not a torn tail.
    GaveUp,
}

/// Looks for a valid frame at or after `from`; also returns the bytes it checksummed,
/// which stay linear in the bytes searched.
fn next_valid_frame(bytes: &[u8], from: usize) -> (Search, u64) {
    let searched = bytes.len().saturating_sub(from) as u64;
    let budget = searched
        .saturating_mul(SEARCH_BYTES_PER_BYTE)
        .saturating_add(SEARCH_SLACK);
    let mut checksummed = 0u64;
    for at in from..bytes.len() {
        let Ok((payload, crc)) = candidate(&bytes[at..]) else {
            continue;
        };
        if checksummed + payload.len() as u64 > budget {
            return (Search::GaveUp, checksummed);
        }
        checksummed += payload.len() as u64;
        if crc32(payload) == crc {
            return (Search::Found(at), checksummed);
        }
    }
    (Search::Nothing, checksummed)
}

/// Splits `bytes` into frame payloads.
///
/// The first broken frame ends the valid data. It is a torn tail when no valid frame starts
/// at any later byte: with one frame per batch and a sync between batches, only the last,
/// unacknowledged batch can be torn, and whatever it left behind (a cut, zeros, part of its
/// payload) holds no valid frame. Anything acknowledged after the broken frame would be a
/// valid frame, so finding one means damage, never a tail to drop. So does a search that
/// reaches its bound (see [`SEARCH_BYTES_PER_BYTE`]) without telling.
pub(crate) fn read_frames(bytes: &[u8]) -> Result<(Vec<&[u8]>, Ending), Damaged> {
    let mut frames = Vec::new();
    let mut offset = 0usize;
    while offset < bytes.len() {
        match frame_at(&bytes[offset..]) {
            Ok(payload) => {
                frames.push(payload);
                offset += HEADER + payload.len();
            }
            Err(reason) => {
                let follows = match next_valid_frame(bytes, offset + 1).0 {
                    Search::Nothing => {
                        let offset = offset as u64;
                        return Ok((frames, Ending::TornTail { offset }));
                    }
                    Search::Found(next) => format!("a valid record follows at byte offset {next}"),
                    Search::GaveUp => "what follows holds more would-be records than a torn \
                                       write leaves (the search for a valid one gave up)"
                        .to_string(),
                };
                return Err(Damaged {
                    offset: offset as u64,
                    reason: format!("{reason}, and {follows}"),
                });
            }
        }
    }
    Ok((frames, Ending::Clean))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALPHA: &[u8] = br#"{"a":"alpha"}"#;
    const BETA: &[u8] = br#"[{"b":"beta"}]"#;
    const GAMMA: &[u8] = br#"{"c":"gamma"}"#;

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
        let bytes = file(&[ALPHA, BETA, GAMMA]);
        let (frames, ending) = read_frames(&bytes).unwrap();
        assert_eq!(frames, vec![ALPHA, BETA, GAMMA]);
        assert_eq!(ending, Ending::Clean);
    }

    #[test]
    fn the_writer_refuses_payloads_a_zero_filled_header_could_pass_for() {
        for payload in [&b""[..], b"alpha", b"{"] {
            let err = write_frame(&mut Vec::new(), payload).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn every_truncation_is_a_torn_tail_at_the_last_whole_frame() {
        let bytes = file(&[ALPHA, BETA]);
        let first_end = 8 + ALPHA.len();
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
    fn a_zero_filled_tail_is_a_torn_tail() {
        let good = file(&[ALPHA]);
        let mut bytes = good.clone();
        bytes.extend_from_slice(&[0; 4096]);
        let (frames, ending) = read_frames(&bytes).unwrap();
        assert_eq!(frames, vec![ALPHA]);
        let offset = good.len() as u64;
        assert_eq!(ending, Ending::TornTail { offset });
    }

    #[test]
    fn a_last_batch_persisted_only_in_part_is_a_torn_tail_wherever_the_zeros_are() {
        // The file's size reached the disk, its data only in places: every byte of the last
        // write is either what was written or zero. One frame per batch makes any such
        // batch a torn tail, dropped whole.
        let good = file(&[ALPHA]);
        let batch = file(&[br#"[{"b":"beta"},{"c":"gamma"}]"#]);
        for start in 0..batch.len() {
            for end in start + 1..=batch.len() {
                if batch[start..end].iter().all(|&b| b == 0) {
                    continue; // nothing torn
                }
                let mut bytes = good.clone();
                bytes.extend_from_slice(&batch);
                bytes[good.len() + start..good.len() + end].fill(0);
                let (frames, ending) = read_frames(&bytes).unwrap();
                assert_eq!(frames, vec![ALPHA], "zeros at {start}..{end}");
                let offset = good.len() as u64;
                assert_eq!(
                    ending,
                    Ending::TornTail { offset },
                    "zeros at {start}..{end}"
                );
            }
        }
    }

    #[test]
    fn a_torn_run_of_frames_with_nothing_valid_after_it_is_a_torn_tail() {
        // The reviewer's case: a log written one frame per record, whose last two frames
        // kept only their first 20 bytes.
        let good = file(&[ALPHA]);
        let mut bytes = good.clone();
        let mut last = file(&[BETA, GAMMA]);
        last[20..].fill(0);
        bytes.extend_from_slice(&last);
        let (frames, ending) = read_frames(&bytes).unwrap();
        assert_eq!(frames, vec![ALPHA]);
        let offset = good.len() as u64;
        assert_eq!(ending, Ending::TornTail { offset });
    }

    #[test]
    fn a_broken_frame_with_a_valid_one_after_it_is_damage() {
        let mut bytes = file(&[ALPHA, BETA, GAMMA]);
        let second = 8 + ALPHA.len();
        bytes[second + 8 + 2] ^= 0x01; // inside BETA, which still looks like a record
        let damage = read_frames(&bytes).unwrap_err();
        assert_eq!(damage.offset, second as u64);
        assert!(damage.reason.starts_with("checksum mismatch"), "{damage:?}");
        let mut tail = file(&[ALPHA, BETA]);
        let last = tail.len() - 1;
        tail[last] ^= 0x01;
        let offset = second as u64;
        assert_eq!(read_frames(&tail).unwrap().1, Ending::TornTail { offset });
    }

    /// `len` bytes in which every 16th offset starts a would-be frame with a wrong
    /// checksum, claiming nearly all the rest of the bytes as its payload: `{`, 6 spaces,
    /// `}`, repeated, its length a multiple of 16 plus 8 to end on a `}` (`len` a multiple
    /// of 16).
    fn crafted(len: usize) -> Vec<u8> {
        let mut bytes = vec![b' '; len];
        for at in (0..=len - 16).step_by(16) {
            let claim = (len - at - HEADER - 8) / 16 * 16 + 8;
            bytes[at..at + 4].copy_from_slice(&(claim as u32).to_le_bytes());
            bytes[at + 4..at + 8].copy_from_slice(&0x0bad_c0de_u32.to_le_bytes());
            bytes[at + 8] = b'{';
            bytes[at + 15] = b'}';
        }
        bytes
    }

    #[test]
    fn the_search_after_a_broken_frame_checksums_bytes_linear_in_what_it_searches() {
        let good = file(&[ALPHA]);
        for len in [16 * 1024, 256 * 1024, 4 * 1024 * 1024] {
            let tail = crafted(len);
            assert!(
                candidate(&tail[16..]).is_ok_and(|(p, _)| p.len() > len / 2),
                "the crafted tail is made of would-be frames"
            );
            let mut bytes = good.clone();
            bytes.extend_from_slice(&tail);
            let (found, checksummed) = next_valid_frame(&bytes, good.len() + 1);
            assert_eq!(found, Search::GaveUp, "length {len}");
            let bound = len as u64 * SEARCH_BYTES_PER_BYTE + SEARCH_SLACK;
            assert!(checksummed <= bound, "{checksummed} bytes for {len}");
            // Not a torn tail it cannot tell from damage: damage, at the broken frame.
            let damage = read_frames(&bytes).unwrap_err();
            assert_eq!(damage.offset, good.len() as u64);
            assert!(damage.reason.contains("gave up"), "{damage:?}");
        }
    }

    #[test]
    fn a_torn_tail_checksums_next_to_nothing_in_the_search() {
        let good = file(&[ALPHA]);
        let mut bytes = good.clone();
        let mut torn = file(&[br#"[{"b":"beta"},{"c":"gamma"}]"#]);
        torn[20..].fill(0);
        bytes.extend_from_slice(&torn);
        bytes.extend_from_slice(&[0; 4096]);
        let (found, checksummed) = next_valid_frame(&bytes, good.len() + 1);
        assert_eq!((found, checksummed), (Search::Nothing, 0));
    }

    #[test]
    fn a_broken_length_with_a_valid_frame_after_it_is_damage() {
        let second = 8 + ALPHA.len();
        for len in [0u32, 0x7f00_0000, 4096] {
            let mut bytes = file(&[ALPHA, BETA, GAMMA]);
            bytes[second..second + 4].copy_from_slice(&len.to_le_bytes());
            let damage = read_frames(&bytes).unwrap_err();
            assert_eq!(damage.offset, second as u64, "length {len}");
        }
    }
}
