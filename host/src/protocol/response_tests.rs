//! Tests of the response encoders.

use serde_json::{json, Value};

use super::*;
use crate::model::outcome::ItemError;
use crate::model::tensor::{push_bytes_element, DataType};
use crate::protocol::decode_request;

fn fp32(name: &str, shape: &[u64], values: &[f32]) -> Tensor {
    Tensor {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: shape.to_vec(),
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn bytes(name: &str, elements: &[&[u8]]) -> Tensor {
    let mut data = Vec::new();
    for e in elements {
        push_bytes_element(&mut data, e);
    }
    Tensor {
        name: name.into(),
        datatype: DataType::Bytes,
        shape: vec![elements.len() as u64],
        data,
    }
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

#[test]
fn json_response_lists_all_outputs_flat() {
    let outputs = [fp32("y", &[2, 2], &[1.0, 0.5, -0.25, 1e-3])];
    let r = encode_response("digits", "1", Some("req-7"), &outputs, &OutputOptions::default());
    assert_eq!(r.json_header_len, None);
    assert_eq!(
        String::from_utf8(r.body).unwrap(),
        r#"{"model_name":"digits","model_version":"1","id":"req-7","outputs":[{"name":"y","datatype":"FP32","shape":[2,2],"data":[1.0,0.5,-0.25,0.001]}]}"#
    );
}

#[test]
fn binary_response_puts_bytes_after_the_json() {
    let a = fp32("a", &[2], &[1.5, -2.0]);
    let s = bytes("s", &[b"\xff\x00raw", b"ok"]);
    let unrequested = fp32("hidden", &[1], &[9.0]);
    let options = OutputOptions {
        requested: vec![("s".into(), true), ("a".into(), false)],
        binary_by_default: false,
    };
    let outputs = [a.clone(), unrequested, s.clone()];
    let r = encode_response("m", "2", None, &outputs, &options);
    let len = r.json_header_len.unwrap();
    let (json, tail) = r.body.split_at(len);
    assert_eq!(
        json_of(json),
        json!({"model_name": "m", "model_version": "2", "outputs": [
            {"name": "s", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": s.data.len()}},
            {"name": "a", "datatype": "FP32", "shape": [2], "data": [1.5, -2.0]},
        ]})
    );
    assert_eq!(tail, s.data.as_slice());

    // Everything binary: bytes follow in output order.
    let all = OutputOptions {
        requested: Vec::new(),
        binary_by_default: true,
    };
    let r = encode_response("m", "2", None, &[a.clone(), s.clone()], &all);
    let len = r.json_header_len.unwrap();
    assert_eq!(
        &r.body[len..],
        [a.data.as_slice(), s.data.as_slice()].concat().as_slice()
    );
    assert_eq!(
        json_of(&r.body[..len])["outputs"][0]["parameters"]["binary_data_size"],
        json!(8)
    );
}

#[test]
fn non_utf8_bytes_are_lossy_in_json_and_exact_in_binary() {
    let s = bytes("s", &[b"\xff\xfeab", "é".as_bytes()]);
    let r = encode_response("m", "1", None, std::slice::from_ref(&s), &OutputOptions::default());
    assert_eq!(
        json_of(&r.body)["outputs"][0]["data"],
        json!(["\u{fffd}\u{fffd}ab", "é"])
    );

    // A binary BYTES request round-trips byte-exactly through a binary response.
    let header = json!({"inputs": [{"name": "s", "shape": [2], "datatype": "BYTES",
        "parameters": {"binary_data_size": s.data.len()}}],
        "outputs": [{"name": "s", "parameters": {"binary_data": true}}]})
    .to_string();
    let body = [header.as_bytes(), &s.data].concat();
    let request = decode_request(&body, Some(header.len())).unwrap();
    assert_eq!(request.inputs, vec![s.clone()]);
    let options = OutputOptions::from_request(&request);
    let r = encode_response("m", "1", None, &request.inputs, &options);
    let len = r.json_header_len.unwrap();
    assert_eq!(&r.body[len..], s.data.as_slice());
}

#[test]
fn options_follow_the_request() {
    let request = decode_request(
        br#"{"inputs":[],"parameters":{"binary_data_output":true},
            "outputs":[{"name":"b"},{"name":"a","parameters":{"binary_data":false}}]}"#,
        None,
    )
    .unwrap();
    let options = OutputOptions::from_request(&request);
    assert_eq!(
        options,
        OutputOptions {
            requested: vec![("b".into(), true), ("a".into(), false)],
            binary_by_default: true,
        }
    );
    let outputs = vec![fp32("a", &[1], &[1.0]), fp32("c", &[1], &[3.0])];
    assert_eq!(options.missing(&outputs), Some("b"));
    assert_eq!(options.select(&outputs), vec![(&outputs[0], false)]);
    let both = vec![
        fp32("a", &[1], &[1.0]),
        fp32("b", &[1], &[2.0]),
        fp32("c", &[1], &[3.0]),
    ];
    assert_eq!(options.missing(&both), None);
    let names: Vec<String> = options.filter(both).into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(OutputOptions::default().filter(outputs.clone()), outputs);
}

#[test]
fn non_finite_floats_become_null_in_json() {
    let t = fp32("y", &[3], &[f32::NAN, f32::INFINITY, 1.0]);
    let r = encode_response("m", "1", None, &[t], &OutputOptions::default());
    assert_eq!(json_of(&r.body)["outputs"][0]["data"], json!([null, null, 1.0]));
}

#[test]
fn multi_status_lists_every_item() {
    let results = [
        Ok(vec![fp32("y", &[2], &[0.25, 0.75])]),
        Err(ItemError::new(400, "input-0[5]: pixel value 99 is outside 0..16")),
        Err(ItemError::new(200, "bogus status")),
    ];
    let body = encode_multi_status("digits", "1", Some("r"), &results);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        concat!(
            r#"{"model_name":"digits","model_version":"1","id":"r","#,
            r#""error":"2 of 3 items failed; each item's status is in \"results\"","results":["#,
            r#"{"status":200,"outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"data":[0.25,0.75]}]},"#,
            r#"{"status":400,"error":"input-0[5]: pixel value 99 is outside 0..16"},"#,
            r#"{"status":500,"error":"bogus status"}]}"#
        )
    );
    let body = encode_multi_status("digits", "1", None, &[]);
    assert_eq!(
        json_of(&body),
        json!({"model_name": "digits", "model_version": "1", "results": [],
               "error": "0 of 0 items failed; each item's status is in \"results\""})
    );
}

#[test]
fn error_body_escapes_the_message() {
    assert_eq!(encode_error("bad \"x\"\n"), br#"{"error":"bad \"x\"\n"}"#.to_vec());
}

#[test]
fn fp16_prints_shortest() {
    use half::f16;
    for (v, text) in [
        (0.1f32, "0.1"),
        (65504.0, "65500.0"),
        (-2.5, "-2.5"),
        (6e-8, "6e-8"),
        (0.3333, "0.3333"),
    ] {
        let h = f16::from_f32(v);
        let printed = serde_json::to_string(&super::super::tensor_json::shortest_f16(h)).unwrap();
        assert_eq!(printed, text, "{v}");
        assert_eq!(f16::from_f64(printed.parse().unwrap()), h);
    }
}
