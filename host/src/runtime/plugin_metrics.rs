//! The metrics a model's plugins keep through the `metrics` interface: validated, bounded
//! and shared by every instance of one model version.
//!
//! The host owns the names and the bounds; a plugin can only add series within them, and a
//! call that breaks a rule is answered with an error that says which (the WIT documents
//! the rules). The serving layer reads the series through [`PluginMetrics::families`] to
//! encode them on `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// Names one model may define.
pub const MAX_NAMES: usize = 32;
/// Label combinations one name may have.
pub const MAX_SERIES_PER_NAME: usize = 64;
/// Labels one series may carry.
pub const MAX_LABELS: usize = 8;
/// Longest metric or label name.
pub const MAX_NAME_BYTES: usize = 64;
/// Longest label value.
pub const MAX_LABEL_VALUE_BYTES: usize = 128;

/// Buckets of every plugin histogram (Prometheus's defaults, in seconds).
pub const HISTOGRAM_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Labels the host adds, or that mean something to Prometheus: a plugin may not use them.
const RESERVED_LABELS: [&str; 4] = ["model", "version", "le", "quantile"];

/// A metric's kind, fixed by its first use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One series' value.
#[derive(Clone, Debug)]
pub enum Series {
    Counter(Counter<f64, AtomicU64>),
    Gauge(Gauge<f64, AtomicU64>),
    Histogram(Histogram),
}

impl Series {
    fn new(kind: Kind) -> Self {
        match kind {
            Kind::Counter => Series::Counter(Counter::default()),
            Kind::Gauge => Series::Gauge(Gauge::default()),
            Kind::Histogram => Series::Histogram(Histogram::new(HISTOGRAM_BUCKETS)),
        }
    }
}

/// A plugin's labels, sorted by name so that their order in a call does not matter.
pub type Labels = Vec<(String, String)>;

/// Every series of one name.
#[derive(Clone, Debug)]
pub struct Family {
    pub kind: Kind,
    pub series: BTreeMap<Labels, Series>,
}

/// What a plugin may ask of the metrics interface.
#[derive(Clone, Copy, Debug)]
pub enum Update {
    CounterAdd(f64),
    GaugeSet(f64),
    HistogramObserve(f64),
}

impl Update {
    fn kind(self) -> Kind {
        match self {
            Update::CounterAdd(_) => Kind::Counter,
            Update::GaugeSet(_) => Kind::Gauge,
            Update::HistogramObserve(_) => Kind::Histogram,
        }
    }

    fn value(self) -> f64 {
        match self {
            Update::CounterAdd(v) | Update::GaugeSet(v) | Update::HistogramObserve(v) => v,
        }
    }
}

/// A model version's plugin metrics.
#[derive(Debug, Default)]
pub struct PluginMetrics {
    families: Mutex<BTreeMap<String, Family>>,
}

impl PluginMetrics {
    /// Applies one update, or says which rule it breaks.
    pub fn update(&self, name: &str, labels: Vec<(String, String)>, update: Update) -> Result<(), String> {
        check_name("metric", name)?;
        let value = update.value();
        if !value.is_finite() {
            return Err(format!("metric '{name}': the value must be finite, not {value}"));
        }
        if let Update::CounterAdd(v) = update {
            if v < 0.0 {
                return Err(format!("counter '{name}': a counter only grows; cannot add {v}"));
            }
            if name.ends_with("_total") {
                return Err(format!(
                    "counter '{name}': leave out the `_total` suffix, the host adds it"
                ));
            }
        }
        let labels = check_labels(name, labels)?;
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let families_len = families.len();
        let family = match families.get_mut(name) {
            Some(family) => family,
            None if families_len >= MAX_NAMES => {
                return Err(format!(
                    "metric '{name}': a model may define at most {MAX_NAMES} metric names"
                ))
            }
            None => families.entry(name.to_owned()).or_insert_with(|| Family {
                kind: update.kind(),
                series: BTreeMap::new(),
            }),
        };
        if family.kind != update.kind() {
            return Err(format!(
                "metric '{name}' is a {}, not a {}",
                family.kind.name(),
                update.kind().name()
            ));
        }
        let series_len = family.series.len();
        let series = match family.series.get(&labels) {
            Some(series) => series,
            None if series_len >= MAX_SERIES_PER_NAME => {
                return Err(format!(
                    "metric '{name}': at most {MAX_SERIES_PER_NAME} label combinations per name"
                ))
            }
            None => family
                .series
                .entry(labels)
                .or_insert_with(|| Series::new(update.kind())),
        };
        match (series, update) {
            (Series::Counter(c), Update::CounterAdd(v)) => {
                c.inc_by(v);
            }
            (Series::Gauge(g), Update::GaugeSet(v)) => {
                g.set(v);
            }
            (Series::Histogram(h), Update::HistogramObserve(v)) => h.observe(v),
            // The kind was checked against the family's above.
            _ => return Err(format!("metric '{name}': kind mismatch")),
        }
        Ok(())
    }

