package ytstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/storetest"
)

// TestConformanceFaultsOnFake runs the suite's fault cases against the
// store over the FAKE cluster, wrapped so that the master transactions'
// writes (create, move, set, remove, write, merge, commit) fail on demand,
// as a cluster refusing writes would.
func TestConformanceFaultsOnFake(t *testing.T) {
	storetest.RunFaults(t, func(t *testing.T) (pillar.Store, func(error)) {
		f := &faultYT{Client: newFakeYT(t)}
		s, err := Create(context.Background(), f, "//tmp/pillar", &Options{Partitions: 4, PollInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return s, f.set
	})
}

// faultYT is a yt.Client whose transactions' writes fail with err while it
// is set.
type faultYT struct {
	yt.Client
	mu  sync.Mutex
	err error
}

func (f *faultYT) set(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }
func (f *faultYT) get() error    { f.mu.Lock(); defer f.mu.Unlock(); return f.err }

func (f *faultYT) BeginTx(ctx context.Context, o *yt.StartTxOptions) (yt.Tx, error) {
	tx, err := f.Client.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return &faultTx{Tx: tx, f: f}, nil
}

type faultTx struct {
	yt.Tx
	f *faultYT
}

func (t *faultTx) CreateNode(ctx context.Context, p ypath.YPath, typ yt.NodeType, o *yt.CreateNodeOptions) (yt.NodeID, error) {
	if err := t.f.get(); err != nil {
		return yt.NodeID{}, err
	}
	return t.Tx.CreateNode(ctx, p, typ, o)
}

func (t *faultTx) MoveNode(ctx context.Context, src, dst ypath.YPath, o *yt.MoveNodeOptions) (yt.NodeID, error) {
	if err := t.f.get(); err != nil {
		return yt.NodeID{}, err
	}
	return t.Tx.MoveNode(ctx, src, dst, o)
}

func (t *faultTx) SetNode(ctx context.Context, p ypath.YPath, v any, o *yt.SetNodeOptions) error {
	if err := t.f.get(); err != nil {
		return err
	}
	return t.Tx.SetNode(ctx, p, v, o)
}

func (t *faultTx) RemoveNode(ctx context.Context, p ypath.YPath, o *yt.RemoveNodeOptions) error {
	if err := t.f.get(); err != nil {
		return err
	}
	return t.Tx.RemoveNode(ctx, p, o)
}

func (t *faultTx) WriteTable(ctx context.Context, p ypath.YPath, o *yt.WriteTableOptions) (yt.TableWriter, error) {
	if err := t.f.get(); err != nil {
		return nil, err
	}
	return t.Tx.WriteTable(ctx, p, o)
}

func (t *faultTx) StartOperation(ctx context.Context, typ yt.OperationType, spec any, o *yt.StartOperationOptions) (yt.OperationID, error) {
	if err := t.f.get(); err != nil {
		return yt.OperationID{}, err
	}
	return t.Tx.StartOperation(ctx, typ, spec, o)
}

func (t *faultTx) Commit() error {
	if err := t.f.get(); err != nil {
		_ = t.Tx.Abort()
		return err
	}
	return t.Tx.Commit()
}
