package local

import (
	"io"
	"os"
	"path/filepath"
)

// FS is the small part of a file system the store writes through. Tests wrap
// it to inject faults (a full disk, a crash at a chosen step).
type FS interface {
	Create(name string) (File, error)
	Open(name string) (*os.File, error)
	Rename(oldname, newname string) error
	Remove(name string) error
	RemoveAll(name string) error
	MkdirAll(name string) error
	// SyncDir fsyncs a directory so renames and creations in it are durable.
	SyncDir(name string) error
}

// File is a file being written.
type File interface {
	io.Writer
	Sync() error
	Close() error
	Name() string
}

// OSFS is the operating system's file system.
type OSFS struct{}

func (OSFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
}
func (OSFS) Open(name string) (*os.File, error) { return os.Open(name) }
func (OSFS) Rename(o, n string) error           { return os.Rename(o, n) }
func (OSFS) Remove(name string) error           { return os.Remove(name) }
func (OSFS) RemoveAll(name string) error        { return os.RemoveAll(name) }
func (OSFS) MkdirAll(name string) error         { return os.MkdirAll(name, 0o755) }
func (OSFS) SyncDir(name string) error {
	d, err := os.Open(filepath.Clean(name))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
