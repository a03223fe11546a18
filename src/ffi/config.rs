//! The JSON form of [`StoreConfig`] accepted by `mcpts_store_new`.
//!
//! ```json
//! {
//!   "default_ttl": "10m",
//!   "max_ttl": 3600000,
//!   "poll_interval": "500ms",
//!   "page_size": 50,
//!   "max_tasks": 10000,
//!   "max_tasks_per_session": 100,
//!   "expiry": { "policy": "fail", "grace": "30s" },
//!   "max_waiters_per_task": 1024,
//!   "event_buffer": 1024,
//!   "journal": { "dir": "/var/lib/app/tasks", "durability": "fsync" }
//! }
//! ```
//!
//! Every field is optional (`{}` is the default configuration) and `null` means "not set"
//! (the default, which for `default_ttl`, `max_ttl`, `max_tasks` and
//! `max_tasks_per_session` is "no limit"; a requested TTL is still cut to 100 years).
//! Durations are humantime strings ("90s", "10m", "1h 30m") or integer milliseconds.
//! `expiry` is `"fail"` (default, 30 s grace), `"remove"`, or
//! `{"policy": "fail", "grace": <duration>}`. Unknown fields are rejected.
//!
//! `journal` keeps tasks across restarts (see [`JournalConfig`]): `dir` (required; created
//! if missing), `durability` (`"fsync"`, the default, `"flush"` or `"none"`), `recovery`
//! (what becomes of tasks found running at start: `"fail_running"`, the default, or
//! `"keep"`), `salvage` (start from a damaged log, setting the damage aside; default
//! false), `compact_ratio` and `compact_min_bytes` (integers; defaults 4 and 1 MiB).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::error::{mcpts_result, parse_object, Error};
use crate::{Durability, ExpiryPolicy, JournalConfig, RecoveryPolicy, StoreConfig, StoreError};

/// What `mcpts_store_new` builds a store from.
#[derive(Debug)]
pub(crate) struct FfiConfig {
    pub(crate) store: StoreConfig,
    pub(crate) journal: Option<JournalConfig>,
}

/// Parses and validates a JSON configuration. Syntax errors give `InvalidJson`; wrong
/// shapes, unknown fields and invalid values give `InvalidConfig`.
pub(crate) fn parse_config(json: &[u8]) -> Result<FfiConfig, Error> {
    let raw: RawConfig = parse_object(json, "store configuration", mcpts_result::InvalidConfig)?;
    let defaults = StoreConfig::default();
    let store = StoreConfig {
        default_ttl: raw.default_ttl.map(|d| d.0),
        max_ttl: raw.max_ttl.map(|d| d.0),
        poll_interval: raw.poll_interval.map_or(defaults.poll_interval, |d| d.0),
        page_size: raw.page_size.unwrap_or(defaults.page_size),
        max_tasks: raw.max_tasks,
        max_tasks_per_session: raw.max_tasks_per_session,
        expiry: raw.expiry.map_or(defaults.expiry, |e| e.0),
        max_waiters_per_task: (raw.max_waiters_per_task).unwrap_or(defaults.max_waiters_per_task),
        event_buffer: raw.event_buffer.unwrap_or(defaults.event_buffer),
    };
    store.validate()?;
    let journal = raw.journal.map(RawJournal::into_config).transpose()?;
    Ok(FfiConfig { store, journal })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    default_ttl: Option<JsonDuration>,
    #[serde(default)]
    max_ttl: Option<JsonDuration>,
    #[serde(default)]
    poll_interval: Option<JsonDuration>,
    #[serde(default)]
    page_size: Option<usize>,
    #[serde(default)]
    max_tasks: Option<usize>,
    #[serde(default)]
    max_tasks_per_session: Option<usize>,
    #[serde(default)]
    expiry: Option<JsonExpiry>,
    #[serde(default)]
    max_waiters_per_task: Option<usize>,
    #[serde(default)]
    event_buffer: Option<usize>,
    #[serde(default)]
    journal: Option<RawJournal>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a journal object such as {\"dir\": \"tasks\"}"
)]
struct RawJournal {
    dir: String,
    #[serde(default)]
    durability: Option<JsonDurability>,
    #[serde(default)]
    recovery: Option<JsonRecovery>,
    #[serde(default)]
    salvage: Option<bool>,
    #[serde(default)]
    compact_ratio: Option<u32>,
    #[serde(default)]
    compact_min_bytes: Option<u64>,
}

