package pillar

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultMaxLayers is CompactOptions.MaxLayers' default: AutoCompact folds
// a table once it has more than 8 deltas. A read of a layered table merges
// base + deltas, so this bounds what a read merges; every delta is small,
// so folding them rarely keeps the rewrites (each O(N)) rare too.
const DefaultMaxLayers = 8

// CompactOptions configure Compact and AutoCompact. The zero value compacts
// with the defaults below.
type CompactOptions struct {
	// MaxLayers: AutoCompact folds a table that has more deltas than this.
	// The default value (0) is DefaultMaxLayers; a negative value never
	// compacts automatically (Compact still does when called).
	MaxLayers int
	// RowType is a value of the table's row struct, which the new base is
	// written with. The default value is the row type registered for the
	// table (RegisterRowType; pillar registers its own tables').
	RowType any
	// Retries is how often a compaction that lost a race with a delta
	// committed meanwhile (ErrConflict) starts over. The default value (0)
	// is 3; a negative value does not retry.
	Retries int
	// Progress, when set, receives the merged rows written so far (every
	// 4096 rows) and the total to expect. The default value reports
	// nothing.
	Progress func(done, total int64)
	// Merge, when set, writes the new base inside tx as one operation — on
	// YTsaurus a reduce of the layers by page_key on the cluster
	// (jobs.LayersMergeJob; `pillar compact` sets it for yt:// stores) —
	// instead of streaming the merged rows through this process. The
	// compaction has dropped the folded layers in tx before it calls Merge;
	// Merge writes m.Table (Replace) from m.Inputs. The default value
	// (nil) streams the rows through the client (memory: a row group per
	// layer).
	Merge func(ctx context.Context, tx Tx, m MergeSpec) error
	// Point, when set, is called at each named point of a compaction
	// ("begun", "writing", "written", "committed", "collected"): tests kill
	// the process there. The default value does nothing.
	Point func(name string)
}

func (o *CompactOptions) maxLayers() int {
	if o == nil || o.MaxLayers == 0 {
		return DefaultMaxLayers
	}
	return o.MaxLayers
}

func (o *CompactOptions) point(name string) {
	if o != nil && o.Point != nil {
		o.Point(name)
	}
}

// MergeSpec is the merge of one compaction, for CompactOptions.Merge.
type MergeSpec struct {
	// Table is the layered table, the merge's output: replaced, sorted by
	// SortedBy.
	Table string
	// Inputs are the table's layers, oldest first (LayerInputs), and Kinds
	// their kinds, index for index.
	Inputs   []string
	Kinds    []string
	SortedBy []string
	// BaseRows is the row count of the base (Inputs[0] when Kinds[0] is
	// LayerBase): a runner that refuses a table as both input and output
	// reads it as the row range [0, BaseRows).
	BaseRows int64
	// RowType is a value of the table's row struct (nil when none is
	// registered).
	RowType any
}

// CompactStats describe one compaction.
type CompactStats struct {
	Table string `json:"table"`
	// Layers is the number of deltas folded (0: the table had none).
	Layers int `json:"layers"`
	// Rows is the row count of the new base.
	Rows int64 `json:"rows"`
	// BytesBefore is the bytes of every layer folded (base included),
	// BytesAfter the new base's.
	BytesBefore int64 `json:"bytes_before"`
	BytesAfter  int64 `json:"bytes_after"`
	// Generation is the store generation the compaction committed.
	Generation int64 `json:"generation"`
	DurationMS int64 `json:"duration_ms"`
}

var (
	rowTypesMu sync.Mutex
	rowTypes   = map[string]reflect.Type{} // table name, or prefix ending in '/'
)

// RegisterRowType records the row type of a table (name) or of every table
// under a prefix (a name ending in '/'), for Compact. Packages that own a
// layered table register it in an init function.
func RegisterRowType(nameOrPrefix string, rowType any) {
	rt := reflect.TypeOf(rowType)
	for rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	rowTypesMu.Lock()
	defer rowTypesMu.Unlock()
	rowTypes[nameOrPrefix] = rt
}

func init() {
	RegisterRowType(TableDocs, Doc{})
	RegisterRowType(TableSignals, Signal{})
	RegisterRowType(PrefixSubsets, SubsetMember{})
	RegisterRowType(PrefixChunks, Chunk{})
	RegisterRowType(PrefixEmbed, Embedding{})
}

// RowTypeOf returns the registered row type of a table (the longest
// matching prefix wins).
func RowTypeOf(table string) (reflect.Type, bool) {
	rowTypesMu.Lock()
	defer rowTypesMu.Unlock()
	if rt, ok := rowTypes[table]; ok {
		return rt, true
	}
	best, bestLen := reflect.Type(nil), -1
	for p, rt := range rowTypes {
		if strings.HasSuffix(p, "/") && strings.HasPrefix(table, p) && len(p) > bestLen {
			best, bestLen = rt, len(p)
		}
	}
	return best, best != nil
}

