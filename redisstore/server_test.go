package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process on a loopback port, started and
// stopped by the tests themselves.
type redisServer struct {
	port   int
	dir    string
	extra  []string // more redis-server arguments
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

const installHint = "redis-server not found: install it (Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis)"

var (
	shared       *redisServer
	redisMissing bool
)

// quiet drops go-redis's log lines ("connection refused" while the tests
// keep Redis down on purpose).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	if spec := os.Getenv(holderEnv); spec != "" {
		holdSlots(spec) // never returns
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, installHint+"; CI requires the real-Redis tests")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, installHint+"; skipping the tests that need it")
		redisMissing = true
		os.Exit(m.Run())
	}
	var err error
	shared, err = newRedisServer()
	if err == nil {
		err = shared.start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting redis-server:", err)
		os.Exit(1)
	}
	code := m.Run()
	shared.stop()
	os.RemoveAll(shared.dir)
	os.Exit(code)
}

func needRedis(t testing.TB) {
	t.Helper()
	if redisMissing {
		t.Skip(installHint)
	}
}

// freePort returns a loopback port that was free a moment ago, below 55536
// and with port+10000 free too (a Cluster node's bus port).
func freePort() (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port >= 55536 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		l.Close()
		if err == nil {
			bus.Close()
			return port, nil
		}
	}
}

func newRedisServer() (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "addrlimit-redis-")
	if err != nil {
		return nil, err
	}
	return &redisServer{port: port, dir: dir}, nil
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs redis-server without persistence and waits until it answers.
func (s *redisServer) start() error {
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--daemonize", "no", "--loglevel", "warning"}, s.extra...)
	s.cmd = exec.Command("redis-server", args...)
	dieWithTests(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(exited)
	}()
	s.exited = exited
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited: %w", s.addr(), err)
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("redis-server on %s did not answer: %w", s.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server at once, as a crash would.
func (s *redisServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// client returns a go-redis client for s, closed when the test ends.
func (s *redisServer) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// startServer starts a private redis-server for one test, killed when the
// test ends. A port taken between the choice and the start (by another
// process, or as a Cluster bus port, port+10000) costs a retry on another.
func startServer(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	needRedis(t)
	var err error
	for range 3 {
		var srv *redisServer
		if srv, err = newRedisServer(); err != nil {
			t.Fatal(err)
		}
		srv.extra = extra
		t.Cleanup(func() {
			srv.stop()
			os.RemoveAll(srv.dir)
		})
		if err = srv.start(); err == nil {
			return srv
		}
	}
	t.Fatal(err)
	return nil
}
