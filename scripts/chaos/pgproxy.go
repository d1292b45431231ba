package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tcpProxy is the TCP proxy on 127.0.0.1 of the campaigns on PostgreSQL,
// between the workers and the database: it carries each connection to the
// server it points at, message by message of PostgreSQL's protocol, until
// it cuts it. It can refuse new connections (accept and close them at
// once) for a while, and cut every connection it carries, as a network
// failure between a host and its database would. And it can lose a
// commit: the next COMMIT a client sends is either never passed on (the
// server rolls the transaction back when the connection goes) or passed
// on and its answer dropped once the server committed; either way the
// connection is then cut, and the client cannot tell which happened. And
// it can stall: carry nothing, either way, on any connection, old or new,
// for a while, as a database that hangs (a lock, a full disk, a network
// that drops packets) would; the connections stay open. It is safe for
// concurrent use.
type tcpProxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	refuse bool
	// stalled is non-nil while the proxy stalls; it is closed when the
	// stall ends.
	stalled chan struct{}
	conns   map[net.Conn]*proxyConn // by the client's side
	// Commits still to lose: their requests, and their answers.
	loseRequests, loseAnswers int
	lost                      []lostCommit

	wg sync.WaitGroup
}

// proxyConn is one connection the proxy carries.
type proxyConn struct {
	client, server net.Conn
	// ready is closed once the client's first message said whether the
	// connection speaks the protocol in the clear (raw false) or not
	// (TLS, GSS encryption, a cancel request: raw true, carried byte for
	// byte, no commit of it lost).
	ready chan struct{}
	raw   bool
	// awaitCommit is set while a COMMIT whose answer is to be lost is on
	// its way to the server.
	awaitCommit atomic.Bool
	// commitStmts are the statements that the client prepared (Parse) as
	// a COMMIT, by name; completeStmts those it prepared as the ledger's
	// completion of an operation's transaction (postgres.OpTx,
	// postgres.Ledger.CommitOp); owner is the owner that the last such
	// completion was bound with. Read and written by fromClient alone.
	commitStmts, completeStmts map[string]bool
	owner                      string
	// lossOwner is owner when the COMMIT whose answer is to be lost went
	// on, for fromServer.
	lossOwner atomic.Value
}

// lostCommit is a commit that the proxy lost, cutting its connection.
type lostCommit struct {
	T      time.Time // when the proxy cut the connection
	Client string    // the client's address, host:port
	// Answered: the server committed and its answer was dropped; false:
	// the commit never reached the server.
	Answered bool
	// Owner is the claim whose completion went with the commit (it is in
	// the same batch, before the COMMIT), or "" when none did.
	Owner string
}

func newTCPProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]*proxyConn{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the proxy's address, host:port.
func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// locked calls f with the proxy's settings locked: to point new
// connections at another server (target), or make it close new
// connections at once (refuse).
func (p *tcpProxy) locked(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

// targetAddr is the address of the server that new connections go to.
func (p *tcpProxy) targetAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// setStall makes the proxy stop carrying messages (on) or carry them again
// (off): a message read from either side waits meanwhile.
func (p *tcpProxy) setStall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.stalled == nil:
		p.stalled = make(chan struct{})
	case !on && p.stalled != nil:
		close(p.stalled)
		p.stalled = nil
	}
}

// waitStall returns once the proxy does not stall.
func (p *tcpProxy) waitStall() {
	p.mu.Lock()
	ch := p.stalled
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// cutAll closes every connection carried now and returns how many.
func (p *tcpProxy) cutAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for _, pc := range p.conns {
		pc.client.Close()
		pc.server.Close()
	}
	clear(p.conns)
	return n
}

// loseCommits makes the proxy lose the next n commits that clients send,
// whichever connections carry them: their answers (answered) or their
// requests.
func (p *tcpProxy) loseCommits(n int, answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if answered {
		p.loseAnswers += n
	} else {
		p.loseRequests += n
	}
}

// commitsToLose returns how many commits the proxy is still to lose.
func (p *tcpProxy) commitsToLose() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loseRequests + p.loseAnswers
}

// lostCommits returns the commits lost so far, in order.
func (p *tcpProxy) lostCommits() []lostCommit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]lostCommit(nil), p.lost...)
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, target := p.refuse, p.target
		p.mu.Unlock()
		var s net.Conn
		if !refuse {
			s, err = net.Dial("tcp", target) // the server down: the client sees its connection closed
		}
		p.mu.Lock()
		// Refusing may have begun while it connected: a connection that
		// cutAll did not see must not be carried either.
		if refuse || err != nil || p.refuse {
			p.mu.Unlock()
			c.Close()
			if s != nil {
				s.Close()
			}
			continue
		}
		pc := &proxyConn{client: c, server: s, ready: make(chan struct{})}
		p.conns[c] = pc
		p.mu.Unlock()
		p.wg.Add(2)
		go p.fromClient(pc)
		go p.fromServer(pc)
	}
}

