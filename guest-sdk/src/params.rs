//! Reading model parameters (the `[parameters]` table of `model.toml`) by name.

use std::fmt::Display;
use std::str::FromStr;

use crate::Parameter;

/// The parameters passed to `init`, looked up by name and parsed.
///
/// Values arrive as text: numbers and booleans in their TOML spelling (`16`, `0.5`,
/// `true`), strings as they are, arrays and tables as JSON. Errors are `String`s ready to
/// be returned from `init`.
///
/// ```
/// # use tensorplug_guest::{Parameter, Parameters};
/// let params = Parameters::new(vec![Parameter { name: "pixel_max".into(), value: "16".into() }]);
/// let max: f32 = params.parse_or("pixel_max", 255.0)?;
/// let verbose: bool = params.parse_or("verbose", false)?;
/// assert_eq!((max, verbose), (16.0, false));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parameters(Vec<Parameter>);

impl Parameters {
    /// Wraps the list `init` received.
    pub fn new(parameters: Vec<Parameter>) -> Self {
        Parameters(parameters)
    }

    /// The raw text of the parameter `name`, if present (the last one wins if repeated).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().rev().find(|p| p.name == name).map(|p| p.value.as_str())
    }

    /// The parameter `name` parsed as `T`, `Ok(None)` if absent.
    ///
    /// # Errors
    /// A message naming the parameter and its value when the value does not parse.
    pub fn parse<T>(&self, name: &str) -> Result<Option<T>, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.get(name)
            .map(|raw| {
                raw.trim().parse::<T>().map_err(|e| {
                    format!(
                        "parameter '{name}': cannot parse {raw:?} as {}: {e}",
                        short_type_name::<T>()
                    )
                })
            })
            .transpose()
    }

    /// The parameter `name` parsed as `T`, or `default` if absent.
    ///
    /// # Errors
    /// As [`Parameters::parse`].
    pub fn parse_or<T>(&self, name: &str, default: T) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        Ok(self.parse(name)?.unwrap_or(default))
    }

    /// The parameter `name` parsed as `T`, which must be present.
    ///
    /// # Errors
    /// As [`Parameters::parse`], or a message saying the parameter is missing.
    pub fn require<T>(&self, name: &str) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.parse(name)?.ok_or_else(|| format!("missing parameter '{name}'"))
    }

    /// All parameters, in the order received.
    pub fn iter(&self) -> impl Iterator<Item = &Parameter> {
        self.0.iter()
    }
}

impl From<Vec<Parameter>> for Parameters {
    fn from(parameters: Vec<Parameter>) -> Self {
        Parameters(parameters)
    }
}

/// `f32` rather than `core::primitive::f32` in messages meant for model authors.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Parameters {
        pairs
            .iter()
            .map(|(n, v)| Parameter {
                name: n.to_string(),
                value: v.to_string(),
            })
            .collect::<Vec<_>>()
            .into()
    }

    #[test]
    fn parses_present_absent_and_bad_values() {
        let p = params(&[("scale", "2.5"), ("fail_init", "true"), ("n", "x")]);
        assert_eq!(p.get("scale"), Some("2.5"));
        assert_eq!(p.parse::<f32>("scale"), Ok(Some(2.5)));
        assert_eq!(p.parse_or("fail_init", false), Ok(true));
        assert_eq!(p.parse_or("absent", 7u32), Ok(7));
        assert_eq!(p.require::<u32>("absent"), Err("missing parameter 'absent'".into()));
        let err = p.parse::<u32>("n").unwrap_err();
        assert!(err.starts_with("parameter 'n': cannot parse \"x\" as u32"), "{err}");
    }
}
