//! SEP-2243's value encoding for routing headers such as `Mcp-Name`: a value that cannot
//! ride in an HTTP header as it is (not printable ASCII, padded with spaces, or looking
//! like the encoded form itself) travels as `=?base64?{standard Base64 of its UTF-8}?=`.
//! The client encodes what it sends; the server decodes before comparing with the body.
//! Also what both take for a field name ([`is_token`]).

const PREFIX: &str = "=?base64?";
const SUFFIX: &str = "?=";
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Whether `s` is an RFC 9110 token: a header field name (or a method, a media type's
/// parts).
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `value` as a header carries it: as it is when it is printable ASCII (0x20-0x7E)
/// without leading or trailing spaces and does not look encoded, else encoded.
pub(crate) fn encode(value: &str) -> String {
    let printable = value.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let padded = value.starts_with(' ') || value.ends_with(' ');
    if printable && !padded && !looks_encoded(value) {
        value.to_owned()
    } else {
        format!("{PREFIX}{}{SUFFIX}", base64_encode(value.as_bytes()))
    }
}

/// The value a header carries: decoded when it is in the encoded form, as it is
/// otherwise. `None` for an encoded form that is not Base64 of UTF-8 text.
pub(crate) fn decode(header: &str) -> Option<String> {
    if !looks_encoded(header) {
        return Some(header.to_owned());
    }
    let payload = &header[PREFIX.len()..header.len() - SUFFIX.len()];
    String::from_utf8(base64_decode(payload)?).ok()
}

fn looks_encoded(value: &str) -> bool {
    value.len() >= PREFIX.len() + SUFFIX.len()
        && value.starts_with(PREFIX)
        && value.ends_with(SUFFIX)
}

/// Standard Base64 (RFC 4648 section 4, with padding).
fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let bits = chunk
            .iter()
            .enumerate()
            .fold(0u32, |bits, (i, &b)| bits | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(bits >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard Base64 with padding; `None` for anything else (wrong length, stray
/// characters, padding in the middle).
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let chunks = text.len() / 4;
    for (n, chunk) in text.chunks(4).enumerate() {
        let padding = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if padding > 2 || (padding > 0 && n + 1 != chunks) {
            return None;
        }
        let mut bits = 0u32;
        for (i, &c) in chunk[..4 - padding].iter().enumerate() {
            let value = ALPHABET.iter().position(|&a| a == c)? as u32;
            bits |= value << (18 - 6 * i);
        }
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - padding]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_encoded_as_sep2243_says_and_decode_back() {
        let cases = [
            ("get_weather", "get_weather"),
            ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            (" padded ", "=?base64?IHBhZGRlZCA=?="),
            ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
            ("tab\t", "=?base64?dGFiCQ==?="),
            ("=?base64?x?=", "=?base64?PT9iYXNlNjQ/eD89?="),
            ("a\0", "=?base64?YQA=?="),
            ("", ""),
            // A space at either end is padding, not just at both.
            ("trailing ", "=?base64?dHJhaWxpbmcg?="),
            (" leading", "=?base64?IGxlYWRpbmc=?="),
            // Only the whole encoded form looks encoded: its suffix alone does not, nor
            // its prefix and suffix overlapping in fewer characters than both take.
            ("really?=", "really?="),
            ("is it done yet?=", "is it done yet?="),
            ("=?base64?=", "=?base64?="),
        ];
        for (value, header) in cases {
            assert_eq!(encode(value), header, "{value:?}");
            assert_eq!(decode(header).as_deref(), Some(value), "{header:?}");
        }
    }

    #[test]
    fn a_token_is_one_or_more_tchars() {
        for token in [
            "Mcp-Name",
            "GET",
            "x",
            "application",
            "!#$%&'*+-.^_`|~",
            "a1",
        ] {
            assert!(is_token(token), "{token:?}");
        }
        for not_token in ["", "a b", "Mcp-Name:", "a/b", "a\tb", "é", "(x)", "a\"b"] {
            assert!(!is_token(not_token), "{not_token:?}");
        }
    }

    #[test]
    fn base64_round_trips_every_padding() {
        for (bytes, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (&[0xfb, 0xff], "+/8="),
        ] {
            assert_eq!(base64_encode(bytes), text);
            assert_eq!(base64_decode(text).as_deref(), Some(bytes));
        }
    }

    #[test]
    fn broken_encodings_are_refused() {
        for header in [
            "=?base64?abc?=",
            "=?base64?a=bc?=",
            "=?base64?ab=c?=",
            "=?base64?YQ==YQ==?=",
            "=?base64?!!!!?=",
            "=?base64?/w==?=", // not UTF-8
        ] {
            assert_eq!(decode(header), None, "{header}");
        }
    }
}
