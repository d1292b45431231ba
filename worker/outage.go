package worker

import (
	"cmp"
	"slices"
	"time"
)

// detector tells an outage of the handlers' downstream from a message's
// own failures: it trips when, within the window or its latest part,
// enough attempts failed in a way that counts (see FlowConfig.PauseOn),
// from enough distinct keys, and nearly all the attempts that ended there
// failed; or when that many failed in a row within the window, from as
// many keys, with no success between them. A key that fails while others
// succeed trips nothing: that is its own message's problem.
//
// Enough failures are Trip.Failures, or fewer where this worker's calls
// could not end that many within the window: a worker that runs two calls
// at once (its share of a tight flow.concurrency, or a small
// handler.concurrency) to a downstream that hangs sees a failure per call
// per handler timeout, six in 30 s with a 10 s timeout, and would never
// trip. It then needs as many as its calls could end within the window at
// the pace of the failure just ended (calls running × window ÷ how long
// it took), and no fewer than Trip.Keys.
//
// It keeps one bucket per tenth of the window, so that its memory and
// cost do not grow with the rate of attempts. It is not safe for
// concurrent use.
type detector struct {
	trip    Trip
	buckets [10]outcomeBucket
	// The counted failures in a row since the last success: how many,
	// since when, and their distinct keys (at most Trip.Keys).
	streak      int
	streakSince time.Time
	streakKeys  []string
	lastOK      time.Time // when the last attempt ended that was not a counted failure
	// need is the failures that trip it, by the pace of the latest
	// failure; 0 until one.
	need int
}

// outcomeBucket counts the attempts that ended within one tenth of the
// window starting at start.
type outcomeBucket struct {
	start    time.Time
	ok, fail int
	keys     []string // distinct keys that failed, at most Trip.Keys
}

// add records an attempt of key that ended at now, failed (counted) or
// not, which took took with running attempts running then (itself among
// them), and reports whether the detector trips: what the window holds
// says that the downstream is down.
func (d *detector) add(now time.Time, key string, failed bool, took time.Duration, running int) bool {
	width := d.trip.Window / time.Duration(len(d.buckets))
	start := now.Truncate(width)
	b := &d.buckets[int(start.UnixNano()/int64(width))%len(d.buckets)]
	if !b.start.Equal(start) {
		*b = outcomeBucket{start: start, keys: b.keys[:0]}
	}
	if !failed {
		b.ok++
		d.streak, d.lastOK = 0, now
		return false
	}
	b.fail++
	d.need = d.trip.Failures
	if took > 0 {
		if reach := int64(running) * int64(d.trip.Window) / int64(took); reach < int64(d.need) {
			d.need = max(d.trip.Keys, int(reach))
		}
	}
	if d.streak == 0 || now.Sub(d.streakSince) >= d.trip.Window {
		d.streak, d.streakSince, d.streakKeys = 0, now, d.streakKeys[:0]
	}
	if d.streak++; len(d.streakKeys) < d.trip.Keys && !slices.Contains(d.streakKeys, key) {
		d.streakKeys = append(d.streakKeys, key)
	}
	if len(b.keys) < d.trip.Keys && !slices.Contains(b.keys, key) {
		b.keys = append(b.keys, key)
	}
	return d.tripped(now)
}

// tripped reports whether the window that ends at now holds an outage: the
// trip's failures in a row (no success between them, from its keys), or
// in the whole window or its latest part (its newest tenths), so that the
// successes of a busy spell before an outage do not hold the trip off for
// the whole window, nor for a tenth of it, while the messages burn their
// receives.
func (d *detector) tripped(now time.Time) bool {
	need := cmp.Or(d.need, d.trip.Failures)
	if d.streak >= need && len(d.streakKeys) >= d.trip.Keys && now.Sub(d.streakSince) < d.trip.Window {
		return true
	}
	width := d.trip.Window / time.Duration(len(d.buckets))
	ok, fail := 0, 0
	var keys []string
	for k := range len(d.buckets) { // newest first
		start := now.Truncate(width).Add(-time.Duration(k) * width)
		b := &d.buckets[int(start.UnixNano()/int64(width))%len(d.buckets)]
		if !b.start.Equal(start) {
			continue
		}
		ok += b.ok
		fail += b.fail
		for _, key := range b.keys {
			if len(keys) < d.trip.Keys && !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
		if fail >= need && len(keys) >= d.trip.Keys && float64(fail) >= d.trip.Ratio*float64(ok+fail) {
			return true
		}
	}
	return false
}

// reset forgets every attempt: a pause that ends starts a fresh window.
func (d *detector) reset() {
	for i := range d.buckets {
		d.buckets[i] = outcomeBucket{}
	}
	d.streak, d.need = 0, 0
}
