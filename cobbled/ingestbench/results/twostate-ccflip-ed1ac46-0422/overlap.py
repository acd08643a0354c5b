# overlap.py reads.csv.gz [from_s to_s]: do node and ref slow reads (>5 ms) overlap in time more than by chance?
import gzip, csv, sys, bisect
path = sys.argv[1]; lo = float(sys.argv[2])*1000 if len(sys.argv) > 2 else 0; hi = float(sys.argv[3])*1000 if len(sys.argv) > 3 else 1e12
sl = {'node': [], 'ref': []}
op = gzip.open if path.endswith('.gz') else open
for r in csv.DictReader(op(path, 'rt')):
    a, l = float(r['at_ms']), float(r['latency_ms'])
    if l > 5 and lo <= a < hi: sl[r['node']].append((a, a + l))
for k in sl: sl[k].sort()
refs = sl['ref']; starts = [s for s, e in refs]
def frac(shift):
    hit = 0
    for s, e in sl['node']:
        s += shift; e += shift
        i = bisect.bisect_left(starts, s - 100)
        while i < len(refs) and refs[i][0] < e:
            if refs[i][1] > s: hit += 1; break
            i += 1
    return hit / max(1, len(sl['node']))
same = frac(0); base = sum(frac(x) for x in (-3000, -1700, 1300, 2900)) / 4
print('%s: slow node %d ref %d; node slow reads overlapping a slow ref read: %.2f (same moment) vs %.2f (shifted 1.3-3 s)' % (path.split('/')[-2], len(sl['node']), len(refs), same, base))
