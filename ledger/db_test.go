package ledger_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sqsonce/sqsonce/internal/fstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

func openTest(t testing.TB, path string, clock *ledgertest.Clock) *ledger.DB {
	t.Helper()
	opts := ledger.Options{Retention: ledgertest.Retention}
	if clock != nil {
		opts.Now = clock.Now
	}
	db, err := ledger.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestDB_Suite(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledgertest.Ledger {
		return openTest(t, filepath.Join(t.TempDir(), "ledger.db"), clock)
	})
}

func TestDB_Open(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CreatesFileAndParent", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "a", "b", "ledger.db")
		openTest(t, path, nil)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("file mode %v, want 0600", fi.Mode().Perm())
		}
		di, err := os.Stat(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if di.Mode().Perm() != 0o700 {
			t.Fatalf("directory mode %v, want 0700", di.Mode().Perm())
		}
	})

	t.Run("ReopenKeepsEverything", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			key := fmt.Sprintf("k%d", i)
			if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				if err := db.Complete(ctx, ledger.Completion{Key: key, Owner: "o", Result: []byte(key)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Get(ctx, "k1"); !errors.Is(err, ledger.ErrClosed) {
			t.Fatalf("get after close: %v", err)
		}
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "x", Owner: "o", Lease: time.Hour}); !errors.Is(err, ledger.ErrClosed) {
			t.Fatalf("claim after close: %v", err)
		}
		db = openTest(t, path, nil)
		rec, err := db.Get(ctx, "k42")
		if err != nil || rec.State != ledger.StateComplete || string(rec.Result) != "k42" {
			t.Fatalf("k42 after reopen: %+v, %v", rec, err)
		}
		st, err := db.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Complete != 50 || st.InProgress != 50 || st.FileSize == 0 {
			t.Fatalf("stats after reopen: %+v", st)
		}
	})

	t.Run("SecondOpenFailsFast", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		openTest(t, path, nil)
		// bbolt's lock is per open file description, so a second Open in this
		// process contends just as another process would.
		start := time.Now()
		_, err := ledger.Open(path, ledger.Options{LockTimeout: 200 * time.Millisecond})
		if !errors.Is(err, ledger.ErrLocked) || !strings.Contains(err.Error(), "another sqsonce process") {
			t.Fatalf("second open: %v, want ErrLocked naming another process", err)
		}
		if waited := time.Since(start); waited > 10*time.Second {
			t.Fatalf("second open waited %v", waited)
		}
	})

	t.Run("SecondProcessFailsFast", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		openTest(t, path, nil)
		out, err := child(t, "open", path).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "another sqsonce process") {
			t.Fatalf("child open: %v\n%s", err, out)
		}
	})

	t.Run("NotABoltFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, []byte(strings.Repeat("this is not a database\n", 1000)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ledger.Open(path, ledger.Options{})
		if !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("open garbage: %v, want ErrCorrupt naming the path", err)
		}
	})

	t.Run("TinyFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ledger.Open(path, ledger.Options{}); !errors.Is(err, ledger.ErrCorrupt) {
			t.Fatalf("open 1-byte file: %v, want ErrCorrupt", err)
		}
	})

	t.Run("Truncated", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2000 {
			if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: fmt.Sprintf("key-%06d", i), Owner: "o", Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		// bbolt grows the file ahead of use; cut into the pages in use.
		var used int64
		b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		b.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
		b.Close()
		for _, size := range []int64{used / 2, used - 4096, 3 * 4096} {
			cut := filepath.Join(t.TempDir(), "cut.db")
			data, _ := os.ReadFile(path)
			if err := os.WriteFile(cut, data[:size], 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := ledger.Open(cut, ledger.Options{})
			if err == nil {
				db.Close()
				t.Fatalf("open of a copy cut to %d of %d bytes in use succeeded", size, used)
			}
			if !errors.Is(err, ledger.ErrCorrupt) {
				t.Fatalf("open cut copy: %v, want ErrCorrupt", err)
			}
		}
	})

	t.Run("CorruptRecord", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "o", Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("records")).Put([]byte("k"), []byte{1, 9, 9, 9})
		})
		db = openTest(t, path, nil)
		if _, err := db.Get(ctx, "k"); !errors.Is(err, ledger.ErrCorrupt) {
			t.Fatalf("get corrupt record: %v", err)
		}
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "o", Lease: time.Hour}); !errors.Is(err, ledger.ErrCorrupt) {
			t.Fatalf("claim over corrupt record: %v", err)
		}
		// Other keys are unaffected.
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "other", Owner: "o", Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("NewerSchema", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("meta")).Put([]byte("schema"), binary.BigEndian.AppendUint64(nil, ledger.SchemaVersion+1))
		})
		if _, err := ledger.Open(path, ledger.Options{}); !errors.Is(err, ledger.ErrSchema) {
			t.Fatalf("open newer schema: %v, want ErrSchema", err)
		}
	})

	t.Run("ForeignBoltFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "other.db")
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("someone-elses"))
			return err
		})
		if _, err := ledger.Open(path, ledger.Options{}); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), "not a ledger") {
			t.Fatalf("open foreign bbolt file: %v", err)
		}
	})

	t.Run("Directory", func(t *testing.T) {
		t.Parallel()
		if _, err := ledger.Open(t.TempDir(), ledger.Options{}); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Fatalf("open a directory: %v", err)
		}
	})
}

