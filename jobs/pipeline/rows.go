package pipeline

import (
	"context"
	"errors"

	"github.com/pillarkit/pillar/pillar"
)

// eachRow calls fn with every row of table, decoded into a fresh T. A
// missing table is an error unless missingOK (then it has no rows).
func eachRow[T any](ctx context.Context, sn pillar.Snapshot, table string, missingOK bool, fn func(*T) error) error {
	rr, err := sn.ReadTable(ctx, table, nil)
	if missingOK && errors.Is(err, pillar.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer rr.Close()
	for rr.Next() {
		row := new(T)
		if err := rr.Scan(row); err != nil {
			return err
		}
		if err := fn(row); err != nil {
			return err
		}
	}
	return rr.Err()
}

// writeRows replaces table with rows, recorded as sorted by sortedBy (the
// caller sorts).
func writeRows[T any](ctx context.Context, tx pillar.Tx, table string, rows []T, sortedBy ...string) error {
	var zero T
	w, err := tx.WriteTable(ctx, table, zero, &pillar.WriteOptions{SortedBy: sortedBy})
	if err != nil {
		return err
	}
	for i := range rows {
		if err := w.Write(&rows[i]); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}
