//! The models' metrics on `/metrics`: a prometheus-client collector that, at each scrape,
//! encodes every live model version's counters, histograms, queue depth and its
//! plugins' own metrics, labelled `model` and `version`.
//!
//! Collected from the repository at scrape time rather than registered per model, so a
//! version's series appear when it is ready and disappear with it (unload, or a reload
//! that replaces it) with nothing to unregister.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::stats::{Histograms, ModelStats, StatsSnapshot};
use super::{Model, ModelState, Repository};
use crate::model::openmetrics::{Escaped, EscapedLabels};
use crate::model::StageKind;
use crate::runtime::plugin_metrics::page::PREFIX;
use crate::runtime::plugin_metrics::{Family, Kind, PluginMetrics, Series, REFUSED_FAMILY};

/// Registers the repository's metrics (models, their plugins, loads) in `registry`.
pub fn register(registry: &mut Registry, repository: &Arc<Repository>) {
    registry.register(
        "tensorplug_model_loads",
        "Model loads (no version was serving) and reloads (one was), by outcome",
        repository.loads.clone(),
    );
    let residency = &repository.residency;
    registry.register(
        "tensorplug_residency_loads",
        "Model loads by what made them (startup, request: its first request on demand, api, reload), whether a stage had to compile, and outcome",
        residency.loads.clone(),
    );
    registry.register(
        "tensorplug_residency_evictions",
        "Models sent back to standby, by cause (budget: room for another model; idle: unused past --idle-unload-secs; api: unloaded)",
        residency.evictions.clone(),
    );
    registry.register(
        "tensorplug_residency_budget_waits",
        "On-demand loads that had to wait for room under the memory budget",
        residency.budget_waits.clone(),
    );
    registry.register(
        "tensorplug_residency_unavailable",
        "Requests answered 503 because their model could not be made resident within their deadline",
        residency.unavailable.clone(),
    );
    registry.register(
        "tensorplug_cold_start_seconds",
        "Requests that found their model on standby: arrival to answer (total), split into waiting (for its turn among the loads, for room, or another change of the model), loading and serving",
        residency.cold_starts.clone(),
    );
    registry.register_collector(Box::new(ModelsCollector {
        repository: repository.clone(),
    }));
    registry.register_collector(Box::new(super::files_metrics::SpecialFilesCollector));
    registry.register_collector(Box::new(crate::runtime::nn::counters::NnCollector));
}

struct ModelsCollector {
    repository: Arc<Repository>,
}

impl std::fmt::Debug for ModelsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelsCollector")
    }
}

/// The labels every series of a model version carries.
type ModelLabels<'a> = [(&'static str, Escaped<&'a str>); 2];

fn model_labels(model: &Model) -> ModelLabels<'_> {
    [
        ("model", Escaped(model.config.name.as_str())),
        ("version", Escaped(model.config.version.as_str())),
    ]
}

/// A counter read from a version's counters.
struct CounterFamily {
    name: &'static str,
    help: &'static str,
    read: fn(&StatsSnapshot) -> u64,
}

const COUNTERS: [CounterFamily; 10] = [
    CounterFamily {
        name: "tensorplug_items_succeeded",
        help: "Items answered with their outputs",
        read: |s| s.items_ok,
    },
    CounterFamily {
        name: "tensorplug_items_failed",
        help: "Items answered with an error (plugin error, trap, contract violation, time limit)",
        read: |s| s.items_failed,
    },
    CounterFamily {
        name: "tensorplug_items_abandoned",
        help: "Items dropped before running because their client had gone or their deadline had passed",
        read: |s| s.items_abandoned,
    },
    CounterFamily {
        name: "tensorplug_items",
        help: "Items run through the pipeline",
        read: |s| s.items,
    },
    CounterFamily {
        name: "tensorplug_batches",
        help: "Batches run through the pipeline",
        read: |s| s.batches,
    },
    CounterFamily {
        name: "tensorplug_traps",
        help: "Plugin calls that trapped",
        read: |s| s.traps,
    },
    CounterFamily {
        name: "tensorplug_instance_replacements",
        help: "Stage instances replaced: after a trap, or to give back the memory a call grew far past the instance's start (or pipelines rebuilt after a host panic)",
        read: |s| s.replacements,
    },
    CounterFamily {
        name: "tensorplug_timeouts",
        help: "Items answered 504: a stage's time limit, or the request's deadline",
        read: |s| s.timeouts,
    },
    CounterFamily {
        name: "tensorplug_ragged_elements",
        help: "Elements of ragged tensors (batching.pad) predict was given: the items' own",
        read: |s| s.ragged_elements,
    },
    CounterFamily {
        name: "tensorplug_padding_elements",
        help: "Elements of ragged tensors (batching.pad) predict was given: padding added to stack them",
        read: |s| s.padding_elements,
    },
];

