package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// The logging flags of every command (README, "Logging"). At the default
// level a one-shot command prints its result on stdout and, on stderr, only
// warnings that need action; a server (control serve, cobbled serve, router
// serve, lorry run without --once) also logs what it does (info). Expected
// conditions — a 404 on a probe, a batch not registered without --control —
// are debug everywhere.
var (
	logLevelFlag = &cli.StringFlag{Name: "log-level", EnvVars: []string{"PILLAR_LOG_LEVEL"},
		Usage: "debug, info, warn or error (default: info for servers, warn for one-shot commands)"}
	logFormatFlag = &cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"PILLAR_LOG_FORMAT"},
		Usage: "text, or json (one object per line, for log collectors)"}
)

// servers are the long-running commands, by command path.
var servers = []string{"control serve", "cobbled serve", "router serve", "lorry run"}

// setupLogging sets the process logger from --log-level and --log-format;
// args are the arguments after the global flags (the command path first).
func setupLogging(c *cli.Context) error {
	h, err := logHandler(os.Stderr, c.String("log-level"), c.String("log-format"), c.Args().Slice())
	if err != nil {
		return err
	}
	slog.SetDefault(slog.New(h))
	return nil
}

func logHandler(w io.Writer, level, format string, args []string) (slog.Handler, error) {
	if level == "" {
		level = "warn"
		if cmd := commandPath(args); slices.Contains(servers, cmd) && !(cmd == "lorry run" && slices.Contains(args, "--once")) {
			level = "info"
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text", "":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// commandPath is the first two words of args that are not flags ("cobbled
// serve"), or one when there is only one.
func commandPath(args []string) string {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") || len(words) == 2 {
			break
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}