// TestDB_FileSystemFaults uses small tmpfs mounts to make the disk full or
// read-only under a real ledger.
func TestDB_FileSystemFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DiskFullDuringCommit", func(t *testing.T) {
		t.Parallel()
		dir := fstest.Tmpfs(t, "2m")
		path := filepath.Join(dir, "ledger.db")
		db := openTest(t, path, nil)
		big := make([]byte, ledger.MaxResultLen)
		var commitErr error
		done := map[string]bool{}
		for i := 0; i < 100000 && commitErr == nil; i++ {
			key := fmt.Sprintf("key-%06d", i)
			owner := "o" + key
			c, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Hour})
			if err != nil {
				commitErr = err
				break
			}
			if c.Outcome != ledger.Claimed {
				t.Fatalf("claim %s: %s", key, c.Outcome)
			}
			if err := db.Complete(ctx, ledger.Completion{Key: key, Owner: owner, Result: big}); err != nil {
				commitErr = err
				break
			}
			done[key] = true
		}
		if !errors.Is(commitErr, syscall.ENOSPC) {
			t.Fatalf("filling a 2 MiB disk ended with %v, want ENOSPC", commitErr)
		}
		if !strings.Contains(commitErr.Error(), path) {
			t.Fatalf("error does not name the ledger: %v", commitErr)
		}
		// What was acknowledged is there; the failed write is not half there.
		for key := range done {
			rec, err := db.Get(ctx, key)
			if err != nil || rec.State != ledger.StateComplete {
				t.Fatalf("acknowledged %s is %+v, %v", key, rec, err)
			}
		}
		db.Close()
		db = openTest(t, path, nil)
		st, err := db.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := db.ForEach(ctx, ledger.Filter{State: ledger.StateComplete}, func(ledger.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != len(done) || st.Complete != n {
			t.Fatalf("after reopen: %d complete records, counter %d, acknowledged %d", n, st.Complete, len(done))
		}
		t.Logf("disk full after %d completed operations: %v", len(done), commitErr)
	})

	t.Run("ReadOnlyFileSystem", func(t *testing.T) {
		t.Parallel()
		dir := fstest.Tmpfs(t, "4m")
		path := filepath.Join(dir, "ledger.db")
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
			t.Fatalf("remount read-only: %v: %s", err, out)
		}
		_, err = ledger.Open(path, ledger.Options{})
		if err == nil || !strings.Contains(err.Error(), "read-only") || !errors.Is(err, syscall.EROFS) {
			t.Fatalf("open on a read-only file system: %v", err)
		}
		_, err = ledger.Open(filepath.Join(dir, "sub", "new.db"), ledger.Options{})
		if err == nil || !errors.Is(err, syscall.EROFS) {
			t.Fatalf("create on a read-only file system: %v", err)
		}
	})

	t.Run("ReadOnlyFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ledger.db")
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		// Root ignores permission bits: bind-mount the file read-only.
		for _, args := range [][]string{{"--bind", path, path}, {"-o", "remount,ro,bind", path}} {
			if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
				t.Fatalf("mount %v: %v: %s", args, err, out)
			}
		}
		t.Cleanup(func() { exec.Command("umount", path).Run() })
		_, err = ledger.Open(path, ledger.Options{})
		if err == nil || !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), path) {
			t.Fatalf("open of a read-only file: %v", err)
		}
	})
}

