package main

import (
	"encoding/binary"
	"maps"
	"net"
	"strings"
	"sync"
)

// pgProxy carries the workers' PostgreSQL connections to the server on
// 127.0.0.1 and counts round trips: each time a client sends after the
// server last sent to it (or sends first) is one. It reads the client's
// side of the wire protocol to tell whose round trip it is, from the first
// statement the client runs in it (a Bind or a Query message): a claim, a
// completion, a failure, a release, an extension, or other (pings, the
// schema check). A round trip that only prepares statements (Parse, no
// Bind: pgx prepares each statement once per connection, before its first
// use) is "prepare"; connecting (start-up and authentication) is
// "connect". It is safe for concurrent use.
type pgProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	counts map[string]int64 // kind -> round trips
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// The kinds of round trips, and the statements they are told by: words
// that only that statement of ledger/postgres holds.
const (
	rtClaim    = "claim"
	rtComplete = "complete"
	rtFail     = "fail"
	rtRelease  = "release"
	rtExtend   = "extend"
	rtPrepare  = "prepare"
	rtConnect  = "connect"
	rtOther    = "other"
)

// statementKind names a statement by its text.
func statementKind(sql string) string {
	switch {
	case strings.Contains(sql, "INSERT INTO") && strings.Contains(sql, "ON CONFLICT (key) DO UPDATE"):
		return rtClaim
	case strings.Contains(sql, "SET state = 2"):
		return rtComplete
	case strings.Contains(sql, "SET state = 3") && strings.Contains(sql, "permanent = u.permanent"):
		return rtFail
	case strings.Contains(sql, "SET state = 3, permanent = false") || strings.Contains(sql, "state = 1 AND attempts = 0"):
		return rtRelease
	case strings.Contains(sql, "SET lease_expiry ="):
		return rtExtend
	}
	return rtOther
}

// newPGProxy starts a proxy to target (host:port).
func newPGProxy(target string) (*pgProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &pgProxy{ln: ln, target: target, counts: map[string]int64{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *pgProxy) Addr() string { return p.ln.Addr().String() }

// Counts returns the round trips so far by kind.
func (p *pgProxy) Counts() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts)
}

// Close stops accepting, cuts the connections carried and waits for their
// goroutines.
func (p *pgProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *pgProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pc := &pgConn{proxy: p, wire: newPGWire()}
		p.wg.Add(2)
		go p.carry(pc, c, s, true)
		go p.carry(pc, s, c, false)
	}
}

// pgConn is the state of one carried connection.
type pgConn struct {
	proxy *pgProxy

	mu     sync.Mutex
	wire   *pgWire
	client bool   // the client sent last: a round trip is under way
	kind   string // of the round trip under way, once a statement ran
	parsed bool   // the round trip under way prepared a statement
}

// fromClient notes bytes the client sent.
func (c *pgConn) fromClient(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.client {
		c.client, c.kind, c.parsed = true, "", false
	}
	for _, m := range c.wire.feed(b) {
		switch {
		case m.parse:
			c.parsed = true
		case c.kind == "":
			c.kind = m.kind
		}
	}
}

// fromServer notes that the server answered, which ends the round trip
// under way.
func (c *pgConn) fromServer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.client {
		return
	}
	c.client = false
	kind := c.kind
	switch {
	case kind != "":
	case c.parsed:
		kind = rtPrepare
	case !c.wire.started:
		kind = rtConnect
	default:
		kind = rtOther
	}
	c.proxy.add(kind)
}

func (p *pgProxy) add(kind string) {
	p.mu.Lock()
	p.counts[kind]++
	p.mu.Unlock()
}

