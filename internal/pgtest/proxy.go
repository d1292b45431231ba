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

	mu        sync.Mutex
	conns     map[*pair]struct{}
	dropReply bool // lose the server's next answer and cut its connection
	refuse    bool // close new connections at once

	roundTrips atomic.Int64
	wg         sync.WaitGroup
}

// pair is one proxied connection. last is the direction that last carried
// data: 1 client to server, 2 server to client.
type pair struct {
	client, server net.Conn
	last           atomic.Int32
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

// DropNextReply makes the proxy lose the next bytes a server sends on any
// connection and cut that connection: the client's request reached the
// server and took effect, and its answer is lost.
func (p *Proxy) DropNextReply() {
	p.mu.Lock()
	p.dropReply = true
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
			if dir == 1 && pr.last.Swap(1) != 1 {
				p.roundTrips.Add(1)
			}
			if dir == 2 {
				pr.last.Store(2)
				p.mu.Lock()
				drop := p.dropReply
				p.dropReply = false
				p.mu.Unlock()
				if drop {
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

func (p *Proxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
