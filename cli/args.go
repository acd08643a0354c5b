package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// deprecatedFlags are the old spellings of the flag vocabulary
// (docs/operations.md, "Flag vocabulary"). They keep working for one
// release: normalizeArgs rewrites them to the new name and warns on
// stderr. An entry with an empty To is a hidden flag of its own; it only
// warns.
var deprecatedFlags = []struct{ Cmd, Old, To, Hint string }{
	{"control serve", "objects", "objstore", ""},
	{"control register", "objects", "objstore", ""},
	{"lorry run", "metrics", "http", ""},
	{"sst build", "register", "control", ""},
}

// normalizeArgs prepares the command line for urfave/cli, which stops
// parsing flags at the first argument: in the chosen (leaf) command, every
// flag moves before the arguments, so `pillar get --node ADDR KEY --json`
// means what it says. A flag that takes a value keeps its value with it
// (`--node ADDR` or `--node=ADDR`); everything after `--` stays an argument,
// in order. Deprecated spellings are rewritten, with a warning on warn.
// A command with SkipFlagParsing is left alone.
func normalizeArgs(app *cli.App, args []string, warn io.Writer) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	flags, subs := app.Flags, app.Commands
	var path []string
	var leaf *cli.Command
	// Walk down the command names; flags of the parents stay where they are.
	for len(rest) > 0 && (leaf == nil || len(subs) > 0) {
		a := rest[0]
		if a == "--" {
			break
		}
		if isFlagToken(a) {
			n := 1
			if takesValue(flags, a) && !strings.Contains(a, "=") && len(rest) > 1 {
				n = 2
			}
			out, rest = append(out, rest[:n]...), rest[n:]
			continue
		}
		sub := findCommand(subs, a)
		if sub == nil {
			break
		}
		out, rest = append(out, a), rest[1:]
		path = append(path, sub.Name)
		leaf, flags, subs = sub, sub.Flags, sub.Subcommands
	}
	if leaf != nil && leaf.SkipFlagParsing {
		return append(out, rest...)
	}
	cmd := strings.Join(path, " ")
	var global, fl, pos []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i:]...)
			break
		}
		if !isFlagToken(a) {
			pos = append(pos, a)
			continue
		}
		a = renameDeprecated(cmd, a, warn)
		dst, from := &fl, flags
		if leaf != nil && !hasFlagName(flags, a) && hasFlagName(app.Flags, a) {
			// A global flag (--log-level, --log-format) after the command:
			// urfave/cli wants it before the command name.
			dst, from = &global, app.Flags
		}
		*dst = append(*dst, a)
		if takesValue(from, a) && !strings.Contains(a, "=") && i+1 < len(rest) {
			*dst = append(*dst, rest[i+1])
			i++
		}
	}
	if len(global) > 0 {
		out = append(append([]string{out[0]}, global...), out[1:]...)
	}
	out = append(out, fl...)
	return append(out, pos...)
}

func isFlagToken(a string) bool { return len(a) > 1 && a[0] == '-' && a != "--" }

func flagName(a string) string {
	n := strings.TrimLeft(a, "-")
	if i := strings.IndexByte(n, '='); i >= 0 {
		n = n[:i]
	}
	return n
}

// takesValue reports whether the flag token a names a flag in flags that
// takes a value. An unknown flag takes none (urfave/cli reports it).
func takesValue(flags []cli.Flag, a string) bool {
	name := flagName(a)
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				if v, ok := f.(interface{ TakesValue() bool }); ok {
					return v.TakesValue()
				}
				return true
			}
		}
	}
	return false
}

func hasFlagName(flags []cli.Flag, a string) bool {
	name := flagName(a)
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func renameDeprecated(cmd, a string, warn io.Writer) string {
	name := flagName(a)
	for _, d := range deprecatedFlags {
		if d.Cmd != cmd || d.Old != name {
			continue
		}
		if d.To == "" {
			fmt.Fprintf(warn, "pillar %s: --%s is deprecated and goes in the next release; %s\n", cmd, d.Old, d.Hint)
			return a
		}
		fmt.Fprintf(warn, "pillar %s: --%s is deprecated and goes in the next release; use --%s\n", cmd, d.Old, d.To)
		return "--" + d.To + strings.TrimPrefix(strings.TrimLeft(a, "-"), d.Old)
	}
	return a
}
