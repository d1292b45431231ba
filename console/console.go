package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/replay"
	"github.com/sqsonce/sqsonce/worker"
)

// Ledger is what the console reads and changes of a ledger. *ledger.DB,
// *postgres.Ledger and *dynamodb.Ledger implement it, and so does sqsonce's
// client of a running worker's ledger socket.
type Ledger interface {
	// Get returns the live record of key, or an error wrapping
	// ledger.ErrNotFound.
	Get(ctx context.Context, key string) (ledger.Record, error)
	// List returns a page of records that match f after the cursor
	// after, reading a bounded number of records.
	List(ctx context.Context, f ledger.Filter, after string, limit int) (ledger.Page, error)
	// Overview returns the counts, the oldest claims, the owners, the
	// failures by reason and the activity since since.
	Overview(ctx context.Context, since time.Time) (ledger.Overview, error)
	// Forget deletes the record of key.
	Forget(ctx context.Context, key string) error
	// Reset makes a failed operation claimable again (replay calls it).
	Reset(ctx context.Context, key string) error
	// Processes lists the ledger's registry of worker processes, each
	// with the age of its last beat by the ledger's clock.
	Processes(ctx context.Context) ([]ledger.Process, error)
	// ListFlows lists the live flow documents: the pause state of each
	// scope (worker.PauseDoc).
	ListFlows(ctx context.Context) ([]ledger.FlowDoc, error)
	// GetFlow, PutFlow and DeleteFlow read and write the flow document of
	// a scope, for a pause and a resume by hand.
	GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error)
	PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error)
	DeleteFlow(ctx context.Context, scope string, ifVersion int64) error
}

