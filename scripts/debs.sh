#!/usr/bin/env bash
# Fetches the Debian packages the GPU machine needs but cannot install (it reaches no package
# registry) into dist/debs, which travels with dist/: nginx and wrk for the HTTP anchor
# (scripts/http-served.sh), memcached for the bank's memcached backend test (scripts/gpu-check).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p dist/debs
cd dist/debs
apt-get download nginx nginx-common wrk libluajit2-5.1-2 memcached libevent-2.1-7 libmemcached-tools libmemcached11 libmemcachedutil2 libhashkit2
ls -la
