//! `model.toml`: one model folder's configuration, parsed strictly and validated once.
//!
//! Unknown keys are errors (a typo must not silently fall back to a default), and every
//! error names the file and the key. docs/models.md documents the format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::openai::{self, OpenAiEmbeddings, RawOpenAi};
use super::padding::Padding;
use super::request_parameters::{self, RawRequestParameter, RequestParameter};
use super::StageKind;
use crate::model::tensor::DataType;

/// Defined with the tensors, so that [`super::openai`], which `parse` here calls, needs
/// nothing from this module.
pub use crate::model::tensor::TensorSpec;

/// The file every model folder must have.
pub const MODEL_FILE: &str = "model.toml";

/// Why a model folder's configuration is unusable.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", file.display())]
pub struct ConfigError {
    pub file: PathBuf,
    pub message: String,
}

/// How requests are grouped into batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// Most items in one call to predict; 1 when the model does not batch.
    pub max_batch_size: usize,
    /// How long the first item of a batch waits for company once an instance is free
    /// (zero: not at all).
    pub max_queue_delay: Duration,
    /// Most items waiting for an instance; beyond it requests get 503.
    pub max_queue_size: usize,
}

/// Sandbox and scheduling limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory cap per stage instance, in bytes.
    pub memory_bytes: usize,
    /// Cap on a stage instance's table elements, all tables together.
    pub table_elements: usize,
    /// Cap on the resource handles (files, streams, pollables) a stage instance holds.
    pub max_handles: usize,
    /// Time limit of one stage call, host calls included.
    pub stage_timeout: Duration,
    /// Time limit of instantiating one stage instance and running its `init`.
    pub init_timeout: Duration,
    /// Time limit of compiling one stage (off the serving path, at load).
    pub compile_timeout: Duration,
    /// Default time a request may take end to end (a request's `timeout` overrides it).
    pub request_timeout: Duration,
    /// Pipeline instances at most, each on its own thread.
    pub instances: usize,
    /// Instances kept however idle the model is (0: none while idle). `None`: the
    /// server's choice (all of `instances` when every model is resident, else one).
    pub min_instances: Option<usize>,
    /// What the model's `wasi:nn` graphs may hold together once loaded, in bytes.
    pub graph_memory_bytes: u64,
    /// Most nodes one `wasi:nn` graph may have.
    pub graph_max_nodes: usize,
    /// Most tensor data one item's outputs may hold in an answer (JSON text takes up to
    /// four times as much); an item past it fails (500) instead of being encoded.
    pub max_answer_bytes: usize,
}

/// A validated model configuration.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub name: String,
    pub version: String,
    pub dir: PathBuf,
    /// Whether requests are split into items along their leading dimension.
    pub batches: bool,
    /// The stage files, in pipeline order.
    pub stages: Vec<(StageKind, PathBuf)>,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub batching: Batching,
    /// `[batching.pad]`: predict's ragged inputs, padded per sub-batch.
    pub padding: Padding,
    pub limits: Limits,
    /// `[parameters]` as text, handed to every stage's `init`.
    pub parameters: Vec<(String, String)>,
    /// `[request_parameters]`: the request parameters every item carries as a tensor.
    pub request_parameters: Vec<RequestParameter>,
    /// `[openai.embeddings]`: served on `POST /v1/embeddings` too.
    pub openai_embeddings: Option<OpenAiEmbeddings>,
    /// `[graphs]`: the ONNX graphs plugins load by name through `wasi:nn`. The paths are
    /// plain relative paths without `..`; that they stay inside the folder once symlinks
    /// are resolved is checked when they are read (see [`graph_path_inside`]).
    pub graphs: Vec<GraphSpec>,
    /// `[residency] pinned`: resident from the start and never evicted, even when the
    /// server loads models on demand.
    pub pinned: bool,
    /// `[metrics] histograms`: whether the model keeps latency histograms of its own on
    /// `/metrics` (beside the server-wide ones); `None`: the server's default (yes when
    /// every model is resident, no on demand).
    pub histograms: Option<bool>,
}

