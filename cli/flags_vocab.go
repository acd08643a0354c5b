package cli

// The flag vocabulary of the pillar command (README, "Flag vocabulary"): one
// name and one environment variable per concept, on every command that has
// it. vocab_test.go walks the command tree and fails on a second spelling.

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/internal/objstore"
)

// Environment variables of the vocabulary.
const (
	envControl          = "PILLAR_CONTROL"
	envControlToken     = "PILLAR_CONTROL_TOKEN" // the token itself
	envControlTokenFile = "PILLAR_CONTROL_TOKEN_FILE"
	envStore            = "PILLAR_STORE"
	envObjstore         = "PILLAR_OBJSTORE"
)

// The S3 settings of every command with an --objstore (or another
// object-store URL flag). Unset, they fall back to the AWS environment.
var (
	s3EndpointFlag = &cli.StringFlag{Name: "s3-endpoint", EnvVars: []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"},
		Usage: "S3 endpoint for s3:// stores, e.g. http://127.0.0.1:7070 (default: AWS; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the AWS config)"}
	s3RegionFlag = &cli.StringFlag{Name: "s3-region", EnvVars: []string{"AWS_REGION", "AWS_DEFAULT_REGION"},
		Usage: "S3 region for s3:// stores (default: us-east-1)"}
	s3PathStyleFlag = &cli.BoolFlag{Name: "s3-path-style",
		Usage: "address buckets as ENDPOINT/BUCKET/KEY (always on with --s3-endpoint)"}
)

// s3Flags are the S3 flags, for a command's flag list.
func s3Flags() []cli.Flag { return []cli.Flag{s3EndpointFlag, s3RegionFlag, s3PathStyleFlag} }

// openObjstore opens an object-store URL with the command's S3 flags. An
// s3:// failure says where the endpoint, region and credentials came from,
// so that a missing --s3-endpoint is not a mystery.
func openObjstore(c *cli.Context, flag, url string) (objstore.Store, error) {
	opts := &objstore.Options{Logger: logger()}
	if hasFlag(c, "s3-endpoint") {
		opts.S3Endpoint = c.String("s3-endpoint")
	}
	if hasFlag(c, "s3-region") {
		opts.S3Region = c.String("s3-region")
	}
	if hasFlag(c, "s3-path-style") {
		opts.S3PathStyle = c.Bool("s3-path-style")
	}
	return openObjstoreWith(c.Context, flag, url, opts)
}

// openObjstoreWith is openObjstore with the options already made.
func openObjstoreWith(ctx context.Context, flag, url string, opts *objstore.Options) (objstore.Store, error) {
	st, err := objstore.Open(ctx, url, opts)
	if err != nil {
		if strings.HasPrefix(url, "s3://") {
			return nil, fmt.Errorf("%s %s: %w (endpoint: %s; set --s3-endpoint or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, region --s3-region or AWS_REGION, credentials AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the AWS config)",
				flagLabel(flag), url, err, s3EndpointSource(opts.S3Endpoint))
		}
		return nil, fmt.Errorf("%s: %w", flagLabel(flag), err)
	}
	return st, nil
}

func flagLabel(flag string) string {
	if flag == "" {
		return "object store"
	}
	return "--" + flag
}

func s3EndpointSource(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	for _, e := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
		if v := os.Getenv(e); v != "" {
			return v + " from " + e
		}
	}
	return "the public AWS endpoint (no --s3-endpoint, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL)"
}

// hasFlag reports whether the command (or a parent) defines the flag.
func hasFlag(c *cli.Context, name string) bool {
	for _, n := range c.FlagNames() {
		if n == name {
			return true
		}
	}
	for _, l := range c.Lineage() {
		if l.Command != nil {
			for _, f := range l.Command.Flags {
				for _, n := range f.Names() {
					if n == name {
						return true
					}
				}
			}
		}
	}
	return false
}

// controlToken is the bearer token for the control plane, on every command
// that talks to it or serves it: the contents of --token-file
// (PILLAR_CONTROL_TOKEN_FILE), else $PILLAR_CONTROL_TOKEN (a token is
// never taken from argv, where ps shows it); "" when none is given. Surrounding white space is
// trimmed; an empty file is an error.
func controlToken(c *cli.Context) (string, error) {
	if path := c.String("token-file"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("--token-file %s is empty", path)
		}
		return tok, nil
	}
	return strings.TrimSpace(os.Getenv(envControlToken)), nil
}
