//! ONNX graphs built in code for the `wasi:nn` limits: the graph bombs of issue 18 (a few
//! hundred bytes that describe gigabytes), a long chain of nodes, and heavy but legal
//! compute. Shared by the host's unit tests (`host/src/runtime/nn`) and the end-to-end
//! and limits tests.

#![allow(dead_code)]

use prost_tract::Message;
use tract_onnx::pb::{self, attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto};

/// A dimension of a graph input: fixed, or the symbol `N`.
#[derive(Clone, Copy)]
pub enum Dim {
    Fixed(i64),
    N,
}

/// An FP32 graph input or output named `name`.
pub fn value(name: &str, dims: &[Dim]) -> pb::ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                Dim::Fixed(n) => tensor_shape_proto::dimension::Value::DimValue(*n),
                Dim::N => tensor_shape_proto::dimension::Value::DimParam("N".into()),
            }),
            ..Default::default()
        })
        .collect();
    pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(pb::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn ints(name: &str, values: &[i64]) -> pb::TensorProto {
    pb::TensorProto {
        name: name.into(),
        dims: vec![values.len() as i64],
        data_type: DataType::Int64 as i32,
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

pub fn scalar_int(name: &str, value: i64) -> pb::TensorProto {
    pb::TensorProto {
        name: name.into(),
        data_type: DataType::Int64 as i32,
        int64_data: vec![value],
        ..Default::default()
    }
}

/// An FP32 tensor of `dims`, every element `fill`.
pub fn floats(name: &str, dims: &[i64], fill: f32) -> pb::TensorProto {
    let count: i64 = dims.iter().product();
    pb::TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: DataType::Float as i32,
        raw_data: fill.to_le_bytes().repeat(count as usize),
        ..Default::default()
    }
}

pub fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attribute: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

/// A tensor attribute (`ConstantOfShape`'s `value`, `Constant`'s `value`).
pub fn tensor_attribute(name: &str, tensor: pb::TensorProto) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: AttributeType::Tensor as i32,
        t: Some(tensor),
        ..Default::default()
    }
}

