# Sourced by the device scripts under bench/results/: puts what a device call carried from
# dist-base/ into dist/ and names the GPUs in $OUT/gpus.txt.
# Usage: unpack_carried XZ_FILE... - each an xz'd binary (dist/NAME from NAME.xz, kept if
# there already); then the cohort-NAME variants' one xz'd tar (near-identical binaries
# compress to one) and the Debian packages, where carried.
unpack_carried() {
    mkdir -p dist
    local f n
    for f in "$@"; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .xz)
        [ -x "dist/$n" ] || { xz -dc "$f" > "dist/$n"; chmod +x "dist/$n"; }
    done
    [ -f dist-base/kv.tar.xz ] && tar xJf dist-base/kv.tar.xz -C dist
    [ -d dist-base/debs ] && mkdir -p dist/debs && cp dist-base/debs/*.deb dist/debs/
    nvidia-smi -L > "$OUT/gpus.txt"
}
