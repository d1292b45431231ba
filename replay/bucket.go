package replay

import (
	"sync"
	"time"
)

// bucket is a token bucket: a steady rate of messages with bursts of at
// most one batch. It is safe for concurrent use.
type bucket struct {
	mu       sync.Mutex
	interval time.Duration // per message
	burst    time.Duration // interval × burst size
	next     time.Time     // when the tokens taken so far are paid for
}

func newBucket(rate float64) *bucket {
	interval := max(time.Duration(float64(time.Second)/rate), time.Nanosecond)
	size := min(max(int(rate), 1), batchSize)
	return &bucket{interval: interval, burst: time.Duration(size) * interval}
}

// wait takes n tokens and waits until they are paid for. It returns false
// if stop or done closes first; the tokens stay taken.
func (b *bucket) wait(n int, stop, done <-chan struct{}) bool {
	now := time.Now()
	b.mu.Lock()
	if floor := now.Add(-b.burst); b.next.Before(floor) {
		b.next = floor
	}
	b.next = b.next.Add(time.Duration(n) * b.interval)
	d := b.next.Sub(now)
	b.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-done:
		return false
	}
}
