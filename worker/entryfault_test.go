package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// SQS may fail single entries of a DeleteMessageBatch on its side
// (SenderFault false) while the call succeeds. A message whose delete
// failed comes back once its visibility lapses; the ledger answers it as
// a duplicate, and it is deleted then, or later. Whatever entries fail,
// each operation runs and completes once, no message is deleted before
// its operation is recorded complete, and the queue is emptied in the end.
func TestWorker_DeleteEntryFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 20})
	const n = 20
	for i := range n {
		b.send(fmt.Sprintf(`{"id":"k%d"}`, i))
	}
	watch := &deleteWatch{base: loopback.Transport(), db: b.db, keys: map[string]string{}}
	faults := sqstest.NewFaults(21, watch)
	faults.Set("DeleteMessageBatch", sqstest.Rates{EntryFailure: 0.5})
	b.client = sqstest.NewClient(t, faults)
	stop := b.start(b.config(), worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		b.runs.add(m.Key)
		return nil
	}))
	b.waitEmpty(60 * time.Second)
	s := stop()

	for i := range n {
		key := fmt.Sprintf("k%d", i)
		if runs := b.runs.count(key); runs != 1 {
			t.Errorf("%s ran %d times, want once", key, runs)
		}
		if rec := b.record(key); rec.State != ledger.StateComplete {
			t.Errorf("%s: record %+v, want complete", key, rec)
		}
	}
	if early := watch.deletedEarly(); len(early) > 0 {
		t.Errorf("deleted before their operations were recorded complete: %v", early)
	}
	failed := faults.Count("DeleteMessageBatch", sqstest.EntryFailure)
	if failed == 0 {
		t.Fatal("no delete entry failed: the test proves nothing")
	}
	if s.Completed != n || s.DeleteFailed != int64(failed) || s.Duplicates < 1 || s.DeadLettered != 0 {
		t.Fatalf("stats %+v; want %d completed, %d deletes failed (the entries failed), duplicates deleted, none dead-lettered", s, n, failed)
	}
	if b.dlqCount() != 0 {
		t.Fatal("messages reached the dead-letter queue")
	}
}

// deleteWatch is a transport that learns the operation key of each
// receipt handle from the answers to ReceiveMessage (the body's "id"), and
// checks, for each entry of a DeleteMessageBatch that reaches it, that the
// key's operation is recorded complete in the ledger.
type deleteWatch struct {
	base http.RoundTripper
	db   *ledger.DB

	mu    sync.Mutex
	keys  map[string]string // receipt handle → key
	early []string
}

func (d *deleteWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	switch sqstest.Operation(req) {
	case "DeleteMessageBatch":
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		var in struct {
			Entries []struct{ ReceiptHandle string }
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, fmt.Errorf("deleteWatch: %s: %w", body, err)
		}
		for _, e := range in.Entries {
			d.mu.Lock()
			key := d.keys[e.ReceiptHandle]
			d.mu.Unlock()
			rec, err := d.db.Get(req.Context(), key)
			if err != nil || rec.State != ledger.StateComplete {
				d.mu.Lock()
				d.early = append(d.early, fmt.Sprintf("%q (record %+v, %v)", key, rec, err))
				d.mu.Unlock()
			}
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		return d.base.RoundTrip(req)
	case "ReceiveMessage":
		resp, err := d.base.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		var out struct {
			Messages []struct{ ReceiptHandle, Body string }
		}
		if err := json.Unmarshal(body, &out); err != nil {
			return nil, fmt.Errorf("deleteWatch: %s: %w", body, err)
		}
		d.mu.Lock()
		for _, m := range out.Messages {
			var v struct {
				ID string `json:"id"`
			}
			json.Unmarshal([]byte(m.Body), &v)
			d.keys[m.ReceiptHandle] = v.ID
		}
		d.mu.Unlock()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	return d.base.RoundTrip(req)
}

func (d *deleteWatch) deletedEarly() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.early
}