// rawUpdate edits a closed ledger file with bbolt directly.
func rawUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// Child processes re-execute the test binary with LEDGER_TEST_CHILD set.
type childCmd struct{ *exec.Cmd }

func child(t *testing.T, args ...string) childCmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$")
	cmd.Env = append(os.Environ(), "LEDGER_TEST_CHILD="+strings.Join(args, "|"))
	return childCmd{cmd}
}

// TestChildProcess is not a test: it is the body of the child processes
// started by other tests.
func TestChildProcess(t *testing.T) {
	spec := os.Getenv("LEDGER_TEST_CHILD")
	if spec == "" {
		return
	}
	args := strings.Split(spec, "|")
	switch args[0] {
	case "open":
		db, err := ledger.Open(args[1], ledger.Options{LockTimeout: 200 * time.Millisecond})
		if err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		db.Close()
		os.Exit(0)
	case "complete-forever":
		completeForever(args[1])
	}
	os.Exit(4)
}

// completeForever claims and completes keys from many goroutines, printing
// each key after its Complete returned, until it is killed.
func completeForever(path string) {
	ctx := context.Background()
	db, err := ledger.Open(path, ledger.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	out := make(chan string, 1024)
	for w := range 16 {
		go func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("w%02d-%07d", w, i)
				owner := "o-" + key
				if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Hour}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(5)
				}
				if err := db.Complete(ctx, ledger.Completion{Key: key, Owner: owner}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(5)
				}
				out <- key
			}
		}()
	}
	w := bufio.NewWriter(os.Stdout)
	for key := range out {
		// Unbuffered enough: the parent reads lines as they come.
		fmt.Fprintln(w, key)
		if len(out) == 0 {
			w.Flush()
		}
	}
}

// TestDB_CrashDuringCommits kills a child process that is completing
// operations in batched commits and checks that every operation whose
// Complete had returned is complete after reopening.
func TestDB_CrashDuringCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	for round := range 3 {
		cmd := child(t, "complete-forever", path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var acked []string
		sc := bufio.NewScanner(stdout)
		target := 300 + round*500
		for sc.Scan() {
			acked = append(acked, sc.Text())
			if len(acked) == target {
				cmd.Process.Kill()
			}
		}
		cmd.Wait()
		if len(acked) < target {
			t.Fatalf("round %d: child printed %d keys before dying, want at least %d", round, len(acked), target)
		}
		db, err := ledger.Open(path, ledger.Options{})
		if err != nil {
			t.Fatalf("reopen after kill: %v", err)
		}
		for _, key := range acked {
			rec, err := db.Get(ctx, key)
			if err != nil || rec.State != ledger.StateComplete {
				db.Close()
				t.Fatalf("round %d: %s acknowledged complete but is %+v, %v", round, key, rec, err)
			}
		}
		st, err := db.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d acknowledged before the kill; ledger holds %d complete, %d in progress", round, len(acked), st.Complete, st.InProgress)
		// A new round starts over with the same key names: forget them by
		// using a fresh file.
		path = filepath.Join(t.TempDir(), fmt.Sprintf("ledger-%d.db", round))
	}
}

