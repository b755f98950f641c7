package pgtest

import (
	"bytes"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of the PostgreSQL server, for outage
// tests that must not touch the shared server: Stop is the server going
// away (every connection cut mid-stream, new ones refused), Resume is it
// coming back on the same address, and CutAfterCommit loses the reply to a
// COMMIT that the server did execute.
type Proxy struct {
	Addr   string
	target string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]bool
	cutNext int // COMMITs whose reply to lose
	cuts    int
}

// NewProxy starts a proxy to the server of dsn on a free loopback port and
// returns it and dsn rewritten to go through it. It stops when the test
// ends.
func NewProxy(tb testing.TB, dsn string) (*Proxy, string) {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		tb.Fatalf("pgtest: proxy needs a postgres:// URL DSN, got %s", redact(dsn))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pgtest: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: u.Host, ln: ln, conns: map[net.Conn]bool{}}
	go p.accept(ln)
	tb.Cleanup(p.Stop)
	u.Host = p.Addr
	return p, u.String()
}

// Stop closes the listener and every proxied connection.
func (p *Proxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Resume listens again on the same address.
func (p *Proxy) Resume(tb testing.TB) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		tb.Fatalf("pgtest: proxy resume on %s: %v", p.Addr, err)
	}
	p.ln = ln
	go p.accept(ln)
}

// CutAfterCommit makes the proxy lose the server's reply to the next n
// COMMIT statements (simple protocol) that clients send: the COMMIT reaches
// the server and is executed, and the client's connection is cut before
// the answer comes back, so the client cannot know the outcome.
func (p *Proxy) CutAfterCommit(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutNext += n
}

// Cuts is how many COMMIT replies the proxy has lost so far.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

var commitMsg = []byte("Q\x00\x00\x00\x0bCOMMIT\x00")

func (p *Proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		client.Close()
		server.Close()
		return
	}
	cut := make(chan struct{})
	pumped := make(chan struct{})
	go func() {
		// server → client. After a cut, the next reply (the COMMIT's) is
		// read and dropped.
		defer close(pumped)
		defer client.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			select {
			case <-cut:
				return
			default:
			}
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	if p.pump(client, server, cut) {
		client.Close()
		<-pumped // the server answered the COMMIT, so it executed it
	}
	p.untrack(client, server)
}

// pump copies client → server until either side fails; it reports true
// (having closed cut) when it stopped to lose a COMMIT's reply.
func (p *Proxy) pump(client, server net.Conn, cut chan struct{}) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			cutHere := false
			if bytes.Contains(buf[:n], commitMsg) {
				p.mu.Lock()
				if p.cutNext > 0 {
					p.cutNext--
					p.cuts++
					cutHere = true
				}
				p.mu.Unlock()
			}
			if cutHere {
				close(cut) // before the COMMIT leaves: its reply is not forwarded
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return false
			}
			if cutHere {
				return true
			}
		}
		if err != nil {
			return false
		}
	}
}
