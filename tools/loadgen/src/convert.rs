//! V2 REST JSON inference requests → gRPC `ModelInferRequest`s, converted once before a
//! run by tensorplug's own conversions: each line is read as the REST edge reads a body
//! (the same validation and caps), then written as tensorplug's gRPC client writes a
//! request, with tensor data as typed `contents` (`fp32_contents`, `int64_contents`, … by
//! datatype) or as `raw_input_contents` (the tensors' bytes). The request's `id`, its
//! boolean, number and string `parameters` and the requested outputs' names are copied.
//!
//! FP16 has no typed field: it converts to raw contents only.

use anyhow::{ensure, Context, Result};
use tensorplug::protocol::decode_request;
use tensorplug::protocol::grpc::proto::ModelInferRequest;
use tensorplug::protocol::grpc::{write_request, write_typed_request};

/// How tensor data travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// In each input's `contents`, in the typed field of its datatype.
    Typed,
    /// In `raw_input_contents`, one little-endian byte string per input.
    Raw,
}

/// The model every request is sent to.
pub struct Model<'a> {
    pub name: &'a str,
    /// Empty: the version the server serves.
    pub version: &'a str,
}

/// Converts every non-blank line of a JSONL text; errors name the line.
pub fn requests(jsonl: &str, model: &Model<'_>, encoding: Encoding) -> Result<Vec<ModelInferRequest>> {
    let requests = jsonl
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| request(line, model, encoding).with_context(|| format!("line {}", i + 1)))
        .collect::<Result<Vec<_>>>()?;
    ensure!(!requests.is_empty(), "no request (no non-blank line)");
    Ok(requests)
}

/// Converts one V2 JSON inference request.
pub fn request(json: &str, model: &Model<'_>, encoding: Encoding) -> Result<ModelInferRequest> {
    let request = decode_request(json.as_bytes(), None)?;
    Ok(match encoding {
        Encoding::Typed => write_typed_request(request, model.name, model.version)?,
        Encoding::Raw => write_request(request, model.name, model.version),
    })
}

#[cfg(test)]
mod tests {
    use tensorplug::protocol::grpc::proto::infer_parameter::ParameterChoice;

    use super::*;

    const MODEL: Model<'static> = Model { name: "m", version: "" };

    fn one(json: &str, encoding: Encoding) -> ModelInferRequest {
        request(json, &MODEL, encoding).expect("converts")
    }

    fn error(json: &str, encoding: Encoding) -> String {
        format!("{:#}", request(json, &MODEL, encoding).expect_err("refused"))
    }

