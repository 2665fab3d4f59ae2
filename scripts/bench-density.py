"""Many models on one node (docs/operations.md, "Many models"): what serving N tenants'
models on demand costs, measured with the release build over loopback.

1. A repository of N models made from an example, each predict stage distinct in bytes
   (scripts/make-tenants.py), and `tensorplug compile` filling a fresh compile cache
   (timed).
2. `tensorplug serve --residency on-demand --memory-budget-mib B` on it: the time from
   start to ready, the RSS once ready, and the size of a /metrics scrape.
3. First answers: K models on standby asked once each, one after the other, timed at the
   client (arrival to answer, one keep-alive connection): p50, p99, max.
4. A warm model (m0) at c = 1, quiet, then during a storm of cold loads (BENCH_STORM_CLIENTS
   clients asking for every model uniformly, BENCH_STORM_SECONDS): its p99 against the quiet
   one; then beside the same clients at the storm's rate on models already resident (the
   storm's requests without their loads): its p99 against that, what the loads cost.
5. Zipf traffic (s = 1.0) over the N models with tensorplug-loadgen, at concurrency C for
   D seconds: requests/s, latency, failed requests; then evictions, loads, cold starts
   (p50/p99 from the server's histogram), the peak and final RSS and the resident memory
   against the budget, and the scrape's size again.

Run through scripts/bench-density.sh (which builds everything); settings in the
environment: BENCH_EXAMPLE (digits), BENCH_MODELS (10000), BENCH_BUDGET_MIB (512),
BENCH_CONCURRENCY (32), BENCH_SECONDS (60), BENCH_FIRST (200), BENCH_INSTANCES (the
example's), BENCH_MIN_RESIDENCY_SECS (5), BENCH_MIN_RESIDENCY_LOADS (4), BENCH_BODIES (tests/data/digits/test_requests.jsonl),
BENCH_KEEP (a folder to keep the repository and cache in, reused when present),
BENCH_OUTPUT (a file the first answers, the storm and the Zipf run with its timeline,
sampled every BENCH_SAMPLE_SECS (0.5), are appended to as JSON lines, which
`scripts/plot-performance.py --density FILE` draws), BENCH_LABEL (a few words on the run,
kept in those lines and the figures' legends).
"""
import argparse, http.client, json, os, re, subprocess, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import histogram, tenants
from local import free_port, status_kib

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
parser = argparse.ArgumentParser()
parser.add_argument("--server", required=True)
parser.add_argument("--loadgen", required=True)
parser.add_argument("--work", required=True)
args = parser.parse_args()

env = os.environ.get
example = env("BENCH_EXAMPLE", "digits")
models = int(env("BENCH_MODELS", "10000"))
budget = int(env("BENCH_BUDGET_MIB", "512"))
concurrency = int(env("BENCH_CONCURRENCY", "32"))
seconds = int(env("BENCH_SECONDS", "60"))
first = min(int(env("BENCH_FIRST", "200")), models)
instances = env("BENCH_INSTANCES")
min_residency = env("BENCH_MIN_RESIDENCY_SECS", "5")
min_residency_loads = env("BENCH_MIN_RESIDENCY_LOADS", "4")
bodies = env("BENCH_BODIES", f"{root}/tests/data/digits/test_requests.jsonl")
keep = env("BENCH_KEEP")
storm_clients = int(env("BENCH_STORM_CLIENTS", "8"))
storm_seconds = int(env("BENCH_STORM_SECONDS", "5"))
output = env("BENCH_OUTPUT")
sample_every = float(env("BENCH_SAMPLE_SECS", "0.5"))


def record(kind, **fields):
    """A JSON line in BENCH_OUTPUT, when it is set."""
    if output:
        with open(output, "a") as rows:
            label = env("BENCH_LABEL")
            labelled = {"label": label} if label else {}
            rows.write(json.dumps({"kind": kind, "example": example, "models": models, "budget_mib": budget,
                                   **labelled, **fields}) + "\n")


