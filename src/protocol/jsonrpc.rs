//! JSON-RPC 2.0 framing as MCP uses it: ids are strings or integers, params are objects.
//! Batches (arrays of messages) exist only in protocol version 2025-03-26 and older; the
//! connection decides whether one is welcome (see [`parse_value`]).

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters (also: unknown task, bad cursor).
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;

/// Why an array is refused where a single message is due.
pub const BATCHES_REFUSED: &str =
    "batches are not supported (only protocol versions before 2025-06-18 have them)";

/// A request id: a string or an integer, echoed back verbatim.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct RpcError {
    /// The error code.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Optional detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and a message.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// -32700.
    pub fn parse_error(detail: impl fmt::Display) -> RpcError {
        RpcError::new(PARSE_ERROR, format!("Parse error: {detail}"))
    }

    /// -32600.
    pub fn invalid_request(detail: impl fmt::Display) -> RpcError {
        RpcError::new(INVALID_REQUEST, format!("Invalid request: {detail}"))
    }

    /// -32601.
    pub fn method_not_found(method: &str) -> RpcError {
        RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// -32602.
    pub fn invalid_params(detail: impl fmt::Display) -> RpcError {
        RpcError::new(INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    /// -32603.
    pub fn internal(detail: impl fmt::Display) -> RpcError {
        RpcError::new(INTERNAL_ERROR, format!("Internal error: {detail}"))
    }

    /// Attaches `data`.
    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    /// The error as a JSON value (what a stored task outcome holds).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({"code": self.code, "message": ""}))
    }

    /// Reads an error object back; anything malformed becomes an internal error.
    pub fn from_value(value: &Value) -> RpcError {
        // Only an object: serde would also read the struct from an array (`[0, ""]`) and
        // make up an error the peer never sent.
        value
            .is_object()
            .then(|| serde_json::from_value(value.clone()).ok())
            .flatten()
            .unwrap_or_else(|| RpcError::internal("malformed error object"))
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// A request: it has an id and wants a response.
#[derive(Clone, PartialEq, Debug)]
pub struct Request {
    /// The id to answer with.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The params object, if any.
    pub params: Option<Value>,
}

/// A notification: no id, no response.
#[derive(Clone, PartialEq, Debug)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The params object, if any.
    pub params: Option<Value>,
}

/// A response to a request we sent.
#[derive(Clone, PartialEq, Debug)]
pub struct Response {
    /// The id of the request it answers.
    pub id: RequestId,
    /// The result, or the error.
    pub outcome: Result<Value, RpcError>,
}

/// Any incoming message.
#[derive(Clone, PartialEq, Debug)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response.
    Response(Response),
}

/// A message that could not be understood, with the error response to send back (if the
/// message had a usable id, the response carries it; otherwise the id is `null`), unless
/// it was itself a response: see [`answer`](Rejected::answer).
#[derive(Clone, PartialEq, Debug)]
pub struct Rejected {
    /// The id to answer with, if one could be read.
    pub id: Option<RequestId>,
    /// Why the message was rejected.
    pub error: RpcError,
    /// The message was shaped as a response (`result` or `error`, no `method`) but could
    /// not be routed: its id is null, absent or unusable, or it is malformed. It is never
    /// answered.
    pub response: bool,
}

impl Rejected {
    /// The error response to send back, or `None` for a rejected response: JSON-RPC never
    /// answers a response, and two peers that answered the ones they cannot route (an
    /// error with `"id": null`, say) would trade errors for ever.
    pub fn answer(&self) -> Option<Value> {
        (!self.response).then(|| error_response(self.id.as_ref(), &self.error))
    }
}

/// Parses one JSON-RPC message.
pub fn parse_message(text: &str) -> Result<Message, Rejected> {
    classify(parse_value(text)?)
}

/// Parses the JSON of a message, or of a batch (an array), without classifying it: what
/// the connection does with an array depends on the protocol version it settled on. An
/// object that names a member twice, at any depth, is refused as a parse error: other
/// readers may take the first of the two where a `Value` keeps the last.
pub fn parse_value(text: &str) -> Result<Value, Rejected> {
    serde_json::from_str(text)
        .map(|Unique(value)| value)
        .map_err(|e| Rejected {
            id: None,
            error: RpcError::parse_error(e),
            response: false,
        })
}

/// JSON read into a [`Value`], but refused when an object names a member twice. A `Value`
/// keeps the last of two equal names where other readers (a host's own JSON parser, a
/// proxy) may take the first: what they route, log or authorise would not be the message
/// served (`"method": "tasks/get", "method": "tasks/cancel"`).
struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor).map(Unique)
    }
}

