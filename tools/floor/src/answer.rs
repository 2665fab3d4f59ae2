//! The answer the floor gives: the model's outputs, zero-filled, at the request's batch size.

use std::path::Path;

use anyhow::Context;
use tensorplug::model::config::{ModelConfig, TensorSpec};
use tensorplug::model::tensor::Tensor;
use tensorplug::protocol::{encode_response, InferRequest, OutputOptions};

/// The model's name, version and outputs, from its model.toml.
pub struct Shapes {
    name: String,
    version: String,
    outputs: Vec<TensorSpec>,
}

impl Shapes {
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let config = ModelConfig::load(dir).with_context(|| format!("reading {}", dir.display()))?;
        Ok(Self {
            name: config.name,
            version: config.version,
            outputs: config.outputs,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// Zero-filled outputs for a request of `rows` items.
    pub fn outputs(&self, rows: u64) -> Vec<Tensor> {
        self.outputs
            .iter()
            .map(|spec| {
                // The first accepted per-item shape, a variable dimension taken as 1.
                let mut shape = vec![rows];
                let item = spec.shapes.first().map(Vec::as_slice).unwrap_or_default();
                shape.extend(item.iter().map(|&d| u64::try_from(d).unwrap_or(1)));
                let elements: u64 = shape.iter().product();
                // BYTES: an empty string per element (its 4-byte length prefix).
                let bytes = usize::try_from(elements).unwrap_or(0) * spec.datatype.element_size().unwrap_or(4);
                Tensor {
                    name: spec.name.clone(),
                    datatype: spec.datatype,
                    shape,
                    data: vec![0; bytes],
                }
            })
            .collect()
    }

    /// The JSON answer to `request`, by tensorplug's encoder.
    pub fn encode(&self, request: &InferRequest) -> Vec<u8> {
        let rows = batch_size(request);
        let options = OutputOptions::from_request(request);
        encode_response(
            &self.name,
            &self.version,
            request.id.as_deref(),
            &self.outputs(rows),
            &options,
        )
        .body
    }
}

/// The request's batch size: its first input's leading dimension.
pub fn batch_size(request: &InferRequest) -> u64 {
    request
        .inputs
        .first()
        .and_then(|t| t.shape.first().copied())
        .unwrap_or(1)
}
