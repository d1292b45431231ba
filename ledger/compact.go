package ledger

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Compact rewrites the ledger file at path into a new file holding only the
// live pages and replaces the old one with it, reclaiming the space of
// deleted records. It needs the file to itself: when another process holds
// it, it fails with ErrLocked after lockTimeout. Nothing changes when it
// fails; the new file is fsynced before it replaces the old one.
func Compact(path string, lockTimeout time.Duration) (before, after int64, err error) {
	db, err := Open(path, Options{LockTimeout: lockTimeout})
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	tmp := path + ".compact"
	os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	err = guard(func() error { return bolt.Compact(dst, db.bolt, 64<<20) })
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	nfi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	return fi.Size(), nfi.Size(), nil
}
