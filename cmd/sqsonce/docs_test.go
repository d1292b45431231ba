package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.yaml.in/yaml/v2"
)

// The tests in this file keep the tables of docs/ true: each reads a
// table (never prose) and compares it with the code it describes, so that
// a key, a default, a range, an alert's threshold, an exit status or an
// answer of the webhook receiver that changes without the docs fails
// `make test`.

// docsDir holds the guides.
const docsDir = "../../docs"

// mdTable is one Markdown table: its header cells and its rows' cells.
type mdTable struct {
	file   string
	line   int // of the header
	header []string
	rows   []mdRow
}

type mdRow struct {
	line  int
	cells []string
}

// where names a row for messages: file:line.
func (t mdTable) where(r mdRow) string { return fmt.Sprintf("%s:%d", t.file, r.line) }

// readTables returns the tables of a Markdown file, in order. A table is a
// run of lines starting with "|" whose second line is the delimiter row.
// Cells are split at each "|" that is not escaped as "\|".
func readTables(t *testing.T, path string) []mdTable {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var tables []mdTable
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "|") || !regexp.MustCompile(`^\|(\s*:?-+:?\s*\|)+\s*$`).MatchString(lines[i+1]) {
			continue
		}
		tb := mdTable{file: filepath.Base(path), line: i + 1, header: splitRow(lines[i])}
		j := i + 2
		for ; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
			tb.rows = append(tb.rows, mdRow{line: j + 1, cells: splitRow(lines[j])})
		}
		tables = append(tables, tb)
		i = j
	}
	return tables
}

