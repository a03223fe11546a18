//! How deeply JSON nests. The values a store keeps are bounded in depth, so that every
//! record it journals reads back, and no recursive walk of one (a clone, a drop, a
//! serialisation) runs a thread's stack out, the owner thread's least of all.

use serde_json::Value;

use crate::StoreError;

/// The deepest a payload a store keeps (a result or error, an input request or answer, an
/// origin) may nest; a store refuses deeper ones with `InvalidArgument`. JSON read off the
/// wire is no deeper than 128 levels (serde_json's limit), so nothing a client sends comes
/// near it; a Rust caller's value might.
pub const MAX_PAYLOAD_DEPTH: usize = 192;

/// Whether `value` nests deeper than `max` levels (`[]` is one level, a scalar none).
/// The recursion stops at `max` levels whatever the value's depth, and allocates nothing
/// (it runs for every result a store keeps).
pub(crate) fn nests_deeper(value: &Value, max: usize) -> bool {
    match value {
        Value::Array(items) => max == 0 || items.iter().any(|v| nests_deeper(v, max - 1)),
        Value::Object(fields) => max == 0 || fields.values().any(|v| nests_deeper(v, max - 1)),
        _ => false,
    }
}

/// How deeply the JSON text `json` nests (brackets inside strings do not count).
pub(crate) fn text_depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `Ok` if `value` (called `what` in the error) is within [`MAX_PAYLOAD_DEPTH`].
pub(crate) fn check_value(what: &str, value: &Value) -> Result<(), StoreError> {
    if nests_deeper(value, MAX_PAYLOAD_DEPTH) {
        return Err(too_deep(what));
    }
    Ok(())
}

/// `Ok` if the JSON text `json` (called `what` in the error) is within
/// [`MAX_PAYLOAD_DEPTH`].
pub(crate) fn check_text(what: &str, json: &str) -> Result<(), StoreError> {
    if text_depth(json.as_bytes()) > MAX_PAYLOAD_DEPTH {
        return Err(too_deep(what));
    }
    Ok(())
}

fn too_deep(what: &str) -> StoreError {
    StoreError::InvalidArgument(format!(
        "{what} nests deeper than {MAX_PAYLOAD_DEPTH} levels"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        (1..depth).fold(json!([]), |inner, _| json!([inner]))
    }

    #[test]
    fn depth_is_counted_the_same_on_values_and_on_text() {
        for (value, depth) in [
            (json!(1), 0),
            (json!([]), 1),
            (json!({"a": [1, {"b": "[[[{{"}]}), 3),
            (nested(50), 50),
        ] {
            assert_eq!(text_depth(value.to_string().as_bytes()), depth, "{value}");
            assert!(!nests_deeper(&value, depth), "{value}");
            assert_eq!(
                nests_deeper(&value, depth.saturating_sub(1)),
                depth > 0,
                "{value}"
            );
        }
        assert_eq!(text_depth(br#"["\"[", "\\", ["x"]]"#), 2);
    }
}
