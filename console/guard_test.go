package console_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/sqsonce/sqsonce/console"
	"github.com/sqsonce/sqsonce/ledger"
)

// installation names the console's ledger in a way no page may show to a
// visitor without the credential.
const installation = "bbolt file /var/lib/sqsonce/secret-ledger.db"

func TestConsole_Guard(t *testing.T) {
	t.Parallel()

	// What a visitor without the credential sees says nothing of the
	// installation: not the queues, not the ledger, not whether writes
	// are on.
	t.Run("NothingOfTheInstallationBeforeTheCredential", func(t *testing.T) {
		t.Parallel()
		for name, adjust := range map[string]func(*console.Config){
			"token": func(c *console.Config) { writable(c); c.LedgerName = installation },
			"basic": func(c *console.Config) {
				c.Writes, c.Auth, c.LedgerName = true, console.Auth{User: "ops", Password: "pa55-0123456789"}, installation
			},
		} {
			b := setup(t, adjust)
			leaks := []string{b.queue.URL, b.queue.DLQURL, installation, "writes enabled", "read-only", ">Replay<"}
			check := func(what string, req *http.Request) {
				t.Helper()
				code, page := b.do(req)
				// A browser is sent to the sign-in form (followed here).
				if code == http.StatusOK && !strings.Contains(page, `name="token"`) {
					t.Errorf("%s, %s: 200 without the credential", name, what)
				}
				for _, s := range leaks {
					if strings.Contains(page, s) {
						t.Errorf("%s, %s (%d) shows %q:\n%s", name, what, code, s, page)
					}
				}
			}
			for _, path := range []string{"/", "/operations", "/operation?key=orders/1", "/nowhere", "/sign-in"} {
				req, _ := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
				check("GET "+path, req)
				req, _ = http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
				req.Header.Set("Accept", "text/html")
				req.Header.Set("Sec-Fetch-Site", "none")
				check("GET "+path+" from a browser", req)
			}
			form := url.Values{"key": {"orders/1"}, "typed": {"orders/1"}}
			req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/forget", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "cross-site")
			check("a cross-site POST", req)
			req, _ = http.NewRequest(http.MethodPost, b.srv.URL+"/sign-in", strings.NewReader("token=wrong"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			check("a wrong token", req)
		}
	})
}

// signIn posts the sign-in form with the token and next, and returns the
// answer without following it.
func (b *bundle) signIn(token, next string, set func(*http.Request)) *http.Response {
	b.t.Helper()
	form := url.Values{"token": {token}, "next": {next}}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/sign-in", strings.NewReader(form.Encode()))
	must(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if set != nil {
		set(req)
	}
	// The transport itself: a client refuses a Location with controls.
	resp, err := b.srv.Client().Transport.RoundTrip(req)
	must(b.t, err)
	resp.Body.Close()
	return resp
}

// noFollow is the test server's client, which does not follow redirects.
func (b *bundle) noFollow() *http.Client {
	c := *b.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// Sign-in sends the browser on to next only when it is a path of the
// console itself, as a browser reads it: browsers drop tabs and line
// breaks anywhere in a URL, and controls and spaces around it, and take a
// backslash for a slash.
func TestConsole_SignInNext(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "/console"} {
		b := setup(t, func(c *console.Config) { writable(c); c.Prefix = prefix })
		home := prefix + "/"
		// under is want under a prefix; "/" without one.
		under := func(want string) string {
			if prefix == "" {
				return home
			}
			return want
		}
		for _, tc := range []struct{ next, want string }{
			{prefix + "/operations?state=failed", prefix + "/operations?state=failed"},
			{prefix + "/operation?key=a%2Fb", prefix + "/operation?key=a%2Fb"},
			{prefix + "/%09/evil.example", prefix + "/%09/evil.example"}, // a path: browsers do not decode it
			{prefix + "/%2F%2Fevil.example", prefix + "/%2F%2Fevil.example"},
			{"", home},
			{"/\t/evil.example", home},
			{"\t/\t\t/evil.example", home},
			{"/\n/evil.example", home},
			{"/\r\n/evil.example", home},
			{"/\\evil.example", home},
			{"/\\/evil.example", home},
			{"\\\\evil.example", home},
			{"//evil.example", home},
			{"///evil.example", home},
			{" //evil.example", home},
			{"\x00//evil.example", home},
			{"\x1f/\t/evil.example\x20", home},
			{"https://evil.example", home},
			{"https:evil.example", home},
			{"javascript:alert(1)", home},
			{"evil.example", home},
			{"/sign\x01in", home},
			{prefix + "/sign-in\x01", prefix + "/sign-in"},                 // a browser drops it too
			{prefix + "/\t/evil.example", under(prefix + "/evil.example")}, // "/console//evil.example" is a path
			{prefix + "//evil.example", under(prefix + "/evil.example")},
			{prefix + "/\\evil.example", home},
			{prefix + "/a\\b", home},
			{prefix + "/operations#\t//evil", prefix + "/operations#/evil"},
		} {
			resp := b.signIn("s3cret-token", tc.next, nil)
			loc := resp.Header.Get("Location")
			if resp.StatusCode != http.StatusSeeOther || loc != tc.want {
				t.Errorf("prefix %q, next %q: %d to %q, want %q", prefix, tc.next, resp.StatusCode, loc, tc.want)
			}
			// However it was written, the browser stays on the console.
			u, err := url.Parse(b.srv.URL + "/x")
			must(t, err)
			clean := strings.Map(func(r rune) rune {
				if r == '\t' || r == '\n' || r == '\r' {
					return -1
				}
				return r
			}, strings.TrimFunc(loc, func(r rune) bool { return r <= ' ' }))
			to, err := u.Parse(strings.ReplaceAll(clean, "\\", "/"))
			if err != nil || to.Host != u.Host || strings.ContainsFunc(loc, unicode.IsControl) {
				t.Errorf("prefix %q, next %q: Location %q leaves the console (%v, %v)", prefix, tc.next, loc, to, err)
			}
		}
	}
}

// clock is a test's clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// withCookie is a GET of path with the cookie, and its status.
func (b *bundle) withCookie(path string, c *http.Cookie) int {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	must(b.t, err)
	req.AddCookie(c)
	code, _ := b.do(req)
	return code
}

// cookie is the sign-in cookie of a sign-in's answer.
func cookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == "sqsonce_console" {
			return c
		}
	}
	t.Fatalf("sign-in (%d) set no cookie: %v", resp.StatusCode, resp.Header)
	return nil
}

// Each sign-in is a session of its own, which sign-out ends and which
// expires; the cookie is Secure when the browser used HTTPS.
func TestConsole_Sessions(t *testing.T) {
	t.Parallel()

	t.Run("NewEachTimeAndEndedBySignOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, writable)
		a, c := cookie(t, b.signIn("s3cret-token", "/", nil)), cookie(t, b.signIn("s3cret-token", "/", nil))
		if a.Value == c.Value {
			t.Fatalf("two sign-ins gave the same cookie %q", a.Value)
		}
		for _, ck := range []*http.Cookie{a, c} {
			if code := b.withCookie("/operations", ck); code != http.StatusOK {
				t.Fatalf("a page with a sign-in's cookie: %d", code)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/sign-out", nil)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.AddCookie(a)
		resp, err := b.noFollow().Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-out: %d", resp.StatusCode)
		}
		if code := b.withCookie("/operations", a); code != http.StatusUnauthorized {
			t.Errorf("a page with the cookie of a session signed out: %d, want 401", code)
		}
		if code := b.withCookie("/operations", c); code != http.StatusOK {
			t.Errorf("a page with the other session's cookie: %d, want 200", code)
		}
		// A browser with the old cookie is sent to the sign-in form.
		req, _ = http.NewRequest(http.MethodGet, b.srv.URL+"/operations", nil)
		req.Header.Set("Accept", "text/html")
		req.AddCookie(a)
		resp, err = b.noFollow().Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/sign-in") {
			t.Errorf("a browser with the cookie of a session signed out: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("Expire", func(t *testing.T) {
		t.Parallel()
		clk := &clock{t: time.Now()}
		b := setup(t, func(c *console.Config) { writable(c); console.SetNow(c, clk.now) })
		ck := cookie(t, b.signIn("s3cret-token", "/", nil))
		if ck.MaxAge != int(console.DefaultSessionLifetime/time.Second) {
			t.Errorf("the cookie's Max-Age is %d, want %v", ck.MaxAge, console.DefaultSessionLifetime)
		}
		clk.add(console.DefaultSessionLifetime - time.Minute)
		if code := b.withCookie("/operations", ck); code != http.StatusOK {
			t.Fatalf("a page within the session's lifetime: %d", code)
		}
		clk.add(2 * time.Minute)
		if code := b.withCookie("/operations", ck); code != http.StatusUnauthorized {
			t.Fatalf("a page after the session's lifetime: %d, want 401", code)
		}
	})

	t.Run("LifetimeSetting", func(t *testing.T) {
		t.Parallel()
		clk := &clock{t: time.Now()}
		b := setup(t, func(c *console.Config) { writable(c); c.SessionLifetime = time.Hour; console.SetNow(c, clk.now) })
		ck := cookie(t, b.signIn("s3cret-token", "/", nil))
		if ck.MaxAge != 3600 {
			t.Errorf("the cookie's Max-Age is %d, want 3600", ck.MaxAge)
		}
		clk.add(61 * time.Minute)
		if code := b.withCookie("/", ck); code != http.StatusUnauthorized {
			t.Fatalf("a page after an hour's session: %d, want 401", code)
		}
	})

	t.Run("Bounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, writable)
		console.SetMaxSessions(b.h, 3)
		var cks []*http.Cookie
		for range 4 {
			cks = append(cks, cookie(t, b.signIn("s3cret-token", "/", nil)))
		}
		if code := b.withCookie("/", cks[0]); code != http.StatusUnauthorized {
			t.Errorf("the first of 4 sessions, 3 kept: %d, want 401", code)
		}
		for i, ck := range cks[1:] {
			if code := b.withCookie("/", ck); code != http.StatusOK {
				t.Errorf("session %d of 4, 3 kept: %d, want 200", i+2, code)
			}
		}
	})

	t.Run("Secure", func(t *testing.T) {
		t.Parallel()
		loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		elsewhere := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		for _, tc := range []struct {
			name   string
			adjust func(*console.Config)
			proto  string
			tls    bool
			want   bool
		}{
			{"PlainHTTP", nil, "", false, false},
			{"TLS", nil, "", true, true},
			{"Setting", func(c *console.Config) { c.SecureCookie = true }, "", false, true},
			{"TrustedProxyHTTPS", func(c *console.Config) { c.TrustedProxies = loopback }, "https", false, true},
			{"TrustedProxyHTTP", func(c *console.Config) { c.TrustedProxies = loopback }, "http", false, false},
			{"TrustedProxyLastValue", func(c *console.Config) { c.TrustedProxies = loopback }, "http, https", false, true},
			{"UntrustedProxy", func(c *console.Config) { c.TrustedProxies = elsewhere }, "https", false, false},
			{"NoProxyNamed", nil, "https", false, false},
		} {
			b := setup(t, func(c *console.Config) {
				writable(c)
				if tc.adjust != nil {
					tc.adjust(c)
				}
			})
			if tc.tls {
				b.srv.Close()
				b.srv = httptest.NewTLSServer(b.h)
				t.Cleanup(b.srv.Close)
			}
			ck := cookie(t, b.signIn("s3cret-token", "/", func(r *http.Request) {
				if tc.proto != "" {
					r.Header.Set("X-Forwarded-Proto", tc.proto)
				}
			}))
			if ck.Secure != tc.want {
				t.Errorf("%s: cookie Secure %v, want %v", tc.name, ck.Secure, tc.want)
			}
			if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
				t.Errorf("%s: cookie %v: want HttpOnly and SameSite=Strict", tc.name, ck)
			}
		}
	})
}