/// One label beyond `model` and `version`, if any.
type ExtraLabel = Option<(&'static str, &'static str)>;

/// A histogram of every version.
struct HistogramFamily {
    name: &'static str,
    help: &'static str,
    /// Extra labels and the histogram, for each series of one version.
    series: for<'a> fn(&'a ModelStats, &'a Histograms) -> Vec<HistogramSeries<'a>>,
}

/// One histogram series of a version: its extra label and the histogram.
type HistogramSeries<'a> = (ExtraLabel, &'a dyn EncodeMetric);

/// A gauge of every version: name, help, and how to read it.
type GaugeFamily = (&'static str, &'static str, fn(&Model, &StatsSnapshot) -> i64);

const HISTOGRAMS: [HistogramFamily; 4] = [
    HistogramFamily {
        name: "tensorplug_queue_wait_seconds",
        help: "Time items waited in the queue before their batch was dispatched",
        series: |_, h| vec![(None, &h.queue_wait)],
    },
    HistogramFamily {
        name: "tensorplug_batch_size",
        help: "Items per batch run through the pipeline",
        series: |_, h| vec![(None, &h.batch_size)],
    },
    HistogramFamily {
        name: "tensorplug_stage_seconds",
        help: "Time each stage took per batch (instance replacements and trap bisection included)",
        series: |_, h| {
            [StageKind::Preprocess, StageKind::Predict, StageKind::Postprocess]
                .into_iter()
                .zip(&h.stage)
                .map(|(kind, histogram)| (Some(("stage", kind.name())), histogram as &dyn EncodeMetric))
                .collect()
        },
    },
    HistogramFamily {
        name: "tensorplug_request_duration_seconds",
        help: "Time from a request's arrival to its answer, by protocol",
        series: |stats, _| {
            stats
                .edges()
                .filter_map(|(edge, histogram)| Some((Some(("protocol", edge.name)), histogram? as &dyn EncodeMetric)))
                .collect()
        },
    },
];

/// A gauge of bytes (past `i64::MAX`, that).
fn encode_bytes(encoder: &mut DescriptorEncoder, name: &str, help: &str, bytes: u64) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(i64::try_from(bytes).unwrap_or(i64::MAX)).encode(metric)
}

