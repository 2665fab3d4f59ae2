//! One streaming pass over a request's JSON header, producing raw, unvalidated parts.
//!
//! Nothing here builds a JSON tree. Small client fields (`id`, `name`, `shape`,
//! `datatype`, `parameters`, `outputs`) are kept as the raw JSON text they were written
//! as, borrowed from the body ([`RawValue`]): reading them costs no memory whatever their
//! size or the order of the keys, and [`super::request`] reads them into typed values
//! under the caps of [`super::limits`]. An input's `data` is decoded straight into
//! tensor bytes by [`DataSeed`] when its `datatype` came first in the object (the usual
//! order); otherwise its raw text is kept and decoded once the datatype is known.
//!
//! Values of the wrong JSON kind (an input that is not an object, ...) are consumed and
//! reported as data, not as parse errors, so the rest of the request is still read and
//! the message can name the input. Broken JSON, nesting deeper than 128 levels anywhere
//! (unknown fields included) and a request with more inputs than
//! [`MAX_INPUTS`](super::limits::MAX_INPUTS) abort the parse.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::data::{DataSeed, DataState};
use super::error::ProtocolError;
use super::limits::{MAX_DIMS, MAX_INPUTS, MAX_NAME_BYTES};
use crate::model::tensor::DataType;

/// The top-level JSON value of a request.
#[derive(Debug)]
pub(crate) enum RawBody<'de> {
    Request(RawRequest<'de>),
    /// Not an object.
    NotObject(&'de RawValue),
}

/// The request object's fields, unvalidated.
#[derive(Debug, Default)]
pub(crate) struct RawRequest<'de> {
    pub id: Option<&'de RawValue>,
    pub parameters: Option<&'de RawValue>,
    pub inputs: Option<RawInputs<'de>>,
    pub outputs: Option<&'de RawValue>,
    /// The first field that appeared twice.
    pub duplicate: Option<&'static str>,
}

/// The `inputs` field.
#[derive(Debug)]
pub(crate) enum RawInputs<'de> {
    List(Vec<RawInput<'de>>),
    /// Not an array; holds how it was rendered.
    NotArray(String),
}

/// One element of `inputs`.
#[derive(Debug)]
pub(crate) enum RawInput<'de> {
    Object(RawFields<'de>),
    /// Not an object; holds how it was rendered.
    NotObject(String),
}

/// One input object's fields, unvalidated.
#[derive(Debug, Default)]
pub(crate) struct RawFields<'de> {
    pub name: Option<&'de RawValue>,
    pub shape: Option<&'de RawValue>,
    pub datatype: Option<&'de RawValue>,
    pub parameters: Option<&'de RawValue>,
    pub data: RawData<'de>,
    /// The first field that appeared twice.
    pub duplicate: Option<&'static str>,
}

/// An input's `data` field.
#[derive(Debug, Default)]
pub(crate) enum RawData<'de> {
    #[default]
    Absent,
    /// Decoded while parsing (the datatype was already known and valid).
    Decoded(DataState),
    /// Seen before the datatype; decoded once the datatype is known.
    Buffered(&'de RawValue),
    /// Skipped because the datatype before it is not a V2 datatype.
    Skipped,
}

/// What the parse shares across seeds.
struct Context {
    /// Fixed-size elements that may still be reserved ahead of decoding, for all inputs
    /// together: a JSON element takes at least two bytes of text, so the body can fill
    /// at most this many, whatever the shapes declare.
    reserve_budget: usize,
    /// A cap the request broke; the parse stops at once and this is the answer.
    refused: Option<ProtocolError>,
}

/// Parses the JSON header of a request. `json` must be the whole header: trailing
/// non-whitespace is an error.
pub(crate) fn parse(json: &str) -> Result<RawBody<'_>, ProtocolError> {
    if !json.trim_start().starts_with('{') {
        // Valid JSON of another kind is a wrong-kind error that quotes it; anything else
        // is a JSON error.
        let raw: &RawValue = serde_json::from_str(json).map_err(|e| ProtocolError::json(&e))?;
        return Ok(RawBody::NotObject(raw));
    }
    let mut context = Context {
        reserve_budget: json.len() / 2 + 1,
        refused: None,
    };
    let mut de = serde_json::Deserializer::from_str(json);
    let parsed = BodySeed(&mut context).deserialize(&mut de);
    if let Some(refused) = context.refused {
        return Err(refused);
    }
    let body = parsed.map_err(|e| ProtocolError::json(&e))?;
    de.end().map_err(|e| ProtocolError::json(&e))?;
    Ok(RawBody::Request(body))
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
            Ok($wrap(super::error::render_f64(v)))
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok($wrap(super::error::render_str(v)))
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

/// Consumes any JSON value without keeping it. Unlike serde's `IgnoredAny` (which
/// serde_json skips with no depth limit), it walks arrays and objects itself, so the
/// parser's nesting limit of 128 holds inside unknown fields too.
pub(crate) struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
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

/// What a value of the wrong JSON kind is called in messages.
fn container_name(is_array: bool) -> String {
    String::from(if is_array { "an array" } else { "an object" })
}

const REQUEST_FIELDS: &[&str] = &["id", "parameters", "inputs", "outputs"];

/// The request object.
struct BodySeed<'c>(&'c mut Context);

