#!/usr/bin/env bash
# Builds the container image tensorplug:<version> with buildah, FROM scratch around the
# binary this checkout builds — the same image as the Containerfile gives where a Rust
# image can be pulled (see its header for the layout: /usr/local/bin/tensorplug, /models,
# the /var/cache/tensorplug volume, user 65532, ports 8080 and 8081).
#
# Usage: scripts/build-image.sh [--binary PATH] [--tag NAME] [--precompile]
#   (default) builds the static release binary (glibc with +crt-static, into
#             <target>/x86_64-unknown-linux-gnu/release/) and the example plugins
#   --binary  puts PATH in the image instead (e.g. target/debug/tensorplug, as
#             scripts/test-image.sh does to reuse the test build); a dynamically linked
#             one gets the libraries it links copied beside it
#   --tag     the image's name (default tensorplug:<the tensorplug package's version, as
#             cargo resolves it: the workspace's, which host/Cargo.toml inherits>)
#   --precompile  the image carries a compile cache of its models: every stage compiled
#             ahead of time by the image's own binary (`tensorplug compile`) into
#             /var/cache/tensorplug, so that a container's loads read them back instead of
#             compiling (a new volume mounted there starts with them: podman and docker
#             copy an image's files into an empty volume); larger by their compiled code
# Prints the image's name and size. Needs root (or sudo-less rootful) buildah and podman,
# which it installs (scripts/toolchains.sh image: Debian's, pinned) when they are missing.
set -euo pipefail
script=build-image
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/lib/plugins.sh
export CONTAINERS_CONF="$root/scripts/containers.conf"

# `cargo pkgid` resolves `version.workspace = true` (host/Cargo.toml names no number):
# path+file:///…/host#tensorplug@0.1.0
version="$(cargo pkgid -p tensorplug 2>/dev/null | sed -n 's/.*[#@]\([0-9][^#@]*\)$/\1/p')"
[[ -n "$version" ]] || fail "cannot tell the tensorplug package's version (cargo pkgid -p tensorplug)"
binary=""
precompile=false
tag="tensorplug:$version"
while [[ $# -gt 0 ]]; do
    case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --precompile) precompile=true; shift ;;
    --tag) tag="$2"; shift 2 ;;
    *) fail "unknown argument '$1' (usage: scripts/build-image.sh [--binary PATH] [--tag NAME] [--precompile])" ;;
    esac
done
# Installed here, for this purpose only (pinned; nothing to do when they are there).
./scripts/toolchains.sh image >/dev/null
command -v buildah >/dev/null 2>&1 && command -v podman >/dev/null 2>&1 ||
    fail "buildah and podman are missing: install them with ./scripts/toolchains.sh image"

if [[ -z "$binary" ]]; then
    RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \
        --target x86_64-unknown-linux-gnu -p tensorplug --bin tensorplug
    binary="$target_dir/x86_64-unknown-linux-gnu/release/tensorplug"
    ./scripts/build-plugins.sh --locked >/dev/null
fi
[[ -x "$binary" ]] || fail "$binary is not an executable"
# Every example but minilm: its graph runs on ONNX Runtime, a shared library that a static
# binary cannot load (docs/operations.md, "Container image").
models=()
for model in examples/models/*/; do
    [[ "$model" == examples/models/minilm/ ]] && continue
    models+=("$model")
    for stage in $(sed -n 's/^\(preprocess\|predict\|postprocess\) *= *"\([^"]*\)".*/\2/p' "$model/model.toml"); do
        [[ -f "$model/$stage" ]] || fail "$model$stage is missing: build the plugins first (./scripts/build-plugins.sh)"
    done
done

# The libraries a dynamically linked binary needs, with the loader (none when static).
libraries() {
    ldd "$1" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\).*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p' | sort -u
}

empty="$(mktemp -d)"
container="$(buildah from scratch)"
cleanup() {
    buildah rm "$container" >/dev/null 2>&1 || true
    rm -rf "$empty"
}
trap cleanup EXIT
buildah copy --quiet "$container" "$binary" /usr/local/bin/tensorplug >/dev/null
for library in $(libraries "$binary"); do
    buildah copy --quiet "$container" "$(readlink -f "$library")" "$library" >/dev/null
done
for model in "${models[@]}"; do
    buildah copy --quiet "$container" "$model" "/models/$(basename "$model")" >/dev/null
done
# The compile cache's mount point, the only folder the server writes.
cache="$empty"
if $precompile; then
    cache="$(mktemp -d)"
    repository="$(mktemp -d)"
    for model in "${models[@]}"; do
        ln -s "$root/$model" "$repository/$(basename "$model")"
    done
    "$binary" compile "$repository" --cache-dir "$cache" >&2 || fail "tensorplug compile failed on the image's models"
    rm -rf "$repository"
fi
buildah copy --quiet --chown 65532:65532 "$container" "$cache" /var/cache/tensorplug >/dev/null
[[ "$cache" == "$empty" ]] || rm -rf "$cache"
buildah config \
    --env TENSORPLUG_CACHE_DIR=/var/cache/tensorplug \
    --user 65532:65532 \
    --port 8080 --port 8081 \
    --volume /var/cache/tensorplug \
    --stop-signal SIGTERM \
    --entrypoint '["/usr/local/bin/tensorplug", "serve"]' \
    --cmd '["/models"]' \
    --label org.opencontainers.image.title=tensorplug \
    --label "org.opencontainers.image.version=$version" \
    "$container"
buildah commit --quiet --rm "$container" "$tag" >/dev/null
container=none
size="$(podman image inspect --format '{{.Size}}' "$tag")"
awk -v tag="$tag" -v size="$size" 'BEGIN { printf "%s %d bytes (%.1f MiB)\n", tag, size, size / 1048576 }'
