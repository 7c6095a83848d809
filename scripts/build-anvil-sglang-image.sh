#!/usr/bin/env bash
# Build anvil-sglang:VARIANT (deepseek-v4 or inkling), the locally derived SGLang images of the
# campaign's SGLang candidates, from images/anvil-sglang/Dockerfile.VARIANT on SGLang 0.5.23's
# public image (pulled from Docker Hub: this needs a registry, unlike the CPU images).
#   SGLANG_BASE=lmsysorg/sglang@sha256:<digest>   pin the base by digest (default: the tag in
#                                                  the Dockerfile); NO_CACHE=1 builds afresh
# Writes the image id to .cache/anvil-sglang-VARIANT-image-id and prints it on the last line;
# pin it as launch.docker.pin of the candidate (its how_to_pin says which file).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONTEXT=$ROOT/images/anvil-sglang
source "$(dirname "$0")/lib-image.sh"

VARIANT=${1:-}
[[ -f $CONTEXT/Dockerfile.$VARIANT ]] \
    || die "usage: $0 deepseek-v4|inkling (no $CONTEXT/Dockerfile.$VARIANT)"
IMAGE_TAG=anvil-sglang:$VARIANT
command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "no Docker engine answers"

build_image() {
    docker build --tag "$IMAGE_TAG" ${NO_CACHE:+--no-cache} \
        ${SGLANG_BASE:+--build-arg "SGLANG_BASE=$SGLANG_BASE"} \
        --file "$CONTEXT/Dockerfile.$VARIANT" "$CONTEXT" >&2
}

began=$SECONDS
stage build build_image
base=$(docker image inspect --format '{{index .Config.Labels "org.opencontainers.image.base.name"}}' "$IMAGE_TAG")
log "built on $base; its digest: docker image inspect --format '{{.RepoDigests}}' $base"
record_image "$IMAGE_TAG" "$ROOT/.cache/anvil-sglang-$VARIANT-image-id" "$began"
