package console

import "time"

// ZeroVisibility is zeroVisibility, for the tests' own receives.
var ZeroVisibility = zeroVisibility

// SetNow sets the console's clock.
func SetNow(c *Config, now func() time.Time) { c.now = now }

// SetMaxSessions bounds h's sessions to n.
func SetMaxSessions(h *Handler, n int) { h.sessions.max = n }
