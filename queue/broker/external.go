package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// External Redis for production: TLS with a private CA and a client
// certificate, Sentinel for failover, and a check at start of the settings
// asynq relies on (noeviction) and of persistence.

// TLSFiles are the PEM files of a TLS connection to an external Redis.
type TLSFiles struct {
	// CAFile verifies the server (default: the system's roots).
	CAFile string
	// CertFile and KeyFile are a client certificate, for Redis servers
	// that require one (tls-auth-clients yes). Both or neither.
	CertFile, KeyFile string
}

func (f TLSFiles) set() bool { return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" }

// config returns the TLS configuration for serverName with the files.
func (f TLSFiles) config(base *tls.Config, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if base != nil {
		c = base.Clone()
		if c.MinVersion == 0 {
			c.MinVersion = tls.VersionTLS12
		}
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("broker: MAILROOM_REDIS_TLS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("broker: MAILROOM_REDIS_TLS_CA_FILE %s holds no PEM certificate", f.CAFile)
		}
		c.RootCAs = pool
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("broker: MAILROOM_REDIS_TLS_CERT_FILE and MAILROOM_REDIS_TLS_KEY_FILE go together: set both or neither")
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("broker: client certificate (MAILROOM_REDIS_TLS_CERT_FILE, MAILROOM_REDIS_TLS_KEY_FILE): %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Sentinel names the Sentinels watching a master.
type Sentinel struct {
	// Addrs are the Sentinels' host:port.
	Addrs []string
	// Master is the master's name in the Sentinels' configuration.
	Master string
	// Password is the Sentinels' own password (requirepass of Sentinel);
	// empty: none.
	Password string
}

// externalClient describes how to make clients of an external Redis: one
// server (redis://, rediss://, unix://) or a master found through Sentinel.
type externalClient struct {
	single   *redis.Options
	failover *redis.FailoverOptions
}

func (e externalClient) newClient() *redis.Client {
	if e.failover != nil {
		o := *e.failover
		return redis.NewFailoverClient(&o)
	}
	o := *e.single
	return redis.NewClient(&o)
}

// describe names the Redis for logs and errors (no password).
func (e externalClient) describe() string {
	if e.failover != nil {
		return fmt.Sprintf("master %q of the Sentinels %s", e.failover.MasterName, strings.Join(e.failover.SentinelAddrs, ","))
	}
	return e.single.Addr
}

// parseExternal turns the configuration into client options. A
// redis-sentinel://[:password@]host:port[,host:port...]/MASTER[/DB] URL, or
// Sentinel.Addrs with Sentinel.Master, selects Sentinel; the URL's password
// is the master's.
func parseExternal(cfg Config) (externalClient, error) {
	raw := cfg.RedisURL
	if strings.HasPrefix(raw, "redis-sentinel://") {
		return parseSentinelURL(cfg)
	}
	if len(cfg.Sentinel.Addrs) > 0 || cfg.Sentinel.Master != "" {
		if len(cfg.Sentinel.Addrs) == 0 || cfg.Sentinel.Master == "" {
			return externalClient{}, errors.New("broker: MAILROOM_REDIS_SENTINELS and MAILROOM_REDIS_SENTINEL_MASTER go together")
		}
		fo := &redis.FailoverOptions{MasterName: cfg.Sentinel.Master, SentinelAddrs: cfg.Sentinel.Addrs, SentinelPassword: cfg.Sentinel.Password}
		if raw != "" {
			// The URL then gives the master's password and db.
			opts, err := parseRedisURL(raw)
			if err != nil {
				return externalClient{}, err
			}
			fo.Username, fo.Password, fo.DB, fo.TLSConfig = opts.Username, opts.Password, opts.DB, opts.TLSConfig
		}
		return withTLSFailover(fo, cfg.TLS)
	}
	opts, err := parseRedisURL(raw)
	if err != nil {
		return externalClient{}, err
	}
	if cfg.TLS.set() {
		if opts.TLSConfig == nil {
			return externalClient{}, errors.New("broker: the MAILROOM_REDIS_TLS_* files need a rediss:// URL in MAILROOM_REDIS_URL")
		}
		host, _, _ := net.SplitHostPort(opts.Addr)
		if opts.TLSConfig, err = cfg.TLS.config(opts.TLSConfig, host); err != nil {
			return externalClient{}, err
		}
	}
	return externalClient{single: opts}, nil
}

func parseRedisURL(raw string) (*redis.Options, error) {
	opts, err := redis.ParseURL(raw)
	if err != nil {
		// url.Parse quotes the whole URL in its error, password included.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			uerr.URL = "(redacted)"
		}
		return nil, fmt.Errorf("broker: MAILROOM_REDIS_URL is not a valid Redis URL: %w", err)
	}
	return opts, nil
}

func parseSentinelURL(cfg Config) (externalClient, error) {
	bad := errors.New("broker: MAILROOM_REDIS_URL: want redis-sentinel://[:password@]host:port[,host:port...]/MASTER[/DB]")
	rest := strings.TrimPrefix(cfg.RedisURL, "redis-sentinel://")
	var userinfo string
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, rest = rest[:at], rest[at+1:]
	}
	hosts, path, _ := strings.Cut(rest, "/")
	path, query, _ := strings.Cut(path, "?")
	parts := strings.Split(path, "/")
	if hosts == "" || parts[0] == "" || len(parts) > 2 {
		return externalClient{}, bad
	}
	fo := &redis.FailoverOptions{MasterName: parts[0], SentinelPassword: cfg.Sentinel.Password}
	for _, h := range strings.Split(hosts, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return externalClient{}, bad
		}
		fo.SentinelAddrs = append(fo.SentinelAddrs, h)
	}
	if len(parts) == 2 && parts[1] != "" {
		db, err := strconv.Atoi(parts[1])
		if err != nil || db < 0 {
			return externalClient{}, bad
		}
		fo.DB = db
	}
	if userinfo != "" {
		user, pass, hasPass := strings.Cut(userinfo, ":")
		if !hasPass {
			pass, user = user, ""
		}
		var err error
		if fo.Username, err = url.PathUnescape(user); err != nil {
			return externalClient{}, bad
		}
		if fo.Password, err = url.PathUnescape(pass); err != nil {
			return externalClient{}, bad
		}
	}
	if q, err := url.ParseQuery(query); err == nil && q.Get("sentinel_password") != "" {
		fo.SentinelPassword = q.Get("sentinel_password")
	}
	return withTLSFailover(fo, cfg.TLS)
}

// withTLSFailover applies the TLS files to the Sentinels and the master
// alike.
func withTLSFailover(fo *redis.FailoverOptions, files TLSFiles) (externalClient, error) {
	if files.set() {
		c, err := files.config(fo.TLSConfig, "")
		if err != nil {
			return externalClient{}, err
		}
		fo.TLSConfig = c
	}
	return externalClient{failover: fo}, nil
}

// checkProduction warns, once at start, about settings of an external
// Redis under which it may lose tasks: an eviction policy other than
// noeviction (asynq's keys would be evicted under memory pressure) and no
// persistence (a restart forgets every task; mailroom hands them again
// from its outbox, but the windows kept there resume as spent).
func checkProduction(ctx context.Context, c *redis.Client, logger *slog.Logger) {
	policy, perr := configGet(ctx, c, "maxmemory-policy")
	if perr != nil {
		policy, perr = infoField(ctx, c, "memory", "maxmemory_policy")
	}
	switch {
	case perr != nil:
		logger.Warn("could not read maxmemory-policy of the external Redis (CONFIG and INFO refused); asynq needs noeviction", "err", perr)
	case policy != "noeviction":
		logger.Warn("the external Redis evicts keys under memory pressure: set maxmemory-policy to noeviction (asynq needs it); mailroom hands evicted tasks again from its outbox, but a full Redis then refuses work", "maxmemory_policy", policy)
	}
	aof, aerr := configGet(ctx, c, "appendonly")
	save, serr := configGet(ctx, c, "save")
	if aerr != nil || serr != nil {
		if v, err := infoField(ctx, c, "persistence", "aof_enabled"); err == nil && v == "1" {
			return
		}
		logger.Warn("could not read the persistence settings of the external Redis (CONFIG refused); without persistence a restart forgets every task and window", "err", errors.Join(aerr, serr))
		return
	}
	if aof != "yes" && strings.TrimSpace(save) == "" {
		logger.Warn("the external Redis has no persistence (appendonly no, save \"\"): a restart forgets every task; mailroom hands them again from its outbox, and rate limits and quotas kept there resume as if fully spent")
	}
}

func configGet(ctx context.Context, c *redis.Client, name string) (string, error) {
	m, err := c.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s: no such setting", name)
	}
	return v, nil
}

func infoField(ctx context.Context, c *redis.Client, section, field string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no %s", section, field)
}
