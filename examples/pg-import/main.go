// Command pg-import imports a JSON Lines file into PostgreSQL through
// shaper, at a fixed number of rows per second, and prints what the
// database saw: the rows committed in each second, by its own clock.
//
//	go run ./examples/pg-import                          # 50,000 rows at 5000/s in batches of 500
//	go run ./examples/pg-import -rows 20000 -rate 2000/s -batch 250
//	go run ./examples/pg-import -batch 0                 # one INSERT per row, for comparison
//
// What it does, as a user would with the two commands:
//
//  1. writes -rows lines of JSON Lines, one task each, to a file (or reads
//     -file);
//  2. (re)creates the table -table (default shaper_pg_import: the example
//     drops it first, so never point it at a table you need);
//  3. writes a shaper config: one downstream, rate -rate, batch
//     {max_rows: -batch}, handler {type: postgres, dsn_env: PG_IMPORT_DSN,
//     table, columns, id_column: task_id}, and prints it;
//  4. enqueues the file with the enqueue command (`enqueue --config
//     <config> --file <file>`, in this process): the backlog;
//  5. runs shaper on the config (what `shaper -config` runs, in this
//     process), which drains the backlog into the table at the rate;
//  6. prints, every second, the rows committed so far; at the end the rows
//     committed in each second of the database's clock (the committed_at
//     column: now() of the writing transaction) and a summary.
//
// PostgreSQL: -dsn, default $PG_IMPORT_DSN, else
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. Redis:
// -redis; without it an embedded Redis serves this one process.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/enqueuecli"
	"github.com/shaper-io/shaper/limiters"
)

const (
	downstream = "pg-import"
	dsnEnv     = "PG_IMPORT_DSN"
	defaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
)

// options are the flags.
type options struct {
	DSN, Redis, Prefix string
	Rows               int
	Rate               string
	Batch              int // 0: no batching, one INSERT per row
	File, Table, Dir   string
	Progress           bool // a line per second while importing
}

// summary is what a run found in the database.
type summary struct {
	Rows, Distinct, Transactions int
	Seconds                      float64 // first to last commit
	RowsPerSec                   float64 // all but the last transaction's rows over Seconds
	BusiestSecond                int     // most rows committed in one second of the database's clock
	PerSecond                    []int
}

func main() {
	o := options{}
	flag.StringVar(&o.DSN, "dsn", cmpOr(os.Getenv(dsnEnv), defaultDSN), "PostgreSQL DSN (default $"+dsnEnv+")")
	flag.StringVar(&o.Redis, "redis", "", "Redis URL (default: an embedded Redis in this process)")
	flag.StringVar(&o.Prefix, "prefix", "pgimport", "Redis key prefix")
	flag.IntVar(&o.Rows, "rows", 50000, "rows to generate (ignored with -file)")
	flag.StringVar(&o.Rate, "rate", "5000/s", "rows per second written to the database")
	flag.IntVar(&o.Batch, "batch", 500, "rows per batch (0: one INSERT per row)")
	flag.StringVar(&o.File, "file", "", "JSON Lines to import (default: generate -rows lines)")
	flag.StringVar(&o.Table, "table", "shaper_pg_import", "table to (re)create and fill; it is DROPPED first")
	flag.Parse()
	o.Progress = true
	dir, err := os.MkdirTemp("", "pg-import")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pg-import:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	o.Dir = dir
	if _, err := run(context.Background(), o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pg-import:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
}

// importRun is one import: the options and what run derives from them.
type importRun struct {
	o           options
	rate        limiters.Limit
	file        string // the JSON Lines, generated or -file
	rows        int    // lines in file
	db          *pgx.Conn
	table       string // o.Table, quoted
	out, errOut io.Writer
}

func run(ctx context.Context, o options, out, errOut io.Writer) (summary, error) {
	r := &importRun{o: o, out: out, errOut: errOut}
	var err error
	if r.rate, err = limiters.ParseLimit(o.Rate); err != nil {
		return summary{}, err
	}
	if o.Batch < 0 {
		return summary{}, errors.New("-batch must not be negative")
	}
	if o.Redis == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return summary{}, err
		}
		defer mr.Close()
		r.o.Redis = "redis://" + mr.Addr()
	}
	if err := r.input(); err != nil {
		return summary{}, err
	}
	if r.db, err = pgx.Connect(ctx, o.DSN); err != nil {
		return summary{}, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer r.db.Close(context.Background())
	r.table = pgx.Identifier{o.Table}.Sanitize()
	if err := r.createTable(ctx); err != nil {
		return summary{}, err
	}
	cfgPath, cfg, err := r.writeConfig()
	if err != nil {
		return summary{}, err
	}
	if err := r.enqueue(ctx, cfgPath); err != nil {
		return summary{}, err
	}
	if err := r.drain(ctx, cfgPath, cfg); err != nil {
		return summary{}, err
	}
	s, err := databaseView(ctx, r.db, r.table)
	if err != nil {
		return s, err
	}
	r.report(s)
	return s, nil
}

