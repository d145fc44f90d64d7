// Package brokertest starts brokers for tests: the embedded store, and a real
// redis-server on a free loopback port, so that queue tests run against both.
//
// redis-server must be on PATH (Debian: apt-get install redis-server). When it
// is missing, tests that need it are skipped with a loud message, except
// when CI=true, where they fail: CI must run both backends.
package brokertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/internal/lifecycle"
	"mailroom/internal/testkit"
	"mailroom/queue/broker"
)

// ClockTick is the embedded store's clock tick in tests: short, so that TTLs
// end close to when a real Redis ends them.
const ClockTick = 100 * time.Millisecond

const (
	startTimeout = 10 * time.Second
	startTries   = 3
)

// Embedded opens an embedded broker (clock tick ClockTick) and closes it when
// the test ends.
func Embedded(t testing.TB) *broker.Broker {
	t.Helper()
	return open(t, broker.Config{ClockTick: ClockTick})
}

// Redis starts a redis-server (see RedisServer) and opens a broker on it,
// closed when the test ends.
func Redis(t testing.TB) *broker.Broker {
	t.Helper()
	return open(t, broker.Config{RedisURL: RedisServer(t)})
}

// Each runs fn as two subtests, "embedded" and "redis", each with a fresh
// broker of that kind. fn may call t.Parallel.
func Each(t *testing.T, fn func(t *testing.T, b *broker.Broker)) {
	t.Helper()
	t.Run("embedded", func(t *testing.T) { fn(t, Embedded(t)) })
	t.Run("redis", func(t *testing.T) { fn(t, Redis(t)) })
}

func open(t testing.TB, cfg broker.Config) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	b, err := broker.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("brokertest: %v", err)
		}
	})
	// The embedded store's clock runs for the whole test, as the app's
	// ordered services run it.
	if err := lifecycle.Sequence(b.Services()).Start(ctx); err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	return b
}

// lookRedis finds redis-server, or skips the test loudly (fails under
// CI=true).
func lookRedis(t testing.TB) string {
	t.Helper()
	return lookBinary(t, "redis-server")
}

func lookBinary(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		msg := "brokertest: " + name + " NOT FOUND on PATH: the tests against a real Redis did NOT run (install it: scripts/ci-deps.sh; CI=true makes this fatal)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		// Also on stderr: go test shows skip messages only with -v.
		fmt.Fprintf(os.Stderr, "--- %s: %s\n", t.Name(), msg)
		t.Skip(msg)
	}
	return bin
}

// RedisServer starts a redis-server on a free loopback port, without
// persistence, and returns its URL (redis://127.0.0.1:PORT/0). The server is
// killed when the test ends.
func RedisServer(t testing.TB) (url string) {
	t.Helper()
	bin := lookRedis(t)
	var lastErr error
	for range startTries {
		// Another process may take the free port before redis-server
		// binds it: try again with a new one.
		url, err := startRedis(t, bin)
		if err == nil {
			return url
		}
		lastErr = err
	}
	t.Fatalf("brokertest: start redis-server: %v", lastErr)
	return ""
}

func startRedis(t testing.TB, bin string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	stop, err := runRedis(bin, port, t.TempDir())
	if err != nil {
		return "", err
	}
	t.Cleanup(stop)
	return "redis://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/0", nil
}

// runRedis starts redis-server on port without persistence, waits until it
// answers, and returns the func that kills it. Extra arguments are appended
// to the command line.
func runRedis(bin string, port int, dir string, extra ...string) (stop func(), err error) {
	out := &testkit.Buffer{}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--loglevel", "warning",
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop = func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitReady(addr, exited); err != nil {
		stop()
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w: %w", err, waitErr)
		}
		return nil, fmt.Errorf("%w; output:\n%s", err, out.String())
	}
	return stop, nil
}

var errExited = errors.New("redis-server exited at start")

// waitReady pings addr until it answers, the server exits, or startTimeout.
func waitReady(addr string, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready after %s: %w", addr, startTimeout, err)
		}
		select {
		case <-exited:
			return errExited
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
