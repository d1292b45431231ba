package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestConsole_WorkerDown: a worker killed with SIGKILL is marked down on the
// console's workers page once its last beat is two beats old (and not
// before), on every backend: the page reads the ledger's registry, whose
// beat ages are the ledger's.
func TestConsole_WorkerDown(t *testing.T) {
	t.Parallel()
	backends := []struct {
		name string
		env  func(t *testing.T) *procEnv
	}{
		{BackendBbolt, func(t *testing.T) *procEnv { return newEnv(t, false, "exit 0\n") }},
	}
	for _, b := range sharedBackends {
		backends = append(backends, struct {
			name string
			env  func(t *testing.T) *procEnv
		}{b.name, func(t *testing.T) *procEnv {
			e := newSharedEnv(t, b.new(t), "", "exit 0\n")
			e.initTable()
			return e
		}})
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.env(t)
			worker, workerOut := e.start("run")
			if b.name == BackendBbolt {
				// The console refuses a ledger file that does not exist yet.
				e.waitFor("the worker's ledger file", time.Minute, func() bool {
					_, err := os.Stat(filepath.Join(e.dir, "ledger.db"))
					return err == nil
				})
			}
			addr := freePort(t)
			console, consoleOut := e.start("console", "SQSONCE_CONSOLE_LISTEN="+addr)
			pid := strconv.Itoa(worker.Process.Pid)
			row := regexp.MustCompile(`data-pid="` + pid + `" data-status="(up|down)" data-beat-age-ms="([0-9]+)"`)
			// observe reads the worker's row of the workers page: its
			// status and the age of its last beat.
			observe := func() (status string, age time.Duration, ok bool) {
				resp, err := http.Get("http://" + addr + "/workers")
				if err != nil {
					return "", 0, false
				}
				defer resp.Body.Close()
				page, _ := io.ReadAll(resp.Body)
				m := row.FindSubmatch(page)
				if m == nil {
					return "", 0, false
				}
				ms, _ := strconv.Atoi(string(m[2]))
				return string(m[1]), time.Duration(ms) * time.Millisecond, true
			}
			e.waitFor("the worker on the workers page, up", time.Minute, func() bool {
				status, _, ok := observe()
				return ok && status == "up"
			})
			if err := worker.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			worker.Wait()
			killed := time.Now()
			var last time.Duration
			e.waitFor("the killed worker marked down", time.Minute, func() bool {
				status, age, ok := observe()
				if !ok {
					return false
				}
				// Down exactly when its last beat is more than two
				// beats old: not before, and not later.
				if (status == "down") != (age > 10*time.Second) {
					t.Fatalf("a beat %v old shows %s; want down after two beats (10s), up before\nworker:\n%s\nconsole:\n%s",
						age, status, workerOut, consoleOut)
				}
				last = age
				return status == "down"
			})
			t.Logf("%s: marked down %v after the kill, its last beat %v old", b.name, time.Since(killed).Round(100*time.Millisecond), last)
			console.Process.Signal(os.Interrupt)
			wait(t, console, 30*time.Second)
		})
	}
}
