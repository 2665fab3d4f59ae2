//! The deployment manifests of deploy/ against the real server: every probe, Service port
//! and scrape annotation of deploy/kubernetes/ names a route the server answers on the
//! port it names, the grace figures agree with the server's drain, and the KServe runtime
//! of deploy/kserve/ serves `/mnt/models` laid out as KServe's storage initializer lays it
//! out. The manifests are read as they are applied, so they cannot drift from the routes.
//!
//! Ports: the server runs on free loopback ports; each container port of a manifest maps
//! to the one the server really bound for the flag the manifest's args set it with
//! (`--http-port=8080` → the REST address), so a probe naming a port no flag sets fails.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::common::{self, output, output_f32, process::ServerProcess, DIGITS_INFER};
use crate::digits::{assert_matches, cases};
use crate::languages::repository_of;

/// Where the image puts the server (the Containerfile's).
const SERVER_BINARY: &str = "/usr/local/bin/tensorplug";

fn manifest(path: &str) -> Value {
    let file = common::root().join("deploy").join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    yaml::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_else(|| panic!("a string expected: {value}"))
}

fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("a number expected: {value}"))
}

/// What a container's `command` and `args` ask of `tensorplug serve`.
struct ServeArgs {
    repository: String,
    http_port: u16,
    grpc_port: u16,
    grace_secs: u64,
    /// The other flags, passed on to the server as they are.
    others: Vec<String>,
}

impl ServeArgs {
    fn of(container: &Value) -> Self {
        assert_eq!(
            container["command"],
            serde_json::json!([SERVER_BINARY]),
            "the image's server"
        );
        let args: Vec<&str> = container["args"].as_array().expect("args").iter().map(text).collect();
        assert_eq!(args.first(), Some(&"serve"), "{args:?}");
        let repository = args.get(1).expect("the repository argument").to_string();
        let mut flags: BTreeMap<&str, &str> = BTreeMap::new();
        let mut others = Vec::new();
        for arg in &args[2..] {
            let (flag, value) = arg
                .split_once('=')
                .unwrap_or_else(|| panic!("flags as --flag=value, so that they read unambiguously: {arg}"));
            match flag {
                "--http-port" | "--grpc-port" | "--shutdown-grace-secs" | "--host" => {
                    flags.insert(flag, value);
                }
                _ => others.push(arg.to_string()),
            }
        }
        assert!(
            !flags.contains_key("--host"),
            "the server listens on every address in a pod"
        );
        let port = |flag, default: u16| flags.get(flag).map_or(default, |p| p.parse().expect("a port number"));
        Self {
            repository,
            http_port: port("--http-port", 8080),
            grpc_port: port("--grpc-port", 8081),
            grace_secs: flags
                .get("--shutdown-grace-secs")
                .map_or(30, |s| s.parse().expect("seconds")),
            others,
        }
    }

    /// The real server, serving `repository` (in place of the manifest's) with the
    /// manifest's flags, on free loopback ports for REST and gRPC.
    async fn spawn(&self, repository: &Path) -> ServerProcess {
        let mut extra: Vec<&str> = self.others.iter().map(String::as_str).collect();
        let grace = format!("--shutdown-grace-secs={}", self.grace_secs);
        extra.extend(["--grpc-port", "0", &grace]);
        ServerProcess::spawn(repository, &extra).await
    }

    /// The server's address for the container port `port`.
    fn address(&self, server: &ServerProcess, port: u64) -> SocketAddr {
        match u16::try_from(port) {
            Ok(p) if p == self.http_port => server.address,
            Ok(p) if p == self.grpc_port => server.grpc_address(),
            _ => panic!(
                "container port {port} is neither --http-port ({}) nor --grpc-port ({})",
                self.http_port, self.grpc_port
            ),
        }
    }
}

/// The container port a probe or Service names: a number, or the name of one of the
/// container's `ports`.
fn container_port(container: &Value, port: &Value) -> u64 {
    match port {
        Value::String(name) => container["ports"]
            .as_array()
            .expect("the container's ports")
            .iter()
            .find(|p| p["name"] == name.as_str())
            .map(|p| number(&p["containerPort"]))
            .unwrap_or_else(|| panic!("no container port named {name}")),
        other => number(other),
    }
}

