package plan

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// money formats an amount in dollars: $1,234,567 or $0.0004.
func money(v float64) string {
	if v != 0 && math.Abs(v) < 10 {
		return "$" + strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.5f", v), "0"), ".")
	}
	return "$" + num(math.Round(v))
}

// num formats a count with thousands separators (3 significant decimals
// below 10, none above).
func num(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return fmt.Sprint(v)
	}
	if math.Abs(v) < 10 && v != math.Trunc(v) {
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if v < 0 {
		return "-" + b.String()
	}
	return b.String()
}

// bytesSI formats bytes (or bytes/s) with decimal units.
func bytesSI(v float64) string {
	for _, u := range []struct {
		s string
		m float64
	}{{"PB", 1e15}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if math.Abs(v) >= u.m {
			return fmt.Sprintf("%.3g %s", v/u.m, u.s)
		}
	}
	return fmt.Sprintf("%.0f B", v)
}

// Text writes the plan for a person: inputs, the node count and its needs,
// the other loads, both bills and the ratios.
func (r *Result) Text(out io.Writer) {
	w, o := r.Workload, r.Options
	fmt.Fprintf(out, "Workload: %s req/s × %v keys × %s items, %s pages, %s updates/s, %d replicas in %d zones\n",
		num(w.RPS), w.KeysPerRequest, bytesSI(w.ItemBytes), num(w.Pages), num(w.UpdatesPerS), w.Replicas, w.Zones)
	fmt.Fprintf(out, "Prices:   %s (%s)\n\n", r.PricesFile, r.Currency)

	fmt.Fprintf(out, "Serving nodes: %d × %s (largest need: %s; rounded up to a multiple of %d zones)\n", r.Serving.Nodes, r.Serving.Instance, r.Serving.Limit, w.Zones)
	for _, n := range r.Serving.Needs {
		var d string
		switch n.Name {
		case "egress":
			d = fmt.Sprintf("%s/s of answers (hedges %.1f%% included) over %s/s per node (%.0f%% of the baseline NIC)", bytesSI(n.Demand), 100*r.CrossAZ.HedgeRate, bytesSI(n.PerNode), 100*o.NICShare)
		case "storage":
			d = fmt.Sprintf("%s = %d replicas × %d versions × pages × %s stored, over %s usable per node (%.0f%% of the disk)", bytesSI(n.Demand), w.Replicas, o.RetainedVersions, bytesSI(w.ItemBytes*o.Compression+perEntryBytes), bytesSI(n.PerNode), 100*o.DiskFill)
		case "cpu":
			d = fmt.Sprintf("%s key reads/s over %s per node (%s keys/s per vCPU at %.0f%% CPU)", num(n.Demand), num(n.PerNode), num(o.KeysPerCoreS), 100*o.CPUTarget)
		case "replicas":
			d = "a partition's replicas on distinct nodes"
		}
		fmt.Fprintf(out, "  %-9s %6d  %s\n", n.Name, n.Nodes, d)
	}
	c := r.CrossAZ
	fmt.Fprintf(out, "\nCross-AZ: %.1f%% of answer bytes cross zones (same-zone fraction %.2f, hedge rate %.1f%%): %s/s, %s GB/month\n",
		100*c.CrossFraction, c.SameZoneFraction, 100*c.HedgeRate, bytesSI(c.BytesPerS), num(c.GBMonth))
	s := r.ObjectStore
	fmt.Fprintf(out, "Object store: %v rebuild(s)/month of %s in %s SST files; %.0f Lorry delta batches/s (%s/s); %s stored on average\n",
		s.RebuildsPerMonth, bytesSI(s.SnapshotBytes), num(s.FilesPerRebuild), s.LorryBatchesPerS, bytesSI(s.DeltaBytesPerS), bytesSI(s.StoredBytes))
	cp := r.ControlPlane
	fmt.Fprintf(out, "Control plane: %.0f RegisterBatch/s (%.0f%% of the measured %s/s), %.0f replica batch polls/s, %.0f heartbeats/s, %.0f routing fetches/s\n",
		cp.RegisterPerS, 100*cp.RegisterUtilisation, num(o.RegisterBatchPerS), cp.BatchPollsPerS, cp.HeartbeatsPerS, cp.RoutingFetchesPerS)
	fmt.Fprintf(out, "Lorry: %.1f cores for %s records/s → %d worker(s)\n", r.Lorry.Cores, num(w.UpdatesPerS), r.Lorry.Workers)

	bill := func(title string, lines []Line, total float64) {
		fmt.Fprintf(out, "\n%s\n", title)
		for _, l := range lines {
			fmt.Fprintf(out, "  %-24s %14s  %s\n", l.Item, money(l.Monthly), l.Detail)
		}
		fmt.Fprintf(out, "  %-24s %14s\n", "total", money(total))
	}
	bill("Pillar, monthly:", r.Pillar, r.PillarMonthly)
	d := r.DynamoDB
	fmt.Fprintf(out, "\nDynamoDB: %s-byte items = %v read units (%s) and %v write units each; BatchGetItem: %v call(s) per request (≤100 items, ≤16 MB), %s calls/s\n",
		num(d.ItemBytes), d.ReadUnitsPerItem, map[bool]string{true: "strongly consistent", false: "eventually consistent"}[d.StronglyConsistent], d.WriteUnitsPerItem, d.CallsPerRequest, num(d.CallsPerS))
	bill("DynamoDB on-demand, monthly:", d.OnDemand, d.OnDemandMonthly)
	bill("DynamoDB provisioned, monthly:", d.Provisioned, d.ProvisionedMonthly)
	fmt.Fprintf(out, "\nPillar / DynamoDB: %.3f of on-demand, %.3f of provisioned (Pillar is %.0f%% and %.0f%% cheaper)\n",
		r.RatioOnDemand, r.RatioProvisioned, 100*(1-r.RatioOnDemand), 100*(1-r.RatioProvisioned))
	for _, wn := range r.Warnings {
		fmt.Fprintf(out, "warning: %s\n", wn)
	}
}

