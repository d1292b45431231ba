package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/sqsonce/sqsonce/console"
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
			{prefix + "/sign-in\x01", prefix + "/sign-in"}, // a browser drops it too
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
