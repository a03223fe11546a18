//! The request reader checked against httparse, an independent HTTP/1.1 parser (the one
//! under hyper): whatever [`read_head`] and [`read_body`] accept, httparse must accept too
//! and read the same way: the same request line and fields, the same chunked body, ending
//! at the same byte. Two parsers that both accept a request but read it differently are
//! what request smuggling is made of; the hostile-input properties in `tests/it` check the
//! reader against a restatement of its own rules, which cannot catch a rule that is wrong.
//!
//! The reverse need not hold: this reader refuses requests httparse takes (field values
//! that are not ASCII, for one). Where this reader is the more lenient, the difference is
//! listed in [`known_leniency`] with why it is harmless.

use proptest::prelude::*;

use super::*;

const LIMITS: Limits = Limits {
    head_bytes: 8 * 1024,
    headers: 16,
    body_bytes: 256,
};

/// Mostly well-formed pieces, sometimes hostile ones: requests that get far enough for the
/// two parsers to be compared, with every rule of the head probed now and then.
fn piece(good: &'static [&'static str], bad: &'static [&'static str]) -> BoxedStrategy<String> {
    rarely_bad(good, bad, 16)
}

/// [`piece`] for pieces that come many to a request: bad one time in `odds + 1`.
fn rarely_bad(
    good: &'static [&'static str],
    bad: &'static [&'static str],
    odds: u32,
) -> BoxedStrategy<String> {
    prop_oneof![
        odds => prop::sample::select(good).prop_map(str::to_owned),
        1 => prop::sample::select(bad).prop_map(str::to_owned),
    ]
    .boxed()
}

fn line_end() -> BoxedStrategy<String> {
    piece(
        &["\r\n", "\r\n", "\r\n", "\n"],
        &["\r", "\r\r\n", "\n\r", " \r\n"],
    )
}

/// A head's lines may end in a bare LF; a chunked body's may not.
fn chunk_line_end() -> BoxedStrategy<String> {
    piece(&["\r\n"], &["\n", "\r", " \r\n", "\r\r\n"])
}

fn field() -> BoxedStrategy<String> {
    // The framing fields come up now and then, to be repeated or to contradict the one
    // `head_text` adds.
    let name = rarely_bad(
        &[
            "Host",
            "Host",
            "Content-Type",
            "Content-Type",
            "Connection",
            "X-Y",
            "Content-Length",
            "Transfer-Encoding",
        ],
        &[
            "",
            "Bad Name",
            "Host ",
            " Host",
            "\tHost",
            "X\0",
            "Cont\u{e9}nt-Length",
            "X(Y)",
            "Content-Length\t",
        ],
        40,
    );
    let colon = rarely_bad(&[": ", ": ", ":"], &[":\t", "::", "", ": \t", " : "], 40);
    let value = rarely_bad(
        &[
            "5",
            "0",
            "chunked",
            "application/json",
            "a b",
            "100-continue",
            " 5 ",
            "5, 5",
            "close",
        ],
        &[
            "",
            "5,6",
            "+5",
            "-1",
            "0x5",
            "Chunked",
            "gzip, chunked",
            "chunked, chunked",
            "chunked,",
            "a\0b",
            "a\rb",
            "\u{80}",
            "99999999999999999999",
            "\u{1}",
            "a\u{7f}",
            "5\t",
        ],
        40,
    );
    let end = rarely_bad(
        &["\r\n", "\r\n", "\r\n", "\n"],
        &["\r", "\r\r\n", "\n\r"],
        40,
    );
    (name, colon, value, end)
        .prop_map(|(n, c, v, e)| format!("{n}{c}{v}{e}"))
        .boxed()
}

fn head_text() -> BoxedStrategy<String> {
    let piece = |good, bad| rarely_bad(good, bad, 40);
    let leading = piece(&[""], &["\r\n", "\n", "\r\n\r\n", "\r", " \r\n"]);
    let method = piece(
        &["POST", "GET", "DELETE", "M-SEARCH"],
        &["", "PO ST", "GET\t", "get", "P\u{7f}", "POST:"],
    );
    let space = || piece(&[" "], &["  ", "\t", ""]);
    let target = piece(
        &["/mcp", "/mcp?a=b&c=%20", "http://h:1/mcp", "*"],
        &["", "/a b", "/\u{7f}", "/\u{e9}", "/a\tb", "/#f", "/\"<>"],
    );
    let version = piece(
        &["HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0"],
        &[
            "HTTP/2.0",
            "HTTP/1.2",
            "http/1.1",
            "HTTP/1",
            "HTTP/1.10",
            "HTTP/1.1 ",
            " HTTP/1.1",
            "HTTP/0.9",
        ],
    );
    let line = (
        leading,
        method,
        space(),
        target,
        space(),
        version,
        line_end(),
    )
        .prop_map(|(l, m, s1, t, s2, v, e)| format!("{l}{m}{s1}{t}{s2}{v}{e}"));
    // Most requests say how their body is framed; the fields around that are random.
    let framing = prop_oneof![
        3 => Just("Transfer-Encoding: chunked\r\n"),
        1 => Just("Content-Length: 3\r\n"),
        1 => Just(""),
    ];
    (
        line,
        prop::collection::vec(field(), 0..3),
        framing,
        prop::collection::vec(field(), 0..3),
        line_end(),
    )
        .prop_map(|(line, before, framing, after, end)| {
            format!("{line}{}{framing}{}{end}", before.concat(), after.concat())
        })
        .boxed()
}

