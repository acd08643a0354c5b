package control

import (
	"fmt"
	"log/slog"
	"time"
)

// Options configure a Server.
type Options struct {
	// Store is the database. Required.
	Store *Store
	// Token is an admin bearer token: it may make every mutating call.
	// The default value "" adds none.
	Token string
	// Credentials are the role tokens (auth.go): node, writer and admin;
	// Server.SetCredentials replaces them while the server runs. A verified
	// client certificate with identity pillar://<role>/<name> is a
	// credential of that role too (a node's bound to node <name>). Token
	// or Credentials (or client certificates) are required unless NoAuth.
	// The default value nil adds none.
	Credentials []Credential
	// NoAuth lets mutating calls through without a token (tests, loopback
	// demos). The default value is false.
	NoAuth bool
	// ClientCerts says the gRPC server verifies client certificates
	// (mutual TLS), so certificate identities may stand in for tokens. The
	// default value is false.
	ClientCerts bool
	// Replicas is the number of replicas per partition. The default value
	// is 3.
	Replicas int
	// DownAfter is how long a node may miss heartbeats before it is marked
	// down (still assigned, no longer routed to). The default value is 10s.
	DownAfter time.Duration
	// ReassignAfter is how long a node may miss heartbeats before its
	// partitions are reassigned to other nodes. Must exceed DownAfter. The
	// default value is 5m.
	ReassignAfter time.Duration
	// ReconcileInterval is how often node states and the assignment are
	// recomputed. The default value is 1s.
	ReconcileInterval time.Duration
	// CallTimeout bounds the database work of one call (long polls get
	// MaxWait on top), so a database that hangs instead of refusing makes
	// calls fail with Unavailable rather than pile up. The default value
	// is 15s.
	CallTimeout time.Duration
	// MaxWait caps a long poll (ListBatches or GetRouting with a wait). The
	// default value is 30s.
	MaxWait time.Duration
	// DefaultLimit is ListBatches' limit when the caller gives none; MaxLimit
	// caps it. The default values are 100 and 1000.
	DefaultLimit, MaxLimit int
	// Objects is the object store garbage collection deletes batches from.
	// When it can also write (internal/objstore's Store), registered
	// manifests get their seq and parent written in (StampManifests), for
	// `pillar control rebuild`. The default value nil disables both.
	Objects Objects
	// GCInterval is how often garbage collection runs. The default value is
	// 1m.
	GCInterval time.Duration
	// RetireGrace is how long a retired publication's batches stay listed
	// (and their objects kept) before garbage collection deletes them, so
	// a publication retired by mistake can be registered again in the
	// meantime. The default value is 10m.
	RetireGrace time.Duration
	// Now is the clock. The default value is time.Now.
	Now func() time.Time
	// Logger receives state changes and errors. The default value discards.
	Logger *slog.Logger
	// Metrics, when set, records calls and state. The binary registers it
	// with its Prometheus registry. The default value nil records nothing.
	Metrics *Metrics
}

func (o *Options) ensureDefaults() {
	if o.Replicas <= 0 {
		o.Replicas = 3
	}
	if o.DownAfter <= 0 {
		o.DownAfter = 10 * time.Second
	}
	if o.ReassignAfter <= 0 {
		o.ReassignAfter = 5 * time.Minute
	}
	if o.ReconcileInterval <= 0 {
		o.ReconcileInterval = time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 15 * time.Second
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 30 * time.Second
	}
	if o.DefaultLimit <= 0 {
		o.DefaultLimit = 100
	}
	if o.MaxLimit <= 0 {
		o.MaxLimit = 1000
	}
	if o.GCInterval <= 0 {
		o.GCInterval = time.Minute
	}
	if o.RetireGrace <= 0 {
		o.RetireGrace = 10 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options against each other (after defaults).
func (o *Options) Validate() error {
	switch {
	case o.Store == nil:
		return fmt.Errorf("control: options: Store is required: %w", ErrInvalid)
	case o.Token == "" && len(o.Credentials) == 0 && !o.NoAuth && !o.ClientCerts:
		return fmt.Errorf("control: options: a Token, Credentials or ClientCerts is required (or NoAuth): %w", ErrInvalid)
	case o.ReassignAfter <= o.DownAfter:
		return fmt.Errorf("control: options: ReassignAfter %v must exceed DownAfter %v: %w", o.ReassignAfter, o.DownAfter, ErrInvalid)
	case o.DefaultLimit > o.MaxLimit:
		return fmt.Errorf("control: options: DefaultLimit %d exceeds MaxLimit %d: %w", o.DefaultLimit, o.MaxLimit, ErrInvalid)
	}
	return nil
}
