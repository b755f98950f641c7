package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadBatch(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/batch.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	d := c.Downstreams[0]
	if want := (&Batch{MaxRows: 500, MaxDelay: Duration(2 * time.Second), Grace: Duration(time.Second)}); !reflect.DeepEqual(d.Batch, want) {
		t.Errorf("batch: got %+v, want %+v", d.Batch, want)
	}
	want := Handler{Type: HandlerPostgres, Timeout: Duration(30 * time.Second), DSNEnv: "WAREHOUSE_DSN", Table: "public.events",
		Columns: map[string]string{"user": "user_id", "amount": "amount", "at": "created_at"}, IDColumn: "task_id", OnConflict: OnConflictDoNothing}
	if !reflect.DeepEqual(d.Handler, want) {
		t.Errorf("handler:\n got %+v\nwant %+v", d.Handler, want)
	}
	// 2000/s in batches of 500 is 4 batches/s: 4 × (1s max_wait + 1s) + 1.
	if d.Workers != 9 {
		t.Errorf("workers: got %d, want 9 (sized in batches)", d.Workers)
	}
}

func TestBatchDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
downstreams:
  - name: db
    rate: 100/s
    schedule: [{cron: "0 20 * * *", rate: 5000/s}]
    batch: {max_rows: 100}
    handler: {type: postgres, dsn_env: DB_DSN, table: t, id_column: id, columns: {a: a}}
  - name: api
    rate: 10/s
    handler: {type: log}
`)
	db, api := c.Downstreams[0], c.Downstreams[1]
	if db.Batch.MaxDelay != Duration(DefaultBatchMaxDelay) || db.Batch.Grace != Duration(DefaultBatchGrace) {
		t.Errorf("batch defaults: got %+v", db.Batch)
	}
	if db.Handler.OnConflict != OnConflictDoNothing {
		t.Errorf("on_conflict default: got %q, want %q", db.Handler.OnConflict, OnConflictDoNothing)
	}
	if api.Workers != 11 {
		t.Errorf("workers of a downstream without batch: got %d, want 11", api.Workers)
	}
}

// Every batch and postgres error names its field and quotes the value.
func TestBatchErrors(t *testing.T) {
	t.Parallel()
	const pg = "{type: postgres, dsn_env: DB_DSN, table: t, id_column: id, columns: {a: a}"
	for i, c := range []struct {
		ds, path, msg string
	}{
		{"batch: {max_rows: 0}\n    handler: {type: log}", "downstreams[0].batch.max_rows", "must be 1-100000, got 0"},
		{"batch: {max_rows: -5}\n    handler: {type: log}", "downstreams[0].batch.max_rows", "got -5"},
		{"batch: {max_delay: 1s}\n    handler: {type: log}", "downstreams[0].batch.max_rows", "got 0"},
		{"batch: {max_rows: 200000}\n    handler: {type: log}", "downstreams[0].batch.max_rows", "got 200000"},
		{"batch: {max_rows: 10, max_delay: 0s}\n    handler: {type: log}", "downstreams[0].batch.max_delay", "must be positive"},
		{"batch: {max_rows: 10, grace: 500ms}\n    handler: {type: log}", "downstreams[0].batch.grace", "at least 1s"},
		{"batch: {max_rows: 10, size: 3}\n    handler: {type: log}", "downstreams[0].batch.size", `unknown field "size" (want one of max_rows, max_delay, grace)`},
		{"handler: {type: postgres, table: t, id_column: id, columns: {a: a}}", "downstreams[0].handler.dsn_env", "required"},
		{"handler: {type: postgres, dsn_env: 1DSN, table: t, id_column: id, columns: {a: a}}", "downstreams[0].handler.dsn_env", `"1DSN"`},
		{"handler: {type: postgres, dsn_env: DB_DSN, id_column: id, columns: {a: a}}", "downstreams[0].handler.table", "required"},
		{"handler: {type: postgres, dsn_env: DB_DSN, table: a.b.c, id_column: id, columns: {a: a}}", "downstreams[0].handler.table", `"a.b.c"`},
		{"handler: {type: postgres, dsn_env: DB_DSN, table: t, columns: {a: a}}", "downstreams[0].handler.id_column", "required"},
		{"handler: {type: postgres, dsn_env: DB_DSN, table: t, id_column: id}", "downstreams[0].handler.columns", "required"},
		{"handler: {type: postgres, dsn_env: DB_DSN, table: t, id_column: id, columns: {a: \"\"}}", "downstreams[0].handler.columns.a", "required"},
		{"handler: {type: postgres, dsn_env: DB_DSN, table: t, id_column: id, columns: {a: x, b: x}}", "downstreams[0].handler.columns.b", `column "x" is already the target of columns.a`},
		{"handler: {type: postgres, dsn_env: DB_DSN, table: t, id_column: id, columns: {a: id}}", "downstreams[0].handler.columns.a", "target of id_column"},
		{"handler: " + pg + ", on_conflict: ignore}", "downstreams[0].handler.on_conflict", `invalid value "ignore"`},
		{"handler: " + pg + ", on_conflict: \"ON CONFLICT DO NOTHING; DROP TABLE t\"}", "downstreams[0].handler.on_conflict", "without ;"},
		{"handler: " + pg + ", url: \"http://x\"}", "downstreams[0].handler.url", "only allowed for type http"},
		{"handler: {type: http, url: \"http://x\", table: t}", "downstreams[0].handler.table", `only allowed for type postgres, got type "http"`},
		{"handler: {type: log, dsn_env: DB_DSN}", "downstreams[0].handler.dsn_env", "only allowed for type postgres"},
		{"handler: {type: pg}", "downstreams[0].handler.type", "(want http, log, go or postgres)"},
	} {
		doc := "downstreams:\n  - name: db\n    rate: 100/s\n    " + c.ds + "\n"
		_, err := Parse([]byte(doc))
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
			t.Errorf("step %d: got %v, want an *Error", i, err)
			continue
		}
		if e.Path != c.path || !strings.Contains(e.Msg, c.msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("step %d: got %q (path %q), want path %s and a one-line message containing %q", i, err, e.Path, c.path, c.msg)
		}
	}
}
