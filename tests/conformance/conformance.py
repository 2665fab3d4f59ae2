#!/usr/bin/env python3
"""Conformance of a running tensorplug server with the unmodified V2 clients from PyPI.

    conformance.py --http HOST:PORT --grpc HOST:PORT [--data tests/data/digits]

The server must serve a repository holding `digits` (examples/models/digits) and
`faulty` (tests/models/faulty). Each check prints one line when it passes; the first
failed check prints what was sent and what came back, and the script exits 1.

tritonclient.grpc and kserve both register the protobuf package `inference` in the
default descriptor pool, so they cannot be imported by one process: each client family
runs in its own child process (`--only triton` / `--only kserve`), one after the other.

Expected failures are server gaps found by these clients and reported, listed in
EXPECTED_FAILURES: such a check prints `XFAIL` and the run goes on; once the server is
fixed the check passes, the run fails with `XPASS`, and its entry must be removed.
"""

import argparse
import asyncio
import importlib.metadata
import json
import os
import queue
import subprocess
import sys
import traceback
import urllib.error
import urllib.request

import numpy as np

TOLERANCE = 1e-5  # as tests/e2e/digits.rs: labels exactly, probabilities within 1e-5
SUMMARY_REST = '{failed} of {items} items failed; each item\'s status is in "results"'
SUMMARY_GRPC = "{failed} of {items} items failed; each item's status is in the tensorplug-item-status trailer"

# Checks that fail because of a known server gap: name -> (what the error must say, what
# is wrong). A check listed here that fails otherwise, or passes, fails the run.
EXPECTED_FAILURES: dict = {}


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def expect_eq(got, want, what):
    if got != want:
        raise CheckFailed(f"{what}: got {got!r}, want {want!r}")


def run(name, check, *args):
    """Runs one check; exits 1 on an unexpected outcome."""
    needle, expected = EXPECTED_FAILURES.get(name, (None, None))
    try:
        check(*args)
    except Exception as error:  # noqa: BLE001 - any failure of a check is reported
        if needle is not None and needle in str(error):
            print(f"XFAIL {name}: {expected} (got {type(error).__name__}: {error})", flush=True)
            return
        print(f"FAIL  {name}: {type(error).__name__}: {error}", flush=True)
        if not isinstance(error, CheckFailed):
            traceback.print_exc()
        sys.exit(1)
    if expected is not None:
        print(
            f"FAIL  {name}: XPASS, expected to fail ({expected}) but passed: "
            "remove it from EXPECTED_FAILURES in tests/conformance/conformance.py",
            flush=True,
        )
        sys.exit(1)
    print(f"ok    {name}", flush=True)


# --- the digits oracle ----------------------------------------------------------------


class Oracle:
    """The 450 test images with scikit-learn's answers (tests/data/digits)."""

    def __init__(self, folder):
        pixels, labels, proba = [], [], []
        with open(os.path.join(folder, "test_requests.jsonl")) as requests, open(
            os.path.join(folder, "test_oracle.jsonl")
        ) as oracle:
            for request_line, oracle_line in zip(requests, oracle):
                request, answer = json.loads(request_line), json.loads(oracle_line)
                assert request["id"] == answer["id"], (request["id"], answer["id"])
                pixels.append(request["inputs"][0]["data"])
                labels.append(answer["predict"])
                proba.append(answer["predict_proba"])
        self.pixels = np.array(pixels, dtype=np.float32)
        self.labels = np.array(labels, dtype=np.int64)
        self.proba = np.array(proba, dtype=np.float64).astype(np.float32)
        expect_eq(self.pixels.shape, (450, 64), "oracle images")

    def check(self, first, proba, labels, what):
        """Checks the answers for images first.. (as many as `labels` holds)."""
        proba = np.asarray(proba)
        labels = np.asarray(labels)
        n = labels.shape[0]
        expect_eq(proba.dtype, np.float32, f"{what}: probabilities' dtype")
        expect_eq(labels.dtype, np.int64, f"{what}: labels' dtype")
        expect_eq(tuple(proba.shape), (n, 10), f"{what}: probabilities' shape")
        expect_eq(tuple(labels.shape), (n, 1), f"{what}: labels' shape")
        want_labels = self.labels[first : first + n]
        for i in np.nonzero(labels[:, 0] != want_labels)[0][:1]:
            raise CheckFailed(f"{what}: image {first + i} labelled {labels[i, 0]}, scikit-learn says {want_labels[i]}")
        diff = np.abs(proba.astype(np.float64) - self.proba[first : first + n].astype(np.float64))
        worst = np.unravel_index(np.argmax(diff), diff.shape)
        expect(
            diff[worst] <= TOLERANCE,
            f"{what}: image {first + worst[0]} probability {worst[1]}: got {proba[worst]}, "
            f"scikit-learn says {self.proba[first + worst[0], worst[1]]} (tolerance {TOLERANCE})",
        )


