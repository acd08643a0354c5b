// Package s3test runs a real S3 server (versitygw, posix backend) on
// 127.0.0.1 for tests: it finds or installs the binary, picks a free port,
// waits until the server answers, creates a bucket and stops the server at
// test cleanup.
//
// The binary is looked up in order: $PILLAR_VERSITYGW, bin/versitygw at the
// repository root, $PATH, $HOME/go/bin (and /root/go/bin); failing those it is
// built with `go install github.com/versity/versitygw/cmd/versitygw@v1.8.0`
// into a temporary GOBIN once per test process.
//
// Start may be called from parallel tests; each call runs its own server.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/pillarkit/pillar/internal/freeport"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Version is the versitygw release the tests are written against.
const Version = "v1.8.0"

// Credentials of every server this package starts.
const (
	AccessKey = "pillartestaccess"
	SecretKey = "pillartestsecret0123456789"
	Region    = "us-east-1"
)

// Server is one running versitygw.
type Server struct {
	// Endpoint is "http://127.0.0.1:PORT".
	Endpoint string
	// Bucket was created at start.
	Bucket string
	// Dir is the posix backend's root directory.
	Dir string
	cmd *exec.Cmd
}

// URL returns "s3://<bucket>/<prefix>".
func (s *Server) URL(prefix string) string {
	return "s3://" + s.Bucket + "/" + strings.TrimPrefix(prefix, "/")
}

// Client returns an S3 client for the server (path-style, test credentials).
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
}

// CreateBucket creates another bucket on the server.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	_, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	if err != nil {
		return fmt.Errorf("s3test: create bucket %q: %w", name, err)
	}
	return nil
}

var (
	installOnce sync.Once
	installPath string
	installErr  error
)

// Binary returns the path of a versitygw binary, installing it if needed.
func Binary() (string, error) {
	if p := os.Getenv("PILLAR_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("s3test: $PILLAR_VERSITYGW: %w", err)
		}
		return p, nil
	}
	if root, err := repoRoot(); err == nil {
		p := filepath.Join(root, "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	var homes []string
	if h, err := os.UserHomeDir(); err == nil {
		homes = append(homes, filepath.Join(h, "go", "bin", "versitygw"))
	}
	homes = append(homes, "/root/go/bin/versitygw")
	for _, p := range homes {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	installOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pillar-versitygw-")
		if err != nil {
			installErr = err
			return
		}
		cmd := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+Version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			installErr = fmt.Errorf("s3test: go install versitygw@%s: %w\n%s", Version, err, out)
			return
		}
		installPath = filepath.Join(dir, "versitygw")
	})
	return installPath, installErr
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago, outside the ephemeral range (see internal/freeport).
func FreeAddr() (string, error) { return freeport.Addr() }

// Start runs a server for the test and creates a bucket in it. It fails the
// test if the server cannot run.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	var s *Server
	for attempt := 0; ; attempt++ { // the free port may be taken by the time we bind it
		s, err = start(t, bin)
		if err == nil || attempt == 2 {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func start(t testing.TB, bin string) (*Server, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+AccessKey, "ROOT_SECRET_ACCESS_KEY="+SecretKey)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3test: start %s: %w", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	s := &Server{Endpoint: "http://" + addr, Dir: dir, cmd: cmd}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err
			return nil, fmt.Errorf("s3test: versitygw exited: %v\n%s", err, out.String())
		default:
		}
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("s3test: versitygw on %s did not answer within 30 s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(stop)
	var b [4]byte
	_, _ = rand.Read(b[:])
	s.Bucket = "pillar-test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.CreateBucket(ctx, s.Bucket); err != nil {
		return nil, err
	}
	return s, nil
}
