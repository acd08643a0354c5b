package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Sentinel errors; every error a Store returns about one of these conditions
// wraps it.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrExists: a conditional create found the object already there.
	ErrExists = errors.New("objstore: object exists")
	// ErrAccessDenied: the credentials were rejected or lack permission.
	ErrAccessDenied = errors.New("objstore: access denied")
	// ErrChecksum: downloaded bytes do not match the recorded checksum or size.
	ErrChecksum = errors.New("objstore: checksum mismatch")
	// ErrBadKey: the key is not a valid object key.
	ErrBadKey = errors.New("objstore: invalid key")
)

// Info describes one object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// PutOptions modify a Put. A nil *PutOptions means the defaults.
type PutOptions struct {
	// IfNotExists makes the Put a conditional create: ErrExists when the
	// object exists. The default value is false (overwrite).
	IfNotExists bool
	// SHA256 is the body's SHA-256 (64 hex characters) when the caller knows
	// it: S3 records it without reading the body an extra time, the local
	// store checks it while writing (ErrChecksum on a mismatch). The default
	// value is "" (S3 hashes a seekable or small body itself).
	SHA256 string
}

// Store is an object store. See the package comment for the guarantees.
type Store interface {
	// Put stores size bytes read from r under key; size -1 means unknown.
	Put(ctx context.Context, key string, r io.Reader, size int64, opts *PutOptions) error
	// Get opens an object for reading; ErrNotFound if it does not exist.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes an object; ErrNotFound if it does not exist.
	Stat(ctx context.Context, key string) (Info, error)
	// List returns the objects whose keys start with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes an object; a missing object is not an error.
	Delete(ctx context.Context, key string) error
}

