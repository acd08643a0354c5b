package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// Config files. The server commands (configCommands) take --config FILE, a
// YAML mapping whose keys are the command's flag names (without "--") and
// whose values have the flags' types: a list for a repeatable flag, a
// duration as a string ("30s"). What wins, in order: a flag on the command
// line, its environment variable, the file, the flag's default.
// --print-config prints the effective configuration in the same format
// (each line says where its value came from) and exits; its output is a
// valid --config file. Everything wrong in a file (a YAML syntax error, a
// tab in the indentation, an unknown or duplicate key, a value of the wrong
// type, a required value missing, a value the command refuses) is an
// error naming the file, the line and the key.

// configCommands are the commands that take --config, by full name.
var configCommands = map[string]bool{
	"cobbled serve": true,
	"router serve":  true,
	"control serve": true,
	"lorry run":     true,
}

// configSkip are flags a file may not set.
var configSkip = map[string]bool{"config": true, "print-config": true, "help": true}

// withConfigFiles adds --config and --print-config to configCommands. It
// runs after ownFlags: it clears Required on the command's own flag
// copies (a required value may come from the file; the check moves into
// Before, after the file is applied).
func withConfigFiles(cmds []*cli.Command, parent string) []*cli.Command {
	for _, cmd := range cmds {
		full := strings.TrimSpace(parent + " " + cmd.Name)
		if configCommands[full] {
			addConfig(cmd, full)
		}
		withConfigFiles(cmd.Subcommands, full)
	}
	return cmds
}

func addConfig(cmd *cli.Command, full string) {
	var required []string
	for _, f := range cmd.Flags {
		if rf, ok := f.(cli.RequiredFlag); ok && rf.IsRequired() {
			required = append(required, f.Names()[0])
			setRequired(f, false)
		}
	}
	cmd.Flags = append(cmd.Flags,
		&cli.StringFlag{Name: "config", Usage: "YAML file of flag values (keys are the flag names); flags and environment variables override it"},
		&cli.BoolFlag{Name: "print-config", Usage: "print the effective configuration (a valid --config file) and exit"},
	)
	cmd.Description += "\n\nEvery flag can come from --config FILE (YAML, keys are the flag names); " +
		"pillar " + full + " --config FILE --print-config shows the result."
	before, action := cmd.Before, cmd.Action
	var applied *configFile
	cmd.Before = func(c *cli.Context) error {
		surviveHangup() // signals.go: the servers reload on SIGHUP
		var err error
		if applied, err = applyConfig(c, cmd, full); err != nil {
			return err
		}
		var missing []string
		for _, name := range required {
			if !c.IsSet(name) {
				missing = append(missing, "--"+name)
			}
		}
		if len(missing) > 0 {
			where := "on the command line or in a --config file"
			if applied != nil {
				where = "on the command line or in " + applied.path
			}
			return fmt.Errorf("pillar %s: required flag %s not set: give it %s", full, strings.Join(missing, ", "), where)
		}
		if before != nil {
			return before(c)
		}
		return nil
	}
	cmd.Action = func(c *cli.Context) error {
		if c.Bool("print-config") {
			return printConfig(c.App.Writer, c, cmd, full, applied)
		}
		if action == nil {
			return nil
		}
		err := action(c)
		if err != nil && applied != nil {
			err = applied.annotate(err)
		}
		return err
	}
}

func setRequired(f cli.Flag, v bool) {
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Required = v
	case *cli.IntFlag:
		f.Required = v
	case *cli.Int64Flag:
		f.Required = v
	case *cli.BoolFlag:
		f.Required = v
	case *cli.DurationFlag:
		f.Required = v
	case *cli.Float64Flag:
		f.Required = v
	case *cli.StringSliceFlag:
		f.Required = v
	case *cli.IntSliceFlag:
		f.Required = v
	case *cli.Uint64Flag:
		f.Required = v
	}
}

// configFile is a file applied to a command: the lines of the keys it set.
type configFile struct {
	path string
	line map[string]int // flag name -> line of its key, for keys that took effect
	from map[string]bool
}

// annotate adds the file and line to an error about a flag the file set
// (the command's own range checks name the flag, not the file).
func (f *configFile) annotate(err error) error {
	msg := err.Error()
	names := make([]string, 0, len(f.line))
	for n := range f.line {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) }) // --max-keys before --max
	for _, n := range names {
		if i := strings.Index(msg, "--"+n); i >= 0 {
			end := i + 2 + len(n)
			if end == len(msg) || !isFlagChar(msg[end]) {
				return fmt.Errorf("%w (key %q at %s:%d)", err, n, f.path, f.line[n])
			}
		}
	}
	return err
}

