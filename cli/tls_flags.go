package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/tlsconf"
)

// serverTLSFlags are the TLS flags of a read-path server (cobbled serve,
// router serve): its certificate, the CA of the clients it requires
// (mutual TLS), the identities it serves, and --insecure, the explicit
// choice of plaintext beyond loopback.
func serverTLSFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", Usage: "PEM certificate: serve over TLS (reloaded on SIGHUP or when the file changes)"},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM private key for --tls-cert"},
		&cli.StringFlag{Name: "tls-client-ca", Usage: "PEM CA bundle: require client certificates signed by it (mutual TLS)"},
		&cli.StringSliceFlag{Name: "allow-identity", Usage: "with --tls-client-ca: serve only clients with this certificate identity (URI SAN or CN; a trailing * matches a prefix, e.g. pillar://router/*); repeatable (default: any client of the CA)"},
		&cli.BoolFlag{Name: "insecure", Usage: "serve plaintext on a non-loopback address (refused without it)"},
	}
}

// secureListener applies the TLS flags to lis (what names the server in
// errors and logs): a TLS listener whose certificate reloads until ctx
// ends, or lis itself when no certificate is given and the address is
// loopback or --insecure is set. It also refuses an --http address off
// loopback without --insecure: the metrics and health port serves
// plaintext.
func secureListener(ctx context.Context, c *cli.Context, what string, lis net.Listener, httpAddr string, log *slog.Logger) (net.Listener, error) {
	files := tlsconf.Files{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-client-ca")}
	tlsOn := files.Cert != "" || files.Key != ""
	if err := tlsconf.OffLoopback(what+" --listen", c.String("listen"), tlsOn, c.Bool("insecure")); err != nil {
		return nil, err
	}
	if httpAddr != "" && !tlsconf.IsLoopback(httpAddr) && !c.Bool("insecure") {
		return nil, fmt.Errorf("%s --http %s: the metrics and health port serves plaintext; bind it to 127.0.0.1 (scrape through a local agent) or pass --insecure", what, httpAddr)
	}
	if !tlsOn {
		if files.CA != "" || len(c.StringSlice("allow-identity")) > 0 {
			return nil, fmt.Errorf("%s: --tls-client-ca and --allow-identity need --tls-cert and --tls-key", what)
		}
		return lis, nil
	}
	if len(c.StringSlice("allow-identity")) > 0 && files.CA == "" {
		return nil, fmt.Errorf("%s: --allow-identity needs --tls-client-ca (identities come from verified client certificates)", what)
	}
	r, err := tlsconf.NewReloader(files, tlsconf.Options{
		OnError: func(err error) {
			log.Error(what+": certificate reload failed; the previous certificate stays in use", "err", err)
		},
		OnReload: func() { log.Info(what + ": certificates reloaded") },
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	cfg, err := r.ServerConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	go r.Watch(ctx)
	refusals := newRateLimitedLog(log)
	return tlsconf.NewListener(lis, cfg, tlsconf.ListenerOptions{
		Allow: c.StringSlice("allow-identity"),
		OnRefuse: func(remote, reason string) {
			refusals.warn(what+": connection refused", "remote", remote, "reason", reason)
		},
	}), nil
}
