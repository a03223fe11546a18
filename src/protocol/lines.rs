//! Newline-delimited framing with a size limit: a line longer than the limit is skipped
//! without ever being held in memory, and reported, so neither side of a connection can be
//! made to allocate without bound by its peer. Both the server's stdio transport and the
//! client's use it.

use std::io::{self, BufRead};

/// What [`read_line`] found.
pub(crate) enum Line {
    /// A whole line is in the buffer.
    Complete,
    /// The line was longer than the limit; it was read past and dropped.
    TooLong,
    /// The input ended.
    End,
}

/// Reads one line into `buf` (without the newline), never keeping more than `max` bytes.
pub(crate) fn read_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::End,
                (false, false) => Line::Complete,
            });
        }
        let (taken, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(pos) => (pos, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if buf.len() + taken > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..taken]);
            }
        }
        input.consume(if done { taken + 1 } else { taken });
        if done {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<Result<String, &'static str>> {
        let mut reader = io::BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, &mut buf, max).unwrap() {
                Line::Complete => out.push(Ok(String::from_utf8(buf.clone()).unwrap())),
                Line::TooLong => out.push(Err("too long")),
                Line::End => return out,
            }
        }
    }

    #[test]
    fn lines_are_split_on_newlines_across_buffer_boundaries() {
        assert_eq!(
            lines(b"abc\ndefghij\n\nk", 100),
            vec![
                Ok("abc".into()),
                Ok("defghij".into()),
                Ok("".into()),
                Ok("k".into())
            ]
        );
    }

    #[test]
    fn an_overlong_line_is_refused_and_the_next_one_still_read() {
        assert_eq!(
            lines(b"0123456789\nok\n0123456789", 5),
            vec![Err("too long"), Ok("ok".into()), Err("too long")]
        );
    }

    #[test]
    fn the_limit_is_inclusive_whether_a_line_comes_in_one_read_or_many() {
        assert_eq!(
            lines(b"01234\n012345\n", 5),
            vec![Ok("01234".into()), Err("too long")]
        );
        let mut whole = io::BufReader::with_capacity(64, &b"012345\n01234\n"[..]);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut whole, &mut buf, 5),
            Ok(Line::TooLong)
        ));
        assert!(matches!(
            read_line(&mut whole, &mut buf, 5),
            Ok(Line::Complete)
        ));
        assert_eq!(buf, b"01234");
    }

    /// Fails its first read with `error`, then reads `rest`.
    struct FailsOnce<'a> {
        error: Option<io::ErrorKind>,
        rest: &'a [u8],
    }

    impl io::Read for FailsOnce<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if let Some(kind) = self.error.take() {
                return Err(kind.into());
            }
            self.rest.read(out)
        }
    }

    #[test]
    fn an_interrupted_read_is_retried_and_any_other_error_returned() {
        let mut buf = Vec::new();
        let interrupted = FailsOnce {
            error: Some(io::ErrorKind::Interrupted),
            rest: b"ok\n",
        };
        let mut reader = io::BufReader::new(interrupted);
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10),
            Ok(Line::Complete)
        ));
        assert_eq!(buf, b"ok");

        let broken = FailsOnce {
            error: Some(io::ErrorKind::BrokenPipe),
            rest: b"never read\n",
        };
        let mut reader = io::BufReader::new(broken);
        let error = read_line(&mut reader, &mut buf, 10).err().map(|e| e.kind());
        assert_eq!(error, Some(io::ErrorKind::BrokenPipe));
    }
}
