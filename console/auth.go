package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// cookieName is the cookie the sign-in form sets: the id of a session
// (see sessions), not the token.
const cookieName = "sqsonce_console"

// actorKey is the context key of the actor of a request.
type actorKey struct{}

// clearedKey is the context key set on a request that passed the guard:
// it proved the credential, or the console has none. Only such a request
// is shown what the console is installed on (see render).
type clearedKey struct{}

// cleared reports whether r passed the guard.
func cleared(r *http.Request) bool {
	ok, _ := r.Context().Value(clearedKey{}).(bool)
	return ok
}

// withCleared marks r as having passed the guard, with its actor ("" without
// a credential).
func withCleared(r *http.Request, who string) *http.Request {
	ctx := context.WithValue(r.Context(), clearedKey{}, true)
	if who != "" {
		ctx = context.WithValue(ctx, actorKey{}, who)
	}
	return r.WithContext(ctx)
}

// actor names who made a request, for the log: the basic user, "token", or
// "anonymous" without a credential; with the client's address.
func actor(r *http.Request) string {
	who, _ := r.Context().Value(actorKey{}).(string)
	if who == "" {
		who = "anonymous"
	}
	return who + "@" + r.RemoteAddr
}

// equal compares two secrets in constant time, whatever their lengths.
func equal(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// who returns the actor a request proves to be, or "" when it proves none.
func (h *Handler) who(r *http.Request) string {
	a := h.cfg.Auth
	if a.Token != "" {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(strings.TrimSpace(v), a.Token) {
			return "token"
		}
		if c, err := r.Cookie(cookieName); err == nil && h.sessions.valid(c.Value, h.cfg.now()) {
			return "token"
		}
		return ""
	}
	if u, p, ok := r.BasicAuth(); ok {
		// Both compared, whichever is wrong.
		if okUser, okPass := equal(u, a.User), equal(p, a.Password); okUser && okPass {
			return u
		}
	}
	return ""
}

// authenticate lets a request through when the console has no credential
// or the request proves it; the sign-in page and the style sheet need
// none. Others are asked for it: basic authentication's prompt, or the
// sign-in form for a page, or a 401.
func (h *Handler) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.cfg.Auth.enabled() {
			next.ServeHTTP(w, withCleared(r, ""))
			return
		}
		if who := h.who(r); who != "" {
			next.ServeHTTP(w, withCleared(r, who))
			return
		}
		open := r.URL.Path == "/sign-in" || strings.HasPrefix(r.URL.Path, "/static/")
		if open && h.cfg.Auth.Token != "" {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost {
			h.count(actionOf(r), "refused")
			h.log.Warn("console: refused a change without the credential", "path", r.URL.Path, "remote", r.RemoteAddr)
		}
		if h.cfg.Auth.Token == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="sqsonce console", charset="UTF-8"`)
			h.fail(w, r, http.StatusUnauthorized, "This console needs its user name and password.")
			return
		}
		if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, h.link("/sign-in?next="+urlQueryEscape(h.link(r.URL.RequestURI()))), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="sqsonce console"`)
		h.fail(w, r, http.StatusUnauthorized, "This console needs its token: an Authorization: Bearer header, or sign in.")
	})
}

func (h *Handler) signInForm(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Auth.Token == "" {
		http.Redirect(w, r, h.link("/"), http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "signin", "Sign in", map[string]any{"Next": h.ownPath(r.URL.Query().Get("next"))})
}

func (h *Handler) signIn(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Auth.Token == "" {
		http.Redirect(w, r, h.link("/"), http.StatusSeeOther)
		return
	}
	next := h.ownPath(r.FormValue("next"))
	if !equal(r.FormValue("token"), h.cfg.Auth.Token) {
		h.log.Warn("console: a sign-in with a wrong token", "remote", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "signin", "Sign in", map[string]any{"Next": next, "Wrong": true})
		return
	}
	now := h.cfg.now()
	expires := now.Add(h.cfg.SessionLifetime)
	id := h.sessions.start(now, expires)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: h.link("/"),
		MaxAge: int(h.cfg.SessionLifetime / time.Second), Expires: expires,
		HttpOnly: true, Secure: h.secure(r), SameSite: http.SameSiteStrictMode})
	h.log.Info("console: signed in", "actor", "token@"+r.RemoteAddr, "until", expires.UTC().Format(time.RFC3339))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// ownPath returns next when a browser reads it as a path of the console
// itself, else the overview's path. A browser drops ASCII tabs and line
// breaks anywhere in a URL and C0 controls and spaces around it, and
// reads a backslash as a slash, so "/\t/evil.example" is another site to
// it: next is read as the browser would, and refused unless it is a path
// (no scheme, no host, not "//" nor "/\\") under the console's prefix,
// without controls or backslashes.
func (h *Handler) ownPath(next string) string {
	home := h.link("/")
	next = strings.TrimFunc(next, func(c rune) bool { return c <= ' ' })
	next = strings.Map(func(c rune) rune {
		if c == '\t' || c == '\n' || c == '\r' {
			return -1
		}
		return c
	}, next)
	if !strings.HasPrefix(next, home) || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.ContainsFunc(next, func(c rune) bool { return c < ' ' || c == 0x7f || c == '\\' }) {
		return home
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !strings.HasPrefix(u.Path, home) {
		return home
	}
	return next
}

// signOut ends the request's session, if it has one, and clears its
// cookie: the cookie no longer opens a page, even if a copy of it is
// sent again.
func (h *Handler) signOut(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		h.sessions.end(c.Value)
		h.log.Info("console: signed out", "actor", actor(r))
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: h.link("/"), MaxAge: -1,
		HttpOnly: true, Secure: h.secure(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, h.link("/sign-in"), http.StatusSeeOther)
}
