package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/objstore"
)

// tokenOf runs a command with the token flags of cobbled serve and returns
// what controlToken read.
func tokenOf(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var tok string
	var terr error
	app := &cli.App{Name: "pillar", Writer: &bytes.Buffer{}, ErrWriter: &bytes.Buffer{}, Commands: []*cli.Command{{
		Name: "serve", Flags: []cli.Flag{controlTokenFileFlag},
		Action: func(c *cli.Context) error { tok, terr = controlToken(c); return nil },
	}}}
	app.Commands = ownFlags(app.Commands) // as newApp: the shared flags stay pristine
	if err := app.Run(append([]string{"pillar", "serve"}, args...)); err != nil {
		t.Fatal(err)
	}
	return tok, terr
}

func TestControlTokenSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	t.Setenv(envControlTokenFile, "")
	t.Setenv(envControlToken, "")
	if tok, err := tokenOf(t); tok != "" || err != nil {
		t.Errorf("no token: %q %v", tok, err)
	}
	t.Setenv(envControlToken, " from-env ")
	if tok, _ := tokenOf(t); tok != "from-env" {
		t.Errorf("PILLAR_CONTROL_TOKEN: %q", tok)
	}
	if tok, _ := tokenOf(t, "--token-file", file); tok != "from-file" {
		t.Errorf("--token-file before PILLAR_CONTROL_TOKEN: %q", tok)
	}
	t.Setenv(envControlTokenFile, file)
	if tok, _ := tokenOf(t); tok != "from-file" {
		t.Errorf("PILLAR_CONTROL_TOKEN_FILE: %q", tok)
	}
	if _, err := tokenOf(t, "--token-file", empty); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty token file: %v", err)
	}
	if _, err := tokenOf(t, "--token-file", filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("missing token file: %v", err)
	}
}

// An s3:// store that cannot be reached says which endpoint it tried and
// where that came from, and names the variables that set it.
func TestObjstoreErrorNamesEnvironment(t *testing.T) {
	for k, v := range map[string]string{"AWS_ENDPOINT_URL_S3": "", "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
		"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := openObjstoreWith(ctx, "objstore", "s3://bucket/p", &objstore.Options{S3MaxAttempts: 1, S3MaxBackoff: time.Millisecond})
	if err == nil {
		t.Fatal("opened an s3 store on a closed port")
	}
	for _, want := range []string{"--objstore s3://bucket/p", "http://127.0.0.1:1 from AWS_ENDPOINT_URL", "--s3-endpoint", "AWS_ENDPOINT_URL_S3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if got := s3EndpointSource(""); !strings.Contains(got, "from AWS_ENDPOINT_URL") {
		t.Errorf("s3EndpointSource = %q", got)
	}
	t.Setenv("AWS_ENDPOINT_URL", "")
	if got := s3EndpointSource(""); !strings.Contains(got, "public AWS endpoint") {
		t.Errorf("s3EndpointSource with nothing set = %q", got)
	}
}
