"""Past one node (docs/operations.md, "Past one node: consistent hashing"): three replicas
serving N tenants' models on demand behind HAProxy, which picks a replica by a consistent
hash of the model's path (/v2/models/<name>), so that each replica keeps only its share of
the tenants resident instead of every one of them; measured over loopback.

1. A repository of N models made from an example, each predict stage distinct in bytes
   (scripts/make-tenants.py), and `tensorplug compile` filling a compile cache.
2. Three replicas of `tensorplug serve --residency on-demand --memory-budget-mib B`, and
   HAProxy in front of them with two backends over the same three: `balance uri path-only
   depth 3` + `hash-type consistent` (the hash reads `/v2/models/<name>` and nothing else)
   and `balance roundrobin`, each with its own frontend; health checks on
   /v2/health/ready every 200 ms, as in scripts/test-rolling-update.sh.
3. Consistent hashing: Zipf traffic (s = 1.0) over the N models with tensorplug-loadgen
   through HAProxy at concurrency C for D seconds, and a rolling update during it — each
   replica in turn gets SIGTERM (--shutdown-delay-ms keeps it serving while HAProxy
   notices), must exit 0, is replaced by a new process on the same port with the same
   flags, which must be ready and seen UP by HAProxy before the next one goes.
4. Round robin, for comparison: three fresh replicas, the same traffic for D seconds
   through the round-robin backend, no rolling update.

Every second, each replica's repository index (POST /v2/repository/index: state and
measured memory per model) and /metrics are read directly. Printed for each run:
requests/s, latency, failed requests; per replica the models resident and the memory they
hold at the end, the peak, the models ever resident on it and the loads on a request;
across replicas the models ever resident, how many are resident on 1, 2, 3 replicas at the
end, and the most replicas one model was resident on at any sample. Exits non-zero when a
request failed under consistent hashing, or a model was resident on 3 replicas at a
sample, or the rolling update did not go through (the figures are printed either way).

Run through scripts/bench-spread.sh (which builds everything and installs HAProxy);
settings in the environment: BENCH_EXAMPLE (digits), BENCH_MODELS (1000),
BENCH_BUDGET_MIB (256, per replica), BENCH_CONCURRENCY (16), BENCH_SECONDS (30),
BENCH_RR_SECONDS (BENCH_SECONDS; 0 skips the round-robin run), BENCH_ROLL_AFTER (D / 4:
seconds of measured load before the rolling update), BENCH_SHUTDOWN_DELAY_MS (1000),
BENCH_RETRY_ON (HAProxy's `retry-on`: conn-failure empty-response, as in
test-rolling-update.sh; add 503 to resend a request a replica refused to another),
BENCH_MIN_RESIDENCY_SECS (5), BENCH_INSTANCES (the example's), BENCH_BODIES
(tests/data/digits/test_requests.jsonl), BENCH_KEEP (a folder to keep the repository and
cache in, reused when present; the same names as bench-density.py's).
"""
import argparse, http.client, json, os, re, signal, socket, subprocess, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import tenants
from local import free_port, status_kib, wait_ready

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
parser = argparse.ArgumentParser()
parser.add_argument("--server", required=True)
parser.add_argument("--loadgen", required=True)
parser.add_argument("--work", required=True)
args = parser.parse_args()

env = os.environ.get
example = env("BENCH_EXAMPLE", "digits")
models = int(env("BENCH_MODELS", "1000"))
budget = int(env("BENCH_BUDGET_MIB", "256"))
concurrency = int(env("BENCH_CONCURRENCY", "16"))
seconds = int(env("BENCH_SECONDS", "30"))
rr_seconds = int(env("BENCH_RR_SECONDS", str(seconds)))
roll_after = float(env("BENCH_ROLL_AFTER", str(seconds / 4)))
delay_ms = env("BENCH_SHUTDOWN_DELAY_MS", "1000")
min_residency = env("BENCH_MIN_RESIDENCY_SECS", "5")
retry_on = env("BENCH_RETRY_ON", "conn-failure empty-response")
instances = env("BENCH_INSTANCES")
bodies = env("BENCH_BODIES", f"{root}/tests/data/digits/test_requests.jsonl")
keep = env("BENCH_KEEP")
WARMUP = 2
REPLICAS = 3


class Failed(Exception):
    """The benchmark cannot go on (a replica, HAProxy or the load generator misbehaved)."""


# Everything started here is stopped on the way out, a signal included.
signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench-spread: terminated"))
started_processes = []


def spawn(command, log_path, **kwargs):
    log = open(log_path, "a")
    process = subprocess.Popen(command, stdout=kwargs.pop("stdout", log), stderr=log, **kwargs)
    log.close()
    started_processes.append(process)
    return process


def cleanup():
    for process in started_processes:
        if process.poll() is None:
            process.kill()
        process.wait()


