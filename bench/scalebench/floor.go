package scalebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// floor runs the floor of the round's last step (`pillar bench scale floor
// --step …`, args naming its inputs) as a child process measured as the
// step was (wall time, rusage CPU and peak RSS), into scratch (removed
// after), and records it on the step. stepOut is the step's standard
// output. A floor that wrote no rows, or another count than the step
// (stepRows), fails: it would not be doing the step's work.
func (r *round) floor(ctx context.Context, cv string, stepOut []byte, scratch string, args ...string) error {
	st := &r.rep.Steps[len(r.rep.Steps)-1]
	want, err := r.stepRows(ctx, st.Name, cv, stepOut)
	if err != nil {
		return err
	}
	os.RemoveAll(scratch)
	defer os.RemoveAll(scratch)
	args = append([]string{"--log-level", "warn", "bench", "scale", "floor", "--scratch", scratch, "--memory-limit", r.o.MemoryLimit}, args...)
	if r.o.Workers > 0 {
		args = append(args, "--workers", fmt.Sprint(r.o.Workers))
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.o.Pillar, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return fmt.Errorf("pillar %s: %w\n%s", strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	var res struct {
		RowsIn  int64 `json:"rows_in"`
		RowsOut int64 `json:"rows_out"`
		Workers int   `json:"workers"`
	}
	if err := json.Unmarshal(lastJSON(stdout.Bytes()), &res); err != nil {
		return fmt.Errorf("floor output: %w", err)
	}
	f := &Floor{Seconds: wall.Seconds(), CPUSeconds: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(),
		RowsIn: res.RowsIn, Rows: res.RowsOut, StepRows: want, Workers: res.Workers}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru != nil {
		f.MaxRSS = ru.Maxrss << 10
	}
	st.Floor = f
	if err := checkFloorRows(st.Name, f); err != nil {
		return err
	}
	fmt.Fprintf(r.o.Log, "  %-11s %-17s %7d pages %8.1fs %8.0f pages/s  cpu %7.1fs %6.0f pages/cpu-s  cores %.2f (step %.2f)  step ÷ floor per CPU-second %.2f×  %d rows\n",
		"floor", st.Name, st.Pages, f.Seconds, st.FloorPagesPerSec(), f.CPUSeconds, st.FloorPagesPerCPUSec(),
		st.FloorCPUUtil(), st.CPUUtil(), st.PagesPerCPUSec()/max(st.FloorPagesPerCPUSec(), 1e-9), f.Rows)
	return nil
}

// checkFloorRows fails a floor that wrote nothing or another row count
// than its step.
func checkFloorRows(step string, f *Floor) error {
	switch {
	case f.Rows == 0 || f.RowsIn == 0:
		return fmt.Errorf("the floor of %s read %d rows and wrote %d: it did not do the step's work", step, f.RowsIn, f.Rows)
	case f.Rows != f.StepRows:
		return fmt.Errorf("the floor of %s wrote %d rows, the step %d: it does other work than the step", step, f.Rows, f.StepRows)
	}
	return nil
}

// stepRows is the number of rows the step wrote: the rows of its output
// tables (docs, chunks/<cv>, embeddings/<cv>/…, subsets/…), the desired
// records of publish (its --json), the rows of the export's files.
func (r *round) stepRows(ctx context.Context, step, cv string, stepOut []byte) (int64, error) {
	switch step {
	case "publish":
		var res struct {
			Export struct {
				Desired int64 `json:"desired"`
			} `json:"export"`
		}
		if err := json.Unmarshal(lastJSON(stepOut), &res); err != nil {
			return 0, fmt.Errorf("publish --json: %w", err)
		}
		return res.Export.Desired, nil
	case "export":
		b, err := os.ReadFile(filepath.Join(r.export, "export.json"))
		if err != nil {
			return 0, err
		}
		var m struct {
			Files []struct {
				Rows int64 `json:"rows"`
			} `json:"files"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return 0, fmt.Errorf("export.json: %w", err)
		}
		var n int64
		for _, f := range m.Files {
			n += f.Rows
		}
		return n, nil
	}
	out, err := exec.CommandContext(ctx, r.o.Pillar, "--log-level", "warn", "tables", "--store", r.store, "--json").Output()
	if err != nil {
		return 0, fmt.Errorf("pillar tables: %w", err)
	}
	var sum struct {
		Tables []struct {
			Name string `json:"name"`
			Rows int64  `json:"rows"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		return 0, fmt.Errorf("pillar tables --json: %w", err)
	}
	var n int64
	for _, t := range sum.Tables {
		switch {
		case step == "ingest" && t.Name == "docs",
			step == "rechunk" && t.Name == "chunks/"+cv,
			step == "embed" && strings.HasPrefix(t.Name, "embeddings/"+cv+"/"),
			step == "subsets recompute" && strings.HasPrefix(t.Name, "subsets/"):
			n += t.Rows
		}
	}
	return n, nil
}
