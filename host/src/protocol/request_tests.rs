//! Tests of `decode_request` (and JSON round trips through `encode_response`).

use half::f16;
use serde_json::{json, Value};

use super::*;
use crate::model::tensor::push_bytes_element;
use crate::protocol::ParameterValue;
use crate::protocol::{encode_response, OutputOptions};

fn decode(body: &str) -> Result<InferRequest, ProtocolError> {
    decode_request(body.as_bytes(), None)
}

fn decode_value(body: Value) -> Result<InferRequest, ProtocolError> {
    decode_request(body.to_string().as_bytes(), None)
}

fn err(body: &str) -> String {
    match decode(body) {
        Ok(r) => panic!("expected an error, decoded {r:?}"),
        Err(e) => e.to_string(),
    }
}

fn err_value(body: Value) -> String {
    err(&body.to_string())
}

fn one_input(datatype: &str, shape: Value, data: Value) -> Value {
    json!({"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}]})
}

fn tensor(name: &str, datatype: DataType, shape: &[u64], data: Vec<u8>) -> Tensor {
    Tensor {
        name: name.into(),
        datatype,
        shape: shape.to_vec(),
        data,
    }
}

fn le<T: Copy, const N: usize>(values: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|v| f(*v)).collect()
}

/// Decodes `data` as `datatype`, checks the bytes, then re-encodes it as a JSON response
/// and checks the flat data comes back as `expected_out`.
fn round_trip(datatype: &str, data: Value, bytes: Vec<u8>, expected_out: Value) {
    let n = match &data {
        Value::Array(items) => items.len() as u64,
        _ => 1,
    };
    let request = decode_value(one_input(datatype, json!([n]), data)).unwrap();
    let dt = DataType::parse(datatype).unwrap();
    assert_eq!(request.inputs, vec![tensor("x", dt, &[n], bytes)], "{datatype}");
    let response = encode_response("m", "1", None, &request.inputs, &OutputOptions::default());
    assert_eq!(response.json_header_len, None);
    let body: Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(
        body,
        json!({"model_name": "m", "model_version": "1", "outputs": [
            {"name": "x", "datatype": datatype, "shape": [n], "data": expected_out}]}),
        "{datatype}"
    );
}

#[test]
fn every_datatype_round_trips_through_json() {
    round_trip(
        "BOOL",
        json!([true, false, true]),
        vec![1, 0, 1],
        json!([true, false, true]),
    );
    round_trip("UINT8", json!([0, 255]), vec![0, 255], json!([0, 255]));
    round_trip(
        "UINT16",
        json!([0, 65535]),
        le(&[0u16, 65535], u16::to_le_bytes),
        json!([0, 65535]),
    );
    round_trip(
        "UINT32",
        json!([7, 4294967295u32]),
        le(&[7u32, u32::MAX], u32::to_le_bytes),
        json!([7, 4294967295u32]),
    );
    round_trip(
        "UINT64",
        json!([0, u64::MAX]),
        le(&[0u64, u64::MAX], u64::to_le_bytes),
        json!([0, u64::MAX]),
    );
    round_trip(
        "INT8",
        json!([-128, 127]),
        le(&[-128i8, 127], i8::to_le_bytes),
        json!([-128, 127]),
    );
    round_trip(
        "INT16",
        json!([-32768, 32767]),
        le(&[i16::MIN, i16::MAX], i16::to_le_bytes),
        json!([-32768, 32767]),
    );
    round_trip(
        "INT32",
        json!([i32::MIN, 3.0]),
        le(&[i32::MIN, 3], i32::to_le_bytes),
        json!([i32::MIN, 3]),
    );
    round_trip(
        "INT64",
        json!([i64::MIN, i64::MAX]),
        le(&[i64::MIN, i64::MAX], i64::to_le_bytes),
        json!([i64::MIN, i64::MAX]),
    );
    round_trip(
        "FP16",
        json!([0.1, -2.5, 65504, 1]),
        le(
            &[f16::from_f32(0.1), f16::from_f32(-2.5), f16::MAX, f16::ONE],
            f16::to_le_bytes,
        ),
        // Shortest decimals that read back to the same FP16 (65504 -> 65500).
        json!([0.1, -2.5, 65500.0, 1.0]),
    );
    round_trip(
        "FP32",
        json!([0.1, -1.5e-7, 3.4028235e38, 2]),
        le(&[0.1f32, -1.5e-7, f32::MAX, 2.0], f32::to_le_bytes),
        json!([0.1, -1.5e-7, 3.4028235e38, 2.0]),
    );
    let third = 1.0f64 / 3.0;
    round_trip(
        "FP64",
        json!([0.1, third, 5e-324, 0.30000000000000004]),
        le(&[0.1f64, third, 5e-324, 0.1 + 0.2], f64::to_le_bytes),
        json!([0.1, third, 5e-324, 0.30000000000000004]),
    );
    let mut bytes = Vec::new();
    for s in ["", "héllo", "\u{1F600}"] {
        push_bytes_element(&mut bytes, s.as_bytes());
    }
    round_trip(
        "BYTES",
        json!(["", "héllo", "\u{1F600}"]),
        bytes,
        json!(["", "héllo", "\u{1F600}"]),
    );
}

#[test]
fn fp32_prints_without_widening_digits() {
    let request = decode(r#"{"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[0.1,0.7,1e-3]}]}"#).unwrap();
    let response = encode_response("m", "1", None, &request.inputs, &OutputOptions::default());
    let text = String::from_utf8(response.body).unwrap();
    assert!(text.contains(r#""data":[0.1,0.7,0.001]"#), "{text}");
}

#[test]
fn fp16_values_are_rounded_and_printed_shortest() {
    let request = decode_value(one_input("FP16", json!([4]), json!([0.1, 0.333, 1e-8, -0.0]))).unwrap();
    let expected = [
        f16::from_f64(0.1),
        f16::from_f64(0.333),
        f16::from_f64(1e-8),
        f16::NEG_ZERO,
    ];
    assert_eq!(request.inputs[0].data, le(&expected, f16::to_le_bytes));
    let response = encode_response("m", "1", None, &request.inputs, &OutputOptions::default());
    let text = String::from_utf8(response.body).unwrap();
    assert!(text.contains(r#""data":[0.1,0.333,0.0,-0.0]"#), "{text}");
    assert_eq!(
        err_value(one_input("FP16", json!([1]), json!([70000]))),
        "input 'x': value 70000 does not fit FP16"
    );
}

#[test]
fn nested_and_flat_data_decode_identically() {
    let flat = decode_value(one_input("INT32", json!([2, 2, 2]), json!([1, 2, 3, 4, 5, 6, 7, 8]))).unwrap();
    let nested = decode_value(one_input(
        "INT32",
        json!([2, 2, 2]),
        json!([[[1, 2], [3, 4]], [[5, 6], [7, 8]]]),
    ))
    .unwrap();
    let partly = decode_value(one_input(
        "INT32",
        json!([2, 2, 2]),
        json!([[1, 2, 3, 4], [5, [6, [7]], 8]]),
    ))
    .unwrap();
    assert_eq!(flat, nested);
    assert_eq!(flat, partly);
    assert_eq!(flat.inputs[0].data, le(&[1i32, 2, 3, 4, 5, 6, 7, 8], i32::to_le_bytes));
    let scalar = decode_value(one_input("FP64", json!([]), json!(2.5))).unwrap();
    assert_eq!(scalar.inputs[0].data, 2.5f64.to_le_bytes());
}

#[test]
fn field_order_does_not_matter() {
    let usual = decode(r#"{"id":"a","inputs":[{"name":"x","shape":[2],"datatype":"UINT8","data":[1,2]}]}"#).unwrap();
    let data_first =
        decode(r#"{"inputs":[{"data":[1,2],"shape":[2],"name":"x","datatype":"UINT8"}],"id":"a"}"#).unwrap();
    assert_eq!(usual, data_first);
    assert_eq!(usual.id.as_deref(), Some("a"));
    // A bad element is reported with the input's name even when the name comes last.
    assert_eq!(
        err(r#"{"inputs":[{"datatype":"UINT8","data":[1,[2,300]],"shape":[3],"name":"late"}]}"#),
        "input 'late': value 300 does not fit UINT8"
    );
    assert_eq!(
        err(r#"{"inputs":[{"data":[1,"no"],"datatype":"UINT8","shape":[2],"name":"later"}]}"#),
        r#"input 'later': data element 1 is "no", expected an integer"#
    );
}

#[test]
fn element_errors_name_the_element() {
    let mut data: Vec<Value> = (0..63).map(|i| json!(i as f64 / 2.0)).collect();
    let body = json!({"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP32", "data": data.clone()}]});
    assert_eq!(
        err_value(body),
        "input 'input-0': shape [1, 64] needs 64 FP32 values, got 63"
    );
    data.push(json!(1));
    data.push(json!(1));
    let body = json!({"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP32", "data": data}]});
    assert_eq!(
        err_value(body),
        "input 'input-0': shape [1, 64] needs 64 FP32 values, got 65"
    );

    let cases = [
        (
            "FP32",
            json!([1, 2, 3, "abc"]),
            r#"input 'x': data element 3 is "abc", expected a number"#,
        ),
        (
            "FP32",
            json!([[1, 2], [null, 4]]),
            "input 'x': data element 2 is null, expected a number",
        ),
        (
            "FP64",
            json!([{"a": 1}]),
            "input 'x': data element 0 is an object, expected a number",
        ),
        (
            "BOOL",
            json!([true, 1]),
            "input 'x': data element 1 is 1, expected true or false",
        ),
        (
            "BYTES",
            json!(["a", 5]),
            "input 'x': data element 1 is 5, expected a string",
        ),
        (
            "INT32",
            json!([1.5]),
            "input 'x': data element 0 is 1.5, expected an integer",
        ),
        (
            "INT32",
            json!([true]),
            "input 'x': data element 0 is true, expected an integer",
        ),
        ("UINT8", json!([300]), "input 'x': value 300 does not fit UINT8"),
        ("UINT8", json!([-1]), "input 'x': value -1 does not fit UINT8"),
        ("INT8", json!([-129]), "input 'x': value -129 does not fit INT8"),
        ("UINT16", json!([65536]), "input 'x': value 65536 does not fit UINT16"),
        ("INT16", json!([40000]), "input 'x': value 40000 does not fit INT16"),
        (
            "UINT32",
            json!([4294967296u64]),
            "input 'x': value 4294967296 does not fit UINT32",
        ),
        (
            "INT32",
            json!([2147483648u64]),
            "input 'x': value 2147483648 does not fit INT32",
        ),
        (
            "INT64",
            json!([9223372036854775808u64]),
            "input 'x': value 9223372036854775808 does not fit INT64",
        ),
        ("UINT64", json!([-5]), "input 'x': value -5 does not fit UINT64"),
        ("UINT64", json!([1e20]), "input 'x': value 1e+20 does not fit UINT64"),
        ("INT64", json!([1e300]), "input 'x': value 1e+300 does not fit INT64"),
        ("FP32", json!([1e39]), "input 'x': value 1e+39 does not fit FP32"),
    ];
    for (datatype, data, message) in cases {
        let n = data.as_array().map_or(1, |a| a.len()) as u64;
        assert_eq!(err_value(one_input(datatype, json!([n]), data)), message);
    }
    // Literal too large for u64 parses as a float and is still a range error.
    assert_eq!(
        err(r#"{"inputs":[{"name":"x","shape":[1],"datatype":"UINT64","data":[18446744073709551616]}]}"#),
        "input 'x': value 1.8446744073709552e+19 does not fit UINT64"
    );
    // Long strings are shortened in messages.
    let long = "z".repeat(1000);
    assert_eq!(
        err_value(one_input("FP32", json!([1]), json!([long]))),
        format!(
            r#"input 'x': data element 0 is "{}...", expected a number"#,
            "z".repeat(48)
        )
    );
}

#[test]
fn structural_errors_are_precise() {
    let cases: Vec<(Value, &str)> = vec![
        (json!([1, 2]), "request: the body must be a JSON object, got an array"),
        (json!("hi"), r#"request: the body must be a JSON object, got "hi""#),
        (json!({}), r#"request: missing "inputs""#),
        (
            json!({"inputs": {}}),
            r#"request: "inputs" must be an array, got an object"#,
        ),
        (
            json!({"inputs": [7]}),
            "inputs[0]: each input must be a JSON object, got 7",
        ),
        (
            json!({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}),
            r#"inputs[0]: missing "name""#,
        ),
        (
            json!({"inputs": [{"name": 3, "shape": [1], "datatype": "FP32", "data": [1]}]}),
            r#"inputs[0]: "name" must be a string, got 3"#,
        ),
        (
            json!({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]}),
            r#"input 'x': missing "shape""#,
        ),
        (
            json!({"inputs": [{"name": "x", "shape": [1], "data": [1]}]}),
            r#"input 'x': missing "datatype""#,
        ),
        (
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}),
            r#"input 'x': missing "data" (or parameters.binary_data_size)"#,
        ),
        (
            one_input("FP33", json!([1]), json!([1])),
            r#"input 'x': datatype "FP33" is not a V2 datatype"#,
        ),
        (
            one_input("fp32", json!([1]), json!([1])),
            r#"input 'x': datatype "fp32" is not a V2 datatype"#,
        ),
        (
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": 5, "data": [1]}]}),
            "input 'x': datatype 5 is not a V2 datatype",
        ),
        (
            one_input("FP32", json!([-1, 3]), json!([1, 2, 3])),
            "input 'x': shape [-1, 3] has negative dimension -1",
        ),
        (
            one_input("FP32", json!([1.5]), json!([1])),
            r#"input 'x': "shape" must be an array of non-negative integers, got [1.5]"#,
        ),
        (
            one_input("FP32", json!("3"), json!([1])),
            r#"input 'x': "shape" must be an array of non-negative integers, got "3""#,
        ),
        (
            one_input("FP32", json!([u64::MAX, 4]), json!([1])),
            "input 'x': shape [18446744073709551615, 4] has too many elements",
        ),
        (
            json!({"inputs": [
                {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
                {"name": "x", "shape": [1], "datatype": "FP32", "data": [2]}]}),
            "input 'x' appears more than once",
        ),
        (
            json!({"id": 5, "inputs": []}),
            r#"request: "id" must be a string, got 5"#,
        ),
        (
            json!({"parameters": [], "inputs": []}),
            r#"request: "parameters" must be a JSON object, got []"#,
        ),
        (
            json!({"parameters": {"binary_data_output": "yes"}, "inputs": []}),
            r#"request: parameters.binary_data_output must be true or false, got "yes""#,
        ),
        (
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1], "parameters": 1}]}),
            r#"input 'x': "parameters" must be a JSON object, got 1"#,
        ),
        (
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"shared_memory_region": "r"}}]}),
            r#"input 'x': parameter "shared_memory_region" is not supported"#,
        ),
        (
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": "4"}}]}),
            r#"input 'x': parameters.binary_data_size must be a non-negative integer, got "4""#,
        ),
        (
            json!({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]}),
            "input 'x': parameters.binary_data_size needs the Inference-Header-Content-Length header",
        ),
        (
            json!({"inputs": [], "outputs": {}}),
            r#"request: "outputs" must be an array, got {}"#,
        ),
        (
            json!({"inputs": [], "outputs": ["y"]}),
            r#"outputs[0]: each requested output must be a JSON object, got "y""#,
        ),
        (json!({"inputs": [], "outputs": [{}]}), r#"outputs[0]: missing "name""#),
        (
            json!({"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]}),
            "output 'y': parameters.binary_data must be true or false, got 1",
        ),
        (
            json!({"inputs": [], "outputs": [{"name": "y", "parameters": {"classification": 3}}]}),
            r#"output 'y': parameter "classification" is not supported"#,
        ),
        (
            json!({"inputs": [], "outputs": [{"name": "y"}, {"name": "y"}]}),
            "output 'y' is requested more than once",
        ),
    ];
    for (body, message) in cases {
        assert_eq!(err_value(body), message);
    }
    assert_eq!(
        err(r#"{"inputs":[],"inputs":[]}"#),
        r#"request: field "inputs" appears more than once"#
    );
    assert_eq!(
        err(r#"{"inputs":[{"name":"x","shape":[1],"shape":[1],"datatype":"FP32","data":[1]}]}"#),
        r#"input 'x': field "shape" appears more than once"#
    );
}

#[test]
fn broken_json_reports_its_position() {
    assert_eq!(
        err(r#"{"inputs": [1,}"#),
        "invalid JSON at line 1 column 15: expected value"
    );
    assert_eq!(
        err(r#"{"inputs": [{"name": "x", "#),
        "invalid JSON at line 1 column 26: EOF while parsing a value"
    );
    assert_eq!(
        err("{\"inputs\": []}\n  x"),
        "invalid JSON at line 2 column 3: trailing characters"
    );
    assert_eq!(err(""), "invalid JSON at line 1 column 0: EOF while parsing a value");
    assert_eq!(
        err(r#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[NaN]}]}"#),
        "invalid JSON at line 1 column 62: expected value"
    );
    // Deep nesting is refused by the parser's recursion limit, not by a stack overflow.
    let deep = format!(
        r#"{{"inputs":[{{"name":"x","shape":[1],"datatype":"FP32","data":{}1{}}}]}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(err(&deep).contains("recursion limit exceeded"));
}

#[test]
fn huge_declared_shapes_are_rejected_without_allocating() {
    assert_eq!(
        err_value(one_input("FP32", json!([1_000_000_000_000u64]), json!([1.0]))),
        "input 'x': shape [1000000000000] needs 1000000000000 FP32 values, got 1"
    );
    assert_eq!(
        err_value(one_input("BYTES", json!([1_000_000_000_000u64]), json!(["a"]))),
        "input 'x': shape [1000000000000] needs 1000000000000 BYTES values, got 1"
    );
    let header = json!({"inputs": [{"name": "x", "shape": [1_000_000_000_000u64], "datatype": "FP64",
        "parameters": {"binary_data_size": 8}}]})
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend_from_slice(&1.0f64.to_le_bytes());
    assert_eq!(
        decode_request(&body, Some(header.len())).unwrap_err().to_string(),
        "input 'x': shape [1000000000000] needs 8000000000000 bytes of FP64 binary data, binary_data_size is 8"
    );
}

/// JSON header + binary tail for a request.
fn binary_body(header: &Value, tail: &[u8]) -> (Vec<u8>, usize) {
    let json = header.to_string();
    let mut body = json.clone().into_bytes();
    body.extend_from_slice(tail);
    (body, json.len())
}

#[test]
fn binary_inputs_mix_with_json_inputs() {
    let a = le(&[1.0f32, 2.0, 3.0, 4.0], f32::to_le_bytes);
    let mut s = Vec::new();
    push_bytes_element(&mut s, b"\xff\xfe not utf-8");
    push_bytes_element(&mut s, b"");
    let header = json!({
        "id": "bin",
        "parameters": {"binary_data_output": true, "timeout": 1500},
        "inputs": [
            {"name": "a", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": a.len()}},
            {"name": "j", "shape": [3], "datatype": "INT16", "data": [1, -2, 3]},
            {"name": "s", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": s.len()}},
        ],
        "outputs": [{"name": "s"}, {"name": "a", "parameters": {"binary_data": false}}],
    });
    let tail = [a.clone(), s.clone()].concat();
    let (body, len) = binary_body(&header, &tail);
    let request = decode_request(&body, Some(len)).unwrap();
    assert_eq!(
        request.inputs,
        vec![
            tensor("a", DataType::Fp32, &[2, 2], a),
            tensor("j", DataType::Int16, &[3], le(&[1i16, -2, 3], i16::to_le_bytes)),
            tensor("s", DataType::Bytes, &[2], s),
        ]
    );
    assert_eq!(request.id.as_deref(), Some("bin"));
    assert_eq!(request.timeout_us(), Ok(Some(1500)));
    assert!(request.binary_output("s"));
    assert!(!request.binary_output("a"));
    assert!(request.binary_output("unlisted"));
    assert_eq!(
        request.outputs,
        vec![
            RequestedOutput {
                name: "s".into(),
                binary_data: None
            },
            RequestedOutput {
                name: "a".into(),
                binary_data: Some(false)
            },
        ]
    );

    // The same JSON with a header length and an empty tail is fine when nothing is binary.
    let plain = json!({"inputs": [{"name": "j", "shape": [1], "datatype": "INT16", "data": [1]}]});
    let (body, len) = binary_body(&plain, &[]);
    assert!(decode_request(&body, Some(len)).is_ok());
}

#[test]
fn binary_size_errors() {
    let header = |size_a: u64, size_s: u64, shape_s: u64| {
        json!({"inputs": [
            {"name": "a", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": size_a}},
            {"name": "s", "shape": [shape_s], "datatype": "BYTES", "parameters": {"binary_data_size": size_s}},
        ]})
    };
    let a = le(&[1.0f32, 2.0], f32::to_le_bytes);
    let mut s = Vec::new();
    push_bytes_element(&mut s, b"xy");
    let tail = [a.clone(), s.clone()].concat();
    let decode_err = |header: Value, tail: &[u8]| {
        let (body, len) = binary_body(&header, tail);
        decode_request(&body, Some(len)).unwrap_err().to_string()
    };
    assert!(decode_request(
        &binary_body(&header(8, 6, 1), &tail).0,
        Some(header(8, 6, 1).to_string().len())
    )
    .is_ok());
    assert_eq!(
        decode_err(header(8, 6, 1), &tail[..13]),
        "binary data after the JSON header is 13 bytes but the inputs' binary_data_size add up to 14"
    );
    assert_eq!(
        decode_err(header(8, 6, 1), &[tail.as_slice(), &[0]].concat()),
        "binary data after the JSON header is 15 bytes but the inputs' binary_data_size add up to 14"
    );
    assert_eq!(
        decode_err(header(12, 2, 1), &tail),
        "input 'a': shape [2] needs 8 bytes of FP32 binary data, binary_data_size is 12"
    );
    assert_eq!(
        decode_err(header(8, 6, 2), &tail),
        "input 's': shape [2] needs 2 BYTES values, got 1"
    );
    assert_eq!(
        decode_err(header(8, 5, 1), &tail[..13]),
        "input 's': binary BYTES data is malformed: element at byte 0 declares 2 bytes, only 1 remain"
    );
    assert_eq!(
        decode_err(header(8, u64::MAX, 1), &tail),
        "binary data after the JSON header is 14 bytes but the inputs' binary_data_size add up to 18446744073709551623"
    );
    let both = json!({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1],
        "parameters": {"binary_data_size": 4}}]});
    assert_eq!(
        decode_err(both, &[0; 4]),
        "input 'a': has both \"data\" and parameters.binary_data_size"
    );
    // No binary inputs, but bytes after the JSON.
    let plain = json!({"inputs": [{"name": "j", "shape": [1], "datatype": "INT16", "data": [1]}]});
    assert_eq!(
        decode_err(plain, b"xx"),
        "binary data after the JSON header is 2 bytes but the inputs' binary_data_size add up to 0"
    );
}

#[test]
fn header_length_past_the_body_is_rejected() {
    let body = br#"{"inputs":[]}"#;
    assert_eq!(
        decode_request(body, Some(100)).unwrap_err(),
        ProtocolError::HeaderLengthExceedsBody {
            header_len: 100,
            body_len: 13
        }
    );
    assert_eq!(
        decode_request(body, Some(100)).unwrap_err().to_string(),
        "Inference-Header-Content-Length is 100 but the body has only 13 bytes"
    );
    // A header length that cuts the JSON short is a JSON error.
    assert!(decode_request(body, Some(5))
        .unwrap_err()
        .to_string()
        .starts_with("invalid JSON"));
}

#[test]
fn request_parameters_helpers() {
    let request = decode(r#"{"inputs":[],"parameters":{"timeout":-3}}"#).unwrap();
    assert_eq!(
        request.timeout_us().unwrap_err().to_string(),
        "request: parameter \"timeout\" must be a non-negative integer (microseconds), got -3"
    );
    let request = decode(r#"{"inputs":[],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}"#).unwrap();
    assert_eq!(request.timeout_us(), Ok(None));
    assert!(request.binary_output("y"));
    assert!(!request.binary_output("z"));
    assert!(request.parameters.is_empty());
    let request = decode(r#"{"inputs":[],"parameters":{"custom":{"k":1}}}"#).unwrap();
    // Structured values are accepted (clients send them for their own bookkeeping) but
    // not kept.
    assert_eq!(request.parameters.get("custom"), Some(&ParameterValue::Structured));
}

#[test]
fn unknown_fields_are_ignored() {
    let request = decode(
        r#"{"extra":[1,{"a":2}],"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[false],"comment":"hi"}]}"#,
    )
    .unwrap();
    assert_eq!(request.inputs, vec![tensor("x", DataType::Bool, &[1], vec![0])]);
}

#[test]
fn escaped_strings_and_keys_decode() {
    let request =
        decode(r#"{"inputs":[{"n\u0061me":"x\"y","shape":[1],"datatype":"BYTES","data":["a\nb\u00e9"]}]}"#).unwrap();
    let mut bytes = Vec::new();
    push_bytes_element(&mut bytes, "a\nbé".as_bytes());
    assert_eq!(request.inputs, vec![tensor("x\"y", DataType::Bytes, &[1], bytes)]);
}

#[test]
fn zero_sized_tensors() {
    let request = decode_value(one_input("FP32", json!([0, 4]), json!([]))).unwrap();
    assert_eq!(request.inputs[0].shape, vec![0, 4]);
    assert!(request.inputs[0].data.is_empty());
}

/// Pseudo-random bit patterns (xorshift), skipping non-finite values JSON cannot carry.
fn pseudo_random_bits(count: usize) -> impl Iterator<Item = u64> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    std::iter::repeat_with(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    })
    .take(count)
}

#[test]
fn floats_round_trip_bit_exactly_through_json() {
    let f64s: Vec<f64> = pseudo_random_bits(20_000)
        .map(f64::from_bits)
        .filter(|v| v.is_finite())
        .collect();
    let f32s: Vec<f32> = pseudo_random_bits(20_000)
        .map(|b| f32::from_bits(b as u32))
        .filter(|v| v.is_finite())
        .collect();
    let outputs = [
        tensor("d", DataType::Fp64, &[f64s.len() as u64], le(&f64s, f64::to_le_bytes)),
        tensor("f", DataType::Fp32, &[f32s.len() as u64], le(&f32s, f32::to_le_bytes)),
    ];
    let response = encode_response("m", "1", None, &outputs, &OutputOptions::default());
    let body: Value = serde_json::from_slice(&response.body).unwrap();
    let request = decode_value(json!({"inputs": body["outputs"]})).unwrap();
    let back_f64: Vec<f64> = request.inputs[0]
        .data
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let back_f32: Vec<f32> = request.inputs[1]
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let bad_f64: Vec<(f64, f64)> = f64s
        .iter()
        .zip(&back_f64)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .map(|(a, b)| (*a, *b))
        .collect();
    let bad_f32: Vec<(f32, f32)> = f32s
        .iter()
        .zip(&back_f32)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .map(|(a, b)| (*a, *b))
        .collect();
    assert_eq!(back_f64.len(), f64s.len());
    assert_eq!(back_f32.len(), f32s.len());
    assert!(
        bad_f64.is_empty(),
        "{} FP64 mismatches, e.g. {:?}",
        bad_f64.len(),
        &bad_f64[..bad_f64.len().min(5)]
    );
    assert!(
        bad_f32.is_empty(),
        "{} FP32 mismatches, e.g. {:?}",
        bad_f32.len(),
        &bad_f32[..bad_f32.len().min(5)]
    );
}

#[test]
fn every_finite_fp16_round_trips_through_json() {
    let halves: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).filter(|h| h.is_finite()).collect();
    let output = tensor(
        "h",
        DataType::Fp16,
        &[halves.len() as u64],
        le(&halves, f16::to_le_bytes),
    );
    let response = encode_response("m", "1", None, std::slice::from_ref(&output), &OutputOptions::default());
    let body: Value = serde_json::from_slice(&response.body).unwrap();
    let request = decode_value(json!({"inputs": body["outputs"]})).unwrap();
    assert!(request.inputs[0] == output, "FP16 values changed through JSON");
}

/// Caps of `super::limits`, each refused with a message that names it, before anything
/// large is allocated.
#[test]
fn requests_beyond_the_caps_are_refused() {
    use crate::protocol::limits::*;
    let input = |name: &str| json!({"name": name, "shape": [1], "datatype": "BOOL", "data": [true]});
    let many: Vec<Value> = (0..=MAX_INPUTS).map(|i| input(&format!("x{i}"))).collect();
    assert_eq!(
        err_value(json!({ "inputs": many })),
        format!("request: more than {MAX_INPUTS} inputs")
    );
    let long = "n".repeat(MAX_NAME_BYTES + 1);
    assert_eq!(
        err_value(json!({ "inputs": [input(&long)] })),
        format!(
            "inputs[0]: \"name\" is {} bytes, more than the limit of {MAX_NAME_BYTES}",
            MAX_NAME_BYTES + 1
        )
    );
    let id = "i".repeat(1 << 20);
    let message = err_value(json!({ "id": id, "inputs": [] }));
    assert!(message.starts_with("request: \"id\" is 1048576 bytes"), "{message}");
    let parameters: serde_json::Map<String, Value> =
        (0..=MAX_PARAMETERS).map(|i| (format!("p{i}"), json!(i))).collect();
    assert_eq!(
        err_value(json!({ "inputs": [], "parameters": parameters })),
        format!("request: more than {MAX_PARAMETERS} fields or parameters")
    );
    let outputs: Vec<Value> = (0..=MAX_OUTPUTS).map(|i| json!({"name": format!("y{i}")})).collect();
    assert_eq!(
        err_value(json!({ "inputs": [], "outputs": outputs })),
        format!("request: more than {MAX_OUTPUTS} requested outputs")
    );
    let shape = vec![1; MAX_DIMS + 1];
    assert_eq!(
        err_value(one_input("BOOL", json!(shape), json!([true]))),
        format!("input 'x': more than {MAX_DIMS} shape dimensions")
    );
}

#[test]
fn invalid_utf8_and_deep_nesting_are_refused_anywhere() {
    let mut body = br#"{"inputs":[],"extra":"ok"#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe]);
    body.extend_from_slice(br#""}"#);
    assert_eq!(
        decode_request(&body, None).unwrap_err(),
        ProtocolError::InvalidUtf8 { offset: 24 }
    );
    let deep = format!(
        r#"{{"inputs":[],"extra":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(err(&deep).contains("recursion limit"), "{}", err(&deep));
    let deep_parameter = format!(
        r#"{{"inputs":[],"parameters":{{"p":{}{}}}}}"#,
        "[".repeat(1000),
        "]".repeat(1000)
    );
    assert!(err(&deep_parameter).contains("recursion limit"));
}

#[test]
fn key_order_does_not_change_the_answer() {
    let usual = decode(r#"{"id":"a","inputs":[{"name":"x","shape":[2],"datatype":"INT32","data":[1,2]}]}"#).unwrap();
    let reversed = decode(r#"{"inputs":[{"data":[1,2],"datatype":"INT32","shape":[2],"name":"x"}],"id":"a"}"#).unwrap();
    assert_eq!(usual, reversed);
}

#[test]
fn declared_shapes_reserve_nothing_beyond_what_the_body_holds() {
    // Many inputs, each declaring a huge shape and holding one element: before the fix
    // each reserved up to half the body's length in elements, quadratic in the body.
    let inputs: Vec<Value> = (0..1000)
        .map(|i| json!({"name": format!("x{i}"), "shape": [100_000_000], "datatype": "FP64", "data": [1]}))
        .collect();
    let message = err_value(json!({ "inputs": inputs }));
    assert!(message.contains("needs 100000000 FP64 values, got 1"), "{message}");
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 2000, failure_persistence: None, ..Default::default() })]

    /// Whatever bytes arrive, decoding answers (never panics), and what it accepts is
    /// consistent: every tensor's bytes match its shape and datatype.
    #[test]
    fn decoding_never_panics_on_mutated_requests(
        edits in proptest::collection::vec((0usize..400, proptest::prelude::any::<u8>(), 0usize..3), 1..6),
        header_len in proptest::option::of(0usize..400),
    ) {
        let good = json!({
            "id": "r", "parameters": {"binary_data_output": false},
            "inputs": [
                {"name": "a", "datatype": "FP16", "shape": [2, 2], "data": [[1, 2], [3.5, -4]]},
                {"data": ["x", "yz"], "datatype": "BYTES", "shape": [2], "name": "s"}
            ],
            "outputs": [{"name": "y", "parameters": {"binary_data": true}}]
        });
        let mut body = good.to_string().into_bytes();
        for (at, byte, kind) in edits {
            let at = at % (body.len() + 1);
            match kind {
                0 if at < body.len() => body[at] = byte,
                1 => body.insert(at, byte),
                _ if at < body.len() => {
                    body.remove(at);
                }
                _ => {}
            }
        }
        if let Ok(request) = decode_request(&body, header_len) {
            for tensor in &request.inputs {
                proptest::prop_assert!(tensor.validate().is_ok());
            }
        }
    }
}
