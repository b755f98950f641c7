package app_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/redisconn"
	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func startRedis(t *testing.T, args ...string) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(); srv.Cleanup() })
	return srv
}

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// redisOf is how the plan of yaml reaches Redis.
func redisOf(t *testing.T, yaml string) redisconn.Options {
	t.Helper()
	pl, err := plan.Build(parse(t, yaml))
	if err != nil {
		t.Fatal(err)
	}
	return pl.Redis
}

func ping(rdb redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

func TestRedisPasswordAndACLUser(t *testing.T) {
	const secret = "pa55-w0rd-never-logged"
	srv := startRedis(t, "--requirepass", secret)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: secret})
	defer admin.Close()
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "shaper", "on", ">acl-"+secret, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_REDIS_PW", secret)
	t.Setenv("TEST_REDIS_ACL_PW", "acl-"+secret)
	t.Setenv("TEST_REDIS_BAD_PW", "wrong")
	cases := []struct {
		name, redis string
		ok          bool
	}{
		{"password", fmt.Sprintf(`{url: "redis://%s", password_env: TEST_REDIS_PW}`, srv.Addr), true},
		{"acl user", fmt.Sprintf(`{url: "redis://%s", username: shaper, password_env: TEST_REDIS_ACL_PW}`, srv.Addr), true},
		{"wrong password", fmt.Sprintf(`{url: "redis://%s", password_env: TEST_REDIS_BAD_PW}`, srv.Addr), false},
		{"no password", fmt.Sprintf(`{url: "redis://%s"}`, srv.Addr), false},
	}
	for _, c := range cases {
		ro := redisOf(t, "redis: "+c.redis+"\nhttp: {listen: off}\ndownstreams: [{name: a, rate: 1/s, handler: {type: log}}]\n")
		rdb, closeFn, err := app.OpenRedis(ro)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = ping(rdb)
		closeFn()
		if (err == nil) != c.ok {
			t.Errorf("%s: ping err = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the password: %v", c.name, err)
		}
		if s := ro.String(); strings.Contains(s, secret) {
			t.Errorf("%s: the plan's Redis String() shows the password: %s", c.name, s)
		}
	}
}

// writeCerts makes a CA and a server certificate for 127.0.0.1.
func writeCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "shaper test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600)
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server.key", "EC PRIVATE KEY", keyDER)
}

func TestRedisTLSWithCAFile(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// redistest.Start adds a plain --port; TLS listens on its own port.
	srv := startRedis(t, "--tls-port", fmt.Sprint(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	_ = srv
	ro := redisOf(t, fmt.Sprintf("redis: {url: \"rediss://127.0.0.1:%d\", tls_ca_file: %q}\nhttp: {listen: off}\ndownstreams: [{name: a, rate: 1/s, handler: {type: log}}]\n", port, caFile))
	rdb, closeFn, err := app.OpenRedis(ro)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if err := ping(rdb); err != nil {
		t.Fatalf("ping over TLS with the CA file: %v", err)
	}
	// without the CA the server's certificate is not trusted
	ro2 := redisOf(t, fmt.Sprintf("redis: {url: \"rediss://127.0.0.1:%d\"}\nhttp: {listen: off}\ndownstreams: [{name: a, rate: 1/s, handler: {type: log}}]\n", port))
	rdb2, close2, err := app.OpenRedis(ro2)
	if err != nil {
		t.Fatal(err)
	}
	defer close2()
	if err := ping(rdb2); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("ping over TLS without the CA: %v, want a certificate error", err)
	}
}

// The daemon's logs never show a secret: Redis password, bearer token.
func TestSecretsNeverLogged(t *testing.T) {
	const secret = "do-not-log-this-9f8e7d"
	srv := startRedis(t, "--requirepass", secret)
	t.Setenv("TEST_LOG_PW", secret)
	t.Setenv("TEST_LOG_TOKEN", "tok-"+secret)
	cfg := parse(t, fmt.Sprintf(`
redis: {url: "redis://%s", password_env: TEST_LOG_PW}
http: {listen: "127.0.0.1:0", token_env: TEST_LOG_TOKEN}
downstreams: [{name: a, rate: 5/s, handler: {type: log}}]
`, srv.Addr))
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, app.Options{Logger: log, OnReady: func(string) { cancel() }})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shaper did not start and stop within 20s")
	}
	if !strings.Contains(buf.String(), "shaper started") {
		t.Fatalf("no start line in the log:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), secret) {
		t.Errorf("a secret appears in the log:\n%s", buf.String())
	}
}
