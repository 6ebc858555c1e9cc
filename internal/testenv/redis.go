package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis returns a client to a Redis server for t: IDEMKIT_REDIS_ADDR when set, else
// a private redis-server shared by the package's tests. The client is closed when t
// ends. Use Prefix(t) for keys.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	addr, err := sharedRedisAddr(t)
	if err != nil {
		missing(t, "Redis server (install redis-server or set IDEMKIT_REDIS_ADDR)", err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RedisAddr returns the address Redis(t) connects to.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr, err := sharedRedisAddr(t)
	if err != nil {
		missing(t, "Redis server (install redis-server or set IDEMKIT_REDIS_ADDR)", err)
	}
	return addr
}

var shared struct {
	once sync.Once
	addr string
	err  error
}

func sharedRedisAddr(t testing.TB) (string, error) {
	if a := os.Getenv("IDEMKIT_REDIS_ADDR"); a != "" {
		return a, nil
	}
	shared.once.Do(func() {
		srv, err := startRedis(nil)
		if err != nil {
			shared.err = fmt.Errorf("cannot start redis-server: %w", err)
			return
		}
		shared.addr = srv.Addr
		atExit(srv.kill)
	})
	return shared.addr, shared.err
}

// Server is a private redis-server process that a test may stop and start again
// on the same port.
type Server struct {
	Addr string
	Port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// RedisServer starts a private redis-server for t alone (never a shared one, so the
// test may stop it), stopped when t ends. It needs redis-server on PATH.
func RedisServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	srv, err := startRedis(extra)
	if err != nil {
		missing(t, "redis-server binary for a private server (install redis-server)", err)
	}
	t.Cleanup(srv.kill)
	return srv
}

// Client returns a new client to s, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartRedis starts a private redis-server outside a test (benchmarks, tools);
// stop it with Close. extra are further redis-server arguments.
func StartRedis(extra ...string) (*Server, error) { return startRedis(extra) }

// Close stops the server and removes its files.
func (s *Server) Close() { s.kill() }

func startRedis(extra []string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, err
	}
	dir, err := serverDir("idemkit-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--protected-mode", "no"}, extra...)
	if err := s.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Start starts the server (again) and waits until it answers PING.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = serverAttr()
	logf, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	_ = logf.Close()
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := ping(s.Addr); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			s.cmd = nil
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s did not answer: %s", s.Addr, strings.TrimSpace(string(log)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: like a crash) and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *Server) kill() {
	s.Stop()
	_ = os.RemoveAll(s.dir)
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New("unexpected reply " + strings.TrimSpace(line))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Cluster is a Redis Cluster of three private redis-server masters.
type Cluster struct {
	Nodes []*Server
}

// RedisCluster starts a three-master Redis Cluster for t (slots split in thirds, no
// replicas), stopped when t ends. It needs redis-server on PATH.
func RedisCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startCluster()
	if err != nil {
		missing(t, "Redis Cluster (three private redis-server processes; install redis-server)", err)
	}
	t.Cleanup(c.kill)
	return c
}

// Addrs lists the nodes' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Client returns a new cluster client, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func (c *Cluster) kill() {
	for _, n := range c.Nodes {
		n.kill()
	}
}

func startCluster() (*Cluster, error) {
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		n, err := startRedis([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000"})
		if err != nil {
			c.kill()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const slots = 16384
	for i, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		lo, hi := i*slots/3, (i+1)*slots/3-1
		err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		if err == nil && i > 0 {
			err = cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.Nodes[0].Port)).Err()
		}
		_ = cl.Close()
		if err != nil {
			c.kill()
			return nil, fmt.Errorf("cluster setup on %s: %w", n.Addr, err)
		}
	}
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if ctx.Err() != nil {
				_ = cl.Close()
				c.kill()
				return nil, fmt.Errorf("cluster on %s never became ready: %v", n.Addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cl.Close()
	}
	return c, nil
}

// Sentinel is a private Redis primary watched by one private Sentinel.
type Sentinel struct {
	MasterName string
	Primary    *Server
	Sentinel   *Server
}

// RedisSentinel starts a primary and a Sentinel that monitors it (quorum 1) for t,
// stopped when t ends. It needs redis-server on PATH.
func RedisSentinel(t testing.TB) *Sentinel {
	t.Helper()
	primary, err := startRedis(nil)
	if err != nil {
		missing(t, "redis-server binary for a Sentinel set-up (install redis-server)", err)
	}
	t.Cleanup(primary.kill)
	s, err := startSentinel("idemkit-primary", primary)
	if err != nil {
		missing(t, "Redis Sentinel", err)
	}
	t.Cleanup(s.kill)
	return &Sentinel{MasterName: "idemkit-primary", Primary: primary, Sentinel: s}
}

// Client returns a failover client that finds the primary through the Sentinel,
// closed when t ends.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Sentinel.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func startSentinel(name string, primary *Server) (*Server, error) {
	dir, err := serverDir("idemkit-sentinel-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 5000\n",
		port, dir, name, primary.Port, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, args: []string{conf, "--sentinel"}}
	if err := s.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}