/// Builds a [`Value`] as serde_json's own does, checking each object's names.
struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            match object.entry(name) {
                serde_json::map::Entry::Occupied(member) => {
                    return Err(serde::de::Error::custom(format!(
                        "member \"{}\" given twice in one object",
                        member.key()
                    )));
                }
                serde_json::map::Entry::Vacant(member) => {
                    let Unique(value) = map.next_value()?;
                    member.insert(value);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// Classifies an already-parsed JSON value as a message. An object with `result` or
/// `error` and no `method` is a response whatever else it holds; one that cannot be routed
/// is rejected as a [`response`](Rejected::response), which is never answered.
pub fn classify(value: Value) -> Result<Message, Rejected> {
    let reject = |id: Option<RequestId>, why: &str| Rejected {
        id,
        error: RpcError::invalid_request(why),
        response: false,
    };
    let mut object = match value {
        Value::Object(object) => object,
        Value::Array(_) => return Err(reject(None, BATCHES_REFUSED)),
        _ => return Err(reject(None, "a message must be a JSON object")),
    };
    if !object.contains_key("method")
        && (object.contains_key("result") || object.contains_key("error"))
    {
        return classify_response(object);
    }
    let id = match object.remove("id") {
        None => None,
        Some(raw) => match serde_json::from_value::<RequestId>(raw) {
            Ok(id) => Some(id),
            Err(_) => return Err(reject(None, "id must be a string or an integer")),
        },
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(reject(id, "jsonrpc must be \"2.0\""));
    }
    let params = object.remove("params").filter(|params| !params.is_null());
    let method = object.remove("method");
    if let (Some(Value::String(method)), None) = (&method, &id) {
        // A notification is never answered: params it cannot read (MCP's are objects) are
        // its handler's to ignore. Only params that are not structured at all make it no
        // JSON-RPC message, answered -32600 with a null id as JSON-RPC asks.
        if params
            .as_ref()
            .is_some_and(|p| !p.is_object() && !p.is_array())
        {
            return Err(reject(None, "params must be an object or an array"));
        }
        let method = method.clone();
        return Ok(Message::Notification(Notification { method, params }));
    }
    match (method, id) {
        (Some(Value::String(_)), id) if params.as_ref().is_some_and(|p| !p.is_object()) => {
            Err(Rejected {
                id,
                error: RpcError::invalid_params("params must be an object"),
                response: false,
            })
        }
        (Some(Value::String(method)), Some(id)) => {
            Ok(Message::Request(Request { id, method, params }))
        }
        (Some(_), id) => Err(reject(id, "method must be a string")),
        // Neither a method nor a result nor an error (a response has one of the last two).
        (None, id) => Err(reject(id, "missing method")),
    }
}

/// A response (an object with `result` or `error` and no `method`). One that cannot be
/// routed to a request (its id is null, absent or unusable: an error a peer answered
/// before it could read an id, say), or that is malformed, is rejected without an answer.
fn classify_response(mut object: Map<String, Value>) -> Result<Message, Rejected> {
    let drop = |id: Option<RequestId>, why: &str| Rejected {
        id,
        error: RpcError::invalid_request(why),
        response: true,
    };
    let id = match object.remove("id").map(serde_json::from_value::<RequestId>) {
        Some(Ok(id)) => id,
        None | Some(Err(_)) => {
            return Err(drop(
                None,
                "a response without a usable id answers no request",
            ))
        }
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(drop(Some(id), "jsonrpc must be \"2.0\""));
    }
    let outcome = match (object.remove("result"), object.remove("error")) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(RpcError::from_value(&error)),
        _ => return Err(drop(Some(id), "a response has result or error, not both")),
    };
    Ok(Message::Response(Response { id, outcome }))
}

/// Deserialises a params object into `T`; missing params count as `{}`. Unknown fields are
/// tolerated (real clients send extra ones). Anything but an object is refused: serde would
/// also read a struct from an array, by position, which MCP never sends.
pub fn params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    let value = params.unwrap_or_else(|| Value::Object(Map::new()));
    if !value.is_object() {
        return Err(RpcError::invalid_params("params must be an object"));
    }
    serde_json::from_value(value).map_err(RpcError::invalid_params)
}

