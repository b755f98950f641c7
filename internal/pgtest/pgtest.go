// Package pgtest gives tests a real PostgreSQL database: a throwaway
// database, shaper_test_<unix time>_<random>, created on the server that
// SHAPER_PG_DSN names (default DefaultDSN) for one test and dropped, with
// its connections, when the test ends.
//
// scripts/postgres.sh starts the machine's server, or installs Debian's
// postgresql when there is none. There is no skip: a server that does not
// answer fails the test with a message that says how to start one.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultDSN is the administrative connection used when SHAPER_PG_DSN is
// unset: a user who may CREATE DATABASE, over loopback TCP.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// EnvDSN names the environment variable that overrides DefaultDSN.
const EnvDSN = "SHAPER_PG_DSN"

// staleAge is how old a leftover test database (from a killed test run)
// must be before a new run drops it.
const staleAge = time.Hour

var sweepOnce sync.Once

// AdminDSN is the administrative DSN in use.
func AdminDSN() string {
	if d := os.Getenv(EnvDSN); d != "" {
		return d
	}
	return DefaultDSN
}

// Admin returns a connection to the administrative database, closed when
// the test ends. It fails the test when the server does not answer.
func Admin(tb testing.TB) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := connectAdmin(ctx, tb)
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// connectAdmin connects to the administrative database or fails the test.
func connectAdmin(ctx context.Context, tb testing.TB) *pgx.Conn {
	tb.Helper()
	c, err := pgx.Connect(ctx, AdminDSN())
	if err != nil {
		tb.Fatal(unreachable(err))
	}
	return c
}

// shared is the database of this test binary: created by the first test
// that asks for one, dropped when the last test using it ends.
var shared struct {
	sync.Mutex
	name string
	refs int
}

// DB gives the test a throwaway schema in this test run's throwaway
// database and returns a DSN whose search_path is that schema, so tests
// running in parallel each see only their own tables. The database,
// shaper_test_<unix time>_<random>, is created when the first test asks and
// dropped (WITH (FORCE): open connections are closed) when the last one
// using it ends; the schema is dropped with its test.
func DB(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := connectAdmin(ctx, tb)
	db, err := acquire(ctx, admin)
	admin.Close(ctx)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(release)
	dsn := WithDatabase(AdminDSN(), db)
	schema := "t_" + unsafe.ReplaceAllString(strings.ToLower(tb.Name()), "_")
	if len(schema) > 40 {
		schema = schema[:40]
	}
	var b [4]byte
	rand.Read(b[:])
	schema += "_" + hex.EncodeToString(b[:])
	Exec(tb, dsn, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			c.Close(ctx)
		}
	})
	return WithSearchPath(dsn, schema)
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

func acquire(ctx context.Context, admin *pgx.Conn) (string, error) {
	shared.Lock()
	defer shared.Unlock()
	if shared.refs == 0 {
		sweepOnce.Do(func() { sweep(ctx, admin) })
		var b [4]byte
		rand.Read(b[:])
		name := fmt.Sprintf("shaper_test_%d_%s", time.Now().Unix(), hex.EncodeToString(b[:]))
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", fmt.Errorf("CREATE DATABASE %s: %w", name, err)
		}
		shared.name = name
	}
	shared.refs++
	return shared.name, nil
}

func release() {
	shared.Lock()
	defer shared.Unlock()
	shared.refs--
	if shared.refs > 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, AdminDSN())
	if err != nil {
		return // swept by a later run once stale
	}
	defer c.Close(ctx)
	c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{shared.name}.Sanitize()+" WITH (FORCE)")
	shared.name = ""
}

// WithSearchPath is dsn (a URL or key=value DSN) with its connections'
// search_path set to schema.
func WithSearchPath(dsn, schema string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return dsn + " search_path=" + schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Pool returns a pool on dsn, closed when the test ends.
func Pool(tb testing.TB, dsn string) *pgxpool.Pool {
	tb.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("pgtest: pool: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// Exec runs statements on dsn (a fresh connection) and fails the test on
// an error.
func Exec(tb testing.TB, dsn string, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		tb.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// WithDatabase is dsn (a URL or key=value DSN) pointed at database name.
func WithDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return dsn + " dbname=" + name
}

// sweep drops test databases that a killed run left behind, once they are
// older than staleAge.
func sweep(ctx context.Context, admin *pgx.Conn) {
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'shaper\\_test\\_%'")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		parts := strings.Split(n, "_")
		if len(parts) != 4 {
			continue
		}
		sec, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil || time.Since(time.Unix(sec, 0)) < staleAge {
			continue
		}
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
	}
}

// unreachable is the failure message of a server that does not answer.
func unreachable(err error) string {
	return fmt.Sprintf("pgtest: PostgreSQL is not reachable at %s: %v\n"+
		"\tstart it with scripts/postgres.sh, or set %s to a server where the user may CREATE DATABASE",
		redact(AdminDSN()), err, EnvDSN)
}

func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return dsn
}
