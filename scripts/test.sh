#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
ctest --output-on-failure -j2 --timeout 600 "$@"
