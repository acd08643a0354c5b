// Package objstore is the object store behind batches: one small interface
// (Store) with two implementations, a local directory (file://, the embedded
// default) and S3 (aws-sdk-go-v2).
//
// Keys are slash-separated relative paths ("batches/p00007/<id>/000001.sst"):
// no leading slash, no empty, "." or ".." segments. A Store opened on a URL
// with a prefix ("s3://bucket/prefix", "file:///dir") sees keys relative to
// that prefix.
//
// Guarantees:
//   - Put is atomic: a reader sees the old object, no object, or the whole new
//     one, never part of it. The local store writes a temp file, fsyncs it and
//     renames (or hard-links, for IfNotExists) it into place, then fsyncs the
//     directory. S3 objects appear only when the upload completes (multipart
//     for objects over Options.PartSize).
//   - PutOptions.IfNotExists is a conditional create: ErrExists when the key
//     exists. On S3 it is If-None-Match: * (412 → ErrExists), which the server
//     enforces, so two writers cannot both win.
//   - The S3 store records the object's SHA-256 in its metadata (x-amz-meta-
//     sha256) — the caller's PutOptions.SHA256, or its own hash when the body
//     can be read twice (an io.ReadSeeker such as *os.File) or fits in one
//     part — and Get verifies it at EOF: a mismatch is an error wrapping
//     ErrChecksum returned by the final Read. The local store checks a
//     caller's PutOptions.SHA256 while writing.
//   - Transient S3 failures (connection errors, 500, 502, 503, 504, SlowDown,
//     throttling) are retried with exponential backoff and jitter up to
//     Options.S3MaxAttempts (each retry is logged at WARN on Options.Logger);
//     then the error names the operation, the object and the attempts.
//   - Open on S3 checks the bucket and credentials (a one-key listing) so a wrong key
//     fails at start with ErrAccessDenied, not in the middle of an upload.
//
// A Store is safe for concurrent use by multiple goroutines.
package objstore
