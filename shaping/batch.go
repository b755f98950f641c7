package shaping

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/envelope"
)

// Batch aggregates a downstream's tasks into batches (asynq's group
// aggregation) before they are shaped: a batch costs the sum of its tasks'
// costs, so the downstream's rate reads as rows per second, and one write
// of many rows replaces many writes of one.
type Batch struct {
	// MaxRows closes a batch at this many tasks; required.
	MaxRows int
	// MaxDelay closes a batch this long after its first task; zero means 2s.
	MaxDelay time.Duration
	// Grace closes a batch when no task arrived for this long; zero (and
	// anything under asynq's minimum of 1s) means 1s.
	Grace time.Duration
}

// BatchGroups is how many aggregation groups a producer should spread a
// batching downstream's tasks over: asynq closes at most one batch per group
// per check (every Grace, at most 1s), so this allows twice the rate.
func BatchGroups(rate float64, maxRows int) int {
	if maxRows < 1 {
		return 1
	}
	g := int(2*rate/float64(maxRows)) + 1
	return min(max(g, 1), 64)
}

// BatchType is the task type of an aggregated batch.
const BatchType = "shaper:batch"

// BatchRow is one task inside a batch.
type BatchRow struct {
	// ID is the producer's task ID (stable across retries: use it as an
	// idempotency key, e.g. a unique column).
	ID string `json:"id"`
	// Type is the task's type as enqueued (queue.Task.Type).
	Type string `json:"type"`
	// Key is the task's admission key; "" when it had none.
	Key string `json:"key,omitempty"`
	// Cost is the units the task carried (at least 1).
	Cost int64 `json:"cost"`
	// Payload is the task's payload, as enqueued (JSON or raw bytes).
	Payload json.RawMessage `json:"payload"`
}

// batchPayload is the wire form of a batch.
type batchPayload struct {
	Rows []BatchRow `json:"rows"`
}

// DecodeBatch reads a batch task's payload.
func DecodeBatch(payload []byte) ([]BatchRow, error) {
	var b batchPayload
	if err := json.Unmarshal(payload, &b); err != nil {
		return nil, fmt.Errorf("shaping: batch payload: %w", err)
	}
	if len(b.Rows) == 0 {
		return nil, errors.New("shaping: batch payload has no rows")
	}
	return b.Rows, nil
}

// EncodeBatch builds a batch payload (for splitting a batch and in tests).
func EncodeBatch(rows []BatchRow) ([]byte, error) { return json.Marshal(batchPayload{Rows: rows}) }

// HeaderRowID carries a batched task's ID into its batch (see BatchRow.ID).
const HeaderRowID = envelope.HeaderRowID

// aggregate is the asynq GroupAggregator of batching downstreams.
func aggregate(group string, tasks []*asynq.Task) *asynq.Task {
	rows := make([]BatchRow, 0, len(tasks))
	cost, maxRetry := int64(0), 0
	for _, t := range tasks {
		meta, err := envelope.Decode(t.Headers())
		if err != nil {
			meta = envelope.Meta{Cost: 1, MaxRetry: -1}
		}
		p := json.RawMessage(t.Payload())
		if !json.Valid(p) {
			// a non-JSON payload travels as a JSON string
			p, _ = json.Marshal(string(t.Payload()))
		}
		rows = append(rows, BatchRow{ID: t.Headers()[HeaderRowID], Type: t.Type(), Key: meta.Key, Cost: meta.Cost, Payload: p})
		cost += meta.Cost
		maxRetry = max(maxRetry, meta.MaxRetry)
	}
	payload, _ := EncodeBatch(rows)
	h := envelope.Meta{Cost: cost, MaxRetry: maxRetry}.Headers()
	h["shaper-batch-rows"] = strconv.Itoa(len(rows))
	return asynq.NewTaskWithHeaders(BatchType, payload, h, asynq.MaxRetry(maxRetry+envelope.CrashAllowance))
}
