// Package pgsink is shaper's built-in PostgreSQL handler: it writes each
// released task, or each batch of tasks (see shaping.Batch), as rows of one
// table.
//
// # Mapping
//
// A task's payload is a JSON object; Config.Columns maps its top-level
// fields to columns. Values travel as text parameters of unspecified type,
// so PostgreSQL reads each one as it would read a literal for the column's
// type: a JSON string gives its contents ("2026-01-02T15:04:05Z" into a
// timestamptz, "42" into an integer), a number, true or false gives its
// JSON text, an object or array gives its JSON text (for json/jsonb
// columns), null gives NULL, and a field missing from the payload gives
// the column's DEFAULT.
//
// # Exactly once
//
// Every row also carries its task's ID in Config.IDColumn, which must have
// a unique index: the statement is INSERT … ON CONFLICT (id_column) DO
// NOTHING. A batch that is written again (a retry after a lost COMMIT
// reply, a crash, a restart) writes nothing twice, so each row is
// committed exactly once however often its batch is delivered.
//
// # One transaction per batch
//
// A batch is one transaction holding one multi-row INSERT … VALUES … ON
// CONFLICT (split into several statements only past PostgreSQL's 65,535
// parameters). It is not COPY: COPY cannot skip conflicting rows, so an
// idempotent COPY needs a staging table and a second INSERT … SELECT … ON
// CONFLICT. That, or an INSERT … SELECT FROM unnest(arrays cast to the
// column types), costs the database 0.5-0.7 times the CPU per row of the
// VALUES form; all three cost a tenth of one INSERT per row, or less. The VALUES form
// needs no knowledge of the column types (the server infers them), gives a
// missing field its column's DEFAULT, takes an explicit on_conflict clause
// as written, and needs no temporary table on each connection (see
// docs/batching.md for the numbers).
//
// # Errors
//
//   - The database cannot be reached (connection refused or lost, shutting
//     down, starting up, too many connections): the handler returns
//     shaping.Throttled, so the downstream's bucket is pushed back for
//     every worker and the batch is tried again at a later slot, whole,
//     without consuming an attempt, and without a burst on recovery.
//   - Other errors of the batch as a whole (timeouts, deadlocks, a missing
//     table): the batch is retried whole with the dispatcher's backoff and
//     retry budget, then archived.
//   - A row the database refuses (SQLSTATE classes 21, 22 and 23: a
//     constraint violation, a value of the wrong type) is isolated by
//     bisecting the batch inside its transaction with savepoints; the good
//     rows commit, and the refused ones go to Config.Isolate (Requeue: each
//     becomes a task of its own, which is tried alone once more and, refused
//     again, archived with the database's error). A single (non-batch) task
//     that is refused is archived at once with the error.
package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shaper-io/shaper/shaping"
)

// OnConflictDoNothing is the default Config.OnConflict: ON CONFLICT
// (IDColumn) DO NOTHING.
const OnConflictDoNothing = "do_nothing"

// maxParams is PostgreSQL's limit of parameters in one statement.
const maxParams = 65535

// Config configures a Sink.
type Config struct {
	// Table is the target table, "name" or "schema.name"; required.
	Table string
	// Columns maps top-level payload fields to columns; at least one.
	Columns map[string]string
	// IDColumn receives each row's task ID (shaping.BatchRow.ID), the
	// idempotency key; required, and it must carry a unique index.
	IDColumn string
	// OnConflict is "" or OnConflictDoNothing (ON CONFLICT (IDColumn) DO
	// NOTHING), or an explicit clause starting with ON CONFLICT, used as
	// written. An explicit clause must keep a second write of the same
	// row harmless, or retries are no longer exactly once.
	OnConflict string
	// Isolate receives the rows of a batch that the database refused,
	// after the batch's good rows committed. Nil means the batch task is
	// archived with their errors (running it again writes nothing twice).
	Isolate IsolateFunc
	// Timeout bounds one write (a batch's whole transaction, with its
	// bisection); zero means 30s.
	Timeout time.Duration
	// OutagePause is how far the downstream's bucket is pushed back when
	// the database cannot be reached; zero means 1s.
	OutagePause time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// OnWrite, when set, is told the outcome of every write (for metrics
	// and tests); err is the write's error before it is classified.
	OnWrite func(t *shaping.Task, res Result, err error)
}

// Rejected is a row the database refused, with its error.
type Rejected struct {
	Row shaping.BatchRow
	Err error
}

// IsolateFunc disposes of a batch's refused rows. It must not lose them:
// an error makes the whole batch retry (the committed rows are then
// skipped as duplicates).
type IsolateFunc func(ctx context.Context, batch *shaping.Task, rejected []Rejected) error

// Result is what one Write did.
type Result struct {
	// Inserted rows are new; Duplicates were already there (a replay).
	Inserted, Duplicates int
	// Rejected rows were refused and not written.
	Rejected []Rejected
	// Statements counts the INSERT statements sent (more than one when a
	// refused row made the batch bisect).
	Statements int
}

