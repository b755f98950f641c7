package pgsink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shaper-io/shaper/internal/pgtest"
	"github.com/shaper-io/shaper/shaping"
	"github.com/shaper-io/shaper/shaping/pgsink"
)

func rows(payloads ...string) []shaping.BatchRow {
	out := make([]shaping.BatchRow, len(payloads))
	for i, p := range payloads {
		out[i] = shaping.BatchRow{ID: fmt.Sprintf("id-%d", i), Cost: 1, Payload: json.RawMessage(p)}
	}
	return out
}

// Values are read by the column's type: strings as their contents, other
// JSON as its text, null as NULL, a missing field as the DEFAULT.
func TestWriteValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.sink(t, b.pool)
	ctx := context.Background()
	in := rows(
		`{"n": "7", "amount": 5, "note": "a \"quoted\" note", "doc": {"k": [1, 2]}}`,
		`{"n": 8, "amount": null, "doc": "{\"s\": true}", "extra": "ignored"}`,
	)
	res, err := s.Write(ctx, in)
	must(t, err)
	if res.Inserted != 2 || res.Duplicates != 0 || len(res.Rejected) != 0 || res.Statements != 1 {
		t.Fatalf("got %+v, want 2 inserted in 1 statement", res)
	}
	type row struct {
		id, note, doc string
		n             int
		amount        *int
	}
	var got []row
	r, err := b.pool.Query(ctx, "SELECT task_id, n, amount, note, doc::text FROM imports ORDER BY n")
	must(t, err)
	for r.Next() {
		var x row
		must(t, r.Scan(&x.id, &x.n, &x.amount, &x.note, &x.doc))
		got = append(got, x)
	}
	must(t, r.Err())
	five := 5
	want := []row{
		{id: "id-0", n: 7, amount: &five, note: `a "quoted" note`, doc: `{"k": [1, 2]}`},
		{id: "id-1", n: 8, amount: nil, note: "none", doc: `{"s": true}`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.id != w.id || g.n != w.n || g.note != w.note || g.doc != w.doc || (g.amount == nil) != (w.amount == nil) || g.amount != nil && *g.amount != *w.amount {
			t.Errorf("row %d: got %+v, want %+v", i, g, w)
		}
	}

	// A replay writes nothing and says so.
	res, err = s.Write(ctx, in)
	must(t, err)
	if res.Inserted != 0 || res.Duplicates != 2 {
		t.Errorf("replay: got %+v, want 0 inserted, 2 duplicates", res)
	}
	if n := rowCount(t, b.pool); n != 2 {
		t.Errorf("after replay: %d rows, want 2", n)
	}
}

// Refused rows are pinned by bisection; the others commit in one
// transaction.
func TestWriteBisects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.sink(t, b.pool)
	var in []shaping.BatchRow
	bad := map[int]string{3: "23514", 17: "22P02", 18: "23502", 40: "", 63: "23514"} // "": not an object
	for i := range 64 {
		p := string(payload(i, i))
		switch bad[i] {
		case "23514":
			p = string(payload(i, -1))
		case "22P02":
			p = fmt.Sprintf(`{"n": %d, "amount": "lots"}`, i)
		case "23502":
			p = `{"amount": 1}`
		}
		if i == 40 {
			p = `[40]`
		}
		in = append(in, shaping.BatchRow{ID: fmt.Sprintf("id-%d", i), Cost: 1, Payload: json.RawMessage(p)})
	}
	res, err := s.Write(context.Background(), in)
	must(t, err)
	if res.Inserted != 59 || res.Duplicates != 0 || len(res.Rejected) != 5 {
		t.Fatalf("got inserted %d, duplicates %d, rejected %d; want 59, 0, 5", res.Inserted, res.Duplicates, len(res.Rejected))
	}
	for _, r := range res.Rejected {
		var i int
		fmt.Sscanf(r.Row.ID, "id-%d", &i)
		code, ok := bad[i]
		if !ok {
			t.Errorf("row %s refused, want it written: %v", r.Row.ID, r.Err)
			continue
		}
		if !errors.Is(r.Err, pgsink.ErrRefused) {
			t.Errorf("row %s: error %v does not wrap ErrRefused", r.Row.ID, r.Err)
		}
		var pe *pgconn.PgError
		switch {
		case code == "" && errors.As(r.Err, &pe):
			t.Errorf("row %s: got database error %v, want the payload refused before the database", r.Row.ID, r.Err)
		case code != "" && (!errors.As(r.Err, &pe) || pe.Code != code):
			t.Errorf("row %s: got %v, want SQLSTATE %s", r.Row.ID, r.Err, code)
		}
	}
	if res.Statements < 2 || res.Statements > 64 {
		t.Errorf("%d statements, want a bisection (between 2 and 64)", res.Statements)
	}
	total, distinct, _, _ := counts(t, b.pool)
	if total != 59 || distinct != 59 {
		t.Errorf("table holds %d rows (%d distinct), want 59", total, distinct)
	}
}

// A batch larger than one statement's 65,535 parameters is split into
// several statements of one transaction.
func TestWriteManyParams(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.sink(t, b.pool)
	in := make([]shaping.BatchRow, 14000) // 5 parameters a row: 70,000
	for i := range in {
		in[i] = shaping.BatchRow{ID: fmt.Sprint(i), Cost: 1, Payload: payload(i, 1)}
	}
	res, err := s.Write(context.Background(), in)
	must(t, err)
	if res.Inserted != len(in) || res.Statements != 2 {
		t.Errorf("got %+v; want %d inserted in 2 statements", res, len(in))
	}
	commitsSeen := commits(t, b.pool)
	if len(commitsSeen) != 1 {
		t.Errorf("%d transactions, want 1", len(commitsSeen))
	}
	exactlyOnce(t, b.pool, len(in))
}

