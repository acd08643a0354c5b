package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// helpExamples returns every `pillar ...` line of every command's help text
// (Description), continuation lines joined, comments and shell
// pipes cut off.
func helpExamples(app *cli.App) map[string][]string {
	out := map[string][]string{}
	add := func(where, text string) {
		lines := strings.Split(text, "\n")
		for i := 0; i < len(lines); i++ {
			l := strings.TrimSpace(lines[i])
			// Examples are indented; "pillar ..." at the margin is prose, and
			// "pillar plan ... --flag" elides the required flags on purpose.
			if !strings.HasPrefix(l, "pillar ") || l == lines[i] || strings.Contains(l, " ... ") {
				continue
			}
			for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
			}
			for _, cut := range []string{" #", " | ", " > ", " && ", " 2>"} {
				if j := strings.Index(l, cut); j >= 0 {
					l = l[:j]
				}
			}
			out[where] = append(out[where], strings.TrimSpace(l))
		}
	}
	add("pillar", app.Description)
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := path + " " + c.Name
			add(p, c.Description) // UsageText is a synopsis ([options]), not an example
			walk(p, c.Subcommands)
		}
	}
	walk("pillar", app.Commands)
	return out
}

// shellWords splits a command line as sh would for the quoting the help
// texts use ('...' and "...").
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	in := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// parseOnly replaces every Action with one that records the command and its
// arguments, so that an example is parsed exactly as the binary parses it
// (normalizeArgs, required flags, flag types, flag Actions) without
// starting a server or touching data.
func parseOnly(path string, cmds []*cli.Command, ran *[]string, args *[]string) {
	for _, c := range cmds {
		p := strings.TrimSpace(path + " " + c.Name)
		c.Action = func(ctx *cli.Context) error {
			*ran = append(*ran, p)
			*args = ctx.Args().Slice()
			return nil
		}
		parseOnly(p, c.Subcommands, ran, args)
	}
}

// TestHelpExamplesParse runs every example of every help text, parse-only.
func TestHelpExamplesParse(t *testing.T) {
	n := 0
	for where, exs := range helpExamples(newApp()) {
		for _, ex := range exs {
			n++
			words := shellWords(ex)
			app := newApp()
			var ran, args []string
			parseOnly("", app.Commands, &ran, &args)
			var stderr bytes.Buffer
			app.Writer, app.ErrWriter = io.Discard, &stderr
			app.ExitErrHandler = func(*cli.Context, error) {}
			err := app.RunContext(context.Background(), normalizeArgs(app, words, &stderr))
			switch {
			case err != nil:
				t.Errorf("%s: example %q: %v", where, ex, err)
			case len(ran) != 1:
				t.Errorf("%s: example %q ran no command (help shown?): %s", where, ex, stderr.String())
			case stderr.Len() > 0:
				t.Errorf("%s: example %q warns: %s", where, ex, stderr.String())
			case !strings.HasPrefix(ex, "pillar "+ran[0]):
				t.Errorf("%s: example %q ran pillar %s", where, ex, ran[0])
			}
			for _, a := range args {
				if a == "--" {
					break
				}
				if strings.HasPrefix(a, "-") && len(a) > 1 {
					t.Errorf("%s: example %q: flag %q was taken as an argument", where, ex, a)
				}
			}
		}
	}
	if n < 100 {
		t.Errorf("found %d examples; the extractor is broken", n)
	}
	t.Logf("%d help examples parse", n)
}

// readmeCommands returns the command lines of the README's section under
// heading ("## The `pillar` command"), continuation lines joined, comments
// cut, a trailing " &" dropped and optional parts ([--flag]) included.
func readmeCommands(t *testing.T, heading string) []string {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, heading)
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	s = s[i:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	var out []string
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "pillar ") {
			continue
		}
		for strings.HasSuffix(strings.TrimSpace(strings.SplitN(l, " #", 2)[0]), `\`) && i+1 < len(lines) {
			l = strings.TrimSuffix(strings.TrimSpace(strings.SplitN(l, " #", 2)[0]), `\`) + " " + strings.TrimSpace(lines[i+1])
			i++
		}
		if j := strings.Index(l, " #"); j >= 0 {
			l = l[:j]
		}
		l = strings.TrimSuffix(strings.TrimSpace(l), " &")
		out = append(out, strings.NewReplacer("[", "", "]", "").Replace(strings.TrimSpace(l)))
	}
	return out
}

// TestREADMECommandsParse checks the README's command section against the
// command tree: every line parses as the binary would parse it, and every
// top-level command appears.
func TestREADMECommandsParse(t *testing.T) {
	cmds := readmeCommands(t, "## The `pillar` command")
	if len(cmds) < 20 {
		t.Fatalf("found %d README command lines; the extractor is broken", len(cmds))
	}
	shown := map[string]bool{}
	for _, ex := range cmds {
		app := newApp()
		var ran, args []string
		parseOnly("", app.Commands, &ran, &args)
		var stderr bytes.Buffer
		app.Writer, app.ErrWriter = io.Discard, &stderr
		app.ExitErrHandler = func(*cli.Context, error) {}
		err := app.RunContext(context.Background(), normalizeArgs(app, shellWords(ex), &stderr))
		switch {
		case err != nil:
			t.Errorf("README %q: %v", ex, err)
		case len(ran) != 1:
			t.Errorf("README %q ran no command: %s", ex, stderr.String())
		case stderr.Len() > 0:
			t.Errorf("README %q warns: %s", ex, stderr.String())
		default:
			shown[ran[0]] = true
		}
	}
	// Every command, down to the leaves, including those added later by
	// anyone: a new command fails here until the README shows it.
	var walk func(prefix string, cs []*cli.Command)
	walk = func(prefix string, cs []*cli.Command) {
		for _, c := range cs {
			if c.Hidden || c.Name == "help" {
				continue
			}
			name := strings.TrimSpace(prefix + " " + c.Name)
			if len(c.Subcommands) > 0 {
				walk(name, c.Subcommands)
				continue
			}
			if !shown[name] {
				t.Errorf("README.md, \"The `pillar` command\": no line for pillar %s (%s)", name, c.Usage)
			}
		}
	}
	walk("", newApp().Commands)
}

// TestREADMEQuickStartParses parses every command line of the README's
// quick start as the binary would parse it.
func TestREADMEQuickStartParses(t *testing.T) {
	cmds := readmeCommands(t, "## Quick start")
	if len(cmds) < 8 {
		t.Fatalf("found %d quick-start command lines; the extractor is broken", len(cmds))
	}
	tlsCmds := readmeCommands(t, "## On a network")
	if len(tlsCmds) < 5 {
		t.Fatalf("found %d command lines under \"On a network\"; the extractor is broken", len(tlsCmds))
	}
	for _, ex := range append(cmds, tlsCmds...) {
		app := newApp()
		var ran, args []string
		parseOnly("", app.Commands, &ran, &args)
		var stderr bytes.Buffer
		app.Writer, app.ErrWriter = io.Discard, &stderr
		app.ExitErrHandler = func(*cli.Context, error) {}
		err := app.RunContext(context.Background(), normalizeArgs(app, shellWords(ex), &stderr))
		switch {
		case err != nil:
			t.Errorf("README quick start %q: %v", ex, err)
		case len(ran) != 1:
			t.Errorf("README quick start %q ran no command: %s", ex, stderr.String())
		case stderr.Len() > 0:
			t.Errorf("README quick start %q warns: %s", ex, stderr.String())
		}
	}
}
