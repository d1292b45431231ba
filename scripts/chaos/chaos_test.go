package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sqsonce/sqsonce/internal/sqstest"
)

// raceEnabled is set when the test binary has the race detector: the chaos
// worker is then built with it too.
var raceEnabled bool

// TestChaosShort runs the chaos campaign in its short form: about 1,500
// deliveries, 8 kills (two in each window, two while the downstream serves
// a request, two at random), 2 drains, every fault kind, the ledger fault
// phases, a reader that stops on the ledger socket for 6 s and two
// compactions racing a restart; beside it the FIFO campaign with 150
// operations in 4 groups (3 bursts), 3 kills, a drain, 2 forgets of waiting
// operations and 2 replay rounds, and the shared-ledger campaign with 3
// workers on PostgreSQL, 300 operations, 6 kills, 2 drains, a hard stop of
// the database, a refusal and a cut of its connections; after that the
// FIFO campaign's part on a shared ledger, 2 workers and 50 operations, a
// stall of the database and a worker stopped while messages wait; held to
// the same zeros as `make chaos`. It needs the local
// SQS-compatible server, PostgreSQL's server binaries (make test runs it
// through scripts/with-postgres.sh, which installs them) and root (for the
// tmpfs of the ledger phases).
//
// It leaves the transactional campaign out: it comes after the
// shared-ledger one, and even its short form (`go run ./scripts/chaos
// -short -tx-only`, about 40 s) must wait out leases and a hard stop of its
// database; that would add more than half a minute to make test.
// TestTCPProxy_LoseCommits tests its proxy's lost commits on the test
// server.
func TestChaosShort(t *testing.T) {
	cfg := ShortConfig()
	cfg.Tx.Ops = 0
	cfg.Endpoint = sqstest.Endpoint(t)
	cfg.Race = raceEnabled
	// cfg.Dir stays empty: the campaign makes a work directory of its own,
	// removes it when it passes and keeps it with its report when it fails
	// (the log's last line names it), which t.TempDir would not.
	var table bytes.Buffer
	rep, err := Run(t.Context(), cfg, &table, testLog{t})
	t.Logf("\n%s", table.String())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatal("the campaign found a broken promise or a failed check: see the table, the findings above and the work directory named in the log's last line")
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
