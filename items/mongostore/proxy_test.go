package mongostore_test

import (
	"net"
	"sync"
	"testing"
	"time"
)

// proxy forwards TCP connections to a server and can freeze: while frozen it accepts connections and
// keeps them open, and passes no byte either way, as a server that hangs does.
type proxy struct {
	addr string

	mu     sync.Mutex
	frozen bool
	thawed *sync.Cond
	// delay holds back every chunk passed either way: a slow server, or a long way to it.
	delay time.Duration
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: l.Addr().String()}
	p.thawed = sync.NewCond(&p.mu)
	var conns sync.WaitGroup
	var open []net.Conn
	var openMu sync.Mutex
	t.Cleanup(func() {
		l.Close()
		p.thaw()
		openMu.Lock()
		for _, c := range open {
			c.Close()
		}
		openMu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			openMu.Lock()
			open = append(open, client, server)
			openMu.Unlock()
			conns.Add(2)
			go func() { defer conns.Done(); p.pipe(server, client) }()
			go func() { defer conns.Done(); p.pipe(client, server) }()
		}
	}()
	return p
}

func (p *proxy) pipe(dst, src net.Conn) {
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

func (p *proxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *proxy) slow(delay time.Duration) {
	p.mu.Lock()
	p.delay = delay
	p.mu.Unlock()
}

func (p *proxy) thaw() {
	p.mu.Lock()
	p.frozen = false
	p.thawed.Broadcast()
	p.mu.Unlock()
}
