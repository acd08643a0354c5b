package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runConfigCLI runs pillar with args and returns stdout and the error.
func runConfigCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.Before = nil
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.Run(append([]string{"pillar"}, args...))
	return out.String(), err
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pillar.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// printed returns the value --print-config printed for key, and its source
// comment.
func printed(t *testing.T, out, key string) (value, source string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `: (.*) # (.*)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("--print-config printed no %q:\n%s", key, out)
	}
	return m[1], m[2]
}

// TestConfigPrecedence: the command line beats the environment, which
// beats the file, which beats the default; --print-config says which.
func TestConfigPrecedence(t *testing.T) {
	f := writeConfig(t, "control: 127.0.0.1:7000\nzone: a\nmax-keys: 512\ntimeout: 3s\nallow-identity: [\"pillar://reader/*\", \"pillar://router/*\"]\nno-hedge: true\n")
	out, err := runConfigCLI(t, "router", "serve", "--config", f, "--zone", "b", "--print-config")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, value, source string }{
		{"control", "127.0.0.1:7000", f + ":1"},
		{"zone", "b", "flag or environment"},
		{"max-keys", "512", f + ":3"},
		{"timeout", "3s", f + ":4"},
		{"allow-identity", "['pillar://reader/*', 'pillar://router/*']", f + ":5"},
		{"no-hedge", "true", f + ":6"},
		{"max-lag", "2", "default"},
	} {
		if v, s := printed(t, out, c.key); v != c.value || s != c.source {
			t.Errorf("%s: printed %q from %q, want %q from %q", c.key, v, s, c.value, c.source)
		}
	}
}

// TestPrintConfigRoundTrips: what --print-config prints is a config file
// that prints the same values again, for every server command.
func TestPrintConfigRoundTrips(t *testing.T) {
	for _, c := range []struct {
		cmd  []string
		body string
	}{
		{[]string{"cobbled", "serve"}, "id: n1\ndata: /srv/pillar\ncontrol: 127.0.0.1:7000\nobjstore: /srv/objects\nzone: a\ncache: 2GiB\n"},
		{[]string{"router", "serve"}, "control: 127.0.0.1:7000\nzone: a\n"},
		{[]string{"control", "serve"}, "db: sqlite:/srv/control.db\npartitions: 64\nno-auth: true\n"},
		{[]string{"lorry", "run"}, "store: /srv/store\nobjstore: /srv/objects\ncontrol: 127.0.0.1:7000\n"},
	} {
		name := strings.Join(c.cmd, " ")
		first, err := runConfigCLI(t, append(c.cmd, "--config", writeConfig(t, c.body), "--print-config")...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		second, err := runConfigCLI(t, append(c.cmd, "--config", writeConfig(t, first), "--print-config")...)
		if err != nil {
			t.Fatalf("%s: printed config does not load: %v\n%s", name, err, first)
		}
		strip := regexp.MustCompile(`(?m) # .*$`)
		if a, b := strip.ReplaceAllString(first, ""), strip.ReplaceAllString(second, ""); a != b {
			t.Errorf("%s: --print-config of its own output differs:\n%s\nthen\n%s", name, a, b)
		}
		if strings.Count(first, "\n") < 10 {
			t.Errorf("%s: --print-config printed only:\n%s", name, first)
		}
	}
}

// TestConfigFileErrors: every bad file is refused naming the file, the
// line and the key.
func TestConfigFileErrors(t *testing.T) {
	for _, c := range []struct {
		name, body string
		words      []string
	}{
		{"typo'd key", "control: x\nlisen: a\n", []string{":2:", `unknown key "lisen"`, `did you mean "listen"`}},
		{"duplicate key", "control: x\nzone: a\nzone: b\n", []string{":3:", `key "zone" given twice (first at line 2)`}},
		{"tab in the indentation", "control: x\nallow-identity:\n\t- a\n", []string{":3:", "tab"}},
		{"integer that is not one", "control: x\nmax-keys: lots\n", []string{":2:", `key "max-keys"`, "want an integer"}},
		{"duration without a unit", "control: x\ntimeout: 5\n", []string{":2:", `key "timeout"`, "duration"}},
		{"bool that is a string", "control: x\nno-hedge: maybe\n", []string{":2:", `key "no-hedge"`, "true or false"}},
		{"list where a value goes", "control: [a, b]\n", []string{":1:", `key "control"`, "got a list"}},
		{"not a mapping", "- control\n", []string{":1:", "mapping"}},
		{"YAML syntax error", "control: [a\n", []string{"pillar.yaml", "line 1"}},
		{"config key in the file", "control: x\nconfig: other.yaml\n", []string{":2:", `"config" cannot be set`}},
		{"required value missing", "zone: a\n", []string{"--control", "pillar.yaml"}},
		{"value out of range", "control: 127.0.0.1:1\nlisten: 127.0.0.1:0\nmax-in-flight: 0\n", []string{"--max-in-flight 0", `key "max-in-flight"`, "pillar.yaml:3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := runConfigCLI(t, "router", "serve", "--config", writeConfig(t, c.body))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range append(c.words, "pillar.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
