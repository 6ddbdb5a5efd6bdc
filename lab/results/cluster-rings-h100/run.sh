#!/bin/bash
# This session's one device script (its `hop` mode made this folder): kept once, beside the
# kernel results it also made.
exec "$(dirname "$0")/../knn-u8-scan-e2c6bad-h100/run.sh" "$@"
