//! JSON edited in place: an object keeps its member order and each member's raw text,
//! so amending one member leaves every other byte of its value as the server sent it.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A value serialised to its raw JSON text.
pub fn raw<T: Serialize>(value: &T) -> Option<Box<RawValue>> {
    serde_json::to_string(value)
        .ok()
        .and_then(|text| RawValue::from_string(text).ok())
}

/// A JSON object keeping its member order and each member's raw text.
#[derive(Default)]
pub struct Object(Vec<(String, Box<RawValue>)>);

impl Object {
    pub fn get(&self, name: &str) -> Option<&RawValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| &**v)
    }

    /// Remove a member.
    pub fn remove(&mut self, name: &str) {
        self.0.retain(|(n, _)| n != name);
    }

    /// Replace the member in place, or append it.
    pub fn set(&mut self, name: &str, value: Box<RawValue>) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((name.to_owned(), value)),
        }
    }
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Object;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Object(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}
