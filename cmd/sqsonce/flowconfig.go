package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/worker"
)

// Bounds of the names flow control keeps in the ledger. A partition
// value's scope is the handler's scope, the partition's pointer or
// attribute and the value (cut by the worker to 256 bytes), which must fit
// a flow name of the ledger (ledger.MaxFlowName, 512 bytes).
const (
	// maxScopeLen bounds flow.scope, and the default scope, in bytes.
	maxScopeLen = 160
	// maxPartLen bounds a partition's pointer or attribute, in bytes.
	maxPartLen = 80
)

// flowScope is the scope of the configuration's pause and limits, the one
// every command uses: flow.scope when set, else the queue's name and the
// handler's target, "<queue name> <target>", so that workers of other
// queues, or of other targets, that share the ledger are neither paused nor
// limited with these. The target is the http handler's URL without its
// user information, query and fragment, or the exec command's program
// (its first item). A default longer than maxScopeLen is cut, and ends in
// a hash of the whole so that two long targets stay apart.
func flowScope(cfg Config) string {
	if cfg.Flow.Scope != "" {
		return cfg.Flow.Scope
	}
	target := ""
	switch cfg.Handler.Type {
	case HandlerHTTP:
		target = cfg.Handler.URL
		if u, err := url.Parse(cfg.Handler.URL); err == nil {
			u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
			target = u.String()
		}
	case HandlerExec:
		if len(cfg.Handler.Command) > 0 {
			target = cfg.Handler.Command[0]
		}
	}
	s := strings.TrimSpace(worker.QueueName(cfg.Queue.URL) + " " + target)
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > maxScopeLen {
		sum := sha256.Sum256([]byte(s))
		tail := "…" + hex.EncodeToString(sum[:4])
		s = textcut.Cut(s, maxScopeLen-len(tail)) + tail
	}
	return cmp.Or(s, "sqsonce")
}

// checkScope accepts a flow.scope: 1 to maxScopeLen bytes of UTF-8 without
// control characters.
func checkScope(s string) error {
	if len(s) > maxScopeLen {
		return fmt.Errorf("must be at most %d bytes, got %d", maxScopeLen, len(s))
	}
	return checkScopeText(s)
}

// checkScopeText accepts a scope's text, of any length: UTF-8 without
// control characters, not blank. A partition value's scope (flow.scope and
// the value) may be longer than flow.scope may.
func checkScopeText(s string) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("must be valid UTF-8, got %q", s)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("must not contain control characters, got %q", s)
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("must name the scope, got %q", s)
	}
	return nil
}

// workerFlow maps [flow] onto the worker's FlowConfig, as workerConfig does
// the rest: a 0 that is no value for the worker goes on as one it refuses
// by name. A partition's burst of 0 (left out of its table) is the
// worker's default, 1.
func workerFlow(cfg Config) worker.FlowConfig {
	f := cfg.Flow
	ratio := f.TripRatio
	if ratio == 0 {
		ratio = -1
	}
	out := worker.FlowConfig{
		Mode:    worker.FlowMode(f.Mode),
		Scope:   flowScope(cfg),
		NoPause: !f.Pause,
		Trip: worker.Trip{
			Failures: refusedZero(f.TripFailures),
			Window:   refusedZeroDuration(f.TripWindow),
			Keys:     refusedZero(f.TripKeys),
			Ratio:    ratio,
		},
		ProbeMax:    refusedZeroDuration(f.ProbeMax),
		Rate:        f.Rate,
		Burst:       refusedZero(f.Burst),
		Concurrency: f.Concurrency,
	}
	for _, c := range f.PauseOn {
		out.PauseOn = append(out.PauseOn, worker.FailureClass(c))
	}
	for _, p := range f.Partition {
		out.Partitions = append(out.Partitions, worker.FlowPartition{Pointer: p.Pointer, Attribute: p.Attribute,
			Rate: p.Rate, Burst: p.Burst, Concurrency: p.Concurrency})
	}
	return out
}

// flowKeys replaces the worker's names of flow fields in its problems with
// the file's keys.
var flowKeys = func() *strings.Replacer {
	var fields []string
	for f := range workerKeys {
		if strings.HasPrefix(f, "Flow.") {
			fields = append(fields, f)
		}
	}
	slices.SortFunc(fields, func(a, b string) int { return len(b) - len(a) }) // longest first
	var pairs []string
	for _, f := range fields {
		pairs = append(pairs, f, workerKeys[f])
	}
	return strings.NewReplacer(pairs...)
}()

// partitionField is the worker's name of a partition's field.
var partitionField = regexp.MustCompile(`^Flow\.Partitions\[(\d+)\]\.(\w+)$`)

// partitionProblem says the worker's problem fe with a [[flow.partition]]
// in the file's words: "#2: rate: must be ...".
func partitionProblem(c Config, fe *worker.FieldError) error {
	m := partitionField.FindStringSubmatch(fe.Field)
	if m == nil {
		panic(fmt.Sprintf("config: the worker refused a partition's field the file has no key for: %v", fe))
	}
	i, _ := strconv.Atoi(m[1])
	lower := strings.NewReplacer("Pointer", "pointer", "Attribute", "attribute", "Rate", "rate", "Burst", "burst", "Concurrency", "concurrency")
	what, want := lower.Replace(m[2]), lower.Replace(fe.Want)
	where := fmt.Sprintf("#%d", i+1)
	if i < len(c.Flow.Partition) {
		if p := c.Flow.Partition[i]; p.Pointer != "" {
			where += " (pointer " + p.Pointer + ")"
		} else if p.Attribute != "" {
			where += " (attribute " + p.Attribute + ")"
		}
	}
	msg := where + ": " + what + ": " + want
	if strings.HasPrefix(want, "or ") {
		msg = where + ": " + what + " " + want
	}
	if fe.Got != "" {
		msg += ", got " + fe.Got
	}
	return errors.New(msg)
}