// SQSClient is the part of the SQS API the console calls: replay's calls,
// and GetQueueAttributes for the depths. *sqs.Client implements it.
type SQSClient interface {
	replay.SQSClient
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// Auth is the credential that guards the console. The zero Auth is none:
// the console is then read-only, and its server must not be reachable by
// others. Set Token, or User and Password, not both.
type Auth struct {
	// Token is a bearer token: a request carries it in an Authorization
	// header ("Bearer TOKEN"), or signs in once with it on the sign-in
	// form, which starts a session (Config.SessionLifetime) whose cookie
	// then stands for it until sign-out or expiry.
	Token string
	// User and Password are for HTTP basic authentication.
	User, Password string
}

// enabled reports whether a is a credential.
func (a Auth) enabled() bool { return a.Token != "" || a.User != "" || a.Password != "" }

// Config configures a console. Ledger, SQS, QueueURL and KeyOf are
// required.
type Config struct {
	Ledger   Ledger
	SQS      SQSClient
	QueueURL string
	// QueueFIFO says the queue is a FIFO queue (replay's copies then
	// carry a group and a deduplication id).
	QueueFIFO bool
	// DLQURL is the queue's dead-letter queue; "" when it has none (the
	// dead letters page then says so and replay is off).
	DLQURL string
	// KeyOf derives a message's operation key and payload fingerprint as
	// the worker does (worker.MessageKeyFunc).
	KeyOf func(types.Message) (key string, fingerprint []byte, err error)
	// FlowScope is the scope the workers of the queue pause (their
	// worker.FlowConfig.Scope), which a pause by hand names by default.
	// "": the queue's name, the worker's default.
	FlowScope string

	// Writes enables replay, forget, export, and a pause and resume of
	// the intake. It needs Auth.
	Writes bool
	// Auth guards every page when set; see Auth.
	Auth Auth

	// SessionLifetime is how long a sign-in with the token lasts; its
	// cookie is then refused. Sessions are kept in memory: a new Handler
	// (a restart) signs everyone out. 0: DefaultSessionLifetime.
	SessionLifetime time.Duration
	// SecureCookie marks the sign-in cookie Secure (sent over HTTPS
	// only) whatever the scheme of the request. Without it the cookie is
	// Secure when the request came over TLS, or through a proxy of
	// TrustedProxies that says so in X-Forwarded-Proto.
	SecureCookie bool
	// TrustedProxies are the addresses of the reverse proxies whose
	// X-Forwarded-Proto is believed. nil: none, the header is ignored.
	TrustedProxies []netip.Prefix

	// AllowedHosts are the names, besides localhost and IP addresses,
	// that the console answers to in a request's Host header: "name"
	// (with any port) or "name:port"; "*" answers to any. Any other host
	// is refused (421): a page of another site whose DNS name was rebound
	// to the console's address sends that name. nil: localhost and IP
	// addresses only.
	AllowedHosts []string

	// Prefix is the path the handler is mounted under, such as
	// "/console", without a trailing slash; its links start with it. ""
	// when it is served at the root.
	Prefix string
	// Ledger describes where the ledger is, for the header: "bbolt file
	// /var/lib/sqsonce/ledger.db", say.
	LedgerName string
	// Shell is what the command lines shown on an operation's page start
	// with, such as "sqsonce" or "sqsonce --config /etc/sqsonce.toml"
	// (already quoted for a shell). "": "sqsonce".
	Shell string
	// Refresh is how long the overview's ledger counts, queue depths and
	// dead letters are kept before they are read again, so that many
	// open pages cost the ledger one read per Refresh. 0: DefaultRefresh.
	Refresh time.Duration

	// Metrics, when set, is served at GET /metrics behind the same guard
	// as the pages: with Auth, a scraper needs the credential too. nil:
	// the console serves no /metrics.
	Metrics http.Handler

	// Logger receives a line per change, with its actor. nil:
	// slog.Default().
	Logger *slog.Logger
	// Registerer registers the console's metrics. nil: none.
	Registerer prometheus.Registerer

	// now is the clock; tests set it.
	now func() time.Time
}

// DefaultRefresh is how long the overview's reads are kept when
// Config.Refresh is 0.
const DefaultRefresh = 5 * time.Second

// ErrInvalidConfig is wrapped by every error New returns for its Config.
var ErrInvalidConfig = errors.New("invalid console configuration")

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Handler is the console. Create it with New; it is safe for concurrent
// use. Close it to stop a replay that runs.
type Handler struct {
	cfg     Config
	log     *slog.Logger
	pages   map[string]*template.Template
	root    http.Handler
	actions *prometheus.CounterVec

	cache    cache
	sessions *sessions
	changes  actionLog // the changes made, newest last (see /actions)

	jobsMu  sync.Mutex
	jobs    []*job // newest last; at most maxJobs
	running *job   // the replay under way, if any
	jobWG   sync.WaitGroup
	nextJob int
	closed  bool
	// forgets are the bulk forgets, newest last, at most maxJobs; one
	// runs at a time (forgetting).
	forgets    []*forgetJob
	forgetting *forgetJob
}

// New returns a console for cfg.
func New(cfg Config) (*Handler, error) {
	var problems []string
	switch {
	case cfg.Ledger == nil:
		problems = append(problems, "Ledger is nil")
	case cfg.SQS == nil:
		problems = append(problems, "SQS is nil")
	case cfg.KeyOf == nil:
		problems = append(problems, "KeyOf is nil: want the worker's key derivation (worker.MessageKeyFunc)")
	}
	if cfg.QueueURL == "" {
		problems = append(problems, "QueueURL is empty")
	}
	if cfg.Auth.Token != "" && (cfg.Auth.User != "" || cfg.Auth.Password != "") {
		problems = append(problems, "Auth has a token and a user: set one")
	}
	if (cfg.Auth.User == "") != (cfg.Auth.Password == "") {
		problems = append(problems, "Auth needs both a user and a password for basic authentication")
	}
	if cfg.Auth.User != "" && strings.Contains(cfg.Auth.User, ":") {
		problems = append(problems, "Auth.User must not contain ':'")
	}
	if cfg.Writes && !cfg.Auth.enabled() {
		problems = append(problems, "Writes needs a credential (Auth): without one, anyone who reaches the console could replay and forget")
	}
	if cfg.Prefix != "" && (!strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/")) {
		problems = append(problems, fmt.Sprintf("Prefix %q: want a path such as /console, without a trailing slash", cfg.Prefix))
	}
	if cfg.SessionLifetime < 0 {
		problems = append(problems, fmt.Sprintf("SessionLifetime %v: want 0 (%v) or more", cfg.SessionLifetime, DefaultSessionLifetime))
	}
	for _, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			problems = append(problems, "TrustedProxies holds an invalid prefix")
			break
		}
	}
	for _, a := range cfg.AllowedHosts {
		if name, _ := splitHost(a); a != "*" && (name == "" || strings.ContainsAny(a, "/ \t@")) {
			problems = append(problems, fmt.Sprintf("AllowedHosts: %q: want a name such as console.example.com or console.example.com:8443", a))
		}
	}
	if cfg.Refresh < 0 {
		problems = append(problems, fmt.Sprintf("Refresh %v: want 0 (%v) or more", cfg.Refresh, DefaultRefresh))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %w", strings.Join(problems, "; "), ErrInvalidConfig)
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.SessionLifetime == 0 {
		cfg.SessionLifetime = DefaultSessionLifetime
	}
	if cfg.Shell == "" {
		cfg.Shell = "sqsonce"
	}
	if cfg.FlowScope == "" {
		cfg.FlowScope = worker.QueueName(cfg.QueueURL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, sessions: newSessions(maxSessions)}
	h.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sqsonce", Name: "console_actions_total",
		Help: "Changes asked of the console (replay, dry_run, forget, forget_dry_run, forget_many, export, pause, resume) by outcome: done, refused (bad input, another replay running) or failed.",
	}, []string{"action", "outcome"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(h.actions); err != nil {
			return nil, fmt.Errorf("console metrics: %w", err)
		}
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	h.pages = pages
	h.root = h.routes()
	return h, nil
}

// ServeHTTP serves the console.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.root.ServeHTTP(w, r) }

// Close stops a replay under way (gracefully: the moves in hand finish
// and every other message is made visible again) and waits for it. Later
// replays are refused. Close is safe to call more than once.
func (h *Handler) Close() error {
	h.jobsMu.Lock()
	h.closed = true
	if h.running != nil {
		h.running.replayer.Stop()
	}
	if h.forgetting != nil {
		h.forgetting.stop()
	}
	h.jobsMu.Unlock()
	h.jobWG.Wait()
	return nil
}

// routes builds the handler: security headers on every answer, the
// check of the Host, the bound of a request's body, the cross-origin
// protection of every POST, the credential check, the bound of each value,
// and the pages.
func (h *Handler) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /operations", h.operations)
	mux.HandleFunc("GET /operation", h.operation)
	mux.HandleFunc("GET /dead-letters", h.deadLetters)
	mux.HandleFunc("GET /workers", h.workers)
	mux.HandleFunc("GET /actions", h.actionsPage)
	mux.HandleFunc("GET /forget", h.needWrites(h.forgetForm))
	mux.HandleFunc("POST /forget/run", h.needWrites(h.forgetStart))
	mux.HandleFunc("GET /forget/job", h.needWrites(h.forgetJobPage))
	mux.HandleFunc("POST /flow/pause", h.needWrites(h.pause))
	mux.HandleFunc("POST /flow/resume", h.needWrites(h.resume))
	mux.HandleFunc("GET /export", h.needWrites(h.export))
	mux.HandleFunc("GET /replay", h.needWrites(h.replayForm))
	mux.HandleFunc("POST /replay", h.needWrites(h.replayStart))
	mux.HandleFunc("GET /replay/job", h.needWrites(h.replayJob))
	mux.HandleFunc("POST /replay/stop", h.needWrites(h.replayStop))
	mux.HandleFunc("POST /forget", h.needWrites(h.forget))
	mux.HandleFunc("GET /sign-in", h.signInForm)
	mux.HandleFunc("POST /sign-in", h.signIn)
	mux.HandleFunc("POST /sign-out", h.signOut)
	if h.cfg.Metrics != nil {
		mux.Handle("GET /metrics", h.cfg.Metrics)
	}
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "No such page: "+textcut.Mark(r.URL.Path, 200, "…"))
	})

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.count(actionOf(r), "refused")
		h.log.Warn("console: refused a cross-origin request", "path", r.URL.Path, "remote", r.RemoteAddr,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		h.fail(w, r, http.StatusForbidden, "Refused: this change came from another site. Changes are made from the console's own pages only.")
	}))
	return headers(h.checkHost(h.bound(cop.Handler(h.authenticate(h.shortValues(mux))))))
}