func isFlagChar(b byte) bool { return b == '-' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

// applyConfig reads --config, if given, and sets every flag it names that
// neither the command line nor the environment set.
func applyConfig(c *cli.Context, cmd *cli.Command, full string) (*configFile, error) {
	path := c.String("config")
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	values, err := parseConfig(path, b, cmd, full)
	if err != nil {
		return nil, err
	}
	f := &configFile{path: path, line: map[string]int{}, from: map[string]bool{}}
	for _, v := range values {
		if c.IsSet(v.name) { // the command line or the environment wins
			continue
		}
		for _, s := range v.values {
			if err := c.Set(v.name, s); err != nil {
				return nil, fmt.Errorf("%s:%d: key %q: %v", path, v.line, v.name, err)
			}
		}
		f.line[v.name] = v.line
		f.from[v.name] = true
	}
	return f, nil
}

// configValue is one key of a file: the flag it sets and its value(s) as
// the command line would spell them.
type configValue struct {
	name   string
	line   int
	values []string
}

// parseConfig checks a file against cmd's flags and returns its values
// in file order.
func parseConfig(path string, b []byte, cmd *cli.Command, full string) ([]configValue, error) {
	for i, l := range strings.Split(string(b), "\n") {
		indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if strings.Contains(indent, "\t") {
			return nil, fmt.Errorf("%s:%d: a tab in the indentation (YAML indents with spaces)", path, i+1)
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values", path, root.Line)
	}
	flags := map[string]cli.Flag{}
	var names []string
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if !configSkip[n] {
				flags[n] = f
				names = append(names, n)
			}
		}
	}
	seen := map[string]int{}
	var out []configValue
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		f, ok := flags[key]
		if !ok {
			hint := ""
			if s := nearest(key, names); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
			}
			if configSkip[key] {
				return nil, fmt.Errorf("%s:%d: key %q cannot be set in a config file", path, k.Line, key)
			}
			return nil, fmt.Errorf("%s:%d: unknown key %q for pillar %s%s", path, k.Line, key, full, hint)
		}
		name := f.Names()[0]
		if first, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s:%d: key %q given twice (first at line %d)", path, k.Line, key, first)
		}
		seen[name] = k.Line
		vals, err := configScalar(f, v)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: key %q: %v", path, v.Line, key, err)
		}
		out = append(out, configValue{name: name, line: k.Line, values: vals})
	}
	return out, nil
}

// configScalar checks v against f's type and spells it as the command
// line would.
func configScalar(f cli.Flag, v *yaml.Node) ([]string, error) {
	scalar := func(want string, ok func(string) error) ([]string, error) {
		if v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("want %s, got a %s", want, kindName(v))
		}
		if err := ok(v.Value); err != nil {
			return nil, fmt.Errorf("want %s, got %q", want, v.Value)
		}
		return []string{v.Value}, nil
	}
	isTag := func(tags ...string) func(string) error {
		return func(string) error {
			for _, t := range tags {
				if v.Tag == t {
					return nil
				}
			}
			return errors.New("wrong type")
		}
	}
	switch f.(type) {
	case *cli.StringFlag:
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return []string{""}, nil
		}
		return scalar("a string", func(string) error { return nil })
	case *cli.IntFlag, *cli.Int64Flag:
		return scalar("an integer", isTag("!!int"))
	case *cli.Uint64Flag:
		return scalar("a non-negative integer", func(s string) error { _, err := strconv.ParseUint(s, 0, 64); return err })
	case *cli.Float64Flag:
		return scalar("a number", isTag("!!int", "!!float"))
	case *cli.BoolFlag:
		return scalar("true or false", isTag("!!bool"))
	case *cli.DurationFlag:
		return scalar(`a duration such as "30s"`, func(s string) error { _, err := time.ParseDuration(s); return err })
	case *cli.StringSliceFlag, *cli.IntSliceFlag:
		if v.Kind == yaml.ScalarNode {
			return []string{v.Value}, nil
		}
		if v.Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("want a list, got a %s", kindName(v))
		}
		var out []string
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: want a list of scalars, got a %s", e.Line, kindName(e))
			}
			out = append(out, e.Value)
		}
		return out, nil
	}
	return scalar("a value", func(string) error { return nil })
}

func kindName(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}

// nearest is the name closest to key by edit distance, when close enough
// to be a typo.
func nearest(key string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(key, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// printConfig writes the effective configuration as YAML: every flag of
// cmd with its value and, as a comment, where it came from.
func printConfig(w io.Writer, c *cli.Context, cmd *cli.Command, full string, file *configFile) error {
	fmt.Fprintf(w, "# pillar %s: effective configuration\n", full)
	for _, f := range cmd.Flags {
		name := f.Names()[0]
		if configSkip[name] {
			continue
		}
		if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
			continue
		}
		src := "default"
		switch {
		case file != nil && file.from[name]:
			src = fmt.Sprintf("%s:%d", file.path, file.line[name])
		case c.IsSet(name):
			src = "flag or environment"
		}
		var node yaml.Node
		switch f.(type) {
		case *cli.StringSliceFlag:
			node.Encode(c.StringSlice(name))
			node.Style = yaml.FlowStyle
		case *cli.IntSliceFlag:
			node.Encode(c.IntSlice(name))
			node.Style = yaml.FlowStyle
		case *cli.DurationFlag:
			node.Encode(c.Duration(name).String())
		default:
			node.Encode(c.Value(name))
		}
		b, err := yaml.Marshal(&node)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %s # %s\n", name, strings.TrimSpace(string(b)), src)
	}
	return nil
}
