#!/usr/bin/env bash
# Prints CHANGELOG.md's section for a version (the release's notes):
# scripts/changelog-section.sh v1.2.3. Fails if the changelog has none.
set -euo pipefail
version=${1:?usage: $0 vX.Y.Z}
section=$(awk -v v="## ${version}" '$0 == v || index($0, v " ") == 1 {on=1; next} on && /^## /{exit} on' "$(dirname "$0")/../CHANGELOG.md")
[ -n "$section" ] || { echo "CHANGELOG.md has no section for ${version}" >&2; exit 1; }
printf '%s\n' "$section"
