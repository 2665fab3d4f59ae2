//! A real model end to end: `minilm` (sentence-transformers/all-MiniLM-L6-v2) with its
//! tokenizer in the sandbox, against sentence-transformers' own vectors
//! (`tests/data/minilm/oracle.jsonl`, written once by `scripts/minilm-oracle.sh`); ragged
//! batches (items padded together) answered exactly as each item alone, on both backends;
//! per-item failures; the tokenizer's ids against the Python `tokenizers` package's.
//!
//! The graph and `tokenizer.json` are not committed: `scripts/minilm.sh` (run by the test
//! command) writes them into `examples/models/minilm`.

use serde_json::{json, Value};

use crate::common::minilm::{minilm_folder, minilm_repository};
use crate::common::{self, TestServer};

/// Sentence-transformers' answer for one text.
pub struct OracleLine {
    pub text: String,
    pub embedding: Vec<f32>,
}

/// The committed oracle, every line.
pub fn oracle() -> Vec<OracleLine> {
    let text = std::fs::read_to_string(common::root().join("tests/data/minilm/oracle.jsonl")).expect("the oracle");
    text.lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("an oracle line");
            OracleLine {
                text: value["text"].as_str().expect("text").to_string(),
                embedding: floats(&value["embedding"]),
            }
        })
        .collect()
}

fn floats(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .expect("an array of numbers")
        .iter()
        .map(|v| v.as_f64().expect("a number") as f32)
        .collect()
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// The ONNX Runtime library, named for this process's graph loads (required: the example
/// model asks for it).
pub fn onnxruntime() {
    let library = common::onnx::onnxruntime_library()
        .expect("minilm needs ONNX Runtime's library: scripts/python-env.sh installs it");
    tensorplug::runtime::nn::set_onnxruntime_library(library);
}

/// A V2 request of texts (JSON BYTES).
pub fn texts_request(texts: &[&str]) -> Value {
    json!({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [texts.len()], "data": texts}]})
}

/// Each row of the answer's `embedding`.
pub fn embeddings(body: &Value) -> Vec<Vec<f32>> {
    let output = common::output(body, "embedding");
    let dimension = output["shape"][1].as_u64().expect("[N, D]") as usize;
    floats(&output["data"]).chunks(dimension).map(<[f32]>::to_vec).collect()
}

async fn embed(server: &TestServer, model: &str, texts: &[&str]) -> Vec<Vec<f32>> {
    let (status, body) = server
        .post_json(&format!("/v2/models/{model}/infer"), &texts_request(texts))
        .await;
    assert_eq!(status, 200, "{body}");
    embeddings(&body)
}

/// Largest difference of two vectors, element by element.
fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// How far a ragged batch may differ from each item alone: the same arithmetic on other
/// batch shapes (a GEMM's blocking, a sum's order), nothing else; the masked padding adds
/// exact zeros.
const RAGGED_TOLERANCE: f32 = 2e-6;

