package worker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/fstest"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// The worker starts claimed work once the ledger has decided the claims,
// while their commit is still in flight. When that commit fails (here: the
// ledger's disk is full), the work has run without a record: its message
// must not be deleted, the failure must be counted, and, since the ledger
// then answers only durable claims for a while, the redelivery must not run
// the work again while the disk stays full.
func TestWorker_ClaimCommitFailsAfterTheWorkStarted(t *testing.T) {
	t.Parallel()
	dir := fstest.Tmpfs(t, "1m")
	db, err := ledger.Open(filepath.Join(dir, "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fstest.Fill(t, dir)

	b := setup(t, options{})
	b.db = db
	// Long keys: the first batch's records, index entries included, need
	// more pages than a fresh file has free, so their commit must grow it.
	const n = 8
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", strings.Repeat("k", 480), i)
		b.send(fmt.Sprintf(`{"id":%q}`, keys[i]))
	}
	cfg := b.config() // visibility 2s: redeliveries come within the test
	stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	waitUntil(t, "some work ran", 10*time.Second, func() bool { return len(b.runs.counts()) > 0 })
	// Past two visibility timeouts: the messages come back at least once.
	time.Sleep(5 * time.Second)
	st := stop()

	runs := b.runs.counts()
	for key, c := range runs {
		if c != 1 {
			t.Errorf("%s…: ran %d times while the disk was full, want once", key[:8], c)
		}
	}
	if st.Deleted != 0 || st.Completed != 0 {
		t.Errorf("deleted %d, completed %d with a full ledger disk, want 0", st.Deleted, st.Completed)
	}
	if st.CompleteFailed != int64(len(runs)) {
		t.Errorf("%d work done but not recorded counted, %d operations ran", st.CompleteFailed, len(runs))
	}
	if st.Received <= int64(len(runs)) {
		t.Errorf("received %d deliveries for %d runs: the redeliveries were not seen, the test tested less than it says", st.Received, len(runs))
	}
	for _, key := range keys {
		if _, err := db.Get(context.Background(), key); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s…: Get says %v, want ErrNotFound (no claim reached the disk)", key[:8], err)
		}
	}
	visible, inflight := sqstest.Count(t, b.client, b.queue.URL)
	if visible+inflight != n {
		t.Errorf("%d messages left in the queue, want all %d", visible+inflight, n)
	}
	t.Logf("runs %d, received %d, not recorded %d", len(runs), st.Received, st.CompleteFailed)
}