// LayeredTables lists the tables of a snapshot that have delta layers, by
// name.
func LayeredTables(ctx context.Context, sn Snapshot) ([]string, error) {
	src, err := layerSourceOf(sn)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range src.RawTablesUnder(LayerDir) {
		if t, _, _, ok := IsLayerTable(n); ok && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Deltas is the number of deltas (seqs) among layers.
func Deltas(layers []Layer) int {
	seqs := map[int64]bool{}
	for _, l := range layers {
		if l.Kind != LayerBase {
			seqs[l.Seq] = true
		}
	}
	return len(seqs)
}

// AutoCompact compacts table t when it has more deltas than
// opts.MaxLayers; it returns nil stats when it did not. Writers of deltas
// call it after their commit. A table that does not exist (yet) has no
// deltas to fold: nil stats, no error (the pipeline calls it after every
// operation, including the first, which may not have written t).
func AutoCompact(ctx context.Context, st Store, t string, opts *CompactOptions) (*CompactStats, error) {
	max := opts.maxLayers()
	if max < 0 {
		return nil, nil
	}
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	ls, err := Layers(ctx, sn, t)
	sn.Release()
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil || Deltas(ls) <= max {
		return nil, err
	}
	cs, err := Compact(ctx, st, t, opts)
	return &cs, err
}

// collector is implemented by stores whose superseded files a compaction
// frees (pillar/local: a cleanup, which keeps every file a live snapshot
// leases). On YTsaurus the master removes a dropped table once no
// transaction (snapshot) holds a lock on it.
type collector interface {
	CollectGarbage(ctx context.Context) error
}

// Compact folds the deltas of layered table t into a new base, in one
// transaction: it streams t's merged rows (the same reader every Snapshot
// uses) into a Replace of t, which drops the layers folded. Readers are not
// blocked: they keep reading the snapshot they hold, whose files stay until
// they release it. A delta committed meanwhile is not lost: the compaction
// then fails with ErrConflict and starts over (CompactOptions.Retries).
// After the commit the store collects the superseded files that no live
// snapshot uses.
func Compact(ctx context.Context, st Store, t string, opts *CompactOptions) (CompactStats, error) {
	if opts == nil {
		opts = &CompactOptions{}
	}
	retries := opts.Retries
	if retries == 0 {
		retries = 3
	}
	for attempt := 0; ; attempt++ {
		cs, err := compactOnce(ctx, st, t, opts)
		if errors.Is(err, ErrConflict) && attempt < retries {
			continue
		}
		return cs, err
	}
}

func compactOnce(ctx context.Context, st Store, t string, opts *CompactOptions) (CompactStats, error) {
	start := time.Now()
	cs := CompactStats{Table: t}
	tx, err := st.Begin(ctx)
	if err != nil {
		return cs, fmt.Errorf("compact %s: %w", t, err)
	}
	defer tx.Abort()
	ls, err := Layers(ctx, tx, t)
	if errors.Is(err, ErrNotFound) {
		return cs, fmt.Errorf("compact: table %q does not exist in the store (%s): %w", t, st.Info().Root, ErrNotFound)
	}
	if err != nil {
		return cs, fmt.Errorf("compact %s: %w", t, err)
	}
	cs.Layers = Deltas(ls)
	for _, l := range ls {
		cs.BytesBefore += l.Bytes
	}
	ti, err := tx.Table(ctx, t)
	if err != nil {
		return cs, fmt.Errorf("compact %s: %w", t, err)
	}
	cs.Rows = ti.Rows
	if cs.Layers == 0 {
		cs.BytesAfter, cs.Generation = cs.BytesBefore, st.Info().Generation
		return cs, nil // nothing to fold
	}
	sortedBy := ti.SortedBy
	if len(sortedBy) == 0 {
		sortedBy = []string{"page_key"}
	}
	if opts.Merge != nil {
		return mergeOnce(ctx, st, tx, t, ls, sortedBy, opts, cs, start)
	}
	rt, err := compactRowType(t, opts)
	if err != nil {
		return cs, err
	}
	opts.point("begun")
	w, err := tx.WriteTable(ctx, t, reflect.New(rt).Interface(), &WriteOptions{SortedBy: sortedBy})
	if err != nil {
		return cs, fmt.Errorf("compact %s: %w", t, err)
	}
	defer w.Close()
	rr, err := tx.ReadTable(ctx, t, nil)
	if err != nil {
		return cs, fmt.Errorf("compact %s: %w", t, err)
	}
	defer rr.Close()
	v := reflect.New(rt)
	var n int64
	for rr.Next() {
		v.Elem().SetZero()
		if err := rr.Scan(v.Interface()); err != nil {
			return cs, fmt.Errorf("compact %s: %w", t, err)
		}
		if err := w.Write(v.Interface()); err != nil {
			return cs, compactDiskFull(st, t, cs.BytesBefore, err)
		}
		if n++; n == 1 {
			opts.point("writing")
		}
		if n&4095 == 0 {
			if opts.Progress != nil {
				opts.Progress(n, cs.Rows)
			}
		}
	}
	if err := rr.Err(); err != nil {
		return cs, fmt.Errorf("compact %s: %w", t, err)
	}
	if err := w.Close(); err != nil {
		return cs, compactDiskFull(st, t, cs.BytesBefore, err)
	}
	if opts.Progress != nil {
		opts.Progress(n, cs.Rows)
	}
	cs.Rows = n
	opts.point("written")
	if err := tx.Commit(ctx); err != nil {
		return cs, compactDiskFull(st, t, cs.BytesBefore, fmt.Errorf("compact %s: commit: %w", t, err))
	}
	return finishCompact(ctx, st, t, opts, cs, start)
}

// mergeOnce is a compaction whose new base CompactOptions.Merge writes.
func mergeOnce(ctx context.Context, st Store, tx Tx, t string, ls []Layer, sortedBy []string, opts *CompactOptions, cs CompactStats, start time.Time) (CompactStats, error) {
	m := MergeSpec{Table: t, SortedBy: sortedBy}
	for _, l := range ls {
		m.Inputs, m.Kinds = append(m.Inputs, l.Table), append(m.Kinds, l.Kind)
		if l.Kind == LayerBase {
			m.BaseRows = l.Rows
		} else {
			if err := tx.DropTable(ctx, l.Table); err != nil {
				return cs, fmt.Errorf("compact %s: %w", t, err)
			}
		}
	}
	if err := tx.ExpectAttr(ctx, AttrLayerPrefix+t); err != nil {
		return cs, fmt.Errorf("compact %s: %w", t, err)
	}
	if rt, err := compactRowType(t, opts); err == nil {
		m.RowType = reflect.New(rt).Interface()
	}
	opts.point("begun")
	if err := opts.Merge(ctx, tx, m); err != nil {
		return cs, compactDiskFull(st, t, cs.BytesBefore, err)
	}
	opts.point("written")
	if err := tx.Commit(ctx); err != nil {
		return cs, compactDiskFull(st, t, cs.BytesBefore, fmt.Errorf("compact %s: commit: %w", t, err))
	}
	return finishCompact(ctx, st, t, opts, cs, start)
}

func finishCompact(ctx context.Context, st Store, t string, opts *CompactOptions, cs CompactStats, start time.Time) (CompactStats, error) {
	opts.point("committed")
	cs.Generation = st.Info().Generation
	if sn, err := st.Snapshot(ctx); err == nil {
		if ti, err := sn.Table(ctx, t); err == nil {
			cs.BytesAfter = ti.Bytes
			if opts.Merge != nil {
				cs.Rows = ti.Rows
			}
		}
		sn.Release()
	}
	if c, ok := st.(collector); ok {
		if err := c.CollectGarbage(ctx); err != nil {
			return cs, fmt.Errorf("compact %s: committed; collecting the superseded files failed (the next cleanup retries): %w", t, err)
		}
	}
	opts.point("collected")
	cs.DurationMS = time.Since(start).Milliseconds()
	return cs, nil
}

func compactRowType(t string, opts *CompactOptions) (reflect.Type, error) {
	if opts.RowType != nil {
		rt := reflect.TypeOf(opts.RowType)
		for rt.Kind() == reflect.Pointer {
			rt = rt.Elem()
		}
		return rt, nil
	}
	rt, ok := RowTypeOf(t)
	if !ok {
		return nil, fmt.Errorf("compact %s: no row type is registered for the table (pillar.RegisterRowType, or CompactOptions.RowType)", t)
	}
	return rt, nil
}

// compactDiskFull turns a full disk (ENOSPC) during a compaction into an
// error naming the table and about the space the new base needs; the
// transaction is aborted, so the store stays as it was and readable.
func compactDiskFull(st Store, t string, need int64, err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		if strings.HasPrefix(err.Error(), "compact ") {
			return err
		}
		return fmt.Errorf("compact %s: %w", t, err)
	}
	info := st.Info()
	free := "unknown"
	if info.Backend == "local" {
		var fs syscall.Statfs_t
		if syscall.Statfs(info.Root, &fs) == nil {
			free = humanBytes(int64(fs.Bavail) * int64(fs.Bsize))
		}
	}
	return fmt.Errorf("compact %s: disk full writing the new base of table %s: it needs about %s free in %s (%s free now); nothing was committed, the table reads as before: %w",
		t, t, humanBytes(need), info.Root, free, err)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