// Cell is one point of a sensitivity table.
type Cell struct {
	ItemBytes          float64 `json:"item_bytes"`
	RPS                float64 `json:"rps"`
	Nodes              int     `json:"nodes"`
	Limit              string  `json:"limit"`
	PillarMonthly      float64 `json:"pillar_monthly"`
	OnDemandMonthly    float64 `json:"dynamodb_on_demand_monthly"`
	ProvisionedMonthly float64 `json:"dynamodb_provisioned_monthly"`
	RatioOnDemand      float64 `json:"ratio_on_demand"`
	RatioProvisioned   float64 `json:"ratio_provisioned"`
}

// Default sensitivity axes (the ranges).
var (
	SensitivityItemBytes = []float64{4e3, 8e3, 16e3, 32e3, 50e3, 64e3, 100e3}
	SensitivityRPS       = []float64{50e3, 100e3, 200e3, 300e3, 500e3}
)

// Sensitivity plans the workload at every item size × rps, everything
// else unchanged. Rows are item sizes, columns rps.
func Sensitivity(w Workload, o Options, p *Prices, sizes, rps []float64) ([][]Cell, error) {
	var rows [][]Cell
	for _, s := range sizes {
		var row []Cell
		for _, q := range rps {
			x := w
			x.ItemBytes, x.RPS = s, q
			r, err := Compute(x, o, p)
			if err != nil {
				return nil, err
			}
			row = append(row, Cell{ItemBytes: s, RPS: q, Nodes: r.Serving.Nodes, Limit: r.Serving.Limit,
				PillarMonthly: r.PillarMonthly, OnDemandMonthly: r.DynamoDB.OnDemandMonthly, ProvisionedMonthly: r.DynamoDB.ProvisionedMonthly,
				RatioOnDemand: r.RatioOnDemand, RatioProvisioned: r.RatioProvisioned})
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// SensitivityText writes the table as Markdown: each cell is Pillar's
// cost over DynamoDB provisioned's / on-demand's, and the node count with
// its limiting need's initial (e = egress, s = storage, c = CPU, r =
// replicas).
func SensitivityText(out io.Writer, rows [][]Cell) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(out, "| item size \\ req/s |")
	for _, c := range rows[0] {
		fmt.Fprintf(out, " %s |", num(c.RPS))
	}
	fmt.Fprintf(out, "\n|---|")
	for range rows[0] {
		fmt.Fprintf(out, "---:|")
	}
	fmt.Fprintln(out)
	for _, row := range rows {
		fmt.Fprintf(out, "| %s |", bytesSI(row[0].ItemBytes))
		for _, c := range row {
			fmt.Fprintf(out, " %.2f / %.2f (%d%c) |", c.RatioProvisioned, c.RatioOnDemand, c.Nodes, c.Limit[0])
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "\nCells: Pillar ÷ DynamoDB provisioned / Pillar ÷ DynamoDB on-demand (nodes, limiting need: e egress, s storage, c CPU, r replicas).")
}

// Plot draws monthly cost against rps for Pillar and both DynamoDB modes,
// at the workload's item size, as a PNG (or SVG/PDF by extension).
func Plot(path string, w Workload, o Options, p *Prices, rps []float64) error {
	series := [3]plotter.XYs{}
	for _, q := range rps {
		x := w
		x.RPS = q
		r, err := Compute(x, o, p)
		if err != nil {
			return err
		}
		k := q / 1000
		series[0] = append(series[0], plotter.XY{X: k, Y: r.PillarMonthly / 1e3})
		series[1] = append(series[1], plotter.XY{X: k, Y: r.DynamoDB.ProvisionedMonthly / 1e3})
		series[2] = append(series[2], plotter.XY{X: k, Y: r.DynamoDB.OnDemandMonthly / 1e3})
	}
	pl := plot.New()
	pl.Title.Text = fmt.Sprintf("Monthly cost vs load (%v keys/request, %s items, %s pages)", w.KeysPerRequest, bytesSI(w.ItemBytes), num(w.Pages))
	pl.X.Label.Text = "thousand requests/s"
	pl.Y.Label.Text = "thousand " + p.Currency + " per month"
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Add(plotter.NewGrid())
	for i, s := range []struct {
		name string
		c    color.Color
		dash []vg.Length
	}{
		{"Pillar (cobbled on " + o.Instance + ")", color.RGBA{0x1f, 0x77, 0xb4, 0xff}, nil},
		{"DynamoDB provisioned", color.RGBA{0xff, 0x7f, 0x0e, 0xff}, []vg.Length{vg.Points(6), vg.Points(3)}},
		{"DynamoDB on-demand", color.RGBA{0xd6, 0x27, 0x28, 0xff}, []vg.Length{vg.Points(2), vg.Points(2)}},
	} {
		l, pts, err := plotter.NewLinePoints(series[i])
		if err != nil {
			return fmt.Errorf("plan: plot: %w", err)
		}
		l.Color, pts.Color = s.c, s.c
		l.Dashes = s.dash
		l.Width = vg.Points(1.5)
		pl.Add(l, pts)
		pl.Legend.Add(s.name, l, pts)
	}
	pl.Y.Min = 0
	if err := pl.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plan: plot %s: %w", path, err)
	}
	return nil
}
