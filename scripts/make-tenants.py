"""Makes a repository of N models from an example, as N tenants' plugins would be: each
copy's .wasm files differ in bytes (a custom section of their own), so nothing is shared.

Usage: python3 scripts/make-tenants.py [--alike | --distinct STAGE.wasm ...] [--instances K] EXAMPLE N OUT
  e.g. python3 scripts/make-tenants.py digits 10000 /tmp/tenants
EXAMPLE is a folder of examples/models (built by ./scripts/build-plugins.sh) or a path.
Then fill the compile cache ahead of time and serve them on demand:
  tensorplug compile /tmp/tenants --cache-dir /tmp/cache
  tensorplug serve /tmp/tenants --cache-dir /tmp/cache --residency on-demand --memory-budget-mib 512
"""
import argparse, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import tenants

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("example")
parser.add_argument("copies", type=int)
parser.add_argument("out")
parser.add_argument("--alike", action="store_true", help="share the example's .wasm files (hard links)")
parser.add_argument("--distinct", nargs="+", metavar="FILE",
                    help="make only these .wasm files distinct (e.g. predict.wasm); the others are shared")
parser.add_argument("--instances", type=int, help="limits.instances of every copy")
args = parser.parse_args()
example = args.example if os.path.isdir(args.example) else f"{root}/examples/models/{args.example}"
if not os.path.isfile(f"{example}/model.toml"):
    sys.exit(f"make-tenants: no model folder {example} (build the examples first: ./scripts/build-plugins.sh)")
if os.path.exists(args.out) and os.listdir(args.out):
    sys.exit(f"make-tenants: {args.out} is not empty")
tenants.make(example, args.copies, args.out, args.instances, args.alike,
             only=set(args.distinct) if args.distinct else None)
print(f"{args.copies} models from {example} in {args.out}")