    /// A copy of every family (the series' values are shared, not copied).
    pub fn families(&self) -> BTreeMap<String, Family> {
        self.families.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Metric and label names: what Prometheus accepts, a bounded length, nothing reserved.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    let shown = crate::model::text::clip(name);
    let valid_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let starts_well = name.bytes().next().is_some_and(|b| !b.is_ascii_digit());
    if name.is_empty() || name.len() > MAX_NAME_BYTES || !valid_chars || !starts_well || name.starts_with("__") {
        return Err(format!(
            "'{shown}' is not a valid {what} name: 1-{MAX_NAME_BYTES} characters of [a-zA-Z0-9_], \
             not starting with a digit or `__`"
        ));
    }
    Ok(())
}

fn check_labels(metric: &str, mut labels: Vec<(String, String)>) -> Result<Labels, String> {
    if labels.len() > MAX_LABELS {
        return Err(format!(
            "metric '{metric}': at most {MAX_LABELS} labels per series, not {}",
            labels.len()
        ));
    }
    for (name, value) in &labels {
        check_name("label", name)?;
        if RESERVED_LABELS.contains(&name.as_str()) {
            return Err(format!("metric '{metric}': the label name '{name}' is reserved"));
        }
        if value.len() > MAX_LABEL_VALUE_BYTES {
            return Err(format!(
                "metric '{metric}': label '{name}' has a value of {} bytes; at most {MAX_LABEL_VALUE_BYTES}",
                value.len()
            ));
        }
    }
    labels.sort();
    if labels.windows(2).any(|pair| pair[0].0 == pair[1].0) {
        return Err(format!("metric '{metric}': a label name appears twice"));
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    #[test]
    fn series_are_created_once_and_shared_in_any_label_order() {
        let m = PluginMetrics::default();
        m.update("hits", labels(&[("a", "1"), ("b", "2")]), Update::CounterAdd(1.0))
            .unwrap();
        m.update("hits", labels(&[("b", "2"), ("a", "1")]), Update::CounterAdd(2.0))
            .unwrap();
        let families = m.families();
        let family = &families["hits"];
        assert_eq!(family.series.len(), 1);
        let Series::Counter(c) = family.series.values().next().unwrap() else {
            panic!("a counter")
        };
        assert_eq!(c.get(), 3.0);
    }

    #[test]
    fn every_rule_is_enforced_with_a_message() {
        let m = PluginMetrics::default();
        let refused = |name: &str, l: &[(&str, &str)], u: Update| m.update(name, labels(l), u).unwrap_err();
        assert!(refused("", &[], Update::GaugeSet(1.0)).contains("not a valid metric name"));
        assert!(refused("9lives", &[], Update::GaugeSet(1.0)).contains("not a valid"));
        assert!(refused("a-b", &[], Update::GaugeSet(1.0)).contains("not a valid"));
        assert!(refused("__x", &[], Update::GaugeSet(1.0)).contains("not a valid"));
        assert!(refused(&"x".repeat(65), &[], Update::GaugeSet(1.0)).contains("not a valid"));
        assert!(refused("x", &[], Update::GaugeSet(f64::NAN)).contains("finite"));
        assert!(refused("x", &[], Update::CounterAdd(-1.0)).contains("only grows"));
        assert!(refused("x_total", &[], Update::CounterAdd(1.0)).contains("_total"));
        assert!(refused("x", &[("model", "m")], Update::GaugeSet(1.0)).contains("reserved"));
        assert!(refused("x", &[("a", "1"), ("a", "2")], Update::GaugeSet(1.0)).contains("twice"));
        assert!(refused("x", &[("bad label", "1")], Update::GaugeSet(1.0)).contains("label name"));
        let long = "v".repeat(129);
        assert!(refused("x", &[("a", &long)], Update::GaugeSet(1.0)).contains("129 bytes"));
        let many: Vec<(String, String)> = (0..9).map(|i| (format!("l{i}"), "v".into())).collect();
        assert!(m
            .update("x", many, Update::GaugeSet(1.0))
            .unwrap_err()
            .contains("at most 8"));
        m.update("g", vec![], Update::GaugeSet(1.0)).unwrap();
        assert!(refused("g", &[], Update::CounterAdd(1.0)).contains("is a gauge, not a counter"));
        assert!(m.families().len() == 1, "nothing refused was created");
    }

    #[test]
    fn names_and_series_are_bounded() {
        let m = PluginMetrics::default();
        for i in 0..MAX_NAMES {
            m.update(&format!("m{i}"), vec![], Update::GaugeSet(1.0)).unwrap();
        }
        let error = m.update("one_more", vec![], Update::GaugeSet(1.0)).unwrap_err();
        assert!(error.contains("at most 32 metric names"), "{error}");
        for i in 0..MAX_SERIES_PER_NAME - 1 {
            m.update("m0", labels(&[("i", &i.to_string())]), Update::GaugeSet(1.0))
                .unwrap();
        }
        // The unlabelled series of m0 exists too: 65 would be one too many.
        let error = m
            .update("m0", labels(&[("i", "new")]), Update::GaugeSet(1.0))
            .unwrap_err();
        assert!(error.contains("at most 64 label combinations"), "{error}");
        // Existing series still update.
        m.update("m0", labels(&[("i", "3")]), Update::GaugeSet(5.0)).unwrap();
    }
}
