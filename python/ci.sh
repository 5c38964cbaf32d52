#!/usr/bin/env bash
# The Python package's CI: install what the tests need, build and install the package from
# this folder, run the tests. Fails on any failure, and when pytest collects no tests.
# Run from anywhere: `python/ci.sh`. Uses `python3 -m pip` (a virtualenv is the caller's
# choice). Under CI=true, tests that need redis-server fail instead of skipping.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"

# The extension crate is its own cargo workspace: lint it here, not from the root.
(cd "$here" && cargo fmt --check && cargo clippy --locked --all-targets -- -D warnings)

"$py" -m pip install --upgrade "maturin>=1.9,<2" pytest scrapy
"$py" -m pip install --force-reinstall --no-deps "$here"

# From outside python/, so `import bloomsled` finds the installed package, not the
# source folder (which has no compiled extension).
cd "$here/.."
set +e
"$py" -m pytest -q -p no:cacheprovider "$here/tests"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "ci.sh: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
