package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// raceEnabled is set when the test binary has the race detector: the chaos
// worker is then built with it too.
var raceEnabled bool

var (
	binOnce sync.Once
	binDir  string // made by TestMain
	binErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sqsonce-chaos-test-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaries builds the chaos worker and sqsonce once for the package's
// tests.
func binaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		var out bytes.Buffer
		if _, _, binErr = buildBinaries(context.Background(), binDir, raceEnabled, &out); binErr != nil {
			binErr = fmt.Errorf("%w: %s", binErr, out.String())
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

// run runs campaigns with seed 1 and returns the report, its table logged.
func run(t *testing.T, broken string, campaigns ...*Campaign) *Report {
	t.Helper()
	cfg := Config{Endpoint: sqstest.Endpoint(t), Seed: 1, Race: raceEnabled, BinDir: binaries(t), Broken: broken}
	var table bytes.Buffer
	rep, err := Run(t.Context(), cfg, campaigns, &table, testLog{t})
	t.Logf("\n%s", table.String())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestChaosShort runs every campaign but the transactional one in its short
// form, held to the same zeros as `make chaos`: the standard one (about
// 1,500 deliveries, 8 kills, 2 drains, a pause, the ledger's faults, a
// reader that stops for 6 s and two compactions racing a restart), the
// FIFO one (150 operations in 4 groups, 3 kills, a drain, 2 forgets and 2
// replay rounds), the shared-ledger one (3 workers, 300 operations, a hard
// stop, a refusal and a cut of the database) and then the FIFO one on a
// shared ledger (2 workers, 50 operations, a stall and a pause). It needs
// the local SQS-compatible server, PostgreSQL's server binaries (make test
// runs it through scripts/with-postgres.sh, which installs them) and root
// (for the tmpfs of the ledger faults).
//
// It leaves the transactional campaign out: it comes after the
// shared-ledger one, and even its short form (`go run ./scripts/chaos
// -short -only tx`, about 40 s) must wait out leases and a hard stop of
// its database; that would add more than half a minute to make test.
// TestTCPProxy_LoseCommits tests its proxy's lost commits.
func TestChaosShort(t *testing.T) {
	rep := run(t, "", Standard(true), FIFO(true), Shared(true), FIFOShared(true))
	if !rep.OK() {
		t.Fatal("the campaigns found a broken promise or a failed check: see the table, the findings above and the work directory named in the log's last line")
	}
}

// TestAudit_BrokenWorker runs a small campaign (one worker on a bbolt
// ledger, 100 operations, two kills in window a, one at random, a drain)
// against a chaos worker that breaks the promise on purpose, once for each
// way: the audit must fail, on the line that names what it broke.
func TestAudit_BrokenWorker(t *testing.T) {
	for _, tc := range []struct{ broken, line string }{
		{"delete-first", "messages deleted before their operation was recorded complete or dead-lettered"},
		{"skip-claim", "handler calls after their claim was lost (taken over, released, never written)"},
	} {
		t.Run(tc.broken, func(t *testing.T) {
			t.Parallel()
			c := Standard(true)
			c.Name, c.Faults, c.System.Quiesce = "broken-"+tc.broken, nil, time.Minute
			c.Load = standardLoad(100, 200, time.Second)
			c.Runs = Runs{Duration: 8 * time.Second, Ends: map[string]int{endWindowA: 2, endKill: 1, endTerm: 1}}
			rep := run(t, tc.broken, c)
			for _, ch := range rep.checks() {
				if strings.HasSuffix(ch.Name, ": "+tc.line) {
					if ch.OK {
						t.Fatalf("%s: %s, with a worker that breaks the promise (-broken %s)", ch.Name, ch.Value, tc.broken)
					}
					return
				}
			}
			t.Fatalf("no check %q", tc.line)
		})
	}
}

// testLog writes the campaign's progress to the test log, line by line.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.t.Log(line)
	}
	return len(p), nil
}
