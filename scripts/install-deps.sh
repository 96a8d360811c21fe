#!/usr/bin/env bash
# Installs kvik's build and test dependencies from Debian packages (skips apt when all are present).
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config
      nlohmann-json3-dev libboost-dev libssl-dev libpcre2-dev libicu-dev libxxhash-dev libcli11-dev libfmt-dev
      libopenmpi-dev openmpi-bin
      libgtest-dev libgmock-dev libbenchmark-dev clang clang-format
      curl prometheus openssl  # curl, promtool and openssl (a TLS certificate): the server's end-to-end tests
      chromium)                # headless, driven by puppeteer-core: the web pages' browser tests (tests/web)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# Node.js and npm run the test-time clients; a machine may already have them from outside Debian (whose
# packages would then conflict), so they are installed only when the commands are absent.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
