package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/internal/lifecycle"
	"mailroom/internal/testkit"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
)

func TestOpenRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      broker.Config
		contains []string
	}{
		{"expose on all interfaces", broker.Config{ExposeAddr: "0.0.0.0:6380", ExposePassword: "pw"}, []string{"loopback"}},
		{"expose without host", broker.Config{ExposeAddr: ":6380", ExposePassword: "pw"}, []string{"loopback"}},
		{"expose on a LAN address", broker.Config{ExposeAddr: "10.1.2.3:6380", ExposePassword: "pw"}, []string{"loopback"}},
		{"expose on a host name", broker.Config{ExposeAddr: "example.com:6380", ExposePassword: "pw"}, []string{"loopback"}},
		{"expose without port", broker.Config{ExposeAddr: "127.0.0.1", ExposePassword: "pw"}, []string{"expose address"}},
		{"expose without password", broker.Config{ExposeAddr: "127.0.0.1:0"}, []string{"password"}},
		{"negative clock tick", broker.Config{ClockTick: -time.Second}, []string{"clock tick"}},
		{"not a redis URL", broker.Config{RedisURL: "http://example.com"}, []string{"MAILROOM_REDIS_URL"}},
		{"unparsable URL", broker.Config{RedisURL: "redis://:s3cret@[::1"}, []string{"MAILROOM_REDIS_URL"}},
		{"unreachable redis", broker.Config{RedisURL: "redis://:s3cret@127.0.0.1:1/0"}, []string{"MAILROOM_REDIS_URL", "127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := broker.Open(t.Context(), tt.cfg)
			if err == nil {
				_ = b.Close()
				t.Fatal("Open succeeded, want an error")
			}
			for _, s := range tt.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if !strings.HasPrefix(err.Error(), "broker: ") {
				t.Errorf("error %q lacks the broker: prefix", err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q leaks the password", err)
			}
		})
	}
}

func TestEmbeddedFlag(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		want := strings.HasSuffix(t.Name(), "/embedded")
		if got := b.Embedded(); got != want {
			t.Errorf("Embedded() = %v, want %v", got, want)
		}
		if err := b.Ping(t.Context()); err != nil {
			t.Errorf("Ping: %v", err)
		}
		if got := b.ExposedAddr(); got != "" {
			t.Errorf("ExposedAddr() = %q, want empty", got)
		}
	})
}

func TestRedisConnOptMakesFreshClients(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		opt := b.RedisConnOpt()
		c1, ok1 := opt.MakeRedisClient().(redis.UniversalClient)
		c2, ok2 := opt.MakeRedisClient().(redis.UniversalClient)
		if !ok1 || !ok2 {
			t.Fatal("MakeRedisClient does not return a redis.UniversalClient")
		}
		defer c2.Close()
		if c1 == c2 || c1 == b.Client() {
			t.Fatal("MakeRedisClient returned a shared client")
		}
		ctx := t.Context()
		if err := c1.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("SET through a made client: %v", err)
		}
		if err := c1.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		// Same store, and closing one client leaves the others working.
		if got, err := c2.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Errorf("GET through another client = %q, %v; want v", got, err)
		}
		if got, err := b.Client().Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Errorf("GET through the shared client = %q, %v; want v", got, err)
		}
	})
}