/// A chunked body: chunks whose size lines mostly tell the truth, a last chunk, trailers.
fn chunked_body() -> BoxedStrategy<String> {
    let ext = || piece(&[""], &[";a=b", " ;a", ";\0", ";a=\"x;y\"", "; a", ";a\r"]);
    let chunk = (
        "[a-z\r\n]{1,8}",
        prop_oneof![
            6 => Just(None),
            1 => prop::sample::select(&[
                "0x5", " 5", "-5", "5 ", "+5", "00000000000000005", "fffffffffffffffff", "", "G",
            ][..])
            .prop_map(Some),
        ],
        any::<bool>(),
        ext(),
        chunk_line_end(),
        chunk_line_end(),
    )
        .prop_map(|(data, size, upper, ext, size_end, data_end)| {
            let size = match size {
                Some(size) => size.to_owned(),
                None if upper => format!("{:X}", data.len()),
                None => format!("{:x}", data.len()),
            };
            format!("{size}{ext}{size_end}{data}{data_end}")
        });
    let last = (
        piece(&["0"], &["00", "0000000000000000000"]),
        ext(),
        chunk_line_end(),
    )
        .prop_map(|(z, x, e)| format!("{z}{x}{e}"));
    (
        prop::collection::vec(chunk, 0..4),
        last,
        prop::collection::vec(field(), 0..2),
        chunk_line_end(),
    )
        .prop_map(|(chunks, last, trailers, end)| {
            format!("{}{last}{}{end}", chunks.concat(), trailers.concat())
        })
        .boxed()
}

/// A whole request: a head, then a chunked body or any bytes at all.
fn request() -> BoxedStrategy<Vec<u8>> {
    let body = prop_oneof![
        3 => chunked_body().prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..32),
    ];
    (head_text(), body)
        .prop_map(|(head, body)| [head.into_bytes(), body].concat())
        .boxed()
}

/// Requests this reader accepts and httparse refuses, each harmless: a proxy that parses
/// like httparse refuses the request outright, so the two never serve it differently.
fn known_leniency(why: &str, raw: &[u8]) -> bool {
    match why {
        // RFC 9112 §7.1 allows any number of leading zeros (`1*HEXDIG`); httparse stops at
        // 16 digits whatever their value. This reader still bounds the value by the limit.
        "chunk size" => raw.iter().take_while(|b| b.is_ascii_hexdigit()).count() > 16,
        _ => false,
    }
}

/// `raw` with a request line of a later HTTP/1 minor version (`HTTP/1.2` to `HTTP/1.9`)
/// rewritten as `HTTP/1.1`: this reader reads those as 1.1 (RFC 9110 §2.5), httparse knows
/// only 1.0 and 1.1, and the rest of the two readings must agree all the same.
fn later_minor_as_http11(raw: &[u8]) -> Vec<u8> {
    let mut raw = raw.to_vec();
    // The request line: the first that is not empty.
    let start = raw
        .iter()
        .position(|b| !b"\r\n".contains(b))
        .unwrap_or(raw.len());
    let end = (raw[start..].iter().position(|b| *b == b'\n')).map_or(raw.len(), |at| start + at);
    let end = if end > start && raw[end - 1] == b'\r' {
        end - 1
    } else {
        end
    };
    if let Some(at) = end.checked_sub(8).filter(|at| *at >= start) {
        let version = &raw[at..end];
        if version.starts_with(b"HTTP/1.") && (b'2'..=b'9').contains(&version[7]) {
            raw[at + 7] = b'1';
        }
    }
    raw
}

/// Where httparse refused a chunked body, and the bytes from there on.
type Refusal<'a> = (&'static str, &'a [u8]);

/// httparse's reading of a chunked body: the data, and how many bytes it took.
fn httparse_dechunk(mut raw: &[u8]) -> Result<(Vec<u8>, usize), Refusal<'_>> {
    let start = raw.len();
    let mut body = Vec::new();
    loop {
        let Ok(httparse::Status::Complete((used, size))) = httparse::parse_chunk_size(raw) else {
            return Err(("chunk size", raw));
        };
        raw = &raw[used..];
        if size == 0 {
            break;
        }
        let size = usize::try_from(size).map_err(|_| ("chunk size", raw))?;
        let Some((data, rest)) = raw.split_at_checked(size) else {
            return Err(("chunk data", raw));
        };
        body.extend_from_slice(data);
        raw = rest.strip_prefix(b"\r\n").ok_or(("chunk end", rest))?;
    }
    // The trailer section is a field section, as a head's is.
    let mut fields = [httparse::EMPTY_HEADER; 32];
    match httparse::parse_headers(raw, &mut fields) {
        Ok(httparse::Status::Complete((used, _))) => Ok((body, start - (raw.len() - used))),
        _ => Err(("trailer", raw)),
    }
}

