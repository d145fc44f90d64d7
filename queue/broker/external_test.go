package broker_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
)

// pki is a test CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type pki struct {
	dir                                          string
	ca, serverCert, serverKey, client, clientKey string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	p := pki{dir: dir}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mailroom test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	p.ca = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage, ips []net.IP) (certFile, keyFile string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.client, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth, nil)
	return p
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// roundTrip enqueues a task through an asynq client made from the
// broker's connection option and reads it back with an inspector.
func roundTrip(t *testing.T, b *broker.Broker) {
	t.Helper()
	ctx := context.Background()
	if err := b.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	c := asynq.NewClient(b.RedisConnOpt())
	defer c.Close()
	if _, err := c.EnqueueContext(ctx, asynq.NewTask("t:x", nil), asynq.TaskID("rt1"), asynq.Queue("rt")); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	in := asynq.NewInspector(b.RedisConnOpt())
	defer in.Close()
	if _, err := in.GetTaskInfo("rt", "rt1"); err != nil {
		t.Fatalf("read the task back: %v", err)
	}
}

func TestExternalRedisTLS(t *testing.T) {
	p := newPKI(t)
	addr := brokertest.RedisTLS(t, p.serverCert, p.serverKey, p.ca)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := "rediss://" + addr + "/0"

	b, err := broker.Open(ctx, broker.Config{RedisURL: url, TLS: broker.TLSFiles{CAFile: p.ca, CertFile: p.client, KeyFile: p.clientKey}})
	if err != nil {
		t.Fatalf("open with the CA and a client certificate: %v", err)
	}
	roundTrip(t, b)
	b.Close()

	for name, c := range map[string]broker.Config{
		"no client certificate": {RedisURL: url, TLS: broker.TLSFiles{CAFile: p.ca}},
		"no CA (system roots)":  {RedisURL: url, TLS: broker.TLSFiles{CertFile: p.client, KeyFile: p.clientKey}},
	} {
		if b, err := broker.Open(ctx, c); err == nil {
			b.Close()
			t.Errorf("%s: opened, want a refused handshake", name)
		}
	}
	for name, c := range map[string]broker.Config{
		"TLS files with redis://":  {RedisURL: "redis://" + addr, TLS: broker.TLSFiles{CAFile: p.ca}},
		"a cert without its key":   {RedisURL: url, TLS: broker.TLSFiles{CAFile: p.ca, CertFile: p.client}},
		"a CA file that is no PEM": {RedisURL: url, TLS: broker.TLSFiles{CAFile: p.clientKey + ".missing"}},
	} {
		_, err := broker.Open(ctx, c)
		if err == nil || !strings.Contains(err.Error(), "MAILROOM_REDIS_") {
			t.Errorf("%s: %v, want an error naming the setting", name, err)
		}
	}
}

func TestExternalRedisSentinel(t *testing.T) {
	master := brokertest.StartRedisProcess(t)
	sentinel := brokertest.Sentinel(t, "mailroom", master.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, cfg := range map[string]broker.Config{
		"url":      {RedisURL: "redis-sentinel://" + sentinel + "/mailroom/2"},
		"settings": {Sentinel: broker.Sentinel{Addrs: []string{sentinel}, Master: "mailroom"}},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := broker.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			roundTrip(t, b)
			// The keys are on the master the Sentinel named.
			direct := redis.NewClient(&redis.Options{Addr: master.Addr(), DB: map[string]int{"url": 2, "settings": 0}[name]})
			defer direct.Close()
			if n, err := direct.Exists(ctx, "asynq:{rt}:t:rt1").Result(); err != nil || n != 1 {
				t.Fatalf("the task is not on the master (%d, %v)", n, err)
			}
		})
	}
	for _, bad := range []string{"redis-sentinel://" + sentinel, "redis-sentinel:///mailroom", "redis-sentinel://" + sentinel + "/mailroom/x"} {
		if _, err := broker.Open(ctx, broker.Config{RedisURL: bad}); err == nil || !strings.Contains(err.Error(), "redis-sentinel://") {
			t.Errorf("%s: %v, want the URL's form named", bad, err)
		}
	}
	if _, err := broker.Open(ctx, broker.Config{Sentinel: broker.Sentinel{Master: "mailroom"}}); err == nil {
		t.Error("a master name without Sentinels opened")
	}
}

// logBuffer is a slog handler's writer safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func TestExternalRedisWarnings(t *testing.T) {
	url := brokertest.RedisServer(t) // no persistence, noeviction
	ctx := context.Background()
	open := func() string {
		var logs logBuffer
		b, err := broker.Open(ctx, broker.Config{RedisURL: url, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		return logs.String()
	}
	logs := open()
	if !strings.Contains(logs, "no persistence") || strings.Contains(logs, "evicts keys") {
		t.Fatalf("logs of a Redis without persistence and with noeviction:\n%s", logs)
	}
	admin, _ := redis.ParseURL(url)
	c := redis.NewClient(admin)
	defer c.Close()
	for _, kv := range [][2]string{{"maxmemory-policy", "allkeys-lru"}, {"appendonly", "yes"}} {
		if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	logs = open()
	if !strings.Contains(logs, "evicts keys") || !strings.Contains(logs, "allkeys-lru") || strings.Contains(logs, "no persistence") {
		t.Fatalf("logs of a Redis with allkeys-lru and appendonly:\n%s", logs)
	}
}
