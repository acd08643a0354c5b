package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/bytesize"
	"github.com/pillarkit/pillar/plan"
)

// planCommand is `pillar plan`: nodes, storage and monthly cost of a
// deployment, against DynamoDB. Flags map to plan.Workload and
// plan.Options; the model is package plan's.
func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "size a deployment (serving nodes, object store, control plane, cross-AZ) and price it against DynamoDB",
		Description: `Computes how many cobbled serving nodes a workload needs (the largest of its egress,
storage and CPU needs), the object-store storage and requests of the batch flow (snapshot
rebuilds, Lorry delta batches), the control-plane load, the cross-AZ bytes from the
same-zone fraction and the hedge rate, and a monthly bill by item; then the same workload
on DynamoDB on-demand and provisioned (4 KB read units, eventually or strongly consistent;
1 KB write units; BatchGetItem's 100 items / 16 MB per call; storage per GB-month), the
ratio, and a sensitivity table over item size 4-100 KB × 50k-500k requests/s.

Prices come from a file with a date and a public source per figure (the built-in one is
plan/testdata/prices-aws-us-east-1.yaml; --prices FILE replaces it). No network access.
The CPU rate and hedge rate default to figures measured with pillar bench read on this
project's machines; --bench takes them from your own run's results.json. The model, its
invariants and its assumptions are in plan/doc.go.

Examples:
   pillar plan --rps 200000 --keys-per-request 12.5 --item-size 50KB --pages 2e9 \
               --updates-per-s 5000 --replicas 3 --zones 3
   pillar plan --rps 200000 --keys-per-request 12.5 --item-size 50KB --pages 2e9 \
               --updates-per-s 5000 --lorry-batch-age 30s --plot cost.png
   pillar bench read --out bench-out/read --scenarios healthy --redis -
   pillar plan --rps 50000 --keys-per-request 12 --item-size 20KB --pages 5e8 \
               --bench bench-out/read/results.json --bench-cpus 16 --json
   pillar plan ... --prices my-prices.yaml --instance i4i.8xlarge --strong`,
		Flags: []cli.Flag{
			&cli.Float64Flag{Name: "rps", Required: true, Usage: "BatchGet requests per second"},
			&cli.Float64Flag{Name: "keys-per-request", Required: true, Usage: "mean keys per request"},
			&cli.StringFlag{Name: "item-size", Required: true, Usage: "mean value size (50KB = 50,000 bytes, 48KiB = 49,152)"},
			&cli.Float64Flag{Name: "pages", Required: true, Usage: "keys held by the serving tier (2e9 is fine)"},
			&cli.Float64Flag{Name: "updates-per-s", Usage: "incremental puts/deletes per second (Lorry; DynamoDB writes)"},
			&cli.IntFlag{Name: "replicas", Value: 3, Usage: "replicas per partition"},
			&cli.IntFlag{Name: "zones", Value: 3, Usage: "availability zones the nodes are spread over"},
			&cli.StringFlag{Name: "prices", Usage: "price file (YAML, the layout of plan/testdata/prices-aws-us-east-1.yaml; default: that file, built in)"},
			&cli.StringFlag{Name: "bench", Usage: "a pillar bench read results.json: takes the per-CPU key rate and hedge rate from its healthy scenario"},
			&cli.IntFlag{Name: "bench-cpus", Usage: "CPUs of the machine --bench ran on (results.json does not record them)"},
			&cli.BoolFlag{Name: "json", Usage: "print the plan, the sensitivity table and the inputs as JSON"},
			&cli.StringFlag{Name: "plot", Usage: "write a plot of monthly cost against requests/s (50k-500k) for Pillar and DynamoDB to this PNG"},
			&cli.StringFlag{Name: "instance", Value: "i4i.4xlarge", Usage: "serving node instance type (from the price file)"},
			&cli.StringFlag{Name: "helper-instance", Value: "m5.2xlarge", Usage: "control-plane and Lorry worker instance type"},
			&cli.Float64Flag{Name: "nic-share", Value: 0.5, Usage: "share of a node's baseline NIC bandwidth for answers"},
			&cli.Float64Flag{Name: "disk-fill", Value: 0.7, Usage: "share of a node's local disk data may fill"},
			&cli.Float64Flag{Name: "cpu-target", Value: 0.6, Usage: "CPU utilisation nodes are sized for"},
			&cli.Float64Flag{Name: "keys-per-core", Usage: fmt.Sprintf("key reads/s per vCPU (default: --bench's, else %d measured here; see plan.DefaultKeysPerCoreS)", plan.DefaultKeysPerCoreS)},
			&cli.IntFlag{Name: "retained-versions", Value: 2, Usage: "publications each replica holds side by side at the peak"},
			&cli.Float64Flag{Name: "compression", Value: 1, Usage: "stored bytes / value bytes (from pillar sst inspect on your batches)"},
			&cli.Float64Flag{Name: "hedge-rate", Usage: fmt.Sprintf("hedges + failovers per primary sub-request (default: --bench's, else %.3f measured here)", plan.DefaultHedgeRate)},
			&cli.Float64Flag{Name: "same-zone", Usage: "fraction of primary sub-requests answered in the caller's zone (default: min(1, replicas/zones))"},
			&cli.IntFlag{Name: "partitions", Value: 4096, Usage: "partition count P"},
			&cli.Float64Flag{Name: "rebuilds-per-month", Value: 1, Usage: "full snapshot rebuilds (new publications) per month"},
			&cli.DurationFlag{Name: "lorry-batch-age", Usage: "Lorry's MaxBatchAge (default: lorry's, 1s)"},
			&cli.Float64Flag{Name: "lorry-batches-per-s", Usage: "measured Lorry delta batches/s (default: derived from --lorry-batch-age, --partitions and --updates-per-s)"},
			&cli.Float64Flag{Name: "lorry-records-per-core", Usage: fmt.Sprintf("Lorry records/s per vCPU (default %d, measured)", plan.DefaultLorryRecordsPerCoreS)},
			&cli.IntFlag{Name: "control-plane-hosts", Value: 3, Usage: "control service + PostgreSQL primary and standby"},
			&cli.Float64Flag{Name: "register-capacity", Usage: fmt.Sprintf("control plane RegisterBatch/s capacity (default %d, measured on PostgreSQL)", plan.DefaultRegisterBatchPerS)},
			&cli.IntFlag{Name: "routers", Value: 100, Usage: "router instances (callers), for the routing-fetch load"},
			&cli.BoolFlag{Name: "strong", Usage: "price DynamoDB reads strongly consistent (default: eventually consistent)"},
			&cli.Float64Flag{Name: "dynamo-target-util", Value: 0.7, Usage: "provisioned DynamoDB capacity's target utilisation"},
		},
		Action: planRun,
	}
}

