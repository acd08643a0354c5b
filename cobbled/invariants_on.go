//go:build invariants

package cobbled

import (
	"sync"

	"github.com/linxGnu/grocksdb"
)

var closedDBs sync.Map // *grocksdb.DB → struct{}

// invariantClosed panics when db was closed before.
func invariantClosed(db *grocksdb.DB) {
	if _, dup := closedDBs.LoadOrStore(db, struct{}{}); dup {
		panic("cobbled: invariant violated: database handle closed twice")
	}
}
