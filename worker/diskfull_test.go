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

// A claim is durable before its work starts. When the ledger's disk is
// full, the claims' commit fails, so no work runs, nothing is deleted, and
// every message comes back for redelivery, again and again while the disk
// stays full; the ledger holds no record of them.
func TestWorker_LedgerDiskFull(t *testing.T) {
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
	cfg := b.config() // min back-off 500ms: claims are tried again within the test
	stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	time.Sleep(3 * time.Second)
	st := stop()

	if runs := b.runs.counts(); len(runs) != 0 {
		t.Errorf("work ran with a full ledger disk: %d operations", len(runs))
	}
	if st.Deleted != 0 || st.Completed != 0 || st.Claimed != 0 {
		t.Errorf("claimed %d, completed %d, deleted %d with a full ledger disk, want 0", st.Claimed, st.Completed, st.Deleted)
	}
	if st.Received <= n {
		t.Errorf("received %d deliveries of %d messages: the redeliveries were not seen, the test tested less than it says", st.Received, n)
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
	t.Logf("received %d deliveries, no work ran", st.Received)
}
