package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sqsonce/sqsonce/ledger"
)

// fillLedger writes records in every state into the env's ledger file.
func fillLedger(t *testing.T, e *procEnv) {
	t.Helper()
	ctx := context.Background()
	db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for key, fate := range map[string]string{
		"pay-1": "complete", "pay-2": "complete", "pay-3": "failed", "pay-4": "permanent", "ord-1": "in_progress",
	} {
		if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Hour, MessageID: "m-" + key}); err != nil {
			t.Fatal(err)
		}
		switch fate {
		case "complete":
			err = db.Complete(ctx, ledger.Completion{Key: key, Owner: "o", Result: []byte("receipt " + key)})
		case "failed", "permanent":
			err = db.Fail(ctx, ledger.Failure{Key: key, Owner: "o", Err: "card declined", Permanent: fate == "permanent"})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestMain_Ledger(t *testing.T) {
	t.Parallel()

	// With the file free, and again through a running worker's socket.
	for _, running := range []bool{false, true} {
		name := "File"
		if running {
			name = "WorkerSocket"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, false, "cat >/dev/null\n")
			fillLedger(t, e)
			via := "file"
			if running {
				cmd, _ := e.start("run")
				defer func() {
					cmd.Process.Signal(syscall.SIGTERM)
					wait(t, cmd, 15*time.Second)
				}()
				e.waitFor("the worker's socket", 15*time.Second, func() bool {
					_, err := os.Stat(filepath.Join(e.dir, "ledger.db.sock"))
					return err == nil
				})
				via = "worker socket"
			}
			code, out := e.run("ledger get pay-1", "")
			if code != 0 || !strings.Contains(out, "complete") || !strings.Contains(out, "receipt pay-1") || !strings.Contains(out, "m-pay-1") {
				t.Fatalf("get: exit %d:\n%s", code, out)
			}
			// A record in progress: its claim's attempt is not counted
			// until it ends.
			code, out = e.run("ledger get ord-1", "")
			if code != 0 || !strings.Contains(out, "0 before the current claim's") {
				t.Fatalf("get of a record in progress: exit %d:\n%s", code, out)
			}
			code, out = e.run("ledger get pay-4 --json", "")
			var rec ledger.RecordJSON
			if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.State != "failed" || !rec.Permanent || rec.LastError != "card declined" || rec.Attempts != 1 {
				t.Fatalf("get --json: exit %d:\n%s", code, out)
			}
			if code, out := e.run("ledger get nope", ""); code != exitFailure || !strings.Contains(out, "no such operation") {
				t.Fatalf("get of an absent key: exit %d: %s", code, out)
			}
			code, out = e.run("ledger list --state failed", "")
			if code != 0 || !strings.Contains(out, "pay-3") || !strings.Contains(out, "pay-4") || strings.Contains(out, "pay-1") {
				t.Fatalf("list --state failed: exit %d:\n%s", code, out)
			}
			code, out = e.run("ledger list --prefix pay --limit 2 --json", "")
			if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, "first 2 shown") { // 2 records + the notice
				t.Fatalf("list --prefix --limit: exit %d:\n%s", code, out)
			}
			code, out = e.run("ledger stats --json", "")
			var st map[string]any
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st["complete"] != 2.0 || st["failed"] != 1.0 ||
				st["failed_permanently"] != 1.0 || st["in_progress"] != 1.0 || st["via"] != via {
				t.Fatalf("stats --json: exit %d:\n%s", code, out)
			}
			code, out = e.run("ledger export", "")
			if code != 0 || strings.Count(out, "\n") != 5 {
				t.Fatalf("export: exit %d:\n%s", code, out)
			}
			if code, out := e.run("ledger forget pay-2", ""); code != exitUsage || !strings.Contains(out, "--yes") {
				t.Fatalf("forget without a terminal or --yes: exit %d: %s", code, out)
			}
			if code, out := e.run("ledger forget pay-2 --yes", ""); code != 0 || !strings.Contains(out, "via the "+via) {
				t.Fatalf("forget --yes: exit %d: %s", code, out)
			}
			if code, _ := e.run("ledger get pay-2", ""); code != exitFailure {
				t.Fatal("forgotten key still there")
			}
			code, out = e.run("ledger compact", "")
			if running {
				// Said once, and clearly.
				want := "sqsonce ledger: cannot compact " + filepath.Join(e.dir, "ledger.db") + " while another sqsonce process (a running worker) has it open: stop the worker, then compact\n"
				if code != exitFailure || out != want {
					t.Fatalf("compact under a running worker: exit %d, want %d and %q; got:\n%s", code, exitFailure, want, out)
				}
			} else if code != 0 || !strings.Contains(out, "compacted") {
				t.Fatalf("compact: exit %d: %s", code, out)
			}
		})
	}

	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		for args, want := range map[string]string{
			"ledger":                  "missing ledger command",
			"ledger frob":             "unknown ledger command",
			"ledger get":              "takes 1 argument",
			"ledger list --state odd": "--state",
			"ledger list --limit -1":  "--limit",
		} {
			if code, out := e.run(args, ""); code != exitUsage || !strings.Contains(out, want) {
				t.Errorf("%s: exit %d: %s", args, code, out)
			}
		}
		if code, out := e.run("ledger stats", ""); code != exitFailure || !strings.Contains(out, "ledger.db") {
			t.Errorf("stats without a ledger file: exit %d: %s", code, out)
		}
	})
}

