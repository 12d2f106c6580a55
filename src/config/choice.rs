//! The spelling of every enum-valued setting, in one table per enum.
//!
//! One table serves both directions: parsing (`wiat` → an error that lists `conflict,
//! wait`) and printing (the route table, logs), so the two can never disagree.

use std::fmt;

use super::{
    BackendName, DefaultAction, KeyFormat, OnAmbiguous, OnConcurrent, OnFailure, OnStoreError,
    RedisModeName,
};

/// An enum setting written as one of a fixed set of words.
pub trait Choice: Copy + PartialEq + 'static {
    /// Every accepted spelling and its value, in the order error messages list them.
    const NAMES: &'static [(&'static str, Self)];

    /// Parse a spelling; the error lists the valid ones.
    fn from_name(text: &str) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, value)| *value)
            .ok_or_else(|| {
                let valid: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                format!("invalid value {text:?}; valid values: {}", valid.join(", "))
            })
    }

    /// The spelling used in the file.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, value)| *value == self)
            .map_or("?", |(name, _)| name)
    }
}

macro_rules! choices {
    ($($ty:ty { $($name:literal => $value:expr),+ $(,)? })+) => {$(
        impl Choice for $ty {
            const NAMES: &'static [(&'static str, Self)] = &[$(($name, $value)),+];
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    )+};
}

choices! {
    BackendName {
        "memory" => BackendName::Memory,
        "redis" => BackendName::Redis,
        "postgres" => BackendName::Postgres,
    }
    RedisModeName {
        "standalone" => RedisModeName::Standalone,
        "cluster" => RedisModeName::Cluster,
        "sentinel" => RedisModeName::Sentinel,
    }
    OnStoreError { "reject" => OnStoreError::Reject, "passthrough" => OnStoreError::Passthrough }
    DefaultAction {
        "passthrough" => DefaultAction::Passthrough,
        "reject" => DefaultAction::Reject,
    }
    OnConcurrent { "conflict" => OnConcurrent::Conflict, "wait" => OnConcurrent::Wait }
    OnFailure { "replay" => OnFailure::Replay, "retry" => OnFailure::Retry }
    OnAmbiguous { "hold" => OnAmbiguous::Hold, "release" => OnAmbiguous::Release }
    KeyFormat { "plain" => KeyFormat::Plain, "sf-string" => KeyFormat::SfString }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (name, value) in OnConcurrent::NAMES {
            assert_eq!(OnConcurrent::from_name(name), Ok(*value));
            assert_eq!(value.name(), *name);
        }
        assert_eq!(KeyFormat::SfString.to_string(), "sf-string");
    }

    #[test]
    fn invalid_value_lists_the_valid_ones() {
        assert_eq!(
            OnConcurrent::from_name("wiat").unwrap_err(),
            "invalid value \"wiat\"; valid values: conflict, wait"
        );
        assert!(RedisModeName::from_name("Cluster").is_err());
    }
}