// Options configure Open. A nil *Options means the defaults. Fields that
// start with S3 apply to s3:// URLs only.
type Options struct {
	// S3Endpoint is the S3 endpoint URL, e.g. "http://127.0.0.1:7070". The
	// default value is $AWS_ENDPOINT_URL_S3, else $AWS_ENDPOINT_URL, else AWS.
	S3Endpoint string
	// S3Region. The default value is $AWS_REGION, else $AWS_DEFAULT_REGION,
	// else "us-east-1".
	S3Region string
	// S3AccessKeyID and S3SecretAccessKey (and S3SessionToken) are static
	// credentials. The default value is empty: the AWS default chain
	// ($AWS_ACCESS_KEY_ID, shared config files, instance roles).
	S3AccessKeyID, S3SecretAccessKey, S3SessionToken string
	// S3PathStyle addresses buckets as http://endpoint/bucket/key. The default
	// value is false, but a custom endpoint always uses path style.
	S3PathStyle bool
	// S3PartSize is the multipart part size and the threshold above which an
	// upload is multipart. The default value is 16 MiB (minimum 5 MiB).
	S3PartSize int64
	// S3Concurrency is the number of parts uploaded in parallel per object.
	// The default value is 4.
	S3Concurrency int
	// S3MaxAttempts per request, including the first. The default value is 6.
	S3MaxAttempts int
	// S3MaxBackoff caps the delay between attempts (exponential with jitter).
	// The default value is 5 s.
	S3MaxBackoff time.Duration
	// S3SkipCheck skips the bucket and credentials check in Open. The default
	// value is false.
	S3SkipCheck bool
	// S3Timeout bounds waiting on a peer that went silent (dropped packets
	// give no error): the response's headers after the request is sent, and
	// each read of a body; connecting is bounded by min(S3Timeout, 5 s).
	// Each bound ends the attempt and the retryer makes the next one;
	// without them an attempt on a black-holed link waits for the kernel's
	// TCP timeouts (minutes). Not used with HTTPClient. The default value is
	// 30 s.
	S3Timeout time.Duration
	// HTTPClient for S3. The default value is the SDK's client with the
	// S3Timeout bounds.
	HTTPClient *http.Client
	// Logger receives retries and slow operations. The default value discards.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.S3Endpoint == "" {
		o.S3Endpoint = firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	}
	if o.S3Region == "" {
		o.S3Region = firstEnv("AWS_REGION", "AWS_DEFAULT_REGION")
		if o.S3Region == "" {
			o.S3Region = "us-east-1"
		}
	}
	if o.S3Endpoint != "" {
		o.S3PathStyle = true
	}
	if o.S3PartSize == 0 {
		o.S3PartSize = 16 << 20
	}
	if o.S3Concurrency == 0 {
		o.S3Concurrency = 4
	}
	if o.S3MaxAttempts == 0 {
		o.S3MaxAttempts = 6
	}
	if o.S3Timeout == 0 {
		o.S3Timeout = 30 * time.Second
	}
	if o.S3MaxBackoff == 0 {
		o.S3MaxBackoff = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options against each other.
func (o Options) Validate() error {
	o.ensureDefaults()
	if o.S3PartSize < 5<<20 {
		return fmt.Errorf("objstore: S3PartSize %d below the S3 minimum of 5 MiB", o.S3PartSize)
	}
	if o.S3Concurrency < 1 || o.S3MaxAttempts < 1 {
		return fmt.Errorf("objstore: S3Concurrency %d and S3MaxAttempts %d must be positive", o.S3Concurrency, o.S3MaxAttempts)
	}
	if (o.S3AccessKeyID == "") != (o.S3SecretAccessKey == "") {
		return fmt.Errorf("objstore: S3AccessKeyID and S3SecretAccessKey must be set together")
	}
	return nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// Open opens the store named by url: "file:///abs/dir", a plain directory
// path, or "s3://bucket/prefix". A local directory is created if missing.
func Open(ctx context.Context, url string, opts *Options) (Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.ensureDefaults()
	switch {
	case strings.HasPrefix(url, "s3://"):
		rest := strings.TrimPrefix(url, "s3://")
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return nil, fmt.Errorf("objstore: %q: no bucket", url)
		}
		prefix = strings.Trim(prefix, "/")
		if prefix != "" {
			if err := checkKey(prefix); err != nil {
				return nil, fmt.Errorf("objstore: %q: prefix: %w", url, err)
			}
			prefix += "/"
		}
		return openS3(ctx, bucket, prefix, &o)
	case strings.HasPrefix(url, "file://"):
		return OpenLocal(strings.TrimPrefix(url, "file://"))
	case strings.Contains(url, "://"):
		return nil, fmt.Errorf("objstore: %q: unsupported scheme (want file:// or s3://)", url)
	case url == "":
		return nil, fmt.Errorf("objstore: empty URL")
	}
	return OpenLocal(url)
}

// checkKey validates an object key (see the package comment).
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrBadKey)
	}
	if strings.ContainsAny(key, "\\\x00") {
		return fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q has an empty, . or .. segment", ErrBadKey, key)
		}
	}
	return nil
}

// PutFile uploads a local file under key.
func PutFile(ctx context.Context, s Store, key, path string, opts *PutOptions) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("objstore: put %s: %w", key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("objstore: put %s: %w", key, err)
	}
	return s.Put(ctx, key, f, st.Size(), opts)
}

// GetFile downloads key into path (a temp file renamed into place).
func GetFile(ctx context.Context, s Store, key, path string) error {
	r, err := s.Get(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("objstore: get %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-get-*")
	if err != nil {
		return fmt.Errorf("objstore: get %s: %w", key, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, ctxReader{ctx, r}); err != nil {
		tmp.Close()
		return fmt.Errorf("objstore: get %s: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("objstore: get %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("objstore: get %s: %w", key, err)
	}
	return nil
}

// ReadAll reads a whole (small) object.
func ReadAll(ctx context.Context, s Store, key string) ([]byte, error) {
	r, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(ctxReader{ctx, r})
	if err != nil {
		return nil, fmt.Errorf("objstore: read %s: %w", key, err)
	}
	return b, nil
}

// ctxReader stops a long copy when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