// The codes of the first messages of a connection that are not a startup
// message (PostgreSQL's protocol, "Message Formats").
const (
	pgCancelRequest = 80877102
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
)

// fromClient carries what the client sends to the server, message by
// message, and loses a COMMIT when told to.
func (p *tcpProxy) fromClient(pc *proxyConn) {
	defer p.wg.Done()
	defer p.end(pc)
	r := bufio.NewReaderSize(pc.client, 32<<10)
	w := bufio.NewWriterSize(pc.server, 32<<10)
	var buf []byte
	msg, err := readPGMessage(r, false, &buf)
	if err != nil {
		close(pc.ready)
		return
	}
	if code := binary.BigEndian.Uint32(msg[4:8]); code == pgCancelRequest || code == pgSSLRequest || code == pgGSSENCRequest {
		pc.raw = true
		close(pc.ready)
		if _, err := pc.server.Write(msg); err == nil {
			_, _ = io.Copy(pc.server, r)
		}
		return
	}
	close(pc.ready)
	for {
		p.waitStall()
		if _, err := w.Write(msg); err != nil {
			return
		}
		if !wholePGMessageBuffered(r, true) && w.Flush() != nil {
			return
		}
		if msg, err = readPGMessage(r, true, &buf); err != nil {
			return
		}
		if !pc.commits(msg) {
			continue
		}
		switch p.takeLoss() {
		case lossRequest:
			// Whatever came before it goes on; the commit does not.
			_ = w.Flush()
			p.lose(pc, false, pc.owner)
			return
		case lossAnswer:
			pc.lossOwner.Store(pc.owner)
			pc.awaitCommit.Store(true)
		}
	}
}

// commits reports whether msg, from the client, asks the server to commit:
// a simple Query of COMMIT, or in the extended protocol the Bind of a
// statement whose Parse on this connection was a COMMIT (a batch sends the
// completion and the COMMIT behind it in one go).
func (pc *proxyConn) commits(msg []byte) bool {
	switch msg[0] {
	case 'Q':
		return isCommit(msg[5:])
	case 'P': // Parse: statement name, query, ...
		name, rest := cutCString(msg[5:])
		query, _ := cutCString(rest)
		if pc.commitStmts == nil {
			pc.commitStmts, pc.completeStmts = map[string]bool{}, map[string]bool{}
		}
		pc.commitStmts[name] = isCommit([]byte(query))
		pc.completeStmts[name] = strings.Contains(query, completionMark)
	case 'B': // Bind: portal name, statement name, ...
		_, rest := cutCString(msg[5:])
		name, rest := cutCString(rest)
		if pc.completeStmts[name] {
			pc.owner = bindOwner(rest)
		}
		if pc.commitStmts[name] {
			return true
		}
		if !pc.completeStmts[name] {
			pc.owner = "" // another statement: a COMMIT after it is not the completion's
		}
	}
	return false
}

// completionMark is in the text of the ledger's completion of an
// operation's transaction (the error it raises when the claim is not the
// owner's), and in no other statement.
const completionMark = "the completion found no claim of its owner in progress"

// bindOwner returns the owner that the rest of a Bind of the completion
// (after the statement's name) binds: its fourth parameter, an array of
// one bytea in binary format. It returns "" when it cannot read one.
func bindOwner(b []byte) (owner string) {
	defer func() {
		if recover() != nil { // cut short: not the message looked for
			owner = ""
		}
	}()
	u16 := func() int { v := int(binary.BigEndian.Uint16(b)); b = b[2:]; return v }
	u32 := func() int { v := int(int32(binary.BigEndian.Uint32(b))); b = b[4:]; return v }
	formats := make([]int, u16())
	for i := range formats {
		formats[i] = u16()
	}
	if u16() < 4 {
		return ""
	}
	var param []byte
	for i := range 4 {
		if n := u32(); n >= 0 {
			if i == 3 {
				param = b[:n]
			}
			b = b[n:]
		}
	}
	if len(formats) != 1 && len(formats) < 4 || formats[min(3, len(formats)-1)] != 1 {
		return "" // not in binary format
	}
	// A binary array: dimensions, null flag, element type, then per
	// dimension its length and lower bound, then each element's length
	// and bytes.
	b = param
	if dims, _, _, length, _ := u32(), u32(), u32(), u32(), u32(); dims != 1 || length != 1 {
		return ""
	}
	return string(b[:u32()])
}

// cutCString splits b after its first NUL-terminated string.
func cutCString(b []byte) (string, []byte) {
	s, rest, _ := bytes.Cut(b, []byte{0})
	return string(s), rest
}

