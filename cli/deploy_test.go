package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// The deployment files under deploy/ are checked against the binary they
// deploy: every YAML file parses; every pillar command line (systemd
// ExecStart, Kubernetes command and args) names a command that exists and
// only flags that command shows in its --help; every config file under
// deploy/config/ loads with the same checks as --config for the command
// its name says; a --config path names one of those files, of the same
// command; and the alert rules name metrics the servers export and pass
// promtool.

// deployConfigCommands maps a config file's base name to its command.
var deployConfigCommands = map[string]string{
	"cobbled.yaml": "cobbled serve",
	"router.yaml":  "router serve",
	"control.yaml": "control serve",
	"lorry.yaml":   "lorry run",
}

// resolveCommand resolves words (e.g. "router", "serve") in app.
func resolveCommand(app *cli.App, words []string) (*cli.Command, string, error) {
	cmds := app.Commands
	var cmd *cli.Command
	var path []string
	for _, w := range words {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(w) {
				next = c
			}
		}
		if next == nil {
			return nil, "", fmt.Errorf("pillar %s: no command %q", strings.Join(path, " "), w)
		}
		cmd, cmds = next, next.Subcommands
		path = append(path, next.Name)
	}
	return cmd, strings.Join(path, " "), nil
}

// visibleFlag reports whether cmd shows --name in its help.
func visibleFlag(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				if vf, ok := f.(cli.VisibleFlag); ok {
					return vf.IsVisible()
				}
				return true
			}
		}
	}
	return name == "help"
}

// checkInvocation checks one pillar command line (the words after the
// binary) found at where.
func checkInvocation(app *cli.App, where string, args []string) []error {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
	}
	cmd, full, err := resolveCommand(app, words)
	if err != nil {
		return []error{fmt.Errorf("%s: %v", where, err)}
	}
	if cmd.Action == nil {
		return []error{fmt.Errorf("%s: pillar %s is not a command that runs (it has subcommands)", where, full)}
	}
	var errs []error
	for i := len(words); i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue // a flag's value
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !visibleFlag(cmd, name) {
			errs = append(errs, fmt.Errorf("%s: pillar %s has no flag --%s (see pillar %s --help)", where, full, name, full))
			continue
		}
		if name == "config" && i+1 < len(args) {
			base := filepath.Base(args[i+1])
			if want, ok := deployConfigCommands[base]; !ok {
				errs = append(errs, fmt.Errorf("%s: --config %s is none of deploy/config/*.yaml", where, args[i+1]))
			} else if want != full {
				errs = append(errs, fmt.Errorf("%s: pillar %s reads --config %s, which is pillar %s's", where, full, args[i+1], want))
			}
		}
	}
	return errs
}

// shellFields splits a systemd command line on blanks (no quoting is used
// in the units).
func shellFields(s string) []string { return strings.Fields(s) }

// checkDeploy checks the deployment files under root.
func checkDeploy(root string) []error {
	app := newApp()
	var errs []error
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(root), path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(path, ".service"):
			for i, l := range strings.Split(string(b), "\n") {
				cmdline, ok := strings.CutPrefix(strings.TrimSpace(l), "ExecStart=")
				if !ok {
					continue
				}
				f := shellFields(cmdline)
				if len(f) == 0 || filepath.Base(f[0]) != "pillar" {
					errs = append(errs, fmt.Errorf("%s:%d: ExecStart does not run pillar", rel, i+1))
					continue
				}
				found++
				errs = append(errs, checkInvocation(app, fmt.Sprintf("%s:%d", rel, i+1), f[1:])...)
			}
		case strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml"):
			dec := yaml.NewDecoder(bytes.NewReader(b))
			for doc := 1; ; doc++ {
				var n yaml.Node
				if err := dec.Decode(&n); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					errs = append(errs, fmt.Errorf("%s: document %d: %v", rel, doc, err))
					break
				}
				walkContainers(&n, func(line int, words []string) {
					found++
					errs = append(errs, checkInvocation(app, fmt.Sprintf("%s:%d", rel, line), words)...)
				})
			}
			if filepath.Base(path) == "kustomization.yaml" {
				var k struct {
					Resources          []string
					ConfigMapGenerator []struct{ Files []string } `yaml:"configMapGenerator"`
				}
				yaml.Unmarshal(b, &k)
				refs := k.Resources
				for _, g := range k.ConfigMapGenerator {
					refs = append(refs, g.Files...)
				}
				for _, r := range refs {
					if _, err := os.Stat(filepath.Join(filepath.Dir(path), r)); err != nil {
						errs = append(errs, fmt.Errorf("%s: %s: %v", rel, r, err))
					}
				}
			}
			if filepath.Base(filepath.Dir(path)) == "config" {
				full, ok := deployConfigCommands[filepath.Base(path)]
				if !ok {
					errs = append(errs, fmt.Errorf("%s: a config file of no server command (want one of cobbled, router, control, lorry .yaml)", rel))
					break
				}
				words := strings.Fields(full)
				cmd, _, err := resolveCommand(app, words)
				if err != nil {
					errs = append(errs, err)
					break
				}
				if _, err := parseConfig(rel, b, cmd, full); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if found < 8 {
		errs = append(errs, fmt.Errorf("%s: found %d pillar command lines; the extractor is broken", root, found))
	}
	return errs
}

