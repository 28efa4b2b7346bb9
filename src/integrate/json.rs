//! A JSON value that keeps the order of an object's keys, so that merging
//! opfs's entries into a user's settings file leaves every other setting
//! where the user (or the agent) put it. (`serde_json::Value` sorts keys
//! unless the crate-wide `preserve_order` feature is on, which would
//! change every other JSON output of opfs.)

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value; objects are key-value lists in file order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// An empty object.
    pub(crate) fn object() -> Json {
        Json::Object(Vec::new())
    }

    /// A string.
    pub(crate) fn str(s: &str) -> Json {
        Json::String(s.to_string())
    }

    /// The string, if this is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value at `key`, if this is an object that has it.
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value at `key`, if this is an object that has it.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        match self {
            Json::Object(kv) => kv.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sets `key` to `value` in this object, in place if present, else at
    /// the end. Does nothing unless this is an object.
    pub(crate) fn set(&mut self, key: &str, value: Json) {
        if let Json::Object(kv) = self {
            match kv.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => kv.push((key.to_string(), value)),
            }
        }
    }

    /// Removes `key` from this object; whether it was there.
    pub(crate) fn remove(&mut self, key: &str) -> bool {
        match self {
            Json::Object(kv) => {
                let before = kv.len();
                kv.retain(|(k, _)| k != key);
                kv.len() != before
            }
            _ => false,
        }
    }

    /// Whether this is an empty object or array.
    pub(crate) fn is_empty_container(&self) -> bool {
        match self {
            Json::Object(kv) => kv.is_empty(),
            Json::Array(a) => a.is_empty(),
            _ => false,
        }
    }

    /// The value at `key` of this object, inserted as `default` first if
    /// absent. `None` unless this is an object.
    pub(crate) fn entry(&mut self, key: &str, default: Json) -> Option<&mut Json> {
        if self.get(key).is_none() {
            self.set(key, default);
        }
        self.get_mut(key)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Json::Object(kv) => {
                let mut map = s.serialize_map(Some(kv.len()))?;
                for (k, v) in kv {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(n)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_string()))
    }

    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Json::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut out: Vec<(String, Json)> = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            out.push((k, v));
        }
        Ok(Json::Object(out))
    }
}

/// Parses `text` as one JSON value, keeping key order.
pub(crate) fn parse(text: &str) -> Result<Json, serde_json::Error> {
    serde_json::from_str(text)
}

/// `v` as the agents write their files: two-space indents, a final
/// newline.
pub(crate) fn to_text(v: &Json) -> String {
    match serde_json::to_string_pretty(v) {
        Ok(s) => s + "\n",
        // A Json holds only what serde_json can write.
        Err(_) => String::from("{}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_through_a_round_trip() {
        let text = r#"{"zeta": 1, "alpha": {"b": [true, null, 1.5], "a": "x\"y"}, "mid": -3}"#;
        let v = parse(text).expect("parse");
        let again = parse(&to_text(&v)).expect("reparse");
        assert_eq!(v, again);
        let out = to_text(&v);
        let (z, a, m) = (
            out.find("zeta").expect("zeta"),
            out.find("alpha").expect("alpha"),
            out.find("mid").expect("mid"),
        );
        assert!(z < a && a < m, "{out}");
        assert!(out.find("\"b\"").expect("b") < out.find("\"a\"").expect("a"));
    }

    #[test]
    fn set_replaces_in_place_and_appends_new_keys() {
        let mut v = parse(r#"{"a": 1, "b": 2}"#).expect("parse");
        v.set("a", Json::str("one"));
        v.set("c", Json::Null);
        assert_eq!(
            to_text(&v),
            "{\n  \"a\": \"one\",\n  \"b\": 2,\n  \"c\": null\n}\n"
        );
        assert!(v.remove("b"));
        assert!(!v.remove("b"));
    }
}