# 1. The repository and its compile cache.
base = keep or args.work
repository, cache = f"{base}/tenants-{example}-{models}", f"{base}/cache-{example}-{models}"
if not os.path.isdir(repository):
    example_dir = f"{root}/examples/models/{example}"
    tenants.make(example_dir, models, repository, int(instances) if instances else None, only={"predict.wasm"})
    print(f"made {models} models from {example} (each predict.wasm distinct)", flush=True)
if not os.path.isdir(cache):
    t = time.monotonic()
    subprocess.run([args.server, "compile", repository, "--cache-dir", cache], check=True, stdout=subprocess.DEVNULL)
    print(f"tensorplug compile: {time.monotonic() - t:.0f} s for {models} models", flush=True)

ports = set()


def new_port():
    while (port := free_port()) in ports:
        pass
    ports.add(port)
    return port


def call(port, method, path, timeout=5):
    """(status, body) of one request to 127.0.0.1:PORT on a connection of its own."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=b"" if method == "POST" else None)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def metric(text, name, labels=""):
    pattern = rf"^{re.escape(name)}(\{{[^}}]*{re.escape(labels)}[^}}]*\}})? (\S+)$"
    return sum(float(m.group(2)) for m in re.finditer(pattern, text, flags=re.M))


class Replica:
    """One `tensorplug serve`, replaced in place (same port, same flags) by a rolling update."""

    def __init__(self, index):
        self.index, self.name, self.port = index, f"r{index}", new_port()
        self.process = None
        self.pids = []  # of its processes in the current run (a rolling update adds one)

    def start(self):
        self.process = spawn(
            [args.server, "serve", repository, "--host", "127.0.0.1", "--http-port", str(self.port),
             "--grpc-port", "off", "--cache-dir", cache, "--residency", "on-demand",
             "--memory-budget-mib", str(budget), "--min-residency-secs", min_residency,
             "--shutdown-delay-ms", delay_ms, "--shutdown-grace-secs", "30", "--log", "warn"],
            f"{args.work}/replica-{self.index}.log")
        self.pids.append(self.process.pid)
        if wait_ready(self.port, 120, self.process) is None:
            raise Failed(f"replica {self.name} on port {self.port} did not become ready: see {args.work}/replica-{self.index}.log")

    def signal_term(self):
        self.process.send_signal(signal.SIGTERM)

    def wait_exit(self):
        """After SIGTERM: the replica drains and exits 0."""
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise Failed(f"replica {self.name} did not exit within 60 s of SIGTERM")
        if code != 0:
            raise Failed(f"replica {self.name} exited with {code} after SIGTERM: see {args.work}/replica-{self.index}.log")


replicas = [Replica(i) for i in range(REPLICAS)]
frontends = {"hashed": new_port(), "roundrobin": new_port()}
stats_socket = f"{args.work}/haproxy.sock"


def haproxy_stats():
    """HAProxy's `show stat`, one dict per row (pxname, svname, status, stot, ...)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(stats_socket)
    s.sendall(b"show stat\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    lines = data.decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    return [dict(zip(header, line.split(","))) for line in lines[1:] if line]


def server_field(backend, server, field):
    return next((row[field] for row in haproxy_stats() if row["pxname"] == backend and row["svname"] == server), None)


def wait_up(backend, replica, within=10):
    """Routed again: HAProxy's health checks passed (rise 2) for this backend."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if server_field(backend, replica.name, "status") == "UP":
            return
        time.sleep(0.05)
    raise Failed(f"HAProxy did not see replica {replica.name} UP in backend {backend} within {within} s")


class Run:
    """What the samples of one run saw: each replica's index and metrics, every second."""

    def __init__(self):
        self.samples = 0
        self.ever = [set() for _ in replicas]  # models ever resident on each replica (any process)
        self.peak = [0] * REPLICAS  # most models resident on each replica at a sample
        self.loads = {}  # pid -> loads on a request (the counter is per process)
        self.max_copies = 0  # most replicas one model was resident on at a sample
        self.copies_seen = {}  # copies -> models resident on that many replicas at some sample
        self.last = None  # the latest sample: per replica, None or (resident {name: bytes}, gauge bytes, rss MiB)
        self.unreadable = 0  # a replica's index not read (restarting): per replica and sample
        self.started = time.monotonic()
        self.on_three = []  # (seconds into the run, model, replicas) of each model seen on 3

    def sample(self):
        now = []
        for i, replica in enumerate(replicas):
            pid = replica.process.pid
            try:
                status, index = call(replica.port, "POST", "/v2/repository/index")
                metrics_status, metrics = call(replica.port, "GET", "/metrics")
                if status != 200 or metrics_status != 200:
                    raise OSError("not 200")
            except (OSError, http.client.HTTPException):
                self.unreadable += 1
                now.append(None)
                continue
            resident = {row["name"]: row.get("memory_bytes", 0) for row in json.loads(index) if row["state"] == "READY"}
            metrics = metrics.decode()
            self.loads[pid] = max(self.loads.get(pid, 0), metric(metrics, "tensorplug_residency_loads_total", 'trigger="request"'))
            try:
                rss = status_kib(pid, "VmRSS") / 1024
            except (OSError, AttributeError):
                rss = float("nan")
            now.append((resident, metric(metrics, "tensorplug_resident_memory_bytes"), rss))
            self.ever[i] |= resident.keys()
            self.peak[i] = max(self.peak[i], len(resident))
        copies = {}
        for replica_now in now:
            for name in (replica_now[0] if replica_now else {}):
                copies[name] = copies.get(name, 0) + 1
        for name, n in copies.items():
            self.copies_seen.setdefault(n, set()).add(name)
            if n >= 3:
                on = [replicas[i].name for i, r in enumerate(now) if r and name in r[0]]
                self.on_three.append((time.monotonic() - self.started, name, on))
            self.max_copies = max(self.max_copies, n)
        self.samples += 1
        self.last = now


class Sampler(threading.Thread):
    def __init__(self, run):
        super().__init__(daemon=True)
        self.run_, self.stop = run, threading.Event()

    def run(self):
        # One sample a second (a sample that takes longer delays the next).
        due = time.monotonic()
        while True:
            due = max(due + 1.0, time.monotonic())
            if self.stop.wait(due - time.monotonic()):
                return
            self.run_.sample()


def load(frontend, duration, log_name):
    return spawn(
        [args.loadgen, f"http://127.0.0.1:{frontend}/v2/models/{{model}}/infer", "--models", str(models),
         "--zipf", "1.0", "--model-prefix", "m", "-b", bodies, "-c", str(concurrency),
         "-d", f"{duration}s", "-w", f"{WARMUP}s", "--json"],
        f"{args.work}/{log_name}", stdout=subprocess.PIPE, text=True)


def finish_load(loadgen):
    out, _ = loadgen.communicate(timeout=max(seconds, rr_seconds) + 120)
    if loadgen.returncode != 0:
        raise Failed(f"the load generator exited with {loadgen.returncode}: see {args.work}")
    return json.loads(out)


def report(title, backend, result, run, list_three=False):
    mib = 2**20
    print(f"\n| {title} | |\n| --- | ---: |")
    print(f"| requests/s | {result['rps']:.0f} |")
    print(f"| p50 / p99 | {result['p50_us'] / 1000:.2f} / {result['p99_us'] / 1000:.2f} ms |")
    print(f"| failed | {result['errors']} of {result['requests'] + result['errors']} |")
    if result.get("first_error"):
        print(f"| first error | {result['first_error']} |")
    routed = [int(server_field(backend, r.name, "stot") or 0) for r in replicas]
    print("\n| replica | requests routed (share) | resident at the end | their memory (index / gauge) | peak resident | ever resident | loads on a request | RSS |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, replica in enumerate(replicas):
        last = run.last[i] if run.last else None
        loads = sum(run.loads.get(pid, 0) for pid in replica.pids)
        if last is None:
            print(f"| {replica.name} | {routed[i]} ({routed[i] / max(1, sum(routed)):.0%}) | unread | | {run.peak[i]} | {len(run.ever[i])} | {loads:.0f} | |")
            continue
        resident, gauge, rss = last
        print(f"| {replica.name} | {routed[i]} ({routed[i] / max(1, sum(routed)):.0%}) | {len(resident)} | "
              f"{sum(resident.values()) / mib:.0f} / {gauge / mib:.0f} MiB of {budget} | {run.peak[i]} | "
              f"{len(run.ever[i])} | {loads:.0f} | {rss:.0f} MiB |")
    ends = [set(last[0]) if last else set() for last in (run.last or [])]
    at_end = {}
    for names in ends:
        for name in names:
            at_end[name] = at_end.get(name, 0) + 1
    by_copies = [sum(1 for n in at_end.values() if n == k) for k in range(1, REPLICAS + 1)]
    ever = set().union(*run.ever)
    print(f"\n| across the {REPLICAS} replicas ({run.samples} samples of the indexes) | |\n| --- | ---: |")
    print(f"| models ever resident (at a sample) | {len(ever)} of {models} |")
    print(f"| resident at the end: distinct / copies | {len(at_end)} / {sum(at_end.values())} |")
    print(f"| resident at the end on 1 / 2 / 3 replicas | {' / '.join(map(str, by_copies))} |")
    print(f"| models resident on 2 / 3 replicas at some sample | "
          f"{len(run.copies_seen.get(2, ()))} / {len(run.copies_seen.get(3, ()))} |")
    print(f"| most replicas one model was resident on at a sample | {run.max_copies} |")
    loads = sum(sum(run.loads.get(pid, 0) for pid in r.pids) for r in replicas)
    print(f"| loads on a request, all replicas; per 100 requests | {loads:.0f}; {100 * loads / max(1, result['requests']):.1f} |")
    if run.unreadable:
        print(f"| index reads missed (a replica restarting) | {run.unreadable} |")
    for at, name, on in run.on_three[:5] if list_three else []:
        print(f"| {name} resident on {', '.join(on)} | {at:.1f} s in |")
    sys.stdout.flush()


problems = []
try:
    # 2. Three replicas, HAProxy in front.
    for replica in replicas:
        replica.start()
    servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} check" for r in replicas)
    checks = """    option httpchk GET /v2/health/ready
    http-check expect status 200
    default-server inter 200ms fall 1 rise 2"""
    config = f"""global
    maxconn 1000
    stats socket {stats_socket} level admin
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    # A request a replica could not take (refused, reset before an answer) goes to
    # another; inference bodies are small and fully buffered, so they can be resent.
    option http-buffer-request
    retries 3
    option redispatch 1
    retry-on {retry_on}
frontend spread
    bind 127.0.0.1:{frontends["hashed"]}
    default_backend hashed
frontend spread-roundrobin
    bind 127.0.0.1:{frontends["roundrobin"]}
    default_backend roundrobin
# A model's requests go to one replica: the hash reads the path up to its third slash,
# /v2/models/<name>, whatever follows (infer, ready, a version) or precedes it (an
# absolute URI, HTTP/2). Consistent: a replica going down or up moves only its own models.
backend hashed
    balance uri path-only depth 3
    hash-type consistent
{checks}
{servers}
backend roundrobin
    balance roundrobin
{checks}
{servers}
"""
    open(f"{args.work}/haproxy.cfg", "w").write(config)
    haproxy = spawn(["haproxy", "-f", f"{args.work}/haproxy.cfg", "-db"], f"{args.work}/haproxy.log")
    for frontend in frontends.values():
        if wait_ready(frontend, 120, haproxy) is None:
            raise Failed(f"HAProxy did not become ready: see {args.work}/haproxy.log")
    for replica in replicas:
        wait_up("hashed", replica)
        wait_up("roundrobin", replica)
    version = subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"{REPLICAS} replicas of {models} models on demand, budget {budget} MiB each; {version}", flush=True)

    # 3. Consistent hashing, and a rolling update under the load.
    hashed = Run()
    sampler = Sampler(hashed)
    sampler.start()
    loadgen = load(frontends["hashed"], seconds, "loadgen-hashed.log")
    time.sleep(WARMUP + roll_after)
    roll_started = time.monotonic()
    for replica in replicas:
        replica.signal_term()
        replica.wait_exit()
        replica.start()
        wait_up("hashed", replica)
    rolled_s = time.monotonic() - roll_started
    if loadgen.poll() is not None:
        problems.append("the rolling update outlasted the load: raise BENCH_SECONDS")
    result = finish_load(loadgen)
    sampler.stop.set()
    sampler.join()
    hashed.sample()
    report(f"consistent hashing (balance uri path-only depth 3, hash-type consistent): Zipf s=1.0 over {models} models, "
           f"c={concurrency}, {seconds} s, rolling update of the {REPLICAS} replicas ({rolled_s:.1f} s, "
           f"--shutdown-delay-ms {delay_ms}) from {roll_after:.0f} s in; retry-on {retry_on}", "hashed", result, hashed, list_three=True)
    if result["errors"]:
        problems.append(f"{result['errors']} requests failed under consistent hashing")
    if hashed.max_copies >= 3:
        problems.append(f"{len(hashed.copies_seen.get(3, ()))} models were resident on 3 replicas at a sample under consistent hashing")

    # 4. Round robin over three fresh replicas, the same traffic.
    if rr_seconds > 0:
        for replica in replicas:
            replica.signal_term()
        for replica in replicas:
            replica.wait_exit()
        for replica in replicas:
            replica.pids = []
            replica.start()
        for replica in replicas:
            wait_up("roundrobin", replica)
        roundrobin = Run()
        sampler = Sampler(roundrobin)
        sampler.start()
        result = finish_load(load(frontends["roundrobin"], rr_seconds, "loadgen-roundrobin.log"))
        sampler.stop.set()
        sampler.join()
        roundrobin.sample()
        report(f"round robin (balance roundrobin), for comparison: the same traffic, {rr_seconds} s, fresh replicas, "
               "no rolling update", "roundrobin", result, roundrobin)
except Failed as e:
    problems.append(str(e))
finally:
    cleanup()

for problem in problems:
    print(f"bench-spread: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
