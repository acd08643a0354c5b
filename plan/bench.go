package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Bench is what the plan takes from a `pillar bench read` run
// (results.json).
type Bench struct {
	File string `json:"file"`
	// KeysPerCoreS: the healthy scenario's requests/s × keys per request
	// over the CPUs of the machine it ran on. The benchmark runs nodes,
	// router and clients on one machine, so this understates what a node
	// alone does per core, and the plan errs towards more nodes.
	KeysPerCoreS float64 `json:"keys_per_core_s"`
	// HedgeRate is the healthy scenario's extra sub-requests per primary.
	HedgeRate float64 `json:"hedge_rate"`
	RPS       float64 `json:"rps"`
	BatchKeys int     `json:"batch_keys"`
	CPUs      int     `json:"cpus"`
}

// benchFile mirrors the part of readbench's results.json the plan reads
// (plan does not link the benchmark harness).
type benchFile struct {
	Options map[string]any
	Results []struct {
		Scenario   string
		Requests   int
		Errors     int
		RPS        float64
		Primaries  int64
		ExtraRatio float64
	}
}

// ReadBench reads a `pillar bench read` results.json. cpus is the number
// of CPUs of the machine the benchmark ran on; 0 takes it from the file's
// Options ("gomaxprocs" or "num_cpu"), and the file must then record it.
func ReadBench(path string, cpus int) (*Bench, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plan: --bench: %w", err)
	}
	var f benchFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("plan: --bench %s: not a `pillar bench read` results.json: %w", path, err)
	}
	out := &Bench{File: path, CPUs: cpus}
	if k, ok := f.Options["batch_keys"].(float64); ok {
		out.BatchKeys = int(k)
	}
	if out.BatchKeys <= 0 {
		return nil, fmt.Errorf("plan: --bench %s: Options.batch_keys missing", path)
	}
	if out.CPUs == 0 {
		for _, k := range []string{"gomaxprocs", "num_cpu"} {
			if v, ok := f.Options[k].(float64); ok && v > 0 {
				out.CPUs = int(v)
				break
			}
		}
	}
	if out.CPUs <= 0 {
		return nil, fmt.Errorf("plan: --bench-cpus: %s does not record how many CPUs the benchmark ran on; give --bench-cpus N (results.md's header shows GOMAXPROCS)", path)
	}
	for _, r := range f.Results {
		if r.Scenario != "healthy" {
			continue
		}
		if r.Requests == 0 || !(r.RPS > 0) {
			return nil, fmt.Errorf("plan: --bench %s: the healthy scenario served no requests", path)
		}
		if r.Errors > 0 {
			return nil, fmt.Errorf("plan: --bench %s: the healthy scenario had %d failed requests; rerun it on a quiet machine", path, r.Errors)
		}
		out.RPS = r.RPS
		out.HedgeRate = r.ExtraRatio
		out.KeysPerCoreS = r.RPS * float64(out.BatchKeys) / float64(out.CPUs)
		return out, nil
	}
	return nil, errors.New("plan: --bench " + path + ": no healthy scenario (run `pillar bench read --scenarios healthy`)")
}

// Apply sets the options' CPU rate and hedge rate from the benchmark,
// unless the caller set them already.
func (b *Bench) Apply(o *Options) {
	if o.KeysPerCoreS == 0 {
		o.KeysPerCoreS = b.KeysPerCoreS
	}
	if o.HedgeRate == nil {
		o.HedgeRate = ptr(b.HedgeRate)
	}
}
