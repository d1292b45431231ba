package worker

import (
	"fmt"
	"testing"
	"time"
)

// An outage that begins while the downstream was busy trips the detector
// as soon as the failures fill the latest part of its window: the
// successes from before the outage do not hold the pause off for the
// whole window while the messages burn their receives. A few keys that
// fail among successes trip nothing.
func TestDetector_TripsSoonAfterABusySpell(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).Add(1500 * time.Millisecond) // mid-bucket
	busy := func(d *detector, from time.Time, n int) {
		for i := range n { // 30 a second
			if d.add(from.Add(time.Duration(i)*time.Second/30), fmt.Sprint("ok-", i), false, 0, 1) {
				t.Fatal("a success tripped the detector")
			}
		}
	}
	t.Run("OutageAfterBusySpell", func(t *testing.T) {
		d := detector{trip: DefaultTrip}
		busy(&d, t0, 600) // 20 s
		down := t0.Add(20 * time.Second)
		for i := range 50 { // 5 a second, from 3 keys
			at := down.Add(time.Duration(i) * 200 * time.Millisecond)
			if d.add(at, fmt.Sprint("k", i%3), true, 20*time.Millisecond, 1) {
				if after := at.Sub(down); after > 8*time.Second {
					t.Fatalf("tripped %v after the outage began, want within 8s (two tenths of the window and the trip's failures)", after)
				}
				return
			}
		}
		t.Fatalf("50 failures from 3 keys over 10 s after 20 s of successes did not trip the detector (%+v): the successes before the outage held it off", DefaultTrip)
	})
	t.Run("OutageMidTenthAtARate", func(t *testing.T) {
		// A rate-limited intake (5 a second) that meets an outage in the
		// middle of a tenth of the window, right after a second of
		// successes: the trip's failures in a row, from its keys, trip it,
		// rather than a whole tenth more of the downstream's refusals.
		d := detector{trip: DefaultTrip}
		busy(&d, t0, 30)
		down := t0.Add(time.Second)
		for i := range 40 {
			if d.add(down.Add(time.Duration(i)*200*time.Millisecond), fmt.Sprint("k", i), true, 20*time.Millisecond, 1) {
				if i+1 > DefaultTrip.Failures {
					t.Fatalf("tripped at failure %d, want at failure %d: no success came between them", i+1, DefaultTrip.Failures)
				}
				return
			}
		}
		t.Fatal("40 failures in a row did not trip the detector")
	})
	t.Run("FailingKeysAmongSuccesses", func(t *testing.T) {
		d := detector{trip: DefaultTrip}
		for i := range 900 {
			at := t0.Add(time.Duration(i) * time.Second / 30)
			if d.add(at, fmt.Sprint("ok-", i), false, 0, 1) || i%5 == 0 && d.add(at, fmt.Sprint("poison-", i%3), true, 20*time.Millisecond, 1) {
				t.Fatalf("3 keys failing among successes tripped the detector at %v", at.Sub(t0))
			}
		}
	})
}

// A worker that runs few calls at once to a downstream that hangs sees a
// failure per call per handler timeout: it trips on as many failures as
// its calls can end within the window, not on more than they ever could.
// Fast failures of as few calls still need the trip's failures, and one
// key failing slowly, however often, trips nothing.
func TestDetector_FewSlowCalls(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const timeout = 10*time.Second + 5*time.Millisecond
	t.Run("TwoCallsHanging", func(t *testing.T) {
		d := detector{trip: DefaultTrip}
		for i := range 20 { // two calls at once, each failing at the timeout
			at := t0.Add(timeout * time.Duration(i/2+1))
			if d.add(at, fmt.Sprint("k", i), true, timeout, 2) {
				// 2 calls × 30 s ÷ 10.005 s: 5 failures.
				if i+1 != 5 {
					t.Fatalf("tripped at failure %d (%v into the outage), want at the 5th", i+1, at.Sub(t0))
				}
				return
			}
		}
		t.Fatal("two calls hanging at the timeout for 100 s did not trip the detector")
	})
	t.Run("OneCallHanging", func(t *testing.T) {
		d := detector{trip: DefaultTrip}
		for i := range 6 { // at most 3 a window: Trip.Keys
			if d.add(t0.Add(timeout*time.Duration(i+1)), fmt.Sprint("k", i), true, timeout, 1) {
				if i+1 != DefaultTrip.Keys {
					t.Fatalf("tripped at failure %d, want at the %d of Trip.Keys", i+1, DefaultTrip.Keys)
				}
				return
			}
		}
		t.Fatal("one call hanging at the timeout did not trip the detector")
	})
	t.Run("TwoCallsFailingFast", func(t *testing.T) {
		d := detector{trip: DefaultTrip}
		for i := range 20 {
			if d.add(t0.Add(time.Duration(i)*100*time.Millisecond), fmt.Sprint("k", i), true, 50*time.Millisecond, 2) && i+1 < DefaultTrip.Failures {
				t.Fatalf("fast failures tripped at failure %d, want at the %d of Trip.Failures", i+1, DefaultTrip.Failures)
			}
		}
	})
	t.Run("OneKeyHanging", func(t *testing.T) {
		d := detector{trip: DefaultTrip}
		for i := range 20 {
			if d.add(t0.Add(timeout*time.Duration(i+1)), "poison", true, timeout, 1) {
				t.Fatalf("one key failing at the timeout tripped the detector at failure %d", i+1)
			}
		}
	})
}
