package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// pageNames are the pages, each a template of its own on the layout.
var pageNames = []string{"overview", "operations", "operation", "deadletters", "replay", "job", "workers", "actions", "forget", "forgetjob", "signin", "error"}

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"hm": func(t time.Time) string { return t.UTC().Format("15:04:05 UTC") },
	"since": func(t, now time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return age(now.Sub(t))
	},
	"age": age,
	"num": num,
	"cut": cut,
	"pct": func(part, whole int) string {
		if whole == 0 {
			return "0%"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
	},
	// query is a query string of pairs of names and values; the values
	// are encoded here, so the template takes it as a URL's part.
	"query": func(kv ...string) template.URL {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				v.Set(kv[i], kv[i+1])
			}
		}
		return template.URL(v.Encode())
	},
	// qs marks a query string made by url.Values.Encode as one.
	"qs":      func(s string) template.URL { return template.URL(s) },
	"fields":  recordFields,
	"lapsed":  func(r ledger.Record, now time.Time) bool { return !r.LeaseExpiry.After(now) },
	"add":     func(a, b int) int { return a + b },
	"toInt":   func(v int64) int { return int(v) },
	"total":   func(s ledger.Stats) int { return s.InProgress + s.Complete + s.Failed + s.FailedPermanently },
	"seconds": func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	// took is the time from start to end, the way an operator reads it.
	"took": func(start, end time.Time) string {
		if start.IsZero() || end.IsZero() {
			return "—"
		}
		d := end.Sub(start)
		if d < time.Second {
			return fmt.Sprintf("%d ms", d.Milliseconds())
		}
		return age(d)
	},
	"process":    ledger.ProcessOf,
	"globEscape": globEscape,
	"list":       func(s ...string) []string { return s },
	"dur":        age,
	"sub":        func(a, b int) int { return a - b },
	"rate":       func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"sorted": func(m map[string]string) [][2]string {
		var out [][2]string
		for k, v := range m {
			out = append(out, [2]string{k, v})
		}
		slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		return out
	},
}

// filterText is the filters of a bulk action as its page and the action
// log say them, each value between curly quotes (a reason group often holds
// straight ones: an error's own quoted text), or quoted with escapes when it
// holds what cannot be shown as it is (invalid UTF-8, a control or format
// character such as a bidirectional control: the log writes the text too);
// none when no filter is set.
func filterText(filters [][2]string, none string) string {
	var parts []string
	for _, f := range filters {
		if f[1] == "" {
			continue
		}
		v := strconv.Quote(f[1])
		if utf8.ValidString(f[1]) && !strings.ContainsFunc(f[1], func(r rune) bool { return !strconv.IsPrint(r) }) {
			v = "“" + f[1] + "”"
		}
		parts = append(parts, f[0]+" "+v)
	}
	if len(parts) == 0 {
		return none
	}
	return strings.Join(parts, ", ")
}

// cut is s on one line, cut to n bytes with a mark.
func cut(s string, n int) string { return textcut.Mark(strings.Join(strings.Fields(s), " "), n, "…") }

// age is a duration the way an operator reads it: 45s, 12m 5s, 3h 20m, 2d 4h.
func age(d time.Duration) string {
	if d < 0 {
		return "in " + age(-d)
	}
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// num writes n with thin groups of thousands: 1 234 567.
func num(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func parseTemplates() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// page is what every page's template gets.
type page struct {
	// Cleared says the request passed the guard; without it the fields
	// of the installation (Writes, Actor, LedgerName, QueueURL, DLQURL)
	// are empty.
	Cleared    bool
	Title      string
	Nav        string
	Prefix     string
	Writes     bool
	Auth       bool
	TokenAuth  bool
	Actor      string
	LedgerName string
	QueueURL   string
	DLQURL     string
	Now        time.Time
	Data       any
}

// render writes a page. It renders into memory first, so that a template
// error is a clean 500, not half a page; the bidirectional controls of its
// text are then shown, not applied (showBidi). A request that has not passed
// the guard (the sign-in form, a refusal) is shown nothing of the
// installation: no navigation, queue, ledger or mode.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	p := page{Title: title, Nav: name, Prefix: h.cfg.Prefix, Auth: h.cfg.Auth.enabled(),
		TokenAuth: h.cfg.Auth.Token != "", Now: h.cfg.now(), Data: data}
	if cleared(r) {
		p.Cleared, p.Writes, p.LedgerName, p.QueueURL, p.DLQURL = true, h.cfg.Writes, h.cfg.LedgerName, h.cfg.QueueURL, h.cfg.DLQURL
		p.Actor, _ = r.Context().Value(actorKey{}).(string)
	}
	var buf bytes.Buffer
	if err := h.pages[name].Execute(&buf, p); err != nil {
		h.log.Error("console: a page could not be drawn", "page", name, "error", err)
		http.Error(w, "the page could not be drawn; see the log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(showBidi(buf.Bytes()))
}

// fail writes an error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", http.StatusText(status), map[string]any{"Status": status, "Message": msg})
}

// urlQueryEscape escapes s for a query string.
func urlQueryEscape(s string) string { return url.QueryEscape(s) }
