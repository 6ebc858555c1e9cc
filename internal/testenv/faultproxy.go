package testenv

import (
	"net"
	"sync"
	"testing"
	"time"
)

// FaultProxy is a loopback TCP proxy in front of a server, for partition tests. It
// passes bytes both ways until told otherwise:
//
//   - Blackhole: bytes stop moving in both directions and nothing is closed, as in
//     a network partition: calls hang instead of failing. New connections are
//     accepted and hang too.
//   - DropNextReply: the next bytes the server sends are swallowed and that
//     connection is closed, as when a reply is lost after the server ran the command.
//   - SetDelay: every chunk waits d before it is forwarded (one way).
//   - Reset: every open connection is closed (a connection kill).
//   - Refuse: every open connection is closed and new ones are closed at once,
//     as while the server is down: calls fail fast instead of hanging.
//
// Pass undoes Blackhole and Refuse. The proxy is closed when the test that made it
// ends.
type FaultProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	black   bool
	refuse  bool
	changed chan struct{} // closed and replaced whenever black changes
	drop    bool
	delay   time.Duration
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewFaultProxy starts a proxy to target on a free loopback port for t.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{ln: ln, target: target, changed: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial instead of the target's.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops moving bytes in both directions, without closing anything.
func (p *FaultProxy) Blackhole() { p.setBlack(true) }

// Pass moves bytes again after Blackhole, and accepts connections again after Refuse.
func (p *FaultProxy) Pass() {
	p.mu.Lock()
	p.refuse = false
	p.mu.Unlock()
	p.setBlack(false)
}

// Refuse closes every open connection and every new one at once, until Pass.
func (p *FaultProxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = true
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *FaultProxy) setBlack(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.black != on {
		p.black = on
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

// DropNextReply swallows the next bytes any server connection sends and closes
// that connection: the server ran the command, the client never hears of it.
func (p *FaultProxy) DropNextReply() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = true
}

// SetDelay holds every chunk for d before forwarding it (0: no delay).
func (p *FaultProxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Reset closes every open connection; new ones are accepted as before.
func (p *FaultProxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *FaultProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	close(p.changed) // wake blackholed pipes so they see the closed connections
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *FaultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers conns, or reports false when the proxy is closed.
func (p *FaultProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.refuse {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *FaultProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *FaultProxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		_ = client.Close()
		return
	}
	if !p.waitPass() { // a partitioned client's connect hangs
		p.untrack(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server) {
		p.untrack(client, server)
		return
	}
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pipe(server, client, false) }()
	go func() { defer both.Done(); p.pipe(client, server, true) }()
	both.Wait()
	p.untrack(client, server)
}

// waitPass blocks while the proxy is blackholed; false when it was closed.
func (p *FaultProxy) waitPass() bool {
	for {
		p.mu.Lock()
		black, closed, changed := p.black, p.closed, p.changed
		p.mu.Unlock()
		switch {
		case closed:
			return false
		case !black:
			return true
		}
		<-changed
	}
}

// pipe copies src to dst chunk by chunk, applying the faults; fromServer marks
// the direction replies travel. It closes both ends when either side ends.
func (p *FaultProxy) pipe(dst, src net.Conn, fromServer bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitPass() {
				return
			}
			p.mu.Lock()
			drop := fromServer && p.drop
			if drop {
				p.drop = false
			}
			delay := p.delay
			p.mu.Unlock()
			if drop {
				return
			}
			if delay > 0 {
				time.Sleep(delay)
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