func TestPasswordWithoutExposeIsIgnored(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(t.Context(), broker.Config{ExposePassword: "unused"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestCloseEmbedded(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(t.Context(), broker.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	made := b.RedisConnOpt().MakeRedisClient().(redis.UniversalClient)
	defer made.Close()
	ctx := t.Context()
	if err := made.Ping(ctx).Err(); err != nil {
		t.Fatalf("Ping before Close: %v", err)
	}

	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := b.Ping(ctx); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Ping after Close: err = %v, want ErrClosed", err)
	}
	// A client that outlives the broker fails; it must not bring the
	// embedded store back to life (goleak in TestMain would see it).
	if err := made.Ping(ctx).Err(); err == nil {
		t.Error("Ping through a made client after Close succeeded")
	}
	late := b.RedisConnOpt().MakeRedisClient().(redis.UniversalClient)
	defer late.Close()
	if err := late.Ping(ctx).Err(); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Ping through a client made after Close: err = %v, want ErrClosed", err)
	}
}

func TestCloseExternal(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(t.Context(), broker.Config{RedisURL: brokertest.RedisServer(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Ping(t.Context()); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Ping after Close: err = %v, want ErrClosed", err)
	}
}

func TestExposeNeedsPassword(t *testing.T) {
	t.Parallel()
	const password = "let-me-in"
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			b, err := broker.Open(t.Context(), broker.Config{ExposeAddr: addr, ExposePassword: password, ClockTick: brokertest.ClockTick})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = b.Close() })
			exposed := b.ExposedAddr()
			if !strings.HasPrefix(exposed, "127.0.0.1:") || strings.HasSuffix(exposed, ":0") {
				t.Fatalf("ExposedAddr() = %q, want 127.0.0.1 and a real port", exposed)
			}
			ctx := t.Context()
			if err := b.Client().Set(ctx, "seen", "yes", 0).Err(); err != nil {
				t.Fatalf("SET in process: %v", err)
			}

			anon := redis.NewClient(&redis.Options{Addr: exposed, MaxRetries: -1})
			defer anon.Close()
			for _, cmd := range [][]any{{"GET", "seen"}, {"INFO"}, {"INFO", "server"}, {"EVAL", "return redis.call('INFO')", "0"}} {
				if err := anon.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
					t.Errorf("%v without password: err = %v, want NOAUTH", cmd, err)
				}
			}
			wrong := redis.NewClient(&redis.Options{Addr: exposed, Password: "nope", MaxRetries: -1})
			defer wrong.Close()
			if err := wrong.Ping(ctx).Err(); err == nil {
				t.Error("PING with a wrong password succeeded")
			}

			authed := redis.NewClient(&redis.Options{Addr: exposed, Password: password})
			defer authed.Close()
			if got, err := authed.Get(ctx, "seen").Result(); err != nil || got != "yes" {
				t.Errorf("GET over TCP = %q, %v; want yes", got, err)
			}
			info, err := authed.Info(ctx, "server").Result()
			if err != nil {
				t.Fatalf("INFO over TCP: %v", err)
			}
			_, port, _ := strings.Cut(exposed, ":")
			if f := parseInfo(info); f["tcp_port"] != port {
				t.Errorf("INFO tcp_port = %q, want %s", f["tcp_port"], port)
			}
		})
	}
}

// parseInfo parses INFO text as asynq's RedisInfo does.
func parseInfo(s string) map[string]string {
	info := map[string]string{}
	for _, l := range strings.Split(s, "\r\n") {
		kv := strings.Split(l, ":")
		if len(kv) == 2 {
			info[kv[0]] = kv[1]
		}
	}
	return info
}

func TestInfo(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		c := b.Client()

		all, err := c.Info(ctx).Result()
		if err != nil {
			t.Fatalf("INFO: %v", err)
		}
		f := parseInfo(all)
		for _, k := range []string{"redis_version", "redis_mode", "uptime_in_seconds", "uptime_in_days",
			"connected_clients", "used_memory", "used_memory_human", "used_memory_peak_human",
			"total_connections_received", "total_commands_processed", "role"} {
			if f[k] == "" {
				t.Errorf("INFO lacks %s", k)
			}
		}
		for k := range f {
			if strings.ContainsAny(k, "\n# ") {
				t.Errorf("INFO has a mangled key %q", k)
			}
		}
		if n, err := strconv.Atoi(f["connected_clients"]); err != nil || n < 1 {
			t.Errorf("connected_clients = %q, want >= 1", f["connected_clients"])
		}
		if f["role"] != "master" {
			t.Errorf("role = %q, want master", f["role"])
		}

		server := parseInfo(c.Info(ctx, "server").Val())
		if server["redis_version"] == "" || server["connected_clients"] != "" {
			t.Errorf("INFO server = %v, want the server section only", server)
		}
		two := parseInfo(c.Info(ctx, "clients", "replication").Val())
		if two["connected_clients"] == "" || two["role"] == "" || two["redis_version"] != "" {
			t.Errorf("INFO clients replication = %v, want those two sections", two)
		}

		// From Lua: the embedded INFO must not take the lock EVAL holds.
		got, err := c.Eval(ctx, "return redis.call('INFO', 'server')", nil).Text()
		if err != nil {
			t.Fatalf("INFO from Lua: %v", err)
		}
		if parseInfo(got)["redis_version"] == "" {
			t.Errorf("INFO from Lua lacks redis_version: %q", got)
		}
	})
}

