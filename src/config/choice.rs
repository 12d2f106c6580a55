//! Enum-valued settings: each enum derives its spelling (`strum`, snake_case), which
//! serves both directions — parsing (`wiat` → an error that lists `conflict, wait`) and
//! printing (the route table, logs) — so the two can never disagree.

use std::fmt::Display;
use std::str::FromStr;

use strum::VariantNames;

/// An enum setting written as one of a fixed set of words.
pub trait Choice: Copy + PartialEq + FromStr + Display + VariantNames + 'static {
    /// Parse a spelling; the error lists the valid ones.
    fn from_name(text: &str) -> Result<Self, String> {
        text.parse().map_err(|_| {
            let valid = Self::VARIANTS.join(", ");
            format!("invalid value {text:?}; valid values: {valid}")
        })
    }
}

impl<T: Copy + PartialEq + FromStr + Display + VariantNames + 'static> Choice for T {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{KeyFormat, OnConcurrent, RedisModeName};

    #[test]
    fn names_round_trip() {
        for name in OnConcurrent::VARIANTS {
            let value = OnConcurrent::from_name(name).unwrap();
            assert_eq!(value.to_string(), *name);
        }
        assert_eq!(KeyFormat::SfString.to_string(), "sf-string");
        assert_eq!(KeyFormat::from_name("sf-string"), Ok(KeyFormat::SfString));
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
