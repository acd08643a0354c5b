// Package exechost runs a job binary the way a YTsaurus exec node runs the
// user job of an operation, for tests on a machine without a cluster.
//
// What it reproduces (and what the Go SDK's mapreduce.JobMain relies on):
//
//   - a sandbox directory, the job's working directory, holding the
//     operation's files (the job binary as "go-binary", "job-state", ...);
//   - the command of the user script, run with /bin/sh -c;
//   - the environment: the user script's environment, YT_JOB_ID,
//     YT_OPERATION_ID, YT_JOB_COOKIE, YT_JOB_INDEX, YT_SECURE_VAULT (the
//     secure vault as a YSON map) and YT_SECURE_VAULT_<name> per entry;
//   - input rows as a YSON list fragment on stdin, with the control
//     entities the spec enables (<table_index=N>#, <row_index=N>#,
//     <key_switch=%true>#) — EncodeInput builds it;
//   - output table i on file descriptor 3·i+1 (stdout is output 0); every
//     descriptor up to the last output's exists, as on an exec node;
//   - stderr captured; the exit code reported, with the SDK's meaning of it
//     (Stage).
//
// Run is safe for concurrent use with distinct directories.
package exechost

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"go.ytsaurus.tech/yt/go/yson"

	"github.com/pillarkit/pillar/jobs/internal/rowkey"
)

// File is one file of the sandbox.
type File struct {
	Data       []byte
	Executable bool
}

// Job is one job of an operation.
type Job struct {
	// Command is the user script's command.
	Command string
	// Files are laid in the sandbox by name.
	Files map[string]File
	// Env is the user script's environment. Its entries override the
	// exec node's variables above (tests corrupt the environment so).
	Env map[string]string
	// Vault is the operation's secure vault.
	Vault       map[string]string
	JobID       string
	OperationID string
	Cookie      int
	// Outputs is the number of output tables.
	Outputs int
	// Stdin is the job's input (see EncodeInput).
	Stdin []byte
}

// Result is what the job left.
type Result struct {
	// Outputs holds what the job wrote to each output descriptor.
	Outputs  [][]byte
	Stderr   string
	ExitCode int
}

// Stage names the step of the SDK's JobMain that an exit code reports.
func Stage(code int) string {
	switch code {
	case 0:
		return "ok"
	case 1:
		return "job returned an error"
	case 3:
		return "pipes, input reader or output writers could not be set up"
	case 4:
		return "input reader or output writer failed"
	case 5:
		return "environment (secure vault, job cookie) is corrupt"
	case 6:
		return "job-state could not be read or decrypted"
	case 7:
		return "job-state could not be decoded (is the job type registered in the binary?)"
	}
	return "exit code " + strconv.Itoa(code)
}

// Run runs the job in dir, which it creates (it must not exist) and leaves
// for inspection.
func Run(ctx context.Context, dir string, j *Job) (*Result, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("exechost: sandbox: %w", err)
	}
	names := make([]string, 0, len(j.Files))
	for n := range j.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := j.Files[n]
		mode := os.FileMode(0o644)
		if f.Executable {
			mode = 0o755
		}
		if err := writeSandboxFile(filepath.Join(dir, n), f.Data, mode, f.Executable); err != nil {
			return nil, fmt.Errorf("exechost: sandbox file %s: %w", n, err)
		}
	}
	vault, err := yson.MarshalFormat(j.Vault, yson.FormatText)
	if err != nil {
		return nil, fmt.Errorf("exechost: vault: %w", err)
	}
	envm := map[string]string{
		"PATH":            "/usr/bin:/bin",
		"HOME":            dir,
		"TMPDIR":          dir,
		"YT_JOB_ID":       j.JobID,
		"YT_OPERATION_ID": j.OperationID,
		"YT_JOB_COOKIE":   strconv.Itoa(j.Cookie),
		"YT_JOB_INDEX":    strconv.Itoa(j.Cookie),
		"YT_SECURE_VAULT": string(vault),
	}
	for k, v := range j.Vault {
		envm["YT_SECURE_VAULT_"+k] = v
	}
	for k, v := range j.Env {
		envm[k] = v // the user script's environment; tests also override the above
	}
	env := make([]string, 0, len(envm))
	for k, v := range envm {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)

	// Output i is descriptor 3i+1: stdout for i = 0, ExtraFiles[3i-2] for
	// the others (ExtraFiles[k] is descriptor 3+k). The descriptors between
	// them are /dev/null, so every descriptor up to the last exists.
	outs := make([]*os.File, max(j.Outputs, 1))
	for i := range outs {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf(".output-%d", i)))
		if err != nil {
			return nil, fmt.Errorf("exechost: output %d: %w", i, err)
		}
		defer f.Close()
		outs[i] = f
	}
	var extra []*os.File
	if j.Outputs > 1 {
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		defer null.Close()
		extra = make([]*os.File, 3*(j.Outputs-1)-1)
		for k := range extra {
			extra[k] = null
		}
		for i := 1; i < j.Outputs; i++ {
			extra[3*i-2] = outs[i]
		}
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", j.Command)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(j.Stdin)
	cmd.Stdout = outs[0]
	cmd.Stderr = &stderr
	cmd.ExtraFiles = extra
	res := &Result{}
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			return nil, fmt.Errorf("exechost: run %q: %w", j.Command, err)
		}
		res.ExitCode = ee.ExitCode()
	}
	res.Stderr = stderr.String()
	for i := 0; i < j.Outputs; i++ {
		b, err := os.ReadFile(outs[i].Name())
		if err != nil {
			return nil, fmt.Errorf("exechost: read output %d: %w", i, err)
		}
		res.Outputs = append(res.Outputs, b)
	}
	return res, nil
}

