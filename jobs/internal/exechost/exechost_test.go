package exechost

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.ytsaurus.tech/yt/go/yson"
)

// TestDescriptorsEnvAndSandbox runs a shell job that writes each output to
// its descriptor (3i+1) and echoes what an exec node would give it.
func TestDescriptorsEnvAndSandbox(t *testing.T) {
	j := &Job{
		Command: `printf out0 >&1; printf out1 >&4; printf out2 >&7; cat job-state >&2; printf "|$YT_JOB_COOKIE|$YT_SECURE_VAULT_token|$GOMAXPROCS|" >&2; cat >&2; exit 3`,
		Files:   map[string]File{"job-state": {Data: []byte("STATE")}},
		Env:     map[string]string{"GOMAXPROCS": "1"},
		Vault:   map[string]string{"token": "s3"},
		JobID:   "j1", Cookie: 7, Outputs: 3, Stdin: []byte("IN"),
	}
	res, err := Run(context.Background(), filepath.Join(t.TempDir(), "sb"), j)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || Stage(3) == "" {
		t.Fatalf("exit code %d", res.ExitCode)
	}
	for i, want := range []string{"out0", "out1", "out2"} {
		if string(res.Outputs[i]) != want {
			t.Fatalf("output %d = %q, want %q", i, res.Outputs[i], want)
		}
	}
	if res.Stderr != "STATE|7|s3|1|IN" {
		t.Fatalf("stderr %q", res.Stderr)
	}
}

func TestEncodeInputAndGroups(t *testing.T) {
	row := func(table int, idx int64, word string) Row {
		b, _ := yson.Marshal(map[string]any{"word": word, "n": idx})
		return Row{Table: table, Index: idx, YSON: b}
	}
	rows := []Row{row(0, 0, "b"), row(0, 1, "a"), row(1, 5, "a"), row(1, 6, "c")}
	groups, err := SortAndGroup(rows, []string{"word"}, []string{"word"})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 3 || len(groups[0]) != 2 || groups[0][0].Table != 0 || groups[0][1].Table != 1 {
		t.Fatalf("groups %+v", groups)
	}
	in, err := EncodeInput(groups, Control{TableIndex: true, RowIndex: true, KeySwitch: true})
	if err != nil {
		t.Fatal(err)
	}
	var text []string
	r := yson.NewReaderKind(strings.NewReader(string(in)), yson.StreamListFragment)
	for {
		ok, err := r.NextListItem()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		var raw yson.RawValue
		if err := (&yson.Decoder{R: r}).Decode(&raw); err != nil {
			t.Fatal(err)
		}
		b, _ := yson.MarshalFormat(raw, yson.FormatText)
		text = append(text, string(b))
	}
	want := []string{
		`<"table_index"=0;>#`, `<"row_index"=1;>#`, `{n=1;word=a;}`,
		`<"table_index"=1;>#`, `<"row_index"=5;>#`, `{n=5;word=a;}`,
		`<"key_switch"=%true;>#`, `<"table_index"=0;>#`, `<"row_index"=0;>#`, `{n=0;word=b;}`,
		`<"key_switch"=%true;>#`, `<"table_index"=1;>#`, `<"row_index"=6;>#`, `{n=6;word=c;}`,
	}
	if strings.Join(text, " ") != strings.Join(want, " ") {
		t.Fatalf("input stream:\n got %s\nwant %s", strings.Join(text, " "), strings.Join(want, " "))
	}
	if _, err := SortAndGroup(rows, []string{"n"}, []string{"word"}); err == nil {
		t.Fatal("reduce_by not a prefix of sort_by must fail")
	}
}
