package brokertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/internal/testkit"
)

// RedisTLS starts a redis-server that also serves TLS with the given PEM
// files, requiring client certificates signed by caFile
// (tls-auth-clients yes), and returns the TLS port's host:port. It skips
// (or fails under CI=true) like RedisServer.
func RedisTLS(t testing.TB, certFile, keyFile, caFile string) string {
	t.Helper()
	bin := lookRedis(t)
	var lastErr error
	for range startTries {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		tlsPort, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		stop, err := runRedis(bin, port, t.TempDir(),
			"--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
			"--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes")
		if err == nil {
			t.Cleanup(stop)
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
		}
		lastErr = err
	}
	t.Fatalf("brokertest: start redis-server with TLS: %v", lastErr)
	return ""
}

// Sentinel starts a redis-sentinel watching the master at masterAddr under
// name and returns its host:port once it knows the master. It skips (or
// fails under CI=true) when redis-sentinel is missing.
func Sentinel(t testing.TB, name, masterAddr string) string {
	t.Helper()
	bin := lookBinary(t, "redis-sentinel")
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range startTries {
		sport, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n", sport, dir, name, host, port, name)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		out := &testkit.Buffer{}
		cmd := exec.Command(bin, conf)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("brokertest: run %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() { _ = cmd.Process.Kill(); <-exited }
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
		if err := waitMaster(addr, name, exited); err != nil {
			stop()
			lastErr = fmt.Errorf("%w; output:\n%s", err, out.String())
			continue
		}
		t.Cleanup(stop)
		return addr
	}
	t.Fatalf("brokertest: start redis-sentinel: %v", lastErr)
	return ""
}

// waitMaster asks the Sentinel at addr for the master's address until it
// answers.
func waitMaster(addr, name string, exited <-chan struct{}) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.GetMasterAddrByName(ctx, name).Result()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-sentinel on %s does not know master %s after %s: %w", addr, name, startTimeout, err)
		}
		select {
		case <-exited:
			return errExited
		case <-time.After(20 * time.Millisecond):
		}
	}
}
