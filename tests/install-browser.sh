#!/bin/sh
# The browser the report-page tests drive: Debian's Chromium (never one
# downloaded by a test library). Does nothing when it is already installed.
set -e
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
  echo "tests need Chromium: install it (apt-get install -y chromium chromium-driver) as root" >&2; exit 1
fi
$sudo apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium chromium-driver >/dev/null
command -v chromium >/dev/null