// The console answers only to its own names: localhost, IP addresses and
// the names of Config.AllowedHosts. A page of another site whose name was
// rebound to the console's address sends its own name, and is refused
// before anything is read.
func TestConsole_Host(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *console.Config) {
		c.LedgerName = installation
		c.AllowedHosts = []string{"console.example.com", "Ops.Example.com:8443"}
	})
	_, port, err := net.SplitHostPort(strings.TrimPrefix(b.srv.URL, "http://"))
	must(t, err)
	for _, tc := range []struct {
		host string
		want int
	}{
		{"attacker.example:" + port, http.StatusMisdirectedRequest},
		{"attacker.example", http.StatusMisdirectedRequest},
		{"localhost.attacker.example:" + port, http.StatusMisdirectedRequest},
		{"127.0.0.1.attacker.example:" + port, http.StatusMisdirectedRequest},
		{"console.example.com.attacker.example", http.StatusMisdirectedRequest},
		{"ops.example.com:" + port, http.StatusMisdirectedRequest},
		{"ops.example.com", http.StatusMisdirectedRequest},
		{"127.0.0.1:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"LOCALHOST:" + port, http.StatusOK},
		{"localhost.:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"10.1.2.3:9465", http.StatusOK}, // an address is no name to rebind
		{"console.example.com", http.StatusOK},
		{"console.example.com:443", http.StatusOK},
		{"ops.example.com:8443", http.StatusOK},
	} {
		for _, path := range []string{"/", "/operations", "/static/console.css", "/sign-in"} {
			req, _ := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
			req.Host = tc.host
			code, page := b.do(req)
			if code != tc.want {
				t.Errorf("GET %s with Host %q: %d, want %d", path, tc.host, code, tc.want)
			}
			if code == http.StatusMisdirectedRequest && (strings.Contains(page, installation) || strings.Contains(page, b.queue.URL) ||
				!strings.Contains(page, "does not answer to") || len(page) > 1000) {
				t.Errorf("GET %s with Host %q: the refusal says too much or too little:\n%s", path, tc.host, page)
			}
		}
	}
	if !strings.Contains(b.logs.String(), "refused a request for another host") {
		t.Errorf("the refusals are not logged:\n%s", b.logs)
	}
}

// Bidirectional controls in what messages and handlers wrote (keys,
// reasons, owners) are shown, not applied: U+202E would otherwise write
// the rest of a reason backwards on the operator's screen.
func TestConsole_BidiControls(t *testing.T) {
	t.Parallel()
	const (
		key    = "orders/\u202egpj.exe"
		reason = "refund of \u202e00.01 ot 00.0001 morf\u202c done \u2066x\u2069 \u200f\u061c"
		owner  = "w\u2067orker"
	)
	b := setup(t, writable)
	ctx := context.Background()
	if _, err := b.db.Claim(ctx, ledger.ClaimRequest{Key: key, Owner: owner, Lease: time.Hour, MessageID: "m-\u202e1"}); err != nil {
		t.Fatal(err)
	}
	must(t, b.db.Fail(ctx, ledger.Failure{Key: key, Owner: owner, Err: reason}))
	tags := regexp.MustCompile(`<[^>]*>`)
	for _, path := range []string{
		"/operation?" + url.Values{"key": {key}}.Encode(),
		"/operations?state=failed",
		"/operations?" + url.Values{"reason": {"refund"}}.Encode(),
		"/",
	} {
		code, page := b.get(path, "s3cret-token")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, page)
		}
		text := tags.ReplaceAllString(page, "")
		if i := strings.IndexFunc(text, isBidi); i >= 0 {
			t.Errorf("GET %s: the page's text holds %U, applied rather than shown: %q", path, []rune(text[i:])[0], text[max(0, i-40):min(len(text), i+40)])
		}
		if !strings.Contains(page, `<span class="bidi"`) || !strings.Contains(text, "U+202E") {
			t.Errorf("GET %s: U+202E is not shown:\n%s", path, page)
		}
	}
	// The operation's page: its title shows the control as text, every
	// control of the reason and owner is shown, and the form still sends
	// the key as it is.
	_, page := b.get("/operation?"+url.Values{"key": {key}}.Encode(), "s3cret-token")
	for _, want := range []string{"<title>Operation orders/U+202Egpj.exe", `name="key" value="` + key + `"`,
		`ledger get $&#39;orders/\xe2\x80\xaegpj.exe&#39;`} {
		if !strings.Contains(page, want) {
			t.Errorf("the operation's page lacks %q:\n%s", want, page)
		}
	}
	text := tags.ReplaceAllString(page, "")
	for _, want := range []string{"refund of U+202E00.01 ot 00.0001 morfU+202C done U+2066xU+2069 U+200FU+061C", "wU+2067orker", "m-U+202E1"} {
		if !strings.Contains(text, want) {
			t.Errorf("the operation's page lacks %q:\n%s", want, text)
		}
	}
	// The key as the page shows it confirms a forget of it.
	code, page := b.post("/forget", "s3cret-token", url.Values{"key": {key}, "typed": {"orders/U+202Egpj.exe"}})
	if code != http.StatusOK || !strings.Contains(page, "Forgotten") {
		t.Fatalf("forget confirmed with the key as shown: %d\n%s", code, page)
	}
	if _, err := b.db.Get(ctx, key); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("after forget: %v", err)
	}
}

