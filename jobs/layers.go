package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/mapreduce"
	"go.ytsaurus.tech/yt/go/mapreduce/spec"
	"go.ytsaurus.tech/yt/go/schema"
	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yson"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/pillar"
)

// Layered inputs (pillar's layers.go). The local runner reads its inputs
// through the store, which merges a layered table's layers as it reads. A
// YTsaurus operation reads Cypress tables, so the YT runner first resolves
// every layered input with one reduce by page_key over the table's layers
// (LayersMergeJob) into a temporary table under YTOptions.TmpDir, and points
// the operation at it. Jobs that take the layers as inputs themselves
// (pillar.LayerInputs) avoid that pass.

func init() {
	Register("layers-merge", "a layered table's layers (base, deletes, deltas; oldest first), reduced by page_key → its merged rows (the newest layer holding a key decides)", &LayersMergeJob{})
}

// LayersMergeJob reduces the layers of one layered table, given oldest
// first as consecutive inputs, grouped by page_key: per key the input of
// the highest index holding it decides — a deletes layer drops the key,
// another layer's rows of the key are written as they are (raw YSON: the
// job needs no row type).
type LayersMergeJob struct {
	mapreduce.Untyped
	// Kinds[i] is the pillar.Layer kind of input i.
	Kinds []string
}

type layerKey struct {
	PageKey string `yson:"page_key"`
}

// Do implements mapreduce.Job.
func (j *LayersMergeJob) Do(ctx mapreduce.JobContext, in mapreduce.Reader, out []mapreduce.Writer) error {
	return mapreduce.GroupKeys(in, func(r mapreduce.Reader) error {
		best := -1
		var rows []yson.RawValue
		for r.Next() {
			ti := r.TableIndex()
			if ti < best {
				continue
			}
			if ti > best {
				best, rows = ti, rows[:0]
			}
			if ti < len(j.Kinds) && j.Kinds[ti] == pillar.LayerDeletes {
				continue
			}
			var raw yson.RawValue
			if err := r.Scan(&raw); err != nil {
				return err
			}
			rows = append(rows, append(yson.RawValue(nil), raw...))
		}
		if best < 0 || (best < len(j.Kinds) && j.Kinds[best] == pillar.LayerDeletes) {
			return nil
		}
		for _, row := range rows {
			if err := out[0].Write(row); err != nil {
				return err
			}
		}
		return nil
	})
}

// resolveLayers replaces every layered input of s (op.Inputs[i] ↔
// s.InputTablePaths[i]) by a temporary table of its merged rows, and
// returns the temporary tables.
func (y *YT) resolveLayers(ctx context.Context, mr mapreduce.Client, tx yt.Tx, s *spec.Spec, op *Op, log *slog.Logger) ([]ypath.Path, error) {
	var temps []ypath.Path
	var bin ypath.Path
	var oo []mapreduce.OperationOption
	// An operation that reads a table's layers as inputs (pillar.LayerInputs)
	// resolves them itself: its base is read as it is.
	own := map[string]bool{}
	for _, in := range op.Inputs {
		if name, _, err := SplitRowRange(in); err == nil {
			if t, _, _, ok := pillar.IsLayerTable(name); ok {
				own[t] = true
			}
		}
	}
	for i, in := range op.Inputs {
		name, rng, err := SplitRowRange(in)
		if err != nil {
			return temps, err
		}
		if own[name] {
			continue
		}
		layers, err := y.layersOf(ctx, tx, name)
		if err != nil {
			return temps, err
		}
		if layers == nil {
			continue
		}
		base := y.opts.TablePath(name)
		var sch schema.Schema
		if err := tx.GetNode(ctx, base.Attr("schema"), &sch, nil); err != nil {
			return temps, fmt.Errorf("layered input %s: schema: %w", base, err)
		}
		tmp := y.opts.TmpDir.Child(guid.New().String())
		if err := y.createFolder(ctx, tmp); err != nil {
			return temps, err
		}
		if _, err := tx.CreateNode(ctx, tmp, yt.NodeTable, &yt.CreateNodeOptions{Attributes: map[string]any{"schema": sch}}); err != nil {
			return temps, fmt.Errorf("temporary table for layered input %s: %w", base, err)
		}
		temps = append(temps, tmp)
		rs := spec.Reduce()
		rs.Title = "pillar: resolve the layers of " + name
		rs.Pool = y.opts.Pool
		kinds := make([]string, len(layers))
		for k, l := range layers {
			rs = rs.AddInput(y.opts.TablePath(l.Table))
			kinds[k] = l.Kind
		}
		rs = rs.AddOutput(tmp).ReduceByColumns("page_key").SortByColumns("page_key")
		mem := op.MemoryLimit
		if mem == 0 {
			mem = DefaultMemoryLimit
		}
		rs.Reducer = &spec.UserScript{Format: ysonBinary{Name: "yson", Format: "binary"}, MemoryLimit: mem}
		if y.opts.JobBinary != "" && bin == "" {
			if bin, err = y.uploadBinary(ctx); err != nil {
				return temps, err
			}
			oo = append(oo, mapreduce.SkipSelfUpload())
		}
		if bin != "" {
			rs.PatchUserBinary(bin)
		}
		ro, err := mr.Reduce(&LayersMergeJob{Kinds: kinds}, rs, oo...)
		if err != nil {
			return temps, fmt.Errorf("resolve the layers of %s: %w", name, err)
		}
		log.Info("jobs: resolving layered input", "input", name, "layers", len(layers), "id", ro.ID().String())
		if err := y.wait(ctx, ro.ID(), &Op{}, log); err != nil {
			return temps, fmt.Errorf("resolve the layers of %s: operation %s: %w", name, ro.ID(), err)
		}
		p := ypath.NewRich(string(tmp))
		if rng != nil {
			p = p.AddRange(ypath.Interval(ypath.RowIndex(rng.Start), ypath.RowIndex(rng.End)))
		}
		s.InputTablePaths[i] = p
	}
	return temps, nil
}

