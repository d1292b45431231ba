package sqstest_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNodeEngines checks that every package the lock files of the local
// servers (scripts/sqs, scripts/dynalite) install runs on the oldest
// Node.js their package.json accepts, so that `npm ci` on that Node.js
// prints no EBADENGINE warning. A lock file that pulls in a package wanting
// a newer Node.js (through a dependency's upgrade) fails here, naming it.
func TestNodeEngines(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"../../scripts/sqs", "../../scripts/dynalite"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			var pkg struct {
				Engines struct {
					Node string `json:"node"`
				} `json:"engines"`
			}
			readJSON(t, filepath.Join(dir, "package.json"), &pkg)
			floor, ok := strings.CutPrefix(strings.TrimSpace(pkg.Engines.Node), ">=")
			if !ok {
				t.Fatalf("%s/package.json: engines.node = %q, want the form \">=N\"", dir, pkg.Engines.Node)
			}
			oldest, err := parseNodeVersion(floor)
			if err != nil {
				t.Fatalf("%s/package.json: engines.node: %v", dir, err)
			}

			var lock struct {
				Packages map[string]struct {
					Version string          `json:"version"`
					Engines json.RawMessage `json:"engines"`
				} `json:"packages"`
			}
			readJSON(t, filepath.Join(dir, "package-lock.json"), &lock)
			if len(lock.Packages) < 2 {
				t.Fatalf("%s/package-lock.json lists %d packages: not a lock file of version 2 or 3", dir, len(lock.Packages))
			}
			checked := 0
			for path, p := range lock.Packages {
				var engines struct {
					Node string `json:"node"`
				}
				// Some old packages write engines as an array of strings,
				// which npm does not check.
				if len(p.Engines) == 0 || json.Unmarshal(p.Engines, &engines) != nil || engines.Node == "" {
					continue
				}
				ok, err := satisfies(oldest, engines.Node)
				if err != nil {
					t.Errorf("%s@%s: engines.node %q: %v", path, p.Version, engines.Node, err)
					continue
				}
				checked++
				if !ok {
					t.Errorf("%s@%s wants Node.js %q, which excludes %s (package.json's floor): npm ci warns EBADENGINE; pin an older version with \"overrides\" in package.json", path, p.Version, engines.Node, floor)
				}
			}
			if checked == 0 {
				t.Fatalf("%s/package-lock.json: no package states engines.node: nothing was checked", dir)
			}
		})
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// nodeVersion is major, minor, patch.
type nodeVersion [3]int

// parseNodeVersion reads "20", "20.1", "20.1.2", "v20" or "10.x"; a missing
// or wildcard part is 0.
func parseNodeVersion(s string) (nodeVersion, error) {
	var v nodeVersion
	parts := strings.Split(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".")
	if len(parts) == 0 || len(parts) > 3 || parts[0] == "" {
		return v, fmt.Errorf("not a version: %q", s)
	}
	for i, p := range parts {
		if p == "x" || p == "X" || p == "*" {
			break
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("not a version: %q", s)
		}
		v[i] = n
	}
	return v, nil
}

func (v nodeVersion) cmp(w nodeVersion) int {
	for i := range v {
		if v[i] != w[i] {
			if v[i] < w[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// satisfies reports whether v is in the npm range r. It knows the forms lock
// files use for engines: alternatives joined by "||", each a list of
// comparators (">=", ">", "<=", "<", "=" or none, "^", "~") or "*"; any other
// form is an error, so that the test never passes by not understanding.
func satisfies(v nodeVersion, r string) (bool, error) {
	for _, alt := range strings.Split(r, "||") {
		ok, err := satisfiesAll(v, alt)
		if err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

func satisfiesAll(v nodeVersion, alt string) (bool, error) {
	// ">= 10" is ">=10".
	fields := strings.Fields(alt)
	var comps []string
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.Trim(f, "<>=^~") == "" && i+1 < len(fields) {
			f += fields[i+1]
			i++
		}
		comps = append(comps, f)
	}
	if len(comps) == 0 {
		return true, nil
	}
	for _, c := range comps {
		if c == "*" || c == "x" {
			continue
		}
		op := strings.TrimRight(c[:len(c)-len(strings.TrimLeft(c, "<>=^~"))], " ")
		w, err := parseNodeVersion(c[len(op):])
		if err != nil {
			return false, err
		}
		d := v.cmp(w)
		var ok bool
		switch op {
		case ">=":
			ok = d >= 0
		case ">":
			ok = d > 0
		case "<=":
			ok = d <= 0
		case "<":
			ok = d < 0
		case "", "=":
			// A bare "12" means 12.x.x, "12.1" means 12.1.x.
			ok = true
			for i, p := range strings.Split(strings.TrimPrefix(c[len(op):], "v"), ".") {
				if p == "x" || p == "X" || p == "*" {
					break
				}
				ok = ok && v[i] == w[i]
			}
		case "^":
			ok = d >= 0 && v[0] == w[0]
		case "~":
			ok = d >= 0 && v[0] == w[0] && v[1] == w[1]
		default:
			return false, fmt.Errorf("unknown comparator %q", op)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}
