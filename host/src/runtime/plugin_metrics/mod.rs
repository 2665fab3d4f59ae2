//! The metrics a model's plugins keep through the `metrics` interface: validated, bounded
//! and shared by every instance of one model version.
//!
//! The host owns the names and the bounds; a plugin can only add series within them, and a
//! call that breaks a rule is answered with an error that says which (the WIT documents
//! the rules) and counted by rule. Besides the counts (names, series, labels), what a
//! model's metrics may add to `/metrics` is bounded in bytes, per model version and for
//! all models together ([`page`]); a series' bytes are counted once, when it is created
//! ([`cost`]). Names are claimed on the server-wide page so that no two families clash
//! there. The serving layer reads the series through [`PluginMetrics::families`] to
//! encode them on `/metrics`.

mod cost;
pub mod page;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

pub use page::{PageLimits, PluginPage};

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

/// The host's counter of refused updates, `tensorplug_plugin_metrics_refused_total`
/// (its name after [`page::PREFIX`]).
pub const REFUSED_FAMILY: &str = "metrics_refused";

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

/// The rule an update broke, as `tensorplug_plugin_metrics_refused_total` labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    InvalidName,
    InvalidValue,
    InvalidLabels,
    Kind,
    NameClash,
    MaxNames,
    MaxSeries,
    BytesPerModel,
    BytesTotal,
}

impl Rule {
    pub const ALL: [Rule; 9] = [
        Rule::InvalidName,
        Rule::InvalidValue,
        Rule::InvalidLabels,
        Rule::Kind,
        Rule::NameClash,
        Rule::MaxNames,
        Rule::MaxSeries,
        Rule::BytesPerModel,
        Rule::BytesTotal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Rule::InvalidName => "invalid_name",
            Rule::InvalidValue => "invalid_value",
            Rule::InvalidLabels => "invalid_labels",
            Rule::Kind => "kind",
            Rule::NameClash => "name_clash",
            Rule::MaxNames => "max_names",
            Rule::MaxSeries => "max_series_per_name",
            Rule::BytesPerModel => "plugin_metrics_bytes_per_model",
            Rule::BytesTotal => "plugin_metrics_bytes_total",
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

/// A plugin's labels, sorted by name so that their order in a call does not matter;
/// shared, so that a scrape's copy of the families copies no label.
pub type Labels = Arc<[(String, String)]>;

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

/// A refusal: the rule and the message the plugin gets.
type Refusal = (Rule, String);

#[derive(Debug, Default)]
struct State {
    families: BTreeMap<String, Family>,
    /// Bytes of the page the series and families take (an upper bound).
    bytes: usize,
}

/// A model version's plugin metrics.
#[derive(Debug)]
pub struct PluginMetrics {
    page: Arc<PluginPage>,
    /// The bytes of the labels the host adds to each series (`model`, `version`).
    host_label_bytes: usize,
    state: Mutex<State>,
    refused: [AtomicU64; Rule::ALL.len()],
}

impl Default for PluginMetrics {
    /// Metrics on a page of their own, for a model without a name (tests, `check`).
    fn default() -> Self {
        Self::new(Arc::default(), "", "")
    }
}

impl Drop for PluginMetrics {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for name in state.families.keys() {
            self.page.release(name);
        }
        self.page.unreserve(state.bytes);
    }
}

impl PluginMetrics {
    /// The metrics of the version `version` of `model`, on the server's `page`.
    pub fn new(page: Arc<PluginPage>, model: &str, version: &str) -> Self {
        Self {
            page,
            host_label_bytes: cost::host_label_bytes(model, version),
            state: Mutex::default(),
            refused: Default::default(),
        }
    }

    /// Applies one update, or says which rule it breaks (and counts the refusal).
    pub fn update(&self, name: &str, labels: Vec<(String, String)>, update: Update) -> Result<(), String> {
        self.apply(name, labels, update).map_err(|(rule, message)| {
            self.refused[rule as usize].fetch_add(1, Ordering::Relaxed);
            message
        })
    }

