// Package testredis gives tests a Redis: the shared one named by
// IDEM_TEST_REDIS (through testdb), or redis-server processes of the
// test's own on loopback ports (a single server that a test may restart,
// or a three-master Redis Cluster), each in a temporary directory and
// stopped when the test ends.
//
// A test that starts its own servers needs redis-server (and redis-cli for
// a cluster) on PATH. Without them it skips with a message saying so,
// except under CI=true, where it fails: a skipped test proves nothing.
package testredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testdb"
)

// startTimeout bounds the start of one server or of a cluster.
const startTimeout = 20 * time.Second

// Shared returns a client of the shared Redis of IDEM_TEST_REDIS, closed
// when t ends, and a key prefix of t's own ("test:<random>:"), whose keys
// are deleted when t ends.
func Shared(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opts, err := redis.ParseURL(testdb.DSN(t, testdb.Redis))
	require.NoError(t, err)
	opts.PoolSize = 8
	c := redis.NewClient(opts)
	prefix := "test:" + randomHex() + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		_ = c.Close()
	})
	return c, prefix
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// need returns the path of the executable name, or skips t (fails it under
// CI=true) when there is none.
func need(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (%v): under CI=true the tests that start their own Redis must run", name, err)
	}
	t.Skipf("%s is not installed: skipping a test that starts its own Redis (apt-get install redis-server)", name)
	return ""
}

// Server is a redis-server process of one test.
type Server struct {
	Addr string
	dir  string
	conf []string
	cmd  *exec.Cmd
	bin  string
}

// Start starts a redis-server on a free loopback port, without persistence
// (no RDB snapshots, no AOF) unless conf says otherwise, with the extra
// configuration conf ("maxmemory-policy", "allkeys-lru", ...). It is
// stopped when t ends.
func Start(t testing.TB, conf ...string) *Server {
	t.Helper()
	s := &Server{dir: t.TempDir(), conf: conf, bin: need(t, "redis-server")}
	port := freePort(t, false)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.start(t)
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log")}
	for i := 0; i+1 < len(s.conf); i += 2 {
		args = append(args, "--"+s.conf[i], s.conf[i+1])
	}
	s.cmd = exec.Command(s.bin, args...)
	require.NoError(t, s.cmd.Start())
	waitPing(t, s.Addr, s.dir)
}

func (s *Server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server (SIGKILL: no shutdown save) and starts it again
// on the same port and directory. Without persistence it comes back empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	s.start(t)
}

// Client returns a client of s, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 8})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// URL returns redis://addr/0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

func waitPing(t testing.TB, addr, dir string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	up := assert.Eventually(t, func() bool { return ping() == nil }, startTimeout, 20*time.Millisecond)
	if !up {
		err := ping()
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		t.Fatalf("redis-server on %s did not answer within %v: %v\n%s", addr, startTimeout, err, log)
	}
}

// freePort returns a loopback port that is free now (and whose cluster bus
// port, port+10000, is free too when bus is true).
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		if !bus {
			_ = ln.Close()
			return port
		}
		if port+10000 > 65535 {
			_ = ln.Close()
			continue
		}
		busLn, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		_ = ln.Close()
		if err != nil {
			continue
		}
		_ = busLn.Close()
		return port
	}
	t.Fatal("no free loopback port with a free cluster bus port")
	return 0
}

// Cluster is a Redis Cluster of three masters (no replicas) of one test.
type Cluster struct {
	Addrs   []string
	servers []*Server
}

// StartCluster starts three redis-server processes with cluster-enabled on
// free loopback ports, joins them with redis-cli --cluster create (the
// 16384 slots split in three) and waits until every node reports
// cluster_state:ok. They are stopped when t ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	cli := need(t, "redis-cli")
	c := &Cluster{}
	for range 3 {
		s := &Server{dir: t.TempDir(), bin: need(t, "redis-server"),
			conf: []string{"cluster-enabled", "yes", "cluster-config-file", "nodes.conf", "cluster-node-timeout", "5000"}}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, true)))
		s.start(t)
		t.Cleanup(func() { s.stop() })
		c.servers = append(c.servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	for _, addr := range c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		require.Eventually(t, func() bool {
			info, err := n.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		}, startTimeout, 20*time.Millisecond, "cluster node %s never reported cluster_state:ok", addr)
		_ = n.Close()
	}
	return c
}

// Client returns a cluster client of c, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: 8})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// String names the cluster's nodes.
func (c *Cluster) String() string { return fmt.Sprint(c.Addrs) }

// NodeClient returns a client of one node, closed when t ends.
func NodeClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill kills the node of the cluster at addr (SIGKILL) and does not restart
// it.
func (c *Cluster) Kill(t testing.TB, addr string) {
	t.Helper()
	for _, s := range c.servers {
		if s.Addr == addr {
			s.stop()
			return
		}
	}
	t.Fatalf("no node %s in the cluster %v", addr, c.Addrs)
}
