package amqp

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// corkConn is a session's socket with a cork. The client library writes and
// flushes every frame on its own, one write call each; while the acker has the
// cork in, the frames written (its acks, and any other frame meanwhile) gather in
// a buffer instead, and go out in one write when it takes the cork out. Behind a
// stalled delivery, where AMQP 0-9-1 allows only an ack per delivery, a burst of
// acks then costs one write, and the broker reads them in one go.
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    []byte
	err    error // a gathered write failed: the connection is closed
}

// corkedMax is how much a cork gathers before it writes anyway.
const corkedMax = 64 << 10

// dialCorked dials as amqp091.DefaultDial does, with a cork; the session reads
// the cork from *into.
func dialCorked(timeout time.Duration, into **corkConn) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		conn, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		// The client library clears this deadline once the login is done.
		if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			_ = conn.Close()
			return nil, err
		}
		c := &corkConn{Conn: conn}
		*into = c
		return c, nil
	}
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil:
		return 0, c.err
	case c.corked && len(c.buf)+len(p) <= corkedMax:
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if err := c.flush(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// cork starts gathering writes; uncork writes what was gathered. A nil cork (a
// connection dialed without one) does nothing.
func (c *corkConn) cork() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes what was gathered since cork, in one write. If that write fails,
// the connection is closed (the frames gathered were reported written) and the
// error returned.
func (c *corkConn) uncork() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.flush()
}

// flush writes the buffer out (mu held).
func (c *corkConn) flush() error {
	if c.err != nil || len(c.buf) == 0 {
		return c.err
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		c.err = fmt.Errorf("amqp: gathered frames not written: %w", err)
		_ = c.Conn.Close()
	}
	return c.err
}
