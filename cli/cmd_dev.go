package cli

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/tlsconf"
)

// devCommand is `pillar dev`: local helpers for tests and the demo.
func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "local helpers for tests and the demo (certificates)",
		Subcommands: []*cli.Command{{
			Name:  "certs",
			Usage: "make a local CA and per-component TLS certificates (for tests and the demo, not production)",
			Description: `Writes ca.pem/ca.key and, per component, <role>-<name>.pem/.key (or <role>.pem/.key)
into --out, with Go's crypto and nothing downloaded: ECDSA P-256, each certificate valid
as a server for --host (default localhost, 127.0.0.1, ::1) and as a client, carrying the
identity URI pillar://<role>/<name> that servers check for authorization. Private keys are
written mode 0600. An existing ca.pem in --out is refused. Production certificates come
from your own CA; point --tls-cert, --tls-key, --tls-client-ca and --tls-ca at them.

Examples:
   pillar dev certs --out certs
   pillar dev certs --out certs --name control --name node/n1 --name router --host node1.internal --valid 720h`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "out", Required: true, Usage: "folder to write the CA and the certificates into"},
				&cli.StringSliceFlag{Name: "name", Usage: "component as <role>/<name> or <name>; repeatable (default: " + fmt.Sprint(tlsconf.DefaultDevNames) + ")"},
				&cli.StringSliceFlag{Name: "host", Usage: "DNS name or IP address the certificates are valid for; repeatable (default: localhost, 127.0.0.1, ::1)"},
				&cli.DurationFlag{Name: "valid", Value: 30 * 24 * time.Hour, Usage: "validity period"},
			},
			Action: func(c *cli.Context) error {
				files, err := tlsconf.DevCerts(c.String("out"), tlsconf.DevOptions{
					Names: c.StringSlice("name"), Hosts: c.StringSlice("host"), Valid: c.Duration("valid"),
				})
				if err != nil {
					return err
				}
				for _, f := range files {
					fmt.Fprintln(c.App.Writer, f)
				}
				return nil
			},
		}},
	}
}
