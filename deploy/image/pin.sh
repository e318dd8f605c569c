#!/usr/bin/env bash
# Re-pins deploy/image/constraints.txt: the versions pip resolves today for the project's runtime dependencies
# (no dev extra), on this Python. Run it after changing [project].dependencies in pyproject.toml, then commit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY="${PYTHON:-.venv/bin/python}"
report="$(mktemp)"
trap 'rm -f "$report"' EXIT
"$PY" -m pip install --dry-run --ignore-installed --quiet --report "$report" .
{
    sed -n '1,2p' deploy/image/constraints.txt
    "$PY" - "$report" <<'PYEOF'
import json
import sys

report = json.load(open(sys.argv[1]))
for item in sorted(report["install"], key=lambda i: i["metadata"]["name"].lower()):
    meta = item["metadata"]
    if meta["name"] != "rogerwilco-gatekeeper":
        print(f"{meta['name'].lower()}=={meta['version']}")
PYEOF
} >deploy/image/constraints.txt.new
mv deploy/image/constraints.txt.new deploy/image/constraints.txt
echo "deploy/image/constraints.txt: $(grep -c '==' deploy/image/constraints.txt) pins"
