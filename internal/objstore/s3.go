package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// metaSHA256 is the user metadata key holding an object's SHA-256 (hex).
const metaSHA256 = "sha256"

// S3 is a Store in an S3 bucket, under a key prefix.
type S3 struct {
	client *s3.Client
	//lint:ignore SA1019 transfermanager is not in the pinned module set; manager.Uploader is still supported
	up     *manager.Uploader
	bucket string
	prefix string // "" or ending in "/"
	opts   Options
}

func openS3(ctx context.Context, bucket, prefix string, o *Options) (*S3, error) {
	retryer := func() aws.Retryer {
		return retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = o.S3MaxAttempts
			so.MaxBackoff = o.S3MaxBackoff
			so.Backoff = retry.NewExponentialJitterBackoff(o.S3MaxBackoff)
			// The default client-side token bucket gives up after a burst of
			// failures ("retry quota exceeded"); a batch upload would rather
			// keep trying until MaxAttempts.
			so.RateLimiter = ratelimit.None
		})
	}
	lopts := []func(*config.LoadOptions) error{
		config.WithRegion(o.S3Region),
		config.WithRetryer(retryer),
	}
	if o.S3AccessKeyID != "" {
		lopts = append(lopts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.S3AccessKeyID, o.S3SecretAccessKey, o.S3SessionToken)))
	}
	if o.HTTPClient != nil {
		lopts = append(lopts, config.WithHTTPClient(o.HTTPClient))
	} else {
		lopts = append(lopts, config.WithHTTPClient(awshttp.NewBuildableClient().
			WithDialerOptions(func(d *net.Dialer) { d.Timeout = min(o.S3Timeout, 5*time.Second) }).
			WithTransportOptions(func(tr *http.Transport) { tr.ResponseHeaderTimeout = o.S3Timeout }).
			WithReadTimeout(o.S3Timeout)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lopts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: s3://%s: aws config: %w", bucket, err)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.S3Endpoint != "" {
			so.BaseEndpoint = aws.String(o.S3Endpoint)
		}
		so.UsePathStyle = o.S3PathStyle
		// Only send and check the SDK's CRC checksums where S3 requires them:
		// we verify our own SHA-256 on download, and S3-compatible servers
		// differ in their support for trailing checksums.
		so.Logger = logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
			msg := fmt.Sprintf(format, v...)
			if strings.Contains(msg, "unretryable error") {
				// The caller gets this error and decides: a 404 on a probe
				// (is the batch there yet?) is expected, not a warning.
				o.Logger.Debug("objstore: s3: "+msg, "bucket", bucket)
				return
			}
			o.Logger.Warn("objstore: s3: "+msg, "bucket", bucket)
		})
		so.ClientLogMode = aws.LogRetries
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	//lint:ignore SA1019 transfermanager is not in the pinned module set; manager.Uploader is still supported
	up := manager.NewUploader(client, func(u *manager.Uploader) {
		u.PartSize = o.S3PartSize
		u.Concurrency = o.S3Concurrency
		u.LeavePartsOnError = false
	})
	s := &S3{client: client, up: up, bucket: bucket, prefix: prefix, opts: *o}
	if !o.S3SkipCheck {
		// A one-key listing rather than HeadBucket: its error has a body
		// with a code (InvalidAccessKeyId, NoSuchBucket), and we need to list.
		_, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(1)})
		if err != nil {
			err = s.mapErr("open", "", err)
			if errors.Is(err, ErrAccessDenied) {
				return nil, fmt.Errorf("%w (check the access key and secret: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the store options)", err)
			}
			if errors.Is(err, ErrNotFound) {
				return nil, fmt.Errorf("objstore: s3://%s: bucket does not exist: %w", bucket, err)
			}
			return nil, err
		}
	}
	return s, nil
}

// String returns the store's URL.
func (s *S3) String() string { return "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/") }

func (s *S3) full(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return s.prefix + key, nil
}

// mapErr wraps an SDK error with the operation and object, and the matching
// sentinel.
func (s *S3) mapErr(op, key string, err error) error {
	where := "s3://" + s.bucket + "/" + s.prefix + key
	var sentinel error
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchBucket":
			sentinel = ErrNotFound
		case "PreconditionFailed":
			sentinel = ErrExists
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden",
			"XAdminUserNotFound": // versitygw: unknown access key id (answered with 404)
			sentinel = ErrAccessDenied
		}
	}
	var re *awshttp.ResponseError
	if sentinel == nil && errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case 404:
			sentinel = ErrNotFound
		case 412:
			sentinel = ErrExists
		case 401, 403:
			sentinel = ErrAccessDenied
		}
	}
	var rerr *retry.MaxAttemptsError
	attempts := ""
	if errors.As(err, &rerr) {
		attempts = fmt.Sprintf(" (gave up after %d attempts)", rerr.Attempt)
	}
	if sentinel != nil {
		return fmt.Errorf("objstore: %s %s: %w: %w", op, where, sentinel, err)
	}
	return fmt.Errorf("objstore: %s %s%s: %w", op, where, attempts, err)
}

