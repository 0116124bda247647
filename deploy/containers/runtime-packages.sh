#!/usr/bin/env bash
# Prints the Debian packages a runtime image needs for the given binaries: the owners of every
# shared library they load (ldd), plus the owners of libraries they dlopen, named by
# --dlopen GLOB (e.g. 'libnvrtc.so*'). Run in the build stage, where all of them are installed.
# usage: runtime-packages.sh [--dlopen GLOB]... BINARY...
set -euo pipefail
globs=()
while [ "${1:-}" = "--dlopen" ]; do globs+=("$2"); shift 2; done
owner() { dpkg -S "*/$1" 2>/dev/null | grep -v '^diversion' | grep ': /' | cut -d: -f1 || true; }
{
  ldd "$@" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    real=$(readlink -f "$lib")  # /usr/lib/ARCH/x.so.N; dpkg may know it as /lib/ARCH/x.so.N
    owner "$(basename "$(dirname "$real")")/$(basename "$real")"
  done
  for g in "${globs[@]:-}"; do [ -n "$g" ] && owner "$g"; done
} | sort -u
