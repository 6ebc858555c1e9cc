package idemprom_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/consumer"
	redisstore "github.com/idemkit/idemkit/store/redis"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopRedis()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// private is the redis-server this package starts for its tests, once.
var private struct {
	once sync.Once
	addr string
	dir  string
	cmd  *exec.Cmd
	err  error
}

// redisStore returns a Redis store for t on IDEMKIT_REDIS_ADDR, or else on a
// private redis-server (started on a free port on first use). Its keys have a
// prefix of their own, so a shared server's other keys are never touched. Without
// a server the test is skipped, or fails under IDEMKIT_REQUIRE_SERVICES=1.
func redisStore(t *testing.T, opts ...consumer.Option) *redisstore.Store {
	t.Helper()
	addr := os.Getenv("IDEMKIT_REDIS_ADDR")
	if addr == "" {
		private.once.Do(startRedis)
		if private.err != nil {
			if os.Getenv("IDEMKIT_REQUIRE_SERVICES") == "1" {
				t.Fatalf("no Redis server: %v (install redis-server or set IDEMKIT_REDIS_ADDR)", private.err)
			}
			t.Skipf("no Redis server: %v (install redis-server or set IDEMKIT_REDIS_ADDR)", private.err)
		}
		addr = private.addr
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	prefix := fmt.Sprintf("idemprom-test-%s-%d", t.Name(), time.Now().UnixNano())
	s, err := redisstore.NewStore(client, append([]consumer.Option{consumer.WithPrefix(prefix),
		redisstore.WithEvictionCheck(redisstore.EvictionIgnore)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startRedis() {
	if _, err := exec.LookPath("redis-server"); err != nil {
		private.err = err
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		private.err = err
		return
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "idemprom-redis-")
	if err != nil {
		private.err = err
		return
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		private.err = err
		return
	}
	private.addr, private.dir, private.cmd = "127.0.0.1:"+strconv.Itoa(port), dir, cmd
	for deadline := time.Now().Add(10 * time.Second); ; {
		if pong(private.addr) {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			private.err = fmt.Errorf("redis-server on %s did not answer PING: %s", private.addr, strings.TrimSpace(string(log)))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pong(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

func stopRedis() {
	if private.cmd != nil {
		_ = private.cmd.Process.Kill()
		_ = private.cmd.Wait()
		_ = os.RemoveAll(private.dir)
	}
}
