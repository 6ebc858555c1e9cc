// Package benchkit measures the lanes of idemkit's benchmark programs the same way:
// CPU time of this process and of the server from /proc/<pid>/stat, allocations from
// the Go runtime, commands counted on the client, and wall time, summed over
// interleaved slices so that the machine's noise falls on every lane alike.
package benchkit

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on Linux).
const clockTicks = 100

// CPUTime is the user+system CPU time of process pid, or 0 when it cannot be read
// (pid < 0: not on this machine). For this process (pid 0) it comes from
// getrusage, to the microsecond; for another, from /proc/<pid>/stat in 10 ms
// ticks (SchedCPU counts a server's threads in nanoseconds). A lane of 10,000
// messages at 2 us each is 20 ms of CPU: in ticks, each reading of it could be
// off by half.
func CPUTime(pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if pid < 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// RedisInfo returns a Redis server's version and its process id when it runs on
// this machine (-1 otherwise).
func RedisInfo(ctx context.Context, c *redis.Client) (version string, pid int) {
	version, pid = "unknown", -1
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return version, pid
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			version = v
		}
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			if p, err := strconv.Atoi(v); err == nil {
				if _, err := os.Stat("/proc/" + v); err == nil {
					pid = p
				}
			}
		}
	}
	return version, pid
}

// Forget deletes the keys matching pattern (a SCAN pattern), a thousand per DEL,
// and returns how many it deleted. Benches call it between measured lanes, so that
// every lane starts from the same keyspace and pays the same rehashes as its
// table grows: records piling up from lane to lane would grow the keyspace past a
// power of two during some later lane, which would then pay Redis's rehash of
// every key before it. DEL, not UNLINK: the memory is freed before the next lane
// starts, not by a background thread whose CPU that lane's Redis figure would
// count.
func Forget(ctx context.Context, c *redis.Client, pattern string) (int, error) {
	it := c.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("forget %s: %w", pattern, err)
	}
	for lo := 0; lo < len(keys); lo += 1000 {
		if err := c.Del(ctx, keys[lo:min(lo+1000, len(keys))]...).Err(); err != nil {
			return lo, fmt.Errorf("forget %s: %w", pattern, err)
		}
	}
	return len(keys), nil
}

// UsedMemory is a Redis server's used_memory.
func UsedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

// Counter counts commands a client sends; the lanes read it.
type Counter interface{ Load() int64 }

// Lane is one path of a benchmark, measured over any number of slices.
type Lane struct {
	Name      string
	Msgs      int
	Elapsed   time.Duration
	GoCPU     time.Duration // this process
	ServerCPU time.Duration // the server process (0 when it is not on this machine)
	Calls     int64         // commands sent, pipelined ones each
	Mallocs   uint64
	Bytes     uint64
}

// Env is what every lane of one program is measured against.
type Env struct {
	ServerPid int     // -1 when the server is not on this machine
	Calls     Counter // nil: not counted
}

// Measure runs body, which handles msgs messages, and adds what it cost to l.
func (e Env) Measure(l *Lane, msgs int, body func() error) error {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var c0 int64
	if e.Calls != nil {
		c0 = e.Calls.Load()
	}
	g0, s0 := CPUTime(0), CPUTime(e.ServerPid)
	start := time.Now()
	if err := body(); err != nil {
		return fmt.Errorf("%s: %w", l.Name, err)
	}
	l.Elapsed += time.Since(start)
	l.GoCPU += CPUTime(0) - g0
	l.ServerCPU += CPUTime(e.ServerPid) - s0
	runtime.ReadMemStats(&m1)
	l.Mallocs += m1.Mallocs - m0.Mallocs
	l.Bytes += m1.TotalAlloc - m0.TotalAlloc
	if e.Calls != nil {
		l.Calls += e.Calls.Load() - c0
	}
	l.Msgs += msgs
	return nil
}

// Rate is messages per second.
func (l *Lane) Rate() float64 { return float64(l.Msgs) / l.Elapsed.Seconds() }

// PerMsg is d per message in microseconds.
func (l *Lane) PerMsg(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e3 / float64(l.Msgs)
}

// CallsPerMsg is commands per message.
func (l *Lane) CallsPerMsg() float64 { return float64(l.Calls) / float64(l.Msgs) }

// AllocsPerMsg and BytesPerMsg are the Go heap allocations per message.
func (l *Lane) AllocsPerMsg() float64 { return float64(l.Mallocs) / float64(l.Msgs) }

// BytesPerMsg is bytes allocated per message.
func (l *Lane) BytesPerMsg() float64 { return float64(l.Bytes) / float64(l.Msgs) }

// Table prints lanes with the columns every idemkit benchmark shows, each rate also
// as a ratio to ref's.
func Table(w io.Writer, ref *Lane, lanes ...*Lane) {
	fmt.Fprintf(w, "%-40s %9s %10s %7s %9s %11s %10s %9s %9s\n", "lane", "messages", "msgs/s", "vs ref",
		"calls/msg", "server us/msg", "Go us/msg", "allocs/msg", "B/msg")
	for _, l := range lanes {
		fmt.Fprintf(w, "%-40s %9d %10.0f %6.2fx %9.3f %13.2f %10.2f %10.1f %9.0f\n", l.Name, l.Msgs, l.Rate(),
			l.Rate()/ref.Rate(), l.CallsPerMsg(), l.PerMsg(l.ServerCPU), l.PerMsg(l.GoCPU), l.AllocsPerMsg(), l.BytesPerMsg())
	}
}

// Verdict is "met" or "MISSED".
func Verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// Median is the median of v (0 when v is empty); v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Mean is the mean of v (0 when v is empty).
func Mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

// SchedCPU is the CPU time of every thread of process pid from the scheduler's
// own count in nanoseconds (/proc/<pid>/task/<tid>/schedstat), finer than
// CPUTime's 10 ms ticks; 0 when pid < 0 or the kernel does not keep it. Threads
// that exited between two reads drop out of the second: read it around work of
// a process whose threads live on (a broker, a server).
func SchedCPU(pid int) time.Duration {
	if pid < 0 {
		return 0
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			total += n
		}
	}
	return time.Duration(total)
}
