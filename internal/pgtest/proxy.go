package pgtest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a server: connections to
// [Proxy.Addr] are carried to the server byte for byte until the proxy cuts
// them. It is safe for concurrent use, and closed when the test ends.
type Proxy struct {
	ln     net.Listener
	target string

	mu          sync.Mutex
	conns       map[*pair]struct{}
	dropReply   int // > 0: lose the answer to the next request of at least this many bytes, and cut
	dropRequest int // > 0: lose the next request of at least this many bytes, and cut
	refuse      bool

	roundTrips atomic.Int64
	drops      atomic.Int64
	wg         sync.WaitGroup
}

// pair is one proxied connection. last is the direction that last carried
// data: 1 client to server, 2 server to client; sent counts the bytes of the
// client's request since the server last answered.
type pair struct {
	client, server net.Conn
	last           atomic.Int32
	sent           atomic.Int64
}

// NewProxy starts a proxy to the server at target (host:port).
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// RoundTrips counts the exchanges carried so far: each time a client sends
// after the server last sent to it (or first sends) is one.
func (p *Proxy) RoundTrips() int64 { return p.roundTrips.Load() }

// Drops counts the requests and replies lost so far through DropNextReply
// and DropNextRequest.
func (p *Proxy) Drops() int64 { return p.drops.Load() }

// Cut closes every connection carried now, as a network failure or a
// server restart would. New connections are carried as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.client.Close()
		c.server.Close()
	}
}

// DropNextReply makes the proxy lose the server's answer to the next request
// of at least min bytes (on any connection) and cut that connection: the
// request reached the server and took effect, and its answer is lost. min
// tells a call's request from the small ones a client makes on its own
// (pgxpool pings a connection that was idle for a second).
func (p *Proxy) DropNextReply(min int) {
	p.mu.Lock()
	p.dropReply = min
	p.mu.Unlock()
}

// DropNextRequest makes the proxy lose the next request of at least min
// bytes before the server sees it, and cut that connection: the client
// sent it and cannot know that nothing took effect.
func (p *Proxy) DropNextRequest(min int) {
	p.mu.Lock()
	p.dropRequest = min
	p.mu.Unlock()
}

// Refuse makes the proxy close new connections at once (on) or carry them
// again (off).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		p.conns[pr] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.carry(pr, c, s, 1)
		go p.carry(pr, s, c, 2)
	}
}

// carry copies from src to dst until either fails, then closes both.
func (p *Proxy) carry(pr *pair, src, dst net.Conn, dir int32) {
	defer p.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, pr)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if dir == 1 {
				if pr.last.Swap(1) != 1 {
					p.roundTrips.Add(1)
					pr.sent.Store(0)
				}
				if p.take(&p.dropRequest, pr.sent.Add(int64(n))) {
					return
				}
			} else {
				pr.last.Store(2)
				if p.take(&p.dropReply, pr.sent.Load()) {
					return
				}
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

// take reports whether a drop armed in *min applies to a request of size
// bytes, and disarms it if so.
func (p *Proxy) take(min *int, size int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if *min > 0 && size >= int64(*min) {
		*min = 0
		p.drops.Add(1)
		return true
	}
	return false
}

func (p *Proxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