// actionOf names the action of a POST, for the metric.
func actionOf(r *http.Request) string {
	switch r.URL.Path {
	case "/replay":
		if r.FormValue("dry_run") == "1" {
			return "dry_run"
		}
		return "replay"
	case "/forget":
		return "forget"
	case "/replay/stop":
		return "replay_stop"
	case "/forget/run":
		if r.FormValue("dry_run") == "1" {
			return "forget_dry_run"
		}
		return "forget_many"
	case "/flow/pause":
		return "pause"
	case "/flow/resume":
		return "resume"
	case "/export":
		return "export"
	}
	return "other"
}

// count counts one action's outcome.
func (h *Handler) count(action, outcome string) {
	if action == "other" || action == "" {
		return
	}
	h.actions.WithLabelValues(action, outcome).Inc()
}

// csp allows the console's own style sheet and nothing inline; pages are
// not to be framed, and forms post only to the console.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// headers sets the headers every answer carries.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Cache-Control", "no-store")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// needWrites refuses a page or action of writes when writes are off.
func (h *Handler) needWrites(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.cfg.Writes {
			if r.Method == http.MethodPost || r.URL.Path == "/export" {
				h.count(actionOf(r), "refused")
			}
			h.fail(w, r, http.StatusForbidden, "This console is read-only: replay, forget and export need console.writes = true and a credential.")
			return
		}
		next(w, r)
	}
}

// link is a path of the console, under its prefix.
func (h *Handler) link(path string) string { return h.cfg.Prefix + path }