/// A success response.
pub fn response(id: &RequestId, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response; `id` is `null` when the request's id could not be read.
pub fn error_response(id: Option<&RequestId>, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// A request message.
pub fn request(id: &RequestId, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A notification message.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_never_answered_even_when_it_cannot_be_read() {
        for text in [
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid request"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"result":{}}"#,
            r#"{"id":null,"error":{"code":1,"message":"no jsonrpc"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"both"}}"#,
        ] {
            let rejected = parse_message(text).expect_err(text);
            assert!(rejected.response, "{text}");
            assert_eq!(rejected.answer(), None, "{text}");
        }
        let routed =
            parse_message(r#"{"jsonrpc":"2.0","id":"s-1","error":{"code":1,"message":"m"}}"#);
        assert!(matches!(routed, Ok(Message::Response(_))), "{routed:?}");
    }

    #[test]
    fn an_array_is_refused_as_a_batch_and_a_scalar_as_no_message() {
        for text in ["[]", r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#] {
            let rejected = parse_message(text).expect_err(text);
            assert_eq!(rejected.error.code, INVALID_REQUEST, "{text}");
            assert!(rejected.error.message.contains(BATCHES_REFUSED), "{text}");
            assert_eq!(rejected.id, None, "{text}");
        }
        let rejected = parse_message("7").expect_err("a number");
        assert_eq!(rejected.error.code, INVALID_REQUEST);
        assert!(!rejected.error.message.contains(BATCHES_REFUSED));
    }

    #[test]
    fn ids_and_errors_print_as_messages_quote_them() {
        // An id shows as it was sent: a number bare, a string quoted (so `7` and `"7"`,
        // two different ids, read differently in an error message or a log).
        assert_eq!(RequestId::Number(-7).to_string(), "-7");
        assert_eq!(RequestId::String("7".into()).to_string(), "\"7\"");
        let error = RpcError::method_not_found("tasks/nope");
        assert_eq!(error.to_string(), "Method not found: tasks/nope (-32601)");
    }

    #[test]
    fn a_request_it_cannot_read_is_answered_with_a_null_id() {
        for text in [
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0"}"#,
            "not json",
        ] {
            let answer = parse_message(text).expect_err(text).answer().expect(text);
            assert!(
                answer["id"].is_null() && answer["error"].is_object(),
                "{answer}"
            );
        }
    }

    #[test]
    fn a_member_named_twice_anywhere_is_a_parse_error() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","method":"tasks/cancel"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":{"b":1,"b":2}}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}]"#,
        ] {
            let answer = parse_value(text).expect_err(text).answer().expect(text);
            assert_eq!(answer["error"]["code"], PARSE_ERROR, "{answer}");
            assert!(answer["id"].is_null(), "{answer}");
        }
        // The same name in two objects is no repeat; values are read as `Value` reads them.
        let text =
            r#"{"a":{"n":1},"b":{"n":-2.5,"s":"x","t":[true,null]},"c":18446744073709551615}"#;
        assert_eq!(
            parse_value(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }
}