// layersOf lists the layers of a store table as the transaction sees them,
// oldest first (pillar.LayersOf's order); nil when it has none.
func (y *YT) layersOf(ctx context.Context, tx yt.Tx, name string) ([]pillar.Layer, error) {
	if _, _, _, ok := pillar.IsLayerTable(name); ok {
		return nil, nil
	}
	var leaves []string
	dir := y.opts.TablePath(pillar.LayerDir + name)
	if err := tx.ListNode(ctx, dir, &leaves, nil); err != nil {
		if yterrors.ContainsResolveError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list the layers of %s: %w", name, err)
	}
	var out []pillar.Layer
	for _, leaf := range leaves {
		t, kind, seq, ok := pillar.IsLayerTable(pillar.LayerDir + name + "/" + leaf)
		if ok && t == name {
			out = append(out, pillar.Layer{Table: pillar.LayerDir + name + "/" + leaf, Kind: kind, Seq: seq})
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Seq != out[j].Seq {
			return out[i].Seq < out[j].Seq
		}
		return out[i].Kind == pillar.LayerDeletes && out[j].Kind != pillar.LayerDeletes
	})
	ok, err := tx.NodeExists(ctx, y.opts.TablePath(name), nil)
	if err != nil {
		return nil, fmt.Errorf("layered input %s: %w", name, err)
	}
	if ok {
		out = append([]pillar.Layer{{Table: name, Kind: pillar.LayerBase}}, out...)
	}
	return out, nil
}

// CompactMerge returns a pillar.CompactOptions.Merge that writes a
// compaction's new base with one LayersMergeJob reduce on r inside the
// compaction's transaction: on YTsaurus the merge runs on the cluster and
// no row passes through the client. The base is read as the row range of
// its rows (it is also the output, which it replaces).
func CompactMerge(r Runner) func(ctx context.Context, tx pillar.Tx, m pillar.MergeSpec) error {
	return func(ctx context.Context, tx pillar.Tx, m pillar.MergeSpec) error {
		in := append([]string(nil), m.Inputs...)
		if len(m.Kinds) > 0 && m.Kinds[0] == pillar.LayerBase {
			in[0] = RowRange(in[0], 0, m.BaseRows)
		}
		return r.Reduce(ctx, &LayersMergeJob{Kinds: m.Kinds}, &Op{Title: "compact " + m.Table, Inputs: in,
			Outputs: []Output{{Table: m.Table, RowType: m.RowType, SortedBy: m.SortedBy}}, ReduceBy: []string{"page_key"}, Tx: tx})
	}
}

// replaceLayers: an output that replaces a layered table takes the table's
// delta layers with it, as a Replace through the store does (pillar's
// DropLayers): in the caller's store transaction (dropped at its commit,
// and its commit fails if a delta was committed meanwhile), or, in the
// runner's own transaction, by removing the layer tables with the output.
// Appending onto a layered table is refused.
func (y *YT) replaceLayers(ctx context.Context, tx yt.Tx, op *Op) error {
	for _, o := range op.Outputs {
		layers, err := y.layersOf(ctx, tx, o.Table)
		if err != nil {
			return err
		}
		if layers == nil {
			continue
		}
		if o.Append {
			return fmt.Errorf("output %q has delta layers: %w", o.Table, pillar.ErrAppendLayered)
		}
		if op.Tx != nil {
			// The layers of the store transaction's Begin state.
			ls, err := pillar.Layers(ctx, op.Tx, o.Table)
			if err != nil {
				return fmt.Errorf("output %q: %w", o.Table, err)
			}
			for _, l := range ls {
				if l.Kind == pillar.LayerBase {
					continue
				}
				if err := op.Tx.DropTable(ctx, l.Table); err != nil {
					return fmt.Errorf("output %q: %w", o.Table, err)
				}
			}
			if err := op.Tx.ExpectAttr(ctx, pillar.AttrLayerPrefix+o.Table); err != nil {
				return fmt.Errorf("output %q: %w", o.Table, err)
			}
			continue
		}
		for _, l := range layers {
			if l.Kind == pillar.LayerBase {
				continue
			}
			if err := tx.RemoveNode(ctx, y.opts.TablePath(l.Table), &yt.RemoveNodeOptions{Force: true}); err != nil {
				return fmt.Errorf("output %q: remove layer %s: %w", o.Table, l.Table, err)
			}
		}
	}
	return nil
}