/// GETs `path` at `address`: the status and the body.
async fn get(client: &reqwest::Client, address: SocketAddr, path: &str) -> (u16, String) {
    let response = client
        .get(format!("http://{address}{path}"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path} on {address}: {e}"));
    (response.status().as_u16(), response.text().await.expect("a body"))
}

/// Every probe of `container` answers 200 on the port it names.
async fn assert_probes_pass(container: &Value, args: &ServeArgs, server: &ServerProcess) -> usize {
    let mut probed = 0;
    for kind in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let probe = &container[kind]["httpGet"];
        if probe.is_null() {
            continue;
        }
        let address = args.address(server, container_port(container, &probe["port"]));
        let path = text(&probe["path"]);
        let (status, body) = get(&server.client, address, path).await;
        assert_eq!(status, 200, "{kind} GET {path}: {body}");
        probed += 1;
    }
    probed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_probes_ports_and_scrape_annotations_reach_the_servers_routes() {
    let deployment = manifest("kubernetes/deployment.yaml");
    let service = manifest("kubernetes/service.yaml");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    let args = ServeArgs::of(container);

    // The Service, the disruption budget and the autoscaler all reach these pods.
    let labels = pod["metadata"]["labels"].as_object().expect("the pod's labels");
    let selects_the_pods = |selector: &Value| {
        let selector = selector.as_object().expect("a selector");
        !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    };
    assert!(selects_the_pods(&service["spec"]["selector"]), "the Service's selector");
    let budget = manifest("kubernetes/pdb.yaml");
    assert!(
        selects_the_pods(&budget["spec"]["selector"]["matchLabels"]),
        "the PDB's selector"
    );
    let autoscaler = manifest("kubernetes/hpa.yaml");
    let scaled = &autoscaler["spec"]["scaleTargetRef"];
    assert_eq!(
        (&scaled["kind"], &scaled["name"]),
        (&deployment["kind"], &deployment["metadata"]["name"])
    );
    assert!(number(&autoscaler["spec"]["minReplicas"]) <= number(&deployment["spec"]["replicas"]));

    // The repository argument is the read-only models volume, the cache a volume of its
    // own (the root filesystem is read-only).
    let mounts = container["volumeMounts"].as_array().expect("volumeMounts");
    let mounted_at = |path: &str| mounts.iter().find(|m| m["mountPath"] == path).cloned();
    let models = mounted_at(&args.repository).expect("a volume at the repository argument");
    assert_eq!(models["readOnly"], true, "{models}");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    let cache = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "TENSORPLUG_CACHE_DIR")
        .expect("TENSORPLUG_CACHE_DIR");
    assert!(
        mounted_at(text(&cache["value"])).is_some(),
        "a volume at the compile cache"
    );

    // The kubelet's SIGKILL comes terminationGracePeriodSeconds after preStop begins: the
    // preStop sleep and the server's whole drain must fit in it.
    let pre_stop = number(&container["lifecycle"]["preStop"]["sleep"]["seconds"]);
    let termination = number(&pod["spec"]["terminationGracePeriodSeconds"]);
    assert!(
        termination > pre_stop + args.grace_secs,
        "terminationGracePeriodSeconds {termination} ≤ preStop {pre_stop} s + drain {} s",
        args.grace_secs
    );

    let repository = repository_of(&common::examples().join("digits"));
    let mut server = args.spawn(repository.path()).await;
    assert_eq!(
        assert_probes_pass(container, &args, &server).await,
        3,
        "startup, readiness and liveness probes"
    );

    // Each Service port targets a container port the server listens on, speaking its
    // appProtocol there.
    let ports = service["spec"]["ports"].as_array().expect("the Service's ports");
    assert_eq!(ports.len(), 2, "REST and gRPC");
    for port in ports {
        let target = container_port(container, &port["targetPort"]);
        assert_eq!(
            number(&port["port"]),
            target,
            "the Service keeps the container's port numbers"
        );
        let address = args.address(&server, target);
        match text(&port["appProtocol"]) {
            "http" => assert_eq!(get(&server.client, address, "/v2/health/live").await.0, 200),
            "kubernetes.io/h2c" => {
                let mut health = HealthClient::new(common::grpc::channel(address).await);
                let answer = health
                    .check(HealthCheckRequest { service: String::new() })
                    .await
                    .expect("grpc.health.v1 over h2c");
                assert_eq!(answer.get_ref().status, ServingStatus::Serving as i32);
            }
            other => panic!("appProtocol {other} is not checked here"),
        }
    }

    // Prometheus scrapes the port and path the annotations name, and reads its text format.
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    let port: u64 = text(&annotations["prometheus.io/port"]).parse().expect("a port number");
    let path = text(&annotations["prometheus.io/path"]);
    let (status, metrics) = get(&server.client, args.address(&server, port), path).await;
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains("# TYPE ") && metrics.contains("digits"),
        "Prometheus text: {metrics}"
    );

    // SIGTERM: drained and gone within the grace the manifest gives the server.
    server.terminate();
    let exit = server.wait_exit(Duration::from_secs(args.grace_secs)).await;
    assert!(
        exit.is_some_and(|s| s.success()),
        "exit within {} s: {exit:?}",
        args.grace_secs
    );
}

