"""Repositories of many models made from one example model folder, as a node serving many
tenants holds: N copies named m0..m<N-1>, whose .wasm files each carry a custom section of
their own ("distinct": the same code in other bytes, as N tenants' builds of one plugin
would be, so nothing is shared between them) or are hard links of the example's ("alike").
Other files are hard-linked (subfolders copied). Used by make-tenants.py and
bench-memory.py."""
import os, re, shutil


def distinct(component, k):
    """The component with a custom section naming copy k appended: same code, other bytes."""
    name = f"tensorplug-tenant-{k}".encode()
    payload = bytes([len(name)]) + name
    return component + b"\x00" + bytes([len(payload)]) + payload


def make(example_dir, copies, out, instances=None, alike=False, prefix="m", only=None):
    """Writes `copies` model folders made from `example_dir` into `out` (created); with
    `only` (file names, e.g. {"predict.wasm"}), only those .wasm files are made distinct."""
    os.makedirs(out, exist_ok=True)
    wasm = {f: open(f"{example_dir}/{f}", "rb").read()
            for f in os.listdir(example_dir)
            if f.endswith(".wasm") and not alike and (only is None or f in only)}
    text = open(f"{example_dir}/model.toml").read()
    for k in range(copies):
        name = f"{prefix}{k}"
        dst = f"{out}/{name}"
        os.mkdir(dst)
        for f in os.listdir(example_dir):
            if f == "model.toml":
                continue
            if os.path.isdir(f"{example_dir}/{f}"):
                shutil.copytree(f"{example_dir}/{f}", f"{dst}/{f}")
            elif f in wasm:
                open(f"{dst}/{f}", "wb").write(distinct(wasm[f], k))
            else:
                os.link(os.path.realpath(f"{example_dir}/{f}"), f"{dst}/{f}")
        model = re.sub(r"^name = .*$", f'name = "{name}"', text, count=1, flags=re.M)
        if instances is not None:
            if re.search(r"^instances = ", model, flags=re.M):
                model = re.sub(r"^instances = .*$", f"instances = {instances}", model, flags=re.M)
            elif "[limits]\n" in model:
                model = model.replace("[limits]\n", f"[limits]\ninstances = {instances}\n")
            else:
                model += f"\n[limits]\ninstances = {instances}\n"
        open(f"{dst}/model.toml", "w").write(model)
    return out
