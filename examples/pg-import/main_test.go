package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/pgtest"
	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// A small import through enqueue and the postgres handler: every row once,
// in batches, never more than the rate plus one batch in a second of the
// database's clock.
func TestImport(t *testing.T) {
	const rows, rate, batch = 3000, 1500, 250
	var out bytes.Buffer
	s, err := run(context.Background(), options{DSN: pgtest.DB(t), Redis: redistest.URL(t), Prefix: redistest.Prefix(t),
		Rows: rows, Rate: "1500/s", Batch: batch, Table: "imports", Dir: t.TempDir()}, &out, io.Discard)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if s.Rows != rows || s.Distinct != rows {
		t.Errorf("committed %d rows (%d distinct), want %d", s.Rows, s.Distinct, rows)
	}
	if s.Transactions < rows/batch || s.Transactions > 2*rows/batch {
		t.Errorf("%d transactions, want batches of up to %d rows (%d to %d transactions)", s.Transactions, batch, rows/batch, 2*rows/batch)
	}
	if s.BusiestSecond > rate+batch {
		t.Errorf("busiest second %d rows, want <= rate + one batch = %d", s.BusiestSecond, rate+batch)
	}
	// At least 70%: the run is 2s, and a batch that asynq's aggregator
	// flushes on its grace timer instead of its size (a loaded machine)
	// adds about 0.8s: 1128 rows/s, measured twice in full-suite runs.
	if s.RowsPerSec < 0.7*rate || s.RowsPerSec > 1.05*rate {
		t.Errorf("%.0f rows/s, want about %d", s.RowsPerSec, rate)
	}
	for _, want := range []string{"$ enqueue --config", "type: postgres", "the database's view", "committed 3000 rows (3000 distinct)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
