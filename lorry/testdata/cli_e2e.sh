#!/usr/bin/env bash
# End-to-end check of `pillar lorry run --once` through the CLI: a publish and
# a subset recompute on the store queue puts and deletes; Lorry delivers them;
# a cobbled node serves the change to `pillar get`.
#
#   go build -o /tmp/pillar ./cli && lorry/testdata/cli_e2e.sh /tmp/pillar
set -euo pipefail
P=${1:-pillar}
D=$(mktemp -d /tmp/lorry-e2e.XXXXXX)
CTL=127.0.0.1:${CTL_PORT:-17300}
NODE=127.0.0.1:${NODE_PORT:-17301}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$D"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$D/pages"
for i in 1 2 3 4 5 6; do
  printf '<html><head><title>Page %s</title></head><body><p>Page number %s. %s</p></body></html>' \
    "$i" "$i" "$(seq 1 50 | tr '\n' ' ')" > "$D/pages/p$i.html"
done
printf 'policies:\n  - name: all\n    exported: true\n    where: text_len > 0\n' > "$D/pol1.yaml"
printf 'policies:\n  - name: all\n    exported: true\n    where: text_len > 0 and not (url ~ "p5")\n' > "$D/pol2.yaml"

$P ingest --store "$D/store" --from "$D/pages" --base-url https://ex.com/ --partitions 4 >/dev/null
CV=$($P backfill rechunk --store "$D/store" --chunker recursive:size=200,overlap=20 2>/dev/null | tail -1)
$P backfill embed --store "$D/store" --chunks "$CV" --model hash:dim=16 >/dev/null 2>&1
$P subsets recompute --store "$D/store" --policies "$D/pol1.yaml" >/dev/null 2>&1
$P publish --store "$D/store" --chunks "$CV" --model hash:dim=16 >/dev/null 2>&1

$P control serve --db "sqlite:$D/control.db" --listen "$CTL" --http "" --partitions 4 --no-auth --replicas 1 >"$D/control.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do $P control nodes --control "$CTL" >/dev/null 2>&1 && break; sleep 0.1; done
$P cobbled serve --id n1 --data "$D/n1" --listen "$NODE" --http "" --control "$CTL" --objstore "$D/objects" --cache 16MiB >"$D/n1.log" 2>&1 &
pids+=($!)

# get URL EXPECTED-SUBSTRING: waits until the node serves it.
get() {
  for _ in $(seq 100); do
    out=$($P get --node "$NODE" "$1" 2>/dev/null || true)
    if grep -q -- "$2" <<<"$out"; then echo "$out"; return 0; fi
    sleep 0.1
  done
  fail "$1: want '$2', got: $out"
}

$P lorry run --store "$D/store" --objstore "$D/objects" --control "$CTL" --once
get https://ex.com/p3.html '"Page 3"'

# A changed page, re-published: one put.
sed -i 's/Page 3/Page Three (changed)/' "$D/pages/p3.html"
$P ingest --store "$D/store" --from "$D/pages" --base-url https://ex.com/ >/dev/null
$P backfill rechunk --store "$D/store" --chunker recursive:size=200,overlap=20 >/dev/null 2>&1
$P backfill embed --store "$D/store" --chunks "$CV" --model hash:dim=16 >/dev/null 2>&1
$P publish --store "$D/store" --chunks "$CV" --model hash:dim=16 >/dev/null 2>&1
$P lorry status --store "$D/store"
$P lorry run --store "$D/store" --objstore "$D/objects" --control "$CTL" --once
get https://ex.com/p3.html 'Page Three (changed)'

# A page leaves the exported subset: one delete (tombstone).
$P subsets recompute --store "$D/store" --policies "$D/pol2.yaml" >/dev/null 2>&1
$P lorry run --store "$D/store" --objstore "$D/objects" --control "$CTL" --once
get https://ex.com/p5.html 'not found'
$P lorry status --store "$D/store" | tail -1 | grep -q 'total depth 0 records' || fail "queue not drained"
echo "OK: lorry CLI end to end"