// Put implements Store. Objects over S3PartSize are uploaded in parts,
// S3Concurrency at a time. IfNotExists sends If-None-Match: * (on the
// CompleteMultipartUpload of a multipart upload).
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, opts *PutOptions) error {
	full, err := s.full(key)
	if err != nil {
		return err
	}
	var body io.Reader
	var sum string
	if opts != nil && opts.SHA256 != "" {
		body, sum = r, opts.SHA256
	} else if body, sum, err = s.prepareBody(r, size); err != nil {
		return fmt.Errorf("objstore: put %s/%s: %w", s, key, err)
	}
	in := &s3.PutObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full), Body: body}
	if sum != "" {
		in.Metadata = map[string]string{metaSHA256: sum}
	}
	if size >= 0 && sum != "" {
		in.ContentLength = aws.Int64(size)
	}
	if opts != nil && opts.IfNotExists {
		in.IfNoneMatch = aws.String("*")
	}
	//lint:ignore SA1019 transfermanager is not in the pinned module set; manager.Uploader is still supported
	if _, err := s.up.Upload(ctx, in); err != nil {
		return s.mapErr("put", key, err)
	}
	return nil
}

// prepareBody computes the SHA-256 of the body when it can: by reading a
// seekable body once and rewinding it, or by buffering a body that fits in
// one part. A larger stream is uploaded without a recorded checksum.
func (s *S3) prepareBody(r io.Reader, size int64) (io.Reader, string, error) {
	h := sha256.New()
	if rs, ok := r.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, "", err
		}
		n, err := io.Copy(h, rs)
		if err != nil {
			return nil, "", err
		}
		if size >= 0 && n != size {
			return nil, "", fmt.Errorf("body has %d bytes, size says %d", n, size)
		}
		if _, err := rs.Seek(start, io.SeekStart); err != nil {
			return nil, "", err
		}
		return r, hex.EncodeToString(h.Sum(nil)), nil
	}
	if size >= 0 && size > s.opts.S3PartSize {
		return r, "", nil
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, s.opts.S3PartSize+1))
	if err != nil {
		return nil, "", err
	}
	if n > s.opts.S3PartSize { // a long stream of unknown size
		return io.MultiReader(&buf, r), "", nil
	}
	if size >= 0 && n != size {
		return nil, "", fmt.Errorf("body has %d bytes, size says %d", n, size)
	}
	h.Write(buf.Bytes())
	return bytes.NewReader(buf.Bytes()), hex.EncodeToString(h.Sum(nil)), nil
}

// Get implements Store. The reader verifies the recorded size and SHA-256 at
// EOF (ErrChecksum).
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	full, err := s.full(key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)})
	if err != nil {
		return nil, s.mapErr("get", key, err)
	}
	vr := &verifyReader{rc: out.Body, where: s.String() + "/" + key, size: -1, want: out.Metadata[metaSHA256]}
	if out.ContentLength != nil {
		vr.size = *out.ContentLength
	}
	if vr.want != "" {
		vr.h = sha256.New()
	}
	return vr, nil
}

type verifyReader struct {
	rc    io.ReadCloser
	where string
	h     hash.Hash
	want  string
	size  int64 // -1 when the server did not say
	n     int64
}

func (v *verifyReader) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.n += int64(n)
	if v.h != nil {
		v.h.Write(p[:n])
	}
	if err == io.EOF {
		if v.size >= 0 && v.n != v.size {
			return n, fmt.Errorf("objstore: get %s: %w: read %d bytes, object has %d", v.where, ErrChecksum, v.n, v.size)
		}
		if v.h != nil {
			if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
				return n, fmt.Errorf("objstore: get %s: %w: sha256 %s, recorded %s", v.where, ErrChecksum, got, v.want)
			}
		}
	}
	return n, err
}

func (v *verifyReader) Close() error { return v.rc.Close() }

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	full, err := s.full(key)
	if err != nil {
		return Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)})
	if err != nil {
		return Info{}, s.mapErr("stat", key, err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

// List implements Store.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket), Prefix: aws.String(s.prefix + prefix),
	})
	var out []Info
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.mapErr("list", prefix, err)
		}
		for _, o := range page.Contents {
			k := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			out = append(out, Info{Key: k, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	full, err := s.full(key)
	if err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)}); err != nil {
		err = s.mapErr("delete", key, err)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	return nil
}
