# Sourced by the device scripts under bench/results/ (run on the GPU machine, from the
# repository root, $OUT the folder that comes back): the steps every such script takes.

# Puts what the call carried from dist-base/ into dist/ and names the GPUs in $OUT/gpus.txt.
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

# Every GPU check of the carried build (scripts/gpu-check run tests), its logs packed into
# $OUT/tests.tgz (only a few files come back from a call); returns the checks' exit status.
gpu_checks() {
    OUT=$OUT/tests scripts/gpu-check run tests > "$OUT/tests.log" 2>&1
    local rc=$?
    tail -30 "$OUT/tests.log"
    tar czf "$OUT/tests.tgz" -C "$OUT" tests tests.log 2>/dev/null && rm -rf "$OUT/tests"
    return $rc
}

# Nsight Compute's sections (clocks left alone) for the kernels named by REGEX, COUNT launches
# after the first 3, in `bench gpu-kernels` on the 1M data $D at cohort 8 192 with u8 storage,
# the binary $B; the report to $OUT/FILE. Usage: ncu_kernels_8192 REGEX COUNT FILE
ncu_kernels_8192() {
    timeout 240 ncu --clock-control none --kernel-name regex:"$1" \
        --launch-skip 3 --launch-count "$2" --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis \
        $B bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 8192 --precision u8 \
        --out /tmp/ncu-bench.json --log-level warn > "$OUT/$3" 2>&1
    tail -5 "$OUT/$3"
}

# The k-NN kernels alone (`bench gpu-kernels`, 1M data $D, nlist 4096, nprobe 16, cohorts
# 64 / 1 024 / 8 192, f32 and u8) for dist/cohort and each carried dist/cohort-NAME in turn,
# ROUNDS rounds (alternating, so a lease's drift falls on every build alike); JSON per build
# and round in $OUT. Usage: kernels_beside ROUNDS
kernels_beside() {
    local round b
    for round in $(seq 1 "$1"); do
        for b in cohort $(cd dist && ls cohort-* 2>/dev/null); do
            timeout 120 dist/$b bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,1024,8192 \
                --precision f32,u8 --out "$OUT/gpu-kernels-$b-r$round.json" --log-level warn 2>&1 | tail -14
        done
    done
}
