package main

import (
	"net"
	"sync"
	"sync/atomic"
)

// tcpProxy is the shared-ledger campaign's TCP proxy on 127.0.0.1, between
// the workers and the database: it carries each connection byte for byte
// to the server it points at, until it cuts it. It can refuse new
// connections (accept and close them at once) for a while, and cut every
// connection it carries, as a network failure between a host and its
// database would. It is safe for concurrent use.
type tcpProxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	refuse bool
	conns  map[net.Conn]net.Conn // client -> server

	accepted, refused, cut atomic.Int64
	wg                     sync.WaitGroup
}

func newTCPProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]net.Conn{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the proxy's address, host:port.
func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// setTarget points new connections at the server at target (host:port).
func (p *tcpProxy) setTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// setRefuse makes the proxy close new connections at once (on), or carry
// them again (off).
func (p *tcpProxy) setRefuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// cutAll closes every connection carried now and returns how many.
func (p *tcpProxy) cutAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c, s := range p.conns {
		c.Close()
		s.Close()
		delete(p.conns, c)
		n++
	}
	p.cut.Add(int64(n))
	return n
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
		if refuse {
			p.refused.Add(1)
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			// The server is down: the client sees its connection closed.
			p.refused.Add(1)
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.refuse {
			// Refusing began while it connected: a connection that
			// cutAll did not see must not be carried either.
			p.mu.Unlock()
			p.refused.Add(1)
			c.Close()
			s.Close()
			continue
		}
		p.conns[c] = s
		p.mu.Unlock()
		p.accepted.Add(1)
		p.wg.Add(2)
		go p.carry(c, s, c)
		go p.carry(c, c, s)
	}
}

// carry copies src to dst until either fails, then closes both.
func (p *tcpProxy) carry(client, src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
	p.mu.Lock()
	delete(p.conns, client)
	p.mu.Unlock()
}

// close stops accepting, cuts every connection and waits for the copies.
func (p *tcpProxy) close() {
	p.ln.Close()
	p.cutAll()
	p.wg.Wait()
}
