#!/usr/bin/env python3
"""The clients embedding users have, unmodified from PyPI, against a running tensorplug
serving `minilm` (examples/models/minilm): OpenAI's official `openai` package on
`/v1/embeddings` and `/v1/models`, and `tritonclient` HTTP and gRPC with BYTES inputs
(JSON and binary tensor data). Vectors are checked against sentence-transformers' own
(tests/data/minilm/oracle.jsonl).

    embeddings.py --http HOST:PORT --grpc HOST:PORT --oracle tests/data/minilm/oracle.jsonl

Each check prints one line when it passes; the first failure prints what went wrong and
the script exits 1. The last line is `embeddings: every check passed`.
"""

import argparse
import base64
import json
import sys
import traceback

import numpy as np

MODEL = "minilm"
COSINE = 0.9999


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def run(name, check, *args):
    try:
        check(*args)
    except Exception as error:  # noqa: BLE001 - any failure of a check is reported
        print(f"FAIL  {name}: {type(error).__name__}: {error}", flush=True)
        traceback.print_exc()
        sys.exit(1)
    print(f"ok    {name}", flush=True)


def cosine(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def expect_oracle(vectors, lines, what):
    expect(len(vectors) == len(lines), f"{what}: {len(vectors)} vectors for {len(lines)} texts")
    for vector, line in zip(vectors, lines):
        c = cosine(vector, line["embedding"])
        expect(c >= COSINE, f"{what}: cosine {c} for {line['text'][:60]!r}")


# --- OpenAI ---------------------------------------------------------------------------


def openai_client(http):
    from openai import OpenAI

    return OpenAI(base_url=f"http://{http}/v1", api_key="unused", max_retries=0, timeout=60)


def openai_models(http):
    client = openai_client(http)
    ids = [model.id for model in client.models.list()]
    expect(ids == [MODEL], f"models.list: {ids}")
    expect(client.models.retrieve(MODEL).id == MODEL, "models.retrieve")


def openai_one_string(http, lines):
    client = openai_client(http)
    answer = client.embeddings.create(model=MODEL, input=lines[0]["text"])
    expect(answer.model == MODEL, f"model {answer.model}")
    expect(len(answer.data) == 1 and answer.data[0].index == 0, "one vector, index 0")
    expect_oracle([answer.data[0].embedding], lines[:1], "one string")
    tokens = len(lines[0]["input_ids"])
    expect(answer.usage.prompt_tokens == tokens, f"prompt_tokens {answer.usage.prompt_tokens}, want {tokens}")
    expect(answer.usage.total_tokens == tokens, "total_tokens")


def openai_list(http, lines, encoding_format):
    client = openai_client(http)
    chunk = lines[:40]
    answer = client.embeddings.create(
        model=MODEL, input=[line["text"] for line in chunk], encoding_format=encoding_format
    )
    expect([d.index for d in answer.data] == list(range(len(chunk))), "indices in order")
    vectors = [d.embedding for d in answer.data]
    if encoding_format == "base64":
        # Asked for explicitly, base64 reaches the caller as it is (the client decodes it
        # only when it chose the format itself).
        vectors = [np.frombuffer(base64.b64decode(v), dtype="<f4") for v in vectors]
    expect_oracle(vectors, chunk, encoding_format)
    tokens = sum(len(line["input_ids"]) for line in chunk)
    expect(answer.usage.prompt_tokens == tokens, f"prompt_tokens {answer.usage.prompt_tokens}, want {tokens}")


def openai_default_encoding(http, lines):
    """The client asks for base64 unless told otherwise, and decodes it itself: check the
    raw bytes too."""
    import urllib.request

    body = json.dumps({"model": MODEL, "input": [lines[1]["text"]], "encoding_format": "base64"}).encode()
    request = urllib.request.Request(
        f"http://{http}/v1/embeddings", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)
    vector = np.frombuffer(base64.b64decode(answer["data"][0]["embedding"]), dtype="<f4")
    expect(vector.shape == (384,), f"{vector.shape}")
    expect_oracle([vector], lines[1:2], "raw base64")


def openai_errors(http):
    import openai

    client = openai_client(http)
    try:
        client.embeddings.create(model="no-such-model", input="x")
        raise AssertionError("an unknown model was answered")
    except openai.NotFoundError as error:
        expect(error.status_code == 404, f"{error.status_code}")
        expect(error.code == "model_not_found", f"code {error.code}")
    try:
        client.embeddings.create(model=MODEL, input=["fine", 42])
        raise AssertionError("a token array was answered")
    except openai.BadRequestError as error:
        expect("input[1]" in str(error), f"the message names the index: {error}")
        expect(error.param == "input", f"param {error.param}")
    try:
        client.embeddings.create(model=MODEL, input="x", dimensions=128)
        raise AssertionError("dimensions 128 was answered")
    except openai.BadRequestError as error:
        expect("384" in str(error), f"{error}")


# --- tritonclient, BYTES inputs ---------------------------------------------------------


def triton_inputs(module, texts, binary):
    data = np.array([t.encode("utf-8") for t in texts], dtype=np.object_)
    tensor = module.InferInput("text", [len(texts)], "BYTES")
    if binary is None:
        tensor.set_data_from_numpy(data)
    else:
        tensor.set_data_from_numpy(data, binary_data=binary)
    return [tensor]


def triton_http(http, lines, binary):
    import tritonclient.http as client_module

    client = client_module.InferenceServerClient(http)
    expect(client.is_model_ready(MODEL), "model ready")
    chunk = lines[:24]
    outputs = [client_module.InferRequestedOutput("embedding", binary_data=binary)]
    answer = client.infer(MODEL, triton_inputs(client_module, [l["text"] for l in chunk], binary), outputs=outputs)
    vectors = answer.as_numpy("embedding")
    expect(vectors.shape == (len(chunk), 384), f"{vectors.shape}")
    expect_oracle(vectors, chunk, f"tritonclient.http binary={binary}")


def triton_grpc(grpc, lines):
    import tritonclient.grpc as client_module

    client = client_module.InferenceServerClient(grpc)
    metadata = client.get_model_metadata(MODEL, as_json=True)
    expect(metadata["inputs"][0]["datatype"] == "BYTES", f"{metadata}")
    chunk = lines[24:48]
    answer = client.infer(MODEL, triton_inputs(client_module, [l["text"] for l in chunk], None))
    vectors = answer.as_numpy("embedding")
    expect(vectors.shape == (len(chunk), 384), f"{vectors.shape}")
    expect_oracle(vectors, chunk, "tritonclient.grpc")
    tokens = answer.as_numpy("tokens").reshape(-1).tolist()
    expect(tokens == [len(l["input_ids"]) for l in chunk], f"tokens {tokens}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", required=True)
    parser.add_argument("--grpc", required=True)
    parser.add_argument("--oracle", required=True)
    parser.add_argument("--only", choices=["openai", "triton-http", "triton-grpc"])
    args = parser.parse_args()
    with open(args.oracle, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    if args.only in (None, "openai"):
        run("openai: models.list and models.retrieve", openai_models, args.http)
        run("openai: one string, usage from the tokenizer", openai_one_string, args.http, lines)
        run("openai: a list of strings, float", openai_list, args.http, lines, "float")
        run("openai: a list of strings, base64", openai_list, args.http, lines, "base64")
        run("openai: base64 bytes are little-endian FP32", openai_default_encoding, args.http, lines)
        run("openai: errors (unknown model, a token array, dimensions)", openai_errors, args.http)
    if args.only in (None, "triton-http"):
        run("tritonclient.http: BYTES as JSON", triton_http, args.http, lines, False)
        run("tritonclient.http: BYTES as binary tensor data", triton_http, args.http, lines, True)
    if args.only in (None, "triton-grpc"):
        run("tritonclient.grpc: BYTES, embedding and tokens", triton_grpc, args.grpc, lines)
    print("embeddings: every check passed", flush=True)


if __name__ == "__main__":
    main()
