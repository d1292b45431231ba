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
			if d.add(from.Add(time.Duration(i)*time.Second/30), fmt.Sprint("ok-", i), false) {
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
			if d.add(at, fmt.Sprint("k", i%3), true) {
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
			if d.add(down.Add(time.Duration(i)*200*time.Millisecond), fmt.Sprint("k", i), true) {
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
			if d.add(at, fmt.Sprint("ok-", i), false) || i%5 == 0 && d.add(at, fmt.Sprint("poison-", i%3), true) {
				t.Fatalf("3 keys failing among successes tripped the detector at %v", at.Sub(t0))
			}
		}
	})
}
