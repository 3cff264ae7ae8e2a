#!/usr/bin/env bash
# `make flakes`: runs the tests again and again on a machine made slow on
# purpose, and counts which tests fail. A test that fails here assumes a
# duration somewhere; docs/TESTING.md says how to find and fix the assumption.
#
# Two modes, by FLAKES_PKGS:
#   - empty (the default): FLAKES_RUNS whole `make test` runs in CI's mode
#     (CI=true: nothing skipped), one after the other; with FLAKES_COLD=1 the
#     first run starts from empty Go module, build and binary caches (in a
#     temporary folder outside the repository, where `go vet ./...` would find
#     the modules' sources; removed at the end; the machine's own stay as they are).
#   - packages (FLAKES_PKGS="./resolve ./pod"): `go test -race -count
#     FLAKES_COUNT` of those packages, FLAKES_RUNS times: a cheap way to
#     repeat the integration packages many times each.
#
# While it runs, FLAKES_LOAD busy loops (default: one per core) keep every core
# busy, as another build or a noisy neighbour would; FLAKES_LOAD=0 runs quiet.
# Each run's log and a summary (FLAKES_DIR/summary.txt: each failed test with
# how many runs it failed in) are kept in FLAKES_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
RUNS=${FLAKES_RUNS:-3}
COLD=${FLAKES_COLD:-0}
PKGS=${FLAKES_PKGS:-}
COUNT=${FLAKES_COUNT:-3}
LOAD=${FLAKES_LOAD:-$(nproc)}
DIR=${FLAKES_DIR:-bin/flakes/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

loaders=()
stop_load() {
	for pid in "${loaders[@]}"; do kill "$pid" 2>/dev/null; done
	wait "${loaders[@]}" 2>/dev/null
	loaders=()
}
trap 'stop_load' EXIT
trap 'exit 130' INT TERM
for _ in $(seq 1 "$LOAD"); do
	# A shell loop rather than a stress tool: nothing to install, and it
	# competes for the CPU at the tests' own priority.
	bash -c 'while :; do :; done' &
	loaders+=("$!")
done

echo "flakes: $RUNS runs$([ -n "$PKGS" ] && echo " of $PKGS, -count $COUNT each"), $LOAD busy loops on $(nproc) cores, logs in $DIR"
failed_runs=0
for run in $(seq 1 "$RUNS"); do
	log="$DIR/run-$run.log"
	env=(CI=true)
	kind=warm
	if [ "$run" = 1 ] && [ "$COLD" = 1 ]; then
		kind=cold
		cold=$(mktemp -d "${TMPDIR:-/tmp}/vkubelet-flakes-cold.XXXXXX")
		env+=(GOMODCACHE="$cold/mod" GOCACHE="$cold/build" VKUBELET_CACHE="$cold/vkubelet")
	fi
	start=$SECONDS
	if [ -n "$PKGS" ]; then
		# shellcheck disable=SC2086
		env "${env[@]}" "$GO" test -race -count="$COUNT" -timeout 60m $PKGS >"$log" 2>&1
	else
		env "${env[@]}" make --no-print-directory test >"$log" 2>&1
	fi
	rc=$?
	[ "$rc" = 0 ] || failed_runs=$((failed_runs + 1))
	echo "flakes: run $run ($kind) exit $rc in $((SECONDS - start)) s; $(grep -c -- '^\s*--- FAIL:' "$log") failed tests"
done
stop_load
if [ -n "${cold:-}" ]; then
	chmod -R u+w "$cold" 2>/dev/null # the module cache is read-only
	rm -rf "$cold"
fi

# Each failed test once per run it failed in, with the package it was in when
# the run says (go test prints the test's failure before its package's FAIL).
for log in "$DIR"/run-*.log; do
	grep -o -- '--- FAIL: [^ ]*' "$log" | sort -u
done | sort | uniq -c | sort -rn | sed 's/--- FAIL: //' >"$DIR/summary.txt"
echo "flakes: $failed_runs of $RUNS runs failed"
if [ -s "$DIR/summary.txt" ]; then
	echo "flakes: failed tests (runs failed in, name):"
	sed 's/^/  /' "$DIR/summary.txt"
	exit 1
fi
[ "$failed_runs" = 0 ]
