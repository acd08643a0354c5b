package cli

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"os/signal"

	"github.com/pillarkit/pillar/cobbled/control"
)

// readCredentials reads a control plane's role tokens: one per line,
// "node TOKEN [NODE_ID]", "writer TOKEN" or "admin TOKEN"; blank lines and
// lines starting with # are skipped. An error names the file and line
// (never the token).
func readCredentials(path string) ([]control.Credential, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--credentials-file: %w", err)
	}
	defer f.Close()
	var out []control.Credential
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Fields(line)
		role := control.Role(w[0])
		switch {
		case role != control.RoleNode && role != control.RoleWriter && role != control.RoleAdmin:
			return nil, fmt.Errorf("--credentials-file %s:%d: role %q: want node, writer or admin", path, ln, w[0])
		case len(w) < 2:
			return nil, fmt.Errorf("--credentials-file %s:%d: %s with no token", path, ln, role)
		case len(w) > 3 || len(w) == 3 && role != control.RoleNode:
			return nil, fmt.Errorf("--credentials-file %s:%d: want %q, %q or %q", path, ln, "node TOKEN [NODE_ID]", "writer TOKEN", "admin TOKEN")
		}
		c := control.Credential{Role: role, Token: w[1]}
		if len(w) == 3 {
			c.Node = w[2]
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--credentials-file %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--credentials-file %s: no credentials in it", path)
	}
	return out, nil
}

// watchCredentials reloads the credentials file on SIGHUP and when it
// changes (checked every 5 s) until ctx ends; a file that fails to parse
// leaves the current credentials in place.
func watchCredentials(ctx context.Context, path string, srv *control.Server, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	stamp := func() string {
		fi, err := os.Stat(path)
		if err != nil {
			return "missing"
		}
		return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	}
	last := stamp()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-t.C:
			if s := stamp(); s == last {
				continue
			}
		}
		last = stamp()
		creds, err := readCredentials(path)
		if err == nil {
			err = srv.SetCredentials(creds)
		}
		if err != nil {
			log.Error("control serve: credentials reload failed; the current ones stay", "err", err)
			continue
		}
		log.Info("control serve: credentials reloaded", "credentials", len(creds))
	}
}