// fromServer carries what the server sends to the client, message by
// message, and drops the answer of a COMMIT that is to lose it.
func (p *tcpProxy) fromServer(pc *proxyConn) {
	defer p.wg.Done()
	defer p.end(pc)
	<-pc.ready
	if pc.raw {
		_, _ = io.Copy(pc.client, pc.server)
		return
	}
	r := bufio.NewReaderSize(pc.server, 32<<10)
	w := bufio.NewWriterSize(pc.client, 32<<10)
	var buf []byte
	for {
		msg, err := readPGMessage(r, true, &buf)
		if err != nil {
			return
		}
		if pc.awaitCommit.Load() && (msg[0] == 'C' || msg[0] == 'E') { // CommandComplete, ErrorResponse
			switch tag := strings.TrimRight(string(msg[5:]), "\x00"); {
			case msg[0] == 'C' && tag == "COMMIT": // the server committed: its answer is lost
				_ = w.Flush()
				owner, _ := pc.lossOwner.Load().(string)
				p.lose(pc, true, owner)
				return
			case msg[0] == 'E' || tag == "ROLLBACK": // it did not commit: lose another
				pc.awaitCommit.Store(false)
				p.loseCommits(1, true)
			} // else another statement's, sent with the COMMIT behind it
		}
		p.waitStall()
		if _, err := w.Write(msg); err != nil {
			return
		}
		if !wholePGMessageBuffered(r, true) && w.Flush() != nil {
			return
		}
	}
}

// Which part of a commit the proxy loses.
const (
	lossNone = iota
	lossRequest
	lossAnswer
)

// takeLoss decides the fate of a commit on its way: lost (its request or
// its answer) while commits are still to lose.
func (p *tcpProxy) takeLoss() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.loseRequests > 0:
		p.loseRequests--
		return lossRequest
	case p.loseAnswers > 0:
		p.loseAnswers--
		return lossAnswer
	}
	return lossNone
}

// lose cuts pc for a lost commit and records it.
// The loss is recorded before the cut, so that a client that sees its
// connection end finds it recorded.
func (p *tcpProxy) lose(pc *proxyConn, answered bool, owner string) {
	p.mu.Lock()
	p.lost = append(p.lost, lostCommit{T: time.Now(), Client: pc.client.RemoteAddr().String(), Answered: answered, Owner: owner})
	delete(p.conns, pc.client)
	p.mu.Unlock()
	pc.client.Close()
	pc.server.Close()
}

// end closes both sides of pc once either direction ends.
func (p *tcpProxy) end(pc *proxyConn) {
	pc.client.Close()
	pc.server.Close()
	p.mu.Lock()
	delete(p.conns, pc.client)
	p.mu.Unlock()
}

// close stops accepting, ends a stall, cuts every connection and waits for
// the copies.
func (p *tcpProxy) close() {
	p.ln.Close()
	p.setStall(false)
	p.cutAll()
	p.wg.Wait()
}

// maxPGMessage bounds a message the proxy reads whole: far more than any
// of the campaign's.
const maxPGMessage = 64 << 20

// readPGMessage reads one message of PostgreSQL's protocol from r into
// *buf and returns it whole: with typed, a type byte, then a length that
// counts itself and the body; without (a connection's first message), the
// length and the body.
func readPGMessage(r *bufio.Reader, typed bool, buf *[]byte) ([]byte, error) {
	head := 4
	if typed {
		head = 5
	}
	if cap(*buf) < head {
		*buf = make([]byte, head, 4096)
	}
	b := (*buf)[:head]
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(b[head-4:]))
	if n < 4 || n > maxPGMessage || (!typed && n < 8) {
		return nil, fmt.Errorf("a message of length %d: %w", n, errNotPG)
	}
	total := head - 4 + n
	if cap(b) < total {
		nb := make([]byte, total)
		copy(nb, b)
		b = nb
	}
	b = b[:total]
	if _, err := io.ReadFull(r, b[head:]); err != nil {
		return nil, err
	}
	*buf = b
	return b, nil
}

// errNotPG: what a connection carries is not PostgreSQL's protocol.
var errNotPG = errors.New("not PostgreSQL's protocol")

// wholePGMessageBuffered reports whether r holds a whole typed message
// already, which it can hand out without reading: until then what was
// written is flushed, so that nothing waits in the proxy for bytes still
// to come.
func wholePGMessageBuffered(r *bufio.Reader, typed bool) bool {
	if !typed || r.Buffered() < 5 {
		return false
	}
	h, err := r.Peek(5)
	if err != nil {
		return false
	}
	return r.Buffered() >= 1+int(binary.BigEndian.Uint32(h[1:5]))
}

// isCommit reports whether the text of a simple query (NUL-terminated) is
// COMMIT, as pgx sends it to commit a transaction.
func isCommit(q []byte) bool {
	s := strings.TrimSpace(strings.TrimRight(string(q), "\x00"))
	s = strings.TrimSpace(strings.TrimSuffix(s, ";"))
	return strings.EqualFold(s, "commit") || strings.EqualFold(s, "commit transaction") || strings.EqualFold(s, "end")
}