// FieldError is a configuration problem, named by its config field
// ("table", "columns.<field>", "id_column", "on_conflict").
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "pgsink: " + e.Field + ": " + e.Msg }

// ErrRefused is wrapped by the errors of rows the database refused.
var ErrRefused = errors.New("pgsink: row refused")

// Sink writes tasks into one table. Safe for concurrent use.
type Sink struct {
	pool     *pgxpool.Pool
	cfg      Config
	table    string // sanitized
	fields   []string
	columns  []string // sanitized, in fields' order, after the id column
	prefix   string   // INSERT INTO t (id, c1, …) VALUES
	conflict string
	log      *slog.Logger
}

// New returns a Sink writing through pool. It checks the configuration
// but does not contact the database (see Check).
func New(pool *pgxpool.Pool, cfg Config) (*Sink, error) {
	if pool == nil {
		return nil, errors.New("pgsink: nil pool")
	}
	table, err := parseTable(cfg.Table)
	if err != nil {
		return nil, err
	}
	if err := checkIdent("id_column", cfg.IDColumn); err != nil {
		return nil, err
	}
	if len(cfg.Columns) == 0 {
		return nil, &FieldError{"columns", "at least one payload field must map to a column"}
	}
	s := &Sink{pool: pool, cfg: cfg, table: table.Sanitize(), log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.cfg.Timeout <= 0 {
		s.cfg.Timeout = 30 * time.Second
	}
	if s.cfg.OutagePause <= 0 {
		s.cfg.OutagePause = time.Second
	}
	for f := range cfg.Columns {
		s.fields = append(s.fields, f)
	}
	slices.Sort(s.fields)
	seen := map[string]string{cfg.IDColumn: "id_column"}
	cols := []string{pgx.Identifier{cfg.IDColumn}.Sanitize()}
	for _, f := range s.fields {
		c := cfg.Columns[f]
		if f == "" {
			return nil, &FieldError{"columns", "a payload field name is empty"}
		}
		if err := checkIdent("columns."+f, c); err != nil {
			return nil, err
		}
		if other, dup := seen[c]; dup {
			return nil, &FieldError{"columns." + f, fmt.Sprintf("column %q is already the target of %s", c, other)}
		}
		seen[c] = "columns." + f
		cols = append(cols, pgx.Identifier{c}.Sanitize())
	}
	s.columns = cols[1:]
	s.prefix = "INSERT INTO " + s.table + " (" + strings.Join(cols, ", ") + ") VALUES "
	switch oc := strings.TrimSpace(cfg.OnConflict); {
	case oc == "" || oc == OnConflictDoNothing:
		s.conflict = " ON CONFLICT (" + cols[0] + ") DO NOTHING"
	case len(oc) > 11 && strings.EqualFold(oc[:11], "ON CONFLICT") && !strings.Contains(oc, ";"):
		s.conflict = " " + oc
	default:
		return nil, &FieldError{"on_conflict", fmt.Sprintf("%q is neither %s nor a clause starting with ON CONFLICT (and without ;)", cfg.OnConflict, OnConflictDoNothing)}
	}
	return s, nil
}

func parseTable(t string) (pgx.Identifier, error) {
	if t == "" {
		return nil, &FieldError{"table", "required"}
	}
	parts := strings.Split(t, ".")
	if len(parts) > 2 {
		return nil, &FieldError{"table", fmt.Sprintf("%q has more than one dot (want name or schema.name)", t)}
	}
	for _, p := range parts {
		if err := checkIdent("table", p); err != nil {
			return nil, &FieldError{"table", fmt.Sprintf("invalid table %q (want name or schema.name, each 1-63 bytes)", t)}
		}
	}
	return pgx.Identifier(parts), nil
}

func checkIdent(field, s string) error {
	switch {
	case s == "":
		return &FieldError{field, "required"}
	case len(s) > 63:
		return &FieldError{field, fmt.Sprintf("%q is longer than PostgreSQL's 63 bytes", s)}
	case strings.ContainsRune(s, 0):
		return &FieldError{field, fmt.Sprintf("%q contains a NUL byte", s)}
	}
	return nil
}

// Check asks the database whether the configuration fits the table: the
// table exists, every mapped column and the ID column exist, the ID column
// has a unique index (for the default OnConflict), and no NOT NULL column
// without a default is left unmapped. A mismatch is a *FieldError; any
// other error means the database could not be asked.
func (s *Sink) Check(ctx context.Context) error {
	var oid uint32
	var found bool
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(to_regclass($1)::oid, 0), to_regclass($1) IS NOT NULL", s.table).Scan(&oid, &found); err != nil {
		return fmt.Errorf("pgsink: check %s: %w", s.table, err)
	}
	if !found {
		return &FieldError{"table", fmt.Sprintf("table %s does not exist", s.table)}
	}
	rows, err := s.pool.Query(ctx, `SELECT attname, attnum, attnotnull AND NOT atthasdef AND attidentity = '' AND attgenerated = ''
		FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, oid)
	if err != nil {
		return fmt.Errorf("pgsink: check %s: %w", s.table, err)
	}
	type column struct {
		num      int16
		required bool
	}
	cols := map[string]column{}
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.num, &c.required); err != nil {
			return fmt.Errorf("pgsink: check %s: %w", s.table, err)
		}
		cols[name] = c
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgsink: check %s: %w", s.table, err)
	}
	idc, ok := cols[s.cfg.IDColumn]
	if !ok {
		return &FieldError{"id_column", fmt.Sprintf("column %q does not exist in table %s", s.cfg.IDColumn, s.table)}
	}
	mapped := map[string]bool{s.cfg.IDColumn: true}
	for _, f := range s.fields {
		c := s.cfg.Columns[f]
		if _, ok := cols[c]; !ok {
			return &FieldError{"columns." + f, fmt.Sprintf("column %q does not exist in table %s", c, s.table)}
		}
		mapped[c] = true
	}
	names := make([]string, 0, len(cols))
	for n := range cols {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if cols[n].required && !mapped[n] {
			return &FieldError{"columns", fmt.Sprintf("column %q of table %s is NOT NULL without a default, and no payload field maps to it", n, s.table)}
		}
	}
	if strings.TrimSpace(s.cfg.OnConflict) == "" || strings.TrimSpace(s.cfg.OnConflict) == OnConflictDoNothing {
		var unique bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = $1 AND indisunique
			AND indnkeyatts = 1 AND indkey[0] = $2 AND indpred IS NULL)`, oid, idc.num).Scan(&unique); err != nil {
			return fmt.Errorf("pgsink: check %s: %w", s.table, err)
		}
		if !unique {
			return &FieldError{"id_column", fmt.Sprintf("column %q of table %s has no unique index; exactly-once writes need one (CREATE UNIQUE INDEX ON %s (%s))",
				s.cfg.IDColumn, s.table, s.table, pgx.Identifier{s.cfg.IDColumn}.Sanitize())}
		}
	}
	return nil
}