    fn apply(&self, name: &str, labels: Vec<(String, String)>, update: Update) -> Result<(), Refusal> {
        check_name("metric", name).map_err(|m| (Rule::InvalidName, m))?;
        let value = update.value();
        if !value.is_finite() {
            return Err((
                Rule::InvalidValue,
                format!("metric '{name}': the value must be finite, not {value}"),
            ));
        }
        if let Update::CounterAdd(v) = update {
            if v < 0.0 {
                return Err((
                    Rule::InvalidValue,
                    format!("counter '{name}': a counter only grows; cannot add {v}"),
                ));
            }
            if name.ends_with("_total") {
                return Err((
                    Rule::InvalidName,
                    format!("counter '{name}': leave out the `_total` suffix, the host adds it"),
                ));
            }
        }
        let labels = check_labels(name, labels).map_err(|m| (Rule::InvalidLabels, m))?;
        let mut state = crate::sync::lock(&self.state);
        let state = &mut *state;
        match state.families.get(name) {
            Some(family) if family.kind != update.kind() => {
                return Err((
                    Rule::Kind,
                    format!(
                        "metric '{name}' is a {}, not a {}",
                        family.kind.name(),
                        update.kind().name()
                    ),
                ))
            }
            Some(family) => {
                if let Some(series) = family.series.get(labels.as_slice()) {
                    // A counter that reached infinity would be written `inf`, which the
                    // text format does not spell so.
                    if let (Series::Counter(c), Update::CounterAdd(v)) = (series, update) {
                        if !(c.get() + v).is_finite() {
                            return Err((
                                Rule::InvalidValue,
                                format!("counter '{name}': adding {v} would make it infinite"),
                            ));
                        }
                    }
                    apply(series, update);
                    return Ok(());
                }
                if family.series.len() >= MAX_SERIES_PER_NAME {
                    return Err((
                        Rule::MaxSeries,
                        format!("metric '{name}': at most {MAX_SERIES_PER_NAME} label combinations per name"),
                    ));
                }
            }
            None if state.families.len() >= MAX_NAMES => {
                return Err((
                    Rule::MaxNames,
                    format!("metric '{name}': a model may define at most {MAX_NAMES} metric names"),
                ))
            }
            None => {}
        }
        // A new series, perhaps of a new family: its bytes first, then its name.
        let new_family = !state.families.contains_key(name);
        let bytes = cost::series_bytes(name, update.kind(), self.host_label_bytes, &labels)
            + if new_family { cost::family_bytes(name) } else { 0 };
        let per_model = self.page.limits.bytes_per_model;
        if state.bytes + bytes > per_model {
            return Err((
                Rule::BytesPerModel,
                format!(
                    "metric '{name}': the plugin metrics of this model version would take more than                      {per_model} bytes of /metrics (plugin_metrics_bytes_per_model; {} taken, this series                      needs {bytes})",
                    state.bytes
                ),
            ));
        }
        self.page
            .reserve(bytes)
            .map_err(|m| (Rule::BytesTotal, format!("metric '{name}': {m}")))?;
        if new_family {
            if let Err(message) = self.page.claim(name, update.kind()) {
                self.page.unreserve(bytes);
                return Err((Rule::NameClash, message));
            }
        }
        state.bytes += bytes;
        let family = state.families.entry(name.to_owned()).or_insert_with(|| Family {
            kind: update.kind(),
            series: BTreeMap::new(),
        });
        let series = Series::new(update.kind());
        apply(&series, update);
        family.series.insert(labels.into(), series);
        Ok(())
    }

    /// A copy of every family (the labels and the series' values are shared, not copied).
    pub fn families(&self) -> BTreeMap<String, Family> {
        crate::sync::lock(&self.state).families.clone()
    }

    /// Bytes of the page this version's metrics may take (an upper bound of what they do).
    pub fn bytes(&self) -> usize {
        crate::sync::lock(&self.state).bytes
    }

    /// Updates refused so far, by rule (the rules that refused none left out).
    pub fn refused(&self) -> impl Iterator<Item = (Rule, u64)> + '_ {
        Rule::ALL
            .into_iter()
            .map(|rule| (rule, self.refused[rule as usize].load(Ordering::Relaxed)))
            .filter(|(_, count)| *count > 0)
    }
}

