package control

import (
	"errors"
	"fmt"
)

// Sentinel errors. Server-side errors wrap one of these and the client maps
// gRPC status codes back to them, so callers on either side branch with
// errors.Is.
var (
	// ErrInvalid: the request is malformed (bad manifest, partition out of
	// range, empty node id, ...). gRPC InvalidArgument.
	ErrInvalid = errors.New("control: invalid argument")
	// ErrConflict: a batch id is already registered with a different
	// manifest. gRPC AlreadyExists.
	ErrConflict = errors.New("control: conflict")
	// ErrUnknownNode: the node id is not registered. gRPC NotFound.
	ErrUnknownNode = errors.New("control: unknown node")
	// ErrNotFound: the batch (sequence number) does not exist. gRPC NotFound.
	ErrNotFound = errors.New("control: not found")
	// ErrBackwards: ReportApplied with a seq below the recorded one. gRPC
	// FailedPrecondition.
	ErrBackwards = errors.New("control: applied seq goes backwards")
	// ErrPartitions: the partition count differs from the one recorded in the
	// database (or in a manifest). gRPC FailedPrecondition.
	ErrPartitions = errors.New("control: partition count mismatch")
	// ErrUnavailable: the database cannot be reached; retry later. gRPC
	// Unavailable.
	ErrUnavailable = errors.New("control: database unavailable")
	// ErrNodeUp: RemoveNode of a node that is up (without force). gRPC
	// FailedPrecondition.
	ErrNodeUp = errors.New("control: node is up")
	// ErrNotDelivered: RegisterBatch of a snapshot that supersedes
	// export-queue records whose deltas are not registered yet. Retry once
	// they are (Lorry delivers them). gRPC FailedPrecondition.
	ErrNotDelivered = errors.New("control: superseded deltas not delivered yet")
	// ErrNotReady: Promote (or Rollback) of a publication that not every
	// assigned replica holds yet, without force; the message names the
	// lagging replicas. gRPC FailedPrecondition.
	ErrNotReady = errors.New("control: publication not ready")
	// ErrNoPrevious: Rollback with no previous publication retained; the
	// message lists the retained ones. gRPC FailedPrecondition.
	ErrNoPrevious = errors.New("control: no previous publication")
	// ErrUnauthenticated: a mutating call without the right bearer token.
	// gRPC Unauthenticated.
	ErrUnauthenticated = errors.New("control: unauthenticated")
	// ErrPermissionDenied: a credential whose role may not make the call,
	// or a node credential acting for another node. gRPC
	// PermissionDenied.
	ErrPermissionDenied = errors.New("control: permission denied")
)

// errf returns an error wrapping sentinel with a message naming the thing at
// fault, e.g. errf(ErrInvalid, "partition %d: out of range", 70).
func errf(sentinel error, format string, a ...any) error {
	return &wrapped{msg: fmt.Sprintf(format, a...), sentinel: sentinel}
}

type wrapped struct {
	msg      string
	sentinel error
}

func (e *wrapped) Error() string { return "control: " + e.msg }
func (e *wrapped) Unwrap() error { return e.sentinel }