// carry copies from src to dst until either fails, then closes both.
func (p *pgProxy) carry(pc *pgConn, src, dst net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient {
				pc.fromClient(buf[:n])
			} else {
				pc.fromServer()
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pgWire reads the client's side of PostgreSQL's wire protocol (version
// 3): untyped start-up messages (SSL and GSS requests, then the start-up
// message), then typed messages: a type byte and a length that counts
// itself. It remembers the text of each named prepared statement, so that
// a Bind tells which statement it runs.
type pgWire struct {
	buf      []byte
	started  bool              // the start-up message has passed
	opaque   bool              // encrypted: nothing can be read
	named    map[string]string // prepared statement -> kind
	unnamed  string            // kind of the last unnamed Parse
	maxFrame int               // messages longer than this are skipped, not buffered
	skip     int               // bytes of a long message still to skip
}

// Protocol codes of the untyped messages.
const (
	pgProtocol3 = 196608
	pgSSLCode   = 80877103
	pgGSSCode   = 80877104
)

func newPGWire() *pgWire {
	return &pgWire{named: map[string]string{}, maxFrame: 1 << 20}
}

// pgMessage is what a message of the client says: it prepares a
// statement (parse), or runs one of kind.
type pgMessage struct {
	kind  string
	parse bool
}

// feed reads b and returns what the messages it completed say about
// statements, in order.
func (w *pgWire) feed(b []byte) []pgMessage {
	if w.opaque {
		return nil
	}
	var kinds []pgMessage
	for len(b) > 0 {
		if w.skip > 0 {
			n := min(w.skip, len(b))
			w.skip -= n
			b = b[n:]
			continue
		}
		w.buf = append(w.buf, b...)
		b = nil
		for {
			if !w.started {
				if len(w.buf) < 8 {
					break
				}
				n := int(binary.BigEndian.Uint32(w.buf))
				if n < 8 || len(w.buf) < n {
					if n < 8 {
						w.opaque = true
						return kinds
					}
					break
				}
				code := binary.BigEndian.Uint32(w.buf[4:8])
				if code == pgProtocol3 {
					w.started = true
				}
				// An SSL or GSS request that the server accepts makes the
				// rest unreadable; the bench's connections are plain.
				w.buf = w.buf[n:]
				continue
			}
			if len(w.buf) < 5 {
				break
			}
			typ := w.buf[0]
			n := int(binary.BigEndian.Uint32(w.buf[1:5]))
			if n < 4 {
				w.opaque = true
				return kinds
			}
			if 1+n > w.maxFrame {
				// Too long to keep (a bulk write): skip it.
				if len(w.buf) >= 1+n {
					w.buf = w.buf[1+n:]
					continue
				}
				w.skip = 1 + n - len(w.buf)
				w.buf = w.buf[:0]
				break
			}
			if len(w.buf) < 1+n {
				break
			}
			if m, ok := w.message(typ, w.buf[5:1+n]); ok {
				kinds = append(kinds, m)
			}
			w.buf = w.buf[1+n:]
		}
		if len(w.buf) == 0 {
			w.buf = nil // let a large buffer go
		}
	}
	return kinds
}

// message reads one typed message and says what it does with a
// statement, if anything.
func (w *pgWire) message(typ byte, body []byte) (pgMessage, bool) {
	switch typ {
	case 'P': // Parse: name, query, parameter types
		name, rest := cstring(body)
		query, _ := cstring(rest)
		kind := statementKind(query)
		if name == "" {
			w.unnamed = kind
		} else {
			w.named[name] = kind
		}
		return pgMessage{kind: kind, parse: true}, true
	case 'B': // Bind: portal, statement, …
		_, rest := cstring(body)
		stmt, _ := cstring(rest)
		kind := w.unnamed
		if stmt != "" {
			kind = w.named[stmt]
		}
		if kind == "" {
			kind = rtOther
		}
		return pgMessage{kind: kind}, true
	case 'Q': // simple query
		query, _ := cstring(body)
		return pgMessage{kind: statementKind(query)}, true
	case 'C': // Close of a prepared statement ('S') or portal
		if len(body) > 1 && body[0] == 'S' {
			name, _ := cstring(body[1:])
			delete(w.named, name)
		}
	}
	return pgMessage{}, false
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:]
		}
	}
	return string(b), nil
}
