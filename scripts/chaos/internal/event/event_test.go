package event

import (
	"os"
	"path/filepath"
	"testing"
)

// A last line cut short (a writer killed in its write) is left out; a
// damaged line before the end is an error.
func TestReadLines_CutShort(t *testing.T) {
	for _, tc := range []struct {
		text  string
		lines int
		fails bool
	}{
		{"{\"ev\":\"claim\"}\n{\"ev\":\"done\"}\n", 2, false},
		{"{\"ev\":\"claim\"}\n{\"ev\":\"done\"}\n{\"ev\":\"rec", 2, false},
		{"{\"ev\":\"claim\"}\n{\"ev\":\"rec{\"ev\":\"done\"}\n", 1, true},
	} {
		path := filepath.Join(t.TempDir(), "run.events")
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		n := 0
		err := ReadLines(path, func(WorkerEvent) { n++ })
		if n != tc.lines || (err != nil) != tc.fails {
			t.Errorf("%q: %d lines, error %v; want %d lines, failing %v", tc.text, n, err, tc.lines, tc.fails)
		}
	}
}
