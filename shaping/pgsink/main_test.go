package pgsink_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/pgtest"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/shaping"
	"github.com/shaper-io/shaper/shaping/pgsink"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// table is the test table: n is the producer's row number (not unique, so
// a row written twice under two IDs would show), amount may not be
// negative, committed_at is the writing transaction's start.
const table = `CREATE TABLE imports (
	task_id      text PRIMARY KEY,
	n            integer NOT NULL,
	amount       integer CHECK (amount >= 0),
	note         text DEFAULT 'none',
	doc          jsonb,
	committed_at timestamptz NOT NULL DEFAULT now()
)`

var columns = map[string]string{"n": "n", "amount": "amount", "note": "note", "doc": "doc"}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bundle is what a test works with.
type bundle struct {
	dsn    string // the test database, directly
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	prefix string
	rec    *recorder
	m      *metrics.Metrics
}

func setup(t *testing.T) *bundle {
	t.Helper()
	dsn := pgtest.DB(t)
	pgtest.Exec(t, dsn, table)
	return &bundle{dsn: dsn, pool: pgtest.Pool(t, dsn), rdb: redistest.Client(t), prefix: redistest.Prefix(t), rec: &recorder{}}
}

// sink builds a Sink on pool (the bundle's, or one through a proxy) that
// requeues refused rows and records every write.
func (b *bundle) sink(t *testing.T, pool *pgxpool.Pool) *pgsink.Sink {
	t.Helper()
	s, err := pgsink.New(pool, pgsink.Config{Table: "imports", Columns: columns, IDColumn: "task_id",
		Isolate: pgsink.Requeue(b.rdb, b.prefix), Logger: quiet, OnWrite: b.rec.write})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// recorder keeps what the sink did.
type recorder struct {
	mu      sync.Mutex
	writes  []write
	failed  int
	dupSeen int
}

type write struct {
	batch bool
	rows  int
	res   pgsink.Result
	err   error
}

func (r *recorder) write(t *shaping.Task, res pgsink.Result, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 1
	if t.Type == shaping.BatchType {
		rows, _ := shaping.DecodeBatch(t.Payload)
		n = len(rows)
	}
	r.writes = append(r.writes, write{batch: t.Type == shaping.BatchType, rows: n, res: res, err: err})
	if err != nil {
		r.failed++
	}
	r.dupSeen += res.Duplicates
}

func (r *recorder) snapshot() (writes []write, failed, dups int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]write(nil), r.writes...), r.failed, r.dupSeen
}

func (r *recorder) failures() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// committed is one writing transaction as the database saw it.
type committed struct {
	at   time.Time
	rows int
}

// commits reads the table's commit timestamps, oldest first.
func commits(t testing.TB, pool *pgxpool.Pool) []committed {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT committed_at, count(*) FROM imports GROUP BY 1 ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []committed
	for rows.Next() {
		var c committed
		if err := rows.Scan(&c.at, &c.rows); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// counts is (rows, distinct n, min n, max n) of the table.
func counts(t testing.TB, pool *pgxpool.Pool) (total, distinct, lo, hi int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT n), coalesce(min(n), -1), coalesce(max(n), -1) FROM imports").
		Scan(&total, &distinct, &lo, &hi)
	if err != nil {
		t.Fatal(err)
	}
	return
}

func rowCount(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	n, _, _, _ := counts(t, pool)
	return n
}

// exactlyOnce fails the test unless rows 0..n-1 are each in the table once.
func exactlyOnce(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	total, distinct, lo, hi := counts(t, pool)
	if total != n || distinct != n || lo != 0 || hi != n-1 {
		t.Errorf("table holds %d rows, %d distinct n in [%d, %d]; want %d rows, each n in [0, %d] once", total, distinct, lo, hi, n, n-1)
	}
}

// backlog is the downstream queue's task counts by state.
func backlog(t *testing.T, b *bundle, downstream string) *asynq.QueueInfo {
	t.Helper()
	in := asynq.NewInspectorFromRedisClient(b.rdb)
	qi, err := in.GetQueueInfo(keys.New(b.prefix).Queue(downstream))
	if err != nil {
		t.Fatalf("queue info: %v", err)
	}
	return qi
}

var waitFor = testutil.WaitFor

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func payload(n int, amount int) []byte {
	return fmt.Appendf(nil, `{"n":%d,"amount":%d,"doc":{"row":%d}}`, n, amount, n)
}
