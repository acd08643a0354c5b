package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/internal/s3test"
)

func runSST(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.Before = nil
	err := app.Run(append([]string{"pillar"}, args...))
	return out.String(), err
}

// synth-export → build → inspect, then a rerun that rebuilds nothing.
func TestSSTBuildInspect(t *testing.T) {
	dir := t.TempDir()
	exp, objs := filepath.Join(dir, "exp1"), "file://"+filepath.Join(dir, "objs")
	out, err := runSST(t, "sst", "synth-export", "--out", exp, "--partitions", "2", "--pages", "40", "--chunks", "2", "--text-bytes", "100", "--dims", "16")
	if err != nil || !strings.Contains(out, "export exp1: 2 partitions") {
		t.Fatalf("synth-export: %v\n%s", err, out)
	}
	out, err = runSST(t, "sst", "build", "--export", exp, "--objstore", objs, "--partitions", "2")
	if err != nil || strings.Count(out, " built ") != 2 || !strings.Contains(out, "not registered") {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err = runSST(t, "sst", "build", "--export", exp, "--objstore", objs)
	if err != nil || strings.Count(out, " uploaded ") != 2 {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	out, err = runSST(t, "sst", "build", "--export", exp, "--objstore", objs, "--json")
	if err != nil {
		t.Fatalf("build --json: %v\n%s", err, out)
	}
	res := decodeJSON(t, "sst build --json", out)
	checkJSONShape(t, "sst build --json", res)
	if _, ok := res["elapsed_ms"].(float64); !ok || len(res["partitions"].([]any)) != 2 {
		t.Fatalf("sst build --json: no elapsed_ms or not 2 partitions:\n%s", out)
	}
	if p := res["partitions"].([]any)[0].(map[string]any); p["batch_id"] != "exp1-p00000" || p["status"] == nil {
		t.Fatalf("sst build --json partition: %v", p)
	}
	if _, err = runSST(t, "sst", "build", "--export", exp, "--objstore", objs, "--partitions", "3"); err == nil || !strings.Contains(err.Error(), "partition count mismatch") {
		t.Fatalf("wrong partition count: %v", err)
	}
	out, err = runSST(t, "sst", "inspect", "--samples", "2", objs+"/batches/p00001/exp1-p00001")
	if err != nil || !strings.Contains(out, "meta key = \"exp1-p00001\"") || !strings.Contains(out, "https://synthetic.example/page/") {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	out, err = runSST(t, "sst", "ls", objs)
	if err != nil || strings.Count(out, "exp1-p0000") != 2 || !strings.Contains(out, "snapshot") {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	// The same export from an object store, into another store.
	remote := "file://" + filepath.Join(dir, "exports", "exp1")
	if out, err = runSST(t, "sst", "upload-export", "--export", exp, "--to", remote); err != nil {
		t.Fatalf("upload-export: %v\n%s", err, out)
	}
	out, err = runSST(t, "sst", "build", "--export", "s3x://nope", "--objstore", objs)
	if err == nil {
		t.Fatalf("bad export URL accepted:\n%s", out)
	}
}

// The S3 path end to end through the CLI: credentials from the AWS
// environment, a remote export, batches in S3, inspect from S3; wrong
// credentials fail before any work.
func TestSSTBuildS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	t.Setenv("AWS_REGION", s3test.Region)
	dir := t.TempDir()
	exp := filepath.Join(dir, "e2")
	if out, err := runSST(t, "sst", "synth-export", "--out", exp, "--partitions", "2", "--pages", "30", "--chunks", "2", "--text-bytes", "100", "--dims", "16", "--kind", "delta", "--delete-every", "4"); err != nil {
		t.Fatalf("synth-export: %v\n%s", err, out)
	}
	if out, err := runSST(t, "sst", "upload-export", "--export", exp, "--to", srv.URL("exports/e2")); err != nil {
		t.Fatalf("upload-export: %v\n%s", err, out)
	}
	out, err := runSST(t, "sst", "build", "--export", srv.URL("exports/e2"), "--objstore", srv.URL("batches-root"), "--work-dir", filepath.Join(dir, "work"))
	if err != nil || strings.Count(out, " built ") != 2 {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err = runSST(t, "sst", "inspect", srv.URL("batches-root/batches/p00000/e2-p00000"))
	if err != nil || !strings.Contains(out, "checksums verified") || !strings.Contains(out, "deletes)") {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, err := runSST(t, "sst", "build", "--export", exp, "--objstore", srv.URL("x")); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("wrong credentials: %v", err)
	}
}
