//! The `parameters` objects of a request, input or output, as typed values.
//!
//! The V2 protocol gives parameter values as booleans, numbers or strings. Arrays and
//! objects (which some clients send for their own bookkeeping) are accepted but not
//! kept: nothing in the server reads them, and keeping them would mean keeping a JSON
//! tree of the client's choosing.

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

    /// Whether any parameter has one of `names`; the first such name.
    pub(crate) fn first_of<'a>(&self, names: &[&'a str]) -> Option<&'a str> {
        names.iter().copied().find(|name| self.get(name).is_some())
    }
}