/// Sends every text alone and in batches of up to 32 (mixed lengths, so padded together),
/// and checks the batched answers against the lone ones; returns the lone ones.
async fn alone_and_batched(server: &TestServer, model: &str, texts: &[&str]) -> Vec<Vec<f32>> {
    let mut alone = Vec::with_capacity(texts.len());
    for text in texts {
        alone.extend(embed(server, model, &[text]).await);
    }
    let mut worst = 0f32;
    for (chunk, expected) in texts.chunks(32).zip(alone.chunks(32)) {
        for (batched, lone) in embed(server, model, chunk).await.iter().zip(expected) {
            worst = worst.max(max_difference(batched, lone));
        }
    }
    assert!(
        worst <= RAGGED_TOLERANCE,
        "{model}: a ragged batch differs from its items alone by {worst}"
    );
    eprintln!("{model}: ragged batches vs alone, largest difference {worst:e}");
    alone
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minilm_answers_sentence_transformers_vectors_alone_and_in_ragged_batches() {
    onnxruntime();
    let repository = minilm_repository("minilm", "onnxruntime");
    let server = TestServer::start(repository.path()).await;
    let oracle = oracle();
    let texts: Vec<&str> = oracle.iter().map(|line| line.text.as_str()).collect();
    let alone = alone_and_batched(&server, "minilm", &texts).await;
    let mut worst = 1f64;
    for (line, vector) in oracle.iter().zip(&alone) {
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{:?}: norm {norm}", line.text);
        worst = worst.min(cosine(vector, &line.embedding));
    }
    eprintln!(
        "minilm: worst cosine against sentence-transformers over {} texts: {worst}",
        oracle.len()
    );
    assert!(worst >= 0.9999, "worst cosine {worst}");

    // Concurrent one-text requests are batched by the server, padded together.
    let tasks: Vec<_> = texts
        .iter()
        .take(96)
        .map(|text| {
            let client = server.client.clone();
            let url = server.url("/v2/models/minilm/infer");
            let body = texts_request(&[text]);
            tokio::spawn(async move {
                let answer: Value = client.post(url).json(&body).send().await.unwrap().json().await.unwrap();
                embeddings(&answer).remove(0)
            })
        })
        .collect();
    for (vector, lone) in common::join_all(tasks).await.iter().zip(&alone) {
        assert!(max_difference(vector, lone) <= RAGGED_TOLERANCE);
    }
    let stats = common::stats(&server, "minilm").await;
    let (padding, ragged) = (
        stats["padding_elements"].as_u64().unwrap(),
        stats["ragged_elements"].as_u64().unwrap(),
    );
    assert!(ragged > 0, "{stats}");
    let waste = padding as f64 / (padding + ragged) as f64;
    eprintln!(
        "minilm: padding {padding} of {} elements ({waste:.3})",
        padding + ragged
    );
    assert!(waste <= 0.25, "padding waste {waste} passes max_padding");
    // The 90 MB graph's load, timed on /metrics (the load log line says it too).
    let metrics = common::metrics::scrape(&server).await;
    let loaded = metrics.value(
        "tensorplug_graph_load_seconds",
        &[("model", "minilm"), ("graph", "encoder")],
    );
    eprintln!("minilm: graph loaded in {loaded:.2} s");
    assert!(loaded > 0.0 && loaded < 20.0, "{loaded} s");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ragged_batches_on_tract_answer_each_item_as_alone() {
    let repository = minilm_repository("minilm-tract", "tract");
    let server = TestServer::start(repository.path()).await;
    let oracle = oracle();
    // Every length class: short, long, truncated, the special cases.
    let texts: Vec<&str> = oracle.iter().step_by(5).map(|line| line.text.as_str()).collect();
    let alone = alone_and_batched(&server, "minilm-tract", &texts).await;
    for (vector, line) in alone.iter().zip(oracle.iter().step_by(5)) {
        assert!(cosine(vector, &line.embedding) >= 0.9999, "{:?}", line.text);
    }
    server.stop().await;
}

/// A V2 request of raw byte strings, as binary tensor data (the only way to send bytes
/// that are not UTF-8).
fn binary_texts_request(texts: &[&[u8]], parameters: Value) -> (Vec<u8>, usize) {
    let mut data = Vec::new();
    for text in texts {
        data.extend_from_slice(&(text.len() as u32).to_le_bytes());
        data.extend_from_slice(text);
    }
    let header = json!({
        "parameters": parameters,
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [texts.len()],
                    "parameters": {"binary_data_size": data.len()}}],
        "outputs": [{"name": "embedding", "parameters": {"binary_data": false}}]
    });
    let mut body = serde_json::to_vec(&header).unwrap();
    let header_len = body.len();
    body.extend_from_slice(&data);
    (body, header_len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_text_fails_alone_and_truncation_can_be_refused() {
    onnxruntime();
    let repository = minilm_repository("minilm", "onnxruntime");
    let server = TestServer::start(repository.path()).await;
    let infer = "/v2/models/minilm/infer";
    let sentence = "The tokenizer runs inside the sandbox.";
    let lone = embed(&server, "minilm", &[sentence]).await.remove(0);

    // Not UTF-8: that item's 400; its neighbours (an empty text among them) are answered.
    let (body, header) = binary_texts_request(&[sentence.as_bytes(), b"caf\xe9", b""], json!({}));
    let (status, answer) = server.post_raw(infer, body, Some(header)).await;
    assert_eq!(status, 207, "{answer}");
    let results = answer["results"].as_array().unwrap();
    assert_eq!(
        results
            .iter()
            .map(|r| r["status"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [200, 400, 200]
    );
    assert!(results[1]["error"].as_str().unwrap().contains("UTF-8"), "{answer}");
    let first = floats(&results[0]["outputs"][0]["data"]);
    assert!(max_difference(&first, &lone) <= RAGGED_TOLERANCE);
    assert_eq!(
        floats(&results[2]["outputs"][0]["data"]).len(),
        384,
        "the empty text's vector"
    );

    // Past 256 word pieces: cut by default, refused (422) with truncate: false.
    let long = "word ".repeat(600);
    let cut = embed(&server, "minilm", &[&long]).await;
    assert_eq!(cut[0].len(), 384);
    let refuse = |texts: &[&str]| {
        let mut request = texts_request(texts);
        request["parameters"] = json!({"truncate": false});
        request
    };
    let (status, answer) = server.post_json(infer, &refuse(&[&long])).await;
    assert_eq!(status, 422, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("256"), "{answer}");
    let (status, answer) = server.post_json(infer, &refuse(&[sentence, &long])).await;
    assert_eq!(status, 207, "{answer}");
    assert_eq!(answer["results"][0]["status"], 200);
    assert_eq!(answer["results"][1]["status"], 422);
    let (status, answer) = server.post_json(infer, &refuse(&[sentence])).await;
    assert_eq!(status, 200, "{answer}");
    // A parameter of the wrong type is the request's 400, naming it.
    let mut wrong = texts_request(&[sentence]);
    wrong["parameters"] = json!({"truncate": "no"});
    let (status, answer) = server.post_json(infer, &wrong).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("truncate"), "{answer}");
    server.stop().await;
}

/// The test model `minilm-tokens`: the tokenizer plugin, then a predict that echoes its
/// inputs, so the ids are the answer; with the example's `tokenizer.json`.
fn tokens_repository() -> tempfile::TempDir {
    let repository = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let folder = repository.path().join("minilm-tokens");
    std::fs::create_dir(&folder).unwrap();
    let source = common::root().join("tests/fixtures/minilm-tokens");
    for file in ["model.toml", "preprocess.wasm", "predict.wasm"] {
        std::fs::copy(source.join(file), folder.join(file)).unwrap();
    }
    std::fs::copy(minilm_folder().join("tokenizer.json"), folder.join("tokenizer.json")).unwrap();
    repository
}

/// The ids of each text through the plugin: its answer's `input_ids` where its mask is 1
/// (concurrent requests share predict calls, padded), one text per request, 8 at a time.
async fn plugin_ids(server: &TestServer, texts: &[&str]) -> Vec<Vec<i64>> {
    let mut all = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(8) {
        let tasks: Vec<_> = chunk
            .iter()
            .map(|text| {
                let client = server.client.clone();
                let url = server.url("/v2/models/minilm-tokens/infer");
                let body = texts_request(&[text]);
                tokio::spawn(async move {
                    let response = client.post(url).json(&body).send().await.unwrap();
                    assert_eq!(response.status(), 200);
                    let answer: Value = response.json().await.unwrap();
                    let values = |name| -> Vec<i64> {
                        common::output(&answer, name)["data"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_i64().unwrap())
                            .collect()
                    };
                    let mask = values("attention_mask");
                    values("input_ids")
                        .into_iter()
                        .zip(mask)
                        .filter(|(_, m)| *m == 1)
                        .map(|(id, _)| id)
                        .collect::<Vec<i64>>()
                })
            })
            .collect();
        all.extend(common::join_all(tasks).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandboxed_tokenizer_gives_the_python_tokenizers_ids() {
    let repository = tokens_repository();
    let server = TestServer::start(repository.path()).await;
    let oracle = oracle();
    let mut texts: Vec<String> = oracle.iter().map(|line| line.text.clone()).collect();
    // More of what tokenizers get wrong: unusual scripts and marks, and very long input.
    texts.extend(
        [
            "Ǆemal͂ ϔ Å Å ﬁne ｆｕｌｌ-width ２０２６",
            "\u{1F469}\u{200D}\u{1F52C} \u{1F1EF}\u{1F1F5} \u{1F44D}\u{1F3FD}",
            "e\u{301}te\u{301} n\u{303}o\u{308} \u{0915}\u{094D}\u{0937}",
            "zero\u{200B}width\u{200C}non\u{200D}joiner\u{FEFF}bom\u{00AD}soft",
            "Ελληνικά Русский עברית العربية ไทย 한국어 日本語 中文",
            "\t tabs \n\n newlines \r\n and   spaces  ",
        ]
        .map(String::from),
    );
    texts.push("tokenizers read long texts too. ".repeat(2000));
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ours = plugin_ids(&server, &refs).await;
    let theirs = python_ids(&texts).await;
    let differing: Vec<usize> = (0..texts.len()).filter(|&i| ours[i] != theirs[i]).collect();
    eprintln!(
        "tokenizer parity: {} of {} texts give the Python tokenizers' ids",
        texts.len() - differing.len(),
        texts.len()
    );
    assert!(
        differing.is_empty(),
        "texts {differing:?} differ, e.g. {:?}: {:?} vs {:?}",
        texts[differing[0]],
        ours[differing[0]],
        theirs[differing[0]]
    );
    server.stop().await;
}

/// The ids the Python `tokenizers` package gives each text with the example's
/// tokenizer.json, truncated at 256 as sentence-transformers does.
async fn python_ids(texts: &[String]) -> Vec<Vec<i64>> {
    let python = common::python::python().await;
    let input = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lines: String = texts.iter().map(|t| format!("{}\n", json!({ "text": t }))).collect();
    std::fs::write(input.path(), lines).unwrap();
    let mut command = std::process::Command::new(python);
    command
        .arg(common::root().join("tests/conformance/tokenizer_ids.py"))
        .arg(minilm_folder().join("tokenizer.json"))
        .arg(input.path());
    let output = common::python::run_bounded("tokenizer_ids.py", command, std::time::Duration::from_secs(120)).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_and_tritonclient_embed_with_their_own_clients() {
    onnxruntime();
    let python = common::python::python().await;
    let repository = minilm_repository("minilm", "onnxruntime");
    let server = TestServer::start_with_grpc(common::serve_config(repository.path())).await;
    let mut check = std::process::Command::new(&python);
    check
        .arg(common::root().join("tests/conformance/embeddings.py"))
        .args(["--http", &server.address.to_string()])
        .args(["--grpc", &server.grpc_address().to_string()])
        .arg("--oracle")
        .arg(common::root().join("tests/data/minilm/oracle.jsonl"))
        .env("PYTHONUNBUFFERED", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    let output = common::python::run_bounded("embeddings.py", check, std::time::Duration::from_secs(300)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().any(|l| l == "embeddings: every check passed"),
        "the clients disagree with the server\n{}",
        common::python::shown(&output)
    );
    println!("{stdout}");
    // OpenAI's route is counted as its own protocol.
    let metrics = common::metrics::scrape(&server).await;
    assert!(
        metrics.value(
            "tensorplug_requests_total",
            &[("model", "minilm"), ("protocol", "openai"), ("status", "200")]
        ) >= 4.0
    );
    server.stop().await;
}

/// `tensorplug infer` over a JSONL file of sentences (one V2 request of one text a line),
/// `extra` giving the transport; each answer line's vector against the oracle, in order.
async fn infer_sentences(extra: &[String], oracle: &[OracleLine]) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (input, output) = (dir.path().join("sentences.jsonl"), dir.path().join("answers.jsonl"));
    let lines: String = oracle
        .iter()
        .map(|line| format!("{}\n", texts_request(&[line.text.as_str()])))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tensorplug"));
    command
        .arg("infer")
        .args(extra)
        .args(["-m", "minilm", "-s", "16", "-i"])
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .env_remove("RUST_LOG");
    let run = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let answers: Vec<Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), oracle.len());
    for (answer, line) in answers.iter().zip(oracle) {
        let vector = &embeddings(answer)[0];
        assert!(cosine(vector, &line.embedding) >= 0.9999, "{extra:?}: {:?}", line.text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensorplug_infer_embeds_a_file_of_sentences_in_process_and_over_grpc() {
    let library = common::onnx::onnxruntime_library().expect("ONNX Runtime's library");
    onnxruntime();
    let repository = minilm_repository("minilm", "onnxruntime");
    let oracle = oracle();
    let in_process = [
        "--repository".to_string(),
        repository.path().display().to_string(),
        "--onnxruntime-lib".to_string(),
        library.display().to_string(),
        "--cache-dir".to_string(),
        common::compile_cache().display().to_string(),
    ];
    infer_sentences(&in_process, &oracle).await;
    let server = TestServer::start_with_grpc(common::serve_config(repository.path())).await;
    let grpc = [
        "-u".to_string(),
        server.grpc_address().to_string(),
        "-t".to_string(),
        "grpc".to_string(),
    ];
    infer_sentences(&grpc, &oracle).await;
    server.stop().await;
}