impl RawJournal {
    fn into_config(self) -> Result<JournalConfig, StoreError> {
        if self.dir.is_empty() {
            return Err(StoreError::InvalidConfig {
                field: "journal.dir",
                reason: "must name a directory".into(),
            });
        }
        // JSON can spell a NUL (`\u0000`), no path can hold one: opening it would fail as
        // a journal error, as if the disk were at fault.
        if self.dir.contains('\0') {
            return Err(StoreError::InvalidConfig {
                field: "journal.dir",
                reason: "must not contain a NUL character".into(),
            });
        }
        let defaults = JournalConfig::new(self.dir);
        Ok(JournalConfig {
            durability: self
                .durability
                .map_or(defaults.durability, Durability::from),
            recovery: self
                .recovery
                .map_or(defaults.recovery, RecoveryPolicy::from),
            salvage: self.salvage.unwrap_or(defaults.salvage),
            compact_ratio: self.compact_ratio.unwrap_or(defaults.compact_ratio),
            compact_min_bytes: self.compact_min_bytes.unwrap_or(defaults.compact_min_bytes),
            ..defaults
        })
    }
}

/// `"fsync"`, `"flush"` or `"none"`.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum JsonDurability {
    Fsync,
    Flush,
    None,
}

impl From<JsonDurability> for Durability {
    fn from(durability: JsonDurability) -> Durability {
        match durability {
            JsonDurability::Fsync => Durability::Fsync,
            JsonDurability::Flush => Durability::Flush,
            JsonDurability::None => Durability::None,
        }
    }
}

/// `"fail_running"` or `"keep"`.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum JsonRecovery {
    FailRunning,
    Keep,
}

impl From<JsonRecovery> for RecoveryPolicy {
    fn from(recovery: JsonRecovery) -> RecoveryPolicy {
        match recovery {
            JsonRecovery::FailRunning => RecoveryPolicy::FailRunning,
            JsonRecovery::Keep => RecoveryPolicy::Keep,
        }
    }
}

/// A duration written as a humantime string or as integer milliseconds.
struct JsonDuration(Duration);