// TestDB_SweepPaths sweeps through the expiry index (few expired) and in key
// order (many expired), in small chunks, and checks that the records,
// counters and indexes agree afterwards.
func TestDB_SweepPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		expired int
	}{{"FewByIndex", 30}, {"ManyByKey", 700}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := ledgertest.NewClock()
			db, err := ledger.Open(filepath.Join(t.TempDir(), "l.db"), ledger.Options{Retention: time.Hour, Now: clock.Now, SweepChunk: 10})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			write := func(key string, state int) {
				owner := "o-" + key
				if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Minute}); err != nil {
					t.Fatal(err)
				}
				switch state % 3 {
				case 0:
					err = db.Complete(ctx, ledger.Completion{Key: key, Owner: owner})
				case 1:
					err = db.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: "x", Permanent: state%2 == 0})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			// Interleave old and new keys so expired records sit beside live ones.
			for i := range tc.expired {
				write(fmt.Sprintf("k%05d", 2*i), i)
			}
			clock.Advance(30 * time.Minute)
			for i := range 1000 - tc.expired {
				write(fmt.Sprintf("k%05d", 2*i+1), i)
			}
			clock.Advance(31 * time.Minute)
			n, err := db.Sweep(ctx)
			if err != nil || n != tc.expired {
				t.Fatalf("swept %d, %v; want %d", n, err, tc.expired)
			}
			st, err := db.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			live := 0
			if err := db.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error {
				if !strings.HasSuffix(r.Key, "1") && !strings.HasSuffix(r.Key, "3") && !strings.HasSuffix(r.Key, "5") &&
					!strings.HasSuffix(r.Key, "7") && !strings.HasSuffix(r.Key, "9") {
					t.Errorf("expired record %s survived", r.Key)
				}
				live++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if counted := st.InProgress + st.Complete + st.Failed + st.FailedPermanently; live != 1000-tc.expired || counted != live {
				t.Fatalf("%d live records, counters say %d, want %d", live, counted, 1000-tc.expired)
			}
			if n, _ := db.Sweep(ctx); n != 0 {
				t.Fatalf("second sweep removed %d", n)
			}
			// Everything left expires later and goes too.
			clock.Advance(time.Hour)
			if n, err := db.Sweep(ctx); err != nil || n != 1000-tc.expired {
				t.Fatalf("final sweep: %d, %v", n, err)
			}
			if st, _ := db.Stats(ctx); st.InProgress+st.Complete+st.Failed+st.FailedPermanently != 0 || !st.OldestInProgress.IsZero() {
				t.Fatalf("stats after sweeping everything: %+v", st)
			}
		})
	}
}

func TestCompact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := ledger.Open(path, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		key := fmt.Sprintf("k%05d", i)
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Hour, Fingerprint: make([]byte, 32)}); err != nil {
			t.Fatal(err)
		}
		if err := db.Complete(ctx, ledger.Completion{Key: key, Owner: "o", Result: make([]byte, 200)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2900 {
		if err := db.Forget(ctx, fmt.Sprintf("k%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := ledger.Compact(path, 100*time.Millisecond); !errors.Is(err, ledger.ErrLocked) {
		t.Fatalf("compact while held: %v", err)
	}
	db.Close()
	before, after, err := ledger.Compact(path, time.Second)
	if err != nil || after >= before/2 {
		t.Fatalf("compact: %d -> %d bytes, %v", before, after, err)
	}
	db = openTest(t, path, nil)
	st, err := db.Stats(ctx)
	if err != nil || st.Complete != 100 {
		t.Fatalf("after compaction: %+v, %v", st, err)
	}
	if rec, err := db.Get(ctx, "k02999"); err != nil || len(rec.Result) != 200 {
		t.Fatalf("record after compaction: %+v, %v", rec, err)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
}

func TestOpen_RetentionPastTheNanosecondRange(t *testing.T) {
	t.Parallel()
	_, err := ledger.Open(filepath.Join(t.TempDir(), "l.db"), ledger.Options{Retention: 2500000 * time.Hour})
	if !errors.Is(err, ledger.ErrInvalidArgument) {
		t.Fatalf("open with a 285-year retention: %v", err)
	}
}

// TestDB_LeaseLongerThanRetention checks that the refusal names both
// durations, so that the operator sees which setting to change.
func TestDB_LeaseLongerThanRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := ledger.Open(filepath.Join(t.TempDir(), "l.db"), ledger.Options{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "o", Lease: 90 * time.Minute})
	if !errors.Is(err, ledger.ErrInvalidArgument) || !strings.Contains(err.Error(), "1h30m0s") || !strings.Contains(err.Error(), "1h0m0s") {
		t.Fatalf("claim with a lease of 90m and a retention of 1h: %v", err)
	}
	if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "o", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err = db.Extend(ctx, "k", "o", 2*time.Hour)
	if !errors.Is(err, ledger.ErrInvalidArgument) || !strings.Contains(err.Error(), "2h0m0s") || !strings.Contains(err.Error(), "1h0m0s") {
		t.Fatalf("extend by 2h with a retention of 1h: %v", err)
	}
}
