package pgsink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shaper-io/shaper/internal/pgtest"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
	"github.com/shaper-io/shaper/shaping/pgsink"
)

// Benchmarks of writes into PostgreSQL (docs/benchmarks.md, "Batch
// writes"). The database's CPU time is the CPU time of the backends that
// served the writes, read from /proc/<pid>/schedstat (the server must run
// on this machine; pg_stat_statements would need a server restart). Run:
//
//	go test -run XXX -bench Shaped -benchtime 20000x ./shaping/pgsink
//	go test -run XXX -bench Statement ./shaping/pgsink

// benchRate is the shaped task rate, SHAPER_BENCH_RATE (default 2000/s).
func benchRate() int64 {
	if v, err := strconv.ParseInt(os.Getenv("SHAPER_BENCH_RATE"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 2000
}

// BenchmarkShaped writes b.N tasks of one row each through the dispatcher
// at the same shaped task rate: aggregated into batches of 500 (the rate
// counts rows), and one INSERT per task.
func BenchmarkShaped(b *testing.B) {
	for _, batch := range []int{500, 1} {
		name := fmt.Sprintf("batch=%d", batch)
		if batch == 1 {
			name = "per-task"
		}
		b.Run(name, func(b *testing.B) { benchShaped(b, batch) })
	}
}

func benchShaped(b *testing.B, batch int) {
	rate := benchRate()
	dsn := pgtest.DB(b)
	pgtest.Exec(b, dsn, table)
	app := "shaper-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pool := benchPool(b, dsn, app)
	rdb := redistest.Client(b)
	prefix := redistest.Prefix(b)
	var mu sync.Mutex
	var handling time.Duration
	sink, err := pgsink.New(pool, pgsink.Config{Table: "imports", Columns: columns, IDColumn: "task_id", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ds := shaping.Downstream{Name: "db", Rate: limiters.PerSecond(rate), MaxWait: time.Second, Workers: 64,
		Handler: func(ctx context.Context, t *shaping.Task) error {
			start := time.Now()
			err := sink.Handle(ctx, t)
			mu.Lock()
			handling += time.Since(start)
			mu.Unlock()
			return err
		}}
	groups := map[string]int{}
	if batch > 1 {
		ds.Workers = 16
		ds.Batch = &shaping.Batch{MaxRows: batch, MaxDelay: time.Second}
		ds.LateTolerance = limiters.PerSecond(rate).Interval(int64(batch)) / 2
		groups["db"] = shaping.BatchGroups(float64(rate), batch)
	}
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: quiet})
	if err := d.Add(ds); err != nil {
		b.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Batched: groups})
	defer p.Close()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += 16 {
				if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "db", Payload: payload(i, 1)}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	cpu0 := backendCPU(b, app)

	b.ResetTimer()
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Duration(b.N)*time.Second/time.Duration(rate) + 60*time.Second)
	for rowCount(b, pool) < b.N {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d rows by the deadline", rowCount(b, pool), b.N)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, bounded by the deadline
	}
	b.StopTimer()
	cpu := backendCPU(b, app).since(cpu0)

	cs := commits(b, pool)
	first, last := cs[0], cs[len(cs)-1]
	if span := last.at.Sub(first.at).Seconds(); span > 0 {
		b.ReportMetric(float64(b.N-last.rows)/span, "rows/s")
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "db-cpu-µs/row")
	mu.Lock()
	b.ReportMetric(float64(handling.Microseconds())/float64(b.N), "write-µs/row")
	mu.Unlock()
	b.ReportMetric(float64(len(cs)), "transactions")
}

