package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A whole second counts the calls of one second of wall time; a sliding
// second those of any second from a call on, which can straddle two.
func TestMostInSeconds(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	var at []time.Time
	// 3 calls late in second 1000, 3 early in 1001, 1 late in 1001.
	for _, ms := range []int{700, 800, 900, 1000, 1100, 1200, 1950} {
		at = append(at, base.Add(time.Duration(ms)*time.Millisecond))
	}
	whole, sliding := mostInSeconds(at)
	if whole != 4 || sliding != 6 {
		t.Errorf("mostInSeconds = %d, %d; want 4 (second 1001), 6 (from 1000.7 s)", whole, sliding)
	}
}

// The report gives the most in a second and the sustained rate as shares
// of the rate, against their bounds.
func TestWriteFleetRate(t *testing.T) {
	t.Parallel()
	b := &bench{o: options{bin: "bin/sqsonce"}}
	first := time.Unix(1000, 0)
	f := &fleetResult{rate: 40, workers: 3, messages: 600, calls: 600, keys: 600, byWorker: []int{200, 201, 199},
		first: first, last: first.Add(16 * time.Second), mostWhole: 46, mostSliding: 48}
	var out bytes.Buffer
	writeFleetRate(&out, b, f)
	s := out.String()
	for _, want := range []string{
		"## A fleet-wide rate on PostgreSQL",
		"| 3 | 40 | 600 | 600 | 200, 201, 199 | 16.00 | 46 | 48 | 37.5 |",
		"held within 1.15× in every whole second (bound 1.1×) — **not met**",
		"at most 1.20× in any sliding second",
		"sustained 0.938× of the rate (want ≥ 0.95×)",
		"16.00 s from the first to the last — **not met**",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in the report:\n%s", want, s)
		}
	}
}
