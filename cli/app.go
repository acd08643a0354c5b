package cli

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

func commands() []*cli.Command {
	return []*cli.Command{
		// One line per component, in pipeline order.
		demoCommand(),
		ingestCommand(),
		tablesCommand(),
		compactCommand(),
		verifyCommand(), // data file checksums of an embedded store (cmd_verify.go)
		leasesCommand(), // live snapshot leases of an embedded store (cmd_leases.go)
		jobsCommand(),   // MapReduce jobs and runners (cmd_jobs.go)
		backfillCommand(),
		versionsCommand(),
		publishCommand(),
		rollbackCommand(),
		promoteCommand(), retireCommand(), // serving publications (cmd_publication.go)
		signalsCommand(),
		exportCommand(),
		subsetsCommand(),
		sstCommand(), // SST builder (cmd_sst.go)
		cobbledCommand(), getCommand(),
		controlCommand(), statusCommand(), // control plane (cmd_control.go)
		lorryCommand(),                  // export-queue delivery (cmd_lorry.go)
		routerCommand(), benchCommand(), // hedging router and read benchmark (cmd_router.go)
		chaosCommand(), // whole-system fault test (cmd_chaos.go)
		planCommand(),  // sizing and cost against DynamoDB (cmd_plan.go)
		devCommand(),   // local certificates for tests and the demo (cmd_dev.go)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "pillar",
		Usage: "versioned page store, backfills, subsets, SST export and the cobbled serving tier",
		Description: `Pillar keeps web pages (clean text, chunks per chunker version, embeddings per
model) in a versioned store, rebuilds them with MapReduce jobs, exports them as RocksDB
SST batches, and serves them from cobbled nodes behind a hedging router.

Examples:
   pillar ingest --store data/store --from /usr/share/doc/postgresql-doc-15/html
   pillar tables --store data/store

Diagnosis: PILLAR_CPUPROFILE=DIR/cpu-%c-%p.pprof makes every pillar process (a benchmark's
child steps too) write a Go CPU profile there, %c the command and %p the process id.`,
		Flags: []cli.Flag{
			logLevelFlag, logFormatFlag, // logging.go
		},
		Before: setupLogging, // logging.go

		Commands:             withConfigFiles(ownFlags(commands()), ""), // config_file.go: --config on the servers
		EnableBashCompletion: true,
	}
}

// ownFlags gives every command its own copy of each flag. The vocabulary's
// flags are shared package variables (flags_vocab.go), and urfave/cli
// writes into a flag when it parses one (a value found in an environment
// variable becomes the flag's Value): without copies, one App's parse would
// leak into the next one built in the same process (tests build many).
func ownFlags(cmds []*cli.Command) []*cli.Command {
	for _, c := range cmds {
		fl := make([]cli.Flag, len(c.Flags))
		for i, f := range c.Flags {
			fl[i] = f
			if v := reflect.ValueOf(f); v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
				cp := reflect.New(v.Elem().Type())
				cp.Elem().Set(v.Elem())
				fl[i] = cp.Interface().(cli.Flag)
			}
		}
		c.Flags = fl
		c.Subcommands = ownFlags(c.Subcommands)
	}
	return cmds
}

// logger returns the process logger (stderr, level from --log-level).
func logger() *slog.Logger { return slog.Default() }

// Main runs the pillar command line with os.Args and exits the process with
// its status on failure: 1 on an error, 128+signal when interrupted; on success it returns.
// cmd/pillar's main calls it and nothing else.
func Main() {
	ctx, stop := signalContext() // signals.go: SIGINT/SIGTERM cancel ctx, then exit
	app := newApp()
	stopProfile, err := startCPUProfile(profilePath(os.Getenv("PILLAR_CPUPROFILE"), os.Args, app.Flags))
	if err != nil {
		fmt.Fprintln(os.Stderr, "pillar: PILLAR_CPUPROFILE:", err)
		os.Exit(1)
	}
	err = app.RunContext(ctx, normalizeArgs(app, os.Args, os.Stderr)) // args.go: flags after arguments, old spellings
	stopProfile()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pillar:", err)
		if sig := interrupted(); sig != nil {
			os.Exit(exitCode(sig))
		}
		os.Exit(1)
	}
}

// profilePath is where PILLAR_CPUPROFILE asks every pillar process to write
// a Go CPU profile (for diagnosis, e.g. of each step pillar bench scale
// runs as a child): %p becomes the process id and %c the command's words
// (after the global flags, before the command's own), joined by "-"
// ("backfill-embed"). "" profiles nothing.
func profilePath(pattern string, args []string, global []cli.Flag) string {
	if pattern == "" {
		return ""
	}
	takesValue := map[string]bool{}
	for _, f := range global {
		if _, isBool := f.(*cli.BoolFlag); !isBool {
			for _, n := range f.Names() {
				takesValue["-"+n], takesValue["--"+n] = true, true
			}
		}
	}
	var words []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			words = append(words, a)
			continue
		}
		if len(words) > 0 {
			break
		}
		if takesValue[a] { // "--flag value"; "--flag=value" is one argument
			i++
		}
	}
	r := strings.NewReplacer("%p", strconv.Itoa(os.Getpid()), "%c", strings.Join(words, "-"))
	return r.Replace(pattern)
}
