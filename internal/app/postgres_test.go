package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/pgtest"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/queue"
)

const pgTable = `CREATE TABLE events (
	task_id text PRIMARY KEY,
	n integer NOT NULL,
	amount integer,
	committed_at timestamptz NOT NULL DEFAULT now()
)`

// pgConfig is a config with one batching postgres downstream; handler
// lines replace the handler's table, columns and id_column.
func pgConfig(t *testing.T, env, handler string) *config.Config {
	t.Helper()
	doc := fmt.Sprintf(`
redis: {url: %q, prefix: %q}
http: {listen: "off"}
downstreams:
  - name: events
    rate: 1000/s
    batch: {max_rows: 100, max_delay: 1s}
    handler: {type: postgres, dsn_env: %s, %s}
`, redistest.URL(t), redistest.Prefix(t), env, handler)
	c, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

const pgHandler = `table: events, id_column: task_id, columns: {n: n, amount: amount}`

// A postgres downstream from the config: tasks enqueued through the
// config's producer are aggregated (the producer spreads them over groups),
// shaped by rows, and written once each, in batches.
func TestPostgresDownstream(t *testing.T) {
	dsn := pgtest.DB(t)
	pgtest.Exec(t, dsn, pgTable)
	t.Setenv("SHAPER_TEST_EVENTS_DSN", dsn)
	cfg := pgConfig(t, "SHAPER_TEST_EVENTS_DSN", pgHandler)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnReady: func(string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}

	rdb := redistest.Client(t)
	p, err := app.NewProducer(rdb, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 1000
	for i := range n {
		if _, err := p.Enqueue(ctx, queue.Task{Downstream: "events", Payload: fmt.Appendf(nil, `{"n": %d, "amount": %d}`, i, i*10)}); err != nil {
			t.Fatal(err)
		}
	}
	pool := pgtest.Pool(t, dsn)
	var total, distinct, txs int
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT n), count(DISTINCT committed_at) FROM events").Scan(&total, &distinct, &txs); err != nil {
			t.Fatal(err)
		}
		if total >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // poll interval, bounded by the deadline
	}
	if total != n || distinct != n {
		t.Errorf("events holds %d rows (%d distinct), want %d", total, distinct, n)
	}
	// Batches of at most 100 rows: at least 10 transactions, and far fewer
	// than one per row.
	if txs < n/100 || txs > n/20 {
		t.Errorf("%d transactions for %d rows, want batches (between %d and %d)", txs, n, n/100, n/20)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

// A handler that does not fit its table, or whose DSN is missing, stops
// shaper at start-up with an error naming the field.
func TestPostgresConfigErrors(t *testing.T) {
	dsn := pgtest.DB(t)
	pgtest.Exec(t, dsn, pgTable+"; CREATE TABLE loose (id text, n integer)")
	t.Setenv("SHAPER_TEST_EVENTS_DSN", dsn)
	for i, c := range []struct {
		env, handler, want string
	}{
		{"SHAPER_TEST_EVENTS_DSN", `table: events, id_column: task_id, columns: {n: n, amount: amnt}`,
			`config: downstreams[0].handler: columns.amount: column "amnt" does not exist in table "events"`},
		{"SHAPER_TEST_EVENTS_DSN", `table: evnts, id_column: task_id, columns: {n: n}`,
			`config: downstreams[0].handler: table: table "evnts" does not exist`},
		{"SHAPER_TEST_EVENTS_DSN", `table: loose, id_column: id, columns: {n: n}`,
			`config: downstreams[0].handler: id_column: column "id" of table "loose" has no unique index`},
		{"SHAPER_TEST_NO_SUCH_DSN", pgHandler,
			`config: downstreams[0].handler: dsn_env: environment variable SHAPER_TEST_NO_SUCH_DSN is not set`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := app.Run(ctx, pgConfig(t, c.env, c.handler), app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("step %d: got %v, want %q", i, err, c.want)
		}
	}
}
