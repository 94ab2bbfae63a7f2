#!/usr/bin/env bash
# Memory under large writes: 1,500 updates of one 1 MiB ConfigMap through `watchcache serve`
# (release build), reporting the server's peak RSS (VmHWM). With the defaults
# (--history-bytes 256 MiB per resource, the store's log bounded alike) the peak stays under
# 1 GiB; pass extra serve flags as arguments, e.g. --history-bytes 1099511627776 to compare.
#   bash bench/scripts/history_bytes.sh [UPDATES] [serve flags...]
set -euo pipefail
cd "$(dirname "$0")/../.."
updates="${1:-1500}"
shift || true
cargo build -q --release -p watchcache-server
port=$((20000 + RANDOM % 20000))
target/release/watchcache serve --addr "127.0.0.1:$port" "$@" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
bodies=$(mktemp -d)
url="http://127.0.0.1:$port/api/v1/namespaces/default/configmaps"
# 26 bodies of about 1 MiB, written once: the loop below only sends them.
python3 - "$bodies" <<'PY'
import json, string, sys
for c in string.ascii_lowercase:
    with open(f"{sys.argv[1]}/{c}.json", "w") as f:
        json.dump({"metadata": {"name": "big"}, "data": {"v": c * (1 << 20)}}, f)
PY
curl -sf -X POST -H 'content-type: application/json' --data-binary @"$bodies/a.json" "$url" >/dev/null
letters=(a b c d e f g h i j k l m n o p q r s t u v w x y z)
for i in $(seq "$updates"); do
  curl -sf -X PUT -H 'content-type: application/json' \
    --data-binary @"$bodies/${letters[$((i % 26))]}.json" "$url/big" >/dev/null
done
curl -sf "$url?limit=1" >/dev/null
peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
now=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
held=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^watchcache_history_bytes\{resource="configmaps"\}/ {print $2}')
echo "updates=$updates peak_rss_mib=$((peak / 1024)) rss_mib=$((now / 1024)) configmaps_history_mib=$((held / 1048576))"
rm -rf "$bodies"