    fn input(datatype: &str, shape: &str, data: &str) -> String {
        format!(r#"{{"inputs":[{{"name":"x","datatype":"{datatype}","shape":{shape},"data":{data}}}]}}"#)
    }

    #[test]
    fn fp32_typed_and_raw() {
        let json = input("FP32", "[1,3]", "[[0.5, -2, 16.0]]");
        let typed = one(&json, Encoding::Typed);
        assert_eq!(typed.model_name, "m");
        assert_eq!(typed.inputs[0].name, "x");
        assert_eq!(typed.inputs[0].datatype, "FP32");
        assert_eq!(typed.inputs[0].shape, [1, 3]);
        let contents = typed.inputs[0].contents.as_ref().expect("contents");
        assert_eq!(contents.fp32_contents, [0.5, -2.0, 16.0]);
        assert!(typed.raw_input_contents.is_empty());

        let raw = one(&json, Encoding::Raw);
        assert!(raw.inputs[0].contents.is_none());
        let expected: Vec<u8> = [0.5f32, -2.0, 16.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(raw.raw_input_contents, [expected]);
    }

    #[test]
    fn integer_float_and_bool_types() {
        let typed = |datatype: &str, data: &str| {
            let message = one(&input(datatype, "[2]", data), Encoding::Typed);
            message.inputs[0].contents.clone().expect("contents")
        };
        assert_eq!(
            typed("INT64", "[-1, 9007199254740993]").int64_contents,
            [-1, 9_007_199_254_740_993]
        );
        assert_eq!(typed("INT32", "[-5, 7]").int_contents, [-5, 7]);
        assert_eq!(typed("INT8", "[-128, 127]").int_contents, [-128, 127]);
        assert_eq!(typed("UINT16", "[0, 65535]").uint_contents, [0, 65535]);
        assert_eq!(
            typed("UINT64", "[18446744073709551615, 1]").uint64_contents,
            [u64::MAX, 1]
        );
        assert_eq!(typed("FP64", "[0.1, 3]").fp64_contents, [0.1, 3.0]);
        assert_eq!(typed("BOOL", "[true, false]").bool_contents, [true, false]);

        let raw = |datatype: &str, data: &str| one(&input(datatype, "[2]", data), Encoding::Raw).raw_input_contents;
        assert_eq!(
            raw("INT64", "[1, -1]"),
            [[1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255]]
        );
        assert_eq!(raw("INT32", "[[258], [-2]]"), [[2, 1, 0, 0, 254, 255, 255, 255]]);
        assert_eq!(raw("INT16", "[1, -1]"), [[1, 0, 255, 255]]);
        assert_eq!(raw("UINT8", "[1, 255]"), [[1, 255]]);
        assert_eq!(raw("BOOL", "[true, false]"), [[1, 0]]);
        assert_eq!(
            raw("FP64", "[1.5, 0]"),
            [[0, 0, 0, 0, 0, 0, 248, 63, 0, 0, 0, 0, 0, 0, 0, 0]]
        );
    }

    #[test]
    fn bytes_as_strings() {
        let json = input("BYTES", "[2]", r#"["ab", "é"]"#);
        let typed = one(&json, Encoding::Typed);
        let contents = typed.inputs[0].contents.as_ref().expect("contents");
        assert_eq!(contents.bytes_contents, [b"ab".to_vec(), "é".as_bytes().to_vec()]);
        let raw = one(&json, Encoding::Raw);
        assert_eq!(
            raw.raw_input_contents,
            [[2, 0, 0, 0, b'a', b'b', 2, 0, 0, 0, 0xc3, 0xa9]]
        );
    }

    #[test]
    fn id_parameters_and_outputs_are_copied() {
        let json = r#"{"id":"r1","parameters":{"timeout":5000,"big":18446744073709551615,"f":0.5,
            "flag":true,"s":"x"},"inputs":[{"name":"a","datatype":"INT32","shape":[1],"data":[1]},
            {"name":"b","datatype":"BOOL","shape":[1],"data":[true]}],
            "outputs":[{"name":"o","parameters":{"binary_data":false}}]}"#;
        let message = one(json, Encoding::Raw);
        assert_eq!(message.id, "r1");
        let choice = |name: &str| message.parameters[name].parameter_choice.clone().expect("choice");
        assert_eq!(choice("timeout"), ParameterChoice::Int64Param(5000));
        assert_eq!(choice("big"), ParameterChoice::Uint64Param(u64::MAX));
        assert_eq!(choice("f"), ParameterChoice::DoubleParam(0.5));
        assert_eq!(choice("flag"), ParameterChoice::BoolParam(true));
        assert_eq!(choice("s"), ParameterChoice::StringParam("x".into()));
        assert_eq!(message.inputs.len(), 2);
        assert_eq!(message.raw_input_contents, [vec![1, 0, 0, 0], vec![1]]);
        assert_eq!(message.outputs.len(), 1);
        assert_eq!(message.outputs[0].name, "o");
    }

    #[test]
    fn refusals_say_why() {
        let fp16 = error(
            r#"{"inputs":[{"name":"x","datatype":"FP16","shape":[1],"parameters":{"binary_data_size":2}}]}"#,
            Encoding::Typed,
        );
        assert!(fp16.contains("input 'x'"), "{fp16}");
        let unknown = error(&input("COMPLEX", "[1]", "[1.0]"), Encoding::Typed);
        assert!(unknown.contains("COMPLEX"), "{unknown}");
        let range = error(&input("INT8", "[2]", "[1, 128]"), Encoding::Typed);
        assert!(range.contains("input 'x'") && range.contains("128"), "{range}");
        let fraction = error(&input("INT64", "[1]", "[1.5]"), Encoding::Raw);
        assert!(fraction.contains("1.5"), "{fraction}");
        let not_string = error(&input("BYTES", "[1]", "[1]"), Encoding::Typed);
        assert!(not_string.contains("data element 0"), "{not_string}");
        assert!(error(
            r#"{"inputs":[{"name":"x","datatype":"FP32","data":[1]}]}"#,
            Encoding::Typed
        )
        .contains("shape"));
        assert!(error("[1]", Encoding::Typed).contains("must be"));
        assert!(error("{", Encoding::Typed).contains("invalid JSON"));
    }

    #[test]
    fn jsonl_lines_are_numbered() {
        let text = format!(
            "{}\n\n{}\n",
            input("FP32", "[1]", "[1]"),
            input("FP32", "[1]", "[true]")
        );
        let failure = format!("{:#}", requests(&text, &MODEL, Encoding::Typed).expect_err("line 3"));
        assert!(failure.starts_with("line 3: input 'x': data element 0"), "{failure}");
        assert!(requests("\n \n", &MODEL, Encoding::Typed).is_err());
    }

    #[test]
    fn the_digits_requests_convert() {
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/digits/test_requests.jsonl"
        );
        let text = std::fs::read_to_string(file).expect("the digits requests");
        let model = Model {
            name: "digits",
            version: "1",
        };
        let typed = requests(&text, &model, Encoding::Typed).expect("typed");
        let raw = requests(&text, &model, Encoding::Raw).expect("raw");
        assert_eq!(typed.len(), text.lines().filter(|l| !l.trim().is_empty()).count());
        assert_eq!((typed[0].id.as_str(), typed[0].model_version.as_str()), ("t0", "1"));
        let fp32 = &typed[0].inputs[0].contents.as_ref().expect("contents").fp32_contents;
        assert_eq!(fp32.len(), 64);
        assert_eq!(raw[0].raw_input_contents[0].len(), 64 * 4);
        assert_eq!(raw[0].raw_input_contents[0][..4], fp32[0].to_le_bytes());
    }
}
