#!/usr/bin/env bash
# `make test`: every unit and integration test, with the race detector, on a
# fresh machine as on one with warm caches. It prints how long each phase took,
# so a slow run says where its time went.
#
#   1. set-up and builds: the Debian packages (scripts/setup.sh), bin/vkubelet
#      and bin/vkubeletctl, the control plane's binaries (built from the Go
#      module proxy once, then cached outside the repository), gofmt and go vet;
#   2. tests: `go test -race` of every package, TEST_P at once, TEST_FIRST first.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
TEST_P=${TEST_P:-4}
TEST_TIMEOUT=${TEST_TIMEOUT:-45m}
TEST_FIRST=${TEST_FIRST:-}

start=$SECONDS
phase_start=$SECONDS
phase() {
	echo "make test: $1 took $((SECONDS - phase_start)) s ($((SECONDS - start)) s in all)"
	phase_start=$SECONDS
}

# As root or in CI every test's parts are installed, so every test runs; a
# developer's run without root installs only the race detector's gcc, and the
# tests whose parts are missing skip, each saying what it needs.
setup=--test
if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then setup=--all; fi
make --no-print-directory SETUP="$setup" controlplane
phase "set-up, bin/vkubelet, bin/vkubeletctl and the control plane's binaries"
make --no-print-directory fmt-check vet
phase "gofmt and go vet"

# TEST_FIRST are listed before ./... (go test runs each package once, in the
# order given, as slots free up): the long packages do not start last. Tests
# that cannot run here (outside CI) skip and write why to $skips, printed last.
skips=$(mktemp)
trap 'rm -f "$skips"' EXIT
status=0
# shellcheck disable=SC2086
VKUBELET_TEST_SKIPS=$skips "$GO" test -race -count=1 -p "$TEST_P" -timeout "$TEST_TIMEOUT" $TEST_FIRST ./... || status=$?
phase "tests"
if [ -s "$skips" ]; then
	echo "make test: $(wc -l < "$skips") tests skipped, as this machine lacks what they need (CI runs them all):"
	sort "$skips" | sed 's/^/  /'
fi
exit "$status"
