package control

import (
	"context"

	"github.com/pillarkit/pillar/internal/objstore"
)

// Objects is the part of the object store that garbage collection needs;
// internal/objstore's Store (local directory or S3) satisfies it.
type Objects interface {
	// List returns the objects whose keys start with prefix.
	List(ctx context.Context, prefix string) ([]objstore.Info, error)
	// Delete removes an object; a missing object is not an error.
	Delete(ctx context.Context, key string) error
}