// Row is one input row: a YSON map and where it came from.
type Row struct {
	Table int
	Index int64
	YSON  []byte
}

// Control says which control entities the input carries (the spec's
// job_io control_attributes).
type Control struct {
	TableIndex, RowIndex, RangeIndex, KeySwitch bool
}

// EncodeInput writes groups of rows as the binary YSON list fragment an exec
// node feeds a job: a <table_index> entity when the table changes, a
// <row_index> entity when the index does not follow from the previous row,
// and a <key_switch=%true> entity before the first row of every group but
// the first. A map job's input is one group.
func EncodeInput(groups [][]Row, c Control) ([]byte, error) {
	var b bytes.Buffer
	w := yson.NewWriterConfig(&b, yson.WriterConfig{Format: yson.FormatBinary, Kind: yson.StreamListFragment})
	control := func(name string, v any) {
		w.BeginAttrs()
		w.MapKeyString(name)
		w.Any(v)
		w.EndAttrs()
		w.Entity()
	}
	table, next := -1, int64(-1)
	for gi, g := range groups {
		for ri, r := range g {
			if gi > 0 && ri == 0 && c.KeySwitch {
				control("key_switch", true)
			}
			if r.Table != table && c.TableIndex {
				control("table_index", r.Table)
				next = -1
			}
			table = r.Table
			if r.Index != next && c.RowIndex {
				control("row_index", r.Index)
			}
			next = r.Index + 1
			w.RawNode(r.YSON)
		}
	}
	if err := w.Finish(); err != nil {
		return nil, fmt.Errorf("exechost: encode input: %w", err)
	}
	return b.Bytes(), nil
}

// DecodeRows splits a job's output (a YSON list fragment) into rows.
func DecodeRows(out []byte) ([][]byte, error) {
	r := yson.NewReaderKind(bytes.NewReader(out), yson.StreamListFragment)
	var rows [][]byte
	for {
		ok, err := r.NextListItem()
		if err != nil {
			return nil, fmt.Errorf("exechost: decode output: %w", err)
		}
		if !ok {
			return rows, nil
		}
		var raw yson.RawValue
		if err := (&yson.Decoder{R: r}).Decode(&raw); err != nil {
			return nil, fmt.Errorf("exechost: decode output row %d: %w", len(rows), err)
		}
		rows = append(rows, slices.Clone([]byte(raw)))
	}
}

// SortAndGroup sorts rows by sortBy (stably: equal keys keep their order)
// and cuts them into groups of equal reduceBy, as the sort and partition
// stages of an operation do before its reduce jobs.
func SortAndGroup(rows []Row, sortBy, reduceBy []string) ([][]Row, error) {
	if len(reduceBy) > len(sortBy) || !slices.Equal(sortBy[:len(reduceBy)], reduceBy) {
		return nil, fmt.Errorf("exechost: reduce_by %v is not a prefix of sort_by %v", reduceBy, sortBy)
	}
	type keyed struct {
		key    string
		prefix int
		row    Row
	}
	group, rest := rowkey.New(reduceBy), rowkey.New(sortBy[len(reduceBy):])
	ks := make([]keyed, len(rows))
	for i, r := range rows {
		k, err := group.AppendYSON(nil, r.YSON)
		if err != nil {
			return nil, err
		}
		p := len(k)
		if k, err = rest.AppendYSON(k, r.YSON); err != nil {
			return nil, err
		}
		ks[i] = keyed{string(k), p, r}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	var groups [][]Row
	for i, k := range ks {
		if i == 0 || k.key[:k.prefix] != ks[i-1].key[:ks[i-1].prefix] {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], k.row)
	}
	return groups, nil
}

// writeSandboxFile writes a sandbox file. An executable is written while
// holding syscall.ForkLock for reading: a process forked by a concurrent job
// in this process would otherwise inherit the write descriptor until it
// execs, and this job's exec of the file would fail with ETXTBSY ("Text file
// busy"; golang.org/issue/22315). os/exec takes the lock for writing around
// fork, so no fork happens while the descriptor is open.
func writeSandboxFile(path string, data []byte, mode os.FileMode, executable bool) error {
	if executable {
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
	}
	return os.WriteFile(path, data, mode)
}
