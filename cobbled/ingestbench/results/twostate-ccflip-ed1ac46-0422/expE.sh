#!/bin/bash
# Experiment E (two-state read tail): an unpaced 1 GiB `pillar bench ingest`; in the slow state after the first
# snapshot, switch the REFERENCE node's response sockets (peer = reader process) to cubic at t0+33 s, and
# re-initialise BBR (cubic,bbr: back to STARTUP) on the MEASURED node's response sockets at t0+46 s.
# A 0.5 s `ss -tin` sampler runs throughout. Then tcprepro bbr/cubic after a loopback bulk transfer.
set -u
O=${1:-/work/runs/h23/out/E}; mkdir -p $O
W=/work/wt/h23; export TMPDIR=/work/runs/h23/tmp
log() { echo "$(date -u +%T.%N) $*" >> $O/E.log; }
( while true; do echo "T $(date +%s.%N)"; ss -tinmH state established '( src 127.0.0.1 )'; sleep 0.5; done ) > $O/ss.txt 2>&1 &
sp=$!
nstat -az > $O/nstat-pre
GODEBUG=gctrace=1 $W/bin/pillar bench ingest --out $O/bench --modes unpaced ${BENCHARGS:-} > $O/bench.stdout 2> $O/bench.stderr &
bp=$!
R=; REF=
for i in $(seq 1 600); do
  for p in $(pgrep -P $bp); do
    grep -qz '^PILLAR_INGESTBENCH_READER=' /proc/$p/environ 2>/dev/null && R=$p
    grep -qz '^PILLAR_INGESTBENCH_REFERENCE=' /proc/$p/environ 2>/dev/null && REF=$p
  done
  [ -n "$R" ] && [ -n "$REF" ] && break
  sleep 0.2
done
log "bench=$bp reader=$R reference=$REF"
t0=$(tr '\0' '\n' < /proc/$R/environ | grep '^PILLAR_INGESTBENCH_READER=' | grep -o '"Start":[0-9]*' | cut -d: -f2)
log "t0_ns=$t0"
bt=$(awk '/^btime/{print $2}' /proc/stat); hz=$(getconf CLK_TCK)
for p in $bp $REF $R; do log "pid $p start_s=$(awk -v bt=$bt -v hz=$hz '{printf "%.2f", bt + $22/hz}' /proc/$p/stat)"; done
at() { local t=$(( t0 / 1000000 + $1 * 1000 )); local now=$(date +%s%3N); [ $t -gt $now ] && sleep $(echo "scale=3; ($t-$now)/1000" | bc); }
at ${FLIP1:-33}; log "flip ref cubic"; python3 /work/runs/h23/ccflip.py $REF cubic --peer-pid $R >> $O/E.log 2>&1; log "done"
at ${FLIP2:-46}; log "flip node cubic,bbr"; python3 /work/runs/h23/ccflip.py $bp cubic,bbr --peer-pid $R >> $O/E.log 2>&1; log "done"
wait $bp; log "bench rc=$?"; nstat -az > $O/nstat-post
kill $sp
cd /work/runs/h23/tcprepro
[ -n "${SKIPREPRO:-}" ] || for r in bbr:burn cubic:burn bbr:bulk; do ./tcprepro -cc ${r%%:*} -trigger ${r##*:} -ss 1s > $O/repro-${r%%:*}-${r##*:}.txt 2>&1; grep SUMMARY $O/repro-${r%%:*}-${r##*:}.txt >> $O/E.log; done
log "E done"