// isBidi reports whether r is a bidirectional control.
func isBidi(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}

// A time of a filter that no ledger can have written (the zero time
// 0001-01-01 meant "no bound") is refused with a 400 that says why, and
// so is an overlong value, early and without echoing it.
func TestConsole_BadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, writable)

	t.Run("AbsurdTimes", func(t *testing.T) {
		for _, q := range []string{
			"until=0001-01-01", "since=0001-01-01", "until=0001-01-01T00:00:00Z", "until=1969-12-31",
			"until=1000000h", "until=9999-12-31", "since=3000-01-01T00:00",
		} {
			name, _, _ := strings.Cut(q, "=")
			for _, path := range []string{"/operations?", "/export?"} {
				code, page := b.get(path+q, "s3cret-token")
				if code != http.StatusBadRequest || !strings.Contains(page, name+": ") || !strings.Contains(page, "no ledger holds a time") {
					t.Errorf("GET %s%s: %d, want 400 naming %s and the times a ledger holds\n%s", path, q, code, name, page)
				}
			}
		}
		code, page := b.post("/replay", "s3cret-token", url.Values{"dry_run": {"1"}, "until": {"0001-01-01"}})
		if code == http.StatusOK || !strings.Contains(page, "sent before: ") || !strings.Contains(page, "is before 1970-01-01") {
			t.Errorf("a dry run sent before 0001-01-01: %d\n%s", code, page)
		}
		// Times a ledger holds are taken.
		for _, q := range []string{"until=2262-01-01", "since=1970-01-01", "since=36h", "until=" + url.QueryEscape(time.Now().UTC().Format(time.RFC3339))} {
			if code, page := b.get("/operations?"+q, "s3cret-token"); code != http.StatusOK {
				t.Errorf("GET /operations?%s: %d\n%s", q, code, page)
			}
		}
	})

	t.Run("LongValues", func(t *testing.T) {
		long := strings.Repeat("k", 100<<10)
		check := func(what string, code int, page string, want int) {
			t.Helper()
			if code != want || len(page) > 8<<10 || strings.Contains(page, strings.Repeat("k", 200)) {
				t.Errorf("%s: %d and %d bytes, want %d and a short page that does not echo the value:\n%.2000s", what, code, len(page), want, page)
			}
		}
		code, page := b.get("/operation?key="+long, "s3cret-token")
		check("GET /operation with a 100 KB key", code, page, http.StatusBadRequest)
		if !strings.Contains(page, "key") {
			t.Errorf("the refusal of a long key does not name it:\n%s", page)
		}
		code, page = b.get("/"+long, "s3cret-token")
		check("GET a path of 100 KB", code, page, http.StatusNotFound)
		code, page = b.get("/operations?prefix="+long, "s3cret-token")
		check("GET /operations with a 100 KB prefix", code, page, http.StatusBadRequest)
		code, page = b.post("/forget", "s3cret-token", url.Values{"key": {long}, "typed": {long}})
		check("POST /forget with a 100 KB key", code, page, http.StatusBadRequest)
		code, page = b.post("/replay", "s3cret-token", url.Values{"dry_run": {"1"}, "key": {long}})
		check("POST /replay with a 100 KB pattern", code, page, http.StatusBadRequest)
		code, page = b.get("/operation?key="+long, "")
		check("GET /operation with a 100 KB key, without the credential", code, page, http.StatusUnauthorized)
		// A key just longer than a ledger takes: refused, cut when shown.
		code, page = b.get("/operation?key="+strings.Repeat("k", ledger.MaxKeyLen+1), "s3cret-token")
		check("GET /operation with a key of 513 bytes", code, page, http.StatusBadRequest)
		if !strings.Contains(page, "longer than 512") {
			t.Errorf("the refusal of a key of 513 bytes does not say why:\n%s", page)
		}
		code, page = b.post("/forget", "s3cret-token", url.Values{"key": {strings.Repeat("k", 600)}, "typed": {strings.Repeat("k", 600)}})
		check("POST /forget with a key of 600 bytes", code, page, http.StatusBadRequest)
		// A body far beyond any form.
		code, page = b.post("/forget", "s3cret-token", url.Values{"key": {"orders/1"}, "typed": {"orders/1"}, "pad": {strings.Repeat("k", 2<<20)}})
		check("POST /forget with a 2 MB form", code, page, http.StatusRequestEntityTooLarge)
		if _, err := b.db.Get(context.Background(), "orders/1"); err != nil {
			t.Errorf("a refused forget took effect: %v", err)
		}
	})
}