// Handle is the shaping.HandlerFunc: a shaping.BatchType task is written
// as one batch, any other task as one row whose ID is the task's.
func (s *Sink) Handle(ctx context.Context, t *shaping.Task) error {
	batch := t.Type == shaping.BatchType
	var rows []shaping.BatchRow
	if batch {
		var err error
		if rows, err = shaping.DecodeBatch(t.Payload); err != nil {
			return shaping.Permanent(err)
		}
		for i := range rows {
			if rows[i].ID == "" {
				// A task enqueued without shaper's row ID: the batch's ID
				// and the row's place in it are stable across retries.
				rows[i].ID = t.ID + "/" + strconv.Itoa(i)
			}
		}
	} else {
		rows = []shaping.BatchRow{{ID: t.ID, Type: t.Type, Key: t.Key, Cost: t.Cost, Payload: t.Payload}}
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	res, err := s.Write(wctx, rows)
	if s.cfg.OnWrite != nil {
		s.cfg.OnWrite(t, res, err)
	}
	if err != nil {
		return s.classify(ctx, err)
	}
	if len(res.Rejected) == 0 {
		return nil
	}
	for _, r := range res.Rejected {
		s.log.Warn("pgsink: row refused", "downstream", t.Downstream, "table", s.table, "row", r.Row.ID, "err", r.Err)
	}
	if !batch {
		return shaping.Permanent(res.Rejected[0].Err)
	}
	if s.cfg.Isolate == nil {
		errs := make([]error, len(res.Rejected))
		for i, r := range res.Rejected {
			errs[i] = r.Err
		}
		return shaping.Permanent(fmt.Errorf("pgsink: %d of %d rows refused (the others committed; running this batch again writes nothing twice): %w",
			len(res.Rejected), len(rows), errors.Join(errs...)))
	}
	if err := s.cfg.Isolate(ctx, t, res.Rejected); err != nil {
		return fmt.Errorf("pgsink: isolate %d refused rows (the batch is retried; its committed rows are skipped): %w", len(res.Rejected), err)
	}
	return nil
}

// classify maps a failed write to the dispatcher's outcomes.
func (s *Sink) classify(ctx context.Context, err error) error {
	if ctx.Err() == nil && Unavailable(err) {
		return shaping.Throttled(s.cfg.OutagePause, fmt.Errorf("pgsink: database unavailable: %w", err))
	}
	return fmt.Errorf("pgsink: write to %s: %w", s.table, err)
}

// Unavailable reports whether err says the database cannot be reached
// right now (as opposed to refusing what was sent): a connection refused,
// reset or lost, or SQLSTATE class 08, 57P01-57P03 (shutting down,
// crashed, starting up) or 53300 (too many connections). Timeouts are
// not outages: a write that takes too long is retried with backoff.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300":
			return true
		}
		return false
	}
	if pgconn.Timeout(err) {
		return false
	}
	return true // no answer from the server at all
}

// RowLevel reports whether err is the database refusing the data of a
// statement (SQLSTATE classes 21, 22 and 23), which bisecting a batch can
// pin on single rows.
func RowLevel(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return false
	}
	switch pe.Code[:2] {
	case "21", "22", "23":
		return true
	}
	return false
}