/// One graph of `[graphs]`: `name = "file.onnx"` (run by tract), or
/// `name = { file = "file.onnx", backend = "tract" | "onnxruntime", threads = N }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphSpec {
    pub name: String,
    /// Inside the model folder.
    pub file: PathBuf,
    pub backend: GraphBackend,
    /// Threads one compute may use: ONNX Runtime's intra-op threads per session
    /// (`threads`, 1 to [`MAX_GRAPH_THREADS`], default 1: the instance's own thread).
    /// Always 1 for tract, which computes on the instance's thread.
    pub threads: u32,
}

impl GraphSpec {
    /// `name = "file"`: a graph run by tract.
    pub fn tract(name: impl Into<String>, file: impl Into<PathBuf>) -> Self {
        GraphSpec {
            name: name.into(),
            file: file.into(),
            backend: GraphBackend::Tract,
            threads: 1,
        }
    }
}

/// What runs a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphBackend {
    /// tract-onnx, built in.
    Tract,
    /// ONNX Runtime, from the shared library the operator gives (`--onnxruntime-lib`).
    OnnxRuntime,
}

impl GraphBackend {
    pub fn name(self) -> &'static str {
        match self {
            GraphBackend::Tract => "tract",
            GraphBackend::OnnxRuntime => "onnxruntime",
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawGraph {
    File(String),
    Table(RawGraphTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGraphTable {
    file: String,
    backend: Option<String>,
    threads: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    name: Option<String>,
    version: Option<RawVersion>,
    stages: RawStages,
    #[serde(default)]
    inputs: Vec<RawTensor>,
    #[serde(default)]
    outputs: Vec<RawTensor>,
    batching: Option<RawBatching>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    parameters: BTreeMap<String, toml::Value>,
    #[serde(default)]
    graphs: BTreeMap<String, RawGraph>,
    #[serde(default)]
    request_parameters: BTreeMap<String, RawRequestParameter>,
    openai: Option<RawOpenAi>,
    #[serde(default)]
    residency: RawResidency,
    #[serde(default)]
    metrics: RawMetrics,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    histograms: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawResidency {
    #[serde(default)]
    pinned: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawVersion {
    Text(String),
    Number(u64),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStages {
    preprocess: Option<String>,
    predict: String,
    postprocess: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    name: String,
    datatype: String,
    shape: RawShape,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawShape {
    One(Vec<i64>),
    Many(Vec<Vec<i64>>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBatching {
    max_batch_size: usize,
    #[serde(default = "default_queue_delay_us")]
    max_queue_delay_us: u64,
    #[serde(default = "default_queue_size")]
    max_queue_size: usize,
    #[serde(default)]
    pad: BTreeMap<String, toml::Value>,
    max_padding: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory_mib: Option<u64>,
    timeout_ms: Option<u64>,
    init_timeout_ms: Option<u64>,
    compile_timeout_ms: Option<u64>,
    table_elements: Option<usize>,
    max_handles: Option<usize>,
    request_timeout_ms: Option<u64>,
    instances: Option<usize>,
    min_instances: Option<usize>,
    graph_memory_mib: Option<u64>,
    graph_max_nodes: Option<usize>,
    max_answer_mib: Option<u64>,
}

/// No waiting by default: an idle instance takes whatever is queued, and under load the
/// queue fills while instances are busy, so batches grow by themselves.
fn default_queue_delay_us() -> u64 {
    0
}

fn default_queue_size() -> usize {
    1024
}

const DEFAULT_MEMORY_MIB: u64 = 64;
const MAX_MEMORY_MIB: u64 = 4096;
const DEFAULT_STAGE_TIMEOUT_MS: u64 = 1000;
/// A compiled Rust plugin's tables hold a few hundred function references.
const DEFAULT_TABLE_ELEMENTS: usize = 10_000;
/// Enough for a plugin that reads its weights and logs, several files open at once.
const DEFAULT_MAX_HANDLES: usize = 128;
/// Long enough to read weights from the model folder; short enough that a plugin whose
/// `init` hangs fails its load instead of holding it up.
const DEFAULT_INIT_TIMEOUT_MS: u64 = 10_000;
/// An 18 MB Python component compiled in 10 s on an idle 2-core machine and 45 s on a
/// busy one: 300 s leaves room for that, and for two at once.
const DEFAULT_COMPILE_TIMEOUT_MS: u64 = 300_000;
/// An hour: past that a load is stuck, whatever the component.
const MAX_COMPILE_TIMEOUT_MS: u64 = 3_600_000;
const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Largest `model.toml` read: a real one is a few KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// An item's answer, at most: far below what a plugin with a large memory cap could
/// return, which encoded as JSON would take the server several times its size.
const DEFAULT_MAX_ANSWER_MIB: u64 = 64;
const MAX_MAX_ANSWER_MIB: u64 = 4096;
/// As much as the largest graph file holds: a graph whose weights are in its file fits.
const DEFAULT_GRAPH_MEMORY_MIB: u64 = 256;
const MAX_GRAPH_MEMORY_MIB: u64 = 16_384;
/// Large vision and language graphs have a few thousand nodes.
const DEFAULT_GRAPH_MAX_NODES: usize = 10_000;
const MAX_GRAPH_MAX_NODES: usize = 1_000_000;

/// Whether `name` can be a model (and folder) name: no path tricks, nothing hidden.
pub fn is_valid_model_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl ModelConfig {
    /// Reads and validates `dir/model.toml`.
    pub fn load(dir: &Path) -> Result<Self, ConfigError> {
        let file = dir.join(MODEL_FILE);
        let failed = |message: String| ConfigError {
            file: file.clone(),
            message,
        };
        let bytes = super::files::read_regular(&file, MAX_CONFIG_BYTES, "model.toml's size cap of 1 MiB")
            .map_err(|e| failed(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|_| failed("is not UTF-8 text".into()))?;
        Self::parse(dir, &text).map_err(|message| ConfigError { file, message })
    }

    /// Validates the text of a `model.toml` found in `dir`.
    pub fn parse(dir: &Path, text: &str) -> Result<Self, String> {
        let raw: RawModel = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        let folder = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let name = raw.name.unwrap_or_else(|| folder.clone());
        if !is_valid_model_name(&name) {
            return Err(format!(
                "key `name`: {name:?} is not a valid model name (letters, digits, '-', '_', '.'; not starting with '.')"
            ));
        }
        if !folder.is_empty() && name != folder {
            return Err(format!(
                "key `name`: {name:?} must equal the model's folder name {folder:?}"
            ));
        }
        let version = match raw.version {
            None => "1".to_string(),
            Some(RawVersion::Number(n)) => n.to_string(),
            Some(RawVersion::Text(text)) if is_valid_model_name(&text) => text,
            Some(RawVersion::Text(text)) => {
                return Err(format!(
                    "key `version`: {text:?} is not a valid version (letters, digits, '-', '_', '.')"
                ))
            }
        };

        let mut stages = Vec::new();
        for (kind, file) in [
            (StageKind::Preprocess, raw.stages.preprocess),
            (StageKind::Predict, Some(raw.stages.predict)),
            (StageKind::Postprocess, raw.stages.postprocess),
        ] {
            if let Some(file) = file {
                let key = format!("stages.{}", kind.name());
                stages.push((kind, dir.join(stage_file(&key, &file)?)));
            }
        }

        let inputs = tensor_specs("inputs", raw.inputs)?;
        let outputs = tensor_specs("outputs", raw.outputs)?;
        if inputs.is_empty() {
            return Err("key `inputs`: a model must declare at least one input".into());
        }

        let instances_default = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let instances = within("limits.instances", raw.limits.instances, instances_default, 1..=256)?;
        let limits = Limits {
            memory_bytes: (within(
                "limits.memory_mib",
                raw.limits.memory_mib,
                DEFAULT_MEMORY_MIB,
                1..=MAX_MEMORY_MIB,
            )? as usize)
                << 20,
            stage_timeout: positive_ms("limits.timeout_ms", raw.limits.timeout_ms, DEFAULT_STAGE_TIMEOUT_MS)?,
            table_elements: within(
                "limits.table_elements",
                raw.limits.table_elements,
                DEFAULT_TABLE_ELEMENTS,
                1..=10_000_000,
            )?,
            max_handles: within(
                "limits.max_handles",
                raw.limits.max_handles,
                DEFAULT_MAX_HANDLES,
                16..=65_536,
            )?,
            init_timeout: positive_ms(
                "limits.init_timeout_ms",
                raw.limits.init_timeout_ms,
                DEFAULT_INIT_TIMEOUT_MS,
            )?,
            compile_timeout: Duration::from_millis(within(
                "limits.compile_timeout_ms",
                raw.limits.compile_timeout_ms,
                DEFAULT_COMPILE_TIMEOUT_MS,
                1..=MAX_COMPILE_TIMEOUT_MS,
            )?),
            request_timeout: positive_ms(
                "limits.request_timeout_ms",
                raw.limits.request_timeout_ms,
                DEFAULT_REQUEST_TIMEOUT_MS,
            )?,
            instances,
            min_instances: raw
                .limits
                .min_instances
                .map(|min| within("limits.min_instances", Some(min), 0, 0..=instances))
                .transpose()?,
            graph_memory_bytes: within(
                "limits.graph_memory_mib",
                raw.limits.graph_memory_mib,
                DEFAULT_GRAPH_MEMORY_MIB,
                1..=MAX_GRAPH_MEMORY_MIB,
            )? << 20,
            graph_max_nodes: within(
                "limits.graph_max_nodes",
                raw.limits.graph_max_nodes,
                DEFAULT_GRAPH_MAX_NODES,
                1..=MAX_GRAPH_MAX_NODES,
            )?,
            max_answer_bytes: usize::try_from(
                within(
                    "limits.max_answer_mib",
                    raw.limits.max_answer_mib,
                    DEFAULT_MAX_ANSWER_MIB,
                    1..=MAX_MAX_ANSWER_MIB,
                )? << 20,
            )
            .unwrap_or(usize::MAX),
        };

        let (batches, batching, padding) = match raw.batching {
            None => (
                false,
                Batching {
                    max_batch_size: 1,
                    max_queue_delay: Duration::ZERO,
                    max_queue_size: default_queue_size(),
                },
                Padding::default(),
            ),
            Some(b) => {
                if !(1..=4096).contains(&b.max_batch_size) {
                    return Err(format!(
                        "key `batching.max_batch_size`: {} is outside 1..=4096",
                        b.max_batch_size
                    ));
                }
                if b.max_queue_delay_us > 10_000_000 {
                    return Err(format!(
                        "key `batching.max_queue_delay_us`: {} is more than 10 s",
                        b.max_queue_delay_us
                    ));
                }
                if !(1..=1_000_000).contains(&b.max_queue_size) {
                    return Err(format!(
                        "key `batching.max_queue_size`: {} is outside 1..=1000000",
                        b.max_queue_size
                    ));
                }
                (
                    true,
                    Batching {
                        max_batch_size: b.max_batch_size,
                        max_queue_delay: Duration::from_micros(b.max_queue_delay_us),
                        max_queue_size: b.max_queue_size,
                    },
                    Padding::parse(b.pad, b.max_padding)?,
                )
            }
        };

        let input_names: Vec<&str> = inputs.iter().map(|s| s.name.as_str()).collect();
        let request_parameters = request_parameters::parse(raw.request_parameters, &input_names)?;
        let openai_embeddings = openai::parse(raw.openai, (&inputs, &outputs), batches)?;
        let parameters = raw
            .parameters
            .into_iter()
            .map(|(name, value)| (name, parameter_text(value)))
            .collect();

        let mut graphs = Vec::with_capacity(raw.graphs.len());
        if raw.graphs.len() > MAX_GRAPHS {
            return Err(format!(
                "key `graphs`: {} graphs; a model may name at most {MAX_GRAPHS}",
                raw.graphs.len()
            ));
        }
        for (graph, raw_graph) in raw.graphs {
            if !is_valid_graph_name(&graph) {
                return Err(format!(
                    "key `graphs.{graph}`: {graph:?} is not a valid graph name (1-64 letters, digits, '-', '_', '.')"
                ));
            }
            let (file, backend, threads) = match raw_graph {
                RawGraph::File(file) => (file, GraphBackend::Tract, 1),
                RawGraph::Table(table) => {
                    let backend = match table.backend.as_deref() {
                        None | Some("tract") => GraphBackend::Tract,
                        Some("onnxruntime") => GraphBackend::OnnxRuntime,
                        Some(other) => {
                            return Err(format!(
                            "key `graphs.{graph}.backend`: {other:?} is not a backend (\"tract\" or \"onnxruntime\")"
                        ))
                        }
                    };
                    let threads = match (table.threads, backend) {
                        (None, _) => 1,
                        (Some(_), GraphBackend::Tract) => {
                            return Err(format!(
                                "key `graphs.{graph}.threads`: only for backend = \"onnxruntime\" (tract computes on the instance's thread)"
                            ))
                        }
                        (Some(value), GraphBackend::OnnxRuntime) => value
                            .as_integer()
                            .and_then(|n| u32::try_from(n).ok())
                            .filter(|n| (1..=MAX_GRAPH_THREADS).contains(n))
                            .ok_or_else(|| {
                                format!(
                                    "key `graphs.{graph}.threads`: {value} is not a thread count from 1 to {MAX_GRAPH_THREADS}"
                                )
                            })?,
                    };
                    (table.file, backend, threads)
                }
            };
            graphs.push(GraphSpec {
                file: dir.join(graph_file(&format!("graphs.{graph}"), &file)?),
                name: graph,
                backend,
                threads,
            });
        }

        Ok(Self {
            name,
            version,
            dir: dir.to_path_buf(),
            batches,
            stages,
            inputs,
            outputs,
            batching,
            padding,
            limits,
            parameters,
            request_parameters,
            openai_embeddings,
            graphs,
            pinned: raw.residency.pinned,
            histograms: raw.metrics.histograms,
        })
    }

    /// The shape clients see in metadata: `-1` for the batch dimension when the model
    /// batches, then the first accepted per-item shape.
    pub fn metadata_shape(&self, spec: &TensorSpec) -> Vec<i64> {
        let per_item = spec.shapes.first().cloned().unwrap_or_default();
        if self.batches {
            std::iter::once(-1).chain(per_item).collect()
        } else {
            per_item
        }
    }
}

fn stage_file(key: &str, file: &str) -> Result<PathBuf, String> {
    let path = Path::new(file);
    let plain = path.components().count() == 1
        && matches!(path.components().next(), Some(std::path::Component::Normal(_)))
        && !file.starts_with('.');
    if !plain {
        return Err(format!(
            "key `{key}`: {file:?} must be a file name inside the model folder"
        ));
    }
    Ok(path.to_path_buf())
}

/// Graphs one model may name in `[graphs]`.
pub const MAX_GRAPHS: usize = 16;

/// Most threads one compute of an ONNX Runtime graph may use (`threads`); a model's
/// computes use at most `instances` times as many cores.
pub const MAX_GRAPH_THREADS: u32 = 16;

/// Whether `name` can name a graph (what a plugin passes to `load-by-name`).
fn is_valid_graph_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A graph's path: relative, inside the model folder (subfolders allowed), no `.` or
/// `..` components, nothing hidden.
fn graph_file(key: &str, file: &str) -> Result<PathBuf, String> {
    let path = Path::new(file);
    let plain = !file.is_empty()
        && path.components().all(|c| match c {
            std::path::Component::Normal(part) => !part.to_string_lossy().starts_with('.'),
            _ => false,
        });
    if !plain {
        return Err(format!(
            "key `{key}`: {file:?} must be a relative path inside the model folder (no absolute path, no `..`, nothing hidden)"
        ));
    }
    Ok(path.to_path_buf())
}

/// `file` once every symlink is resolved, if it lies inside `dir` (also resolved); else
/// why not. This is the check [`ModelConfig::graphs`]' paths get when they are read.
pub fn graph_path_inside(dir: &Path, file: &Path) -> Result<PathBuf, String> {
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve the model folder {}: {e}", dir.display()))?;
    let resolved = file.canonicalize().map_err(|e| format!("cannot open: {e}"))?;
    if !resolved.starts_with(&dir) {
        return Err(format!(
            "resolves to {}, outside the model folder (a symlink?)",
            resolved.display()
        ));
    }
    Ok(resolved)
}

fn tensor_specs(key: &str, raw: Vec<RawTensor>) -> Result<Vec<TensorSpec>, String> {
    let mut specs: Vec<TensorSpec> = Vec::with_capacity(raw.len());
    for (i, t) in raw.into_iter().enumerate() {
        let at = format!("{key}[{i}]");
        if t.name.is_empty() {
            return Err(format!("key `{at}.name`: must not be empty"));
        }
        if specs.iter().any(|s| s.name == t.name) {
            return Err(format!("key `{at}.name`: {:?} is declared twice", t.name));
        }
        let datatype = DataType::parse(&t.datatype).ok_or_else(|| {
            format!(
                "key `{at}.datatype`: {:?} is not a V2 datatype (one of {})",
                t.datatype,
                DataType::ALL.map(|d| d.as_str()).join(", ")
            )
        })?;
        let shapes = match t.shape {
            RawShape::One(s) => vec![s],
            RawShape::Many(many) if !many.is_empty() => many,
            RawShape::Many(_) => return Err(format!("key `{at}.shape`: give at least one shape")),
        };
        if let Some(bad) = shapes.iter().flatten().find(|&&d| d < -1) {
            return Err(format!(
                "key `{at}.shape`: dimension {bad} is invalid (sizes are >= 0, -1 means any)"
            ));
        }
        specs.push(TensorSpec {
            name: t.name,
            datatype,
            shapes,
        });
    }
    Ok(specs)
}

/// `value` (or `default` when the key is absent) if `allowed` holds it, else an error naming
/// the key and the range.
fn within<T: PartialOrd + Copy + std::fmt::Display>(
    key: &str,
    value: Option<T>,
    default: T,
    allowed: std::ops::RangeInclusive<T>,
) -> Result<T, String> {
    let value = value.unwrap_or(default);
    if allowed.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "key `{key}`: {value} is outside {}..={}",
            allowed.start(),
            allowed.end()
        ))
    }
}

fn positive_ms(key: &str, value: Option<u64>, default: u64) -> Result<Duration, String> {
    match value.unwrap_or(default) {
        0 => Err(format!("key `{key}`: must be at least 1")),
        ms => Ok(Duration::from_millis(ms)),
    }
}

/// Parameters reach plugins as text: strings as they are, everything else as JSON.
fn parameter_text(value: toml::Value) -> String {
    match value {
        toml::Value::String(s) => s,
        other => serde_json::to_string(&other).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGITS: &str = r#"
name = "digits"
version = "1"
[stages]
preprocess = "preprocess.wasm"
predict = "predict.wasm"
[[inputs]]
name = "input-0"
datatype = "FP32"
shape = [[64], [8, 8]]
[[outputs]]
name = "label"
datatype = "INT64"
shape = [1]
[batching]
max_batch_size = 32
[parameters]
pixel_max = 16
mode = "fast"
"#;

    #[test]
    fn parses_a_full_config() {
        let c = ModelConfig::parse(Path::new("/m/digits"), DIGITS).unwrap();
        assert_eq!(c.name, "digits");
        assert!(c.batches);
        assert_eq!(c.batching.max_batch_size, 32);
        assert_eq!(c.stages.len(), 2);
        assert_eq!(
            c.stages[1],
            (StageKind::Predict, PathBuf::from("/m/digits/predict.wasm"))
        );
        assert!(c.inputs[0].accepts_shape(&[8, 8]));
        assert!(!c.inputs[0].accepts_shape(&[8, 7]));
        assert_eq!(c.metadata_shape(&c.inputs[0]), vec![-1, 64]);
        assert_eq!(
            c.parameters,
            vec![("mode".into(), "fast".into()), ("pixel_max".into(), "16".into())]
        );
    }

    #[test]
    fn errors_name_the_key() {
        let err = |text: &str| ModelConfig::parse(Path::new("/m/digits"), text).unwrap_err();
        let typo = DIGITS.replace("max_batch_size", "max_batchsize");
        assert!(err(&typo).contains("unknown field `max_batchsize`"), "{}", err(&typo));
        let dtype = DIGITS.replace("\"FP32\"", "\"FP33\"");
        assert!(
            err(&dtype).contains("key `inputs[0].datatype`: \"FP33\""),
            "{}",
            err(&dtype)
        );
        let escape = DIGITS.replace("\"predict.wasm\"", "\"../x.wasm\"");
        assert!(err(&escape).contains("key `stages.predict`"), "{}", err(&escape));
        let renamed = DIGITS.replace("name = \"digits\"", "name = \"other\"");
        assert!(err(&renamed).contains("folder name"), "{}", err(&renamed));
    }

    #[test]
    fn graph_limits_have_defaults_and_bounds() {
        let c = ModelConfig::parse(Path::new("/m/digits"), DIGITS).unwrap();
        assert_eq!(c.limits.graph_memory_bytes, 256 << 20);
        assert_eq!(c.limits.graph_max_nodes, 10_000);
        assert_eq!(c.limits.max_answer_bytes, 64 << 20);
        let with = |limits: &str| format!("{DIGITS}\n[limits]\n{limits}\n");
        let c = ModelConfig::parse(
            Path::new("/m/digits"),
            &with("graph_memory_mib = 8\ngraph_max_nodes = 50"),
        )
        .unwrap();
        assert_eq!((c.limits.graph_memory_bytes, c.limits.graph_max_nodes), (8 << 20, 50));
        for (bad, key) in [
            ("graph_memory_mib = 0", "limits.graph_memory_mib"),
            ("graph_memory_mib = 16385", "limits.graph_memory_mib"),
            ("graph_max_nodes = 0", "limits.graph_max_nodes"),
            ("graph_max_nodes = 1000001", "limits.graph_max_nodes"),
            ("max_answer_mib = 0", "limits.max_answer_mib"),
            ("max_answer_mib = 4097", "limits.max_answer_mib"),
        ] {
            let err = ModelConfig::parse(Path::new("/m/digits"), &with(bad)).unwrap_err();
            assert!(err.contains(key) && err.contains("outside"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_compile_timeout_has_a_default_and_bounds() {
        let c = ModelConfig::parse(Path::new("/m/digits"), DIGITS).unwrap();
        assert_eq!(c.limits.compile_timeout, Duration::from_secs(300));
        let with = |limits: &str| format!("{DIGITS}\n[limits]\n{limits}\n");
        let c = ModelConfig::parse(Path::new("/m/digits"), &with("compile_timeout_ms = 1")).unwrap();
        assert_eq!(c.limits.compile_timeout, Duration::from_millis(1));
        for bad in ["compile_timeout_ms = 0", "compile_timeout_ms = 3600001"] {
            let err = ModelConfig::parse(Path::new("/m/digits"), &with(bad)).unwrap_err();
            assert!(
                err.contains("limits.compile_timeout_ms") && err.contains("outside"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn graphs_stay_inside_the_folder() {
        let with = |graphs: &str| format!("{DIGITS}\n[graphs]\n{graphs}\n");
        let c = ModelConfig::parse(Path::new("/m/digits"), &with(r#"digits = "onnx/digits.onnx""#)).unwrap();
        assert_eq!(
            c.graphs,
            vec![GraphSpec {
                name: "digits".into(),
                file: PathBuf::from("/m/digits/onnx/digits.onnx"),
                backend: GraphBackend::Tract,
                threads: 1,
            }]
        );
        for bad in [
            "/etc/passwd",
            "../other/x.onnx",
            "a/../../x.onnx",
            "./x.onnx",
            ".hidden.onnx",
            "",
        ] {
            let err = ModelConfig::parse(Path::new("/m/digits"), &with(&format!("g = {bad:?}"))).unwrap_err();
            assert!(err.contains("key `graphs.g`"), "{bad}: {err}");
        }
        let err = ModelConfig::parse(Path::new("/m/digits"), &with(r#""a b" = "x.onnx""#)).unwrap_err();
        assert!(err.contains("not a valid graph name"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m");
        std::fs::create_dir(&model).unwrap();
        std::fs::write(dir.path().join("outside.onnx"), b"x").unwrap();
        std::fs::write(model.join("inside.onnx"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside.onnx"), model.join("link.onnx")).unwrap();
        assert!(graph_path_inside(&model, &model.join("inside.onnx")).is_ok());
        let err = graph_path_inside(&model, &model.join("link.onnx")).unwrap_err();
        assert!(err.contains("outside the model folder"), "{err}");
        let err = graph_path_inside(&model, &model.join("missing.onnx")).unwrap_err();
        assert!(err.contains("cannot open"), "{err}");
    }

    #[test]
    fn graphs_name_their_backend() {
        let with = |graphs: &str| format!("{DIGITS}\n[graphs]\n{graphs}\n");
        let parsed = |graphs: &str| ModelConfig::parse(Path::new("/m/digits"), &with(graphs)).map(|c| c.graphs);
        let graph = |backend| GraphSpec {
            name: "g".into(),
            file: PathBuf::from("/m/digits/g.onnx"),
            backend,
            threads: 1,
        };
        assert_eq!(parsed(r#"g = "g.onnx""#).unwrap(), [graph(GraphBackend::Tract)]);
        assert_eq!(
            parsed(r#"g = { file = "g.onnx" }"#).unwrap(),
            [graph(GraphBackend::Tract)]
        );
        assert_eq!(
            parsed(r#"g = { file = "g.onnx", backend = "tract" }"#).unwrap(),
            [graph(GraphBackend::Tract)]
        );
        assert_eq!(
            parsed(r#"g = { file = "g.onnx", backend = "onnxruntime" }"#).unwrap(),
            [graph(GraphBackend::OnnxRuntime)]
        );
        let err = parsed(r#"g = { file = "g.onnx", backend = "tensorrt" }"#).unwrap_err();
        assert!(
            err.contains("key `graphs.g.backend`") && err.contains("onnxruntime"),
            "{err}"
        );
        let err = parsed(r#"g = { file = "../g.onnx", backend = "onnxruntime" }"#).unwrap_err();
        assert!(err.contains("key `graphs.g`"), "{err}");
        assert!(parsed(r#"g = { file = "g.onnx", threads = 4 }"#).is_err());
    }

    #[test]
    fn an_onnxruntime_graph_may_ask_for_threads_within_the_cap() {
        let with = |graphs: &str| format!("{DIGITS}\n[graphs]\n{graphs}\n");
        let parsed = |graphs: &str| ModelConfig::parse(Path::new("/m/digits"), &with(graphs)).map(|c| c.graphs);
        let threads = |graphs: &str| parsed(graphs).unwrap()[0].threads;
        assert_eq!(threads(r#"g = { file = "g.onnx", backend = "onnxruntime" }"#), 1);
        assert_eq!(
            threads(r#"g = { file = "g.onnx", backend = "onnxruntime", threads = 4 }"#),
            4
        );
        assert_eq!(
            threads(&format!(
                r#"g = {{ file = "g.onnx", backend = "onnxruntime", threads = {MAX_GRAPH_THREADS} }}"#
            )),
            MAX_GRAPH_THREADS
        );
        for bad in ["0", "-1", "17", "4294967297", "\"4\"", "1.5"] {
            let err = parsed(&format!(
                r#"g = {{ file = "g.onnx", backend = "onnxruntime", threads = {bad} }}"#
            ))
            .unwrap_err();
            assert!(
                err.contains("key `graphs.g.threads`") && err.contains("from 1 to 16"),
                "{bad}: {err}"
            );
        }
        for tract in [
            r#"g = { file = "g.onnx", threads = 1 }"#,
            r#"g = { file = "g.onnx", backend = "tract", threads = 2 }"#,
        ] {
            let err = parsed(tract).unwrap_err();
            assert!(err.contains("key `graphs.g.threads`: only for backend"), "{err}");
        }
    }

    #[test]
    fn ragged_inputs_are_declared_under_batching() {
        let c = ModelConfig::parse(Path::new("/m/digits"), DIGITS).unwrap();
        assert!(c.padding.is_empty());
        let ragged = DIGITS.replace(
            "max_batch_size = 32",
            "max_batch_size = 32\nmax_padding = 0.1\npad = { input_ids = 0, mask = false }",
        );
        let c = ModelConfig::parse(Path::new("/m/digits"), &ragged).unwrap();
        assert_eq!(c.padding.max_padding, 0.1);
        assert_eq!(
            c.padding.pads,
            vec![
                ("input_ids".to_string(), crate::model::padding::PadValue::Int(0)),
                ("mask".to_string(), crate::model::padding::PadValue::Bool(false)),
            ]
        );
        let err = ModelConfig::parse(Path::new("/m/digits"), &ragged.replace("0.1", "2.0")).unwrap_err();
        assert!(err.contains("batching.max_padding"), "{err}");
    }

    #[test]
    fn model_names_reject_traversal() {
        for bad in ["", "..", ".hidden", "a/b", "/abs", "a\\b", "a b"] {
            assert!(!is_valid_model_name(bad), "{bad}");
        }
        assert!(is_valid_model_name("digits-v2.1_x"));
    }
}
