#!/usr/bin/env bash
# Makes site.warc.gz, the crawl the WARC ingest tests read: Debian's wget
# mirroring site/ served by Python's http.server on 127.0.0.1:8765 (links to
# a missing page, a PDF and a PNG give 404, non-HTML responses).
#   cd pillar/ingest/testdata/crawl && ./make-warc.sh
set -euo pipefail
cd "$(dirname "$0")"
port=8765
python3 -m http.server "$port" --bind 127.0.0.1 --directory site >/dev/null 2>&1 &
server=$!
trap 'kill $server' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.1; done
tmp=$(mktemp -d)
(cd "$tmp" && wget --recursive --level=inf --no-verbose --warc-file=site --no-warc-keep-log \
  "http://127.0.0.1:$port/index.html" || true)   # wget exits 8 on the 404 it is meant to record
mv "$tmp/site.warc.gz" site.warc.gz
rm -rf "$tmp"
ls -l site.warc.gz
