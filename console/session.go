package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// DefaultSessionLifetime is how long a sign-in lasts when
// Config.SessionLifetime is 0.
const DefaultSessionLifetime = 12 * time.Hour

// maxSessions bounds the sessions kept: a sign-in beyond it ends the
// session that expires first.
const maxSessions = 1000

// sessions are the sign-ins of a token console, kept in memory: a
// restart signs everyone out. A session is a random id, which the cookie
// carries; the store keeps a hash of it and its expiry. It is safe for
// concurrent use.
type sessions struct {
	mu  sync.Mutex
	max int
	// expiry of each session by the SHA-256 of its id.
	expiry map[[sha256.Size]byte]time.Time
}

func newSessions(limit int) *sessions {
	return &sessions{max: limit, expiry: map[[sha256.Size]byte]time.Time{}}
}

// start begins a session that ends at expires and returns its id. It
// drops the sessions expired at now, and the one that expires first when
// the store is full.
func (s *sessions) start(now, expires time.Time) string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, exp := range s.expiry {
		if !exp.After(now) {
			delete(s.expiry, k)
		}
	}
	for len(s.expiry) >= s.max {
		var first [sha256.Size]byte
		var firstExp time.Time
		for k, exp := range s.expiry {
			if firstExp.IsZero() || exp.Before(firstExp) {
				first, firstExp = k, exp
			}
		}
		delete(s.expiry, first)
	}
	s.expiry[sha256.Sum256([]byte(id))] = expires
	return id
}

// valid reports whether id is a session that has not ended at now.
func (s *sessions) valid(id string, now time.Time) bool {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.expiry[k]
	if ok && !exp.After(now) {
		delete(s.expiry, k)
		return false
	}
	return ok
}

// end ends the session id, if there is one.
func (s *sessions) end(id string) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.expiry, k)
}

// secure reports whether the browser reached the console over HTTPS, so
// that its cookie is to be marked Secure: the connection is TLS, or
// Config.SecureCookie says so, or a proxy of Config.TrustedProxies says
// so in X-Forwarded-Proto (its last value: the one that proxy set or
// added).
func (h *Handler) secure(r *http.Request) bool {
	if r.TLS != nil || h.cfg.SecureCookie {
		return true
	}
	return h.fromTrustedProxy(r) && strings.EqualFold(lastValue(r.Header.Values("X-Forwarded-Proto")), "https")
}

// fromTrustedProxy reports whether r came from an address of
// Config.TrustedProxies.
func (h *Handler) fromTrustedProxy(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, p := range h.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// lastValue is the last of the comma-separated values of a header's lines.
func lastValue(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	l := lines[len(lines)-1]
	return strings.TrimSpace(l[strings.LastIndexByte(l, ',')+1:])
}