// BenchmarkStatement times one 500-row write, unshaped, four ways: 500
// single-row INSERTs (each its own transaction, as per-task writes are),
// the sink's multi-row INSERT … VALUES … ON CONFLICT DO NOTHING in one
// transaction, COPY into a staging table plus INSERT … SELECT … ON
// CONFLICT (what an idempotent COPY needs), and INSERT … SELECT FROM
// unnest(text arrays cast to the column types) … ON CONFLICT.
func BenchmarkStatement(b *testing.B) {
	const rowsPerOp = 500
	dsn := pgtest.DB(b)
	pgtest.Exec(b, dsn, table)
	for _, mode := range []string{"single-row-inserts", "multi-row-insert", "copy-staging", "unnest"} {
		b.Run(mode, func(b *testing.B) {
			app := "shaper-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			pool := benchPool(b, dsn, app)
			sink, err := pgsink.New(pool, pgsink.Config{Table: "imports", Columns: columns, IDColumn: "task_id", Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			cpu0 := backendCPU(b, app)
			b.ResetTimer()
			for op := range b.N {
				rows := make([]shaping.BatchRow, rowsPerOp)
				for i := range rows {
					rows[i] = shaping.BatchRow{ID: fmt.Sprintf("%s-%d-%d", app, op, i), Cost: 1, Payload: payload(i, 1)}
				}
				switch mode {
				case "single-row-inserts":
					for _, r := range rows {
						if _, err := sink.Write(ctx, []shaping.BatchRow{r}); err != nil {
							b.Fatal(err)
						}
					}
				case "multi-row-insert":
					if _, err := sink.Write(ctx, rows); err != nil {
						b.Fatal(err)
					}
				case "unnest":
					if err := unnestInsert(ctx, pool, rows); err != nil {
						b.Fatal(err)
					}
				case "copy-staging":
					if err := copyStaging(ctx, pool, rows); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			cpu := backendCPU(b, app).since(cpu0)
			n := float64(b.N * rowsPerOp)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "wall-µs/row")
			b.ReportMetric(float64(cpu.Microseconds())/n, "db-cpu-µs/row")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// copyStaging is the idempotent COPY: COPY (text format) into a
// temporary staging table, then INSERT … SELECT … ON CONFLICT DO NOTHING,
// in one transaction.
func copyStaging(ctx context.Context, pool *pgxpool.Pool, rows []shaping.BatchRow) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS stage (task_id text, n integer, amount integer, note text, doc jsonb) ON COMMIT DELETE ROWS`); err != nil {
			return err
		}
		var buf strings.Builder
		for _, r := range rows {
			var v struct {
				N, Amount int
				Doc       any
			}
			if err := json.Unmarshal(r.Payload, &v); err != nil {
				return err
			}
			fmt.Fprintf(&buf, "%s\t%d\t%d\t\\N\t{\"row\": %d}\n", r.ID, v.N, v.Amount, v.N)
		}
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader(buf.String()), "COPY stage FROM STDIN"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO imports (task_id, n, amount, doc) SELECT task_id, n, amount, doc FROM stage ON CONFLICT (task_id) DO NOTHING`)
		return err
	})
}

// unnestInsert is the other one-statement form: one text array per
// column, cast to the column's type (which the writer must know).
func unnestInsert(ctx context.Context, pool *pgxpool.Pool, rows []shaping.BatchRow) error {
	ids := make([]string, len(rows))
	ns := make([]string, len(rows))
	am := make([]string, len(rows))
	docs := make([]string, len(rows))
	for i, r := range rows {
		var v struct{ N, Amount int }
		json.Unmarshal(r.Payload, &v)
		ids[i], ns[i], am[i], docs[i] = r.ID, strconv.Itoa(v.N), strconv.Itoa(v.Amount), fmt.Sprintf(`{"row": %d}`, v.N)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO imports (task_id, n, amount, doc) SELECT a, b::integer, c::integer, d::jsonb FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(a, b, c, d) ON CONFLICT (task_id) DO NOTHING`, ids, ns, am, docs)
		return err
	})
}

// benchPool is a pool of 8 connections, all open before it returns, named
// app so that their backends can be found.
func benchPool(tb testing.TB, dsn, app string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns, cfg.MinConns = 8, 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	// Every connection open, and its backend's first write to the table
	// (loading its catalog entries) done, rolled back, before measuring.
	var conns []*pgxpool.Conn
	for range 8 {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		if err := c.Conn().PgConn().Exec(context.Background(), `BEGIN; INSERT INTO imports (task_id, n, amount, doc) VALUES ('warm-up', 0, 0, '{}') ON CONFLICT (task_id) DO NOTHING; ROLLBACK`).Close(); err != nil {
			tb.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return pool
}

// cpuTimes is the CPU time of each backend, by PID.
type cpuTimes map[int]time.Duration

// since is the CPU the backends used after before (a backend that is new
// counts whole).
func (c cpuTimes) since(before cpuTimes) time.Duration {
	var d time.Duration
	for pid, t := range c {
		d += t - before[pid]
	}
	return d
}

// backendCPU reads the CPU time of the backends whose application_name is
// app, from /proc/<pid>/schedstat (nanoseconds on the CPU).
func backendCPU(tb testing.TB, app string) cpuTimes {
	tb.Helper()
	admin := pgtest.Admin(tb)
	rows, err := admin.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		tb.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		tb.Fatal(err)
	}
	out := cpuTimes{}
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			tb.Fatalf("backend CPU time: %v (is PostgreSQL running on this machine?)", err)
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			tb.Fatal(err)
		}
		out[int(pid)] = time.Duration(ns)
	}
	if len(out) == 0 {
		tb.Fatalf("no backend with application_name %s", app)
	}
	return out
}
