package shaping

import (
	"errors"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/envelope"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping/take"
)

// A task given back unsent goes first in fair order on a fair downstream
// (take.Hold with Again: its key, cost and weight), and to the head of
// its queue otherwise, when it has no key, or when it is of another
// priority than fair order's (3): back to its priority list.
func TestBackInLine(t *testing.T) {
	now := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	headers := envelope.Meta{Key: "acme", Cost: 3}.Headers()
	fair, _ := testRunner(now, limiters.PerSecond(10), Downstream{Name: "api", Fairness: &Fairness{Weights: map[string]float64{"acme": 2}}})
	var h *take.Hold
	if err := fair.backInLine(&take.Task{Headers: headers, Priority: 3}); !errors.As(err, &h) || !h.Again || h.Key != "acme" || h.Cost != 3 || h.Weight != 2 {
		t.Errorf("fair downstream: %v (%+v), want a Hold again of acme, cost 3, weight 2", err, h)
	}
	if err := fair.backInLine(&take.Task{Headers: envelope.Meta{Cost: 1}.Headers(), Priority: 3}); !errors.Is(err, take.ErrRequeue) {
		t.Errorf("fair downstream, no key: %v, want ErrRequeue", err)
	}
	if err := fair.backInLine(&take.Task{Headers: headers, Priority: 1}); !errors.Is(err, take.ErrRequeue) {
		t.Errorf("fair downstream, a task of priority 1: %v, want ErrRequeue (back to its list)", err)
	}
	fifo, _ := testRunner(now, limiters.PerSecond(10), Downstream{Name: "api"})
	if err := fifo.backInLine(&take.Task{Headers: headers}); !errors.Is(err, take.ErrRequeue) {
		t.Errorf("first-in first-out downstream: %v, want ErrRequeue", err)
	}
}
