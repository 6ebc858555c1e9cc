package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicatedSentinel is a private primary, one replica that follows it through a
// FaultProxy, and a Sentinel watching them (quorum 1, the primary judged down
// after sentinelDownAfter). The proxy carries only the replication link: clients
// and the Sentinel reach both servers directly, so Link.Blackhole partitions the
// replica from the primary and nothing else.
type ReplicatedSentinel struct {
	MasterName string
	Primary    *Server
	Replica    *Server
	Sentinel   *Server
	Link       *FaultProxy // the replica's replication link to the primary
}

// sentinelDownAfter is how long the Sentinel of RedisReplicatedSentinel waits
// before it judges the primary down and fails over.
const sentinelDownAfter = 1500 * time.Millisecond

// RedisReplicatedSentinel starts a primary, a replica linked to it through a
// FaultProxy, and a Sentinel for t, stopped when t ends. It returns once the
// replica has caught up and the Sentinel knows it. It needs redis-server on PATH.
func RedisReplicatedSentinel(t testing.TB) *ReplicatedSentinel {
	t.Helper()
	primary, err := startRedis(nil)
	if err != nil {
		missing(t, "redis-server binary for a replicated Sentinel set-up (install redis-server)", err)
	}
	t.Cleanup(primary.kill)
	link := NewFaultProxy(t, primary.Addr)
	_, port, _ := net.SplitHostPort(link.Addr())
	replica, err := startRedis([]string{"--replicaof", "127.0.0.1", port})
	if err != nil {
		t.Fatalf("replica: %v", err)
	}
	t.Cleanup(replica.kill)
	rs := &ReplicatedSentinel{MasterName: "idemkit-replicated", Primary: primary, Replica: replica, Link: link}
	rs.WaitSynced(t, 20*time.Second)
	s, err := startSentinelAfter(rs.MasterName, primary, sentinelDownAfter)
	if err != nil {
		missing(t, "Redis Sentinel", err)
	}
	t.Cleanup(s.kill)
	rs.Sentinel = s
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	Eventually(t, 20*time.Second, "the Sentinel to know the replica", func() bool {
		reps, err := sc.Replicas(context.Background(), rs.MasterName).Result()
		return err == nil && len(reps) == 1
	})
	return rs
}

// Client returns a failover client that finds the primary through the Sentinel,
// closed when t ends.
func (s *ReplicatedSentinel) Client(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Sentinel.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// WaitSynced waits until the replica acknowledged every write the primary had
// applied when it was called (WAIT 1 on the primary answers 1).
func (s *ReplicatedSentinel) WaitSynced(t testing.TB, within time.Duration) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Primary.Addr})
	defer c.Close()
	Eventually(t, within, "the replica to catch up with the primary", func() bool {
		n, err := ReplicasAcked(context.Background(), c, "idemkit-testenv:acked", 1, 100*time.Millisecond)
		return err == nil && n >= 1
	})
}

// ReplicasAcked answers how many replicas of c's server acknowledged, within
// timeout, every write the server applied before the call: WAIT counts only the
// writes of its own connection, so it is sent behind a write of its own to mark
// (a key that expires at once; on a cluster node, one of a slot it serves) on one
// connection.
func ReplicasAcked(ctx context.Context, c *redis.Client, mark string, n int, timeout time.Duration) (int64, error) {
	pipe := c.Pipeline()
	set := pipe.Set(ctx, mark, "", time.Second)
	wait := redis.NewIntCmd(ctx, "wait", n, timeout.Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	if err := set.Err(); err != nil {
		return 0, err
	}
	return wait.Result()
}

// Failover kills the primary (SIGKILL) and waits until the Sentinel has promoted
// the replica and the replica answers as a primary.
func (s *ReplicatedSentinel) Failover(t testing.TB, within time.Duration) {
	t.Helper()
	s.Primary.Stop()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer sc.Close()
	rc := redis.NewClient(&redis.Options{Addr: s.Replica.Addr})
	defer rc.Close()
	want := strconv.Itoa(s.Replica.Port)
	Eventually(t, within, "the Sentinel to promote the replica", func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), s.MasterName).Result()
		if err != nil || len(addr) != 2 || addr[1] != want {
			return false
		}
		role, err := rc.Do(context.Background(), "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
}

// startSentinelAfter starts a Sentinel that monitors primary under name and judges
// it down after downAfter.
func startSentinelAfter(name string, primary *Server, downAfter time.Duration) (*Server, error) {
	dir, err := serverDir("idemkit-sentinel-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 20000\n",
		port, dir, name, primary.Port, name, downAfter.Milliseconds(), name)
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

// ReplicatedCluster is a Redis Cluster of three private masters, each with one
// private replica. The replicas take DEBUG from loopback (DEBUG SLEEP stalls one,
// as a partition stalls its replication).
type ReplicatedCluster struct {
	Cluster
	Replicas []*Server // Replicas[i] follows Nodes[i]
}

// RedisReplicatedCluster starts a three-master Redis Cluster with one replica per
// master for t, stopped when t ends, and returns once every replica has caught up.
// It needs redis-server on PATH.
func RedisReplicatedCluster(t testing.TB) *ReplicatedCluster {
	t.Helper()
	c, err := startCluster()
	if err != nil {
		missing(t, "Redis Cluster (three private redis-server processes; install redis-server)", err)
	}
	rc := &ReplicatedCluster{Cluster: *c}
	t.Cleanup(rc.kill)
	ctx := context.Background()
	for _, m := range c.Nodes {
		r, err := startRedis([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000", "--enable-debug-command", "local"})
		if err != nil {
			t.Fatalf("cluster replica: %v", err)
		}
		rc.Replicas = append(rc.Replicas, r)
		mc := redis.NewClient(&redis.Options{Addr: m.Addr})
		id, err := mc.Do(ctx, "CLUSTER", "MYID").Text()
		_ = mc.Close()
		if err != nil {
			t.Fatalf("cluster master id: %v", err)
		}
		cl := redis.NewClient(&redis.Options{Addr: r.Addr})
		err = cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(m.Port)).Err()
		if err == nil {
			// The replica may not know the master's id until the handshake ends.
			Eventually(t, 30*time.Second, "the replica to follow its master", func() bool {
				return cl.Do(ctx, "CLUSTER", "REPLICATE", id).Err() == nil
			})
		}
		_ = cl.Close()
		if err != nil {
			t.Fatalf("cluster replica meet: %v", err)
		}
	}
	for _, m := range c.Nodes {
		mc := redis.NewClient(&redis.Options{Addr: m.Addr})
		Eventually(t, 30*time.Second, "the cluster's replica to follow", func() bool {
			// Nothing is written yet: WAIT answers the replicas connected.
			n, err := mc.Wait(ctx, 1, 100*time.Millisecond).Result()
			return err == nil && n >= 1
		})
		Eventually(t, 30*time.Second, "the cluster to know six nodes", func() bool {
			info, err := mc.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:6")
		})
		_ = mc.Close()
	}
	return rc
}

func (c *ReplicatedCluster) kill() {
	c.Cluster.kill()
	for _, r := range c.Replicas {
		r.kill()
	}
}