/// Applies `update` to `series`, which is of the update's kind.
fn apply(series: &Series, update: Update) {
    match (series, update) {
        (Series::Counter(c), Update::CounterAdd(v)) => {
            c.inc_by(v);
        }
        (Series::Gauge(g), Update::GaugeSet(v)) => {
            g.set(v);
        }
        (Series::Histogram(h), Update::HistogramObserve(v)) => h.observe(v),
        // Kinds are checked against the family's before.
        _ => {}
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

fn check_labels(metric: &str, mut labels: Vec<(String, String)>) -> Result<Vec<(String, String)>, String> {
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
        if let Err(reason) = crate::model::openmetrics::check_label_value(value) {
            return Err(format!("metric '{metric}': the value of label '{name}' {reason}"));
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
        m.update("big", vec![], Update::CounterAdd(f64::MAX)).unwrap();
        assert!(refused("big", &[], Update::CounterAdd(f64::MAX)).contains("infinite"));
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
        assert!(m.families().len() == 2, "nothing refused was created");
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

    fn small_page(bytes_per_model: usize, bytes_total: usize) -> Arc<PluginPage> {
        Arc::new(PluginPage::new(PageLimits {
            bytes_per_model,
            bytes_total,
        }))
    }

    #[test]
    fn bytes_are_capped_per_model_and_in_total_and_named_in_the_refusal() {
        let page = small_page(4000, 6000);
        let a = PluginMetrics::new(page.clone(), "a", "1");
        let mut created = 0;
        let error = loop {
            match a.update("g", labels(&[("i", &created.to_string())]), Update::GaugeSet(1.0)) {
                Ok(()) => created += 1,
                Err(error) => break error,
            }
        };
        assert!(
            error.contains("plugin_metrics_bytes_per_model") && error.contains("4000"),
            "{error}"
        );
        assert!(created > 10, "{created} series fit in 4000 bytes");
        assert!(a.bytes() <= 4000);
        // Updates of existing series cost nothing more.
        a.update("g", labels(&[("i", "0")]), Update::GaugeSet(2.0)).unwrap();
        let b = PluginMetrics::new(page.clone(), "b", "1");
        let error = loop {
            if let Err(error) = b.update("h", labels(&[("i", &created.to_string())]), Update::GaugeSet(1.0)) {
                break error;
            }
            created += 1;
        };
        assert!(
            error.contains("plugin_metrics_bytes_total") && error.contains("6000"),
            "{error}"
        );
        let refused: Vec<_> = a
            .refused()
            .chain(b.refused())
            .map(|(rule, n)| (rule.name(), n))
            .collect();
        assert_eq!(
            refused,
            [("plugin_metrics_bytes_per_model", 1), ("plugin_metrics_bytes_total", 1)]
        );
        drop(a);
        drop(b);
        assert_eq!(page.bytes(), 0, "dropped versions give their bytes back");
    }

    #[test]
    fn names_clash_across_the_page_and_are_freed_with_their_version() {
        let page = Arc::new(PluginPage::default());
        let a = PluginMetrics::new(page.clone(), "a", "1");
        let b = PluginMetrics::new(page.clone(), "b", "1");
        a.update("x", vec![], Update::CounterAdd(1.0)).unwrap();
        a.update("y", vec![], Update::HistogramObserve(1.0)).unwrap();
        let error = a.update("x_total", vec![], Update::GaugeSet(1.0)).unwrap_err();
        assert!(error.contains("tensorplug_plugin_x_total"), "{error}");
        assert!(a.update("y_bucket", vec![], Update::GaugeSet(1.0)).is_err());
        assert!(b.update("y_count", vec![], Update::GaugeSet(1.0)).is_err());
        let error = b.update("x", vec![], Update::GaugeSet(1.0)).unwrap_err();
        assert!(error.contains("is a counter on this server"), "{error}");
        b.update("x", vec![], Update::CounterAdd(1.0)).unwrap();
        assert!(b.update("metrics_refused", vec![], Update::CounterAdd(1.0)).is_err());
        assert_eq!(b.families().len(), 1, "nothing refused was created");
        let refused: Vec<_> = b.refused().map(|(rule, n)| (rule.name(), n)).collect();
        assert_eq!(refused, [("name_clash", 3)]);
        drop(a);
        // b still holds `x` as a counter; `y` is free now.
        b.update("y_count", vec![], Update::GaugeSet(1.0)).unwrap();
        assert!(b.update("x_total", vec![], Update::GaugeSet(1.0)).is_err());
    }
}
