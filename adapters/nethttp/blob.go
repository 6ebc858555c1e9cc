package nethttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// BlobStore keeps response bodies too large for the idempotency store's result
// limit (see WithBlobStore). Names are made by the middleware from the hashed key
// and the attempt's fence: they contain only ASCII letters, digits, '-' and '_', and
// a name is written at most once. Implementations must be safe for concurrent use.
type BlobStore interface {
	// Put stores body under name durably before it returns: the record that names
	// the blob is written after Put returns, and a replay may read it at once.
	Put(ctx context.Context, name string, body []byte) error
	// Open returns the body stored under name, or an error matching fs.ErrNotExist
	// when there is none.
	Open(ctx context.Context, name string) (io.ReadCloser, error)
}

// FileBlobStore is a BlobStore on a local (or shared) file system: one file per
// blob, written to a temporary file, synced and renamed into place, so a reader
// never sees a partial blob. Blobs are not removed on their own: call Sweep
// periodically with the store's retention.
type FileBlobStore struct {
	dir string
}

var _ BlobStore = (*FileBlobStore)(nil)

// NewFileBlobStore returns a blob store in dir, creating it (mode 0700) when
// needed.
func NewFileBlobStore(dir string) (*FileBlobStore, error) {
	if dir == "" {
		return nil, configError("NewFileBlobStore: empty directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("nethttp: blob directory: %w", err)
	}
	return &FileBlobStore{dir: dir}, nil
}

func (f *FileBlobStore) path(name string) (string, error) {
	if len(name) < 3 || len(name) > 200 {
		return "", fmt.Errorf("nethttp: blob name %q: give 3 to 200 characters", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(isAlpha(c) || isDigit(c) || c == '-' || c == '_') {
			return "", fmt.Errorf("nethttp: blob name %q: only ASCII letters, digits, '-' and '_' are allowed", name)
		}
	}
	return filepath.Join(f.dir, name[:2], name), nil
}

// Put writes body to a temporary file, syncs it and renames it to name.
func (f *FileBlobStore) Put(ctx context.Context, name string, body []byte) error {
	p, err := f.path(name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(body)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("nethttp: blob %s: %w", name, err)
	}
	return nil
}

// Open opens the blob called name.
func (f *FileBlobStore) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	p, err := f.path(name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return os.Open(p)
}

// Sweep removes blobs (and abandoned temporary files) last written more than
// olderThan ago and reports how many it removed. Give it at least the store's
// retention (consumer.WithRetention), so that no blob of a live record goes.
func (f *FileBlobStore) Sweep(ctx context.Context, olderThan time.Duration) (int, error) {
	if olderThan <= 0 {
		return 0, configError("Sweep(%v): give the store's retention", olderThan)
	}
	cutoff := time.Now().Add(-olderThan)
	removed := 0
	err := filepath.WalkDir(f.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		if info.ModTime().Before(cutoff) {
			if err := os.Remove(p); err == nil {
				removed++
			}
		}
		return nil
	})
	return removed, err
}