func planRun(c *cli.Context) error {
	item, err := bytesize.ParseFlag("item-size", c.String("item-size"))
	if err != nil {
		return err
	}
	w := plan.Workload{
		RPS: c.Float64("rps"), KeysPerRequest: c.Float64("keys-per-request"), ItemBytes: float64(item),
		Pages: c.Float64("pages"), UpdatesPerS: c.Float64("updates-per-s"), Replicas: c.Int("replicas"), Zones: c.Int("zones"),
	}
	o := plan.Options{
		Instance: c.String("instance"), HelperInstance: c.String("helper-instance"),
		NICShare: c.Float64("nic-share"), DiskFill: c.Float64("disk-fill"), CPUTarget: c.Float64("cpu-target"),
		KeysPerCoreS: c.Float64("keys-per-core"), RetainedVersions: c.Int("retained-versions"), Compression: c.Float64("compression"),
		Partitions: c.Int("partitions"), LorryBatchAge: c.Duration("lorry-batch-age"), LorryBatchesPerS: c.Float64("lorry-batches-per-s"), LorryRecordsPerCoreS: c.Float64("lorry-records-per-core"),
		ControlPlaneHosts: c.Int("control-plane-hosts"), RegisterBatchPerS: c.Float64("register-capacity"), Routers: c.Int("routers"),
		StronglyConsistent: c.Bool("strong"), DynamoTargetUtil: c.Float64("dynamo-target-util"),
	}
	// Zero is a meaningful value of these, so they are pointers: the
	// hedge rate and same-zone fraction only when given (else the measured
	// or derived default), rebuilds always (the flag has its default).
	for _, f := range []struct {
		name string
		dst  **float64
	}{{"hedge-rate", &o.HedgeRate}, {"same-zone", &o.SameZoneFraction}} {
		if c.IsSet(f.name) {
			v := c.Float64(f.name)
			*f.dst = &v
		}
	}
	rebuilds := c.Float64("rebuilds-per-month")
	o.RebuildsPerMonth = &rebuilds
	// A flag given as 0 must not silently mean "default".
	for _, name := range []string{"nic-share", "disk-fill", "cpu-target", "keys-per-core", "compression", "lorry-records-per-core", "register-capacity", "dynamo-target-util"} {
		if c.IsSet(name) && !(c.Float64(name) > 0) {
			return fmt.Errorf("--%s %v: want a positive number", name, c.Float64(name))
		}
	}
	for _, name := range []string{"retained-versions", "partitions", "control-plane-hosts", "routers"} {
		if c.Int(name) < 1 {
			return fmt.Errorf("--%s %d: want at least 1", name, c.Int(name))
		}
	}
	if c.IsSet("lorry-batch-age") && c.Duration("lorry-batch-age") <= 0 {
		return fmt.Errorf("--lorry-batch-age %v: want a positive duration", c.Duration("lorry-batch-age"))
	}
	prices, err := plan.LoadPrices(c.String("prices"))
	if err != nil {
		return err
	}
	var bench *plan.Bench
	if path := c.String("bench"); path != "" {
		if bench, err = plan.ReadBench(path, c.Int("bench-cpus")); err != nil {
			return err
		}
		bench.Apply(&o)
	} else if c.IsSet("bench-cpus") {
		return fmt.Errorf("--bench-cpus: only with --bench")
	}
	res, err := plan.Compute(w, o, prices)
	if err != nil {
		return err
	}
	rows, err := plan.Sensitivity(w, o, prices, plan.SensitivityItemBytes, plan.SensitivityRPS)
	if err != nil {
		return err
	}
	if p := c.String("plot"); p != "" {
		if err := plan.Plot(p, w, o, prices, []float64{50e3, 100e3, 150e3, 200e3, 250e3, 300e3, 350e3, 400e3, 450e3, 500e3}); err != nil {
			return err
		}
	}
	out := c.App.Writer
	if c.Bool("json") {
		return printJSON(out, struct {
			Plan        *plan.Result  `json:"plan"`
			Sensitivity [][]plan.Cell `json:"sensitivity"`
			Bench       *plan.Bench   `json:"bench,omitempty"`
			Prices      *plan.Prices  `json:"prices"`
		}{res, rows, bench, prices})
	}
	if bench != nil {
		fmt.Fprintf(out, "Bench:    %s: %.0f req/s × %d keys on %d CPUs = %.0f keys/s per CPU, hedge rate %.1f%%\n",
			bench.File, bench.RPS, bench.BatchKeys, bench.CPUs, bench.KeysPerCoreS, 100*bench.HedgeRate)
	}
	res.Text(out)
	fmt.Fprintf(out, "\nSensitivity (item size × requests/s, everything else as above):\n\n")
	plan.SensitivityText(out, rows)
	if p := c.String("plot"); p != "" {
		fmt.Fprintf(out, "\nplot written to %s\n", p)
	}
	return nil
}
