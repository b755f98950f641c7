package lua

import (
	"context"
	"fmt"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
)

var collapseScript = script("collapse.lua")

// CollapseClaim is what a claim found: Claimed, or the waiting task that
// holds the key (Holder, with its stored message).
type CollapseClaim struct {
	Claimed bool
	Holder  string
	Msg     []byte
}

// ClaimCollapse claims collapse key index (keys.Space.Collapse) of queue q
// for task id for window, unless a task that holds it still waits.
func (s *Store) ClaimCollapse(ctx context.Context, q keys.AsynqQueue, index, id string, window time.Duration) (CollapseClaim, error) {
	v, err := collapseScript.Run(ctx, s.rdb, []string{index}, "claim", id, max(window.Milliseconds(), 1), q.TaskPrefix()).Slice()
	if err != nil {
		return CollapseClaim{}, fmt.Errorf("collapse: claim: %w", err)
	}
	if len(v) == 1 {
		return CollapseClaim{Claimed: true}, nil
	}
	holder, _ := v[1].(string)
	msg, _ := v[2].(string)
	return CollapseClaim{Holder: holder, Msg: []byte(msg)}, nil
}

// ReplaceCollapsed gives waiting task id, which holds collapse key index,
// message msg if its message is still old; false when it was taken
// meanwhile (nothing written).
func (s *Store) ReplaceCollapsed(ctx context.Context, q keys.AsynqQueue, index, id string, old, msg []byte) (bool, error) {
	n, err := collapseScript.Run(ctx, s.rdb, []string{index}, "replace", id, old, msg, q.TaskPrefix()).Int64()
	if err != nil {
		return false, fmt.Errorf("collapse: replace: %w", err)
	}
	return n == 1, nil
}

// ReleaseCollapse frees collapse key index if task id still holds it.
func (s *Store) ReleaseCollapse(ctx context.Context, index, id string) error {
	if err := collapseScript.Run(ctx, s.rdb, []string{index}, "release", id).Err(); err != nil {
		return fmt.Errorf("collapse: release: %w", err)
	}
	return nil
}
