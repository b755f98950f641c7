package plan_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
)

// Secrets are read from the environment or a file when Read is called,
// never at Build; an unset or empty source names its field, in one line
// wrapping config.ErrInvalid. t.Setenv forbids t.Parallel here.
func TestSecretRead(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHAPER_TEST_PW", "from-env")
	t.Setenv("SHAPER_TEST_EMPTY", "")
	const f = "redis.password_env"
	for _, tt := range []struct {
		name    string
		s       plan.Secret
		want    string
		wantErr []string // substrings; nil: no error
	}{
		{"none", plan.Secret{Field: f}, "", nil},
		{"env", plan.Secret{Field: f, Env: "SHAPER_TEST_PW"}, "from-env", nil},
		{"env unset", plan.Secret{Field: f, Env: "SHAPER_TEST_UNSET_XYZ"}, "", []string{"redis.password_env", "SHAPER_TEST_UNSET_XYZ", "not set"}},
		{"env empty", plan.Secret{Field: f, Env: "SHAPER_TEST_EMPTY"}, "", []string{"redis.password_env", "SHAPER_TEST_EMPTY", "empty"}},
		{"file, trimmed", plan.Secret{Field: "redis.password_file", File: file}, "s3cret", nil},
		{"file empty", plan.Secret{Field: "redis.password_file", File: empty}, "", []string{"redis.password_file", empty, "empty"}},
		{"file missing", plan.Secret{Field: "redis.password_file", File: filepath.Join(dir, "nope")}, "", []string{"redis.password_file", "nope"}},
	} {
		got, err := tt.s.Read()
		if got != tt.want {
			t.Errorf("%s: Read() = %q, want %q", tt.name, got, tt.want)
		}
		switch {
		case tt.wantErr == nil && err != nil:
			t.Errorf("%s: Read() error %v", tt.name, err)
		case tt.wantErr != nil && err == nil:
			t.Errorf("%s: Read() no error, want %q", tt.name, tt.wantErr)
		case err != nil:
			if !errors.Is(err, config.ErrInvalid) || strings.ContainsAny(err.Error(), "\n") {
				t.Errorf("%s: error %q: want one line wrapping config.ErrInvalid", tt.name, err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not contain %q", tt.name, err, w)
				}
			}
		}
	}
}

// The secrets a config names, as the plan carries them: the Redis
// password (read when connecting), the bearer token and a postgres
// handler's DSN, each read at call time and never part of String.
func TestPlanSecrets(t *testing.T) {
	t.Setenv("SHAPER_TEST_PW", "from-env")
	t.Setenv("SHAPER_TEST_TOKEN", "tok")
	t.Setenv("SHAPER_TEST_BATCH_DSN", "postgres://u@db/x")
	p := build(t, `
redis: {url: 'redis://127.0.0.1:6379/0', password_env: SHAPER_TEST_PW}
http: {token_env: SHAPER_TEST_TOKEN}
downstreams:
  - name: db
    rate: 1/s
    batch: {max_rows: 10}
    handler: {type: postgres, dsn_env: SHAPER_TEST_BATCH_DSN, table: t, id_column: id, columns: {a: a}}
`)
	if p.Redis.Password == nil {
		t.Fatal("no password reader for a config with password_env")
	}
	if pw, err := p.Redis.Password(); pw != "from-env" || err != nil {
		t.Errorf("password = %q, %v; want from-env", pw, err)
	}
	if s := p.Redis.String(); strings.Contains(s, "from-env") || !strings.Contains(s, "password=env:SHAPER_TEST_PW") {
		t.Errorf("Redis.String() = %q: want the variable's name, not the password", s)
	}
	if tok, err := p.Token.Read(); tok != "tok" || err != nil {
		t.Errorf("token = %q, %v", tok, err)
	}
	pg := p.Downstreams[0].Handler.Postgres
	if pg == nil {
		t.Fatalf("handler = %+v, want postgres", p.Downstreams[0].Handler)
	}
	if dsn, err := pg.DSN.Read(); dsn != "postgres://u@db/x" || err != nil {
		t.Errorf("DSN = %q, %v", dsn, err)
	}
	os.Unsetenv("SHAPER_TEST_PW") // t.Setenv restores them
	os.Unsetenv("SHAPER_TEST_TOKEN")
	t.Setenv("SHAPER_TEST_BATCH_DSN", "")
	if _, err := p.Redis.Password(); err == nil || !strings.Contains(err.Error(), `config: redis.password_env: environment variable SHAPER_TEST_PW is not set`) {
		t.Errorf("password with the variable unset = %v", err)
	}
	if _, err := p.Token.Read(); err == nil || !strings.Contains(err.Error(), "http.token_env") {
		t.Errorf("token unset = %v", err)
	}
	var e *config.Error
	if _, err := pg.DSN.Read(); !errors.As(err, &e) || e.Path != "dsn_env" || !strings.Contains(e.Msg, "SHAPER_TEST_BATCH_DSN is empty") {
		t.Errorf("empty DSN variable: got %v, want an error on dsn_env", err)
	}
	if none := build(t, "downstreams: [{name: a, rate: 1/s, handler: {type: log}}]\n"); none.Redis.Password != nil || !none.Token.IsZero() {
		t.Errorf("a config without secrets: password reader %v, token %+v; want none", none.Redis.Password != nil, none.Token)
	}
}
