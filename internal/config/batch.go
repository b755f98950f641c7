package config

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/sizing"
)

// HandlerPostgres writes tasks (or batches of them) as rows of a
// PostgreSQL table (shaping/pgsink).
const HandlerPostgres HandlerType = "postgres"

// Batch defaults and limits.
const (
	DefaultBatchMaxDelay = 2 * time.Second
	DefaultBatchGrace    = time.Second
)

// OnConflictDoNothing is the default on_conflict of a postgres handler:
// ON CONFLICT (id_column) DO NOTHING.
const OnConflictDoNothing = "do_nothing"

// Batch aggregates a downstream's tasks into batches before they are
// shaped (asynq group aggregation): a batch closes at MaxRows tasks,
// MaxDelay after its first task, or Grace after its last, whichever comes
// first, and costs the sum of its tasks' costs, so the downstream's rate
// reads as rows per second: rate 2000/s with max_rows 500 is four 500-row
// writes a second.
type Batch struct {
	// MaxRows is the most tasks in one batch, 1-100000; required.
	MaxRows int `yaml:"max_rows"`
	// MaxDelay closes a batch this long after its first task. Default 2s.
	MaxDelay Duration `yaml:"max_delay"`
	// Grace closes a batch when no task came for this long; at least 1s
	// (asynq's minimum). Default 1s.
	Grace Duration `yaml:"grace"`
}

// fillBatch sets the defaults of a downstream's batch and postgres
// handler, and sizes its default worker budget in batches rather than
// rows.
func (d *Downstream) fillBatch(p string, set func(string) bool) {
	if d.Handler.Type == HandlerPostgres && !set(p+".handler.on_conflict") {
		d.Handler.OnConflict = OnConflictDoNothing
	}
	b := d.Batch
	if b == nil {
		return
	}
	if !set(p + ".batch.max_delay") {
		b.MaxDelay = Duration(DefaultBatchMaxDelay)
	}
	if !set(p + ".batch.grace") {
		b.Grace = Duration(DefaultBatchGrace)
	}
	if !set(p+".workers") && b.MaxRows > 0 && d.Limit().PerSec() > 0 {
		// A worker holds a whole batch: enough workers for the batches
		// of max_wait plus a second of writing, and one spare.
		batches := d.Limit().PerSec() / float64(b.MaxRows) * (d.MaxWaitDuration() + time.Second).Seconds()
		d.Workers = min(int(math.Ceil(batches))+1, maxDefaultWorkers)
	}
}

func (d *Downstream) validateBatch(p string) *Error {
	b := d.Batch
	if b == nil {
		return nil
	}
	p += ".batch"
	if pr := sizing.CheckBatch(b.MaxRows, time.Duration(b.MaxDelay), time.Duration(b.Grace)); pr != nil {
		return errf(p+"."+pr.Field, "%s", pr.Msg)
	}
	if b.MaxDelay == 0 { // the file's explicit zero; Go's means the default
		return errf(p+".max_delay", "must be positive, got %s", b.MaxDelay)
	}
	if b.Grace < Duration(time.Second) {
		return errf(p+".grace", "must be at least 1s (asynq's minimum), got %s", b.Grace)
	}
	return nil
}

// typeField is a handler field that only one handler type may set.
type typeField struct {
	name string
	set  bool
}

// postgresFields are the fields only a postgres handler may set.
func (h *Handler) postgresFields() []typeField {
	return []typeField{{"dsn_env", h.DSNEnv != ""}, {"table", h.Table != ""}, {"columns", len(h.Columns) > 0},
		{"id_column", h.IDColumn != ""}, {"on_conflict", h.OnConflict != ""}}
}

// httpFields are the fields only an http handler may set.
func (h *Handler) httpFields() []typeField {
	return []typeField{{"url", h.URL != ""}, {"method", h.Method != ""}, {"headers", len(h.Headers) > 0}}
}

// onlyFor refuses the first of fields that is set, on a handler that is
// not of type want.
func (h *Handler) onlyFor(p string, want HandlerType, fields []typeField) *Error {
	for _, f := range fields {
		if f.set {
			return errf(p+"."+f.name, "only allowed for type %s, got type %s", want, q(string(h.Type)))
		}
	}
	return nil
}

// validatePostgres checks a postgres handler, and that no other type sets
// its fields. Whether the table and columns exist is checked against the
// database when shaper starts (pgsink.Sink.Check).
func (h *Handler) validatePostgres(p string) *Error {
	if h.Type != HandlerPostgres {
		return h.onlyFor(p, HandlerPostgres, h.postgresFields())
	}
	if err := h.onlyFor(p, HandlerHTTP, h.httpFields()); err != nil {
		return err
	}
	switch {
	case h.DSNEnv == "":
		return errf(p+".dsn_env", "required for a postgres handler (the environment variable holding the DSN; the DSN never goes in the file)")
	case !reEnv.MatchString(h.DSNEnv):
		return errf(p+".dsn_env", "invalid environment variable name %s", q(h.DSNEnv))
	}
	if e := checkTable(p+".table", h.Table); e != nil {
		return e
	}
	if e := checkColumn(p+".id_column", h.IDColumn); e != nil {
		return e
	}
	if len(h.Columns) == 0 {
		return errf(p+".columns", "required: map payload fields to columns, e.g. {user: user_id, amount: amount}")
	}
	fields := make([]string, 0, len(h.Columns))
	for f := range h.Columns {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	targets := map[string]string{h.IDColumn: "id_column"}
	for _, f := range fields {
		fp := p + ".columns." + f
		if f == "" {
			return errf(p+".columns", "a payload field name is empty")
		}
		c := h.Columns[f]
		if e := checkColumn(fp, c); e != nil {
			return e
		}
		if other, dup := targets[c]; dup {
			return errf(fp, "column %s is already the target of %s", q(c), other)
		}
		targets[c] = "columns." + f
	}
	oc := strings.TrimSpace(h.OnConflict)
	if oc != OnConflictDoNothing && (len(oc) <= 11 || !strings.EqualFold(oc[:11], "ON CONFLICT") || strings.Contains(oc, ";")) {
		return errf(p+".on_conflict", "invalid value %s (want %s, or a clause starting with ON CONFLICT, without ;)", q(h.OnConflict), OnConflictDoNothing)
	}
	return nil
}

func checkTable(path, t string) *Error {
	if t == "" {
		return errf(path, "required (name or schema.name)")
	}
	parts := strings.Split(t, ".")
	if len(parts) > 2 {
		return errf(path, "invalid table %s (want name or schema.name)", q(t))
	}
	for _, part := range parts {
		if part == "" || len(part) > 63 || strings.ContainsRune(part, 0) {
			return errf(path, "invalid table %s (want name or schema.name, each 1-63 bytes)", q(t))
		}
	}
	return nil
}

func checkColumn(path, c string) *Error {
	switch {
	case c == "":
		return errf(path, "required (a column name)")
	case len(c) > 63 || strings.ContainsRune(c, 0):
		return errf(path, "invalid column %s (1-63 bytes, no NUL)", q(c))
	}
	return nil
}
