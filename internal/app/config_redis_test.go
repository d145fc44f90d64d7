package app

import (
	"slices"
	"strings"
	"testing"
)

// The external Redis settings are validated together, each error naming the
// setting to fix.
func TestRedisSettings(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string) (*Config, error) {
		return ParseConfig("serve", nil, func(k string) string { return env[k] }, nopWriter{})
	}
	cfg, err := parse(map[string]string{
		"MAILROOM_REDIS_SENTINELS": "10.0.0.1:26379, 10.0.0.2:26379", "MAILROOM_REDIS_SENTINEL_MASTER": "mymaster",
		"MAILROOM_REDIS_TLS_CA_FILE": "/etc/ca.pem",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal([]string(cfg.RedisSentinels), []string{"10.0.0.1:26379", "10.0.0.2:26379"}) || cfg.RedisSentinelMaster != "mymaster" {
		t.Fatalf("sentinels %q master %q", cfg.RedisSentinels, cfg.RedisSentinelMaster)
	}
	if _, err := parse(map[string]string{"MAILROOM_REDIS_URL": "redis-sentinel://10.0.0.1:26379/mymaster"}); err != nil {
		t.Fatalf("a redis-sentinel:// URL: %v", err)
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"MAILROOM_REDIS_SENTINELS": "10.0.0.1:26379"}, "MAILROOM_REDIS_SENTINELS"},
		{map[string]string{"MAILROOM_REDIS_SENTINEL_MASTER": "m"}, "MAILROOM_REDIS_SENTINELS"},
		{map[string]string{"MAILROOM_REDIS_SENTINELS": "nohostport", "MAILROOM_REDIS_SENTINEL_MASTER": "m"}, "MAILROOM_REDIS_SENTINELS"},
		{map[string]string{"MAILROOM_REDIS_URL": "rediss://r:6380", "MAILROOM_REDIS_TLS_CERT_FILE": "/c.pem"}, "MAILROOM_REDIS_TLS_CERT_FILE"},
		{map[string]string{"MAILROOM_REDIS_TLS_CA_FILE": "/ca.pem"}, "MAILROOM_REDIS_TLS_CA_FILE"},
		{map[string]string{"MAILROOM_REDIS_URL": "http://r:6379"}, "MAILROOM_REDIS_URL"},
	} {
		if _, err := parse(c.env); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.env, err, c.want)
		}
	}
}
