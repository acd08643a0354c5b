package control

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

// The PostgreSQL half of the suite runs against PILLAR_TEST_POSTGRES
// (default postgres://postgres@127.0.0.1:5432/postgres). TestMain creates a
// fresh database for the run and drops it afterwards; each test gets its own
// schema in it. When the server is unreachable the PostgreSQL subtests skip,
// unless PILLAR_REQUIRE_POSTGRES=1 (CI), where they fail.
var (
	pgAdminDSN = envOr("PILLAR_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	pgRunDSN   string // the run's database; "" when PostgreSQL is unavailable
	pgErr      error
	schemaSeq  atomic.Int64
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	dbName := fmt.Sprintf("pillar_control_test_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	admin, err := sql.Open("pgx", pgAdminDSN)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err = admin.PingContext(ctx); err == nil {
			_, err = admin.ExecContext(ctx, "CREATE DATABASE "+dbName)
		}
		cancel()
	}
	if err != nil {
		pgErr = err
	} else {
		pgRunDSN = withDatabase(pgAdminDSN, dbName)
	}
	code := m.Run()
	if pgRunDSN != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+dbName+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "control tests: drop database:", err)
		}
		cancel()
	}
	if admin != nil {
		admin.Close()
	}
	os.Exit(code)
}

// withDatabase replaces the database path of a postgres:// URL.
func withDatabase(dsn, db string) string {
	rest := dsn[len("postgres://"):]
	query := ""
	if i := strings.Index(rest, "?"); i >= 0 {
		rest, query = rest[:i], rest[i:]
	}
	if i := strings.Index(rest, "/"); i >= 0 {
		rest = rest[:i]
	}
	return "postgres://" + rest + "/" + db + query
}

func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// backend is one storage backend the suite runs on; dsn returns a fresh,
// empty database for one test.
type backend struct {
	name string
	dsn  func(t testing.TB) string
}

func backends() []backend {
	return []backend{
		{BackendSQLite, func(t testing.TB) string {
			return "sqlite:" + filepath.Join(t.TempDir(), "control.db")
		}},
		{BackendPostgres, func(t testing.TB) string {
			if pgRunDSN == "" {
				if os.Getenv("PILLAR_REQUIRE_POSTGRES") != "" {
					t.Fatalf("PostgreSQL at %s: %v", pgAdminDSN, pgErr)
				}
				t.Skipf("PostgreSQL at %s unavailable: %v", pgAdminDSN, pgErr)
			}
			schema := fmt.Sprintf("t%d", schemaSeq.Add(1))
			db, err := sql.Open("pgx", pgRunDSN)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
				t.Fatal(err)
			}
			return withParam(pgRunDSN, "search_path="+schema)
		}},
	}
}

// forEachBackend runs fn as a subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// fakeClock is a settable clock for down-detection tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const testToken = "s3cret-token"

// env is a running control plane on loopback and a client with the token.
type env struct {
	srv    *Server
	store  *Store
	client *Client
	addr   string
}

func openStore(t testing.TB, dsn string, partitions int) *Store {
	t.Helper()
	st, err := OpenStore(context.Background(), dsn, &StoreOptions{Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startEnv opens a store on dsn with P partitions and serves it. tweak may
// adjust the options before the server is built.
func startEnv(t testing.TB, dsn string, partitions int, tweak func(*Options)) *env {
	t.Helper()
	st := openStore(t, dsn, partitions)
	t.Cleanup(func() { st.Close() })
	o := &Options{Store: st, Token: testToken}
	if tweak != nil {
		tweak(o)
	}
	srv, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := srv.GRPCServer()
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	c, err := Dial(lis.Addr().String(), &ClientOptions{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &env{srv: srv, store: st, client: c, addr: lis.Addr().String()}
}

// manifest returns a valid manifest for batch id of partition p (of P).
func manifest(id string, p, partitions int, kind string) *batch.Manifest {
	sum := sha256.Sum256([]byte(id))
	return &batch.Manifest{Format: batch.FormatVersion, ID: id, Partition: p, Partitions: partitions, Kind: kind,
		Files: []batch.File{{Name: "000001.sst", Size: 100, SHA256: hex.EncodeToString(sum[:]), Keys: 3}},
		Keys:  3, Smallest: "00", Largest: "ff", Source: "test", CreatedAtMS: 1700000000000}
}

// putObject writes a small object under key.
func putObject(t testing.TB, s objstore.Store, key string) {
	t.Helper()
	if err := s.Put(context.Background(), key, strings.NewReader(key), int64(len(key)), nil); err != nil {
		t.Fatal(err)
	}
}

func objectExists(t testing.TB, s objstore.Store, key string) bool {
	t.Helper()
	_, err := s.Stat(context.Background(), key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}
