#!/usr/bin/env bash
# Runs the echo demo: a server and a client of each api in one process over
# 127.0.0.1, for a few message sizes, printing a table. It first installs what
# it needs on a fresh Debian machine (see scripts/lib.sh). Arguments are
# passed to the echo command; with none, it runs the demo.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
setup

section "echo demo"
exec go run ./cmd/echo "$@"
