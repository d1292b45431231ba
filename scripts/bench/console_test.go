package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The console comparison's report pairs each size's runs with and without
// the console and judges the medians against the 5 % target.
func TestWriteConsole(t *testing.T) {
	t.Parallel()
	b := &bench{o: options{consolePrefill: []int{0, 1000}, consoleConcurrency: 64, consoleRounds: 3, consoleMessages: 1000,
		consoleOverviewEvery: time.Second, consoleOperationsEvery: 2 * time.Second, gogc: "400"}}
	run := func(records int, variant string, msgs float64) *result {
		r := &result{contender: cSqsonceHTTP, variant: variant, consoleLedger: records, processed: 1000, throughput: msgs,
			active: time.Second, wall: time.Second, cpu: 0.1, serverCPU: 0.05}
		if variant == vConsole {
			r.console = &consoleStats{cpu: 0.02, wall: 2 * time.Second, views: map[string]int{pageOverview: 2, pageFailed: 1},
				latMS: map[string][]float64{pageOverview: {3, 5}, pageFailed: {20}}}
		}
		return r
	}
	var rs []*result
	for _, m := range [][2]float64{{1000, 980}, {1100, 1000}, {900, 890}} { // ratios 0.98, 0.91, 0.99
		rs = append(rs, run(0, vPlain, m[0]), run(0, vConsole, m[1]))
	}
	for _, m := range [][2]float64{{1000, 900}, {1000, 920}, {1000, 910}} {
		rs = append(rs, run(1000, vPlain, m[0]), run(1000, vConsole, m[1]))
	}
	var out bytes.Buffer
	writeConsole(&out, b, rs)
	s := out.String()
	for _, want := range []string{
		"### A ledger of 0 records before the first run",
		// Medians 1000 and 980.
		"msg/s 0.980× (the rounds' ratios: 0.909, 0.980, 0.989)",
		"2.0 % lost — met",
		"### A ledger of 1000 records before the first run",
		"9.0 % lost — **not met**",
		"| with console | 980 (890–1000) |",
		"| 0.02 | 1.0 | 2 | 4.0 | 1 |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in the report:\n%s", want, s)
		}
	}
}