impl<'de> DeserializeSeed<'de> for BodySeed<'_> {
    type Value = RawRequest<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawRequest<'de>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = RawRequest<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a V2 inference request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRequest<'de>, A::Error> {
        let mut raw = RawRequest::default();
        let mut seen = [false; REQUEST_FIELDS.len()];
        while let Some(key) = map.next_key_seed(Key(REQUEST_FIELDS))? {
            let Some(index) = key else {
                map.next_value_seed(Skip)?;
                continue;
            };
            if !first_sighting(&mut seen, index, REQUEST_FIELDS, &mut raw.duplicate) {
                map.next_value_seed(Skip)?;
                continue;
            }
            match index {
                0 => raw.id = Some(map.next_value()?),
                1 => raw.parameters = Some(map.next_value()?),
                2 => raw.inputs = Some(map.next_value_seed(InputsSeed(&mut *self.0))?),
                _ => raw.outputs = Some(map.next_value()?),
            }
        }
        Ok(raw)
    }
}

/// The `inputs` array.
struct InputsSeed<'c>(&'c mut Context);

impl<'de> DeserializeSeed<'de> for InputsSeed<'_> {
    type Value = RawInputs<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawInputs<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for InputsSeed<'_> {
    type Value = RawInputs<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of inputs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawInputs<'de>, A::Error> {
        let mut list = Vec::new();
        while let Some(input) = seq.next_element_seed(InputSeed(&mut *self.0))? {
            if list.len() == MAX_INPUTS {
                self.0.refused = Some(ProtocolError::TooMany {
                    at: String::from("request"),
                    what: "inputs",
                    limit: MAX_INPUTS,
                });
                return Err(A::Error::custom("too many inputs"));
            }
            list.push(input);
        }
        Ok(RawInputs::List(list))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawInputs<'de>, A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(RawInputs::NotArray(container_name(false)))
    }

    scalars_are_wrong!(RawInputs::NotArray);
}

const INPUT_FIELDS: &[&str] = &["name", "shape", "datatype", "parameters", "data"];

/// One input object.
struct InputSeed<'c>(&'c mut Context);

impl<'de> DeserializeSeed<'de> for InputSeed<'_> {
    type Value = RawInput<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawInput<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl InputSeed<'_> {
    /// How many fixed-size elements to reserve for `data`: the declared count if the
    /// shape came first, capped by what is left of the whole body's budget (which it
    /// then uses up), so all inputs together never reserve more than the body can fill.
    fn reserve(&mut self, shape: Option<&RawValue>) -> usize {
        // A shape longer than any valid one is left for validation to refuse.
        let declared = shape
            .filter(|raw| raw.get().len() <= MAX_DIMS * 24)
            .and_then(|raw| serde_json::from_str::<Vec<u64>>(raw.get()).ok())
            .and_then(|dims| dims.iter().try_fold(1u64, |acc, d| acc.checked_mul(*d)));
        let Some(declared) = declared else {
            return 0;
        };
        let reserve = usize::try_from(declared)
            .unwrap_or(usize::MAX)
            .min(self.0.reserve_budget);
        self.0.reserve_budget -= reserve;
        reserve
    }
}

impl<'de> Visitor<'de> for InputSeed<'_> {
    type Value = RawInput<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an input object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<RawInput<'de>, A::Error> {
        let mut raw = RawFields::default();
        let mut seen = [false; INPUT_FIELDS.len()];
        while let Some(key) = map.next_key_seed(Key(INPUT_FIELDS))? {
            let Some(index) = key else {
                map.next_value_seed(Skip)?;
                continue;
            };
            if !first_sighting(&mut seen, index, INPUT_FIELDS, &mut raw.duplicate) {
                map.next_value_seed(Skip)?;
                continue;
            }
            match index {
                0 => raw.name = Some(map.next_value()?),
                1 => raw.shape = Some(map.next_value()?),
                2 => raw.datatype = Some(map.next_value()?),
                3 => raw.parameters = Some(map.next_value()?),
                _ => {
                    let datatype = raw.datatype.map(|v| known_datatype(v.get()));
                    raw.data = match datatype {
                        Some(Some(datatype)) => {
                            let reserve = self.reserve(raw.shape);
                            let mut state = DataState::new(datatype, reserve);
                            map.next_value_seed(DataSeed(&mut state))?;
                            RawData::Decoded(state)
                        }
                        Some(None) => {
                            map.next_value_seed(Skip)?;
                            RawData::Skipped
                        }
                        None => RawData::Buffered(map.next_value()?),
                    };
                }
            }
        }
        Ok(RawInput::Object(raw))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawInput<'de>, A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(RawInput::NotObject(container_name(true)))
    }

    scalars_are_wrong!(RawInput::NotObject);
}

/// The datatype a raw `datatype` value names, if it is a short string naming a V2 one.
pub(crate) fn known_datatype(raw: &str) -> Option<DataType> {
    if raw.len() > MAX_NAME_BYTES {
        return None;
    }
    let text: Cow<'_, str> = match serde_json::from_str::<&str>(raw) {
        Ok(text) => Cow::Borrowed(text),
        // Escapes in the string: it cannot be borrowed.
        Err(_) => Cow::Owned(serde_json::from_str::<String>(raw).ok()?),
    };
    DataType::parse(&text)
}