// walkContainers calls fn with every Kubernetes container whose command
// is pillar: its line and command[1:] + args, as strings.
func walkContainers(n *yaml.Node, fn func(line int, words []string)) {
	if n.Kind == yaml.MappingNode {
		var command, args *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch n.Content[i].Value {
			case "command":
				command = n.Content[i+1]
			case "args":
				args = n.Content[i+1]
			}
		}
		if command != nil && command.Kind == yaml.SequenceNode && len(command.Content) > 0 && filepath.Base(command.Content[0].Value) == "pillar" {
			var words []string
			for _, e := range command.Content[1:] {
				words = append(words, e.Value)
			}
			if args != nil {
				for _, e := range args.Content {
					words = append(words, e.Value)
				}
			}
			fn(command.Line, words)
		}
	}
	for _, c := range n.Content {
		walkContainers(c, fn)
	}
}

func TestDeployFilesMatchTheBinary(t *testing.T) {
	for _, err := range checkDeploy("../deploy") {
		t.Error(err)
	}
}

// TestDeployCheckCatchesRenames: a renamed flag in a unit or a manifest,
// a renamed key in a config file and a --config of the wrong command each
// fail the check, naming the file and the flag.
func TestDeployCheckCatchesRenames(t *testing.T) {
	for _, c := range []struct{ file, old, new, want string }{
		{"systemd/pillar-router.service", "--zone", "--zones", "has no flag --zones"},
		{"k8s/cobbled.yaml", "--addr,", "--address,", "has no flag --address"},
		{"config/cobbled.yaml", "allow-identity:", "allow-identities:", `unknown key "allow-identities"`},
		{"k8s/router.yaml", "/etc/pillar/config/router.yaml", "/etc/pillar/config/lorry.yaml", "which is pillar lorry run's"},
		{"kustomization.yaml", "k8s/lorry.yaml", "k8s/lory.yaml", "k8s/lory.yaml"},
	} {
		t.Run(c.file, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "deploy")
			if err := os.CopyFS(dir, os.DirFS("../deploy")); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, c.file)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(c.old)) {
				t.Fatalf("%s has no %q to rename", c.file, c.old)
			}
			os.WriteFile(p, bytes.Replace(b, []byte(c.old), []byte(c.new), 1), 0o644)
			var hit bool
			for _, err := range checkDeploy(dir) {
				if strings.Contains(err.Error(), c.want) && strings.Contains(err.Error(), filepath.Base(c.file)) {
					hit = true
				}
			}
			if !hit {
				t.Errorf("renaming %q to %q in %s: no error saying %q", c.old, c.new, c.file, c.want)
			}
		})
	}
}

// TestAlertRules: every metric in the alert rules is exported by the
// servers (named in non-test Go source), and the rules pass promtool.
// PILLAR_REQUIRE_PROMTOOL=1 (make test) makes a missing promtool a
// failure.
func TestAlertRules(t *testing.T) {
	const rules = "../deploy/prometheus/alerts.yaml"
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	var src bytes.Buffer
	filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			if b, err := os.ReadFile(path); err == nil {
				src.Write(b)
			}
		}
		return nil
	})
	metrics := regexp.MustCompile(`\b(?:cobbled|router|lorry|pillar_control)_[a-z0-9_]+`).FindAllString(string(b), -1)
	if len(metrics) < 10 {
		t.Fatalf("found %d metric names in %s; the extractor is broken", len(metrics), rules)
	}
	for _, m := range metrics {
		base := regexp.MustCompile(`_(bucket|count|sum)$`).ReplaceAllString(m, "")
		if !bytes.Contains(src.Bytes(), []byte(`"`+base+`"`)) {
			t.Errorf("%s: metric %s is exported by no server", rules, m)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("PILLAR_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found (Debian package prometheus; make deps installs it)")
		}
		t.Skip("promtool not installed")
	}
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}
