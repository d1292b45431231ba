package console

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/ledger"
)

// The states an operator filters by: what will become of the operations.
// "failed" (any failure) stays for the links of earlier pages.
var stateChoices = []struct{ Name, Label string }{
	{"", "any"},
	{"in_progress", "in progress"},
	{"complete", "complete"},
	{"retry", "failed, to be retried"},
	{"dead", "failed, dead-lettered"},
	{"permanent", "failed permanently"},
	{"failed", "failed, any"},
}

// stateFilter is the ledger filter of a state choice.
func stateFilter(name string) (ledger.Filter, bool) {
	switch name {
	case "":
		return ledger.Filter{}, true
	case "in_progress":
		return ledger.Filter{State: ledger.StateInProgress}, true
	case "complete":
		return ledger.Filter{State: ledger.StateComplete}, true
	case "failed":
		return ledger.Filter{State: ledger.StateFailed}, true
	case "retry":
		return ledger.Filter{State: ledger.StateFailed, Permanent: ledger.FlagUnset, DeadLettered: ledger.FlagUnset}, true
	case "dead":
		return ledger.Filter{State: ledger.StateFailed, Permanent: ledger.FlagUnset, DeadLettered: ledger.FlagSet}, true
	case "permanent":
		return ledger.Filter{State: ledger.StateFailed, Permanent: ledger.FlagSet}, true
	}
	return ledger.Filter{}, false
}

// listQuery is the filter of the operations list as its URL gives it.
type listQuery struct {
	State, Prefix, Reason, Group, Since, Until, After string
	// Order is "key" for key order; "" (the default) the newest first.
	Order string
	Limit int
}

// values is q as query parameters, without the empty ones.
func (q listQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"state": q.State, "prefix": q.Prefix, "reason": q.Reason, "group": q.Group,
		"since": q.Since, "until": q.Until, "after": q.After, "order": q.Order} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit != 0 && q.Limit != ledger.DefaultListLimit {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// Encode is q as a query string.
func (q listQuery) Encode() string { return q.values().Encode() }

// Filtered reports whether q selects by anything.
func (q listQuery) Filtered() bool {
	return q.State != "" || q.Prefix != "" || q.Reason != "" || q.Group != "" || q.Since != "" || q.Until != ""
}

// readListQuery reads the filter from the URL and turns it into a
// ledger.Filter, or says what is wrong. A reason, or a reason group,
// selects failures: with no state, the failed operations.
func readListQuery(v url.Values, now time.Time) (listQuery, ledger.Filter, error) {
	q := listQuery{State: v.Get("state"), Prefix: v.Get("prefix"), Reason: v.Get("reason"), Group: v.Get("group"),
		Since: strings.TrimSpace(v.Get("since")), Until: strings.TrimSpace(v.Get("until")), After: v.Get("after"), Order: v.Get("order")}
	var errs []string
	f, ok := stateFilter(q.State)
	if !ok {
		errs = append(errs, "state: want in_progress, complete, retry, dead, permanent or failed")
	}
	if (q.Reason != "" || q.Group != "") && f.State == 0 {
		f.State = ledger.StateFailed
	}
	if q.Order != "" && q.Order != "key" {
		errs = append(errs, `order: want "key" or nothing (the newest first)`)
	}
	f.Prefix, f.Reason, f.ReasonGroup, f.Newest = q.Prefix, q.Reason, q.Group, q.Order == ""
	var err error
	if f.Since, err = parseWhen(q.Since, now); err != nil {
		errs = append(errs, "since: "+err.Error())
	}
	if f.Until, err = parseWhen(q.Until, now); err != nil {
		errs = append(errs, "until: "+err.Error())
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > ledger.MaxListLimit {
			errs = append(errs, fmt.Sprintf("limit: want 1 to %d", ledger.MaxListLimit))
		}
		q.Limit = n
	}
	if len(errs) == 0 {
		if err := f.Validate(); err != nil {
			errs = append(errs, strings.TrimSuffix(strings.TrimPrefix(err.Error(), "filter: "), ": "+ledger.ErrInvalidArgument.Error()))
		}
	}
	if len(errs) > 0 {
		return q, f, errors.New(strings.Join(errs, "; "))
	}
	return q, f, nil
}

// The times a filter may name: those a ledger can hold (Unix nanoseconds
// in an int64). Outside them a bound is a mistake, and the zero time
// 0001-01-01 would read as no bound at all.
var (
	minWhen = time.Unix(0, 0).UTC()
	maxWhen = time.Unix(0, math.MaxInt64).UTC()
)

// parseWhen reads a time of a filter: empty (no bound, the zero time), an
// RFC 3339 time, a date and time in UTC as a form's datetime-local field
// gives it, a date, or a duration before now such as 90m or 36h. A time
// before minWhen or after maxWhen is refused.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, ok := time.Time{}, false
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		var err error
		if t, err = time.ParseInLocation(layout, s, time.UTC); err == nil {
			ok = true
			break
		}
	}
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%q: want a time such as 2026-01-02T15:04 (UTC) or a duration ago such as 90m or 36h", s)
		}
		t = now.Add(-d)
	}
	switch {
	case t.Before(minWhen):
		return time.Time{}, fmt.Errorf("%q is before %s: no ledger holds a time that early; leave it empty for no bound", s, minWhen.Format(time.DateOnly))
	case t.After(maxWhen):
		return time.Time{}, fmt.Errorf("%q is after %s: no ledger holds a time that late; leave it empty for no bound", s, maxWhen.Format(time.DateOnly))
	}
	return t, nil
}

