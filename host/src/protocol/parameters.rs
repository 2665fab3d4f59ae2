//! The `parameters` objects of a request, input or output, as typed values.
//!
//! The V2 protocol gives parameter values as booleans, numbers or strings. Arrays and
//! objects (which some clients send for their own bookkeeping) are accepted but not
//! kept: nothing in the server reads them, and keeping them would mean keeping a JSON
//! tree of the client's choosing.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Number;

/// One parameter's value.
#[derive(Clone, Debug, PartialEq)]
pub enum ParameterValue {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    /// An array or object: accepted, not kept.
    Structured,
}

/// A `parameters` object, in the order the client sent it, with unique names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parameters(pub(crate) Vec<(String, ParameterValue)>);

impl Parameters {
    /// The value of parameter `name`, if present.
    pub fn get(&self, name: &str) -> Option<&ParameterValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Sets parameter `name` to `value`, in place if it is already there, else at the end.
    pub fn set(&mut self, name: &str, value: ParameterValue) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((name.to_owned(), value)),
        }
    }

    /// Removes parameter `name`, if present.
    pub fn remove(&mut self, name: &str) {
        self.0.retain(|(n, _)| n != name);
    }

    /// The parameters, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ParameterValue)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Whether any parameter has one of `names`; the first such name.
    pub(crate) fn first_of<'a>(&self, names: &[&'a str]) -> Option<&'a str> {
        names.iter().copied().find(|name| self.get(name).is_some())
    }
}

impl FromIterator<(String, ParameterValue)> for Parameters {
    /// Parameters in the given order; a later value of a name replaces an earlier one.
    fn from_iter<I: IntoIterator<Item = (String, ParameterValue)>>(iter: I) -> Self {
        let mut parameters = Parameters::default();
        for (name, value) in iter {
            parameters.set(&name, value);
        }
        parameters
    }
}

/// A `parameters` object as JSON. Structured values were not kept, so they are left out.
impl Serialize for Parameters {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let kept = || self.0.iter().filter(|(_, v)| !matches!(v, ParameterValue::Structured));
        let mut map = serializer.serialize_map(Some(kept().count()))?;
        for (name, value) in kept() {
            match value {
                ParameterValue::Null | ParameterValue::Structured => map.serialize_entry(name, &())?,
                ParameterValue::Bool(b) => map.serialize_entry(name, b)?,
                ParameterValue::Number(n) => map.serialize_entry(name, n)?,
                ParameterValue::String(s) => map.serialize_entry(name, s)?,
            }
        }
        map.end()
    }
}
