package redisconn_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/redisconn"
)

// Open never starts an embedded Redis (that is the daemon's) and says what
// is wrong with options it cannot open, without the URL's password.
func TestOpenRefusals(t *testing.T) {
	t.Parallel()
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg  redisconn.Options
		is   error  // nil: any error
		want string // part of the message
	}{
		{redisconn.Options{}, redisconn.ErrEmbedded, "names no Redis"},
		{redisconn.Options{URL: "redis://:s3cret@host:notaport"}, nil, "config: redis.url"},
		{redisconn.Options{URL: "redis://127.0.0.1:1", TLSCAFile: notPEM}, nil, "config: redis.tls_ca_file: no PEM certificate in " + notPEM},
		{redisconn.Options{URL: "redis://127.0.0.1:1", TLSCAFile: "/nonexistent/ca.pem"}, nil, "config: redis.tls_ca_file: open /nonexistent/ca.pem"},
		{redisconn.Options{URL: "redis://127.0.0.1:1", Password: func() (string, error) { return "", errors.New("config: redis.password_env: unset") }},
			nil, "config: redis.password_env: unset"},
	}
	for i, c := range cases {
		rdb, closeFn, err := redisconn.Open(c.cfg)
		if err == nil {
			closeFn()
			t.Errorf("case %d: Open(%+v) = %v, want an error", i, c.cfg, rdb)
			continue
		}
		if c.is != nil && !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("case %d: err = %v, want %v containing %q and no password", i, err, c.is, c.want)
		}
	}
}
