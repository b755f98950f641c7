package shaping

import (
	"context"
	"time"

	"github.com/shaper-io/shaper/internal/bucket"
)

// ReserveAt is Reserve at an explicit time instead of the Redis clock, for
// step tests and for replaying recorded arrivals offline (shaper replay).
// Production reserves on the Redis clock, so that every host agrees.
func (s *Buckets) ReserveAt(ctx context.Context, now time.Time, b Bucket, cost int64, maxWait time.Duration) (Reservation, error) {
	return s.call(ctx, b, cost, maxWait, bucket.Reserve, now.UnixMicro(), 1, Claim{})
}

// SetFairNow gives q's scripts an explicit clock (fair.lua's now).
func SetFairNow(q *FairQueue, now func() time.Time) { q.SetNow(now) }

// AnswerCost is the http handler's reading of an answer's cost.
var AnswerCost = answerCost
