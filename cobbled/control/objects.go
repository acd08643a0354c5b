package control

import "context"

// Objects is the part of the object store that garbage collection needs.
// internal/objstore's Store satisfies it through ObjectsFunc adapters (its
// List returns objstore.Info; the control plane only needs the keys).
type Objects interface {
	// ListKeys returns the keys under prefix.
	ListKeys(ctx context.Context, prefix string) ([]string, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// ObjectsFuncs adapts two functions to Objects.
type ObjectsFuncs struct {
	ListKeysFunc func(ctx context.Context, prefix string) ([]string, error)
	DeleteFunc   func(ctx context.Context, key string) error
}

// ListKeys calls ListKeysFunc.
func (f ObjectsFuncs) ListKeys(ctx context.Context, prefix string) ([]string, error) {
	return f.ListKeysFunc(ctx, prefix)
}

// Delete calls DeleteFunc.
func (f ObjectsFuncs) Delete(ctx context.Context, key string) error { return f.DeleteFunc(ctx, key) }
