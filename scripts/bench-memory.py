"""Resident memory per model and per instance (docs/operations.md, "Sizing").

For each example named, serves copies of it under other names with a warm compile cache:
1 model with 1, 2 and 4 instances; 4 models with 2 instances each whose components are the
same files ("same components": the server compiles and holds them once), and 4 models
whose components all differ ("distinct components": each copy's .wasm files get a custom
section of their own, so no two are alike, as with 4 different plugins). Then, with
--retention N, what a cold start costs and what stays: N distinct copies compiled with an
empty cache (peak and ready RSS), then all unloaded (RSS after), against the same with a
warm cache.

Usage: python3 scripts/bench-memory.py [--retention N] EXAMPLE...   (e.g. digits digits-python)
Serves with target/release/tensorplug (cargo build --release -p tensorplug) on loopback;
TENSORPLUG_BINARY names another binary.
"""
import argparse, atexit, os, shutil, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import tenants
from local import free_port, status_kib

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.environ.get("TENSORPLUG_BINARY", f"{root}/target/release/tensorplug")
scratch = tempfile.mkdtemp(prefix="bench-memory-")
atexit.register(shutil.rmtree, scratch, True)


def repo(example, copies, instances, alike):
    return tenants.make(f"{root}/examples/models/{example}", copies,
                        tempfile.mkdtemp(prefix="repo-", dir=scratch), instances, alike)


def get(url):
    try:
        return urllib.request.urlopen(url, timeout=1).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return None


class Server:
    def __init__(self, repository, cache):
        self.port = free_port()
        self.started = time.time()
        self.process = subprocess.Popen(
            [binary, "serve", repository, "--host", "127.0.0.1", "--http-port", str(self.port),
             "--grpc-port", "off", "--cache-dir", cache, "--log", "warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_until(self, path, wanted):
        while get(f"http://127.0.0.1:{self.port}{path}") != wanted:
            if self.process.poll() is not None or time.time() - self.started > 600:
                print("failed:", self.process.stderr.read().decode()[-2000:])
                sys.exit(1)
            time.sleep(0.05)

    def mib(self, field="VmRSS"):
        return status_kib(self.process.pid, field) / 1024

    def stop(self):
        self.process.terminate()
        self.process.wait()


def ready_rss(example, copies, instances, alike, cache):
    server = Server(repo(example, copies, instances, alike), cache)
    server.wait_until("/v2/health/ready", 200)
    took = time.time() - server.started
    time.sleep(1)
    rss = server.mib()
    server.stop()
    return rss, took


def sizes(example):
    cache = tempfile.mkdtemp(prefix="cache-", dir=scratch)
    # Warm the cache with the example's files and every distinct copy.
    ready_rss(example, 1, 1, True, cache)
    ready_rss(example, 4, 1, False, cache)
    r11, _ = ready_rss(example, 1, 1, True, cache)
    r12, _ = ready_rss(example, 1, 2, True, cache)
    r14, _ = ready_rss(example, 1, 4, True, cache)
    same, _ = ready_rss(example, 4, 2, True, cache)
    other, took = ready_rss(example, 4, 2, False, cache)
    print(f"{example}: 1 model x1 instance {r11:.0f} MiB; x2 {r12:.0f}; x4 {r14:.0f}; "
          f"4 models x2, same components {same:.0f} MiB, distinct components {other:.0f} MiB (ready {took:.1f}s) "
          f"-> per extra instance {(r14 - r12) / 2:.1f} MiB, per extra model (2 instances) "
          f"same components {(same - r12) / 3:.1f} MiB, distinct {(other - r12) / 3:.1f} MiB", flush=True)


def retention(example, copies):
    """RSS at ready and after every model is unloaded, after a cold and a warm start."""
    cache = tempfile.mkdtemp(prefix="cache-", dir=scratch)
    for start in ("cold", "warm"):
        repository = repo(example, copies, 2, False)
        server = Server(repository, cache)
        server.wait_until("/v2/health/ready", 200)
        took = time.time() - server.started
        time.sleep(1)
        ready, peak = server.mib(), server.mib("VmHWM")
        gone = tempfile.mkdtemp(prefix="unloaded-", dir=scratch)
        for k in range(copies):
            os.rename(f"{repository}/m{k}", f"{gone}/m{k}")
        server.wait_until("/v2/models/m0/ready", 404)
        time.sleep(15)  # past jemalloc's 10 s decay, after which its background threads purge
        after = server.mib()
        server.stop()
        print(f"{example}: {copies} distinct models x2, {start} cache: ready in {took:.1f}s, peak {peak:.0f} MiB, "
              f"ready {ready:.0f} MiB, all unloaded {after:.0f} MiB", flush=True)


parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--retention", type=int, metavar="N", help="cold start with N distinct copies, then unload")
parser.add_argument("examples", nargs="+")
args = parser.parse_args()
for example in args.examples:
    if args.retention:
        retention(example, args.retention)
    else:
        sizes(example)
