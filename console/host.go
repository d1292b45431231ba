package console

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/internal/textcut"
)

// allowedHost reports whether the console answers to a request's Host
// header: an IP address or localhost (with any port or none), or a name
// of Config.AllowedHosts ("name" with any port, "name:port" with that
// one). A page of another site whose DNS name was rebound to the
// console's address sends that name, so it is refused: only a name can be
// rebound, and the operator lists the console's own.
func (h *Handler) allowedHost(hostHeader string) bool {
	name, port := splitHost(hostHeader)
	if name == "" {
		return false
	}
	if name == "localhost" {
		return true
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	for _, a := range h.cfg.AllowedHosts {
		if a == "*" {
			return true
		}
		aname, aport := splitHost(a)
		if aname == name && (aport == "" || aport == port) {
			return true
		}
	}
	return false
}

// splitHost splits a Host header into its name, in lower case without a
// final dot or IPv6 brackets, and its port ("" when it has none).
func splitHost(s string) (name, port string) {
	name = s
	if n, p, err := net.SplitHostPort(s); err == nil {
		name, port = n, p
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"), ".")
	return strings.ToLower(name), port
}

// checkHost refuses a request for a host the console does not answer to
// (see allowedHost) with 421 Misdirected Request and a short text that
// tells nothing of the console.
func (h *Handler) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.allowedHost(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		host := textcut.Mark(strings.ToValidUTF8(r.Host, string(utf8.RuneError)), 100, "…")
		h.log.Warn("console: refused a request for another host", "host", host, "path", textcut.Mark(r.URL.Path, 100, "…"), "remote", r.RemoteAddr)
		http.Error(w, "This console does not answer to the host "+strconv.Quote(host)+
			": it answers to localhost, IP addresses and the names its operator lists (console.allowed_hosts).", http.StatusMisdirectedRequest)
	})
}
