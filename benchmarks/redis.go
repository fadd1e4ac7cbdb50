package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartRedis starts a redis-server on a free loopback port, without
// persistence, with its working directory in dir, and waits until it answers.
// It returns the server's address and a function that kills it (call it
// exactly once). ErrNoRedis means no redis-server binary is installed.
func StartRedis(dir string) (addr string, stop func(), err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return "", nil, ErrNoRedis
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	addr = "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server on %s did not answer within 10 s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr, stop, nil
}

// ErrNoRedis is StartRedis's error when redis-server is not installed.
var ErrNoRedis = errors.New("redis-server not found (Debian/Ubuntu: apt-get install -y redis-server)")
