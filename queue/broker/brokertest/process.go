package brokertest

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

// RedisProcess is a redis-server without persistence that a test can stop
// and start again on the same port, to play a Redis that restarts and
// forgets everything.
type RedisProcess struct {
	t    testing.TB
	bin  string
	port int
	dir  string

	mu   sync.Mutex
	stop func()
}

// StartRedisProcess starts a redis-server (see RedisServer) that the test
// can Restart; it is killed when the test ends.
func StartRedisProcess(t testing.TB) *RedisProcess {
	t.Helper()
	p := &RedisProcess{t: t, bin: lookRedis(t), dir: t.TempDir()}
	var lastErr error
	for range startTries {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		p.port = port
		if lastErr = p.start(); lastErr == nil {
			t.Cleanup(p.Stop)
			return p
		}
	}
	t.Fatalf("brokertest: start redis-server: %v", lastErr)
	return nil
}

// URL is the server's redis:// URL.
func (p *RedisProcess) URL() string { return "redis://" + p.Addr() + "/0" }

// Addr is the server's host:port.
func (p *RedisProcess) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

func (p *RedisProcess) start() error {
	stop, err := runRedis(p.bin, p.port, p.dir)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.stop = stop
	p.mu.Unlock()
	return nil
}

// Stop kills the server (SIGKILL: nothing is saved).
func (p *RedisProcess) Stop() {
	p.mu.Lock()
	stop := p.stop
	p.stop = nil
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Start starts the server again on its port, empty.
func (p *RedisProcess) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatalf("brokertest: restart redis-server: %v", err)
	}
}
