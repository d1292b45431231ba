package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
			code, out = e.run("ledger get pay-4 --json", "")
			var rec ledger.RecordJSON
			if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.State != "failed" || !rec.Permanent || rec.LastError != "card declined" {
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
				if code != exitFailure || !strings.Contains(out, "stop the worker") {
					t.Fatalf("compact under a running worker: exit %d: %s", code, out)
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