// input generates -rows lines into the run's directory, or counts the
// lines of -file.
func (r *importRun) input() error {
	r.file, r.rows = r.o.File, r.o.Rows
	if r.file == "" {
		r.file = filepath.Join(r.o.Dir, "rows.jsonl")
		return generate(r.file, r.rows)
	}
	var err error
	r.rows, err = countLines(r.file)
	return err
}

// createTable drops and creates the table.
func (r *importRun) createTable(ctx context.Context) error {
	if _, err := r.db.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s;
CREATE TABLE %[1]s (
	task_id      text PRIMARY KEY,                  -- the task's ID: the idempotency key
	n            integer NOT NULL,
	user_name    text NOT NULL,
	amount_cents bigint NOT NULL CHECK (amount_cents >= 0),
	created_at   timestamptz NOT NULL,
	committed_at timestamptz NOT NULL DEFAULT now()  -- the writing transaction's time
)`, r.table)); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	return nil
}

// writeConfig writes the shaper config, loads it back and prints it.
func (r *importRun) writeConfig() (string, *config.Config, error) {
	cfgPath := filepath.Join(r.o.Dir, "shaper.yaml")
	cfgText := shaperConfig(r.o, r.rate)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return "", nil, err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return "", nil, err
	}
	os.Setenv(dsnEnv, r.o.DSN)
	batchText := fmt.Sprintf("in batches of %d", r.o.Batch)
	if r.o.Batch == 0 {
		batchText = "one INSERT per row"
	}
	fmt.Fprintf(r.out, "pg-import: %d rows from %s into %s at %s, %s\n\n%s\n", r.rows, r.file, r.o.Table, r.rate.RateString(), batchText, indent(cfgText))
	return cfgPath, cfg, nil
}

// enqueue sends the file as `enqueue --config shaper.yaml --file rows.jsonl`
// does: the whole backlog first, so that what follows is shaper alone.
func (r *importRun) enqueue(ctx context.Context, cfgPath string) error {
	args := []string{"--config", cfgPath, "--file", r.file, "--concurrency", "16", "--progress", "never"}
	fmt.Fprintf(r.out, "$ enqueue %s\n", strings.Join(args, " "))
	if code := enqueuecli.Main(ctx, args, enqueuecli.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: r.out}); code != enqueuecli.ExitOK {
		return fmt.Errorf("enqueue exited with %d", code)
	}
	return nil
}

// drain runs shaper, as `shaper -config shaper.yaml` does, until every row
// is committed, and stops it.
func (r *importRun) drain(ctx context.Context, cfgPath string, cfg *config.Config) error {
	fmt.Fprintf(r.out, "$ shaper -config %s\n", cfgPath)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan struct{})
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(r.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		done <- app.Run(sctx, cfg, app.Options{Logger: logger, OnReady: func(string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		return fmt.Errorf("shaper: %w", err)
	}
	if err := r.waitForRows(ctx, done); err != nil {
		return err
	}
	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("shaper: %w", err)
	}
	return nil
}

// waitForRows counts the table's rows every second (printing them with
// -progress) until all are there, shaper stops (done) or the deadline,
// the drain at the rate plus a minute, passes.
func (r *importRun) waitForRows(ctx context.Context, done <-chan error) error {
	begin := time.Now()
	deadline := begin.Add(time.Duration(float64(r.rows)/r.rate.PerSec()*float64(time.Second)) + 60*time.Second)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := 0
	for last < r.rows {
		select {
		case err := <-done:
			return fmt.Errorf("shaper stopped: %v", err)
		case <-tick.C:
			var n int
			if err := r.db.QueryRow(ctx, "SELECT count(*) FROM "+r.table).Scan(&n); err != nil {
				return err
			}
			if r.o.Progress {
				fmt.Fprintf(r.out, "  %5.1fs  %7d rows committed  (+%d)\n", time.Since(begin).Seconds(), n, n-last)
			}
			last = n
			if time.Now().After(deadline) {
				return fmt.Errorf("only %d of %d rows committed by the deadline", n, r.rows)
			}
		}
	}
	return nil
}

// report prints the database's view: rows per second and the summary.
func (r *importRun) report(s summary) {
	fmt.Fprintf(r.out, "\nthe database's view: rows committed per second (by committed_at)\n")
	for i, n := range s.PerSecond {
		fmt.Fprintf(r.out, "  second %3d  %6d  %s\n", i+1, n, strings.Repeat("#", min(60, n*40/max(1, int(r.rate.PerSec())))))
	}
	fmt.Fprintf(r.out, "committed %d rows (%d distinct) in %d transactions over %.1fs: %.0f rows/s (rate %s); busiest second %d rows\n",
		s.Rows, s.Distinct, s.Transactions, s.Seconds, s.RowsPerSec, r.rate.RateString(), s.BusiestSecond)
}

func shaperConfig(o options, rate limiters.Limit) string {
	batch := ""
	if o.Batch > 0 {
		batch = fmt.Sprintf("    batch: {max_rows: %d, max_delay: 1s}\n", o.Batch)
	}
	return fmt.Sprintf(`redis: {url: %q, prefix: %q}
http: {listen: "off"}
downstreams:
  - name: %s
    rate: %s
%s    handler:
      type: postgres
      dsn_env: %s
      table: %s
      id_column: task_id
      columns: {n: n, user: user_name, amount: amount_cents, at: created_at}
`, o.Redis, o.Prefix, downstream, rate.RateString(), batch, dsnEnv, o.Table)
}

// generate writes n tasks as JSON Lines.
func generate(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		line, _ := json.Marshal(map[string]any{"downstream": downstream, "type": "import", "payload": map[string]any{
			"n": i, "user": fmt.Sprintf("user-%d", i%997), "amount": i * 37 % 100000, "at": at.Add(time.Duration(i) * time.Second).Format(time.RFC3339)}})
		w.Write(line)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n, sc.Err()
}

// databaseView reads the table's commit timestamps.
func databaseView(ctx context.Context, db *pgx.Conn, table string) (summary, error) {
	var s summary
	if err := db.QueryRow(ctx, "SELECT count(*), count(DISTINCT n), count(DISTINCT committed_at) FROM "+table).
		Scan(&s.Rows, &s.Distinct, &s.Transactions); err != nil {
		return s, err
	}
	rows, err := db.Query(ctx, "SELECT committed_at, count(*) FROM "+table+" GROUP BY 1 ORDER BY 1")
	if err != nil {
		return s, err
	}
	type tx struct {
		at time.Time
		n  int
	}
	var txs []tx
	for rows.Next() {
		var t tx
		if err := rows.Scan(&t.at, &t.n); err != nil {
			return s, err
		}
		txs = append(txs, t)
	}
	if err := rows.Err(); err != nil || len(txs) == 0 {
		return s, err
	}
	first, last := txs[0], txs[len(txs)-1]
	s.Seconds = last.at.Sub(first.at).Seconds()
	if s.Seconds > 0 {
		s.RowsPerSec = float64(s.Rows-last.n) / s.Seconds
	}
	// Seconds counted from the first commit, so that the first bucket is
	// a whole second.
	for _, t := range txs {
		i := int(t.at.Sub(first.at) / time.Second)
		for len(s.PerSecond) <= i {
			s.PerSecond = append(s.PerSecond, 0)
		}
		s.PerSecond[i] += t.n
	}
	for _, n := range s.PerSecond {
		s.BusiestSecond = max(s.BusiestSecond, n)
	}
	return s, nil
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
