//! Metrics on the host's `/metrics`: counters, gauges and histograms that every instance
//! of the model shares.
//!
//! The host exports a metric `name` as `tensorplug_plugin_<name>` (a counter as
//! `tensorplug_plugin_<name>_total`), labelled with the model and version and the labels
//! given here. Names are 1-64 characters of `[a-zA-Z0-9_]` (not starting with a digit or
//! `__`; a counter's not ending in `_total`), a name keeps the kind of its first use (on
//! the whole page, across models) and may not clash with another once the format's
//! suffixes are added, a model may have 32 names with 64 label combinations each, and
//! its metrics may add at most 1 MiB to the page; a call that breaks a rule
//! returns the host's reason and changes nothing. Outside WebAssembly (native unit tests
//! of plugin code) the calls do nothing and succeed.
//!
//! ```no_run
//! use tensorplug_guest::metrics;
//!
//! # fn classify() -> Result<(), String> {
//! metrics::counter_add("predictions", &[("class", "7")], 1.0)?;
//! metrics::gauge_set("last_batch_size", &[], 32.0)?;
//! metrics::histogram_observe("confidence", &[], 0.93)?;
//! # Ok(()) }
//! ```

#[cfg(target_arch = "wasm32")]
use crate::bindings::predictor::tensorplug::plugin::metrics as host;

#[cfg(target_arch = "wasm32")]
fn labels(pairs: &[(&str, &str)]) -> Vec<host::Label> {
    pairs
        .iter()
        .map(|(name, value)| host::Label {
            name: (*name).to_owned(),
            value: (*value).to_owned(),
        })
        .collect()
}

/// Adds `value` (finite, at least 0) to the counter `name` with `labels`.
pub fn counter_add(name: &str, labels: &[(&str, &str)], value: f64) -> Result<(), String> {
    #[cfg(target_arch = "wasm32")]
    return host::counter_add(name, &self::labels(labels), value);
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (name, labels, value);
        Ok(())
    }
}

/// Sets the gauge `name` with `labels` to `value` (finite).
pub fn gauge_set(name: &str, labels: &[(&str, &str)], value: f64) -> Result<(), String> {
    #[cfg(target_arch = "wasm32")]
    return host::gauge_set(name, &self::labels(labels), value);
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (name, labels, value);
        Ok(())
    }
}

/// Records `value` (finite) in the histogram `name` with `labels`; the buckets are
/// 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5 and 10.
pub fn histogram_observe(name: &str, labels: &[(&str, &str)], value: f64) -> Result<(), String> {
    #[cfg(target_arch = "wasm32")]
    return host::histogram_observe(name, &self::labels(labels), value);
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (name, labels, value);
        Ok(())
    }
}
