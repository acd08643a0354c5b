package cli

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// visitFlags calls fn for every visible flag of every command.
func visitFlags(fn func(cmd string, c *cli.Command, f cli.Flag)) {
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.TrimSpace(path + " " + c.Name)
			for _, f := range c.Flags {
				if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
					continue
				}
				fn(p, c, f)
			}
			walk(p, c.Subcommands)
		}
	}
	walk("", newApp().Commands)
}

func flagEnv(f cli.Flag) []string {
	if e, ok := f.(interface{ GetEnvVars() []string }); ok {
		return e.GetEnvVars()
	}
	return nil
}

func flagUsage(f cli.Flag) string {
	if u, ok := f.(interface{ GetUsage() string }); ok {
		return u.GetUsage()
	}
	return ""
}

func hasFlagNamed(c *cli.Command, name string) bool {
	for _, f := range c.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// TestFlagVocabulary: for each concept of the vocabulary (README, "Flag
// vocabulary"), every command with a flag for it uses the same name and the
// same environment variables.
func TestFlagVocabulary(t *testing.T) {
	concepts := []struct {
		name string
		want string   // the one flag name
		env  []string // its environment variables, in order
		// is reports whether a flag is about this concept, by name or usage.
		is func(name, usage string) bool
	}{
		{"control-plane address", "control", []string{envControl}, func(n, u string) bool {
			return n == "control" || n == "register" || regexp.MustCompile(`(?i)^control[- ]plane address`).MatchString(u)
		}},
		{"control-plane token", "token-file", []string{envControlTokenFile}, func(n, u string) bool {
			return strings.Contains(n, "token") && !strings.HasPrefix(n, "yt")
		}},
		{"object store", "objstore", []string{envObjstore}, func(n, u string) bool {
			return n == "objstore" || n == "objects" || n == "object-store"
		}},
		{"metrics and health address", "http", nil, func(n, u string) bool {
			return n == "metrics" || n == "http" || strings.Contains(u, "/metrics")
		}},
		{"page store", "store", []string{envStore}, func(n, u string) bool { return n == "store" }},
		{"S3 endpoint", "s3-endpoint", []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}, func(n, u string) bool { return strings.Contains(n, "endpoint") }},
		{"S3 region", "s3-region", []string{"AWS_REGION", "AWS_DEFAULT_REGION"}, func(n, u string) bool { return strings.Contains(n, "region") }},
	}
	// noEnv: flags that keep the concept's name but not its environment
	// variable, because there the flag switches a mode on and the
	// environment must not do that silently.
	noEnv := map[string]string{
		"export --objstore": "opt-in: also build, upload and register the batches",
	}
	seen := map[string]int{}
	visitFlags(func(cmd string, c *cli.Command, f cli.Flag) {
		name, usage := f.Names()[0], flagUsage(f)
		for _, k := range concepts {
			if !k.is(name, usage) {
				continue
			}
			seen[k.name]++
			if name != k.want {
				t.Errorf("pillar %s --%s: the %s is --%s everywhere", cmd, name, k.name, k.want)
				continue
			}
			if env := flagEnv(f); !slices.Equal(env, k.env) && !(noEnv[cmd+" --"+name] != "" && len(env) == 0) {
				t.Errorf("pillar %s --%s: environment %v, want %v as on every command", cmd, name, env, k.env)
			}
		}
		// Every command that opens an object store by URL takes the S3 flags.
		if name == "objstore" || strings.Contains(usage, "s3://") {
			for _, s3 := range []string{"s3-endpoint", "s3-region", "s3-path-style"} {
				if !hasFlagNamed(c, s3) {
					t.Errorf("pillar %s --%s takes s3:// URLs but the command has no --%s", cmd, name, s3)
				}
			}
		}
	})
	t.Logf("flags per concept: %v", seen)
	for _, k := range concepts {
		if seen[k.name] < 2 {
			t.Errorf("the %s: %d commands have a flag for it; the test's matcher is broken", k.name, seen[k.name])
		}
	}
}
