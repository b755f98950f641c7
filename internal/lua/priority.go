package lua

import (
	"context"
	"fmt"

	"github.com/shaper-io/shaper/internal/keys"
)

var priorityScript = script("priority.lua")

// PlaceResult says what PlacePriority did.
type PlaceResult int64

// The results of PlacePriority (priority.lua's "place" reply).
const (
	PlaceGone     PlaceResult = 0 // no such task, or already taken: left alone
	PlaceMoved    PlaceResult = 1 // moved from pending to its priority list
	PlaceRecorded PlaceResult = 2 // not pending yet: joins its list when forwarded
)

// PlacePriority gives task id of queue q, just enqueued by asynq's Client,
// priority p (1, 2, 4 or 5) on list (keys.Space.TakePriority).
func (s *Store) PlacePriority(ctx context.Context, q keys.AsynqQueue, list, id string, p int) (PlaceResult, error) {
	n, err := priorityScript.Run(ctx, s.rdb, []string{q.Pending(), q.Task(id), list}, "place", id, p).Int64()
	if err != nil {
		return 0, fmt.Errorf("priority: place %s: %w", id, err)
	}
	return PlaceResult(n), nil
}

// CancelPrioritized deletes task id of queue q waiting on priority list
// list, as asynq's Inspector deletes a pending task; false when it is not
// on that list.
func (s *Store) CancelPrioritized(ctx context.Context, q keys.AsynqQueue, list, id string) (bool, error) {
	n, err := priorityScript.Run(ctx, s.rdb, []string{q.Pending(), q.Task(id), list}, "cancel", id).Int64()
	if err != nil {
		return false, fmt.Errorf("priority: cancel %s: %w", id, err)
	}
	return n == 1, nil
}
