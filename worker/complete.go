package worker

import (
	"context"
	"sync"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// Recording completions: a few completers record the completions of
// finished work in as few ledger calls as they can. One completer at a time
// gathers from the channel while the others are in the ledger, so a busy
// worker records those that finished while the previous call was in flight
// together.
//
// The messages of one received batch usually finish together. A completion
// whose batch still has claimed messages running waits for them, at most
// completeLinger, so that a batch's completions are recorded in one call
// (one round trip to a shared ledger, one commit to bbolt) rather than a
// call each as they trickle in. The wait is off the handler slot (the slot
// is free once the handler returns), and the message stays out of sight
// meanwhile. A completion with no batch still running is recorded at once.
const (
	completers       = 2
	maxCompleteBatch = 64
	completeLinger   = 2 * time.Millisecond
)

// completion is one finished job's completion, and where its answer goes.
// A completion with no done channel is not one: it says that a message of
// sib ended without completing, so its siblings need not wait for it.
type completion struct {
	c    ledger.Completion
	done chan error
	sib  *siblings
}

// siblings are the claimed messages of one received batch of a standard
// queue. Its fields belong to the completer that is gathering.
type siblings struct {
	running  int  // claimed messages of the batch not yet at the completers
	gathered bool // some of them are in the gathering batch
}

// newSiblings gives the claimed jobs of a received batch a shared siblings,
// before any of them starts.
func newSiblings(js []*job) {
	s := &siblings{}
	for _, j := range js {
		if j.claimed {
			s.running++
			j.sib = s
		}
	}
}

// recordComplete records c through the completers and returns the ledger's
// answer for it. The job's first completion is gathered with its siblings'.
func (w *Worker) recordComplete(j *job, c ledger.Completion) error {
	done := answers.Get().(chan error)
	w.completes <- completion{c: c, done: done, sib: j.sib}
	j.sib = nil
	err := <-done
	answers.Put(done)
	return err
}

// answers holds the channels on which completers answer recordComplete:
// each carries one answer, which is taken before the channel goes back.
var answers = sync.Pool{New: func() any { return make(chan error, 1) }}

// leaveSiblings tells the completers that j will not complete, so that its
// siblings do not wait for it. It does nothing once j has completed.
func (w *Worker) leaveSiblings(j *job) {
	if j.sib != nil {
		w.completes <- completion{sib: j.sib}
		j.sib = nil
	}
}

// completeLoop runs the completers until the channel is closed and drained.
func (w *Worker) completeLoop() {
	var wg sync.WaitGroup
	var gathering sync.Mutex
	for range completers {
		wg.Go(func() { w.completer(&gathering) })
	}
	wg.Wait()
}

func (w *Worker) completer(gathering *sync.Mutex) {
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
		// Not bound to the worker's stop: done work is recorded whenever
		// it can be; the ledger bounds its own calls.
		errs := w.ledger.CompleteBatch(context.Background(), cs)
		for i, b := range batch {
			b.done <- errs[i]
		}
	}
}

// gather waits for a completion, then takes those that come while the
// batches they belong to still have messages running, for at most
// completeLinger, and those already waiting. It returns nothing when the
// channel is closed and drained.
func (w *Worker) gather(batch []completion) []completion {
	open := 0 // batches in this one with messages still running
	var linger <-chan time.Time
	take := func(c completion) {
		if s := c.sib; s != nil {
			s.running--
			switch {
			case !s.gathered && c.done != nil && s.running > 0:
				s.gathered = true
				open++
			case !s.gathered && c.done != nil:
				s.gathered = true
			case s.gathered && s.running == 0:
				open--
			}
		}
		if c.done != nil {
			batch = append(batch, c)
		}
	}
	defer func() {
		for _, b := range batch {
			if b.sib != nil {
				b.sib.gathered = false
			}
		}
	}()
	for len(batch) == 0 {
		c, ok := <-w.completes
		if !ok {
			return batch
		}
		take(c)
	}
	for len(batch) < maxCompleteBatch {
		select {
		case c, ok := <-w.completes:
			if !ok {
				return batch
			}
			take(c)
			continue
		default:
		}
		if open == 0 {
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
			take(c)
		case <-linger:
			return batch
		}
	}
	return batch
}
