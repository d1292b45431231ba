package ledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestOpen_FileReplacedWhileWaiting starts an Open that has the ledger file
// open and waits for its lock while the file loses its name: replaced by a
// compaction, or removed. The Open must end up on the file that the path
// names, so that what it writes is there at the next Open.
func TestOpen_FileReplacedWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type opened struct {
		db  *DB
		err error
	}
	// startOpen starts an Open of path and returns once that Open has
	// opened the file, before it has the lock.
	startOpen := func(path string) <-chan opened {
		hasFile := make(chan struct{})
		var once sync.Once
		opts := Options{LockTimeout: 30 * time.Second, openFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			once.Do(func() { close(hasFile) })
			return f, err
		}}
		done := make(chan opened, 1)
		go func() {
			db, err := Open(path, opts)
			done <- opened{db, err}
		}()
		<-hasFile
		return done
	}
	// writeThrough writes a record through the waiting Open's ledger, then
	// checks that a new Open of path finds it.
	writeThrough := func(t *testing.T, path string, waiting <-chan opened) {
		t.Helper()
		var o opened
		select {
		case o = <-waiting:
		case <-time.After(30 * time.Second):
			t.Fatal("the waiting Open did not return")
		}
		if o.err != nil {
			t.Fatal(o.err)
		}
		if _, err := o.db.Claim(ctx, ClaimRequest{Key: "after", Owner: "o", Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if err := o.db.Complete(ctx, Completion{Key: "after", Owner: "o", Result: []byte("kept")}); err != nil {
			t.Fatal(err)
		}
		if err := o.db.Close(); err != nil {
			t.Fatal(err)
		}
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rec, err := db.Get(ctx, "after")
		if err != nil || string(rec.Result) != "kept" {
			t.Fatalf("the record written by the Open that waited: %+v, %v; want it complete at the path", rec, err)
		}
	}

	t.Run("Compacted", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			key := fmt.Sprintf("k%03d", i)
			if _, err := db.Claim(ctx, ClaimRequest{Key: key, Owner: "o", Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if i < 200 {
				if err := db.Forget(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
		}
		db.Close()
		var waiting <-chan opened
		if _, _, err := compact(path, time.Second, func() { waiting = startOpen(path) }); err != nil {
			t.Fatal(err)
		}
		writeThrough(t, path, waiting)
		db, err = Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Get(ctx, "k299"); err != nil {
			t.Fatalf("a record kept by the compaction: %v", err)
		}
	})

	t.Run("Removed", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		holder, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		waiting := startOpen(path)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		holder.Close()
		writeThrough(t, path, waiting)
	})

	// While another handle holds the file, compaction waits for the lock and
	// gives up: it never renames a file over a ledger in use.
	t.Run("CompactWhileHeld", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		holder, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		renamed := false
		if _, _, err := compact(path, 100*time.Millisecond, func() { renamed = true }); !errors.Is(err, ErrLocked) || renamed {
			t.Fatalf("compact while held: %v (reached the rename: %v), want ErrLocked", err, renamed)
		}
		if _, err := holder.Claim(ctx, ClaimRequest{Key: "k", Owner: "o", Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
	})
}
