package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const tmpPrefix = ".tmp-"

// Local is a Store in a local directory.
type Local struct{ root string }

// OpenLocal opens (creating if needed) a directory store.
func OpenLocal(dir string) (*Local, error) {
	if dir == "" {
		return nil, fmt.Errorf("objstore: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	return &Local{root: abs}, nil
}

// String returns the store's URL.
func (l *Local) String() string { return "file://" + l.root }

// Root returns the directory.
func (l *Local) Root() string { return l.root }

func (l *Local) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	for _, seg := range strings.Split(key, "/") {
		if strings.HasPrefix(seg, tmpPrefix) {
			return "", fmt.Errorf("%w: %q: segments starting with %q are reserved", ErrBadKey, key, tmpPrefix)
		}
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64, opts *PutOptions) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("objstore: put %s: %w", l.String()+"/"+key, err) }
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return fail(err)
	}
	name := tmp.Name()
	defer os.Remove(name) // after a rename there is nothing left to remove
	closed := false
	defer func() {
		if !closed {
			tmp.Close()
		}
	}()
	var w io.Writer = tmp
	var h hash.Hash
	if opts != nil && opts.SHA256 != "" {
		h = sha256.New()
		w = io.MultiWriter(tmp, h)
	}
	n, err := io.CopyBuffer(w, ctxReader{ctx, r}, make([]byte, 1<<20))
	if err != nil {
		return fail(err)
	}
	if size >= 0 && n != size {
		return fail(fmt.Errorf("read %d bytes, size says %d", n, size))
	}
	if h != nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != opts.SHA256 {
			return fail(fmt.Errorf("%w: body sha256 %s, caller says %s", ErrChecksum, got, opts.SHA256))
		}
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	closed = true
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if opts != nil && opts.IfNotExists {
		// link(2) refuses to replace an existing name: an atomic create.
		if err := os.Link(name, p); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fail(ErrExists)
			}
			return fail(err)
		}
	} else if err := os.Rename(name, p); err != nil {
		return fail(err)
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fail(err)
		}
	}
	return nil
}

// Get implements Store.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("objstore: get %s/%s: %w", l, key, ErrNotFound)
		}
		return nil, fmt.Errorf("objstore: get %s/%s: %w", l, key, err)
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("objstore: get %s/%s: %w", l, key, ErrNotFound)
	}
	return f, nil
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, key string) (Info, error) {
	p, err := l.path(key)
	if err != nil {
		return Info{}, err
	}
	st, err := os.Stat(p)
	if err != nil || st.IsDir() {
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return Info{}, fmt.Errorf("objstore: stat %s/%s: %w", l, key, ErrNotFound)
		}
		return Info{}, fmt.Errorf("objstore: stat %s/%s: %w", l, key, err)
	}
	return Info{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// List implements Store.
func (l *Local) List(ctx context.Context, prefix string) ([]Info, error) {
	start := l.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		if err := checkKey(prefix[:i]); err != nil {
			return nil, err
		}
		start = filepath.Join(l.root, filepath.FromSlash(prefix[:i]))
	}
	var out []Info
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		st, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		out = append(out, Info{Key: key, Size: st.Size(), ModTime: st.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: list %s/%s: %w", l, prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("objstore: delete %s/%s: %w", l, key, err)
	}
	return nil
}