// count is a number of operations as a page shows it: exact, or what it
// is.
type count struct {
	N     int
	Exact bool
	// What says what an inexact count is, or how old an exact one.
	What string
}

// filterCount is what the ledger's counters say of q: exact for a state
// alone, or a state of failures and a reason group that the overview
// counts; otherwise not known.
func filterCount(q listQuery, s *snapshot, now time.Time) (count, bool) {
	if s.OverviewErr != "" || q.Prefix != "" || q.Reason != "" || q.Since != "" || q.Until != "" {
		return count{}, false
	}
	o := s.Overview
	what := "counted " + age(now.Sub(o.Now)) + " ago"
	if o.Estimate != "" {
		what = "estimated: " + o.Estimate
	}
	exact := o.Estimate == ""
	if q.Group == "" {
		n := map[string]int{"": o.InProgress + o.Complete + o.Failed + o.FailedPermanently, "in_progress": o.InProgress,
			"complete": o.Complete, "failed": o.Failed + o.FailedPermanently, "retry": o.Failed - o.FailedDeadLettered,
			"dead": o.FailedDeadLettered, "permanent": o.FailedPermanently}[q.State]
		return count{N: n, Exact: exact, What: what}, true
	}
	for _, g := range o.Failures {
		if g.Group != q.Group {
			continue
		}
		switch q.State {
		case "", "failed":
			return count{N: g.Count, Exact: exact, What: what}, true
		case "retry":
			return count{N: g.Count - g.Permanent - g.DeadLettered, Exact: exact, What: what}, true
		case "dead":
			return count{N: g.DeadLettered, Exact: exact, What: what}, true
		case "permanent":
			return count{N: g.Permanent, Exact: exact, What: what}, true
		}
	}
	return count{}, false
}

// listBudget bounds how long a page view goes on looking for a first
// record of a sparse filter, following the ledger's cursor, before it
// shows that none was found so far.
const (
	listBudget = 2 * time.Second
	listCalls  = 20
)

type operationsData struct {
	Query    listQuery
	Error    string
	Page     ledger.Page
	Looked   int // records the ledger looked at for this page
	Count    count
	Counted  bool
	NextLink string
	// MoreLink continues a search that found nothing yet.
	MoreLink  string
	FirstLink string
	States    []struct{ Name, Label string }
	Newest    bool
}

