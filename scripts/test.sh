#!/usr/bin/env bash
# The whole test suite, installing what the tests need. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# Each step says when it began (seconds since the start): where CI's time goes.
step() { echo "== [${SECONDS}s] $*"; }

step "toolchain"
cargo --version
rustup component add rustfmt clippy >/dev/null 2>&1 || true

step "NVRTC for the kernel compile checks (CUDA 13.0, from PyPI)"
python3 -m pip install --quiet --disable-pip-version-check "nvidia-cuda-nvrtc==13.0.88"
nvrtc_lib=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))")
export LD_LIBRARY_PATH="${nvrtc_lib}:${LD_LIBRARY_PATH:-}"
export COHORT_REQUIRE_NVRTC=1

debian() { # PROGRAM PACKAGE: installs PACKAGE from Debian unless PROGRAM is on PATH
    command -v "$1" >/dev/null && return
    local sudo_=""
    [ "$(id -u)" = 0 ] || sudo_="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo_ apt-get install -y -qq "$2" >/dev/null 2>&1 ||
        { $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq "$2" >/dev/null; }
}

step "memcached for the bank's backend tests (Debian)"
debian memcached memcached
memcached -V
export COHORT_REQUIRE_MEMCACHED=1

step "etcd (Debian) and UCX (PyPI) for the cluster tests"
debian etcd etcd-server
# sed reads all of it: head would stop reading after one line, and under pipefail the
# SIGPIPE etcd may then get (exit 141) fails the run (seen once).
etcd --version | sed -n 1p
python3 -m pip install --quiet --disable-pip-version-check "libucx-cu13==1.22.0"
export COHORT_REQUIRE_UCX=1 COHORT_REQUIRE_CLUSTER=1

step "lab/results/INDEX.md current, every recorded run naming its machine, commit and command"
python3 scripts/results-index.py --check

step "format"
cargo fmt --all -- --check

step "layering: the product (crates/) builds without the lab (lab/): no product crate depends on a lab crate"
lab_crates=$(for d in lab/*/; do [ -f "$d/Cargo.toml" ] && sed -n '0,/^name = /s/^name = "\(.*\)"/\1/p' "$d/Cargo.toml"; done)
lab_re=$(printf '%s\n' $lab_crates | paste -sd '|')
# shellcheck disable=SC2046
if cargo tree --workspace $(printf -- '--exclude %s ' $lab_crates) -e normal,build,dev --prefix none |
    grep -E "^($lab_re) "; then
    echo "a product crate depends on the lab"; exit 1
fi
# A bare `cargo build` (default-members) is the product: every crates/ member, no lab one.
cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
m = json.load(sys.stdin)
path = {p["id"]: p["manifest_path"].rsplit("/", 1)[0].replace(m["workspace_root"] + "/", "") for p in m["packages"]}
product = sorted(path[i] for i in m["workspace_members"] if path[i].startswith("crates/"))
default = sorted(path[i] for i in m["workspace_default_members"])
if product != default:
    sys.exit(f"default-members {default} are not the product crates {product}")'

step "layering: the product reads no service's lab tools (benchmarks, model tools: cohort-lab's)"
# A service's listing holds its serving entry, its checks and its tools apart
# (crates/services/api/src/listing.rs); under crates/ only the catalog reads the lab's part.
if grep -rnE 'catalog::(benches|model_tool|model_tools|with_model_tool)\(|tools\.(benches|models)\b' crates --include='*.rs' |
    grep -v '^crates/services/catalog/src/catalog.rs:'; then
    echo "a product crate reads a service's lab tools"; exit 1
fi

step "layering: the load generator builds without the services' backends (no CUDA, no memcached client)"
if cargo tree -p cohort-load -e normal --prefix none | grep -E "^(cudarc|memcache|cohort-gpu) "; then
    echo "cohort-load depends on a backend crate"; exit 1
fi
# Every service crate's lean half (codec, CPU function, workload) alone, and the catalog's
# (profile ci: the lints and tests below share its build scripts and proc macros).
service_crates=$(for d in crates/services/*/; do sed -n '0,/^name = /s/^name = "\(.*\)"/-p \1/p' "$d/Cargo.toml"; done)
# shellcheck disable=SC2086
cargo clippy $service_crates --no-default-features --all-targets --profile ci -- -D warnings
step "layering: the GPU runtime depends on no service (nor on the k-NN library)"
if cargo tree -p cohort-gpu -e normal --prefix none | grep -E "^cohort-(services|service-[a-z]+|ivf|experiments) "; then
    echo "cohort-gpu depends on a service"; exit 1
fi

# Lints and tests share one profile (ci) and so one target folder: the build scripts and
# proc macros clippy compiles are the tests' too, and nothing is compiled in a third
# profile (clippy in release used to check the whole workspace apart from the tests' build).
step "lints (profile ci, as the tests below)"
cargo clippy --workspace --all-targets --profile ci -- -D warnings

step "unit, property and integration tests (profile ci: release without LTO), the lab's too"
tests_log=$(mktemp)
# --tests: every unit and integration test, not rustdoc's pass over each library (the
# workspace holds no doc test: that pass ran none in 31 crates, 21 s on the 2-core machine) nor
# the examples' link (clippy --all-targets above checks them).
cargo test --workspace --profile ci --tests 2>&1 | tee "$tests_log"
# A test whose tool is missing here (GPU, NVRTC, UCX, etcd, memcached, the ORL faces) says
# `SKIPPED TEST: REASON` on stderr and returns, which libtest counts as passed: count those
# lines as skipped instead, by tool, so that a green run is not read as a full one (on the
# GPU machine `scripts/gpu-check` fails on any skip). grep -o: a line written by a test may
# land in the middle of libtest's own.
skips=$(grep -o 'SKIPPED .*' "$tests_log" || true)
skipped=$(printf '%s\n' "$skips" | grep -c . || true)
reported=$(sed -n 's/^test result: .* \([0-9][0-9]*\) passed;.*/\1/p' "$tests_log" | awk '{ s += $1 } END { print s + 0 }')
by_tool=$(printf '%s\n' "$skips" | grep . | awk '
    # The tool the reason names, GPU where none (the GPU checks say "no CUDA device"); a
    # cluster test names only what is missing, and counts under etcd where both are.
    { t = "GPU" }
    /NVRTC/ { t = "NVRTC" } /memcached/ { t = "memcached" } /ORL/ { t = "ORL" }
    /cores/ { t = "cores" } /UCX/ { t = "UCX" } /etcd/ { t = "etcd" }
    { n[t]++ } END { for (t in n) { printf "%s%s %d", sep, t, n[t]; sep = ", " } }' || true)
echo "== tests: $((reported - skipped)) passed, $skipped skipped${by_tool:+ ($by_tool)}"
printf '%s\n' "$skips" | grep . | sort | uniq -c | sed 's/^/   /' || true
rm -f "$tests_log"

step "the Python client (clients/python) and tritonclient (the Open Inference Protocol) against real servers"
python3 -m pip install --quiet --disable-pip-version-check ./clients/python "tritonclient[http,grpc]==2.73.0"
COHORT_BIN=target/ci/cohort python3 -m unittest discover -v -s clients/python/tests

step "fuzz targets (bounded)"
scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
echo "== [${SECONDS}s] done"
