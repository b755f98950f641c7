package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/shaping"
	"github.com/shaper-io/shaper/shaping/pgsink"
)

// checkTimeout bounds the start-up check of a postgres handler's table.
const checkTimeout = 5 * time.Second

// postgresSinks builds the postgres handlers of a config and closes their
// connection pools when Run ends (after the dispatcher has shut down).
type postgresSinks struct {
	rdb    redis.UniversalClient
	prefix string
	log    *slog.Logger

	mu    sync.Mutex
	pools []*pgxpool.Pool
}

func newPostgresSinks(rdb redis.UniversalClient, prefix string, log *slog.Logger) *postgresSinks {
	return &postgresSinks{rdb: rdb, prefix: prefix, log: log}
}

// handler opens the pool of downstream name's postgres handler h and
// checks its table. A table that does not fit the config (a missing table
// or column, an ID column without a unique index) is an error naming the
// field; a database that does not answer yet is only logged: its batches
// wait (throttled) until it does.
func (p *postgresSinks) handler(ctx context.Context, name string, h plan.Postgres) (shaping.HandlerFunc, error) {
	dsn, err := h.DSN.Read()
	if e, ok := errors.AsType[*config.Error](err); ok {
		return nil, fmt.Errorf("%s: %s", e.Path, e.Msg)
	} else if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx redacts the password in its message.
		return nil, fmt.Errorf("dsn_env: %s does not hold a valid PostgreSQL DSN: %v", h.DSN.Env, err)
	}
	if _, set := pcfg.ConnConfig.RuntimeParams["application_name"]; !set {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "shaper/" + name
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("dsn_env: %v", err)
	}
	sink, err := pgsink.New(pool, pgsink.Config{Table: h.Table, Columns: h.Columns, IDColumn: h.IDColumn,
		OnConflict: h.OnConflict, Timeout: h.Timeout, Isolate: pgsink.Requeue(p.rdb, p.prefix),
		Logger: p.log.With("downstream", name)})
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		err = sink.Check(cctx)
		cancel()
	}
	if fe, ok := errors.AsType[*pgsink.FieldError](err); ok {
		pool.Close()
		return nil, fmt.Errorf("%s: %s", fe.Field, fe.Msg)
	}
	if err != nil {
		p.log.Warn("postgres handler: cannot check the table yet; batches wait until the database answers",
			"downstream", name, "table", h.Table, "err", err)
	}
	p.mu.Lock()
	p.pools = append(p.pools, pool)
	p.mu.Unlock()
	return sink.Handle, nil
}

// Close closes every pool.
func (p *postgresSinks) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pool := range p.pools {
		pool.Close()
	}
	p.pools = nil
}
