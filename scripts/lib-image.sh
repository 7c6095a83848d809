# Shared by the local image builds (scripts/build-local-image.sh, scripts/build-vllm-image.sh):
# logging, timed stages, and the registry-free Debian base (debootstrap + `docker import`).
# The caller sets ROOTFS, BASE_TAG and IMAGE_TAG, defines fill_wheelhouse, assemble_context and
# build_image (which may read MIRROR), and calls build_main ID_FILE.
TIMINGS=()

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

stage() {  # stage NAME COMMAND...: run it, remember its wall time
    local name=$1; shift
    local t0 t1
    t0=$(date +%s%N)
    log "stage $name ..."
    "$@"
    t1=$(date +%s%N)
    TIMINGS+=("$(printf '%-8s %6d.%01d s' "$name" $(((t1 - t0) / 1000000000)) $((((t1 - t0) / 100000000) % 10)))")
}

debian_mirror() {
    if [[ -n ${DEBIAN_MIRROR:-} ]]; then echo "$DEBIAN_MIRROR"; return; fi
    local uri
    uri=$(grep -hsE '^\s*(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
              /etc/apt/sources.list.d/*.list 2>/dev/null \
          | grep -oE 'https?://[^ ]*/debian/?( |$)' | head -n1 | tr -d ' ')
    echo "${uri:-http://deb.debian.org/debian}"
}

make_rootfs() {
    if [[ -f $ROOTFS/.tp2qual-complete && -z ${REBUILD_BASE:-} ]]; then
        log "rootfs reused: $ROOTFS"; return
    fi
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    rm -rf "$ROOTFS"; mkdir -p "$ROOTFS"
    # bookworm's debootstrap merges /usr by default, which fails here: --no-merged-usr.
    debootstrap --variant=minbase --no-merged-usr bookworm "$ROOTFS" "$MIRROR" >&2
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    touch "$ROOTFS/.tp2qual-complete"
}

import_base() {
    if docker image inspect "$BASE_TAG" >/dev/null 2>&1 && [[ -z ${REBUILD_BASE:-} ]]; then
        log "base image reused: $BASE_TAG"; return
    fi
    make_rootfs
    tar --exclude=./.tp2qual-complete -C "$ROOTFS" -c . \
        | docker import --message "debootstrap bookworm minbase ($MIRROR)" - "$BASE_TAG" >&2
}

record_image() {  # record_image TAG ID_FILE BEGAN: drop our superseded build, write the id, report
    local tag=$1 file=$2 began=$3 id size previous
    previous=$(cat "$file" 2>/dev/null || true)
    id=$(docker image inspect --format '{{.Id}}' "$tag")
    if [[ -n $previous && $previous != "$id" ]]; then  # our own superseded build, if now untagged
        [[ $(docker image inspect --format '{{len .RepoTags}}' "$previous" 2>/dev/null) == 0 ]] \
            && docker image rm "$previous" >/dev/null 2>&1 && log "removed superseded image $previous" || true
    fi
    size=$(docker image inspect --format '{{.Size}}' "$tag")
    mkdir -p "$(dirname "$file")"
    printf '%s\n' "$id" > "$file"
    log "timings:"; for t in "${TIMINGS[@]}"; do log "  $t"; done
    log "  total      $((SECONDS - began)) s"
    log "image $tag  size $((size / 1000000)) MB  id written to $file"
    echo "$id"
}

build_main() {  # build_main ID_FILE: base, wheels, context, build; then record the image id
    command -v docker >/dev/null || die "docker CLI not found"
    docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd --bridge=none --iptables=false)"
    MIRROR=$(debian_mirror)
    log "Debian mirror: $MIRROR"
    local began=$SECONDS
    stage base import_base  # debootstrap only when the base image is missing
    stage wheels fill_wheelhouse
    stage context assemble_context
    stage build build_image
    record_image "$IMAGE_TAG" "$1" "$began"
}