func (h *Handler) operations(w http.ResponseWriter, r *http.Request) {
	q, f, err := readListQuery(r.URL.Query(), h.cfg.now())
	d := operationsData{Query: q, States: stateChoices}
	if err != nil {
		d.Error = err.Error()
		h.render(w, r, http.StatusBadRequest, "operations", "Operations", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	// A filter that matches few records may look at a bounded run of
	// them per call and find none: follow the cursor, within a budget,
	// rather than show an empty page with a next link.
	after := q.After
	start := time.Now()
	var page ledger.Page
	for calls := 0; ; calls++ {
		page, err = h.cfg.Ledger.List(ctx, f, after, q.Limit)
		if err != nil {
			d.Error = err.Error()
			h.render(w, r, http.StatusBadGateway, "operations", "Operations", d)
			return
		}
		d.Looked += page.Scanned
		if len(page.Records) > 0 || page.Next == "" || calls+1 == listCalls || time.Since(start) > listBudget {
			break
		}
		after = page.Next
	}
	d.Page, d.Newest = page, page.Newest
	if !q.Filtered() || q.Group != "" || q.State != "" {
		d.Count, d.Counted = filterCount(q, h.snap(ctx), h.cfg.now())
	}
	first := q
	first.After = ""
	d.FirstLink = h.link("/operations?" + first.Encode())
	if page.Next != "" {
		next := q
		next.After = page.Next
		link := h.link("/operations?" + next.Encode())
		if len(page.Records) > 0 {
			d.NextLink = link
		} else {
			d.MoreLink = link
		}
	}
	h.render(w, r, http.StatusOK, "operations", "Operations", d)
}

type operationData struct {
	Key       string
	Record    *ledger.Record
	Error     string
	Result    string // the stored result as text, or base64 when it is not text
	ResultB64 bool
	Commands  []command
	Forgotten bool
	// NothingForgotten says a forget found no record of Key.
	NothingForgotten bool
	Mistyped         bool
	Now              time.Time
	// Unrecorded is how many of the record's attempts its history lacks
	// (made by a sqsonce that kept none, or beyond the last MaxHistory).
	Unrecorded int
	// Letters are the operation's messages found in the dead-letter
	// queue; Searched says how many dead letters were read to find them
	// (0: not searched), DLQErr why the search failed.
	Letters  []deadLetter
	Searched int
	DLQErr   string
	DLQTotal int // SQS's approximate count of the dead-letter queue
	// Payload is the message to show: the record's, kept by the ledger,
	// or else a dead letter's; PayloadFrom says which.
	Payload     *shownPayload
	PayloadFrom string
}

// shownPayload is a message's body and attributes as a page shows them.
type shownPayload struct {
	Body       string
	Base64     bool
	Attributes map[string]string
	Cut        bool
}

func showPayload(p *ledger.Payload) *shownPayload {
	if p == nil {
		return nil
	}
	p = p.Bounded()
	s := &shownPayload{Attributes: p.Attributes, Cut: p.Cut}
	if utf8.Valid(p.Body) {
		s.Body = string(p.Body)
	} else {
		s.Body, s.Base64 = base64.StdEncoding.EncodeToString(p.Body), true
	}
	return s
}

// command is a shell command line shown on an operation's page.
type command struct{ What, Line string }

func (h *Handler) operation(w http.ResponseWriter, r *http.Request) {
	h.showOperation(w, r, r.URL.Query().Get("key"), http.StatusOK, false)
}

// showOperation shows the record of key, its story (the attempts and the
// message) and its messages in the dead-letter queue. Its page says the
// key was forgotten (after the redirect of a forget) only while the
// ledger has no record of it; a forget of a key without a record (a POST)
// says nothing was forgotten.
func (h *Handler) showOperation(w http.ResponseWriter, r *http.Request, key string, status int, mistyped bool) {
	d := operationData{Key: key, Forgotten: r.Method == http.MethodGet && r.URL.Query().Get("forgotten") == "1",
		NothingForgotten: r.Method == http.MethodPost && !mistyped, Mistyped: mistyped, Now: h.cfg.now()}
	if key == "" {
		d.Error = "No key given: type one in the box."
		h.render(w, r, http.StatusBadRequest, "operation", "Operation", d)
		return
	}
	if err := ledger.ValidateKey(key); err != nil {
		h.fail(w, r, http.StatusBadRequest, "Not an operation key: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	rec, err := h.cfg.Ledger.Get(ctx, key)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		if status == http.StatusOK && !d.Forgotten {
			status = http.StatusNotFound
		}
	case err != nil:
		d.Error = err.Error()
		status = http.StatusBadGateway
		if errors.Is(err, ledger.ErrInvalidKey) {
			status = http.StatusBadRequest
		}
	default:
		d.Record = &rec
		d.Forgotten, d.NothingForgotten = false, false
		if utf8.Valid(rec.Result) {
			d.Result = string(rec.Result)
		} else {
			d.Result, d.ResultB64 = base64.StdEncoding.EncodeToString(rec.Result), true
		}
		stored := 0
		for _, a := range rec.History {
			if !a.Derived {
				stored++
			}
		}
		if len(rec.History) == 1 && rec.History[0].Derived {
			stored = 1
		}
		d.Unrecorded = max(rec.Attempts-stored, 0)
		if rec.Payload != nil {
			d.Payload, d.PayloadFrom = showPayload(rec.Payload), "the ledger (ledger.keep_body)"
		}
	}
	// Is it in the dead-letter queue now? Read it (nothing is hidden) for
	// a record that is not complete, or that is marked dead-lettered.
	ledgerRead := err == nil || errors.Is(err, ledger.ErrNotFound)
	if h.cfg.DLQURL != "" && ledgerRead && (d.Record == nil || d.Record.State != ledger.StateComplete || !d.Record.DeadLettered.IsZero()) {
		letters, read, dlqErr := h.readDLQ(ctx, deadLetterMax, func(l *deadLetter) bool { return l.Key == key })
		d.Letters, d.Searched, d.DLQErr = letters, read, dlqErr
		d.DLQTotal = h.snap(ctx).DLQ.Visible
		if d.Payload == nil && len(d.Letters) > 0 {
			d.Payload, d.PayloadFrom = d.Letters[0].Payload, "its message in the dead-letter queue, "+d.Letters[0].ID
		}
	}
	k := shellQuote(key)
	d.Commands = []command{{"Show this record", h.cfg.Shell + " ledger get " + k}}
	if d.Record != nil && d.Record.State == ledger.StateFailed {
		d.Commands = append(d.Commands, command{"Run it again on its next delivery", h.cfg.Shell + " ledger reset " + k})
	}
	if d.Record != nil {
		d.Commands = append(d.Commands, command{"Forget it, so that its next delivery runs the work again", h.cfg.Shell + " ledger forget --yes " + k})
	}
	if h.cfg.DLQURL != "" {
		d.Commands = append(d.Commands,
			command{"Replay its dead letters: see first", h.cfg.Shell + " replay --dry-run --key " + shellQuote(globEscape(key))},
			command{"Then replay them", h.cfg.Shell + " replay --key " + shellQuote(globEscape(key))})
	}
	h.render(w, r, status, "operation", "Operation "+key, d)
}

// shellQuote quotes s for a POSIX shell, unless it needs no quotes. A
// string with controls (a line break, a bidirectional control) is written
// $'...' with those bytes as \xHH escapes, so that the command line shows
// them and, copied, still names s (bash, zsh, ksh, POSIX.1-2024 sh).
func shellQuote(s string) string {
	if strings.ContainsFunc(s, func(c rune) bool { return c < ' ' || c == 0x7f || isBidiControl(c) }) {
		var b strings.Builder
		b.WriteString("$'")
		for _, c := range s {
			switch {
			case c < ' ' || c == 0x7f || isBidiControl(c):
				for _, x := range []byte(string(c)) {
					fmt.Fprintf(&b, `\x%02x`, x)
				}
			case c == '\'' || c == '\\':
				b.WriteByte('\\')
				b.WriteRune(c)
			default:
				b.WriteRune(c)
			}
		}
		b.WriteByte('\'')
		return b.String()
	}
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:@%+=,", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// globEscape escapes the characters path.Match gives a meaning, so that
// the pattern matches s alone.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// globPrefix is the part of a path.Match pattern before its first
// special character: every key it matches starts with it.
func globPrefix(p string) string {
	if i := strings.IndexAny(p, `*?[\`); i >= 0 {
		return p[:i]
	}
	return p
}

// validGlob reports whether p is a pattern path.Match reads.
func validGlob(p string) error {
	_, err := path.Match(p, "")
	return err
}

func (h *Handler) forget(w http.ResponseWriter, r *http.Request) {
	key, typed := r.FormValue("key"), r.FormValue("typed")
	// The key as typed, or as the page shows it (its bidirectional
	// controls written as their code points).
	if key == "" || typed != key && typed != visibleText(key) {
		h.count("forget", "refused")
		h.showOperation(w, r, key, http.StatusUnprocessableEntity, true)
		return
	}
	if err := ledger.ValidateKey(key); err != nil {
		h.count("forget", "refused")
		h.fail(w, r, http.StatusBadRequest, "Not an operation key: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	// Forget takes an absent key as done: ask first, to say what
	// happened. A record that cannot be read is forgotten (the way out
	// for a damaged record).
	if _, err := h.cfg.Ledger.Get(ctx, key); errors.Is(err, ledger.ErrNotFound) {
		h.count("forget", "refused")
		h.record(r, "forget", "key "+key, 0, "refused: no record")
		h.log.Info("console: no record to forget: nothing forgotten", "actor", actor(r), "key", key)
		h.showOperation(w, r, key, http.StatusNotFound, false)
		return
	} else if err != nil && !errors.Is(err, ledger.ErrCorrupt) {
		h.count("forget", "failed")
		h.record(r, "forget", "key "+key, 0, "failed: "+err.Error())
		h.log.Error("console: forget failed", "actor", actor(r), "key", key, "error", err)
		h.fail(w, r, http.StatusBadGateway, fmt.Sprintf("Could not read %q to forget it: %v", key, err))
		return
	}
	if err := h.cfg.Ledger.Forget(ctx, key); err != nil {
		h.count("forget", "failed")
		h.record(r, "forget", "key "+key, 0, "failed: "+err.Error())
		h.log.Error("console: forget failed", "actor", actor(r), "key", key, "error", err)
		h.fail(w, r, http.StatusBadGateway, fmt.Sprintf("Could not forget %q: %v", key, err))
		return
	}
	h.cache.forget()
	h.count("forget", "done")
	h.record(r, "forget", "key "+key, 1, "done")
	h.log.Info("console: forgot an operation: its next delivery runs the work again", "actor", actor(r), "key", key)
	http.Redirect(w, r, h.link("/operation?"+url.Values{"key": {key}, "forgotten": {"1"}}.Encode()), http.StatusSeeOther)
}

// exportWriteTimeout is how long the export waits for its client to take
// each page.
const exportWriteTimeout = time.Minute

// export streams the records of the list's filter as JSON Lines, a
// bounded page at a time: no read is held while the client reads.
func (h *Handler) export(w http.ResponseWriter, r *http.Request) {
	q, f, err := readListQuery(r.URL.Query(), h.cfg.now())
	if err != nil {
		h.count("export", "refused")
		h.fail(w, r, http.StatusBadRequest, "Bad filter: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/jsonl; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="sqsonce-operations.jsonl"`)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	after, n := "", 0
	for {
		ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
		page, err := h.cfg.Ledger.List(ctx, f, after, ledger.MaxListLimit)
		cancel()
		if err == nil {
			rc.SetWriteDeadline(time.Now().Add(exportWriteTimeout))
			for _, rec := range page.Records {
				if err = enc.Encode(ledger.ToJSON(rec)); err != nil {
					break
				}
				n++
			}
			rc.Flush()
		}
		if err != nil {
			h.count("export", "failed")
			h.record(r, "export", q.Encode(), n, "failed: "+err.Error())
			h.log.Error("console: export broke off", "actor", actor(r), "records", n, "error", err)
			// The client sees a last line that is not a record.
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	h.count("export", "done")
	h.record(r, "export", q.Encode(), n, "done")
	h.log.Info("console: exported operations", "actor", actor(r), "records", n, "filter", r.URL.RawQuery)
}

// recordFields are the rows of an operation's page.
func recordFields(rec ledger.Record) [][2]string {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 MST")
	}
	state := rec.State.String()
	if rec.Permanent {
		state += " (permanent: replays and redeliveries are not run until it is reset)"
	}
	attempts := strconv.Itoa(rec.Attempts)
	if rec.State == ledger.StateInProgress {
		attempts += " before the current claim's" // counted when it ends
	}
	failures := "—"
	if rec.OwnFailures+rec.OutageFailures > 0 {
		failures = fmt.Sprintf("%d of its own, %d during an outage of what it calls", rec.OwnFailures, rec.OutageFailures)
	}
	return [][2]string{
		{"Key", rec.Key},
		{"State", state},
		{"Attempts", attempts},
		{"Failures", failures},
		{"Owner of the last claim", cmpOr(rec.Owner, "—")},
		{"Lease expires", ts(rec.LeaseExpiry)},
		{"First seen", ts(rec.FirstSeen)},
		{"Last claimed", ts(rec.Claimed)},
		{"Completed", ts(rec.Completed)},
		{"Last written", ts(rec.Updated)},
		{"Expires", ts(rec.Expires)},
		{"Last SQS message id", cmpOr(rec.MessageID, "—")},
		{"Payload fingerprint", cmpOr(hex.EncodeToString(rec.Fingerprint), "—")},
	}
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
