package pgsink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shaper-io/shaper/shaping"
)

// prepared is a row ready for the statement.
type prepared struct {
	row   shaping.BatchRow
	cells []cell // in s.fields order
}

type cell struct {
	v   []byte // nil: NULL (unless def)
	def bool   // DEFAULT: the field is missing
}

func (s *Sink) prepare(r shaping.BatchRow) (prepared, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(r.Payload, &obj); err != nil || obj == nil {
		return prepared{}, fmt.Errorf("%w: %s: payload is not a JSON object", ErrRefused, r.ID)
	}
	p := prepared{row: r, cells: make([]cell, len(s.fields))}
	for i, f := range s.fields {
		raw, ok := obj[f]
		switch {
		case !ok:
			p.cells[i].def = true
		case len(raw) == 0 || string(raw) == "null":
		case raw[0] == '"':
			var str string
			if err := json.Unmarshal(raw, &str); err != nil {
				return prepared{}, fmt.Errorf("%w: %s: field %q: %v", ErrRefused, r.ID, f, err)
			}
			p.cells[i].v = append([]byte{}, str...) // non-nil: "" is not NULL
		default:
			p.cells[i].v = raw
		}
	}
	return p, nil
}

// Write writes rows: one row as one statement, several as one transaction,
// bisected when the database refuses some of them. Rows the database
// refuses are in the Result; the error is for failures of the write as a
// whole (nothing of it committed, or the commit's outcome is unknown: in
// both cases writing the rows again is safe).
func (s *Sink) Write(ctx context.Context, rows []shaping.BatchRow) (Result, error) {
	var res Result
	good := make([]prepared, 0, len(rows))
	for _, r := range rows {
		p, err := s.prepare(r)
		if err != nil {
			res.Rejected = append(res.Rejected, Rejected{Row: r, Err: err})
			continue
		}
		good = append(good, p)
	}
	if len(good) == 0 {
		return res, nil
	}
	before := len(res.Rejected)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Result{}, err
	}
	defer conn.Release()
	pc := conn.Conn().PgConn()

	if len(good) == 1 {
		// One statement commits on its own: no transaction block needed.
		n, err := s.insert(ctx, pc, good, &res)
		switch {
		case err == nil:
			res.Inserted = int(n)
		case RowLevel(err):
			res.Rejected = append(res.Rejected, Rejected{Row: good[0].row, Err: refused(good[0].row, err)})
		default:
			return Result{}, err
		}
		res.Duplicates = len(good) - res.Inserted - (len(res.Rejected) - before)
		return res, nil
	}

	// The whole batch at once: the common case, one INSERT.
	n, err := s.tx(ctx, pc, func() (int64, error) { return s.insert(ctx, pc, good, &res) })
	if err != nil && RowLevel(err) {
		// Some rows are refused: bisect, with a savepoint per attempt,
		// in a new transaction; the good rows still commit together.
		n, err = s.tx(ctx, pc, func() (int64, error) { return s.bisect(ctx, pc, good, &res) })
	}
	if err != nil {
		return Result{}, err
	}
	res.Inserted = int(n)
	res.Duplicates = len(good) - res.Inserted - (len(res.Rejected) - before)
	return res, nil
}

// tx runs fn in a transaction whose constraints are all checked at once
// (so a deferred constraint fails the statement that broke it, where
// bisection can see it, rather than the COMMIT).
func (s *Sink) tx(ctx context.Context, pc *pgconn.PgConn, fn func() (int64, error)) (int64, error) {
	if err := pc.Exec(ctx, "BEGIN; SET CONSTRAINTS ALL IMMEDIATE").Close(); err != nil {
		rollback(pc)
		return 0, err
	}
	n, err := fn()
	if err != nil {
		rollback(pc)
		return 0, err
	}
	if err := pc.Exec(ctx, "COMMIT").Close(); err != nil {
		rollback(pc)
		return 0, err
	}
	return n, nil
}

// rollback ends a failed transaction, best effort: a connection left in a
// transaction is discarded by the pool when it is released.
func rollback(pc *pgconn.PgConn) {
	if pc.IsClosed() || pc.TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pc.Exec(ctx, "ROLLBACK").Close()
}

// bisect inserts rows under a savepoint; if the database refuses some of
// them, it rolls back to the savepoint and tries each half, down to single
// rows, which are then the refused ones.
func (s *Sink) bisect(ctx context.Context, pc *pgconn.PgConn, rows []prepared, res *Result) (int64, error) {
	if err := pc.Exec(ctx, "SAVEPOINT pgsink").Close(); err != nil {
		return 0, err
	}
	n, err := s.insert(ctx, pc, rows, res)
	if err == nil {
		return n, pc.Exec(ctx, "RELEASE SAVEPOINT pgsink").Close()
	}
	if !RowLevel(err) {
		return 0, err
	}
	if err := pc.Exec(ctx, "ROLLBACK TO SAVEPOINT pgsink; RELEASE SAVEPOINT pgsink").Close(); err != nil {
		return 0, err
	}
	if len(rows) == 1 {
		res.Rejected = append(res.Rejected, Rejected{Row: rows[0].row, Err: refused(rows[0].row, err)})
		return 0, nil
	}
	mid := len(rows) / 2
	a, err := s.bisect(ctx, pc, rows[:mid], res)
	if err != nil {
		return 0, err
	}
	b, err := s.bisect(ctx, pc, rows[mid:], res)
	return a + b, err
}

func refused(r shaping.BatchRow, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrRefused, r.ID, describe(err))
}

// describe adds a PostgreSQL error's detail (e.g. "Failing row contains
// …") to its message.
func describe(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Detail != "" {
		return fmt.Errorf("%w: %s", err, pe.Detail)
	}
	return err
}

// insert sends rows as multi-row INSERTs of at most maxParams parameters
// each and returns how many rows were inserted (not skipped as conflicts).
func (s *Sink) insert(ctx context.Context, pc *pgconn.PgConn, rows []prepared, res *Result) (int64, error) {
	per := maxParams / (len(s.fields) + 1)
	var total int64
	for len(rows) > 0 {
		chunk := rows[:min(per, len(rows))]
		rows = rows[len(chunk):]
		sql, params := s.statement(chunk)
		res.Statements++
		tag, err := pc.ExecParams(ctx, sql, params, nil, nil, nil).Close()
		if err != nil {
			return 0, err
		}
		total += tag.RowsAffected()
	}
	return total, nil
}

// statement builds INSERT INTO t (id, c…) VALUES ($1, $2, DEFAULT), (…)
// ON CONFLICT …, with every value a text parameter of unspecified type.
func (s *Sink) statement(rows []prepared) (string, [][]byte) {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(rows)*(8+6*len(s.fields)) + len(s.conflict))
	b.WriteString(s.prefix)
	params := make([][]byte, 0, len(rows)*(len(s.fields)+1))
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		params = append(params, []byte(r.row.ID))
		b.WriteString("($")
		b.WriteString(strconv.Itoa(len(params)))
		for _, c := range r.cells {
			if c.def {
				b.WriteString(", DEFAULT")
				continue
			}
			params = append(params, c.v)
			b.WriteString(", $")
			b.WriteString(strconv.Itoa(len(params)))
		}
		b.WriteByte(')')
	}
	b.WriteString(s.conflict)
	return b.String(), params
}