# --- plain HTTP (what the clients do not expose) ----------------------------------------


def http_post(http, path, body, headers):
    """POSTs `body`; answers (status, headers, body bytes) for any status."""
    request = urllib.request.Request(f"http://{http}{path}", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def faulty_x(values):
    """The faulty model's input: one FP32 item per value (-5: the item fails with 422)."""
    return np.array(values, dtype=np.float32).reshape(len(values), 1)


# --- tritonclient ------------------------------------------------------------------------


def triton_checks(args, oracle):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    print(f"      tritonclient {importlib.metadata.version('tritonclient')}", flush=True)
    http = httpclient.InferenceServerClient(url=args.http)
    grpc = grpcclient.InferenceServerClient(url=args.grpc)

    # -- tritonclient.http: health and metadata --
    def http_health():
        expect(http.is_server_live(), "is_server_live() is False")
        expect(http.is_server_ready(), "is_server_ready() is False")
        expect(http.is_model_ready("digits"), "is_model_ready('digits') is False")
        expect(http.is_model_ready("faulty"), "is_model_ready('faulty') is False")
        expect(http.is_model_ready("digits", "1"), "is_model_ready('digits', '1') is False")
        expect(not http.is_model_ready("no-such-model"), "is_model_ready('no-such-model') is True")

    def http_server_metadata():
        meta = http.get_server_metadata()
        expect_eq(meta.get("name"), "tensorplug", f"server name in {meta}")
        expect(meta.get("version"), f"no version in {meta}")
        expect("binary_tensor_data" in meta.get("extensions", []), f"binary_tensor_data not in {meta}")

    def http_model_metadata():
        meta = http.get_model_metadata("digits")
        expect_eq(meta.get("name"), "digits", "name")
        expect_eq(meta.get("versions"), ["1"], "versions")
        expect_eq(meta.get("inputs"), [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}], "inputs")
        expect_eq(
            meta.get("outputs"),
            [
                {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
                {"name": "label", "datatype": "INT64", "shape": [-1, 1]},
            ],
            "outputs",
        )
        versioned = http.get_model_metadata("digits", "1")
        expect_eq(versioned, meta, "metadata of version 1")
        try:
            http.get_model_metadata("no-such-model")
        except InferenceServerException as error:
            expect_eq(error.status(), "404", f"status of {error}")
            expect("no-such-model" in error.message(), f"{error.message()!r} does not name the model")
        else:
            raise CheckFailed("metadata of an unknown model did not raise")

    run("tritonclient.http is_server_live / is_server_ready / is_model_ready", http_health)
    run("tritonclient.http get_server_metadata", http_server_metadata)
    run("tritonclient.http get_model_metadata", http_model_metadata)

    # -- tritonclient.http: digits --
    def http_infer(first, n, binary, shape=None, outputs=True):
        pixels = oracle.pixels[first : first + n]
        if shape is not None:
            pixels = pixels.reshape(shape)
        tensor = httpclient.InferInput("input-0", list(pixels.shape), "FP32")
        tensor.set_data_from_numpy(pixels, binary_data=binary)
        requested = None
        if outputs:
            requested = [
                httpclient.InferRequestedOutput("probabilities", binary_data=binary),
                httpclient.InferRequestedOutput("label", binary_data=binary),
            ]
        result = http.infer("digits", [tensor], outputs=requested, request_id=f"http-{first}-{n}")
        response = result.get_response()
        expect_eq(response.get("model_name"), "digits", "model_name")
        expect_eq(response.get("model_version"), "1", "model_version")
        expect_eq(response.get("id"), f"http-{first}-{n}", "id")
        for name in ["probabilities", "label"]:
            output = result.get_output(name)
            expect(output is not None, f"no output {name} in {response}")
            as_binary = "binary_data_size" in output.get("parameters", {})
            expect_eq(as_binary, binary, f"output {name} sent as binary data")
            expect_eq("data" in output, not binary, f"output {name} has JSON data")
        oracle.check(first, result.as_numpy("probabilities"), result.as_numpy("label"), f"images {first}..{first + n}")

    def http_digits(binary):
        for first in range(10):
            http_infer(first, 1, binary)
        http_infer(0, 450, binary)
        http_infer(8, 8, binary, shape=(8, 8, 8))

    def http_statistics(model, version=""):
        stats = http.get_inference_statistics(model, version)
        rows = {row["name"]: row for row in stats["model_stats"]}
        return stats, rows

    digits_before = {}
    run(
        "tritonclient.http get_inference_statistics(digits) before inferring",
        lambda: digits_before.update(http_statistics("digits")[1]["digits"]),
    )

    run(
        "tritonclient.http digits, binary inputs and outputs (10 single images, all 450 at once, [8, 8, 8])",
        http_digits,
        True,
    )
    run("tritonclient.http digits, JSON inputs and outputs (the same requests)", http_digits, False)
    run(
        "tritonclient.http digits, outputs not listed (binary_data_output)",
        lambda: http_infer(100, 32, True, outputs=False),
    )

    def http_stats():
        stats, rows = http_statistics("digits")
        expect_eq(sorted(rows), ["digits"], f"models in {stats}")
        row = rows["digits"]
        expect_eq(row["version"], "1", "version")
        # Triton's meaning: inference_count counts items, success counts requests (and
        # their total duration).
        items = 2 * (10 + 450 + 8) + 32
        requests = 2 * (10 + 1 + 1) + 1
        expect_eq(row["inference_count"] - digits_before["inference_count"], items, f"new inference_count in {row}")
        expect_eq(
            row["inference_stats"]["success"]["count"] - digits_before["inference_stats"]["success"]["count"],
            requests,
            f"new success count in {row}",
        )
        expect(
            row["inference_stats"]["success"]["ns"] > digits_before["inference_stats"]["success"]["ns"],
            f"success ns did not grow in {row}",
        )
        expect_eq(
            row["inference_stats"]["fail"]["count"] - digits_before["inference_stats"]["fail"]["count"],
            0,
            f"new fail count in {row}",
        )
        expect(row["execution_count"] > digits_before["execution_count"], f"execution_count did not grow in {row}")

    def http_stats_all():
        _, rows = http_statistics("")
        expect_eq(sorted(rows), ["digits", "faulty"], "models")

    def http_stats_version():
        _, rows = http_statistics("digits", "1")
        expect_eq(sorted(rows), ["digits"], "models")

    run("tritonclient.http get_inference_statistics(digits)", http_stats)
    run("tritonclient.http get_inference_statistics() of every model", http_stats_all)
    run("tritonclient.http get_inference_statistics(digits, version 1)", http_stats_version)

    # -- tritonclient.http: one item of three fails (207) --
    def http_partial_failure_faulty():
        x = faulty_x([1.0, -5.0, 3.0])
        tensor = httpclient.InferInput("x", [3, 1], "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        outputs = [httpclient.InferRequestedOutput("y", binary_data=True)]
        try:
            http.infer("faulty", [tensor], outputs=outputs, request_id="partial")
        except InferenceServerException as error:
            expect_eq(error.message(), SUMMARY_REST.format(failed=1, items=3), "the exception's message")
            expect_eq(error.status(), "207", "the exception's status")
        else:
            raise CheckFailed("a request with a failing item did not raise InferenceServerException")

        # The same request, byte for byte, sent without tritonclient: the 207's results.
        body, json_size = httpclient.InferenceServerClient.generate_request_body(
            [tensor], outputs=outputs, request_id="partial"
        )
        expect(json_size is not None, "tritonclient did not use binary tensor data")
        status, headers, answer = http_post(
            args.http,
            "/v2/models/faulty/infer",
            body,
            {"Inference-Header-Content-Length": str(json_size), "Content-Type": "application/octet-stream"},
        )
        expect_eq(status, 207, f"status of {answer!r}")
        expect(
            headers.get("Content-Type", "").startswith("application/json"),
            f"content type {headers.get('Content-Type')} (a 207 is plain JSON)",
        )
        expect(headers.get("Inference-Header-Content-Length") is None, "a 207 declares binary data")
        answer = json.loads(answer)
        expect_eq(answer.get("model_name"), "faulty", f"model_name in {answer}")
        expect_eq(answer.get("model_version"), "1", f"model_version in {answer}")
        expect_eq(answer.get("id"), "partial", f"id in {answer}")
        expect_eq(answer.get("error"), SUMMARY_REST.format(failed=1, items=3), "error")
        results = answer.get("results")
        expect(isinstance(results, list) and len(results) == 3, f"results in {answer}")
        expect_eq([r.get("status") for r in results], [200, 422, 200], f"statuses in {answer}")
        expect("faulty: item rejected" in results[1].get("error", ""), f"item 1's error in {answer}")
        for i, y in [(0, 2.0), (2, 6.0)]:
            expect_eq(
                results[i].get("outputs"),
                [{"name": "y", "datatype": "FP32", "shape": [1, 1], "data": [y]}],
                f"item {i}'s outputs",
            )

    def http_partial_failure_digits():
        pixels = oracle.pixels[:3].copy()
        pixels[1, 5] = 99.0
        tensor = httpclient.InferInput("input-0", [3, 64], "FP32")
        tensor.set_data_from_numpy(pixels, binary_data=False)
        try:
            http.infer("digits", [tensor])
        except InferenceServerException as error:
            expect_eq(error.message(), SUMMARY_REST.format(failed=1, items=3), "the exception's message")
        else:
            raise CheckFailed("a request with a bad image did not raise InferenceServerException")
        body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor])
        expect(json_size is None, "tritonclient used binary tensor data")
        status, _, answer = http_post(args.http, "/v2/models/digits/infer", body, {"Content-Type": "application/json"})
        expect_eq(status, 207, f"status of {answer!r}")
        results = json.loads(answer)["results"]
        expect_eq([r["status"] for r in results], [200, 400, 200], "statuses")
        expect("pixel value 99" in results[1]["error"], f"item 1's error {results[1]}")
        for i in [0, 2]:
            outputs = {o["name"]: o for o in results[i]["outputs"]}
            oracle.check(
                i,
                np.array(outputs["probabilities"]["data"], dtype=np.float32).reshape(outputs["probabilities"]["shape"]),
                np.array(outputs["label"]["data"], dtype=np.int64).reshape(outputs["label"]["shape"]),
                f"207 item {i}",
            )

    run(
        "tritonclient.http faulty [1, -5, 3] binary: InferenceServerException with the summary; the 207's results",
        http_partial_failure_faulty,
    )
    run(
        "tritonclient.http digits, one bad image of 3, JSON: InferenceServerException; the 207's results",
        http_partial_failure_digits,
    )
    http.close()

    # -- tritonclient.grpc: health and metadata --
    def grpc_health():
        expect(grpc.is_server_live(), "is_server_live() is False")
        expect(grpc.is_server_ready(), "is_server_ready() is False")
        expect(grpc.is_model_ready("digits"), "is_model_ready('digits') is False")
        expect(grpc.is_model_ready("faulty"), "is_model_ready('faulty') is False")
        expect(grpc.is_model_ready("digits", "1"), "is_model_ready('digits', '1') is False")

    def grpc_server_metadata():
        meta = grpc.get_server_metadata()
        expect_eq(meta.name, "tensorplug", f"server name in {meta}")
        expect(meta.version, f"no version in {meta}")
        as_json = grpc.get_server_metadata(as_json=True)
        expect_eq(as_json.get("name"), "tensorplug", f"name in {as_json}")

    def grpc_model_metadata():
        # The fields tritonclient knows (fields it does not know, such as a map whose order
        # on the wire is free, are not compared).
        def known(meta):
            return {
                "name": meta.name,
                "versions": list(meta.versions),
                "platform": meta.platform,
                "inputs": [(t.name, t.datatype, list(t.shape)) for t in meta.inputs],
                "outputs": [(t.name, t.datatype, list(t.shape)) for t in meta.outputs],
            }

        meta = known(grpc.get_model_metadata("digits"))
        expect_eq(meta["name"], "digits", "name")
        expect_eq(meta["versions"], ["1"], "versions")
        expect_eq(meta["inputs"], [("input-0", "FP32", [-1, 64])], "inputs")
        expect_eq(meta["outputs"], [("probabilities", "FP32", [-1, 10]), ("label", "INT64", [-1, 1])], "outputs")
        expect_eq(known(grpc.get_model_metadata("digits", "1")), meta, "metadata of version 1")
        try:
            grpc.get_model_metadata("no-such-model")
        except InferenceServerException as error:
            expect_eq(error.status(), "StatusCode.NOT_FOUND", f"status of {error}")
        else:
            raise CheckFailed("metadata of an unknown model did not raise")

    run("tritonclient.grpc is_server_live / is_server_ready / is_model_ready", grpc_health)
    run("tritonclient.grpc get_server_metadata", grpc_server_metadata)
    run("tritonclient.grpc get_model_metadata", grpc_model_metadata)

    # -- tritonclient.grpc: digits --
    def grpc_inputs(first, n, shape=None):
        pixels = oracle.pixels[first : first + n]
        if shape is not None:
            pixels = pixels.reshape(shape)
        tensor = grpcclient.InferInput("input-0", list(pixels.shape), "FP32")
        tensor.set_data_from_numpy(pixels)
        return [tensor]

    grpc_outputs = [grpcclient.InferRequestedOutput("probabilities"), grpcclient.InferRequestedOutput("label")]

    def grpc_check_result(result, first, n, request_id):
        response = result.get_response()
        expect_eq(response.model_name, "digits", "model_name")
        expect_eq(response.model_version, "1", "model_version")
        expect_eq(response.id, request_id, "id")
        oracle.check(first, result.as_numpy("probabilities"), result.as_numpy("label"), f"images {first}..{first + n}")

    def grpc_infer(first, n, shape=None, outputs=grpc_outputs):
        request_id = f"grpc-{first}-{n}"
        result = grpc.infer("digits", grpc_inputs(first, n, shape), outputs=outputs, request_id=request_id)
        grpc_check_result(result, first, n, request_id)

    def grpc_digits():
        for first in range(10):
            grpc_infer(first, 1)
        grpc_infer(0, 450)
        grpc_infer(8, 8, shape=(8, 8, 8))
        grpc_infer(100, 32, outputs=None)

    def grpc_statistics(model=""):
        return {row.name: row for row in grpc.get_inference_statistics(model).model_stats}

    grpc_before = grpcclient.service_pb2.ModelStatistics()
    run(
        "tritonclient.grpc get_inference_statistics(digits) before inferring",
        lambda: grpc_before.CopyFrom(grpc_statistics("digits")["digits"]),
    )
    run("tritonclient.grpc digits (10 single images, all 450 at once, [8, 8, 8], outputs not listed)", grpc_digits)

    def grpc_stats():
        row = grpc_statistics("digits")["digits"]
        expect_eq(row.version, "1", "version")
        items = 10 + 450 + 8 + 32
        requests = 10 + 1 + 1 + 1
        expect_eq(row.inference_count - grpc_before.inference_count, items, f"new inference_count in {row}")
        expect_eq(
            row.inference_stats.success.count - grpc_before.inference_stats.success.count,
            requests,
            f"new success count in {row}",
        )
        expect(row.inference_stats.queue.ns > grpc_before.inference_stats.queue.ns, f"queue ns did not grow in {row}")
        expect_eq(row.inference_stats.fail.count - grpc_before.inference_stats.fail.count, 0, f"new fails in {row}")
        expect_eq(sorted(grpc_statistics("")), ["digits", "faulty"], "models of get_inference_statistics()")
        as_json = grpc.get_inference_statistics("digits", as_json=True)
        expect_eq(as_json["model_stats"][0]["name"], "digits", f"name in {as_json}")

    run("tritonclient.grpc get_inference_statistics (digits, and every model)", grpc_stats)

    # -- tritonclient.grpc: streaming --
    def grpc_stream():
        answers = queue.Queue()
        grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
        sent = []
        try:
            for k, first in enumerate([0, 1, 2, 3]):
                request_id = f"stream-{k}"
                grpc.async_stream_infer("digits", grpc_inputs(first, 1), outputs=grpc_outputs, request_id=request_id)
                sent.append(("digits", request_id, first, 1))
            # A failing request, then a partly failing one: the stream goes on after each.
            tensor = grpcclient.InferInput("x", [1, 1], "FP32")
            tensor.set_data_from_numpy(faulty_x([-5.0]))
            grpc.async_stream_infer("faulty", [tensor], request_id="stream-fail")
            sent.append(("fail", "stream-fail", None, None))
            tensor = grpcclient.InferInput("x", [3, 1], "FP32")
            tensor.set_data_from_numpy(faulty_x([1.0, -5.0, 3.0]))
            grpc.async_stream_infer("faulty", [tensor], request_id="stream-partial")
            sent.append(("partial", "stream-partial", None, None))
            for k, (first, n) in enumerate([(4, 1), (10, 16), (200, 250)]):
                request_id = f"stream-after-{k}"
                grpc.async_stream_infer("digits", grpc_inputs(first, n), outputs=grpc_outputs, request_id=request_id)
                sent.append(("digits", request_id, first, n))
            for kind, request_id, first, n in sent:
                try:
                    result, error = answers.get(timeout=30)
                except queue.Empty:
                    raise CheckFailed(f"no answer to {request_id} within 30 s") from None
                if kind == "digits":
                    expect(error is None, f"{request_id}: callback error {error}")
                    grpc_check_result(result, first, n, request_id)
                elif kind == "fail":
                    expect(result is None, f"{request_id}: a result for a failing request")
                    expect(
                        error is not None and "faulty: item rejected" in error.message(),
                        f"{request_id}: callback error {error}",
                    )
                else:
                    expect(result is None, f"{request_id}: a result for a partly failing request")
                    expect(
                        error is not None and error.message().startswith(SUMMARY_GRPC.format(failed=1, items=3)),
                        f"{request_id}: callback error {error}",
                    )
            expect(answers.empty(), f"an extra answer: {answers.queue[0] if answers.qsize() else None}")
        finally:
            grpc.stop_stream()

    run(
        "tritonclient.grpc start_stream / async_stream_infer / stop_stream "
        "(7 digits requests, a failing and a partly failing one in between)",
        grpc_stream,
    )

    # -- tritonclient.grpc: one item of three fails --
    def grpc_partial_failure():
        tensor = grpcclient.InferInput("x", [3, 1], "FP32")
        tensor.set_data_from_numpy(faulty_x([1.0, -5.0, 3.0]))
        try:
            grpc.infer("faulty", [tensor], request_id="partial")
        except InferenceServerException as error:
            message = error.message()
            expect(message.startswith(SUMMARY_GRPC.format(failed=1, items=3)), f"the exception's message {message!r}")
            expect("faulty: item rejected" in message, f"the exception's message {message!r}")
            expect_eq(error.status(), "StatusCode.INVALID_ARGUMENT", "the exception's status")
        else:
            raise CheckFailed("a request with a failing item did not raise InferenceServerException")

        # tritonclient does not expose trailers: the same request through its generated stub.
        import grpc as grpcio
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        request = service_pb2.ModelInferRequest(model_name="faulty", id="partial")
        request.inputs.add(name="x", datatype="FP32", shape=[3, 1])
        request.raw_input_contents.append(faulty_x([1.0, -5.0, 3.0]).tobytes())
        with grpcio.insecure_channel(args.grpc) as channel:
            try:
                service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
            except grpcio.RpcError as error:
                trailers = dict(error.trailing_metadata() or ())
            else:
                raise CheckFailed("the stub's request with a failing item succeeded")
        expect("tensorplug-item-status" in trailers, f"no tensorplug-item-status in trailers {trailers}")
        statuses = json.loads(trailers["tensorplug-item-status"])
        expect_eq([s.get("status") for s in statuses], [200, 422, 200], f"statuses in {statuses}")
        expect("faulty: item rejected" in statuses[1].get("error", ""), f"item 1's error in {statuses}")

    run(
        "tritonclient.grpc faulty [1, -5, 3]: InferenceServerException with the summary; the item-status trailer",
        grpc_partial_failure,
    )

    # -- tritonclient.grpc: item messages written to break headers (faults -50, -12) --
    def grpc_hostile_item_messages():
        # -50: control characters, CR/LF, NUL, DEL, non-ASCII, 64 KiB; -12: 10 MiB.
        values = [1.0, -50.0, -12.0]
        tensor = grpcclient.InferInput("x", [3, 1], "FP32")
        tensor.set_data_from_numpy(faulty_x(values))
        try:
            grpc.infer("faulty", [tensor], request_id="hostile")
        except InferenceServerException as error:
            message = error.message()
            expect(message.startswith(SUMMARY_GRPC.format(failed=2, items=3)), f"the exception's message {message[:200]!r}")
            expect_eq(error.status(), "StatusCode.INVALID_ARGUMENT", "the exception's status")
        else:
            raise CheckFailed("a request with hostile item messages did not raise InferenceServerException")

        import grpc as grpcio
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        request = service_pb2.ModelInferRequest(model_name="faulty", id="hostile")
        request.inputs.add(name="x", datatype="FP32", shape=[3, 1])
        request.raw_input_contents.append(faulty_x(values).tobytes())
        with grpcio.insecure_channel(args.grpc) as channel:
            try:
                service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
            except grpcio.RpcError as error:
                trailers = dict(error.trailing_metadata() or ())
                expect_eq(error.code(), grpcio.StatusCode.INVALID_ARGUMENT, "the stub's status code")
            else:
                raise CheckFailed("the stub's request with hostile item messages succeeded")
        expect("tensorplug-item-status" in trailers, f"no tensorplug-item-status in trailers {list(trailers)}")
        statuses = json.loads(trailers["tensorplug-item-status"])
        expect_eq([s.get("status") for s in statuses], [200, 422, 422], f"statuses in {statuses}")
        expect(statuses[1].get("error", "").startswith("faulty: hostile \r\n\0 \x7f"), f"item 1's error in {statuses}")

    run(
        "tritonclient.grpc faulty [1, -50, -12]: hostile item messages; the item-status trailer still arrives",
        grpc_hostile_item_messages,
    )
    grpc.close()


