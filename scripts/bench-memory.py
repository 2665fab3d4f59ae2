"""Resident memory per model and per instance: serves copies of example models under other
names (1 model with 1, 2 and 4 instances; 4 models with 2 each), warm compile cache, and
prints what each costs (docs/operations.md, "Sizing").

Usage: python3 scripts/bench-memory.py EXAMPLE...   (e.g. digits digits-python digits-js)
Serves with target/release/tensorplug (cargo build --release -p tensorplug) on loopback.
"""
import os, re, shutil, subprocess, sys, tempfile, time, urllib.request, socket
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.environ.get("TENSORPLUG_BINARY", f"{root}/target/release/tensorplug")
cache = tempfile.mkdtemp(prefix="bench-memory-cache-")
import atexit
atexit.register(shutil.rmtree, cache, True)
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def repo(example, copies, instances):
    d = tempfile.mkdtemp(prefix="mem-")
    src = f"{root}/examples/models/{example}"
    for k in range(copies):
        dst = f"{d}/m{k}"
        os.mkdir(dst)
        for f in os.listdir(src):
            if f == "model.toml":
                continue
            (shutil.copytree if os.path.isdir(f"{src}/{f}") else os.link)(f"{src}/{f}", f"{dst}/{f}")
        text = open(f"{src}/model.toml").read()
        text = re.sub(r'^name = .*$', f'name = "m{k}"', text, count=1, flags=re.M)
        if re.search(r'^instances = ', text, flags=re.M):
            text = re.sub(r'^instances = .*$', f'instances = {instances}', text, flags=re.M)
        else:
            text = text.replace("[limits]\n", f"[limits]\ninstances = {instances}\n")
        open(f"{dst}/model.toml", "w").write(text)
    return d
def rss(example, copies, instances):
    d = repo(example, copies, instances)
    port = free_port()
    p = subprocess.Popen([binary, "serve", d, "--host", "127.0.0.1", "--http-port", str(port), "--grpc-port", "off",
                          "--cache-dir", cache, "--log", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.time()
    while True:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status == 200:
                break
        except Exception:
            pass
        if p.poll() is not None or time.time() - t0 > 300:
            print("failed", example, p.stderr.read().decode()[-2000:]); sys.exit(1)
        time.sleep(0.05)
    time.sleep(1)
    status = open(f"/proc/{p.pid}/status").read()
    kib = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    p.terminate(); p.wait(); shutil.rmtree(d)
    return kib / 1024, time.time() - t0
for example in sys.argv[1:]:
    rss(example, 1, 1)  # warm the cache
    r11, _ = rss(example, 1, 1); r12, _ = rss(example, 1, 2); r14, _ = rss(example, 1, 4); r42, t = rss(example, 4, 2)
    print(f"{example}: 1 model x1 instance {r11:.0f} MiB; x2 {r12:.0f}; x4 {r14:.0f}; 4 models x2 {r42:.0f} MiB "
          f"(ready {t:.1f}s) -> per extra instance {(r14-r12)/2:.1f} MiB, per extra model (2 instances) {(r42-r12)/3:.1f} MiB", flush=True)