func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// tablesWith returns the tables of path whose header starts with the
// given cells, each row checked to have as many cells as the header. It
// fails the test when there is none.
func tablesWith(t *testing.T, path string, header ...string) []mdTable {
	t.Helper()
	var out []mdTable
	for _, tb := range readTables(t, path) {
		if len(tb.header) < len(header) || !slices.Equal(tb.header[:len(header)], header) {
			continue
		}
		for _, r := range tb.rows {
			if len(r.cells) != len(tb.header) {
				t.Fatalf("%s: %d cells, the header has %d", tb.where(r), len(r.cells), len(tb.header))
			}
		}
		out = append(out, tb)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no table with the header %q", path, header)
	}
	return out
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

// codeSpans returns the text of each code span of a cell, in order.
func codeSpans(cell string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// firstCode is the first code span of a cell, or "".
func firstCode(cell string) string {
	if c := codeSpans(cell); len(c) > 0 {
		return c[0]
	}
	return ""
}

// ---------------------------------------------------------------------
// The configuration reference: docs/configuration.md.

// docKey is one row of the configuration reference.
type docKey struct {
	where, key, def, rng, env string
}

// configRows reads the tables "| key | default | range | environment
// variable | meaning |" of the configuration reference.
func configRows(t *testing.T) []docKey {
	t.Helper()
	var out []docKey
	for _, tb := range tablesWith(t, filepath.Join(docsDir, "configuration.md"), "key", "default", "range", "environment variable", "meaning") {
		for _, r := range tb.rows {
			out = append(out, docKey{where: tb.where(r), key: firstCode(r.cells[0]), def: r.cells[1], rng: r.cells[2], env: r.cells[3]})
		}
	}
	return out
}

// field is a key of the configuration, a section's key or a key of a list
// of tables ([[flow.partition]], [[ingest.source]]).
type field struct {
	key    string
	env    string
	parent *setting            // for a key of a list of tables: the list
	sf     reflect.StructField // the Go field
	index  []int               // from Config, or from the list's element
}

// fields lists every key Config has, as the file and the environment name
// them: the code's own definition of the configuration.
func fields() []field {
	root := reflect.TypeFor[Config]()
	var out []field
	for _, s := range settings() {
		sf := root.FieldByIndex(s.index)
		out = append(out, field{key: s.key, env: s.env, sf: sf, index: s.index})
		if sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct {
			for i := range sf.Type.Elem().NumField() {
				ef := sf.Type.Elem().Field(i)
				out = append(out, field{key: s.key + "." + tomlName(ef), env: s.env, parent: &s, sf: ef, index: []int{i}})
			}
		}
	}
	return out
}

// formatValue writes a value as the reference shows it: strings bare ("" when
// empty), durations as Duration.String, lists as JSON arrays, an unset
// pointer as "unset".
func formatValue(v reflect.Value) string {
	if d, ok := v.Interface().(Duration); ok {
		return d.String()
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
		return v.String()
	case reflect.Pointer:
		if v.IsNil() {
			return "unset"
		}
		return formatValue(v.Elem())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct {
			if v.Len() == 0 {
				return "[]"
			}
		}
		b, _ := json.Marshal(v.Interface())
		if v.Len() == 0 {
			return "[]"
		}
		return string(b)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// defaultOf is the default of a key: DefaultConfig's value, or for a key of
// a list of tables the value an element has when the key is left out.
func defaultOf(f field) string {
	if f.parent != nil {
		return formatValue(reflect.New(f.sf.Type).Elem())
	}
	return formatValue(reflect.ValueOf(DefaultConfig()).FieldByIndex(f.index))
}

// Every key of the configuration is in the reference, with its default and
// its environment variable, and nothing else is.
func TestDocs_ConfigurationKeys(t *testing.T) {
	t.Parallel()
	rows := configRows(t)
	documented := map[string]docKey{}
	for _, r := range rows {
		if _, dup := documented[r.key]; dup {
			t.Errorf("%s: %s is documented twice", r.where, r.key)
		}
		documented[r.key] = r
	}
	for _, f := range fields() {
		r, ok := documented[f.key]
		if !ok {
			t.Errorf("docs/configuration.md: no row for %s (default %s, %s)", f.key, defaultOf(f), f.env)
			continue
		}
		delete(documented, f.key)
		def := firstCode(r.def)
		if def == "" && strings.HasPrefix(r.def, "unset") {
			def = "unset"
		}
		if want := defaultOf(f); def != want {
			t.Errorf("%s: %s: the default is documented as %q, the code's is %q", r.where, f.key, def, want)
		}
		if env := firstCode(r.env); env != f.env {
			t.Errorf("%s: %s: the variable is documented as %q, the code reads %q", r.where, f.key, env, f.env)
		}
	}
	for key, r := range documented {
		t.Errorf("%s: %s is documented, but the configuration has no such key", r.where, key)
	}
}

// docRange is a key's range as the reference writes it.
type docRange struct {
	kind           string // "interval", "each" (each item of a list in the interval), "enum", "bool" or "text"
	lo, hi         string // interval bounds; hi "∞" for none
	loOpen, hiOpen bool
	values         []string // enum
}

var intervalRE = regexp.MustCompile(`^([\[(])([^,]+), ([^\])]+)([\])])$`)

func parseRange(cell string) (docRange, error) {
	first := firstCode(cell)
	switch {
	case strings.HasPrefix(cell, "one of "):
		return docRange{kind: "enum", values: codeSpans(cell)}, nil
	case strings.HasPrefix(cell, "`true` or `false`"):
		return docRange{kind: "bool"}, nil
	case strings.HasPrefix(cell, "each in `"):
		r, err := parseInterval(first)
		r.kind = "each"
		return r, err
	case strings.HasPrefix(cell, "`[") || strings.HasPrefix(cell, "`("):
		return parseInterval(first)
	}
	return docRange{kind: "text"}, nil
}

func parseInterval(s string) (docRange, error) {
	m := intervalRE.FindStringSubmatch(s)
	if m == nil {
		return docRange{}, fmt.Errorf("%q is not an interval such as [1, 10] or (0s, 12h]", s)
	}
	return docRange{kind: "interval", loOpen: m[1] == "(", lo: m[2], hi: m[3], hiOpen: m[4] == ")"}, nil
}

// probeBase is a valid configuration to probe a key's range in.
func probeBase() Config {
	c := DefaultConfig()
	c.Queue.URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
	return c
}

// probeContext sets what a key's probe needs of other keys, so that only
// the probed key's own range decides: a bound that depends on another key
// (retry.max_backoff on retry.min_backoff) or a value that needs another
// (handler.type = "http" needs handler.url).
var probeContext = map[string]func(c *Config, value string){
	"ledger.retention": func(c *Config, _ string) {
		c.Queue.VisibilityTimeout.Duration, c.Handler.Timeout.Duration = 30*time.Second, 20*time.Second
	},
	"retry.min_backoff":       func(c *Config, _ string) { c.Retry.MaxBackoff.Duration = 12 * time.Hour },
	"retry.max_backoff":       func(c *Config, _ string) { c.Retry.MinBackoff.Duration = 0 },
	"flow.trip_keys":          func(c *Config, _ string) { c.Flow.TripFailures = 100000 },
	"flow.trip_failures":      func(c *Config, _ string) { c.Flow.TripKeys = 1 },
	"flow.concurrency":        func(c *Config, _ string) { c.Ledger.Backend = BackendPostgres },
	"key.from":                func(c *Config, _ string) { c.Key.Attribute = "EventId" },
	"handler.type":            func(c *Config, _ string) { c.Handler.URL = "http://127.0.0.1:8000/events" },
	"console.auth":            func(c *Config, _ string) { c.Console.CredentialEnv = "CONSOLE_TOKEN" },
	"ingest.source.tolerance": func(c *Config, _ string) { c.Ingest.Source[0].Verify = "stripe" },
	"flow.partition.rate": func(c *Config, _ string) {
		c.Flow.Partition[0].Rate, c.Flow.Partition[0].Concurrency = 0, 1
	},
	"ingest.source.verify": func(c *Config, v string) {
		s := &c.Ingest.Source[0]
		switch v {
		case "hmac-sha256":
			s.SignatureHeader, s.KeyPointer = "X-Signature", "/id"
		case "none":
			s.SecretEnv, s.KeyPointer = "", "/id"
		}
	},
}

// probe sets f to raw (parsed by its type) on a configuration with what
// the probe needs, and reports whether Validate refuses the key: for a key
// of a list of tables, whether it refuses the list, which holds one
// element that is valid but for f.
func probe(t *testing.T, f field, raw string) (refused bool, problems string) {
	t.Helper()
	c := probeBase()
	parentKey := f.key
	var v reflect.Value
	if f.parent != nil {
		parentKey = f.parent.key
		switch f.parent.key {
		case "flow.partition":
			c.Flow.Partition = []FlowPartition{{Pointer: "/tenant", Rate: 1}}
			v = reflect.ValueOf(&c.Flow.Partition[0]).Elem().FieldByIndex(f.index)
		case "ingest.source":
			c.Ingest.Source = []IngestSource{{Name: "probe", Path: "/hooks/probe", Verify: "github", SecretEnv: "PROBE_SECRET"}}
			v = reflect.ValueOf(&c.Ingest.Source[0]).Elem().FieldByIndex(f.index)
		default:
			t.Fatalf("no probe for the list %s", f.parent.key)
		}
	} else {
		v = reflect.ValueOf(&c).Elem().FieldByIndex(f.index)
	}
	if ctx := probeContext[f.key]; ctx != nil {
		ctx(&c, raw)
	}
	if err := setText(v, raw); err != nil {
		t.Fatalf("%s = %s: %v", f.key, raw, err)
	}
	err := c.Validate()
	for _, e := range unjoin(err) {
		if e != nil && strings.HasPrefix(e.Error(), parentKey+": ") {
			refused = true
			problems += e.Error() + "; "
		}
	}
	return refused, problems
}

// step is one unit beyond a bound, by the key's type.
func beyond(f field, bound string, dir int) string {
	t := f.sf.Type
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[Duration]():
		d, _ := time.ParseDuration(bound)
		return (Duration{d + time.Duration(dir)*time.Second}).String()
	case t.Kind() == reflect.Int:
		n, _ := strconv.Atoi(bound)
		return strconv.Itoa(n + dir)
	case t.Kind() == reflect.Float64:
		x, _ := strconv.ParseFloat(bound, 64)
		d := 1.0
		if dir < 0 && x > 0 && x <= 1 {
			d = x / 2
		}
		return strconv.FormatFloat(x+float64(dir)*d, 'g', -1, 64)
	}
	return ""
}

// Each key's documented range is the one Validate applies: both ends of an
// interval are taken and one step beyond each refused; each value of a
// list of choices is taken and another refused.
func TestDocs_ConfigurationRanges(t *testing.T) {
	t.Parallel()
	byKey := map[string]field{}
	for _, f := range fields() {
		byKey[f.key] = f
	}
	for _, r := range configRows(t) {
		f, ok := byKey[r.key]
		if !ok {
			continue // TestDocs_ConfigurationKeys reports it
		}
		rng, err := parseRange(r.rng)
		if err != nil {
			t.Errorf("%s: %s: range: %v", r.where, r.key, err)
			continue
		}
		kind := f.sf.Type.Kind()
		numeric := kind == reflect.Int || kind == reflect.Float64 || f.sf.Type == reflect.TypeFor[Duration]()
		switch {
		case numeric && rng.kind != "interval":
			t.Errorf("%s: %s is a number or a duration: its range must be an interval such as `[1, 10]`, got %q", r.where, r.key, r.rng)
			continue
		case kind == reflect.Slice && f.sf.Type.Elem().Kind() == reflect.Int && rng.kind != "each":
			t.Errorf("%s: %s is a list of numbers: its range must read \"each in `[a, b]`\", got %q", r.where, r.key, r.rng)
			continue
		case kind == reflect.Bool && rng.kind != "bool":
			t.Errorf("%s: %s is a boolean: its range must start \"`true` or `false`\", got %q", r.where, r.key, r.rng)
			continue
		}
		list := func(s string) string {
			if rng.kind == "each" {
				return "[" + s + "]"
			}
			return s
		}
		check := func(value string, wantRefused bool, what string) {
			t.Helper()
			refused, problems := probe(t, f, value)
			switch {
			case refused && !wantRefused:
				t.Errorf("%s: %s = %s (%s of the documented range %s) is refused: %s", r.where, r.key, value, what, r.rng, problems)
			case !refused && wantRefused:
				t.Errorf("%s: %s = %s (%s the documented range %s) is taken", r.where, r.key, value, what, r.rng)
			}
		}
		switch rng.kind {
		case "interval", "each":
			if rng.loOpen {
				check(list(rng.lo), true, "the open lower end")
				check(list(beyond(f, rng.lo, 1)), false, "just above the lower end")
			} else {
				check(list(rng.lo), false, "the lower end")
				below := beyond(f, rng.lo, -1)
				if !strings.HasPrefix(below, "-") || f.sf.Type != reflect.TypeFor[Duration]() {
					check(list(below), true, "just below")
				}
			}
			if rng.hi != "∞" {
				check(list(rng.hi), false, "the upper end")
				check(list(beyond(f, rng.hi, 1)), true, "just above")
			}
		case "enum":
			for _, v := range rng.values {
				check(v, false, "a value")
			}
			check("no-such-value", true, "a value outside")
		}
	}
}

// ---------------------------------------------------------------------
// Exit statuses: docs/operating.md.

// exitConstants reads the exit statuses main.go defines: its constants
// named exit*, each an integer literal.
func exitConstants(t *testing.T) map[int]string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, d := range file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if !strings.HasPrefix(id.Name, "exit") {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.INT {
					t.Fatalf("main.go: %s is not an integer literal", id.Name)
				}
				n, err := strconv.Atoi(lit.Value)
				if err != nil {
					t.Fatalf("main.go: %s: %v", id.Name, err)
				}
				out[n] = id.Name
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("main.go defines no exit constants")
	}
	return out
}

// The table of exit statuses names each status the program defines, and
// each row's example command exits with that status.
func TestDocs_ExitStatuses(t *testing.T) {
	t.Parallel()
	consts := exitConstants(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[queue]\nurl = \"http://127.0.0.1:1/000000000000/orders\"\nwait_tme = \"1s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SQSONCE_QUEUE_URL":   "http://127.0.0.1:1/000000000000/orders",
		"SQSONCE_LEDGER_PATH": filepath.Join(dir, "ledger.db"),
		"AWS_REGION":          "us-east-1",
	}
	documented := map[int]bool{}
	for _, tb := range tablesWith(t, filepath.Join(docsDir, "operating.md"), "exit status", "meaning", "for example") {
		for _, r := range tb.rows {
			n, err := strconv.Atoi(firstCode(r.cells[0]))
			if err != nil {
				t.Errorf("%s: not a status: %q", tb.where(r), r.cells[0])
				continue
			}
			documented[n] = true
			if _, ok := consts[n]; !ok {
				t.Errorf("%s: status %d is documented, but main.go defines no such exit status", tb.where(r), n)
			}
			for _, example := range codeSpans(r.cells[2]) {
				args := strings.Fields(strings.ReplaceAll(example, "bad.toml", bad))
				if len(args) == 0 || args[0] != "sqsonce" {
					t.Errorf("%s: the example %q is not a sqsonce command", tb.where(r), example)
					continue
				}
				m := &Main{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard,
					LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Signals: make(chan os.Signal)}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				got := m.Run(ctx, args[1:])
				cancel()
				if got != n {
					t.Errorf("%s: `%s` exits with status %d, documented as %d", tb.where(r), example, got, n)
				}
			}
		}
	}
	for n, name := range consts {
		if !documented[n] {
			t.Errorf("docs/operating.md: the exit status %d (%s) is not in the table", n, name)
		}
	}
}

// ---------------------------------------------------------------------
// The webhook receiver's answers: docs/webhooks.md.

// ingestStatuses reads the HTTP statuses the receiver answers with: each
// http.Status* constant that ingest/server.go passes to its reply, or sets
// as the status of a 503.
func ingestStatuses(t *testing.T) map[int]string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "../../ingest/server.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			name := "Status" + strings.NewReplacer(" ", "", "-", "", "'", "").Replace(text)
			byName[name] = code
		}
	}
	byName["StatusRequestEntityTooLarge"] = http.StatusRequestEntityTooLarge
	out := map[int]string{}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "reply" {
			return true
		}
		for _, arg := range call.Args {
			s, ok := arg.(*ast.SelectorExpr)
			if !ok {
				continue
			}
			if x, ok := s.X.(*ast.Ident); ok && x.Name == "http" && strings.HasPrefix(s.Sel.Name, "Status") {
				code, known := byName[s.Sel.Name]
				if !known {
					t.Fatalf("ingest/server.go: %s: no such status", s.Sel.Name)
				}
				out[code] = fset.Position(s.Pos()).String()
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatal("ingest/server.go: no http.Status* given to reply")
	}
	return out
}