// TestTTLExpires: keys set with a TTL, directly or from Lua, disappear on
// time; on the embedded store that is the broker's clock at work.
func TestTTLExpires(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		testTTL(t, b, brokertest.ClockTick)
	})
}

// TestTTLExpiresDefaultTick checks the default clock tick runs once the
// broker's service (its clock) is started.
func TestTTLExpiresDefaultTick(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(t.Context(), broker.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	startClock(t, b)
	testTTL(t, b, time.Second)
}

// TestOpenLeavesTheClockToItsOwner: Open starts no clock (a TTL does not
// run down until the owner starts the broker's service), the embedded
// store has exactly one service and every call returns the same one.
func TestOpenLeavesTheClockToItsOwner(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(t.Context(), broker.Config{ClockTick: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	svcs := b.Services()
	if len(svcs) != 1 || b.Services()[0] != svcs[0] {
		t.Fatalf("Services = %v then %v, want the one clock both times", svcs, b.Services())
	}
	ctx := t.Context()
	if err := b.Client().Set(ctx, "k", "v", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // many ticks, had the clock run
	if n, err := b.Client().Exists(ctx, "k").Result(); err != nil || n != 1 {
		t.Fatalf("the key expired with no clock started (exists %d, %v)", n, err)
	}
	startClock(t, b)
	testkit.Eventually(t, 5*time.Second, "the key to expire once the clock runs", func() bool {
		n, err := b.Client().Exists(ctx, "k").Result()
		return err == nil && n == 0
	})
}

// startClock starts the broker's services until the test ends.
func startClock(t *testing.T, b *broker.Broker) {
	t.Helper()
	svcs := lifecycle.Sequence(b.Services())
	if err := svcs.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svcs.Stop(context.Background()) })
}

func testTTL(t *testing.T, b *broker.Broker, tick time.Duration) {
	t.Helper()
	ctx := t.Context()
	c := b.Client()
	const ttl = time.Second

	start := time.Now()
	if err := c.Set(ctx, "plain", "v", ttl).Err(); err != nil {
		t.Fatalf("SET EX: %v", err)
	}
	const script = "redis.call('SET', KEYS[1], 'v', 'PX', ARGV[1]) return redis.call('PTTL', KEYS[1])"
	pttl, err := c.Eval(ctx, script, []string{"lua"}, ttl.Milliseconds()).Int64()
	if err != nil {
		t.Fatalf("SET PX from Lua: %v", err)
	}
	if pttl <= 0 || pttl > ttl.Milliseconds() {
		t.Errorf("PTTL from Lua = %d, want in (0, %d]", pttl, ttl.Milliseconds())
	}
	if n, err := c.Exists(ctx, "plain", "lua").Result(); err != nil || n != 2 {
		t.Fatalf("EXISTS right after SET = %d, %v; want 2", n, err)
	}
	testkit.EventuallyNil(t, ttl+tick+3*time.Second, "keys to expire", func() error {
		n, err := c.Exists(ctx, "plain", "lua").Result()
		if err == nil && n != 0 {
			err = fmt.Errorf("%d keys left", n)
		}
		return err
	})
	// A TTL ends on a clock tick: up to one tick early, never more.
	if elapsed := time.Since(start); elapsed < ttl-tick {
		t.Errorf("keys with a %s TTL expired after %s", ttl, elapsed)
	}
}
