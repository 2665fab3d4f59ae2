//! One streaming pass over a request's JSON header, producing raw, unvalidated parts.
//!
//! Only the structure is checked here; small fields (`name`, `shape`, `parameters`, ...)
//! are kept as `serde_json::Value`s for [`super::request`] to validate with precise
//! messages. An input's `data` is decoded straight into tensor bytes by
//! [`DataSeed`](super::data::DataSeed) when its `datatype` came first in the object (the
//! usual order); otherwise it is buffered as a `Value` and decoded afterwards.
//!
//! Values of the wrong JSON kind (an input that is not an object, ...) are consumed and
//! reported as data, not as parse errors, so the rest of the request is still read and
//! the message can name the input. Only broken JSON aborts the parse.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::data::{DataSeed, DataState};
use super::error::{render_f64, render_str, ProtocolError};
use crate::tensor::DataType;

/// The top-level JSON value of a request.
#[derive(Debug)]
pub(crate) enum RawBody {
    Request(RawRequest),
    /// Not an object; holds the rendered value.
    NotObject(String),
}

/// The request object's fields, unvalidated.
#[derive(Debug, Default)]
pub(crate) struct RawRequest {
    pub id: Option<Value>,
    pub parameters: Option<Value>,
    pub inputs: Option<RawInputs>,
    pub outputs: Option<Value>,
    /// The first field that appeared twice.
    pub duplicate: Option<&'static str>,
}

/// The `inputs` field.
#[derive(Debug)]
pub(crate) enum RawInputs {
    List(Vec<RawInput>),
    /// Not an array; holds the rendered value.
    NotArray(String),
}

/// One element of `inputs`.
#[derive(Debug)]
pub(crate) enum RawInput {
    Object(RawFields),
    /// Not an object; holds the rendered value.
    NotObject(String),
}

/// One input object's fields, unvalidated.
#[derive(Debug, Default)]
pub(crate) struct RawFields {
    pub name: Option<Value>,
    pub shape: Option<Value>,
    pub datatype: Option<Value>,
    pub parameters: Option<Value>,
    pub data: RawData,
    /// The first field that appeared twice.
    pub duplicate: Option<&'static str>,
}

/// An input's `data` field.
#[derive(Debug, Default)]
pub(crate) enum RawData {
    #[default]
    Absent,
    /// Decoded while parsing (the datatype was already known and valid).
    Decoded(DataState),
    /// Seen before the datatype; decoded once the datatype is known.
    Buffered(Value),
    /// Skipped because the datatype before it is not a V2 datatype.
    Skipped,
}

/// Parses the JSON header of a request. `json` must be the whole header: trailing
/// non-whitespace is an error.
pub(crate) fn parse(json: &[u8]) -> Result<RawBody, ProtocolError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let body = BodySeed {
        budget: json.len() / 2 + 1,
    }
    .deserialize(&mut de)
    .map_err(|e| ProtocolError::json(&e))?;
    de.end().map_err(|e| ProtocolError::json(&e))?;
    Ok(body)
}

/// Adds visitor methods that accept any scalar as "the wrong kind", rendered for messages.
macro_rules! scalars_are_wrong {
    ($wrap:expr) => {
        fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
            Ok($wrap(v.to_string()))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok($wrap(v.to_string()))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok($wrap(v.to_string()))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            Ok($wrap(render_f64(v)))
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok($wrap(render_str(v)))
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($wrap(String::from("null")))
        }
    };
}

/// Reads an object key and gives its position in a field list (`None`: unknown field).
struct Key(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

/// Marks field `index` as seen; returns `false` (and records it) if it was seen before.
fn first_sighting(
    seen: &mut [bool],
    index: usize,
    fields: &'static [&'static str],
    duplicate: &mut Option<&'static str>,
) -> bool {
    match seen.get_mut(index) {
        Some(flag) if !*flag => {
            *flag = true;
            true
        }
        _ => {
            if duplicate.is_none() {
                *duplicate = fields.get(index).copied();
            }
            false
        }
    }
}