impl<'de> Deserialize<'de> for JsonDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = JsonDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration: a string such as \"90s\" or integer milliseconds")
            }

            fn visit_u64<E: de::Error>(self, ms: u64) -> Result<JsonDuration, E> {
                Ok(JsonDuration(Duration::from_millis(ms)))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<JsonDuration, E> {
                humantime::parse_duration(text)
                    .map(JsonDuration)
                    .map_err(|e| E::custom(format!("invalid duration \"{text}\": {e}")))
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

/// `"fail"`, `"remove"` or `{"policy": "fail" | "remove", "grace": <duration>}`.
struct JsonExpiry(ExpiryPolicy);

impl<'de> Deserialize<'de> for JsonExpiry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExpiryVisitor;

        fn policy<E: de::Error>(name: &str, grace: Option<Duration>) -> Result<JsonExpiry, E> {
            match (name, grace) {
                ("fail", None) => Ok(JsonExpiry(ExpiryPolicy::default())),
                ("fail", Some(grace)) => Ok(JsonExpiry(ExpiryPolicy::Fail { grace })),
                ("remove", None) => Ok(JsonExpiry(ExpiryPolicy::Remove)),
                ("remove", Some(_)) => Err(E::custom(
                    "expiry policy \"remove\" takes no grace (only \"fail\" does)",
                )),
                (other, _) => Err(E::custom(format!(
                    "unknown expiry policy \"{other}\", expected \"fail\" or \"remove\""
                ))),
            }
        }

        impl<'de> Visitor<'de> for ExpiryVisitor {
            type Value = JsonExpiry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"fail\", \"remove\" or {\"policy\": ..., \"grace\": ...}")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<JsonExpiry, E> {
                policy(name, None)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonExpiry, A::Error> {
                let mut name: Option<String> = None;
                // `Some(None)`: given as `null`, which means "not set" here as anywhere.
                let mut grace: Option<Option<JsonDuration>> = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "policy" if name.is_none() => name = Some(map.next_value()?),
                        "grace" if grace.is_none() => grace = Some(map.next_value()?),
                        "policy" | "grace" => {
                            return Err(de::Error::custom(format!("duplicate field `{key}`")))
                        }
                        _ => return Err(de::Error::unknown_field(&key, &["policy", "grace"])),
                    }
                }
                let name = name.ok_or_else(|| de::Error::missing_field("policy"))?;
                policy(&name, grace.flatten().map(|g| g.0))
            }
        }

        deserializer.deserialize_any(ExpiryVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_err(json: &str, code: mcpts_result, needle: &str) {
        let err = parse_config(json.as_bytes()).unwrap_err();
        let text = format!("{err:?}");
        assert!(text.contains(&format!("{code:?}")), "{json}: {text}");
        assert!(text.contains(needle), "{json}: {text} lacks {needle}");
    }

    #[test]
    fn defaults_and_fields() {
        assert_eq!(parse_config(b"{}").unwrap().store, StoreConfig::default());
        let config = parse_config(
            br#"{"default_ttl":"90s","max_ttl":600000,"poll_interval":"250ms","page_size":7,
                 "max_tasks":10,"max_tasks_per_session":null,
                 "expiry":{"policy":"fail","grace":"5s"}}"#,
        )
        .unwrap()
        .store;
        assert_eq!(config.default_ttl, Some(Duration::from_secs(90)));
        assert_eq!(config.max_ttl, Some(Duration::from_secs(600)));
        assert_eq!(config.poll_interval, Duration::from_millis(250));
        assert_eq!(config.page_size, 7);
        assert_eq!(config.max_tasks, Some(10));
        assert_eq!(config.max_tasks_per_session, None);
        assert_eq!(
            config.expiry,
            ExpiryPolicy::Fail {
                grace: Duration::from_secs(5)
            }
        );
        let config = parse_config(br#"{"expiry":"remove"}"#).unwrap().store;
        assert_eq!(config.expiry, ExpiryPolicy::Remove);
        let config = parse_config(br#"{"max_waiters_per_task":3,"event_buffer":16}"#).unwrap();
        assert_eq!(config.store.max_waiters_per_task, 3);
        assert_eq!(config.store.event_buffer, 16);
        assert_eq!(config.journal, None);
    }

    #[test]
    fn journal() {
        let config = parse_config(br#"{"journal":{"dir":"tasks"}}"#).unwrap();
        assert_eq!(config.journal, Some(JournalConfig::new("tasks")));
        let config = parse_config(
            br#"{"journal":{"dir":"tasks","durability":"none","recovery":"keep",
                 "salvage":true,"compact_ratio":2,"compact_min_bytes":4096}}"#,
        )
        .unwrap();
        let journal = config.journal.unwrap();
        assert_eq!(journal.dir, std::path::Path::new("tasks"));
        assert_eq!(journal.durability, Durability::None);
        assert_eq!(journal.recovery, RecoveryPolicy::Keep);
        assert!(journal.salvage);
        assert_eq!(
            (journal.compact_ratio, journal.compact_min_bytes),
            (2, 4096)
        );
        let flush = parse_config(br#"{"journal":{"dir":"t","durability":"flush"}}"#).unwrap();
        assert_eq!(flush.journal.unwrap().durability, Durability::Flush);
    }

    #[test]
    fn errors() {
        check_err("{", mcpts_result::InvalidJson, "store configuration");
        // Not well-formed, whatever else is wrong: an unknown field before the syntax error.
        check_err(
            r#"{"ttl": 1, !}"#,
            mcpts_result::InvalidJson,
            "store configuration",
        );
        check_err(" 5", mcpts_result::InvalidConfig, "expected a JSON object");
        check_err(
            "[1, 2]",
            mcpts_result::InvalidConfig,
            "expected a JSON object",
        );
        check_err(
            r#"{"ttl":1}"#,
            mcpts_result::InvalidConfig,
            "unknown field `ttl`",
        );
        check_err(r#"{"max_ttl":"soon"}"#, mcpts_result::InvalidConfig, "soon");
        check_err(
            r#"{"page_size":0}"#,
            mcpts_result::InvalidConfig,
            "page_size",
        );
        check_err(
            r#"{"event_buffer":0}"#,
            mcpts_result::InvalidConfig,
            "event_buffer",
        );
        check_err(
            r#"{"expiry":"later"}"#,
            mcpts_result::InvalidConfig,
            "later",
        );
        check_err(
            r#"{"expiry":{"policy":"remove","grace":"1s"}}"#,
            mcpts_result::InvalidConfig,
            "no grace",
        );
        check_err(
            r#"{"expiry":{"policy":"fail","when":1}}"#,
            mcpts_result::InvalidConfig,
            "unknown field `when`",
        );
    }
}
