package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/pillarkit/pillar/internal/freeport"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/health"
)

func runControlCLI(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	app.Before = nil
	err := app.RunContext(ctx, append([]string{"pillar"}, args...))
	return out.String(), err
}

func freeAddr(t *testing.T) string {
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestControlServeCLI runs `pillar control serve` on SQLite and on
// PostgreSQL (a fresh database, dropped afterwards; skipped when PostgreSQL
// is not reachable unless PILLAR_REQUIRE_POSTGRES is set) and drives it with
// `pillar control register|batches|nodes` and `pillar status`.
func TestControlServeCLI(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("cli-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dbs := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "control.db") },
		"postgres": func(t *testing.T) string {
			admin := os.Getenv("PILLAR_TEST_POSTGRES")
			if admin == "" {
				admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
			}
			db, err := sql.Open("pgx", admin)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				err = db.PingContext(ctx)
				cancel()
			}
			if err != nil {
				if os.Getenv("PILLAR_REQUIRE_POSTGRES") != "" {
					t.Fatal(err)
				}
				t.Skipf("PostgreSQL unavailable: %v", err)
			}
			name := fmt.Sprintf("pillar_cli_control_%d", time.Now().UnixNano())
			if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				db.Exec("DROP DATABASE " + name + " WITH (FORCE)")
				db.Close()
			})
			return strings.Replace(admin, "/postgres?", "/"+name+"?", 1)
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			dsn := dbs[name](t)
			addr, httpAddr := freeAddr(t), freeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			go func() {
				_, err := runControlCLI(t, ctx, "control", "serve", "--db", dsn, "--listen", addr, "--http", httpAddr,
					"--partitions", "4", "--token-file", tokenFile)
				served <- err
			}()
			cl, err := control.Dial(addr, &control.ClientOptions{Token: "cli-token"})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for i := 0; ; i++ {
				if p, err := cl.Partitions(ctx); err == nil && p == 4 {
					break
				} else if i > 100 {
					t.Fatalf("server did not come up: %v", err)
				}
				select {
				case err := <-served:
					t.Fatalf("serve exited: %v", err)
				case <-time.After(50 * time.Millisecond):
				}
			}
			for i, z := range []string{"a", "b", "c"} {
				if err := cl.RegisterNode(ctx, control.Node{ID: fmt.Sprintf("node%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 9400+i), Zone: z}); err != nil {
					t.Fatal(err)
				}
			}
			// Nothing registered yet: --lagging says every replica is current.
			if out, err := runControlCLI(t, ctx, "status", "--control", addr, "--lagging"); err != nil || !strings.Contains(out, "every replica is current") {
				t.Fatalf("status --lagging with nothing behind: %v\n%s", err, out)
			}
			sum := sha256.Sum256([]byte("x"))
			for i := 1; i <= 3; i++ {
				m := &batch.Manifest{Format: 1, ID: fmt.Sprintf("cli-%d", i), Partition: 2, Partitions: 4, Kind: batch.KindDelta,
					Files: []batch.File{{Name: "000001.sst", Size: 10, SHA256: hex.EncodeToString(sum[:]), Keys: 1}}, Keys: 1, Source: "cli-test"}
				raw, _ := m.Encode()
				path := filepath.Join(t.TempDir(), "manifest.json")
				os.WriteFile(path, raw, 0o644)
				out, err := runControlCLI(t, ctx, "control", "register", "--control", addr, "--token-file", tokenFile, "--manifest", path)
				if err != nil || !strings.Contains(out, fmt.Sprintf("seq %d", i)) {
					t.Fatalf("register %d: %q %v", i, out, err)
				}
				if i == 1 {
					if _, err := runControlCLI(t, ctx, "control", "register", "--control", addr, "--manifest", path); err == nil {
						t.Fatal("register without a token succeeded")
					}
				}
			}
			if err := cl.ReportApplied(ctx, "node0", 2, 3); err != nil {
				t.Fatal(err)
			}
			if err := cl.ReportApplied(ctx, "node1", 2, 1); err != nil {
				t.Fatal(err)
			}
			out, err := runControlCLI(t, ctx, "control", "batches", "--control", addr, "--partition", "2")
			if err != nil || strings.Count(out, "cli-test") != 3 || !strings.Contains(out, "cli-3") {
				t.Fatalf("batches: %v\n%s", err, out)
			}
			out, err = runControlCLI(t, ctx, "status", "--control", addr, "--partition", "2")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("status:\n%s", out)
			if out, err := runControlCLI(t, ctx, "status", "--control", addr, "--lagging"); err != nil || strings.Contains(out, "every replica is current") || !strings.Contains(out, "node1") {
				t.Fatalf("status --lagging with node1 behind: %v\n%s", err, out)
			}
			js, err := runControlCLI(t, ctx, "status", "--control", addr, "--json")
			if err != nil {
				t.Fatal(err)
			}
			st := decodeJSON(t, "status --json", js)
			checkJSONShape(t, "status --json", st)
			if reps, _ := st["replicas"].([]any); len(reps) == 0 || reps[0].(map[string]any)["lag_ms"] == nil {
				t.Errorf("status --json: no replicas with lag_ms:\n%s", js)
			}
			for _, want := range []string{"3 up", "node0", "node1", "node2", name} {
				if !strings.Contains(out, want) {
					t.Fatalf("status lacks %q:\n%s", want, out)
				}
			}
			var behind []string
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) == 8 && f[0] == "2" {
					behind = append(behind, f[2]+"="+f[6])
				}
			}
			if got := strings.Join(behind, " "); !strings.Contains(got, "node0=0") || !strings.Contains(got, "node1=2") || !strings.Contains(got, "node2=3") {
				t.Fatalf("per-replica lag %q:\n%s", got, out)
			}
			for path, want := range map[string]string{"/healthz": `"database": "` + name + `"`, "/readyz": `"status": "ok"`, "/metrics": "pillar_control_max_replica_lag_batches 3"} {
				resp, err := http.Get("http://" + httpAddr + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
					t.Fatalf("GET %s: %d, want %q in:\n%.2000s", path, resp.StatusCode, want, body)
				}
				if path != "/metrics" {
					if _, err := health.DecodeBody(body); err != nil {
						t.Fatalf("GET %s: %v", path, err)
					}
				}
			}
			js, err = runControlCLI(t, ctx, "control", "nodes", "--control", addr, "--json")
			if err != nil {
				t.Fatal(err)
			}
			var nodesJSON []any
			if err := json.Unmarshal([]byte(js), &nodesJSON); err != nil || len(nodesJSON) != 3 {
				t.Fatalf("control nodes --json: %v\n%s", err, js)
			}
			checkJSONShape(t, "control nodes --json", nodesJSON)
			out, err = runControlCLI(t, ctx, "control", "nodes", "--control", addr)
			if err != nil || strings.Count(out, " up ") != 3 {
				t.Fatalf("nodes: %v\n%s", err, out)
			}
			if _, err := runControlCLI(t, ctx, "control", "remove-node", "--control", addr, "--token-file", tokenFile, "--node", "node2"); err == nil {
				t.Fatal("remove-node of an up node without --force succeeded")
			}
			if out, err := runControlCLI(t, ctx, "control", "remove-node", "--control", addr, "--token-file", tokenFile, "--node", "node2", "--force"); err != nil || !strings.Contains(out, "removed") {
				t.Fatalf("remove-node --force: %v %s", err, out)
			}
			out, err = runControlCLI(t, ctx, "control", "nodes", "--control", addr)
			if err != nil || strings.Contains(out, "node2") {
				t.Fatalf("nodes after remove-node: %v\n%s", err, out)
			}
			cancel()
			select {
			case err := <-served:
				if err != nil {
					t.Fatalf("serve: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("serve did not stop")
			}
		})
	}
}
