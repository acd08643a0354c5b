package chaos

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Options configure a chaos run.
type Options struct {
	// Pillar is the pillar binary the child processes run. Required.
	Pillar string
	// Seed drives the fault schedule, the writer and the readers; a run is
	// replayed by its seed. The default value is derived from the clock (and
	// printed).
	Seed int64
	// Duration is the fault phase: writes, reads and faults. The default
	// value is 5 minutes.
	Duration time.Duration
	// Faults are the fault kinds injected. The default value is AllFaults.
	Faults []string
	// Dir holds the store, the node data, the logs and the committed-op log.
	// The default value is a new temporary directory, removed after a run
	// whose checks all pass unless Keep.
	Dir string
	// Keep keeps Dir after a passing run. The default value is false.
	Keep bool
	// Postgres is the server the control plane's database is created on (a
	// fresh database per run, dropped after). The default value is
	// "postgres://postgres@127.0.0.1:5432/postgres".
	Postgres string
	// Versitygw is the S3 server binary. The default value is what
	// internal/s3test finds ($PILLAR_VERSITYGW, bin/versitygw, $PATH).
	Versitygw string
	// Partitions of the store and the serving tier. The default value is 4.
	Partitions int
	// Nodes is the number of cobbled nodes. The default value is 3.
	Nodes int
	// Keys is the number of distinct pages the writer changes. The default
	// value is 120.
	Keys int
	// CommitsPerSecond is the writer's commit rate; each commit holds 1–4
	// changes. The default value is 5.
	CommitsPerSecond float64
	// ConvergeTimeout bounds the wait for convergence after the faults
	// stop. The default value is 5 minutes.
	ConvergeTimeout time.Duration
	// DiskBytes is the size of each node's tmpfs data file system (the
	// disk-full fault fills it). The default value is 256 MiB.
	DiskBytes int64
	// Sabotage breaks the run on purpose, to show the checks catch it (test
	// only): "lose-write" makes the writer log a put of key 0 that it never
	// enqueues (key 0 is otherwise left alone). The default value is "".
	Sabotage string
	// Stdout receives the progress lines and the summary. The default value
	// discards.
	Stdout io.Writer
	// Logger receives debug logs. The default value discards.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000_007
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Minute
	}
	if o.Faults == nil {
		o.Faults = append([]string(nil), AllFaults...)
	}
	if o.Postgres == "" {
		o.Postgres = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Keys == 0 {
		o.Keys = 120
	}
	if o.CommitsPerSecond == 0 {
		o.CommitsPerSecond = 5
	}
	if o.ConvergeTimeout == 0 {
		o.ConvergeTimeout = 5 * time.Minute
	}
	if o.DiskBytes == 0 {
		o.DiskBytes = 256 << 20
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options after defaults.
func (o *Options) Validate() error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("chaos: "+format, a...)) }
	if o.Pillar == "" {
		fail("Options.Pillar (the pillar binary) is required")
	}
	if o.Duration < 10*time.Second {
		fail("duration %s: want at least 10s", o.Duration)
	}
	if o.Partitions < 1 || o.Partitions > 1024 {
		fail("partitions %d: want 1..1024", o.Partitions)
	}
	if o.Nodes < 1 || o.Nodes > 9 {
		fail("nodes %d: want 1..9", o.Nodes)
	}
	if o.Keys < 1 || o.Keys > 100000 {
		fail("keys %d: want 1..100000", o.Keys)
	}
	if o.CommitsPerSecond <= 0 || o.CommitsPerSecond > 1000 {
		fail("commits per second %g: want (0, 1000]", o.CommitsPerSecond)
	}
	if o.DiskBytes < 16<<20 {
		fail("disk bytes %d: want at least 16 MiB", o.DiskBytes)
	}
	if o.Sabotage != "" && o.Sabotage != SabotageLoseWrite {
		fail("sabotage %q: want %q or nothing", o.Sabotage, SabotageLoseWrite)
	}
	if o.Sabotage != "" && o.Keys < 8 {
		fail("sabotage needs at least 8 keys, have %d", o.Keys)
	}
	if _, err := ParseFaults(joinKinds(o.Faults)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func joinKinds(k []string) string {
	s := ""
	for i, x := range k {
		if i > 0 {
			s += ","
		}
		s += x
	}
	if s == "" {
		return "all"
	}
	return s
}

// DefaultDuration is the default fault phase.
const DefaultDuration = 5 * time.Minute

// Minute is a time.Minute, for callers sizing timeouts.
const Minute = time.Minute

// SabotageLoseWrite is the Options.Sabotage that loses one logged write.
const SabotageLoseWrite = "lose-write"

func faultList(k []string) string {
	if len(k) == 0 {
		return "none"
	}
	return joinKinds(k)
}
