// Package tcpproxy is a TCP proxy for the stores' tests: it forwards connections to a database server and
// plays what the network or the server can do to them. Down, it closes every connection and refuses new
// ones, as a server that stopped; frozen, it keeps them open and passes no byte either way, as a server
// that hangs; slow, it holds back every chunk, as a long way to the server does.
package tcpproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards the connections made to Addr to its target.
type Proxy struct {
	// Addr is the proxy's address (127.0.0.1 and a free port): give it to the client instead of the server's.
	Addr string

	mu     sync.Mutex
	down   bool
	frozen bool
	thawed *sync.Cond
	delay  time.Duration
	open   []net.Conn
}

// Start starts a proxy to target (host:port), stopped with its connections when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: l.Addr().String()}
	p.thawed = sync.NewCond(&p.mu)
	var conns sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		p.SetDown(true)
		p.Thaw()
		conns.Wait()
	})
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				client.Close()
				continue
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			p.mu.Lock()
			p.open = append(p.open, client, server)
			p.mu.Unlock()
			conns.Add(2)
			go func() { defer conns.Done(); p.pipe(server, client) }()
			go func() { defer conns.Done(); p.pipe(client, server) }()
		}
	}()
	return p
}

// pipe copies src to dst, chunk by chunk, waiting while the proxy is frozen and holding each chunk back
// by the delay; it closes dst when src ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.frozen {
			p.thawed.Wait()
		}
		delay := p.delay
		p.mu.Unlock()
		time.Sleep(delay)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: close the other side too
		}
	}
}

// SetDown stops (true) or restarts (false) the server as its clients see it: down closes every
// connection and refuses new ones.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.open {
			c.Close()
		}
		p.open = nil
	}
}

// Freeze passes no byte either way until Thaw, keeping the connections open.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Thaw ends a Freeze.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	p.frozen = false
	p.thawed.Broadcast()
	p.mu.Unlock()
}

// Slow holds back every chunk passed either way by delay from now on (0: none).
func (p *Proxy) Slow(delay time.Duration) {
	p.mu.Lock()
	p.delay = delay
	p.mu.Unlock()
}
