#!/usr/bin/env bash
# Installs Kiln's build and test dependencies from Debian's packages, idempotently.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config clang-format
  clang libclang-rt-dev  # the libFuzzer targets (tests/fuzz): clang and its libclang_rt.fuzzer
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtorch-dev libboost-dev libboost-system-dev
  prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libblis-dev libdnnl-dev libsqlite3-dev libabsl-dev nlohmann-json3-dev
  pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clinfo libclblast-dev
  python3 curl openssl libssl-dev
  python3-grpcio python3-grpc-tools  # the Python client (clients/python), on Debian's python3
  libpq-dev postgresql prometheus
  chromium  # headless, renders `kiln report` pages in tests/integration/report_test.sh
)
# kubectl (for `kubectl kustomize` in the tests): Debian's kubernetes-client, unless a kubectl
# from another package is already there (the two conflict).
command -v kubectl >/dev/null || PKGS+=(kubernetes-client)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all dependencies present"
fi
