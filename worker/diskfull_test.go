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
// the messages come back for redelivery while the disk stays full; the
// ledger holds no record of them. While claims fail, the worker receives
// one message at a time, after a back-off, to find out whether the ledger
// works again: such a lone claim may fit the pages the file still has
// free, and then its work runs, recorded as usual.
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

	if st.ClaimFailures == 0 || st.Received <= n {
		t.Fatalf("%d claim batches failed over %d deliveries of %d messages: the test tested less than it says", st.ClaimFailures, st.Received, n)
	}
	ran := b.runs.counts()
	if len(ran) > 2 || st.Claimed != int64(len(ran)) || st.Completed != int64(len(ran)) || st.Deleted != int64(len(ran)) {
		t.Errorf("%d operations ran; claimed %d, completed %d, deleted %d: want only lone probes, each claimed, completed and deleted", len(ran), st.Claimed, st.Completed, st.Deleted)
	}
	for _, key := range keys {
		rec, err := db.Get(context.Background(), key)
		switch {
		case ran[key] > 0 && (err != nil || rec.State != ledger.StateComplete):
			t.Errorf("%s… ran: its record is %+v, %v; want complete", key[:8], rec, err)
		case ran[key] == 0 && !errors.Is(err, ledger.ErrNotFound):
			t.Errorf("%s… did not run: Get says %v, want ErrNotFound (no claim reached the disk)", key[:8], err)
		}
	}
	visible, inflight := sqstest.Count(t, b.client, b.queue.URL)
	if visible+inflight != n-len(ran) {
		t.Errorf("%d messages left in the queue, want the %d that did not run", visible+inflight, n-len(ran))
	}
	t.Logf("received %d deliveries, %d claim batches failed, %d lone probes ran", st.Received, st.ClaimFailures, len(ran))
}
