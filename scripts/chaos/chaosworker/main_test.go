package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// TestRun_StopWhileTheLedgerOpens sends the chaos worker a SIGTERM while
// it waits for its ledger file's lock (the campaign drains runs that may
// have just started, on a loaded machine): the signal must wait for the
// worker, which then stops cleanly (0), as sqsonce run does, rather than
// kill the process.
func TestRun_StopWhileTheLedgerOpens(t *testing.T) {
	c := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, c, sqstest.QueueOptions{})
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	held, err := ledger.Open(path, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	o := event.WorkerConfig{Run: 1, Endpoint: sqstest.Endpoint(t), Queue: q.URL, Ledger: path, Downstream: "http://127.0.0.1:9/op",
		Dir: dir, CrashLog: filepath.Join(dir, "crash.log"), Seed: 1, Concurrency: 1, Visibility: 5 * time.Second,
		HandlerTimeout: time.Second, Grace: time.Second, LockTimeout: time.Minute}
	code := make(chan int, 1)
	go func() { code <- run(o) }()

	// The ledger file open twice in this process: run waits for its lock.
	opened := func() bool {
		fds, _ := os.ReadDir("/proc/self/fd")
		n := 0
		for _, fd := range fds {
			if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); target == path {
				n++
			}
		}
		return n >= 2
	}
	for deadline := time.Now().Add(30 * time.Second); !opened(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not open its ledger file")
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Give the signal time to arrive while the lock is still held (the
	// verdict does not depend on it: exit 0 is wanted either way).
	time.Sleep(100 * time.Millisecond)
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("stopped while its ledger opened: exit %d, want 0", c)
		}
	case <-time.After(time.Minute):
		t.Fatal("the worker did not stop within a minute of the signal")
	}
}
