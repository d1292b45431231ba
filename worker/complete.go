package worker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// Recording completions: a few completers record the completions of
// finished work in as few ledger calls as they can. One completer at a
// time gathers from the channel while the others are in the ledger, so a
// busy worker records those that finished while the previous call was in
// flight together.
//
// The messages of one received batch usually finish together. A gathered
// completion whose batch still has messages starting or running waits for
// them, at most completeLinger, so that a batch's completions are recorded
// in one call (one round trip to a shared ledger, one commit to bbolt)
// rather than a call each as they trickle in. The message keeps its
// handler's room and stays out of sight meanwhile.
const (
	completers       = 2
	maxCompleteBatch = 64
	completeLinger   = 2 * time.Millisecond
)

// completion is one finished job's completion, its batch, and where its
// answer goes.
type completion struct {
	c    ledger.Completion
	b    *batch
	done chan error
}

// recordComplete records c, j's completion, through the completers and
// returns the ledger's answer for it.
func (w *Worker) recordComplete(j *job, c ledger.Completion) error {
	done := answers.Get().(chan error)
	w.completes <- completion{c: c, b: j.b, done: done}
	err := <-done
	answers.Put(done)
	return err
}

// answers holds the channels on which completers answer recordComplete:
// each carries one answer, which is taken before the channel goes back.
var answers = sync.Pool{New: func() any { return make(chan error, 1) }}

// completeLoop runs the completers until the channel is closed and drained.
func (w *Worker) completeLoop() {
	var wg sync.WaitGroup
	var gathering sync.Mutex
	for range completers {
		wg.Go(func() {
			batch := make([]completion, 0, maxCompleteBatch)
			cs := make([]ledger.Completion, 0, maxCompleteBatch)
			for {
				gathering.Lock()
				batch = w.gather(batch[:0])
				gathering.Unlock()
				if len(batch) == 0 {
					return // closed and drained
				}
				cs = cs[:0]
				for _, b := range batch {
					cs = append(cs, b.c)
				}
				// Not bound to the worker's stop: done work is recorded
				// whenever it can be; the ledger bounds its own calls.
				// With every handler taken, each of these holds a
				// handler's room that the next message waits for: the
				// embedded ledger commits them at once rather than wait
				// for the next claims to share the fsync.
				ctx := context.Background()
				if len(w.handlers) == cap(w.handlers) {
					ctx = ledger.WithoutDelay(ctx)
				}
				errs := w.ledger.CompleteBatch(ctx, cs)
				for i, b := range batch {
					b.done <- errs[i]
				}
			}
		})
	}
	wg.Wait()
}

// gather waits for a completion, then takes those already waiting and
// those that come while a gathered completion's batch has messages
// starting or running, for at most completeLinger. It returns nothing when
// the channel is closed and drained.
func (w *Worker) gather(batch []completion) []completion {
	c, ok := <-w.completes
	if !ok {
		return batch
	}
	batch = append(batch, c)
	var linger <-chan time.Time
	for len(batch) < maxCompleteBatch {
		select {
		case c, ok := <-w.completes:
			if !ok {
				return batch
			}
			batch = append(batch, c)
			continue
		default:
		}
		if !slices.ContainsFunc(batch, func(c completion) bool { return c.b != nil && c.b.running() }) {
			return batch
		}
		if linger == nil {
			t := time.NewTimer(w.completeLinger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case c, ok := <-w.completes:
			if !ok {
				return batch
			}
			batch = append(batch, c)
		case <-linger:
			return batch
		}
	}
	return batch
}
