package cli

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestNormalizeArgs(t *testing.T) {
	app := newApp()
	for _, tc := range []struct {
		in, want, warn string
	}{
		// The help's own example, which urfave/cli alone read as three keys.
		{"pillar get --node 127.0.0.1:7101 KEY --json", "pillar get --node 127.0.0.1:7101 --json KEY", ""},
		{"pillar get KEY --node=127.0.0.1:7101 --json", "pillar get --node=127.0.0.1:7101 --json KEY", ""},
		// After --, everything is an argument, in order.
		{"pillar get --node N -- --json K", "pillar get --node N -- --json K", ""},
		{"pillar get K1 --node N -- --json", "pillar get --node N K1 -- --json", ""},
		// A global flag before the command stays where it is.
		{"pillar --log-level debug get K --node N", "pillar --log-level debug get --node N K", ""},
		// A value that looks like a command name is still the flag's value.
		{"pillar sst inspect --objstore get X", "pillar sst inspect --objstore get X", ""},
		// Deprecated spellings are rewritten with a warning.
		{"pillar control serve --db sqlite:x --objects file:///o", "pillar control serve --db sqlite:x --objstore file:///o", "--objects is deprecated"},
		{"pillar control serve --objects=file:///o", "pillar control serve --objstore=file:///o", "use --objstore"},
		{"pillar lorry run --metrics :7201", "pillar lorry run --http :7201", "use --http"},
		{"pillar sst build --register 127.0.0.1:7000 --export e", "pillar sst build --control 127.0.0.1:7000 --export e", "use --control"},
		// A global flag after the command moves before it.
		{"pillar control serve --db sqlite:x --log-format json --no-auth", "pillar --log-format json control serve --db sqlite:x --no-auth", ""},
		{"pillar tables --log-level=debug --store s", "pillar --log-level=debug tables --store s", ""},
		// --objects elsewhere is not ours to rename.
		{"pillar tables --objects x", "pillar tables --objects x", ""},
	} {
		var warn bytes.Buffer
		got := strings.Join(normalizeArgs(app, strings.Fields(tc.in), &warn), " ")
		if got != tc.want {
			t.Errorf("normalizeArgs(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
		if (tc.warn == "") != (warn.Len() == 0) || !strings.Contains(warn.String(), tc.warn) {
			t.Errorf("normalizeArgs(%q) warned %q, want %q", tc.in, warn.String(), tc.warn)
		}
	}
	if got := normalizeArgs(app, []string{"pillar"}, nil); !reflect.DeepEqual(got, []string{"pillar"}) {
		t.Errorf("bare: %q", got)
	}
}
