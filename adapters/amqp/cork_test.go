package amqp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// countingConn counts the write calls that reach a socket, and can fail them.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	fail   error
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		return 0, fail
	}
	return c.Conn.Write(p)
}

func (c *countingConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// corkPair returns a corked client socket over TCP, its write counter, and what
// the other end read once the client closes.
func corkPair(t *testing.T) (*corkConn, *countingConn, func() []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan []byte, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(s)
		_ = s.Close()
		got <- b
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConn{Conn: raw}
	c := &corkConn{Conn: cc}
	return c, cc, func() []byte { _ = c.Close(); return <-got }
}

func write(t *testing.T, c *corkConn, s string) {
	t.Helper()
	if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
		t.Fatalf("Write(%q) = %d, %v", s, n, err)
	}
}

// Uncorked, every write goes out as it comes; corked, the writes gather and go
// out in one write call at uncork, in order.
func TestCorkGathersWrites(t *testing.T) {
	c, cc, read := corkPair(t)
	write(t, c, "a1;")
	write(t, c, "a2;")
	if n := cc.count(); n != 2 {
		t.Fatalf("uncorked: %d write calls for 2 writes, want 2", n)
	}
	c.cork()
	for i := 0; i < 10; i++ {
		write(t, c, fmt.Sprintf("b%d;", i))
	}
	if n := cc.count(); n != 2 {
		t.Fatalf("corked: %d write calls after 10 more writes, want still 2", n)
	}
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	if n := cc.count(); n != 3 {
		t.Fatalf("uncork: %d write calls, want 3 (the 10 in one)", n)
	}
	if err := c.uncork(); err != nil || cc.count() != 3 {
		t.Fatalf("uncork with nothing gathered: %v, %d write calls; want nil and 3", err, cc.count())
	}
	write(t, c, "c;")
	want := "a1;a2;b0;b1;b2;b3;b4;b5;b6;b7;b8;b9;c;"
	if got := string(read()); got != want {
		t.Fatalf("the other end read %q, want %q", got, want)
	}
}

// A cork gathers at most corkedMax: a write that would pass it sends what was
// gathered, then itself; nothing is lost or reordered.
func TestCorkWritesPastItsLimit(t *testing.T) {
	c, cc, read := corkPair(t)
	c.cork()
	chunk := strings.Repeat("x", corkedMax/4)
	var want bytes.Buffer
	for i := 0; i < 6; i++ {
		s := fmt.Sprintf("%d%s", i, chunk[1:])
		write(t, c, s)
		want.WriteString(s)
	}
	if n := cc.count(); n == 0 || n > 3 {
		t.Fatalf("%d write calls while corked past its limit, want 1 to 3", n)
	}
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	if got := read(); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("the other end read %d bytes, want %d in order", len(got), want.Len())
	}
}

// Writers racing a corking acker: every byte arrives, each writer's in its order.
func TestCorkUnderConcurrentWriters(t *testing.T) {
	c, _, read := corkPair(t)
	const writers, each = 4, 500
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := c.Write([]byte(fmt.Sprintf("w%d:%04d;", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 300; i++ {
			c.cork()
			if err := c.uncork(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	<-done
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	next := make([]int, writers)
	for _, rec := range strings.Split(strings.TrimSuffix(string(read()), ";"), ";") {
		var w, i int
		if _, err := fmt.Sscanf(rec, "w%d:%d", &w, &i); err != nil {
			t.Fatalf("record %q: %v", rec, err)
		}
		if i != next[w] {
			t.Fatalf("writer %d: record %d arrived where %d was due", w, i, next[w])
		}
		next[w]++
	}
	for w, n := range next {
		if n != each {
			t.Errorf("writer %d: %d records arrived, want %d", w, n, each)
		}
	}
}

// A gathered write that fails closes the socket: uncork says so, and every later
// write fails with the same error instead of being reported written.
func TestCorkFailedWriteClosesTheConnection(t *testing.T) {
	c, cc, _ := corkPair(t)
	c.cork()
	write(t, c, "ack;")
	cc.mu.Lock()
	cc.fail = errors.New("broken pipe")
	cc.mu.Unlock()
	err := c.uncork()
	if err == nil || !strings.Contains(err.Error(), "gathered frames not written") || !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("uncork after a failed write = %v, want the gathered frames reported not written", err)
	}
	if _, werr := c.Write([]byte("later")); !errors.Is(werr, err) {
		t.Fatalf("a write after the failure = %v, want %v", werr, err)
	}
	if _, rerr := cc.Conn.Read(make([]byte, 1)); rerr == nil {
		t.Fatal("the socket is still open after the failed gathered write")
	}
}

// A session without a cork (nil) acks as before.
func TestNilCork(t *testing.T) {
	var c *corkConn
	c.cork()
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
}