def status_mib(pid, field):
    return status_kib(pid, field) / 1024


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# 1. The repository and its compile cache.
base = keep or args.work
repository, cache = f"{base}/tenants-{example}-{models}", f"{base}/cache-{example}-{models}"
if not os.path.isdir(repository):
    example_dir = f"{root}/examples/models/{example}"
    tenants.make(example_dir, models, repository, int(instances) if instances else None, only={"predict.wasm"})
    print(f"made {models} models from {example} (each predict.wasm distinct)", flush=True)
# Always: what is in the cache already is skipped (a kept cache gains what it lacks).
started = time.monotonic()
subprocess.run([args.server, "compile", repository, "--cache-dir", cache], check=True, stdout=subprocess.DEVNULL)
print(f"tensorplug compile: {time.monotonic() - started:.0f} s for {models} models", flush=True)

# 2. Serve on demand.
port = free_port()
log = open(f"{args.work}/server.log", "w")
started = time.monotonic()
server = subprocess.Popen(
    [args.server, "serve", repository, "--host", "127.0.0.1", "--http-port", str(port), "--grpc-port", "off",
     "--cache-dir", cache, "--residency", "on-demand", "--memory-budget-mib", str(budget),
     "--min-residency-secs", min_residency, "--min-residency-loads", min_residency_loads, "--log", "warn"],
    stdout=log, stderr=subprocess.STDOUT)


def stop():
    server.terminate()
    server.wait(timeout=60)


connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)


def request(method, path, body=None):
    global connection
    for attempt in range(2):
        try:
            connection.request(method, path, body=body, headers={"content-type": "application/json"} if body else {})
            response = connection.getresponse()
            return response.status, response.read()
        except (ConnectionError, http.client.HTTPException, OSError):
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            if attempt:
                raise
    raise RuntimeError("unreachable")


while True:
    try:
        if request("GET", "/v2/health/ready")[0] == 200:
            break
    except OSError:
        pass
    if server.poll() is not None:
        sys.exit(f"bench-density: the server exited: see {args.work}/server.log")
    time.sleep(0.01)
ready_s = time.monotonic() - started
time.sleep(1)
ready_rss = status_mib(server.pid, "VmRSS")
scrape_bytes = len(request("GET", "/metrics")[1])
print(f"\n| {models} models on standby | |\n| --- | ---: |")
print(f"| start to ready | {ready_s:.2f} s |")
print(f"| RSS once ready | {ready_rss:.0f} MiB |")
print(f"| /metrics scrape | {scrape_bytes / 1024:.0f} KiB |", flush=True)

# 3. First answers of models on standby, one after the other.
body = open(bodies).readline().encode()
latencies = []
for k in range(first):
    t = time.monotonic()
    status, answer = request("POST", f"/v2/models/m{k}/infer", body)
    latencies.append((time.monotonic() - t) * 1000)
    if status != 200:
        stop()
        sys.exit(f"bench-density: m{k} answered {status}: {answer[:300]!r}")
print(f"\n| first answer of a model on standby ({first} models, client-side) | ms |\n| --- | ---: |")
for name, q in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)]:
    print(f"| {name} | {percentile(latencies, q):.1f} |")
print(f"| max | {max(latencies):.1f} |", flush=True)
record("first", latencies_ms=[round(latency, 3) for latency in latencies])

# 4. A warm model's latency, quiet and then during a storm of cold loads (every model
# asked for uniformly, so most requests find theirs on standby): the p99 ratio.
def loadgen(target, extra, duration):
    return subprocess.Popen(
        [args.loadgen, f"http://127.0.0.1:{port}{target}", "--body-file", bodies, "-d", f"{duration}s", "-w", "1s",
         "--json", *extra], stdout=subprocess.PIPE, text=True)


def finished(process):
    out, _ = process.communicate()
    return json.loads(out)


quiet = finished(loadgen("/v2/models/m0/infer", ["-c", "1"], storm_seconds))
storm = loadgen("/v2/models/{model}/infer", ["--models", str(models), "--zipf", "0", "-c", str(storm_clients)],
                storm_seconds + 2)