// The table of the receiver's answers has a row for each status it answers
// with, and none for another.
func TestDocs_IngestAnswers(t *testing.T) {
	t.Parallel()
	answered := ingestStatuses(t)
	documented := map[int]string{}
	for _, tb := range tablesWith(t, filepath.Join(docsDir, "webhooks.md"), "answer", "when", "what the sender does") {
		for _, r := range tb.rows {
			m := regexp.MustCompile(`^(\d{3})\b`).FindStringSubmatch(r.cells[0])
			if m == nil {
				t.Errorf("%s: the answer %q does not start with a status", tb.where(r), r.cells[0])
				continue
			}
			n, _ := strconv.Atoi(m[1])
			documented[n] = tb.where(r)
		}
	}
	for code, at := range answered {
		if _, ok := documented[code]; !ok {
			t.Errorf("docs/webhooks.md: the receiver answers %d (%s), which the table of answers does not have", code, at)
		}
	}
	for code, at := range documented {
		if _, ok := answered[code]; !ok {
			t.Errorf("%s: %d is documented, but the receiver never answers it", at, code)
		}
	}
}

// ---------------------------------------------------------------------
// The alerts: docs/operating.md against deploy/prometheus/sqsonce.rules.yml.

// thresholdRE finds an alert's threshold: the first comparison of its
// expression with a number.
var thresholdRE = regexp.MustCompile(`(>=|<=|==|!=|>|<)\s*([0-9.]+)\b`)