const REQUEST_FIELDS: &[&str] = &["id", "parameters", "inputs", "outputs"];

/// The request object. `budget` bounds any per-input pre-allocation, in elements.
struct BodySeed {
    budget: usize,
}

impl<'de> DeserializeSeed<'de> for BodySeed {
    type Value = RawBody;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawBody, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BodySeed {
    type Value = RawBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a V2 inference request object")
    }

    scalars_are_wrong!(RawBody::NotObject);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawBody, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(RawBody::NotObject(String::from("an array")))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBody, A::Error> {
        let mut raw = RawRequest::default();
        let mut seen = [false; REQUEST_FIELDS.len()];
        while let Some(key) = map.next_key_seed(Key(REQUEST_FIELDS))? {
            let Some(index) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if !first_sighting(&mut seen, index, REQUEST_FIELDS, &mut raw.duplicate) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            match index {
                0 => raw.id = Some(map.next_value()?),
                1 => raw.parameters = Some(map.next_value()?),
                2 => raw.inputs = Some(map.next_value_seed(InputsSeed { budget: self.budget })?),
                _ => raw.outputs = Some(map.next_value()?),
            }
        }
        Ok(RawBody::Request(raw))
    }
}

/// The `inputs` array.
struct InputsSeed {
    budget: usize,
}

impl<'de> DeserializeSeed<'de> for InputsSeed {
    type Value = RawInputs;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawInputs, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for InputsSeed {
    type Value = RawInputs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of inputs")
    }

    scalars_are_wrong!(RawInputs::NotArray);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawInputs, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(RawInputs::NotArray(String::from("an object")))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawInputs, A::Error> {
        let mut list = Vec::new();
        while let Some(input) = seq.next_element_seed(InputSeed { budget: self.budget })? {
            list.push(input);
        }
        Ok(RawInputs::List(list))
    }
}

const INPUT_FIELDS: &[&str] = &["name", "shape", "datatype", "parameters", "data"];

/// One input object.
struct InputSeed {
    budget: usize,
}

impl<'de> DeserializeSeed<'de> for InputSeed {
    type Value = RawInput;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawInput, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl InputSeed {
    /// How many fixed-size elements to reserve for `data`: the declared count if the shape
    /// came first, capped by what the JSON text could possibly hold.
    fn reserve(&self, shape: Option<&Value>) -> usize {
        let declared = shape
            .and_then(Value::as_array)
            .and_then(|dims| dims.iter().try_fold(1u64, |acc, d| acc.checked_mul(d.as_u64()?)));
        match declared {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(self.budget),
            None => 0,
        }
    }
}

impl<'de> Visitor<'de> for InputSeed {
    type Value = RawInput;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an input object")
    }

    scalars_are_wrong!(RawInput::NotObject);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawInput, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(RawInput::NotObject(String::from("an array")))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawInput, A::Error> {
        let mut raw = RawFields::default();
        let mut seen = [false; INPUT_FIELDS.len()];
        while let Some(key) = map.next_key_seed(Key(INPUT_FIELDS))? {
            let Some(index) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if !first_sighting(&mut seen, index, INPUT_FIELDS, &mut raw.duplicate) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            match index {
                0 => raw.name = Some(map.next_value()?),
                1 => raw.shape = Some(map.next_value()?),
                2 => raw.datatype = Some(map.next_value()?),
                3 => raw.parameters = Some(map.next_value()?),
                _ => {
                    let datatype = raw.datatype.as_ref().map(|v| v.as_str().and_then(DataType::parse));
                    raw.data = match datatype {
                        Some(Some(datatype)) => {
                            let reserve = self.reserve(raw.shape.as_ref());
                            let mut state = DataState::new(datatype, reserve);
                            map.next_value_seed(DataSeed(&mut state))?;
                            RawData::Decoded(state)
                        }
                        Some(None) => {
                            map.next_value::<IgnoredAny>()?;
                            RawData::Skipped
                        }
                        None => RawData::Buffered(map.next_value()?),
                    };
                }
            }
        }
        Ok(RawInput::Object(raw))
    }
}