/// A model of opset 13 around one graph.
pub fn model(
    nodes: Vec<pb::NodeProto>,
    initializer: Vec<pb::TensorProto>,
    input: Vec<pb::ValueInfoProto>,
    output: Vec<pb::ValueInfoProto>,
) -> Vec<u8> {
    pb::ModelProto {
        ir_version: 7,
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(pb::GraphProto {
            name: "g".into(),
            node: nodes,
            initializer,
            input,
            output,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// `y = x + c` where `c` is `ConstantOfShape(shape)` of one FP32: a constant tract folds
/// at load, of `shape`'s size (`x` keeps it from being a constant graph).
pub fn constant_of_shape(shape: &[i64]) -> Vec<u8> {
    model(
        vec![
            node(
                "ConstantOfShape",
                "bomb",
                &["shape"],
                &["c"],
                vec![tensor_attribute("value", floats("v", &[1], 1.0))],
            ),
            node("Add", "add", &["x", "c"], &["y"], vec![]),
        ],
        vec![ints("shape", shape)],
        vec![value("x", &[Dim::Fixed(1)])],
        vec![value("y", &[])],
    )
}

/// `y = x + Expand(c, shape)`, `c` a one-element FP32 constant.
pub fn expand(shape: &[i64]) -> Vec<u8> {
    model(
        vec![
            node("Expand", "bomb", &["c", "shape"], &["e"], vec![]),
            node("Add", "add", &["x", "e"], &["y"], vec![]),
        ],
        vec![floats("c", &[1], 1.0), ints("shape", shape)],
        vec![value("x", &[Dim::Fixed(1)])],
        vec![value("y", &[])],
    )
}

/// `y = x + Cast(Range(0, limit, 1))`.
pub fn range(limit: i64) -> Vec<u8> {
    model(
        vec![
            node("Range", "bomb", &["start", "limit", "delta"], &["r"], vec![]),
            node(
                "Cast",
                "cast",
                &["r"],
                &["rf"],
                vec![pb::AttributeProto {
                    name: "to".into(),
                    r#type: AttributeType::Int as i32,
                    i: DataType::Float as i64,
                    ..Default::default()
                }],
            ),
            node("Add", "add", &["x", "rf"], &["y"], vec![]),
        ],
        vec![
            scalar_int("start", 0),
            scalar_int("limit", limit),
            scalar_int("delta", 1),
        ],
        vec![value("x", &[Dim::Fixed(1)])],
        vec![value("y", &[])],
    )
}

/// An initializer of `dims` whose data is not in the file (a declared size only).
pub fn hollow_initializer(dims: &[i64]) -> Vec<u8> {
    let hollow = pb::TensorProto {
        name: "w".into(),
        dims: dims.to_vec(),
        data_type: DataType::Float as i32,
        ..Default::default()
    };
    model(
        vec![node("Add", "add", &["x", "w"], &["y"], vec![])],
        vec![hollow],
        vec![value("x", &[Dim::Fixed(1)])],
        vec![value("y", &[])],
    )
}

/// `nodes` chained `Relu`s from `x` [N, 4] to `y`.
pub fn chain(nodes: usize) -> Vec<u8> {
    let names: Vec<String> = (0..=nodes)
        .map(|i| if i == 0 { "x".into() } else { format!("v{i}") })
        .collect();
    let mut graph: Vec<pb::NodeProto> = (0..nodes)
        .map(|i| node("Relu", &format!("relu{i}"), &[&names[i]], &[&names[i + 1]], vec![]))
        .collect();
    graph.push(node("Identity", "out", &[&names[nodes]], &["y"], vec![]));
    model(
        graph,
        vec![],
        vec![value("x", &[Dim::N, Dim::Fixed(4)])],
        vec![value("y", &[])],
    )
}

/// `count` chained MatMuls by a `size` x `size` FP32 weight (all 1/size, so values stay
/// finite) from `x` [`rows`, `size`]: heavy but legal compute. `rows` fixed when given,
/// the symbol `N` otherwise.
pub fn matmul_chain(count: usize, size: i64, rows: Option<i64>) -> Vec<u8> {
    let mut nodes = Vec::new();
    let mut last = "x".to_string();
    for i in 0..count {
        let out = if i + 1 == count {
            "y".to_string()
        } else {
            format!("m{i}")
        };
        nodes.push(node("MatMul", &format!("matmul{i}"), &[&last, "w"], &[&out], vec![]));
        last = out;
    }
    let rows = rows.map_or(Dim::N, Dim::Fixed);
    model(
        nodes,
        vec![floats("w", &[size, size], 1.0 / size as f32)],
        vec![value("x", &[rows, Dim::Fixed(size)])],
        vec![value("y", &[])],
    )
}

/// `y = x · w`, `x` [N, 1] and `w` [1, `width`]: its output is `width` floats per row,
/// so the batch decides how large it is.
pub fn widen(width: i64) -> Vec<u8> {
    model(
        vec![node("MatMul", "widen", &["x", "w"], &["y"], vec![])],
        vec![floats("w", &[1, width], 1.0)],
        vec![value("x", &[Dim::N, Dim::Fixed(1)])],
        vec![value("y", &[])],
    )
}

/// ONNX Runtime's library for the tests of its backend: `TENSORPLUG_ONNXRUNTIME_LIB`, else
/// the `onnxruntime` wheel in the target directory's `python-env`
/// (tests/conformance/requirements.txt). `None` (with a line saying the tests are skipped)
/// when there is none, unless `TENSORPLUG_REQUIRE_ONNXRUNTIME=1`: then a missing library
/// fails the test.
pub fn onnxruntime_library() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let given = std::env::var_os("TENSORPLUG_ONNXRUNTIME_LIB").map(PathBuf::from);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let wheel = || {
        std::fs::read_dir(target.join("python-env/lib"))
            .ok()?
            .flatten()
            .map(|python| python.path().join("site-packages/onnxruntime/capi"))
            .filter_map(|capi| std::fs::read_dir(capi).ok())
            .flat_map(|files| files.flatten().map(|f| f.path()))
            .find(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libonnxruntime.so."))
            })
    };
    let found = given.filter(|path| path.is_file()).or_else(wheel);
    if found.is_none() {
        let missing = "no ONNX Runtime library: set TENSORPLUG_ONNXRUNTIME_LIB, or install onnxruntime==1.32.0 in \
            the target directory's python-env (scripts/python-env.sh)";
        if std::env::var_os("TENSORPLUG_REQUIRE_ONNXRUNTIME").is_some_and(|v| v == "1") {
            panic!("{missing} (TENSORPLUG_REQUIRE_ONNXRUNTIME=1)");
        }
        println!("skipped, {missing}");
    }
    found
}