impl Collector for ModelsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let index = self.repository.index();
        let models: Vec<(&str, &Arc<Model>)> = index
            .iter()
            .filter_map(|(name, entry)| entry.status.model().map(|model| (name.as_str(), model)))
            .collect();
        let snapshots: Vec<(ModelLabels<'_>, StatsSnapshot)> = models
            .iter()
            .map(|(_, model)| (model_labels(model), model.stats.snapshot()))
            .collect();

        for family in &COUNTERS {
            let mut metric = encoder.encode_descriptor(family.name, family.help, None, MetricType::Counter)?;
            for (labels, snapshot) in &snapshots {
                ConstCounter::new((family.read)(snapshot)).encode(metric.encode_family(labels)?)?;
            }
        }

        let mut metric = encoder.encode_descriptor(
            "tensorplug_requests",
            "Inference requests answered, by protocol and status (REST: the HTTP status; gRPC: the status code)",
            None,
            MetricType::Counter,
        )?;
        for ((_, model), (labels, _)) in models.iter().zip(&snapshots) {
            for (edge, status, count) in model.stats.requests() {
                let extra = [("protocol", Escaped(edge)), ("status", Escaped(&*status))];
                ConstCounter::new(count).encode(metric.encode_family(&(*labels, extra))?)?;
            }
        }

        for family in &HISTOGRAMS {
            let mut metric = encoder.encode_descriptor(family.name, family.help, None, MetricType::Histogram)?;
            for ((_, model), (labels, _)) in models.iter().zip(&snapshots) {
                let Some(histograms) = model.stats.histograms() else {
                    continue;
                };
                for (extra, histogram) in (family.series)(&model.stats, histograms) {
                    let extra: Vec<_> = extra.into_iter().map(|(name, value)| (name, Escaped(value))).collect();
                    histogram.encode(metric.encode_family(&(*labels, extra))?)?;
                }
            }
        }

        // The same histograms over every model together: what a page keeps however many
        // models there are (a model's own are opt-in under on-demand residency).
        if let Some(histograms) = self.repository.server_stats().and_then(|s| Some((s, s.histograms()?))) {
            let (server, histograms) = histograms;
            for family in &HISTOGRAMS {
                let name = family.name.replacen("tensorplug_", "tensorplug_all_models_", 1);
                let help = format!("{}, every model together", family.help);
                let mut metric = encoder.encode_descriptor(&name, &help, None, MetricType::Histogram)?;
                for (extra, histogram) in (family.series)(server, histograms) {
                    let extra: Vec<_> = extra.into_iter().map(|(name, value)| (name, Escaped(value))).collect();
                    histogram.encode(metric.encode_family(&extra)?)?;
                }
            }
        }

        let gauges: [GaugeFamily; 5] = [
            (
                "tensorplug_model_memory_bytes",
                "What the model version holds, measured: its instances' linear memories and tables, its share of its stages' compiled code, its graphs (what the memory budget counts)",
                |model, _| i64::try_from(model.held_bytes()).unwrap_or(i64::MAX),
            ),
            (
                "tensorplug_queue_depth",
                "Items waiting in the model's queue",
                |model, _| i64::try_from(model.queue_depth()).unwrap_or(i64::MAX),
            ),
            (
                "tensorplug_instances_live",
                "Pipeline instances whose every stage is live",
                |_, s| i64::try_from(s.instances_live).unwrap_or(i64::MAX),
            ),
            (
                "tensorplug_instances",
                "Pipeline instances configured (limits.instances)",
                |model, _| i64::try_from(model.config.limits.instances).unwrap_or(i64::MAX),
            ),
            (
                "tensorplug_graph_bytes",
                "Host memory held by the model's wasi:nn graphs once loaded (their plans' constants; capped by limits.graph_memory_mib)",
                |model, _| i64::try_from(model.shared.graphs.bytes()).unwrap_or(i64::MAX),
            ),
        ];
        for (name, help, read) in gauges {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for ((_, model), (labels, snapshot)) in models.iter().zip(&snapshots) {
                ConstGauge::new(read(model, snapshot)).encode(metric.encode_family(labels)?)?;
            }
        }

        let mut metric = encoder.encode_descriptor(
            "tensorplug_model_compile_seconds",
            "How long compiling each stage of the version took at its load (a compile cache hit included; see the load log's `cached`)",
            None,
            MetricType::Gauge,
        )?;
        for ((_, model), (labels, _)) in models.iter().zip(&snapshots) {
            for (stage, compiled) in model.shared.compiles.get().into_iter().flatten() {
                let extra = [("stage", Escaped(*stage))];
                ConstGauge::new(compiled.took.as_secs_f64()).encode(metric.encode_family(&(*labels, extra))?)?;
            }
        }

        let mut metric = encoder.encode_descriptor(
            "tensorplug_graph_load_seconds",
            "How long loading each wasi:nn graph of the version took (read, analysed, planned, its first ONNX Runtime session)",
            None,
            MetricType::Gauge,
        )?;
        for ((_, model), (labels, _)) in models.iter().zip(&snapshots) {
            for (graph, took) in model.shared.graphs.load_times() {
                let extra = [("graph", Escaped(graph.as_str()))];
                ConstGauge::new(took.as_secs_f64()).encode(metric.encode_family(&(*labels, extra))?)?;
            }
        }

        let mut metric = encoder.encode_descriptor(
            "tensorplug_metadata_changes_ignored",
            "Inits that declared other metadata than their stage's first init of this version (ignored: metadata is fixed per version)",
            None,
            MetricType::Counter,
        )?;
        for ((_, model), (labels, _)) in models.iter().zip(&snapshots) {
            ConstCounter::new(model.shared.metadata_changes_ignored()).encode(metric.encode_family(labels)?)?;
        }

        let mut metric = encoder.encode_descriptor(
            "tensorplug_model_ready",
            "Whether a model serves a version (1) or not (0: loading, failed, unloaded, or draining)",
            None,
            MetricType::Gauge,
        )?;
        let draining = self.repository.is_draining();
        // Models on standby have no series: a node may know thousands (`tensorplug_models`
        // counts them).
        for (name, entry) in index.iter().filter(|(_, e)| e.status.state() != ModelState::Standby) {
            let ready = i64::from(!draining && entry.status.model().is_some());
            ConstGauge::new(ready).encode(metric.encode_family(&[("model", Escaped(name.as_str()))])?)?;
        }

        let mut metric = encoder.encode_descriptor(
            "tensorplug_models",
            "Models the repository knows, by state (ready: resident; standby: indexed, loaded by its next request; loading; unavailable: failed or unloaded)",
            None,
            MetricType::Gauge,
        )?;
        let mut states: BTreeMap<&'static str, i64> = ["ready", "standby", "loading", "unavailable"]
            .into_iter()
            .map(|state| (state, 0))
            .collect();
        // As the repository index says: a model on standby that a request is loading is
        // loading.
        let loads = self.repository.loads_on_demand();
        for (name, entry) in &index {
            let state = match entry.status.state() {
                ModelState::Ready => "ready",
                ModelState::Standby if loads.contains_key(name) => "loading",
                ModelState::Standby => "standby",
                ModelState::Loading => "loading",
                ModelState::Unavailable => "unavailable",
            };
            *states.entry(state).or_default() += 1;
        }
        for (state, count) in states {
            ConstGauge::new(count).encode(metric.encode_family(&[("state", state)])?)?;
        }

        let resident: u64 = models.iter().map(|(_, model)| model.held_bytes()).sum();
        encode_bytes(
            &mut encoder,
            "tensorplug_resident_memory_bytes",
            "What the resident models hold together, measured (the sum of tensorplug_model_memory_bytes)",
            resident,
        )?;
        // Beside what is resident, what else the budget counts: why a budget can be full
        // while the resident models hold less.
        encode_bytes(
            &mut encoder,
            "tensorplug_reserved_memory_bytes",
            "What loads under way have reserved against the budget until their models are measured",
            self.repository.reservations.reserved(),
        )?;
        encode_bytes(
            &mut encoder,
            "tensorplug_releasing_memory_bytes",
            "What evicted models still hold until a loader thread has dropped them",
            self.repository.releases.bytes(),
        )?;
        if let Some(budget) = self.repository.policy().budget_bytes {
            encode_bytes(
                &mut encoder,
                "tensorplug_memory_budget_bytes",
                "What resident models may hold together (--memory-budget-mib)",
                budget,
            )?;
        }

        let metric = encoder.encode_descriptor(
            "tensorplug_compiled_components",
            "Distinct compiled components the loaded stages hold: stages whose files have the same bytes share one (its code and memory images)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.repository.components_held() as i64).encode(metric)?;

        let plugins: Vec<_> = models
            .iter()
            .map(|(_, model)| (model_labels(model), &model.shared.metrics))
            .collect();
        encode_plugin_metrics(&mut encoder, &plugins)
    }
}

