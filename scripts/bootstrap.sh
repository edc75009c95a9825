#!/bin/bash
# Prepare the control machine: the Debian packages the simulated Spark and the validators need (when missing),
# and .venv with the pinned Python dependencies (reinstalled when requirements.txt changes). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=$(cat sparkctl/sim/host-packages.txt scripts/control-packages.txt 2>/dev/null | sed 's/#.*//' | xargs)
missing=()
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: missing Debian packages: ${missing[*]} (run as root, or apt-get install them)" >&2
    exit 1
  fi
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat .venv/.requirements-sha 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: installing Python dependencies into .venv (requirements.txt)"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" > .venv/.requirements-sha
fi