fn trim(value: &[u8]) -> String {
    String::from_utf8_lossy(value)
        .trim_matches([' ', '\t'])
        .to_owned()
}

/// How far a request got through this reader.
#[derive(Debug, PartialEq)]
enum Reached {
    Refused,
    /// The head was read (and compared); the body was not chunked or not read.
    Head,
    /// A chunked body was read (and compared) too.
    ChunkedBody,
}

/// Reads one request with both parsers: `Err` names where they part.
fn compare(raw: &[u8]) -> Result<Reached, String> {
    let mut reader = raw;
    let Ok(head) = read_head(&mut reader, &LIMITS) else {
        return Ok(Reached::Refused);
    };
    let used = raw.len() - reader.len();
    let as_http11 = later_minor_as_http11(raw);
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut theirs = httparse::Request::new(&mut fields);
    match theirs.parse(&as_http11) {
        Ok(httparse::Status::Complete(n)) if n == used => {}
        other => {
            return Err(format!(
                "head of {used} bytes accepted; httparse: {other:?}"
            ))
        }
    }
    let version = match head.version {
        Version::Http10 => 0,
        Version::Http11 => 1,
    };
    let line = (theirs.method, theirs.path, theirs.version);
    if line != (Some(&*head.method), Some(&*head.target), Some(version)) {
        return Err(format!("request line {head:?}; httparse: {line:?}"));
    }
    let their_fields: Vec<(String, String)> = theirs
        .headers
        .iter()
        .map(|f| (f.name.to_owned(), trim(f.value)))
        .collect();
    if their_fields != head.fields {
        return Err(format!(
            "fields {:?}; httparse: {their_fields:?}",
            head.fields
        ));
    }

    if !matches!(head.framing(LIMITS.body_bytes), Ok(Framing::Chunked)) {
        return Ok(Reached::Head);
    }
    let mut body_reader = reader;
    let Ok(body) = read_body(&mut body_reader, Framing::Chunked, &LIMITS) else {
        return Ok(Reached::Head);
    };
    let used = reader.len() - body_reader.len();
    match httparse_dechunk(reader) {
        Ok((their_body, their_used)) if (&their_body, their_used) == (&body, used) => {
            Ok(Reached::ChunkedBody)
        }
        Ok(theirs) => Err(format!(
            "chunked body {body:?} in {used} bytes; httparse: {theirs:?}"
        )),
        Err((why, at)) if known_leniency(why, at) => Ok(Reached::ChunkedBody),
        Err((why, at)) => Err(format!(
            "chunked body {body:?} in {used} bytes; httparse fails at its {why}: {:?}",
            String::from_utf8_lossy(at)
        )),
    }
}

/// 2048 cases (about two seconds in a debug build), or `PROPTEST_CASES` to hunt longer.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2048);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn what_the_reader_accepts_httparse_reads_the_same_way(raw in request()) {
        if let Err(why) = compare(&raw) {
            prop_assert!(false, "{why}\nrequest: {:?}", String::from_utf8_lossy(&raw));
        }
    }
}

/// The property is not vacuous: a good share of the generated requests get through this
/// reader, head and chunked body, so that there is something to compare.
#[test]
fn most_generated_requests_get_far_enough_to_be_compared() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = request();
    let mut reached = [0usize; 3];
    for _ in 0..1000 {
        let raw = strategy.new_tree(&mut runner).unwrap().current();
        let at = match compare(&raw) {
            Ok(Reached::Refused) | Err(_) => 0,
            Ok(Reached::Head) => 1,
            Ok(Reached::ChunkedBody) => 2,
        };
        reached[at] += 1;
    }
    let [refused, head, chunked] = reached;
    assert!(head + chunked >= 300, "{reached:?}");
    assert!(chunked >= 50, "{reached:?}");
    assert!(refused >= 100, "{reached:?}");
}

/// httparse's chunked reading, as used above, parts from a reader that takes a bare LF
/// after a chunk's data: the comparison would name the place.
#[test]
fn the_dechunker_is_strict_where_smuggling_starts() {
    let body = b"5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET";
    assert_eq!(
        httparse_dechunk(body),
        Ok((b"hello".to_vec(), body.len() - 3))
    );
    assert_eq!(
        httparse_dechunk(b"5\r\nhello\n0\r\n\r\n").map_err(|(why, _)| why),
        Err("chunk end")
    );
}
