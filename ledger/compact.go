package ledger

import (
	"encoding/binary"
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
//
// Compact holds the old file's lock until the new file has its name, and an
// Open that was waiting for that lock then opens the new file (see Open): a
// worker restarted during a compaction writes to the compacted ledger.
func Compact(path string, lockTimeout time.Duration) (before, after int64, err error) {
	return compact(path, lockTimeout, nil)
}

// compact is Compact. beforeRename, when set, is called once the new file is
// complete, before it replaces the old one, while the old file's lock is
// held: tests start an Open there that waits for that lock.
func compact(path string, lockTimeout time.Duration, beforeRename func()) (before, after int64, err error) {
	db, err := Open(path, Options{LockTimeout: lockTimeout})
	if err != nil {
		return 0, 0, err
	}
	// Closing lets go of the lock: only after the rename below.
	defer db.Close()
	fi, err := db.file.Stat()
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
	if err == nil {
		// The copy's counters are the file's, which Open checked: stamp
		// them as the new file's last commit's (see metaTallyTx).
		err = dst.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(metaTallyTx, binary.BigEndian.AppendUint64(nil, uint64(tx.ID())))
		})
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	if beforeRename != nil {
		beforeRename()
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
