package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

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