time.sleep(1)
stormy = finished(loadgen("/v2/models/m0/infer", ["-c", "1"], storm_seconds))
cold_load = finished(storm)
# The control: the storm's clients at the storm's rate, on models already resident (the
# same requests without their loads): what the loads themselves cost the warm model.
# Models other than m0 where there are (as in the storm, whose clients all but never ask
# for m0), so that the control does not queue m0's requests behind its own.
first_model = 1 if models > 1 else 0
warm_models = min(models - first_model, storm_clients + 1)
background = loadgen("/v2/models/{model}/infer", ["--models", str(warm_models), "--first-model", str(first_model),
                                                  "--zipf", "0",
                                                  "-c", str(storm_clients), "--rate", f"{max(cold_load['rps'], 1):.0f}"],
                     storm_seconds + 2)
time.sleep(1)
busy = finished(loadgen("/v2/models/m0/infer", ["-c", "1"], storm_seconds))
warm_load = finished(background)
print(f"\n| the warm model m0 at c=1: quiet, beside {storm_clients} clients on resident models at the storm's rate, "
      f"and during their storm of cold loads | quiet | busy | storm |")
print("| --- | ---: | ---: | ---: |")
print(f"| requests/s | {quiet['rps']:.0f} | {busy['rps']:.0f} | {stormy['rps']:.0f} |")
print(f"| p50 / p99 | {quiet['p50_us'] / 1000:.2f} / {quiet['p99_us'] / 1000:.2f} ms "
      f"| {busy['p50_us'] / 1000:.2f} / {busy['p99_us'] / 1000:.2f} ms "
      f"| {stormy['p50_us'] / 1000:.2f} / {stormy['p99_us'] / 1000:.2f} ms |")
print(f"| p99 against quiet | | {busy['p99_us'] / max(quiet['p99_us'], 1):.2f} "
      f"| **{stormy['p99_us'] / max(quiet['p99_us'], 1):.2f}** |")
print(f"| p99 during the storm / busy (what the loads cost) | | | **{stormy['p99_us'] / max(busy['p99_us'], 1):.2f}** |")
print(f"| the other clients: requests/s, failed | | {warm_load['rps']:.0f}, {warm_load['errors']} "
      f"| {cold_load['rps']:.0f}, {cold_load['errors']} |", flush=True)
record("storm", storm_clients=storm_clients, seconds=storm_seconds, quiet=quiet, busy=busy, storm=stormy,
       storm_traffic=cold_load, busy_traffic=warm_load)


def sample(metrics, name, labels=""):
    pattern = rf"^{re.escape(name)}(\{{[^}}]*{re.escape(labels)}[^}}]*\}})? (\S+)$"
    return sum(float(m.group(2)) for m in re.finditer(pattern, metrics, flags=re.M))


