package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/envelope"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/shaping"
)

// Headers of a requeued row.
const (
	// HeaderRefusedBy is the error the database gave the row in its batch.
	HeaderRefusedBy = "shaper-refused-by"
	// HeaderFromBatch is the ID of the batch the row was isolated from.
	HeaderFromBatch = "shaper-from-batch"
)

// defaultType is the task type of a row whose producer gave none (the
// queue package's DefaultType; pgsink writes any type).
const defaultType = "shaper:task"

// defaultMaxRetry is the retry budget of a row whose batch carries none.
const defaultMaxRetry = 25

// Requeue returns an IsolateFunc that puts each refused row back into its
// downstream's queue as a task of its own (not aggregated: it has no
// group), under the row's own task ID and with its key, cost and the
// batch's retry budget. The sink then writes it alone: refused again, it
// is archived at once with the database's error, where asynq's tools, the
// status page and the archived-backlog metric show it; a row that was
// refused only because of its neighbours (a conflict inside the batch)
// commits. A row already requeued by an earlier attempt of the same batch
// (its task ID exists) counts as done, so a retried batch requeues nothing
// twice.
//
// prefix is the dispatcher's key prefix ("" means "shaper").
func Requeue(rdb redis.UniversalClient, prefix string) IsolateFunc {
	client := asynq.NewClientFromRedisClient(rdb)
	space := keys.New(prefix)
	return func(ctx context.Context, batch *shaping.Task, rejected []Rejected) error {
		meta, err := envelope.Decode(batch.Headers)
		if err != nil || meta.MaxRetry < 0 {
			meta.MaxRetry = defaultMaxRetry
		}
		for _, r := range rejected {
			h := envelope.Meta{Cost: max(r.Row.Cost, 1), Key: r.Row.Key, MaxRetry: meta.MaxRetry}.Headers()
			h[HeaderRefusedBy] = oneLine(r.Err.Error(), 1024)
			h[HeaderFromBatch] = batch.ID
			typ := r.Row.Type
			if typ == "" || typ == shaping.BatchType {
				typ = defaultType
			}
			_, err := client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(typ, r.Row.Payload, h),
				asynq.Queue(space.Queue(batch.Downstream)), asynq.TaskID(r.Row.ID),
				asynq.MaxRetry(meta.MaxRetry+envelope.CrashAllowance))
			if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
				return fmt.Errorf("pgsink: requeue row %s: %w", r.Row.ID, err)
			}
		}
		return nil
	}
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
