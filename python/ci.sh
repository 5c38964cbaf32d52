#!/usr/bin/env bash
# The Python package's CI: lint the extension crate, build ONE abi3 wheel with maturin (dev profile),
# install it into fresh virtualenvs of the oldest and the newest Python we support, type
# check the package (mypy --strict) and the extension's stubs (stubtest), run the tests.
# Fails on any failure, and when pytest collects no tests.
#
# Run from anywhere: `python/ci.sh`. Interpreters: PY_OLDEST (default pyenv's 3.9.18) and
# PY_NEWEST (pyenv's 3.13.0); PYTHON (python3) runs maturin. Under CI=true, tests that need
# redis-server fail instead of skipping.
#
# scrapy-redis 0.9.1 (and the redis-py it brings) in both venvs: tests/test_scrapy_redis.py
# crawls under its scheduler, and mypy checks bloomsled.scrapy_redis_migrate against redis-py.
#
# Which tests run where: the full suite on the newest Python; on the oldest, what depends
# on the interpreter (the one abi3 wheel loading there, the API, the fingerprint set, the
# journal, threads, the Redis client and one real crawl with JOBDIR), not the suites that
# orchestrate processes and servers around the same code (kill/resume crawls, a crawl
# without JOBDIR, spiders sharing a Redis filter, scrapy-redis crawls, Redis restarts and
# failovers, a full disk, kill -9: minutes of CI's budget).
# FULL_ON_OLDEST=1 runs the full suite there too.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
oldest="${PY_OLDEST:-/root/.pyenv/versions/3.9.18/bin/python}"
newest="${PY_NEWEST:-/root/.pyenv/versions/3.13.0/bin/python}"

# The extension crate (a workspace member that links Python): formatted and linted here.
(cd "$here" && cargo fmt --check && cargo clippy --locked --all-targets -- -D warnings)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# One wheel: abi3-py39 (python/Cargo.toml), so the same file installs on every CPython >= 3.9.
# In the dev profile (dependencies at opt-level 2, debug assertions on): CI tests behaviour,
# and after the Rust test pass this compiles the binding and little else, where a release
# build recompiled the core and its dependencies (about 3 minutes); the suite ran as fast
# (545 s against 542 s here). Release wheels: `maturin build --release`.
"$py" -m pip install --quiet --upgrade "maturin>=1.9,<2"
(cd "$here" && "$py" -m maturin build --locked --out "$work/wheels")
wheels=("$work"/wheels/bloomsled-*-abi3-*.whl)
if [ "${#wheels[@]}" -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
    echo "ci.sh: expected exactly one abi3 wheel, got: ${wheels[*]}" >&2
    exit 1
fi
wheel="${wheels[0]}"

# A fresh venv with the wheel and the test dependencies; prints its python.
venv() {
    local interp="$1" dir="$2"
    "$interp" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --upgrade pip
    "$dir/bin/python" -m pip install --quiet "$wheel" pytest pytest-xdist scrapy "scrapy-redis==0.9.1" "${@:3}"
}

# From outside python/, so `import bloomsled` finds the installed wheel, not the source
# folder (which has no compiled extension). Fails when pytest collects no tests.
pytest_run() {
    local vpy="$1"
    shift
    set +e
    (cd "$here/.." && "$vpy" -m pytest -q -p no:cacheprovider "$@")
    local rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then
        echo "ci.sh: pytest collected no tests" >&2
        exit 1
    fi
    return "$rc"
}

# The tests in PYTEST_WORKERS processes (pytest-xdist; default 3): most wait on what they
# start (crawls, redis-servers, children killed and resumed), so more workers than cores
# still overlap waits, and each test has its own temporary folder and ports. The tests
# marked `serial` (python/pyproject.toml: a bound that a starved CPU moves) run after,
# alone.
run_tests() {
    local vpy="$1"
    shift
    pytest_run "$vpy" -n "${PYTEST_WORKERS:-3}" -m "not serial" "$@"
    pytest_run "$vpy" -m serial "$@"
}

venv "$newest" "$work/newest" "mypy>=2.4,<3"
vpy="$work/newest/bin/python"
"$vpy" -c 'import sys, bloomsled; print("bloomsled", bloomsled.__version__, "on", sys.version.split()[0])'
# The pure-Python package, strictly typed against the extension's stubs and Scrapy's types.
(cd "$here" && "$vpy" -m mypy --strict bloomsled)
# The stubs against the compiled extension they describe.
(cd "$work" && "$vpy" -m mypy.stubtest bloomsled._bloomsled)
run_tests "$vpy" "$here/tests"

venv "$oldest" "$work/oldest"
vpy="$work/oldest/bin/python"
"$vpy" -c 'import sys, bloomsled; print("bloomsled", bloomsled.__version__, "on", sys.version.split()[0])'
if [ "${FULL_ON_OLDEST:-0}" = 1 ]; then
    run_tests "$vpy" "$here/tests"
else
    # (No `serial` test is in this selection.)
    pytest_run "$vpy" -n "${PYTEST_WORKERS:-3}" "$here/tests" \
        -k "not (interrupted_crawl or kill9 or middleware or addon or two_spiders or crawl_fetches_every_page)" \
        --ignore="$here/tests/test_scrapy_redis.py" --ignore="$here/tests/test_redis_failover.py" \
        --ignore="$here/tests/test_redis_outage.py" --ignore="$here/tests/test_full_disk.py" \
        --ignore="$here/tests/test_crash.py" --ignore="$here/tests/test_redis_exact.py"
fi