// A listing whose reader stops reading blocks in its write to stdout; a
// command line tool still stops on SIGTERM. Each listing command, its
// stdout a pipe that nobody reads, is sent SIGTERM once that pipe is
// full, and must exit with status 1 saying that its output was cut short.
func TestMain_LedgerStopsWhileBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	fillLedgerMany(t, e, 2000)
	for _, args := range []string{"ledger export", "ledger list --limit 0", "ledger list --limit 0 --json"} {
		// One at a time: each holds the ledger file.
		t.Run(strings.ReplaceAll(args, " ", "_"), func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close() // never read: the reader that went away
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(append(os.Environ(), e.vars...), "SQSONCE_TEST_AS_BINARY=1", "SQSONCE_TEST_ARGS="+args)
			stderr := &syncBuffer{}
			cmd.Stdout, cmd.Stderr = w, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close() // the child has its own copy
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					cmd.Process.Kill()
					cmd.Wait()
				}
			})
			// The pipe holds what was written and nothing is read: once what
			// it holds stops growing, the command waits in its write.
			for before, deadline := -1, time.Now().Add(20*time.Second); ; before = pipeHolds(t, r) {
				if time.Now().After(deadline) {
					t.Fatalf("the pipe did not fill up (it holds %d bytes):\n%s", pipeHolds(t, r), stderr)
				}
				time.Sleep(200 * time.Millisecond)
				if before > 0 && pipeHolds(t, r) == before {
					break
				}
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := wait(t, cmd, 30*time.Second)
			if code != exitFailure || !strings.Contains(stderr.String(), "cut short") {
				t.Fatalf("after SIGTERM: exit %d, want %d with a message that the output was cut short:\n%s", code, exitFailure, stderr)
			}
			t.Logf("after SIGTERM: exit %d: %s", code, stderr)
		})
	}
}

// fillLedgerMany writes n complete records, each with a result of 1 KiB,
// into the env's ledger file: more than any pipe holds when listed.
func fillLedgerMany(t *testing.T, e *procEnv, n int) {
	t.Helper()
	ctx := context.Background()
	db, err := ledger.Open(filepath.Join(e.dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	result := []byte(strings.Repeat("r", 1024))
	for start := 0; start < n; start += 500 {
		var claims []ledger.ClaimRequest
		var done []ledger.Completion
		for i := start; i < min(start+500, n); i++ {
			key := fmt.Sprintf("op-%05d", i)
			claims = append(claims, ledger.ClaimRequest{Key: key, Owner: "o", Lease: time.Hour, MessageID: "m-" + key})
			done = append(done, ledger.Completion{Key: key, Owner: "o", Result: result})
		}
		if _, err := db.ClaimBatch(ctx, claims); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(db.CompleteBatch(ctx, done)...); err != nil {
			t.Fatal(err)
		}
	}
}

// pipeHolds is how many bytes the pipe's read end r has unread.
func pipeHolds(t *testing.T, r *os.File) int {
	t.Helper()
	var n int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, r.Fd(), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatalf("FIONREAD: %v", errno)
	}
	return int(n)
}

// sqsonce send stops at SIGTERM also while it waits for its input (a pipe
// or a terminal that sends nothing more), and says that nothing was sent.
func TestMain_SendStopsWhileReading(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "exit 0\n")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // held open, never written: the input that never ends
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), e.vars...), "SQSONCE_TEST_AS_BINARY=1", "SQSONCE_TEST_ARGS=send")
	stderr := &syncBuffer{}
	cmd.Stdin, cmd.Stderr = r, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	time.Sleep(time.Second) // reading
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, cmd, 30*time.Second); code != exitFailure || !strings.Contains(stderr.String(), "nothing was sent") {
		t.Fatalf("after SIGTERM: exit %d, want %d saying nothing was sent:\n%s", code, exitFailure, stderr)
	}
}