// earliest is the least time after which an alert can fire once its cause
// begins: its for:, plus the threshold when the expression compares an
// age in seconds (a time() difference or a _seconds gauge, not a
// histogram's quantile), which must pass first.
func earliest(expr string, threshold float64, forDur time.Duration) time.Duration {
	comparesAge := (strings.Contains(expr, "time() -") || regexp.MustCompile(`_seconds\)?\s*(>|>=)`).MatchString(expr)) &&
		!strings.Contains(expr, "histogram_quantile")
	if comparesAge {
		return forDur + time.Duration(threshold*float64(time.Second))
	}
	return forDur
}

// humanDuration writes d as the table does: 1d, 1h 15m, 10m, 90s.
func humanDuration(d time.Duration) string {
	var parts []string
	if days := d / (24 * time.Hour); days > 0 {
		parts = append(parts, fmt.Sprintf("%dd", days))
		d -= days * 24 * time.Hour
	}
	if h := d / time.Hour; h > 0 {
		parts = append(parts, fmt.Sprintf("%dh", h))
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		parts = append(parts, fmt.Sprintf("%dm", m))
		d -= m * time.Minute
	}
	if s := d / time.Second; s > 0 || len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%ds", s))
	}
	return strings.Join(parts, " ")
}

// The table of alerts has a row for each alert of the rules file, with its
// severity, threshold, for: and the earliest it can fire.
func TestDocs_Alerts(t *testing.T) {
	t.Parallel()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				For    string            `yaml:"for"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	type want struct{ severity, threshold, forDur, earliest string }
	alerts := map[string]want{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			m := thresholdRE.FindStringSubmatch(r.Expr)
			if m == nil {
				t.Fatalf("%s: no threshold in %q", r.Alert, r.Expr)
			}
			th, _ := strconv.ParseFloat(m[2], 64)
			d, err := parsePromDuration(r.For)
			if err != nil {
				t.Fatalf("%s: for %q: %v", r.Alert, r.For, err)
			}
			alerts[r.Alert] = want{r.Labels["severity"], m[1] + " " + m[2], humanDuration(d), humanDuration(earliest(r.Expr, th, d))}
		}
	}
	seen := map[string]bool{}
	for _, tb := range tablesWith(t, filepath.Join(docsDir, "operating.md"), "alert", "severity", "threshold", "for", "fires at the earliest after") {
		for _, r := range tb.rows {
			name := firstCode(r.cells[0])
			w, ok := alerts[name]
			if !ok {
				t.Errorf("%s: %s is documented, but the rules have no such alert", tb.where(r), name)
				continue
			}
			seen[name] = true
			got := want{strings.TrimSpace(r.cells[1]), firstCode(r.cells[2]), firstCode(r.cells[3]), strings.TrimSpace(r.cells[4])}
			if got != w {
				t.Errorf("%s: %s: documented severity %q, threshold %q, for %q, earliest %q; the rules say %q, %q, %q, %q",
					tb.where(r), name, got.severity, got.threshold, got.forDur, got.earliest, w.severity, w.threshold, w.forDur, w.earliest)
			}
		}
	}
	for name := range alerts {
		if !seen[name] {
			t.Errorf("docs/operating.md: the alert %s is not in the table", name)
		}
	}
}

// parsePromDuration reads a Prometheus duration such as 5m, 1h or 1d.
func parsePromDuration(s string) (time.Duration, error) {
	if strings.HasSuffix(s, "d") {
		n, err := strconv.Atoi(strings.TrimSuffix(s, "d"))
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration")
	}
	return d, nil
}

// ---------------------------------------------------------------------
// Links: README.md and docs/*.md.

var (
	mdLinkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeadingRE = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	fenceRE     = regexp.MustCompile("(?ms)^```.*?^```")
)

// anchors returns the anchors GitHub makes of a Markdown file's headings:
// lower-cased, without punctuation but hyphens and underscores, spaces
// made hyphens, a repeated one numbered.
func anchors(text string) map[string]bool {
	text = fenceRE.ReplaceAllString(text, "")
	out := map[string]bool{}
	for _, m := range mdHeadingRE.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", b.String(), i)
		}
		out[a] = true
	}
	return out
}

// Every relative link of the README and the guides reaches a file of the
// repository, and every #anchor a heading of its file.
func TestDocs_Links(t *testing.T) {
	t.Parallel()
	for _, file := range guides(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := fenceRE.ReplaceAllString(string(b), "")
		for _, m := range mdLinkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), path)
			}
			tb, err := os.ReadFile(target)
			if err != nil {
				if fi, serr := os.Stat(target); serr == nil && fi.IsDir() && anchor == "" {
					continue
				}
				t.Errorf("%s: the link %s reaches no file", filepath.Base(file), link)
				continue
			}
			if anchor != "" && !anchors(string(tb))[anchor] {
				t.Errorf("%s: the link %s: %s has no heading #%s", filepath.Base(file), link, filepath.Base(target), anchor)
			}
		}
	}
}

// Every TOML example of the README and the guides loads as a configuration
// (LoadConfig, no environment): on its own when it has a [queue], else
// after a minimal queue, ledger and handler, so that a renamed or removed
// key, or a value out of its range, fails here before a reader meets it.
func TestDocs_TOMLExamples(t *testing.T) {
	t.Parallel()
	block := regexp.MustCompile("(?s)```toml\n(.*?)```")
	n := 0
	for _, file := range guides(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllStringSubmatch(string(b), -1) {
			n++
			text := m[1]
			for section, minimal := range minimalSection {
				if !strings.HasPrefix(text, "["+section+"]") && !strings.Contains(text, "\n["+section+"]") {
					text = minimal + "\n" + text
				}
			}
			path := filepath.Join(t.TempDir(), fmt.Sprintf("example-%d.toml", i))
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadConfig(path, nil); err != nil {
				t.Errorf("%s: TOML example %d does not load: %v\n%s", filepath.Base(file), i+1, err, m[1])
			}
		}
	}
	if n == 0 {
		t.Fatal("no TOML example found in the README or the guides")
	}
}

// minimalSection is what a TOML example lacks to load on its own.
var minimalSection = map[string]string{
	"queue":   "[queue]\nurl = \"https://sqs.us-east-1.amazonaws.com/123456789012/orders\"\n",
	"ledger":  "[ledger]\npath = \"ledger.db\"\n",
	"handler": "[handler]\ntype = \"exec\"\ncommand = [\"/bin/true\"]\n",
}

// guides are the README and the guides under docs/.
func guides(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, "../../README.md")
}