# --- kserve ------------------------------------------------------------------------------


def kserve_checks(args, oracle):
    # Importing kserve parses sys.argv with its model server's options (and exits on ours).
    sys.argv = sys.argv[:1]
    from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
    from kserve.protocol.infer_type import RequestedOutput

    print(f"      kserve {importlib.metadata.version('kserve')}", flush=True)
    base_url = f"http://{args.http}"
    loop = asyncio.new_event_loop()
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=1, timeout=60))

    async def health():
        expect((await client.is_server_live(base_url)) is True, "is_server_live is not True")
        expect((await client.is_server_ready(base_url)) is True, "is_server_ready is not True")
        expect((await client.is_model_ready(base_url, "digits")) is True, "is_model_ready('digits') is not True")
        expect((await client.is_model_ready(base_url, "faulty")) is True, "is_model_ready('faulty') is not True")
        expect(
            (await client.is_model_ready(base_url, "no-such-model")) is False,
            "is_model_ready('no-such-model') is not False",
        )

    async def infer(first, n, binary):
        pixels = oracle.pixels[first : first + n]
        if binary:
            tensor = InferInput("input-0", [n, 64], "FP32")
            tensor.set_data_from_numpy(pixels, binary_data=True)
            outputs = [
                RequestedOutput("probabilities", {"binary_data": True}),
                RequestedOutput("label", {"binary_data": True}),
            ]
        else:
            tensor = InferInput("input-0", [n, 64], "FP32", data=pixels.flatten().tolist())
            outputs = None
        request = InferRequest("digits", [tensor], request_id=f"kserve-{first}-{n}", request_outputs=outputs)
        headers = {}
        response = await client.infer(base_url, request, model_name="digits", response_headers=headers)
        expect_eq(response.model_name, "digits", "model_name")
        expect_eq(response.id, f"kserve-{first}-{n}", "id")
        expect_eq(
            "inference-header-content-length" in {k.lower() for k in headers},
            binary,
            f"binary answer (headers {headers})",
        )
        outputs = {o.name: o for o in response.outputs}
        expect_eq(sorted(outputs), ["label", "probabilities"], "outputs")
        oracle.check(
            first,
            outputs["probabilities"].as_numpy(),
            outputs["label"].as_numpy(),
            f"images {first}..{first + n}",
        )

    async def digits(binary):
        for first in range(5):
            await infer(first, 1, binary)
        await infer(0, 450, binary)

    async def partial_failure():
        # A 207 is a 2xx: kserve takes it for a success and reads its body as an inference
        # response, which has no `outputs`. It must not come back as a successful answer.
        tensor = InferInput("x", [3, 1], "FP32", data=[1.0, -5.0, 3.0])
        try:
            response = await client.infer(base_url, InferRequest("faulty", [tensor]), model_name="faulty")
        except KeyError as error:
            expect_eq(error.args, ("outputs",), "what kserve raises")
        else:
            raise CheckFailed(f"a request with a failing item came back as a success: {response}")

    def metrics():
        # The official Python client's strict OpenMetrics parser (installed with kserve):
        # it raises on anything the format does not allow.
        from prometheus_client.openmetrics.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as answer:
            content_type = answer.headers["Content-Type"]
            text = answer.read().decode()
        expect(content_type.startswith("application/openmetrics-text"), f"content type {content_type}")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        expect_eq(families["tensorplug_requests"].type, "counter", "tensorplug_requests' type")
        expect_eq(families["tensorplug_stage_seconds"].type, "histogram", "tensorplug_stage_seconds' type")
        served = [
            s
            for s in families["tensorplug_requests"].samples
            if s.labels.get("model") == "digits" and s.labels.get("status") == "200" and s.value > 0
        ]
        expect(served, "no tensorplug_requests_total sample of digits answered 200")
        expect("tensorplug_plugin_batches" in families, "the faulty plugin's own counter is missing")

    try:
        run("/metrics parses with prometheus_client's OpenMetrics parser", metrics)
        run(
            "kserve InferenceRESTClient is_server_live / is_server_ready / is_model_ready",
            lambda: loop.run_until_complete(health()),
        )
        run(
            "kserve InferenceRESTClient digits, JSON (5 single images, all 450 at once)",
            lambda: loop.run_until_complete(digits(False)),
        )
        run(
            "kserve InferenceRESTClient digits, binary inputs and outputs (the same requests)",
            lambda: loop.run_until_complete(digits(True)),
        )
        run(
            "kserve InferenceRESTClient faulty [1, -5, 3]: the 207 is not taken for a success "
            "(kserve raises KeyError('outputs'), not the summary)",
            lambda: loop.run_until_complete(partial_failure()),
        )
    finally:
        loop.run_until_complete(client.close())
        loop.close()


# --- main --------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", required=True, help="REST address, HOST:PORT")
    parser.add_argument("--grpc", required=True, help="gRPC address, HOST:PORT")
    parser.add_argument(
        "--data",
        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "digits"),
        help="the digits oracle's folder (default: tests/data/digits)",
    )
    parser.add_argument("--only", choices=["triton", "kserve"], help="run one client family in this process")
    args = parser.parse_args()

    if args.only is None:
        for part in ["triton", "kserve"]:
            command = [sys.executable, os.path.abspath(__file__), "--only", part]
            command += ["--http", args.http, "--grpc", args.grpc, "--data", args.data]
            if subprocess.run(command).returncode != 0:
                print(f"conformance: the {part} checks failed", flush=True)
                sys.exit(1)
        print("conformance: every check passed", flush=True)
        return

    oracle = Oracle(args.data)
    if args.only == "triton":
        triton_checks(args, oracle)
    else:
        kserve_checks(args, oracle)


if __name__ == "__main__":
    main()
