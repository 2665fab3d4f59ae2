//! Whole-instance limits and bounded sizes, against plugins written to break them
//! (faults -10, -11 and -12 of tests/plugins/faulty).

use serde_json::json;

use crate::common;
use common::{request, TestServer};

use crate::common::FAULTY_INFER;

/// Descriptors this process has open.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_hoarding_handles_traps_at_the_cap_and_the_server_keeps_its_descriptors() {
    let repository = common::faulty_repository(&format!(
        "{}\nmax_handles = 64\n",
        common::faulty_config("max_batch_size = 1", "instances = 1")
    ));
    let server = TestServer::start(repository.path()).await;
    let before = open_descriptors();
    let (status, body) = server.post_faulty(&[-10.0]).await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("limits.max_handles"), "{message}");
    assert!(message.contains("open"), "the backtrace shows where: {message}");
    // The trapped instance (and its files) is gone; the server still opens what it needs.
    let after = open_descriptors();
    assert!(after <= before + 8, "descriptors: {before} before, {after} after");
    let (status, body) = server.post_faulty(&[2.0]).await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_mib_error_message_is_cut_in_the_answer() {
    let server = TestServer::start_faulty("max_batch_size = 1", "instances = 1").await;
    let response = server
        .client
        .post(server.url(FAULTY_INFER))
        .json(&request("x", "FP32", &[1, 1], json!([-12.0])))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    let text = response.text().await.unwrap();
    assert!(text.len() < 8 * 1024, "a {} byte answer", text.len());
    assert!(text.contains("more bytes cut"), "{}", &text[..200]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_is_cut_to_the_per_call_budget() {
    // A million log calls take ~1 s in a debug build on a busy machine: the call gets room
    // enough that what is measured is the log budget, not the time limit.
    let repository = common::faulty_repository(&common::faulty_config(
        "max_batch_size = 1",
        "instances = 1\ntimeout_ms = 20000",
    ));
    let server = common::process::ServerProcess::spawn(repository.path(), &[]).await;
    let response = server
        .client
        .post(server.url(FAULTY_INFER))
        .json(&request("x", "FP32", &[1, 1], json!([-11.0])))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let log = server.log();
    let flood = log.iter().filter(|l| l.contains("faulty: flood line")).count();
    assert!(flood <= 200, "{flood} flood lines reached the log");
    assert!(
        log.iter()
            .any(|l| l.contains("plugin log lines dropped") && l.contains("dropped=999800")),
        "no single record of the dropped lines"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_flooded_outputs_are_contract_violations_of_their_items_only() {
    let server = TestServer::start_faulty("max_batch_size = 8", "instances = 1").await;
    for fault in [-13.0, -14.0] {
        let started = std::time::Instant::now();
        // One request of three items: the culprit fails alone, its neighbours get one `y` each.
        let (status, body) = server.post_faulty(&[1.0, fault, 3.0]).await;
        assert_eq!(status, 207, "{body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results[1]["status"], 500, "{body}");
        let message = results[1]["error"].as_str().unwrap();
        assert!(
            message.contains("appears more than once") || message.contains("more than 256 tensors per item"),
            "{message}"
        );
        for (i, expected) in [(0, 2.0), (2, 6.0)] {
            let outputs = results[i]["outputs"].as_array().unwrap();
            assert_eq!(outputs.len(), 1, "{body}");
            assert_eq!(outputs[0]["data"], json!([expected]));
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
    }
    server.stop().await;
}

/// What a hostile variant of the faulty plugin adds to its core module.
enum Extra {
    /// A second linear memory of this many 64 KiB pages.
    Memory(u64),
    /// A second table of this many function references.
    Table(u64),
}

/// The wasip1 build of tests/plugins/faulty (a core module, which the host turns into a
/// component at load) with `extra` appended, and every other section kept as built.
fn hostile_plugin(extra: Extra) -> Vec<u8> {
    use wasm_encoder::{MemorySection, MemoryType, RawSection, RefType, TableSection, TableType};
    use wasmparser::{Parser, Payload, TableInit};

    let module = std::fs::read(common::root().join("tests/models/faulty-p1/predict.wasm")).expect("faulty-p1");
    let mut out = wasm_encoder::Module::new();
    for payload in Parser::new(0).parse_all(&module) {
        let payload = payload.expect("a valid module");
        match (&payload, &extra) {
            (Payload::MemorySection(reader), Extra::Memory(pages)) => {
                let mut section = MemorySection::new();
                for memory in reader.clone() {
                    let m = memory.expect("memory");
                    section.memory(MemoryType {
                        minimum: m.initial,
                        maximum: m.maximum,
                        memory64: m.memory64,
                        shared: m.shared,
                        page_size_log2: m.page_size_log2,
                    });
                }
                section.memory(MemoryType {
                    minimum: *pages,
                    maximum: None,
                    memory64: false,
                    shared: false,
                    page_size_log2: None,
                });
                out.section(&section);
            }
            (Payload::TableSection(reader), Extra::Table(elements)) => {
                let mut section = TableSection::new();
                for table in reader.clone() {
                    let t = table.expect("table");
                    assert!(matches!(t.init, TableInit::RefNull), "a table with an init expression");
                    assert!(
                        t.ty.element_type.is_func_ref(),
                        "a table of something else than funcref"
                    );
                    section.table(TableType {
                        element_type: RefType::FUNCREF,
                        table64: t.ty.table64,
                        minimum: t.ty.initial,
                        maximum: t.ty.maximum,
                        shared: t.ty.shared,
                    });
                }
                section.table(TableType {
                    element_type: RefType::FUNCREF,
                    table64: false,
                    minimum: *elements,
                    maximum: None,
                    shared: false,
                });
                out.section(&section);
            }
            _ => {
                if let Some((id, range)) = payload.as_section() {
                    out.section(&RawSection {
                        id,
                        data: &module[range],
                    });
                }
            }
        }
    }
    out.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_memory_or_a_huge_table_fails_the_load_at_the_whole_instance_cap() {
    let base = common::faulty_config("max_batch_size = 1", "instances = 1\nmemory_mib = 64");
    // 63 MiB more than the plugin's own memory: each memory alone is under 64 MiB, the
    // instance is not. And 10 million table elements (80 MB of host memory).
    for (extra, expect) in [
        (Extra::Memory(63 * 16), "limits.memory_mib"),
        (Extra::Table(10_000_000), "limits.table_elements"),
    ] {
        let repository = common::faulty_repository(&base);
        std::fs::write(repository.path().join("faulty/predict.wasm"), hostile_plugin(extra)).unwrap();
        let server = common::process::ServerProcess::spawn_unready(repository.path(), &[]).await;
        let rss_before_load = server.rss_kib();
        let index = server.wait_loaded().await;
        let row = &index[0];
        assert_eq!(row["state"], "UNAVAILABLE", "{index}");
        let reason = row["reason"].as_str().unwrap();
        eprintln!("refused: {reason}");
        assert!(reason.contains(expect), "{reason}");
        let grew = server.rss_kib().saturating_sub(rss_before_load);
        assert!(grew < 32 * 1024, "the refused plugin still cost {grew} KiB");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_plugin_is_refused_unread_and_other_models_load() {
    let repository = common::faulty_repository(&common::faulty_config("max_batch_size = 1", "instances = 1"));
    // A second model whose plugin is 65 MiB: refused on its size, without compiling it.
    let big = repository.path().join("big");
    std::fs::create_dir(&big).unwrap();
    std::fs::write(
        big.join("model.toml"),
        common::faulty_config("max_batch_size = 1", "instances = 1"),
    )
    .unwrap();
    let mut bytes = b"\0asm\x01\0\0\0".to_vec();
    bytes.resize(65 << 20, 0);
    std::fs::write(big.join("predict.wasm"), bytes).unwrap();
    let server = common::process::ServerProcess::spawn_unready(repository.path(), &[]).await;
    let index = server.wait_loaded().await;
    let big = index.as_array().unwrap().iter().find(|r| r["name"] == "big").unwrap();
    assert!(
        big["reason"]
            .as_str()
            .unwrap()
            .contains("more than the plugin size cap of 64 MiB"),
        "{index}"
    );
    let faulty = index
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "faulty")
        .unwrap();
    assert_eq!(faulty["state"], "READY", "{index}");
}
