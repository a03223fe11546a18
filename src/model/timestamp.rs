use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A wall-clock instant in whole milliseconds since the Unix epoch.
///
/// Kept as an integer inside the store and formatted as RFC 3339 UTC with milliseconds
/// (`2025-11-25T10:30:00.000Z`) only when serialised, so the owner thread never formats
/// strings.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Truncates a `SystemTime` to milliseconds; times before 1970 become the epoch.
    pub fn from_system_time(time: SystemTime) -> Timestamp {
        let ms = time
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Timestamp(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// The same instant as a `SystemTime`.
    pub fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // humantime formats years up to 9999; clamp so Display never fails on hostile input.
        const MAX_MS: u64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
        let clamped = Timestamp(self.0.min(MAX_MS));
        fmt::Display::fmt(
            &humantime::format_rfc3339_millis(clamped.to_system_time()),
            f,
        )
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        humantime::parse_rfc3339_weak(&text)
            .map(Timestamp::from_system_time)
            .map_err(|e| serde::de::Error::custom(format!("bad RFC 3339 timestamp: {e}")))
    }
}
