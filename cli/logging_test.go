package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestLogDefaults(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want slog.Level
	}{
		{[]string{"sst", "build", "--export", "e"}, slog.LevelWarn},
		{[]string{"tables"}, slog.LevelWarn},
		{[]string{"cobbled", "serve", "--id", "n1"}, slog.LevelInfo},
		{[]string{"control", "serve"}, slog.LevelInfo},
		{[]string{"router", "serve"}, slog.LevelInfo},
		{[]string{"lorry", "run", "--store", "s"}, slog.LevelInfo},
		{[]string{"lorry", "run", "--once"}, slog.LevelWarn},
	} {
		h, err := logHandler(&bytes.Buffer{}, "", "text", tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if !h.Enabled(context.Background(), tc.want) || h.Enabled(context.Background(), tc.want-1) {
			t.Errorf("%q: default level is not %v", tc.args, tc.want)
		}
	}
	h, _ := logHandler(&bytes.Buffer{}, "debug", "text", []string{"tables"})
	if !h.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("--log-level debug ignored")
	}
	for _, bad := range [][2]string{{"loud", "text"}, {"info", "xml"}} {
		if _, err := logHandler(&bytes.Buffer{}, bad[0], bad[1], nil); err == nil || !strings.Contains(err.Error(), "--log-") {
			t.Errorf("logHandler(%q): %v", bad, err)
		}
	}
}

func TestLogFormatJSON(t *testing.T) {
	var buf bytes.Buffer
	h, err := logHandler(&buf, "", "json", []string{"cobbled", "serve"})
	if err != nil {
		t.Fatal(err)
	}
	slog.New(h).Info("cobbled: serving", "partitions", 4)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "cobbled: serving" || rec["level"] != "INFO" || rec["partitions"] != 4.0 {
		t.Fatalf("--log-format json wrote %q (%v)", buf.String(), err)
	}
}