/// `pvc://<claim>/<path>`: the claim and the path inside it.
fn pvc_storage(uri: &str) -> (&str, &str) {
    let rest = uri
        .strip_prefix("pvc://")
        .unwrap_or_else(|| panic!("a pvc:// storageUri: {uri}"));
    rest.split_once('/')
        .map_or((rest, ""), |(claim, path)| (claim, path.trim_end_matches('/')))
}

/// The storage initializer's job: the content of `from` into `to` (not `from` itself).
fn copy_content(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_content(&path, &target);
        } else {
            std::fs::copy(&path, target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kserve_runtime_serves_the_storage_initializers_layout() {
    let runtime = manifest("kserve/cluster-serving-runtime.yaml");
    let service = manifest("kserve/inference-service.yaml");
    let spec = &runtime["spec"];
    let model = &service["spec"]["predictor"]["model"];
    assert_eq!(model["runtime"], runtime["metadata"]["name"]);
    let format = &spec["supportedModelFormats"][0];
    assert_eq!(format["name"], "tensorplug");
    assert_eq!(model["modelFormat"]["name"], format["name"]);
    assert_eq!(spec["protocolVersions"], serde_json::json!(["v2", "grpc-v2"]));
    let container = &spec["containers"][0];
    let args = ServeArgs::of(container);
    assert_eq!(
        args.repository, "/mnt/models",
        "KServe puts the storageUri's content in /mnt/models"
    );
    // KServe sends V2 REST to the container's first port.
    assert_eq!(
        number(&container["ports"][0]["containerPort"]),
        u64::from(args.http_port)
    );

    // The PVC, with the digits model folder in the repository folder the storageUri names;
    // then /mnt/models as the initializer fills it (a pvc:// mount shows the same tree).
    let (claim, path) = pvc_storage(text(&model["storageUri"]));
    let root = tempfile::tempdir().unwrap();
    let stored = root.path().join("pvc").join(claim).join(path);
    copy_content(repository_of(&common::examples().join("digits")).path(), &stored);
    let mnt_models: PathBuf = root.path().join("mnt/models");
    copy_content(&stored, &mnt_models);
    assert!(mnt_models.join("digits/model.toml").is_file());

    let server = args.spawn(&mnt_models).await;
    assert_eq!(
        assert_probes_pass(container, &args, &server).await,
        1,
        "the readiness probe"
    );
    let first_request = std::fs::read_to_string(common::root().join("tests/data/digits/test_requests.jsonl"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let address = args.address(&server, u64::from(args.http_port));
    let answer: Value = server
        .client
        .post(format!("http://{address}{DIGITS_INFER}"))
        .header("content-type", "application/json")
        .body(first_request)
        .send()
        .await
        .expect("the digits answer")
        .json()
        .await
        .expect("JSON");
    let label = output(&answer, "label")["data"][0].as_i64().expect("a label");
    assert_matches(
        &cases()[0],
        label,
        &output_f32(&answer, "probabilities"),
        "t0 through KServe's layout",
    );
}

/// The YAML the manifests are written in, read into JSON values: block mappings and
/// sequences, plain and quoted scalars, flow sequences of scalars, comments. (The crate
/// graph has no YAML parser, and the manifests need no more; anything else is an error
/// rather than a guess.)
mod yaml {
    use serde_json::{Map, Value};

    /// One content line: its indentation and its text without the comment.
    struct Line {
        indent: usize,
        text: String,
    }

    pub fn parse(source: &str) -> Result<Value, String> {
        let mut lines = Vec::new();
        for (number, raw) in source.lines().enumerate() {
            let text = strip_comment(raw);
            if text.trim().is_empty() {
                continue;
            }
            if text.trim() == "---" {
                if lines.is_empty() {
                    continue;
                }
                return Err(format!("line {}: one document per file", number + 1));
            }
            if text.contains('\t') || text.trim_end().ends_with('|') || text.trim_end().ends_with('>') {
                return Err(format!("line {}: tabs and block scalars are not read here", number + 1));
            }
            let indent = text.len() - text.trim_start().len();
            lines.push(Line {
                indent,
                text: text.trim().to_owned(),
            });
        }
        let mut at = 0;
        let value = block(&mut lines, &mut at, 0)?;
        match lines.get(at) {
            Some(line) => Err(format!("unexpected `{}`", line.text)),
            None => Ok(value),
        }
    }

    fn strip_comment(line: &str) -> &str {
        let mut quote = None;
        for (i, c) in line.char_indices() {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '#') if i == 0 || line[..i].ends_with(' ') => return &line[..i],
                _ => {}
            }
        }
        line
    }

    /// The block of lines indented by exactly `indent` from `at` on.
    fn block(lines: &mut [Line], at: &mut usize, indent: usize) -> Result<Value, String> {
        match lines.get(*at) {
            Some(line) if line.text == "-" || line.text.starts_with("- ") => sequence(lines, at, indent),
            Some(_) => mapping(lines, at, indent),
            None => Ok(Value::Null),
        }
    }

    fn sequence(lines: &mut [Line], at: &mut usize, indent: usize) -> Result<Value, String> {
        let mut items = Vec::new();
        while let Some(line) = lines.get_mut(*at) {
            if line.indent != indent || !(line.text == "-" || line.text.starts_with("- ")) {
                break;
            }
            let rest = line.text[1..].trim_start().to_owned();
            if rest.is_empty() {
                *at += 1;
                items.push(nested(lines, at, indent)?);
            } else if key_value(&rest).is_some() {
                // `- key: value` opens a mapping indented where `key` starts.
                line.indent += line.text.len() - rest.len();
                line.text = rest;
                let inner = line.indent;
                items.push(mapping(lines, at, inner)?);
            } else {
                *at += 1;
                items.push(scalar(&rest)?);
            }
        }
        Ok(Value::Array(items))
    }

    fn mapping(lines: &mut [Line], at: &mut usize, indent: usize) -> Result<Value, String> {
        let mut map = Map::new();
        while let Some(line) = lines.get(*at) {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return Err(format!("unexpected indentation at `{}`", line.text));
            }
            let (key, value) = key_value(&line.text).ok_or_else(|| format!("not `key: value`: `{}`", line.text))?;
            let (key, value) = (unquote(key), value.to_owned());
            *at += 1;
            let value = if value.is_empty() {
                // A sequence may sit at its key's indentation.
                match lines.get(*at) {
                    Some(next) if next.indent == indent && next.text.starts_with('-') => sequence(lines, at, indent)?,
                    _ => nested(lines, at, indent)?,
                }
            } else {
                scalar(&value)?
            };
            if map.insert(key.clone(), value).is_some() {
                return Err(format!("key `{key}` twice"));
            }
        }
        Ok(Value::Object(map))
    }

    /// The block indented deeper than `indent` that follows, or null when none does.
    fn nested(lines: &mut [Line], at: &mut usize, indent: usize) -> Result<Value, String> {
        match lines.get(*at) {
            Some(next) if next.indent > indent => {
                let inner = next.indent;
                block(lines, at, inner)
            }
            _ => Ok(Value::Null),
        }
    }

    /// `key: value` or `key:`, the key plain or quoted.
    fn key_value(text: &str) -> Option<(&str, &str)> {
        if let Some(key) = text.strip_suffix(':') {
            return (!key.contains(": ")).then_some((key, ""));
        }
        let (key, value) = text.split_once(": ")?;
        (!key.starts_with('[') && !key.starts_with('{')).then_some((key, value.trim()))
    }

    fn unquote(text: &str) -> String {
        let quoted = |q| text.len() >= 2 && text.starts_with(q) && text.ends_with(q);
        if quoted('"') || quoted('\'') {
            text[1..text.len() - 1].to_owned()
        } else {
            text.to_owned()
        }
    }

    fn scalar(text: &str) -> Result<Value, String> {
        if text.starts_with('"') || text.starts_with('\'') {
            let inner = unquote(text);
            if inner.len() + 2 != text.len() || inner.contains(['\\', '"', '\'']) {
                return Err(format!("quoted scalars with escapes are not read here: `{text}`"));
            }
            return Ok(Value::String(inner));
        }
        if let Some(items) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return items
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(scalar)
                .collect::<Result<_, _>>()
                .map(Value::Array);
        }
        if text.starts_with(['{', '&', '*', '!', '|', '>']) {
            return Err(format!("not read here: `{text}`"));
        }
        Ok(match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" | "~" => Value::Null,
            _ => text
                .parse::<i64>()
                .map_or_else(|_| Value::String(text.to_owned()), Value::from),
        })
    }

    #[test]
    fn reads_the_manifests_subset() {
        let value = parse(
            "a: 1 # one\nb:\n  - x: \"8080\"\n    y: [v2, grpc-v2]\n  - plain\nc:\n- 2\nd: /v2/health/ready\ne: true\n",
        )
        .unwrap();
        assert_eq!(
            value,
            serde_json::json!({"a": 1, "b": [{"x": "8080", "y": ["v2", "grpc-v2"]}, "plain"], "c": [2],
                               "d": "/v2/health/ready", "e": true})
        );
        assert!(parse("a: |\n  text\n").is_err());
        assert!(parse("a: 1\na: 2\n").is_err());
    }
}