class Timeline(threading.Thread):
    """Samples the server every `sample_every` seconds on a connection of its own: its RSS,
    what the resident models hold by measure and how many they are, what loads under way
    have reserved and evicted models still hold, and the counters of requests, loads and
    evictions."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.done = [], threading.Event()

    def run(self):
        scraper = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        started = time.monotonic()
        while not self.done.wait(sample_every):
            try:
                scraper.request("GET", "/metrics")
                metrics = scraper.getresponse().read().decode()
            except (ConnectionError, http.client.HTTPException, OSError):
                scraper.close()
                scraper = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                continue
            self.samples.append({
                "t": round(time.monotonic() - started, 3),
                "rss_mib": round(status_mib(server.pid, "VmRSS"), 1),
                "held_mib": round(sample(metrics, "tensorplug_resident_memory_bytes") / 2**20, 1),
                "reserved_mib": round(sample(metrics, "tensorplug_reserved_memory_bytes") / 2**20, 1),
                "releasing_mib": round(sample(metrics, "tensorplug_releasing_memory_bytes") / 2**20, 1),
                "resident": sample(metrics, "tensorplug_models", 'state="ready"'),
                "requests": sample(metrics, "tensorplug_http_requests_total"),
                "loads": sample(metrics, "tensorplug_residency_loads_total"),
                "evictions": sample(metrics, "tensorplug_residency_evictions_total"),
            })
        scraper.close()


# 5. Zipf traffic over every model.
timeline = Timeline()
timeline.start()
run = subprocess.run(
    [args.loadgen, f"http://127.0.0.1:{port}/v2/models/{{model}}/infer", "--models", str(models), "--zipf", "1.0",
     "--body-file", bodies, "-c", str(concurrency), "-d", f"{seconds}s", "-w", "2s", "--json"],
    capture_output=True, text=True, check=True)
timeline.done.set()
timeline.join()
load = json.loads(run.stdout)
metrics = request("GET", "/metrics")[1].decode()


peak = status_mib(server.pid, "VmHWM")
rss = status_mib(server.pid, "VmRSS")
print(f"\n| Zipf s=1.0 over {models} models, c={concurrency}, {seconds} s, budget {budget} MiB | |\n| --- | ---: |")
print(f"| requests/s | {load['rps']:.0f} |")
print(f"| p50 / p99 | {load['p50_us'] / 1000:.2f} / {load['p99_us'] / 1000:.2f} ms |")
print(f"| failed | {load['errors']} of {load['requests'] + load['errors']} |")
loads = sample(metrics, "tensorplug_residency_loads_total", 'trigger="request"')
for_room = sample(metrics, "tensorplug_residency_evictions_total", 'cause="budget"')
idle = sample(metrics, "tensorplug_residency_evictions_total", 'cause="idle"')
waits = sample(metrics, "tensorplug_residency_budget_waits_total")
refused = sample(metrics, "tensorplug_residency_unavailable_total")
cold = sample(metrics, "tensorplug_cold_start_seconds_count", 'phase="total"')
cold_p50 = histogram.upper_bound(metrics, "tensorplug_cold_start_seconds", 'phase="total"', 0.5) * 1000
cold_p99 = histogram.upper_bound(metrics, "tensorplug_cold_start_seconds", 'phase="total"', 0.99) * 1000
cold_p99_estimate = histogram.interpolated(metrics, "tensorplug_cold_start_seconds", 'phase="total"', 0.99) * 1000
resident = sample(metrics, "tensorplug_models", 'state="ready"')
held = sample(metrics, "tensorplug_resident_memory_bytes") / 2**20
print(f"| loads on a request | {loads:.0f} |")
print(f"| evictions for room / idle | {for_room:.0f} / {idle:.0f} |")
print(f"| loads that waited for room; requests refused (503) | {waits:.0f}; {refused:.0f} |")
print(f"| cold starts; p50 / p99 (server, bucket bounds) | {cold:.0f}; {cold_p50:.0f} / {cold_p99:.0f} ms |")
print(f"| cold-start p99 interpolated in its bucket (as Prometheus' histogram_quantile) | {cold_p99_estimate:.0f} ms |")


def phase_ms(phase, q):
    return histogram.upper_bound(metrics, "tensorplug_cold_start_seconds", 'phase="' + phase + '"', q) * 1000


phases = ", ".join(f"{phase} {phase_ms(phase, 0.5):.0f} / {phase_ms(phase, 0.99):.0f}"
                   for phase in ["waiting", "loading", "serving"])
print(f"| cold starts' phases, p50 / p99 ms (bucket bounds) | {phases} |")
print(f"| resident models; their memory, measured | {resident:.0f}; {held:.0f} MiB |")
print(f"| RSS peak / now | {peak:.0f} / {rss:.0f} MiB |")
print(f"| /metrics scrape | {len(metrics) / 1024:.0f} KiB |")
if load.get("first_error"):
    print(f"first error: {load['first_error']}")
record("zipf", concurrency=concurrency, seconds=seconds, rps=load["rps"], failed=load["errors"],
       p50_us=load["p50_us"], p99_us=load["p99_us"], loads=loads, evictions=for_room + idle, rss_peak_mib=peak,
       cold_p50_ms=cold_p50, cold_p99_ms=cold_p99, cold_p99_estimate_ms=cold_p99_estimate, every_s=sample_every, samples=timeline.samples)
stop()