// Check compares the configuration with the table and names the field.
func TestCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.dsn, `CREATE TABLE nouniq (id text, v int); CREATE TABLE strict (id text PRIMARY KEY, v int, must int NOT NULL)`)
	for i, c := range []struct {
		cfg   pgsink.Config
		field string
		msg   string
	}{
		{pgsink.Config{Table: "missing", Columns: map[string]string{"v": "v"}, IDColumn: "id"}, "table", "does not exist"},
		{pgsink.Config{Table: "imports", Columns: map[string]string{"n": "n", "amt": "amnt"}, IDColumn: "task_id"}, "columns.amt", `column "amnt" does not exist`},
		{pgsink.Config{Table: "imports", Columns: map[string]string{"n": "n"}, IDColumn: "id"}, "id_column", `column "id" does not exist`},
		{pgsink.Config{Table: "nouniq", Columns: map[string]string{"v": "v"}, IDColumn: "id"}, "id_column", "no unique index"},
		{pgsink.Config{Table: "strict", Columns: map[string]string{"v": "v"}, IDColumn: "id"}, "columns", `"must"`},
		{pgsink.Config{Table: "imports", Columns: map[string]string{"n": "n"}, IDColumn: "task_id"}, "", ""},
		{pgsink.Config{Table: "nouniq", Columns: map[string]string{"v": "v"}, IDColumn: "id", OnConflict: "ON CONFLICT DO NOTHING"}, "", ""},
	} {
		s, err := pgsink.New(b.pool, c.cfg)
		must(t, err)
		err = s.Check(context.Background())
		var fe *pgsink.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("step %d: got %v, want no error", i, err)
		case c.field == "":
		case !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Msg, c.msg):
			t.Errorf("step %d: got %v, want a FieldError on %s saying %q", i, err, c.field, c.msg)
		}
	}
}

// New rejects a configuration that cannot work, naming the field, without
// a database.
func TestNewErrors(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never used
	must(t, err)
	defer pool.Close()
	cols := map[string]string{"n": "n"}
	for i, c := range []struct {
		cfg   pgsink.Config
		field string
	}{
		{pgsink.Config{Columns: cols, IDColumn: "id"}, "table"},
		{pgsink.Config{Table: "a.b.c", Columns: cols, IDColumn: "id"}, "table"},
		{pgsink.Config{Table: "t", Columns: cols}, "id_column"},
		{pgsink.Config{Table: "t", IDColumn: "id"}, "columns"},
		{pgsink.Config{Table: "t", Columns: map[string]string{"n": ""}, IDColumn: "id"}, "columns.n"},
		{pgsink.Config{Table: "t", Columns: map[string]string{"n": "id"}, IDColumn: "id"}, "columns.n"},
		{pgsink.Config{Table: "t", Columns: map[string]string{"a": "x", "b": "x"}, IDColumn: "id"}, "columns.b"},
		{pgsink.Config{Table: "t", Columns: cols, IDColumn: "id", OnConflict: "DO NOTHING"}, "on_conflict"},
		{pgsink.Config{Table: "t", Columns: cols, IDColumn: "id", OnConflict: "ON CONFLICT DO NOTHING; DROP TABLE t"}, "on_conflict"},
	} {
		_, err := pgsink.New(pool, c.cfg)
		var fe *pgsink.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("step %d: got %v, want a FieldError on %s", i, err, c.field)
		}
	}
}

// A single task is one row under the task's ID; a refused one is archived
// at once with the database's error, and a lost connection is an outage
// (the bucket is pushed back, no attempt consumed).
func TestHandleSingle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.sink(t, b.pool)
	ctx := context.Background()
	ok := &shaping.Task{ID: "t1", Type: "row", Payload: payload(1, 1), Cost: 1}
	must(t, s.Handle(ctx, ok))
	must(t, s.Handle(ctx, ok)) // a redelivery is harmless
	bad := &shaping.Task{ID: "t2", Type: "row", Payload: payload(2, -5), Cost: 1}
	err := s.Handle(ctx, bad)
	if !errors.Is(err, shaping.ErrPermanent) || !strings.Contains(err.Error(), "23514") || !strings.Contains(err.Error(), "imports_amount_check") {
		t.Errorf("refused row: got %v, want a permanent error naming the check constraint and SQLSTATE 23514", err)
	}
	total, _, _, _ := counts(t, b.pool)
	if total != 1 {
		t.Errorf("table holds %d rows, want 1", total)
	}

	proxy, viaProxy := pgtest.NewProxy(t, b.dsn)
	proxy.Stop()
	down := pgtest.Pool(t, viaProxy)
	s2, err := pgsink.New(down, pgsink.Config{Table: "imports", Columns: columns, IDColumn: "task_id", Logger: quiet})
	must(t, err)
	err = s2.Handle(ctx, &shaping.Task{ID: "t3", Type: "row", Payload: payload(3, 1), Cost: 1})
	var th *shaping.ThrottledError
	if !errors.As(err, &th) || th.After <= 0 {
		t.Errorf("database down: got %v, want a ThrottledError with a pause", err)
	}
}
