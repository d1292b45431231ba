package main

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// stallProxy is a TCP proxy on 127.0.0.1 that can go silent, as a store
// behind a network partition does: while stalled, it takes connections and
// bytes and passes none on, so that a client waits for answers that do not
// come instead of being refused. Once resumed, what it held goes on.
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	resumed chan struct{} // closed while not stalled
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	held    atomic.Int64
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, resumed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.resumed)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Resume()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *stallProxy) Addr() string { return p.ln.Addr().String() }

// Stall holds every byte and connection from now on, until Resume.
func (p *stallProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
		p.resumed = make(chan struct{})
	default:
	}
}

// Resume lets what was held, and what comes, through.
func (p *stallProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
	default:
		close(p.resumed)
	}
}

// Held counts the connections and the chunks of clients' bytes that came
// while the proxy was stalled: requests that a client waits on.
func (p *stallProxy) Held() int64 { return p.held.Load() }

func (p *stallProxy) stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
		return false
	default:
		return true
	}
}

// gate waits while the proxy is stalled.
func (p *stallProxy) gate() {
	p.mu.Lock()
	ch := p.resumed
	p.mu.Unlock()
	<-ch
}

func (p *stallProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c, true)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.track(c, false)
			defer c.Close()
			if p.stalled() {
				p.held.Add(1)
			}
			p.gate()
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			p.track(s, true)
			defer p.track(s, false)
			defer s.Close()
			done := make(chan struct{}, 2)
			go func() { p.carry(s, c, true); done <- struct{}{} }()
			go func() { p.carry(c, s, false); done <- struct{}{} }()
			<-done
			c.Close()
			s.Close()
			<-done
		}()
	}
}

// carry copies src to dst, holding each chunk while the proxy is stalled.
// fromClient: src is the client.
func (p *stallProxy) carry(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient && p.stalled() {
				p.held.Add(1)
			}
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
