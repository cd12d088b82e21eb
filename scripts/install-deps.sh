#!/usr/bin/env bash
# Installs the Debian 12 packages this project builds and runs with. No-op when all are present.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config ccache curl clang-format git
  libboost-dev libboost-system-dev
  nlohmann-json3-dev libsimdjson-dev
  libxgboost-dev
  prometheus-cpp-dev
  libspdlog-dev libfmt-dev
  libcxxopts-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  prometheus
  zlib1g-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libnghttp2-dev libssl-dev openssl
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