/// The plugins' own metrics, `tensorplug_plugin_<name>`, grouped by name across models,
/// and the host's count of the updates it refused them. The server-wide name claims
/// (`runtime::plugin_metrics::page`) keep one kind per name and no two names that clash,
/// so every model's series of a name fit in one family.
fn encode_plugin_metrics(
    encoder: &mut DescriptorEncoder,
    models: &[(ModelLabels<'_>, &PluginMetrics)],
) -> Result<(), std::fmt::Error> {
    let refused_name = format!("{PREFIX}{REFUSED_FAMILY}");
    let mut metric = encoder.encode_descriptor(
        &refused_name,
        "Plugin metric updates refused, by the rule they broke (a name, a value, a label, a clash, a cap)",
        None,
        MetricType::Counter,
    )?;
    for (labels, metrics) in models {
        for (rule, count) in metrics.refused() {
            let rule = [("rule", Escaped(rule.name()))];
            ConstCounter::new(count).encode(metric.encode_family(&(*labels, rule))?)?;
        }
    }

    let mut by_name: BTreeMap<String, Vec<(ModelLabels<'_>, Family)>> = BTreeMap::new();
    for (labels, metrics) in models {
        for (name, family) in metrics.families() {
            by_name.entry(name).or_default().push((*labels, family));
        }
    }
    for (name, families) in by_name {
        let Some(kind) = families.first().map(|(_, family)| family.kind) else {
            continue;
        };
        let metric_type = match kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        };
        let full_name = format!("{PREFIX}{name}");
        let mut metric = encoder.encode_descriptor(&full_name, "Defined by the model's plugins", None, metric_type)?;
        // The claims rule out another kind; should one slip through, it is left out rather
        // than written into a family of the wrong type.
        for (labels, family) in families.iter().filter(|(_, family)| family.kind == kind) {
            for (plugin_labels, series) in &family.series {
                let all_labels = (*labels, EscapedLabels(plugin_labels));
                let encoder = metric.encode_family(&all_labels)?;
                match series {
                    Series::Counter(counter) => counter.encode(encoder)?,
                    Series::Gauge(gauge) => gauge.encode(encoder)?,
                    Series::Histogram(histogram) => histogram.encode(encoder)?,
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::plugin_metrics::{PluginPage, Update};

    /// Model versions (name, version) and their plugin metrics.
    #[derive(Debug)]
    struct Plugins(Vec<(String, String, Arc<PluginMetrics>)>);

    impl Collector for Plugins {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let models: Vec<_> = self
                .0
                .iter()
                .map(|(model, version, metrics)| {
                    let labels: ModelLabels<'_> = [
                        ("model", Escaped(model.as_str())),
                        ("version", Escaped(version.as_str())),
                    ];
                    (labels, metrics.as_ref())
                })
                .collect();
            encode_plugin_metrics(&mut encoder, &models)
        }
    }

    /// The plugin metrics of `models` as `/metrics` writes them.
    fn page(models: &[(&str, &str, &Arc<PluginMetrics>)]) -> String {
        let mut registry = Registry::default();
        let models = models
            .iter()
            .map(|(m, v, metrics)| (m.to_string(), v.to_string(), Arc::clone(metrics)))
            .collect();
        registry.register_collector(Box::new(Plugins(models)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    #[test]
    fn what_a_model_is_charged_bounds_what_it_writes() {
        let shared = Arc::new(PluginPage::default());
        let (model, version) = ("m\\\"odel", "1\"");
        let metrics = Arc::new(PluginMetrics::new(shared.clone(), model, version));
        let empty = page(&[(model, version, &metrics)]).len();
        let quotes = "\"".repeat(128);
        let nines = "-1.7976931348623157e308";
        for i in 0..20 {
            let l = labels(&[("a", &quotes), ("b", &format!("{i}\n\\"))]);
            metrics.update("c", l.clone(), Update::CounterAdd(1e300)).unwrap();
            metrics
                .update(&format!("g{i}"), l.clone(), Update::GaugeSet(nines.parse().unwrap()))
                .unwrap();
            metrics.update("h", l, Update::HistogramObserve(f64::MAX)).unwrap();
        }
        let written = page(&[(model, version, &metrics)]).len() - empty;
        let charged = metrics.bytes();
        assert!(written <= charged, "written {written} > charged {charged}");
        assert!(
            charged <= written * 2,
            "charged {charged} is far above written {written}"
        );
        assert_eq!(shared.bytes(), charged);
        drop(metrics);
        assert_eq!(shared.bytes(), 0, "a dropped version gives its bytes back");
    }

    #[test]
    fn hostile_label_values_stay_inside_their_quotes() {
        let metrics = Arc::new(PluginMetrics::default());
        let forged = "} 0\ntensorplug_model_ready{model=\"other\"} 0\n# EOF\n";
        metrics
            .update("x", labels(&[("v", forged)]), Update::GaugeSet(1.0))
            .unwrap();
        let text = page(&[("m", "1", &metrics)]);
        assert!(
            text.contains(r#"tensorplug_plugin_x{model="m",version="1",v="} 0\ntensorplug_model_ready{model=\"other\"} 0\n# EOF\n"} 1"#),
            "{text}"
        );
        assert_eq!(text.lines().filter(|l| *l == "# EOF").count(), 1, "{text}");
        assert!(!text.lines().any(|l| l.starts_with("tensorplug_model_ready")), "{text}");
    }

    #[test]
    fn models_share_a_name_of_one_kind_and_refusals_are_counted() {
        let shared = Arc::new(PluginPage::default());
        let a = Arc::new(PluginMetrics::new(shared.clone(), "a", "1"));
        let b = Arc::new(PluginMetrics::new(shared.clone(), "b", "1"));
        a.update("n", vec![], Update::CounterAdd(1.0)).unwrap();
        b.update("n", vec![], Update::CounterAdd(2.0)).unwrap();
        assert!(b.update("n_total", vec![], Update::GaugeSet(1.0)).is_err());
        let text = page(&[("a", "1", &a), ("b", "1", &b)]);
        assert_eq!(text.matches("# TYPE tensorplug_plugin_n counter").count(), 1, "{text}");
        assert!(
            text.contains(r#"tensorplug_plugin_n_total{model="a",version="1"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tensorplug_plugin_n_total{model="b",version="1"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tensorplug_plugin_metrics_refused_total{model="b",version="1",rule="name_clash"} 1"#),
            "{text}"
        );
        assert!(!text.contains(r#"model="a",version="1",rule"#), "{text}");
    }
}
