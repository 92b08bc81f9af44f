#!/usr/bin/env bash
# Every benchmark, one after another (they must not share the 2 cores), into one log.
#   bash bench/run_all.sh [logfile]
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:-bench/last-run.log}
py=.venv/bin/python
run() {
  echo "===== $* ($(date -u +%H:%M:%S))" | tee -a "$log"
  "$py" "$@" 2>&1 | grep -vE '^\{"ts"' | tee -a "$log"
}
: > "$log"
{ echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(python3 --version)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "date: $(date -u)"; } | tee -a "$log"
run bench/wheel_bench.py --runs 3
run bench/register_bench.py --runs 3
run bench/dispatch_bench.py --store all --queue amqp --runs 3
run bench/idle_bench.py --store all --duration 60
run bench/http_client_bench.py --requests 20000 --runs 3 --concurrency 64 256
run bench/lateness_bench.py --store all --runs 3
run bench/callback_bench.py --store memory --jobs 20000 --runs 3
run bench/callback_bench.py --store secantus --jobs 3000 --runs 3
run bench/roundtrips_bench.py --jobs 2000 --seconds 10
run bench/roundtrips_bench.py --jobs 250 --seconds 10
run bench/batching_bench.py --rate 500
run bench/batching_bench.py --rate 800
run bench/store_write_bench.py --runs 3
run bench/herd_bench.py --herd 100000
run bench/api_load_bench.py --duration 60
run bench/overload_bench.py --runs 3
run bench/list_bench.py --jobs 20000
run bench/console_bench.py --jobs 10000 --runs 3
run bench/console_paint_bench.py --jobs 10000 --runs 5
echo "===== done ($(date -u +%H:%M:%S))" | tee -a "$log"
